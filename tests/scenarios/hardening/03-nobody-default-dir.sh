#!/bin/bash
# As nobody: default lock dir with /run/lock 1777, 0755 (root-owned), read-only; odd TMPDIR/sys_temp_dir/cwd.
# Promise (stub cronlock.lock_dir): /run/lock/cronlock-<euid> when /run/lock is a directory this user may create
# entries in; else /tmp/cronlock-<euid>; the same whatever TMPDIR, sys_temp_dir or cwd say; ext and polyfill agree.
TMPBASE=/var/tmp . "$(dirname "$0")/lib.sh"
cat > $T/where.php <<'PHP'
<?php
if (($argv[1] ?? '') === 'poly') require getenv('CRONLOCK_SCENARIO_PKG') . '/polyfill/bootstrap.php';
try {
  cron_guard(function (CronLock\Guard $g) { echo $g->lock()->path(), "\n"; }, 'w', ['log' => 'none']);
} catch (Throwable $e) { echo get_class($e), ': ', $e->getMessage(), "\n"; }
PHP
chmod 644 $T/where.php
cat > $T/inner.sh <<EOF2
set -u
T=$T; EXT="$EXT"
mount -t tmpfs tmpfs /run; mount -t tmpfs tmpfs /tmp; chmod 1777 /tmp
check() { # label expected
  for impl in ext poly; do
   for envs in "" "TMPDIR=/nonexistent" "TMPDIR=relative/dir" "TMPDIR=/var/tmp"; do
    for cwd in / /proc /nonexistent-dir-ok; do
      out=\$(cd \$cwd 2>/dev/null || cd /; env \$envs setpriv --reuid=65534 --regid=65534 --clear-groups php \$([ \$impl = ext ] && echo "\$EXT") -d sys_temp_dir=/var/tmp \$T/where.php \$impl 2>&1)
      if [ "\$out" != "\$2" ]; then echo "FAIL: \$1 [\$impl \$envs cwd=\$cwd]: got '\$out' expected '\$2'"; BAD=1; fi
    done
   done
  done
  echo "checked: \$1 -> \$2"
}
BAD=0
mkdir -m 1777 /run/lock
check "run-lock-1777" /run/lock/cronlock-65534/w.lock
umount /run; mount -t tmpfs tmpfs /run; mkdir -m 755 /run/lock
check "run-lock-0755" /tmp/cronlock-65534/w.lock
umount /tmp; mount -t tmpfs tmpfs /tmp; chmod 1777 /tmp
umount /run; mount -t tmpfs tmpfs /run; mkdir -m 1777 /run/lock; mount -o remount,ro /run 2>/dev/null; mount -t tmpfs -o ro tmpfs /run/lock
check "run-lock-readonly" /tmp/cronlock-65534/w.lock
exit \$BAD
EOF2
unshare -m --propagation private bash $T/inner.sh || FAIL=1
finish

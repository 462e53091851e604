#!/bin/bash
# Another user pre-creates nobody's default lock dir (as a dir of theirs, a symlink, 0777 dir, a file, a FIFO):
# promise: LockException (not a silent skip, not using it) naming the cause; ext and polyfill alike.
TMPBASE=/var/tmp . "$(dirname "$0")/lib.sh"
cat > $T/where.php <<'PHP'
<?php
if (($argv[1] ?? '') === 'poly') require getenv('CRONLOCK_SCENARIO_PKG') . '/polyfill/bootstrap.php';
try {
  $r = cron_guard(function (CronLock\Guard $g) { echo "RAN ", $g->lock()->path(), "\n"; }, 'w', ['log' => 'stderr']);
  if ($r === null) echo "SKIPPED(null)\n";
} catch (Throwable $e) { echo get_class($e), ': ', $e->getMessage(), "\n"; }
PHP
chmod 644 $T/where.php
cat > $T/inner.sh <<EOF2
set -u
T=$T; EXT="$EXT"; BAD=0
mount -t tmpfs tmpfs /run; mkdir -m 1777 /run/lock; mount -t tmpfs tmpfs /tmp; chmod 1777 /tmp
D=/run/lock/cronlock-65534
try() { # label
  for impl in ext poly; do
    out=\$(setpriv --reuid=65534 --regid=65534 --clear-groups php \$([ \$impl = ext ] && echo "\$EXT") \$T/where.php \$impl 2>&1)
    echo "[\$1 \$impl] \$out"
    case "\$out" in CronLock\\\\LockException:*) ;; *) echo "FAIL: \$1 \$impl: not a LockException"; BAD=1;; esac
  done
}
mkdir -m 700 \$D; chown 1234:1234 \$D; try "dir-of-uid-1234"; rm -rf \$D
mkdir -m 777 \$D; chown 65534 \$D; try "own-dir-0777"; rm -rf \$D
mkdir -m 700 /tmp/elsewhere; chown 65534 /tmp/elsewhere; ln -s /tmp/elsewhere \$D; try "symlink-to-own-dir"; rm -f \$D
touch \$D; chown 65534 \$D; try "regular-file"; rm -f \$D
mkfifo \$D; chown 65534 \$D; try "fifo"; rm -f \$D
exit \$BAD
EOF2
unshare -m --propagation private timeout 60 bash $T/inner.sh || FAIL=1
finish

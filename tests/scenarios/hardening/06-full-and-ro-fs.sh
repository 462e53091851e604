#!/bin/bash
# Lock dir on a full tmpfs (no blocks; no inodes) and on a read-only fs.
# Promise: holder-line write failure keeps the lock with E_WARNING "cronlock: lock file <path> is held, but its holder
# line could not be written: <OS error>"; a lock that cannot be used throws LockException; a failure is never "busy".
. "$(dirname "$0")/lib.sh"
cat > $T/job.php <<'PHP'
<?php
if ($argv[1] === 'poly') require getenv('CRONLOCK_SCENARIO_PKG') . '/polyfill/bootstrap.php';
try {
  $r = cron_guard(function () { echo "RAN\n"; if (isset($GLOBALS['argv'][2])) sleep((int)$GLOBALS['argv'][2]); return 1; }, 'full', ['log' => 'stderr']);
  if ($r === null) echo "SKIPPED\n";
} catch (Throwable $e) { echo get_class($e), ': ', $e->getMessage(), "\n"; }
PHP
cat > $T/inner.sh <<EOF2
T=$T; EXT="$EXT"; BAD=0
run() { if [ \$1 = ext ]; then php \$EXT \$T/job.php "\$@"; else php \$T/job.php "\$@"; fi; }
mkdir -p \$T/m
for impl in ext poly; do
  # 1. no free blocks: lock file can be created (inode) but 128-byte holder line cannot be written
  mount -t tmpfs -o size=4k,nr_inodes=100 tmpfs \$T/m; mkdir -m 700 \$T/m/l
  dd if=/dev/zero of=\$T/m/fill bs=4k count=10 2>/dev/null
  out=\$(CRONLOCK_LOCK_DIR=\$T/m/l run \$impl 2>&1); echo "[\$impl no-space] \$out"
  echo "\$out" | grep -q RAN || { echo "FAIL: \$impl no-space: job did not run"; BAD=1; }
  echo "\$out" | grep -q "holder line could not be written" || { echo "FAIL: \$impl no-space: no warning"; BAD=1; }
  # exclusion still holds on the full fs
  (CRONLOCK_LOCK_DIR=\$T/m/l run \$impl 3 >\$T/hold.out 2>&1 &) ; sleep 1.5
  out=\$(CRONLOCK_LOCK_DIR=\$T/m/l run \$impl 2>&1); echo "[\$impl no-space second run] \$out"
  echo "\$out" | grep -q SKIPPED || { echo "FAIL: \$impl no-space: second run not skipped"; BAD=1; }
  sleep 2; umount \$T/m
  # 2. no free inodes: lock file cannot be created
  mount -t tmpfs -o size=1m,nr_inodes=3 tmpfs \$T/m; mkdir -m 700 \$T/m/l; touch \$T/m/a \$T/m/b 2>/dev/null
  out=\$(CRONLOCK_LOCK_DIR=\$T/m/l run \$impl 2>&1); echo "[\$impl no-inodes] \$out"
  echo "\$out" | grep -q '^CronLock.LockException: ' || { echo "FAIL: \$impl no-inodes: expected LockException"; BAD=1; }
  umount \$T/m
  # 3. read-only fs, lock file absent
  mount -t tmpfs tmpfs \$T/m; mkdir -m 700 \$T/m/l; mount -o remount,ro \$T/m
  out=\$(CRONLOCK_LOCK_DIR=\$T/m/l run \$impl 2>&1); echo "[\$impl ro-absent] \$out"
  echo "\$out" | grep -q '^CronLock.LockException: ' || { echo "FAIL: \$impl ro-absent: expected LockException"; BAD=1; }
  umount \$T/m
done
exit \$BAD
EOF2
unshare -m --propagation private timeout 120 bash $T/inner.sh || FAIL=1
finish

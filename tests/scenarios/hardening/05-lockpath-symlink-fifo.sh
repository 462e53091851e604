#!/bin/bash
# Lock paths that are symlinks, FIFOs, directories, /dev/null, another user's file in a world-writable dir.
# Promise: never through a symlink; must be a regular file; another user's file in a world-writable dir refused;
# each a LockException (never a hang, never "busy"); ext and polyfill alike.
. "$(dirname "$0")/lib.sh"
mkdir -m 700 $T/d; mkdir -m 1777 $T/ww; chmod 711 $T
echo data > $T/d/target; ln -s $T/d/target $T/d/link; ln -s $T/d/nonexist $T/d/dangling
mkfifo $T/d/fifo; mkdir $T/d/dir
touch $T/ww/other.lock; chown 1234 $T/ww/other.lock
ln -s /etc/passwd $T/d/passwd.lock
cat > $T/t.php <<'PHP'
<?php
if ($argv[1] === 'poly') require getenv('CRONLOCK_SCENARIO_PKG') . '/polyfill/bootstrap.php';
$p = $argv[2];
try {
  $l = new CronLock\File($p);
  $r = $l->acquire(0);
  echo $r ? "ACQUIRED" : "BUSY", "\n";
} catch (Throwable $e) { echo get_class($e), ': ', $e->getMessage(), "\n"; }
PHP
for impl in ext poly; do
  for p in $T/d/link $T/d/dangling $T/d/fifo $T/d/dir /dev/null $T/ww/other.lock $T/d/passwd.lock; do
    if [ $impl = ext ]; then out=$(timeout 10 $PHPX $T/t.php ext $p 2>&1); else out=$(timeout 10 php $T/t.php poly $p 2>&1); fi
    rc=$?
    echo "[$impl $p] rc=$rc $out"
    case "$out" in "CronLock\\LockException: "*) ;; *) fail "$impl $p: expected LockException";; esac
  done
done
[ "$(cat $T/d/target)" = data ] || fail "symlink target modified: $(cat $T/d/target | head -c 200)"
[ -e $T/d/nonexist ] && fail "dangling symlink target created"
# named lock in an explicit lock_dir where the name is a pre-planted symlink
mkdir -m 755 $T/ld; ln -s $T/d/target $T/ld/job.lock
out=$(CRONLOCK_LOCK_DIR=$T/ld timeout 10 $PHPX -r 'try { var_dump(cron_guard(fn() => "ran", "job", ["log"=>"none"])); } catch (Throwable $e) { echo get_class($e),": ",$e->getMessage(),"\n"; }' 2>&1)
echo "[named symlink] $out"
case "$out" in "CronLock\\LockException: "*) ;; *) fail "named lock through a symlink: $out";; esac
finish

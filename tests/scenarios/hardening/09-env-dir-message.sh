#!/bin/bash
# Stub: a bad lock dir "throws LockException naming the setting or the directory". When the bad value came from
# CRONLOCK_LOCK_DIR (which counts ahead of cronlock.lock_dir), the message should name CRONLOCK_LOCK_DIR.
. "$(dirname "$0")/lib.sh"
for impl in ext poly; do
  P="php"; [ $impl = ext ] && P="$PHPX"
  out=$(cd $T && CRONLOCK_LOCK_DIR=locks $P -r 'if ($argv[1]==="poly") require getenv("CRONLOCK_SCENARIO_PKG") . "/polyfill/bootstrap.php"; try { cron_guard(fn()=>1, "x"); } catch (Throwable $e) { echo get_class($e), ": ", $e->getMessage(); }' $impl 2>&1)
  echo "[$impl CRONLOCK_LOCK_DIR=locks] $out"
  echo "$out" | grep -q CRONLOCK_LOCK_DIR || fail "$impl: message names cronlock.lock_dir, but the value came from CRONLOCK_LOCK_DIR"
done
finish

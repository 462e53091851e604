#!/bin/bash
# `nohup php job.php` (SIGHUP inherited as SIG_IGN), holder gets SIGHUP (terminal closed / logout).
# Stub (Redis): "With a handler of the script's own (pcntl_signal(), or SIG_IGN) ... nothing changes: the handler
# runs and decides; the key stays held"; without cronlock a nohup'd PHP ignores SIGHUP. Expect: job survives and finishes,
# except cronlock/polyfill with Redis, which cannot see an inherited SIG_IGN (docs/polyfill.md): the key is released
# and the process dies of the signal (129), never running on unlocked.
. "$(dirname "$0")/lib.sh"
start_redis
mkdir -m 700 $T/l; export CRONLOCK_LOCK_DIR=$T/l
cat > $T/nh.php <<'PHP'
<?php
if ($argv[1] === 'poly') require getenv('CRONLOCK_SCENARIO_PKG') . '/polyfill/bootstrap.php';
$lock = $argv[1] === 'none' ? null : ($argv[2] === 'redis' ? new CronLock\Redis($argv[3], 'nh') : 'nh');
$job = function () { echo "RAN\n"; for ($i = 0; $i < 30; $i++) usleep(100000); echo "FINISHED\n"; return 1; };
if ($argv[1] === 'none') $job(); else cron_guard($job, $lock, ['log' => 'stderr']);
PHP
for impl in none ext poly; do for be in file redis; do
  [ $impl = none ] && [ $be = redis ] && continue
  P=php; [ $impl = ext ] && P="$PHPX"
  nohup $P $T/nh.php $impl $be $REDIS_DSN > $T/nh.out 2>&1 & p=$!
  sleep 1; kill -HUP $p; wait $p; rc=$?
  echo "[$impl $be] rc=$rc output: $(tr '\n' ' ' < $T/nh.out)"
  if [ $impl = poly ] && [ $be = redis ]; then
    # docs/polyfill.md: PHP code cannot see an inherited SIG_IGN; the polyfill releases the
    # key and dies of the signal rather than let the job run on without its lock
    # (where PHP does see it, the job survives as with the extension: both are safe; what
    # must never happen is a job running on after its key was released)
    if [ $rc = 129 ]; then
      ! grep -q FINISHED $T/nh.out || fail "poly redis: 129 but the job finished"
    else
      grep -q FINISHED $T/nh.out || fail "poly redis: neither the documented 129 nor a finished job (rc=$rc)"
    fi
    [ "$(rcli exists nh)" = 0 ] || fail "poly redis: the key was left behind"
    continue
  fi
  grep -q FINISHED $T/nh.out || fail "$impl $be: nohup'd job killed by SIGHUP (rc=$rc)"
done; done
finish

#!/bin/bash
# Job ends by exception (propagates unchanged), exit(3), E_USER_ERROR, memory_limit, max_execution_time, undefined
# function (Error): lock released, and shutdown functions already see it free. File and Redis, ext and polyfill.
. "$(dirname "$0")/lib.sh"
start_redis
mkdir -m 700 $T/l; export CRONLOCK_LOCK_DIR=$T/l
cat > $T/j.php <<'PHP'
<?php
if ($argv[1] === 'poly') require getenv('CRONLOCK_SCENARIO_PKG') . '/polyfill/bootstrap.php';
[$_, $impl, $be, $how, $dsn] = $argv;
$lf = getenv('CRONLOCK_LOCK_DIR') . '/bad.lock';
register_shutdown_function(function () use ($be, $lf, $dsn) {
    if ($be === 'file') { exec('flock -n ' . escapeshellarg($lf) . ' true', $_, $rc); echo "\nSHUTDOWN: flock -n rc=$rc\n"; }
    else { exec('redis-cli -s ' . escapeshellarg(substr($dsn, 7)) . ' exists cron:bad', $o); echo "\nSHUTDOWN: key exists=" . $o[0] . "\n"; }
});
$lock = $be === 'file' ? 'bad' : new CronLock\Redis($dsn, 'cron:bad');
class MyEx extends Exception {}
cron_guard(function () use ($how) {
    switch ($how) {
        case 'exception': throw new MyEx('boom', 42);
        case 'exit': exit(3);
        case 'user_error': trigger_error('fatal!', E_USER_ERROR);
        case 'memory': ini_set('memory_limit', '8M'); $a = []; while (true) $a[] = str_repeat('x', 100000);
        case 'time': set_time_limit(1); while (true) {}
        case 'undefined': nosuch_function();
    }
}, $lock, ['log' => 'none']);
PHP
for impl in ext poly; do
  P="php"; [ $impl = ext ] && P="$PHPX"
  for be in file redis; do
    for how in exception exit user_error memory time undefined; do
      out=$($P $T/j.php $impl $be $how $REDIS_DSN 2>&1); rc=$?
      sd=$(echo "$out" | grep SHUTDOWN)
      echo "[$impl $be $how] rc=$rc $sd | $(echo "$out" | grep -m1 -E 'Fatal|Uncaught' | cut -c1-120)"
      case $be in file) [ "$sd" = "SHUTDOWN: flock -n rc=0" ] || fail "$impl $be $how: lock not free in shutdown function";;
                  redis) [ "$sd" = "SHUTDOWN: key exists=0" ] || fail "$impl $be $how: key still set in shutdown function";; esac
      [ $how = exit ] && [ $rc != 3 ] && fail "$impl $be exit(3): rc=$rc"
      [ $how = exception ] && ! echo "$out" | grep -q "Uncaught MyEx: boom" && fail "$impl $be: exception not propagated unchanged"
      rcli del cron:bad > /dev/null
    done
  done
done
finish

#!/bin/bash
# Lost holds are reported: File lock file removed mid-run; Redis key deleted mid-run; Redis holder SIGSTOPped
# past its 30 s lease. Promise: "cron_guard: lock <what> was lost during the run (at HH:MM:SSZ: <why>); another run
# may have started" on error_log (stderr in the CLI), Guard::renew() false / Guard::lost() non-null.
. "$(dirname "$0")/lib.sh"
start_redis
mkdir -m 700 $T/l; export CRONLOCK_LOCK_DIR=$T/l
cat > $T/j.php <<'PHP'
<?php
if ($argv[1] === 'poly') require getenv('CRONLOCK_SCENARIO_PKG') . '/polyfill/bootstrap.php';
[$_, $impl, $be, $dsn, $flag, $secs] = $argv;
$lock = $be === 'file' ? 'lost' : new CronLock\Redis($dsn, 'cron:lost');
cron_guard(function (CronLock\Guard $g) use ($flag, $secs) {
    touch($flag);
    $end = microtime(true) + $secs;
    while (microtime(true) < $end) usleep(100000);
    echo "lost() before renew: ", var_export($g->lost(), true), "\n";
    echo "renew(): ", var_export($g->renew(), true), "\n";
    echo "lost(): ", var_export($g->lost(), true), "\n";
}, $lock, ['log' => 'stderr']);
PHP
for impl in ext poly; do
  P="php"; [ $impl = ext ] && P="$PHPX"
  for case in file-removed redis-deleted redis-stopped; do
    be=${case%%-*}; rm -f $T/flag
    secs=2; [ $case = redis-stopped ] && secs=1
    $P $T/j.php $impl $be $REDIS_DSN $T/flag $secs > $T/o 2>&1 & bg=$!
    for i in $(seq 1 50); do [ -e $T/flag ] && break; sleep 0.1; done
    case $case in
      file-removed) rm $T/l/lost.lock;;
      redis-deleted) rcli del cron:lost >/dev/null;;
      redis-stopped) kill -STOP $bg; sleep 32; echo "  key after 32 s stop: $(rcli exists cron:lost)"; kill -CONT $bg;;
    esac
    wait $bg
    echo "--- [$impl $case]"; cat $T/o
    grep -qE "renew\(\): false|^false$" $T/o || fail "$impl $case: Guard::renew() not false"
    grep -q "was lost.*another run may" $T/o || fail "$impl $case: no lost line on stderr"
  done
done
finish

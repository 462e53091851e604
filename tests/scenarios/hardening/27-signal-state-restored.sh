#!/bin/bash
# After a Redis cron_guard() returns, the script's signal state must be as before: SIGTERM kills it (143) while it
# sleeps afterwards, pcntl_async_signals() is unchanged, a handler installed before cron_guard() is kept and has
# priority during the hold ("installed before or during the hold ... the handler runs and decides; the key stays held").
. "$(dirname "$0")/lib.sh"
start_redis
cat > $T/j.php <<'PHP'
<?php
if ($argv[1] === 'poly') require getenv('CRONLOCK_SCENARIO_PKG') . '/polyfill/bootstrap.php';
[$_, $impl, $dsn, $mode, $flag] = $argv;
if ($mode === 'before') { pcntl_async_signals(true); pcntl_signal(SIGTERM, function () { echo "HANDLER\n"; }); }
$async = pcntl_async_signals();
cron_guard(function () use ($mode, $flag) {
    if ($mode === 'before') { touch($flag); for ($i = 0; $i < 20; $i++) usleep(100000); }
}, new CronLock\Redis($dsn, 'cron:st'), ['log' => 'stderr']);
echo "async before=", var_export($async, true), " after=", var_export(pcntl_async_signals(), true), "\n";
echo "handler after=", is_callable(pcntl_signal_get_handler(SIGTERM)) ? 'mine' : var_export(pcntl_signal_get_handler(SIGTERM), true), "\n";
if ($mode === 'after') { touch($flag); sleep(10); echo "SURVIVED\n"; }
PHP
for impl in ext poly; do
  P="php"; [ $impl = ext ] && P="$PHPX"
  rm -f $T/f; env --default-signal=TERM $P $T/j.php $impl $REDIS_DSN after $T/f > $T/o 2>&1 & bg=$!
  for i in $(seq 1 50); do [ -e $T/f ] && break; sleep 0.1; done
  kill -TERM $bg; wait $bg; rc=$?
  echo "[$impl TERM after the guard] rc=$rc $(tr '\n' ' ' < $T/o)"
  [ $rc = 143 ] || fail "$impl: SIGTERM after cron_guard returned: rc=$rc (expected 143)"
  grep -q "async before=false after=false" $T/o || fail "$impl: pcntl_async_signals changed by cron_guard"
  grep -q "handler after=0" $T/o || fail "$impl: SIGTERM disposition not restored (expected SIG_DFL=0)"
  rm -f $T/f; $P $T/j.php $impl $REDIS_DSN before $T/f > $T/o 2>&1 & bg=$!
  for i in $(seq 1 50); do [ -e $T/f ] && break; sleep 0.1; done
  kill -TERM $bg; sleep 0.3; ttl=$(rcli pttl cron:st); wait $bg; rc=$?
  echo "[$impl handler before the guard] rc=$rc pttl after TERM=$ttl $(tr '\n' ' ' < $T/o)"
  [ "$ttl" -gt 0 ] 2>/dev/null || fail "$impl: key released although a handler installed before the guard exists"
  grep -q HANDLER $T/o || fail "$impl: own handler (installed before) did not run"
  grep -q "handler after=mine" $T/o || fail "$impl: own handler not restored after the guard"
  rcli del cron:st > /dev/null
done
finish

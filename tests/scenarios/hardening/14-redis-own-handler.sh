#!/bin/bash
# Script with its own handler (pcntl_signal handler, or SIG_IGN) for SIGTERM: "nothing changes: the handler runs and
# decides; the key stays held until released". Also SIG_IGN inherited from the parent (as `nohup` does for HUP).
. "$(dirname "$0")/lib.sh"
start_redis
cat > $T/job.php <<'PHP'
<?php
if ($argv[1] === 'poly') require getenv('CRONLOCK_SCENARIO_PKG') . '/polyfill/bootstrap.php';
pcntl_async_signals(true);
$mode = $argv[3];
$lock = new CronLock\Redis($argv[2], 'cron:own');
cron_guard(function () use ($mode, $argv) {
    if ($mode === 'handler') pcntl_signal(SIGTERM, function () { echo "HANDLER\n"; });
    if ($mode === 'ign') pcntl_signal(SIGTERM, SIG_IGN);
    file_put_contents($argv[4], getmypid());
    for ($i = 0; $i < 30; $i++) usleep(100000);
    echo "FINISHED\n";
}, $lock, ['log' => 'stderr']);
PHP
for impl in ext poly; do
  P="php"; [ $impl = ext ] && P="$PHPX"
  for mode in handler ign inherited-ign; do
    rm -f $T/pid
    if [ $mode = inherited-ign ]; then
      python3 -c 'import signal,os,sys; signal.signal(signal.SIGTERM, signal.SIG_IGN); os.execvp(sys.argv[1], sys.argv[1:])' $P $T/job.php $impl $REDIS_DSN none $T/pid > $T/o 2>&1 & bg=$!
    else $P $T/job.php $impl $REDIS_DSN $mode $T/pid > $T/o 2>&1 & bg=$!; fi
    for i in $(seq 1 50); do [ -s $T/pid ] && break; sleep 0.1; done
    kill -TERM $(cat $T/pid); sleep 0.5
    ttl=$(rcli pttl cron:own)
    wait $bg; rc=$?
    echo "[$impl $mode] pttl 0.5 s after SIGTERM: $ttl; rc=$rc; $(tr '\n' ' ' < $T/o)"
    if [ $impl = poly ] && [ $mode = inherited-ign ]; then
      # docs/polyfill.md: an inherited SIG_IGN is invisible to PHP code; released, dies of it (143)
      [ "$ttl" = -2 ] && [ $rc = 143 ] || fail "poly inherited-ign: expected the documented release and 143 (pttl $ttl, rc=$rc)"
      rcli del cron:own >/dev/null
      continue
    fi
    [ "$ttl" -gt 0 ] 2>/dev/null || fail "$impl $mode: key released although the script handles/ignores SIGTERM"
    grep -q FINISHED $T/o || fail "$impl $mode: job did not finish"
    rcli del cron:own >/dev/null
  done
done
finish

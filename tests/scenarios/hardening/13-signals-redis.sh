#!/bin/bash
# Redis holder ended by TERM/INT/HUP/`timeout 2`: key released (token-checked, <=2 s), process dies of the signal
# (128+N, timeout 124); kill -9: next run blocked at most 30 s. Busy line names the holder. ext and polyfill.
. "$(dirname "$0")/lib.sh"
start_redis
cat > $T/job.php <<'PHP'
<?php
if ($argv[1] === 'poly') require getenv('CRONLOCK_SCENARIO_PKG') . '/polyfill/bootstrap.php';
$lock = new CronLock\Redis($argv[2], 'cron:sig');
$wait = (float)($argv[4] ?? 0);
$t0 = microtime(true); $GLOBALS["ran"] = false;
$r = cron_guard(function () use ($argv) {
    echo "RAN\n"; $GLOBALS["ran"] = true;
    if (!empty($argv[3])) { file_put_contents($argv[3], getmypid()); sleep(60); }
}, $lock, ['log' => 'stderr', 'wait' => $wait]);
if ($r === null && !$GLOBALS["ran"]) echo "SKIPPED\n";
printf("took %.2f\n", microtime(true) - $t0);
PHP
host=$(hostname)
for impl in ext poly; do
  P="php"; [ $impl = ext ] && P="$PHPX"
  for sig in ${SIGS:-TERM INT HUP timeout KILL}; do
    rm -f $T/pid
    if [ $sig = timeout ]; then timeout 2 $P $T/job.php $impl $REDIS_DSN $T/pid >$T/h.out 2>&1 & bg=$!
    else env --default-signal=INT,HUP,TERM $P $T/job.php $impl $REDIS_DSN $T/pid >$T/h.out 2>&1 & bg=$!; fi
    for i in $(seq 1 50); do [ -s $T/pid ] && break; sleep 0.1; done
    hp=$(cat $T/pid)
    busy=$($P $T/job.php $impl $REDIS_DSN 2>&1 | head -1)
    echo "[$impl $sig] busy line: $busy"
    echo "$busy" | grep -q "held by pid $hp on $host" || fail "$impl $sig: busy line does not name pid $hp on $host"
    [ $sig != timeout ] && kill -$sig $hp
    wait $bg 2>/dev/null; rc=$?
    ttl=$(rcli pttl cron:sig)
    out=$($P $T/job.php $impl $REDIS_DSN "" 40 2>&1 | tr '\n' ' ')
    echo "[$impl $sig] holder rc=$rc, key pttl after death=$ttl; next run (wait 40): $out"
    t=$(echo "$out" | sed -n 's/.*took \([0-9.]*\).*/\1/p')
    case $sig in
      TERM) want=143;; INT) want=130;; HUP) want=129;; timeout) want=124;; KILL) want=137;;
    esac
    [ "$rc" = "$want" ] || fail "$impl $sig: holder exit status $rc, expected $want"
    echo "$out" | grep -q RAN || fail "$impl $sig: next run did not run"
    if [ $sig = KILL ]; then
      awk "BEGIN{exit !($t <= 31)}" || fail "$impl KILL: next run blocked ${t}s (> 30 s)"
    else
      [ "$ttl" = -2 ] || fail "$impl $sig: key not released on $sig (pttl $ttl)"
      awk "BEGIN{exit !($t <= 1)}" || fail "$impl $sig: next run blocked ${t}s"
    fi
  done
done
finish

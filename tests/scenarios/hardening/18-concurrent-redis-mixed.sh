#!/bin/bash
# 30 concurrent runs (15 extension + 15 polyfill) on one Redis key with 'wait': never two at once, all run;
# then a skip-mode burst. Journal-based overlap count.
. "$(dirname "$0")/lib.sh"
start_redis
pids=()
cat > $T/job.php <<'PHP'
<?php
if ($argv[2] === 'poly') require getenv('CRONLOCK_SCENARIO_PKG') . '/polyfill/bootstrap.php';
$j = $argv[1]; $impl = extension_loaded('cronlock') ? 'ext' : 'poly';
$lock = new CronLock\Redis($argv[3], 'cron:conc');
$r = cron_guard(function () use ($j, $impl, $argv) {
    file_put_contents($j, "S ".getmypid()." ".microtime(true)." $impl\n", FILE_APPEND);
    usleep((int)$argv[5]);
    file_put_contents($j, "E ".getmypid()." ".microtime(true)." $impl\n", FILE_APPEND);
    return 'ran';
}, $lock, ['wait' => (float)$argv[4], 'log' => 'none']);
echo $r === 'ran' ? "ran\n" : "skipped\n";
PHP
for i in $(seq 1 15); do
  $PHPX $T/job.php $T/journal ext $REDIS_DSN 120 30000 > $T/out.e$i 2>&1 & pids+=($!)
  php $T/job.php $T/journal poly $REDIS_DSN 120 30000 > $T/out.p$i 2>&1 & pids+=($!)
done
wait "${pids[@]}"; pids=()
max=$(check_journal $T/journal); runs=$(grep -c ^S $T/journal)
echo "wait-mode runs=$runs max_concurrency=$max"; cat $T/out.* | sort | uniq -c
[ "$max" = 1 ] || fail "overlap: max concurrency $max"
[ "$runs" = 30 ] || fail "only $runs of 30 ran"
rm -f $T/out.*; : > $T/journal
for i in $(seq 1 10); do
  $PHPX $T/job.php $T/journal ext $REDIS_DSN 0 400000 > $T/out.e$i 2>&1 & pids+=($!)
  php $T/job.php $T/journal poly $REDIS_DSN 0 400000 > $T/out.p$i 2>&1 & pids+=($!)
done
wait "${pids[@]}"; pids=()
max=$(check_journal $T/journal); runs=$(grep -c ^S $T/journal)
echo "skip-mode runs=$runs max_concurrency=$max"; cat $T/out.* | sort | uniq -c
[ "$max" = 1 ] || fail "overlap in skip mode: $max"
cat $T/out.* | grep -qv -e '^ran$' -e '^skipped$' && fail "unexpected output: $(cat $T/out.* | grep -v -e '^ran$' -e '^skipped$' | head -3)"
finish

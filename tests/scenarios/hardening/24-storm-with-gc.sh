#!/bin/bash
# Busy server: 40 concurrent runs (20 ext + 20 polyfill, wait forever) of one named job under CPU load, while the
# operator runs `cronlock gc --older-than 0s` in a loop ("gc removes a file only while holding its lock").
# Exactly one run at a time must ever hold; all 40 run. Journal-based.
. "$(dirname "$0")/lib.sh"
mkdir -m 700 $T/l; export CRONLOCK_LOCK_DIR=$T/l
cat > $T/job.php <<'PHP'
<?php
if ($argv[2] === 'poly') require getenv('CRONLOCK_SCENARIO_PKG') . '/polyfill/bootstrap.php';
$j = $argv[1]; $impl = extension_loaded('cronlock') ? 'ext' : 'poly';
$r = cron_guard(function () use ($j, $impl) {
    file_put_contents($j, "S ".getmypid()." ".microtime(true)." $impl\n", FILE_APPEND);
    usleep(random_int(5000, 40000));
    file_put_contents($j, "E ".getmypid()." ".microtime(true)." $impl\n", FILE_APPEND);
    return 'ran';
}, 'storm', ['wait' => -1, 'log' => 'none']);
echo $r === 'ran' ? "ran\n" : "skipped\n";
PHP
pids=()
for k in 1 2; do (while :; do :; done) & STARTED_PIDS+=($!); done
( while :; do $PHPX $PKG/cli/bin/cronlock gc --older-than 0s >> $T/gc.log 2>&1; done ) & GC=$!; STARTED_PIDS+=($GC)
for i in $(seq 1 20); do
  $PHPX $T/job.php $T/journal ext > $T/out.e$i 2>&1 & pids+=($!)
  php $T/job.php $T/journal poly > $T/out.p$i 2>&1 & pids+=($!)
done
wait "${pids[@]}"
kill ${STARTED_PIDS[@]} 2>/dev/null
max=$(check_journal $T/journal); runs=$(grep -c ^S $T/journal)
echo "runs=$runs max_concurrency=$max; gc removals: $(grep -ci remov $T/gc.log) ; gc log tail:"; tail -3 $T/gc.log
cat $T/out.* | sort | uniq -c
[ "$max" = 1 ] || { fail "overlap: max concurrency $max"; awk '{ if ($1=="S") {c++; if (c>1) print NR": "$0" (c="c")"} else c-- }' $T/journal | head -5; }
[ "$runs" = 40 ] || fail "only $runs of 40 ran"
finish

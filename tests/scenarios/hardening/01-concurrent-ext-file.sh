#!/bin/bash
# 30 concurrent runs of one guarded job (extension, named File lock, wait) : never two at once, all run.
. "$(dirname "$0")/lib.sh"
export CRONLOCK_LOCK_DIR=$T/locks; mkdir -m 700 $T/locks
cat > $T/job.php <<'PHP'
<?php
$j = $argv[1];
$r = cron_guard(function () use ($j) {
    file_put_contents($j, "S ".getmypid()." ".microtime(true)."\n", FILE_APPEND);
    usleep(20000);
    file_put_contents($j, "E ".getmypid()." ".microtime(true)."\n", FILE_APPEND);
    return 'ran';
}, 'conc', ['wait' => 120, 'log' => 'none']);
echo $r === 'ran' ? "ran\n" : "skipped\n";
PHP
for i in $(seq 1 30); do $PHPX $T/job.php $T/journal > $T/out.$i 2>&1 & done
wait
max=$(check_journal $T/journal); runs=$(grep -c ^S $T/journal)
echo "runs=$runs max_concurrency=$max"
[ "$max" = 1 ] || fail "overlap: max concurrency $max"
[ "$runs" = 30 ] || { fail "only $runs of 30 ran"; cat $T/out.*; }
# skip mode: wait 0, job sleeps; 20 runs
: > $T/journal; rm -f $T/out.*
sed -i "s/'wait' => 120/'wait' => 0/; s/usleep(20000)/usleep(300000)/" $T/job.php
for i in $(seq 1 20); do $PHPX $T/job.php $T/journal > $T/out.$i 2>&1 & done
wait
max=$(check_journal $T/journal); runs=$(grep -c ^S $T/journal)
echo "skip-mode runs=$runs max_concurrency=$max; outputs:"; cat $T/out.* | sort | uniq -c
[ "$max" = 1 ] || fail "overlap in skip mode: $max"
grep -qv -e '^ran$' -e '^skipped$' $T/out.* && fail "unexpected output"
finish

#!/bin/bash
# Holder of a File lock killed by KILL/TERM/INT/HUP and `timeout 2`: the next run gets the lock at once.
# Busy line while held names the true holder pid and host. ext and polyfill.
. "$(dirname "$0")/lib.sh"
mkdir -m 700 $T/l; export CRONLOCK_LOCK_DIR=$T/l
cat > $T/job.php <<'PHP'
<?php
if ($argv[1] === 'poly') require getenv('CRONLOCK_SCENARIO_PKG') . '/polyfill/bootstrap.php';
$t0 = microtime(true);
$r = cron_guard(function () use ($argv) {
    echo "RAN ", getmypid(), "\n";
    if (isset($argv[2])) { file_put_contents($argv[2], getmypid()); sleep(30); }
    return 1;
}, 'sig', ['log' => 'stderr']);
if ($r === null) echo "SKIPPED\n";
fprintf(STDERR, "took %.2f\n", microtime(true) - $t0);
PHP
host=$(hostname)
for impl in ext poly; do
  P="php"; [ $impl = ext ] && P="$PHPX"
  for sig in KILL TERM INT HUP timeout; do
    rm -f $T/pid
    if [ $sig = timeout ]; then timeout 2 $P $T/job.php $impl $T/pid >/dev/null 2>&1 & bg=$!
    else env --default-signal=INT,HUP,TERM $P $T/job.php $impl $T/pid >/dev/null 2>&1 & bg=$!; fi
    for i in $(seq 1 50); do [ -s $T/pid ] && break; sleep 0.1; done
    hp=$(cat $T/pid)
    busy=$($P $T/job.php $impl 2>&1 | head -1)
    echo "[$impl $sig] busy line: $busy"
    echo "$busy" | grep -q "is held by pid $hp on $host since " || fail "$impl $sig: busy line does not name pid $hp on $host"
    [ $sig != timeout ] && kill -$sig $hp
    wait $bg 2>/dev/null; rc=$?
    t0=$(date +%s.%N)
    out=$($P $T/job.php $impl 2>&1)
    dt=$(echo "$(date +%s.%N) - $t0" | bc)
    echo "[$impl $sig] holder rc=$rc; next run after ${dt}s: $(echo $out | tr '\n' ' ')"
    echo "$out" | grep -q '^RAN' || fail "$impl $sig: next run did not run: $out"
    case $sig in TERM) want=143;; INT) want=130;; HUP) want=129;; timeout) want=124;; KILL) want=137;; esac
    [ "$rc" = "$want" ] || fail "$impl $sig: holder exit status $rc, expected $want"
  done
done
finish

#!/bin/bash
# A signal the process ignores (SIG_IGN inherited: bash background job's SIGINT, nohup's SIGHUP) must not change the
# job compared with plain PHP (which itself cuts sleep() short): same exit status, same output.
. "$(dirname "$0")/lib.sh"
mkdir -m 700 $T/l; export CRONLOCK_LOCK_DIR=$T/l
cat > $T/s.php <<'PHP'
<?php
if ($argv[1] === 'poly') require getenv('CRONLOCK_SCENARIO_PKG') . '/polyfill/bootstrap.php';
$job = function () { $x = sleep(3); echo "sleep returned ", $x > 0 ? "early" : 0, "\n"; echo "END\n"; };
if ($argv[1] === 'none') $job(); else cron_guard($job, 'ign', ['log' => 'stderr']);
PHP
declare -A base
for impl in none ext poly; do
  P=php; [ $impl = ext ] && P="$PHPX"
  for sig in INT HUP; do
    if [ $sig = HUP ]; then nohup $P $T/s.php $impl > $T/o 2>&1 & p=$!; else $P $T/s.php $impl > $T/o 2>&1 & p=$!; fi
    sleep 1; kill -$sig $p; wait $p; rc=$?
    r="rc=$rc $(tr '\n' ' ' < $T/o)"
    echo "[$impl SIG$sig ignored] $r"
    if [ $impl = none ]; then base[$sig]=$r; elif [ "$r" != "${base[$sig]}" ]; then fail "$impl SIG$sig: '$r' differs from plain PHP '${base[$sig]}'"; fi
  done
done
finish

#!/bin/bash
# Busy with defaults: returns null and prints nothing (stdout and stderr empty: cron mails nothing);
# 'on_busy' => 75 exits 75; a waiter ('wait' => 10) gets the lock at once when the holder is kill -9'd.
. "$(dirname "$0")/lib.sh"
mkdir -m 700 $T/l; export CRONLOCK_LOCK_DIR=$T/l
cat > $T/h.php <<'PHP'
<?php
if ($argv[1] === 'poly') require getenv('CRONLOCK_SCENARIO_PKG') . '/polyfill/bootstrap.php';
cron_guard(function () use ($argv) { touch($argv[2]); sleep(30); }, 'q');
PHP
cat > $T/c.php <<'PHP'
<?php
if ($argv[1] === 'poly') require getenv('CRONLOCK_SCENARIO_PKG') . '/polyfill/bootstrap.php';
$o = $argv[2] === 'default' ? [] : ($argv[2] === 'onbusy' ? ['on_busy' => 75] : ['wait' => 10]);
$t = microtime(true);
$r = cron_guard(fn() => 'RAN', 'q', $o);
if ($argv[2] !== 'default') printf("%s %.3f\n", var_export($r, true), microtime(true) - $t);
elseif ($r !== null) echo "NOT NULL\n";
PHP
for impl in ext poly; do
  P="php"; [ $impl = ext ] && P="$PHPX"
  rm -f $T/flag; $P $T/h.php $impl $T/flag & hp=$!
  for i in $(seq 1 50); do [ -e $T/flag ] && break; sleep 0.1; done
  out=$($P $T/c.php $impl default 2>&1); rc=$?
  echo "[$impl default busy] rc=$rc output='$out'"
  [ -z "$out" ] && [ $rc = 0 ] || fail "$impl: busy run printed '$out' rc=$rc"
  $P $T/c.php $impl onbusy >/dev/null 2>&1; rc=$?; echo "[$impl on_busy 75] rc=$rc"; [ $rc = 75 ] || fail "$impl on_busy: rc=$rc"
  $P $T/c.php $impl wait > $T/w 2>&1 & wp=$!
  sleep 1; t0=$(date +%s.%N); kill -9 $hp; wait $wp; t1=$(date +%s.%N)
  echo "[$impl waiter] $(cat $T/w); returned $(echo "$t1 - $t0" | bc) s after kill -9"
  awk "BEGIN{exit !($t1 - $t0 < 0.5)}" || fail "$impl: waiter took more than 0.5 s after the holder died"
  grep -q "^'RAN'" $T/w || fail "$impl: waiter did not run"
  wait $hp 2>/dev/null
done
finish

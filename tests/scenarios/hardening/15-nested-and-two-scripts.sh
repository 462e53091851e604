#!/bin/bash
# Nested cron_guard on the same name: inner busy at once (null, job not run); with 'wait' it throws LockException;
# the outer hold survives the inner attempt. Same lock object nested: shared hold, released when the outer ends.
# Two different scripts using the same name exclude each other; null lock: two scripts never collide.
. "$(dirname "$0")/lib.sh"
mkdir -m 700 $T/l; export CRONLOCK_LOCK_DIR=$T/l
cat > $T/n.php <<'PHP'
<?php
if ($argv[1] === 'poly') require getenv('CRONLOCK_SCENARIO_PKG') . '/polyfill/bootstrap.php';
$o = ['log' => 'none'];
$t = microtime(true);
cron_guard(function () use ($o, $t) {
    $r = cron_guard(fn() => 'INNER-RAN', 'nest', $o);
    echo "inner(wait 0): ", var_export($r, true), "\n";
    try { $r = cron_guard(fn() => 'INNER-RAN', 'nest', $o + ['wait' => 2]); echo "inner(wait 2): ", var_export($r, true), "\n"; }
    catch (Throwable $e) { echo "inner(wait 2): ", get_class($e), ": ", $e->getMessage(), "\n"; }
    printf("elapsed %.2f\n", microtime(true) - $t);
    $f = new CronLock\File(getenv('CRONLOCK_LOCK_DIR') . '/nest.lock');
    echo "other object acquire(0) after inner attempts: ", var_export($f->acquire(0), true), "\n";
    exec('flock -n ' . escapeshellarg(getenv('CRONLOCK_LOCK_DIR') . '/nest.lock') . ' true', $_, $rc);
    echo "flock(1) -n while outer runs: rc=$rc\n";
}, 'nest', $o);
$lock = new CronLock\File(getenv('CRONLOCK_LOCK_DIR') . '/same.lock');
cron_guard(function () use ($lock, $o) {
    $r = cron_guard(fn() => 'SAME-INNER-RAN', $lock, $o);
    echo "same object inner: ", var_export($r, true), "; held after inner: ", var_export($lock->isHeld(), true), "\n";
}, $lock, $o);
echo "same object held after outer: ", var_export($lock->isHeld(), true), "\n";
PHP
for impl in ext poly; do
  P="php"; [ $impl = ext ] && P="$PHPX"
  out=$($P $T/n.php $impl 2>&1); echo "--- $impl"; echo "$out"
  echo "$out" | grep -q "^inner(wait 0): NULL" || fail "$impl: nested same name wait 0 not busy"
  echo "$out" | grep -q "^inner(wait 2): CronLock.LockException" || fail "$impl: nested with wait did not throw LockException"
  echo "$out" | grep -q "other object acquire(0) after inner attempts: false" || fail "$impl: outer hold lost after inner attempt"
  echo "$out" | grep -q "flock(1) -n while outer runs: rc=1" || fail "$impl: flock(1) got the lock while outer runs"
  echo "$out" | grep -q "same object inner: 'SAME-INNER-RAN'; held after inner: true" || fail "$impl: same-object nesting"
  echo "$out" | grep -q "same object held after outer: false" || fail "$impl: same-object not released after outer"
  awk "BEGIN{exit !($(echo "$out" | sed -n 's/elapsed //p') < 1)}" || fail "$impl: nested attempts waited"
done
# two scripts, null lock: distinct; same name: exclusive
mkdir $T/a $T/b
for s in a b; do cat > $T/$s/job.php <<'PHP'
<?php
if ($argv[1] === 'poly') require getenv('CRONLOCK_SCENARIO_PKG') . '/polyfill/bootstrap.php';
$r = cron_guard(function () { echo "RAN\n"; sleep(2); }, $argv[2] === 'null' ? null : $argv[2], ['log' => 'stderr']);
PHP
done
for impl in ext poly; do
  P="php"; [ $impl = ext ] && P="$PHPX"
  $P $T/a/job.php $impl null > $T/oa 2>&1 & pa=$!; sleep 0.5
  ob=$($P $T/b/job.php $impl null 2>&1); wait $pa
  echo "[$impl null lock] a: $(cat $T/oa) | b: $ob"
  echo "$ob" | grep -q RAN || fail "$impl: two scripts with null lock collided: $ob"
  $P $T/a/job.php $impl shared-name > $T/oa 2>&1 & pa=$!; sleep 0.5
  ob=$($P $T/b/job.php $impl shared-name 2>&1); wait $pa
  echo "[$impl same name] b: $ob"
  echo "$ob" | grep -q "skipping this run" || fail "$impl: two scripts with the same name both ran"
done
finish

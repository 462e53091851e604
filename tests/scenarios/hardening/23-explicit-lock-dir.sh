#!/bin/bash
# Explicit CRONLOCK_LOCK_DIR / cronlock.lock_dir: missing dir, world-writable without sticky bit -> LockException
# naming it; shared 1777 dir where another user pre-created the named lock file -> refused (LockException);
# new lock files there are 0644. Extension and polyfill; null lock: ext and polyfill on the same script exclude each other.
. "$(dirname "$0")/lib.sh"
mkdir -m 0777 $T/ww; chmod 0777 $T/ww; mkdir -m 1777 $T/sticky; mkdir -m 755 $T/ok
touch $T/sticky/planted.lock; chown 1234:1234 $T/sticky/planted.lock
cat > $T/j.php <<'PHP'
<?php
if ($argv[1] === 'poly') require getenv('CRONLOCK_SCENARIO_PKG') . '/polyfill/bootstrap.php';
try { $r = cron_guard(fn() => 'RAN', $argv[2], ['log' => 'stderr']); echo var_export($r, true), "\n"; }
catch (Throwable $e) { echo get_class($e), ': ', $e->getMessage(), "\n"; }
PHP
for impl in ext poly; do
  P="php"; [ $impl = ext ] && P="$PHPX"
  for c in "$T/missing planted" "$T/ww x" "$T/sticky planted"; do
    set -- $c
    out=$(CRONLOCK_LOCK_DIR=$1 $P $T/j.php $impl $2 2>&1); echo "[$impl dir=$1 name=$2] $out"
    echo "$out" | grep -q '^CronLock.LockException: ' || fail "$impl $1/$2: expected LockException"
  done
  [ -e $T/ww/x.lock ] && fail "$impl: created a lock file in a world-writable non-sticky dir"
  out=$(CRONLOCK_LOCK_DIR=$T/ok $P $T/j.php $impl fine 2>&1)
  m=$(stat -c %a $T/ok/fine.lock); echo "[$impl ok dir] $out mode=$m"; [ "$m" = 644 ] || fail "$impl: mode $m, expected 644"
  rm -f $T/ok/fine.lock
done
# null lock, same script, ext holder + poly contender and vice versa
mkdir -m 700 $T/l
cat > $T/nl.php <<'PHP'
<?php
if ($argv[1] === 'poly') require getenv('CRONLOCK_SCENARIO_PKG') . '/polyfill/bootstrap.php';
$r = cron_guard(function () use ($argv) { echo "RAN\n"; if ($argv[2]) { touch($argv[2]); sleep(3); } }, null, ['log' => 'stderr']);
PHP
export CRONLOCK_LOCK_DIR=$T/l
for pair in "ext poly" "poly ext"; do
  set -- $pair; P1=php; [ $1 = ext ] && P1="$PHPX"; P2=php; [ $2 = ext ] && P2="$PHPX"
  rm -f $T/flag; $P1 $T/nl.php $1 $T/flag > /dev/null 2>&1 & hp=$!
  for i in $(seq 1 50); do [ -e $T/flag ] && break; sleep 0.1; done
  out=$($P2 $T/nl.php $2 "" 2>&1); echo "[null lock: $1 holds, $2 tries] $out"
  echo "$out" | grep -q "skipping this run" || fail "null lock: $1 and $2 did not exclude each other"
  wait $hp
done
ls $T/l
finish

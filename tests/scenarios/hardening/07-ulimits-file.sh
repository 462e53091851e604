#!/bin/bash
# ulimit -n / -v tight: a File-lock cron_guard either runs or throws LockException; never skips, never crashes.
. "$(dirname "$0")/lib.sh"
mkdir -m 700 $T/l; export CRONLOCK_LOCK_DIR=$T/l
cat > $T/job.php <<'PHP'
<?php
if ($argv[1] === 'poly') require getenv('CRONLOCK_SCENARIO_PKG') . '/polyfill/bootstrap.php';
try {
  $r = cron_guard(function () { echo "RAN\n"; return 1; }, 'ul', ['log' => 'stderr']);
  if ($r === null) echo "SKIPPED\n";
} catch (Throwable $e) { echo get_class($e), ': ', $e->getMessage(), "\n"; }
PHP
for impl in ext poly; do
  for n in 4 5 6 7 8 10 16; do
    if [ $impl = ext ]; then out=$(bash -c "ulimit -n $n; exec php $EXT $T/job.php ext" 2>&1); else out=$(bash -c "ulimit -n $n; exec php $T/job.php poly" 2>&1); fi
    rc=$?
    echo "[$impl -n $n] rc=$rc $(echo "$out" | tr '\n' '|' | cut -c1-300)"
    echo "$out" | grep -q SKIPPED && fail "$impl ulimit -n $n: a failure was taken for busy"
    [ $rc -ge 128 ] && ! echo "$out" | grep -q "Failed opening required" && fail "$impl ulimit -n $n: crashed rc=$rc"
  done
  for v in 60000 80000 100000 150000; do
    if [ $impl = ext ]; then out=$(bash -c "ulimit -v $v; exec php $EXT $T/job.php ext" 2>&1); else out=$(bash -c "ulimit -v $v; exec php $T/job.php poly" 2>&1); fi
    rc=$?
    echo "[$impl -v $v] rc=$rc $(echo "$out" | tr '\n' '|' | cut -c1-300)"
    echo "$out" | grep -q SKIPPED && fail "$impl ulimit -v $v: a failure was taken for busy"
    # informational only: PHP itself and its other extensions fail to map under these limits
    [ $rc -ge 128 ] && echo "note: $impl ulimit -v $v: rc=$rc (PHP startup under -v; not counted)"
  done
done
finish

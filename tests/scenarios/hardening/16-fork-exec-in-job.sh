#!/bin/bash
# Fork inside a job: the child's exit()/return/uncaught exception never releases the parent's lock; a child alive
# after the parent's end never keeps the lock (extension promise; stub File says the same for any File).
# A background program started by the job (exec '... &') never inherits the lock (close-on-exec).
. "$(dirname "$0")/lib.sh"
mkdir -m 700 $T/l; export CRONLOCK_LOCK_DIR=$T/l
LF=$T/l/fork.lock
cat > $T/f.php <<'PHP'
<?php
if ($argv[1] === 'poly') require getenv('CRONLOCK_SCENARIO_PKG') . '/polyfill/bootstrap.php';
$how = $argv[2]; $lf = $argv[3];
$r = cron_guard(function () use ($how, $lf) {
    if ($how === 'bgexec') { file_put_contents($lf . '.bgpid', exec('sleep 20 > /dev/null 2>&1 & echo $!')); echo "PARENT-DONE\n"; return; }
    $pid = pcntl_fork();
    if ($pid === 0) {
        if ($how === 'orphan') { sleep(8); exit(0); }
        if ($how === 'exit') exit(0);
        if ($how === 'throw') throw new RuntimeException('child boom');
        return 'child-return';
    }
    if ($how === 'orphan') { echo "PARENT-DONE\n"; return; }
    pcntl_waitpid($pid, $st);
    exec('flock -n ' . escapeshellarg($lf) . ' true', $_, $rc);
    echo "after child $how: flock -n rc=$rc\n";
}, 'fork', ['log' => 'none']);
PHP
for impl in ext poly; do
  P="php"; [ $impl = ext ] && P="$PHPX"
  for how in exit throw return; do
    out=$($P $T/f.php $impl $how $LF 2>/dev/null | grep '^after'); echo "[$impl fork-child $how] $out"
    [ "$out" = "after child $how: flock -n rc=1" ] || fail "$impl: child's $how released the parent's lock ($out)"
  done
  for how in orphan bgexec; do
    $P $T/f.php $impl $how $LF > $T/o 2>&1
    t0=$(date +%s.%N); flock -n $LF true; rc=$?
    echo "[$impl $how] parent ended ($(tr '\n' ' ' < $T/o)); flock -n afterwards rc=$rc"
    [ $rc = 0 ] || fail "$impl: after the parent ended, a $how child keeps the lock"
    if [ $how = bgexec ]; then kill $(cat $LF.bgpid) 2>/dev/null; fi
  done
done
finish

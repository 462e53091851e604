#!/bin/bash
# extension and polyfill on the same named lock at once (same default dir and via CRONLOCK_LOCK_DIR): must exclude each other.
. "$(dirname "$0")/lib.sh"
cat > $T/job.php <<'PHP'
<?php
if (($argv[2] ?? '') === 'poly') require getenv('CRONLOCK_SCENARIO_PKG') . '/polyfill/bootstrap.php';
$j = $argv[1];
$impl = extension_loaded('cronlock') ? 'ext' : 'poly';
$r = cron_guard(function () use ($j, $impl) {
    file_put_contents($j, "S ".getmypid()." ".microtime(true)." $impl\n", FILE_APPEND);
    usleep(30000);
    file_put_contents($j, "E ".getmypid()." ".microtime(true)." $impl\n", FILE_APPEND);
}, 'mixed', ['wait' => 120, 'log' => 'none']);
PHP
run_mix() {
  : > $T/journal
  for i in $(seq 1 12); do $PHPX $T/job.php $T/journal ext & php $T/job.php $T/journal poly & done
  wait
  max=$(check_journal $T/journal); runs=$(grep -c ^S $T/journal); p=$(grep -c '^S.*poly' $T/journal)
  echo "$1: runs=$runs (poly $p) max_concurrency=$max"
  [ "$max" = 1 ] || fail "$1: ext and polyfill overlapped (max $max)"
  [ "$runs" = 24 ] || fail "$1: $runs of 24 ran"
}
export CRONLOCK_LOCK_DIR=$T/locks; mkdir -m 700 $T/locks
run_mix "CRONLOCK_LOCK_DIR"
unset CRONLOCK_LOCK_DIR
# default directory (root: /run/cronlock) on a private /run
export -f run_mix check_journal fail
unshare -m bash -c "mount -t tmpfs tmpfs /run && mkdir -m 1777 /run/lock && . $(dirname $0)/lib.sh >/dev/null; T=$T; PHPX='$PHPX'; run_mix default-dir; ls -la /run/cronlock; exit \$FAIL" || FAIL=1
finish

#!/bin/bash
# A skipped run prints nothing (no cron mail) and writes one busy line to 'log' naming the
# holder pid/host, since when, how long, and how long this run waited; 'wait' => 1 waits ~1 s.
. "$(dirname "$0")/lib.sh"
cat > "$W/job.php" <<'PHP'
<?php
$o = ['log' => getenv('LOGF')]; if (getenv('WAIT')) $o['wait'] = (float)getenv('WAIT');
$r = cron_guard(function () { sleep((int)$GLOBALS['argv'][1]); }, 'sync-orders', $o);
PHP
bg $EXT "$W/job.php" 4 > /dev/null 2>&1; H=$LAST
sleep 1
$EXT "$W/job.php" 0 > "$W/o" 2> "$W/e"; RC=$?
WAIT=1 $EXT "$W/job.php" 0 > "$W/o2" 2> "$W/e2"; RC2=$?
echo "--- skipped runs: exit $RC/$RC2, stdout $(cat "$W/o" "$W/o2" | wc -c) bytes, stderr $(cat "$W/e" "$W/e2" | wc -c) bytes"; cat "$LOGF"
check "skip exits 0" test "$RC$RC2" = 00
check "skip prints nothing" test ! -s "$W/o" -a ! -s "$W/e" -a ! -s "$W/o2" -a ! -s "$W/e2"
check "busy line names holder pid, since, waited" grep -qE "lock sync-orders \(.*/sync-orders.lock\) is held by pid $H on $(hostname) since [0-9:]+Z \([0-9]+ s\); waited 0\.0 s; skipping this run" "$LOGF"
check "the waiting run says waited 1.0 s" grep -q 'waited 1\.0 s; skipping' "$LOGF"
finish

#!/bin/bash
# A run with 'wait' => 30 blocks in flock(2): /proc/locks has its "->" entry, lslocks shows
# WRITE*, `cronlock status` WAITING=1 (text and JSON "waiters": 1), and it runs when the holder ends.
. "$(dirname "$0")/lib.sh"
cat > "$W/job.php" <<'PHP'
<?php
$o = ['log' => getenv('LOGF'), 'record' => 'runs']; if (getenv('WAIT')) $o['wait'] = (float)getenv('WAIT');
cron_guard(function () { sleep((int)$GLOBALS['argv'][1]); }, 'w', $o);
PHP
bg $EXT "$W/job.php" 3; sleep 0.5
WAIT=30 bg $EXT "$W/job.php" 0; WT=$LAST; sleep 1
INO=$(stat -c %i "$CRONLOCK_LOCK_DIR/w.lock")
PL=$(grep ":$INO " /proc/locks); LL=$(lslocks -p $WT 2>/dev/null | grep w.lock); ST=$($CLI status); JS=$($CLI status --json)
echo "$PL"; echo "$LL"; echo "$ST"
check "/proc/locks lists the waiter (->) with its pid" bash -c "echo '$PL' | grep -q -- '-> FLOCK  ADVISORY  WRITE $WT '"
check "lslocks shows the waiter blocked (WRITE*)" bash -c "echo '$LL' | grep -q 'WRITE\*'"
check "status WAITING 1" bash -c "echo '$ST' | grep -qE '^  w +held .* 1$'"
check "status --json waiters 1" bash -c "echo '$JS' | grep -q '\"waiters\": 1'"
wait $WT; check "waiter ran once the holder ended" grep -q 'waited_ms=2[0-9]\{3\} ' "$LOGF"
finish

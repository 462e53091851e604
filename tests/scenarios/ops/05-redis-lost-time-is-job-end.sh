#!/bin/bash
# The Redis key is deleted 1 s into a 13 s job that makes no Guard calls. The lease renewal
# (every 10 s) finds it gone at ~10 s, but the lost line says "at <job end>" and the record
# says held_ms=~13000: neither the time of the loss nor the time it was found.
# (With Guard::lost() polled the same setup reports "at" ~10 s and held_ms ~10000.)
# README: "(… was lost during the run (at 14:52:07Z: its lock file was removed) …)";
# stub Guard::lost(): "When and why the hold was lost"; lease "renewed every 10 s".
. "$(dirname "$0")/lib.sh"
start_redis
cat > "$W/job.php" <<'PHP'
<?php
$lock = new CronLock\Redis('redis://127.0.0.1:' . getenv('PORT'), 'cron:sync');
file_put_contents(getenv('W') . '/start', time());
cron_guard(function () { sleep(13); }, $lock, ['log' => getenv('LOGF'), 'record' => 'runs']);
PHP
export W
bg $EXT "$W/job.php" > "$W/a.out" 2> "$W/a.err"; A=$LAST
sleep 1; redis-cli -p "$PORT" del cron:sync >/dev/null; echo "--- key deleted at $(date -u +%T)"
wait $A
echo "--- stderr:"; cat "$W/a.err"; echo "--- log:"; cat "$LOGF"
START=$(cat "$W/start")
AT=$(grep -o 'at [0-9:]*Z' "$W/a.err" | head -1 | sed 's/at //')
ATS=$(date -u -d "$(date -u -d @"$START" +%F) $AT" +%s)
HELD=$(grep -o 'held_ms=[0-9]*' "$LOGF" | tail -1 | cut -d= -f2)
echo "--- start=$(date -u -d @"$START" +%T) reported at=$AT ($((ATS-START)) s after start), held_ms=$HELD"
check "the hold is reported lost" grep -q 'was lost during the run' "$W/a.err"
check "the reported time is no later than when the renewal found the loss (<= 11 s after start)" test $((ATS-START)) -le 11
check "held_ms does not count time after the loss was found (<= 11500)" test "${HELD:-99999}" -le 11500
finish

#!/bin/bash
# Redis stopped mid-job, the job returns normally: release() fails. The "releasing lock ...
# failed" line goes to stderr only, not to the 'log' destination (a file here), and the
# per-run record says outcome="failed: CronLock\ConnectionException" though the job did not throw.
# README: "a lost hold or a failing release goes to PHP's error log as well";
# stub: "A release() that throws is logged ("cron_guard: releasing lock <what> failed: <message>")";
# outcome "`failed: <exception class>` (the job threw)".
. "$(dirname "$0")/lib.sh"
start_redis
cat > "$W/job.php" <<'PHP'
<?php
$lock = new CronLock\Redis('redis://127.0.0.1:' . getenv('PORT'), 'cron:sync');
cron_guard(function () { sleep(3); return 'done'; }, $lock, ['log' => getenv('LOGF'), 'record' => 'runs']);
PHP
bg $EXT "$W/job.php" > "$W/a.out" 2> "$W/a.err"; A=$LAST
sleep 1; stop_redis
wait $A; RC=$?
echo "--- exit $RC; stderr:"; cat "$W/a.err"; echo "--- log file:"; cat "$LOGF"
check "stderr has the failing-release line" grep -q 'releasing lock .* failed' "$W/a.err"
check "the 'log' destination has the failing-release line too" grep -q 'releasing lock .* failed' "$LOGF"
check "the record does not claim the job threw (outcome=failed:)" bash -c "! grep -q 'outcome=\"failed' '$LOGF'"
finish

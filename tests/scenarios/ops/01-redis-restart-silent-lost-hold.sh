#!/bin/bash
# A Redis server restarted (without persistence) mid-job loses the key; another run takes
# and releases it while the first job still runs; at the first job's end the extension says
# nothing (outcome=ran), so an overlap goes unreported. The polyfill reports it.
# README: "A lost hold (the lock file removed, the Redis key taken, ...) is not silent: it goes
# to PHP's error log ... at the job's end"; stub: "A lost hold is always reported".
. "$(dirname "$0")/lib.sh"
start_redis
cat > "$W/job.php" <<'PHP'
<?php
if (getenv('POLY')) require getenv('CRONLOCK_SCENARIO_PKG') . '/polyfill/bootstrap.php';
$lock = new CronLock\Redis('redis://127.0.0.1:' . getenv('PORT'), 'cron:sync');
$r = cron_guard(function () { usleep((int)($GLOBALS['argv'][1] * 1e6)); return 'done'; },
    $lock, ['log' => getenv('LOGF'), 'record' => 'runs']);
echo 'result=', var_export($r, true), "\n";
PHP
run() {  # run <php-cmd> <label>
  : > "$LOGF"
  bg $1 "$W/job.php" 5 > "$W/a.out" 2> "$W/a.err"; A=$LAST
  sleep 1
  stop_redis; start_redis "$PORT"                      # restart: key gone
  $1 "$W/job.php" 1 > "$W/b.out" 2> "$W/b.err"         # second run overlaps the first
  wait $A
  echo "--- $2: second run: $(cat "$W/b.out")"; echo "--- $2: first run stderr:"; cat "$W/a.err"; echo "--- $2: log:"; cat "$LOGF"
}
run "$EXT" extension
check "extension: second run ran while the first still held (overlap happened)" grep -q "result='done'" "$W/b.out"
check "extension: first run reports the lost hold on stderr" grep -q 'was lost' "$W/a.err"
check "extension: record says outcome=lost" grep -q 'outcome=lost' "$LOGF"
POLY=1 run php polyfill
check "polyfill: first run reports the lost hold on stderr" grep -q 'was lost' "$W/a.err"
finish

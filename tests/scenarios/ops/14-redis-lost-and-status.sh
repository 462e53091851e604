#!/bin/bash
# Redis: skip is quiet with a busy line naming the holder; key deleted mid-job is reported
# within the 10 s renewal (Guard::lost() polled); a $ttl that runs out is reported; status
# --redis shows holder, TTL, waiters, ALIVE no after kill -9.
. "$(dirname "$0")/lib.sh"
start_redis
cat > "$W/job.php" <<'PHP'
<?php
$ttl = getenv('TTL') ? (float)getenv('TTL') : null;
$lock = new CronLock\Redis('redis://127.0.0.1:' . getenv('PORT'), 'cron:sync', $ttl);
$o = ['log' => getenv('LOGF'), 'record' => 'runs']; if (getenv('WAIT')) $o['wait'] = (float)getenv('WAIT');
cron_guard(function ($g) { $t = microtime(true);
    while (microtime(true) - $t < (float)$GLOBALS['argv'][1]) { usleep(100000); $g->expired(); if ($g->lost()) break; }
}, $lock, $o);
PHP
bg $EXT "$W/job.php" 14 > "$W/a.out" 2> "$W/a.err"; A=$LAST; sleep 0.7
$EXT "$W/job.php" 0 > "$W/b" 2>&1; RC=$?
check "skip quiet, exit 0" bash -c "[ $RC = 0 ] && [ ! -s '$W/b' ]"
check "busy line names the holder" grep -q "is held by pid $A on $(hostname); waited 0.0 s; skipping this run" "$LOGF"
WAIT=30 bg $EXT "$W/job.php" 0 >/dev/null 2>&1; sleep 0.8
$CLI status --redis "redis://127.0.0.1:$PORT" --prefix cron: > "$W/st"; cat "$W/st"
check "status: held by the pid, 1 waiting" grep -qE "cron:sync +held +$A .* 1$" "$W/st"
T0=$(date +%s); redis-cli -p "$PORT" del cron:sync >/dev/null; wait $A; T1=$(date +%s); cat "$W/a.err"
check "deleted key reported on stderr within ~10 s" bash -c "grep -q 'was lost (at .*) while its job runs' '$W/a.err' && [ $((T1-T0)) -le 11 ]"
: > "$LOGF"; TTL=1 $EXT "$W/job.php" 3 2> "$W/t.err"; cat "$W/t.err"
check "expired \$ttl reported" grep -q 'was lost during the run' "$W/t.err"
bg $EXT "$W/job.php" 20 >/dev/null 2>&1; K=$LAST; sleep 0.7; kill -9 $K; sleep 0.3
$CLI status --redis "redis://127.0.0.1:$PORT" --prefix cron: > "$W/st2"; cat "$W/st2"
check "status after kill -9: ALIVE no, TTL shown" grep -qE "cron:sync +held +$K +$(hostname) +no .* [0-9]+ s" "$W/st2"
finish

#!/bin/bash
# The Redis server is stopped mid-job (not restarted). The job polls $guard->expired()/lost().
# When the hold runs out, the lost line gives as its reason "the key no longer holds this
# lock's token (taken, deleted, or expired unrenewed)" although no server could be asked: the
# real cause (renewals failing: connection refused) is never reported, and nothing is
# reported while renewals fail.
# Stub, Guard::lost(): "When and why the hold was lost".
. "$(dirname "$0")/lib.sh"
start_redis
cat > "$W/job.php" <<'PHP'
<?php
$ttl = getenv('TTL') ? (float)getenv('TTL') : null;
$lock = new CronLock\Redis('redis://127.0.0.1:' . getenv('PORT'), 'cron:sync', $ttl, $ttl ? ['auto_renew' => true] : []);
cron_guard(function ($g) { $t = microtime(true);
    while (microtime(true) - $t < (float)$GLOBALS['argv'][1]) { usleep(100000); $g->expired(); if ($g->lost()) break; }
}, $lock, ['log' => getenv('LOGF'), 'record' => 'runs']);
PHP
TTL=${TTL:-3}; export TTL    # TTL=  (empty) runs it with the default 30 s lease (takes ~35 s)
bg $EXT "$W/job.php" 40 > "$W/a.out" 2> "$W/a.err"; A=$LAST
sleep 1; echo "--- redis stopped at $(date -u +%T)"; stop_redis
wait $A
echo "--- stderr:"; cat "$W/a.err"; echo "--- log:"; cat "$LOGF"
check "the hold is reported lost" grep -q 'was lost' "$W/a.err"
check "the reason names the unreachable server, not a key that was looked at" \
      grep -qiE 'connect|refused|unreachable|could not be (renewed|reached)|renew(al)? failed' "$W/a.err"
finish

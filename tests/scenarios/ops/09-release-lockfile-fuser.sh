#!/bin/bash
# After cron_guard() returns, the lock file says "cronlock free since=..." and no process
# (fuser/lsof) has it open; while held it names the holder, and lsof shows the flock.
. "$(dirname "$0")/lib.sh"
cat > "$W/job.php" <<'PHP'
<?php
cron_guard(function () { sleep(2); }, 'rel', ['log' => getenv('LOGF')]);
file_put_contents(getenv('W') . '/released', '1'); sleep(3);
PHP
export W
bg $EXT "$W/job.php"; P=$LAST; F="$CRONLOCK_LOCK_DIR/rel.lock"
sleep 1; HELD=$(head -c 127 "$F"); LS=$(lsof -p $P 2>/dev/null | grep rel.lock)
for i in $(seq 50); do [ -e "$W/released" ] && break; sleep 0.1; done; sleep 0.2
FREE=$(head -c 127 "$F"); FU=$(fuser "$F" 2>/dev/null)
echo "--- held: $HELD"; echo "--- lsof: $LS"; echo "--- free: $FREE"; echo "--- fuser after release (process still alive): '$FU'"
check "held record names the pid" bash -c "[[ '$HELD' == 'cronlock pid=$P host=$(hostname) since='* ]]"
check "lsof shows the write lock while held" bash -c "echo '$LS' | grep -q 'W'"
check "released record says free" bash -c "[[ '$FREE' == 'cronlock free since='* ]]"
check "fuser lists nobody after release" test -z "$FU"
check "file is 128 bytes" test "$(stat -c %s "$F")" = 128
finish

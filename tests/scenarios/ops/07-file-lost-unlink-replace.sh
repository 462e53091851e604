#!/bin/bash
# Lock file unlinked / replaced mid-job: reported on stderr (cron mails it) and in 'log', with
# time and reason; during the job (Guard::renew() false) and at its end; record outcome=lost.
. "$(dirname "$0")/lib.sh"
cat > "$W/job.php" <<'PHP'
<?php
cron_guard(function ($g) { for ($i = 0; $i < 20; $i++) { usleep(100000); if (getenv('RENEW') && !$g->renew()) { echo "renew false: ", $g->lost(), "\n"; break; } } },
    'lost1', ['log' => getenv('LOGF'), 'record' => 'runs']);
PHP
bg $EXT "$W/job.php" > "$W/o" 2> "$W/e"; A=$LAST; sleep 0.6; rm "$CRONLOCK_LOCK_DIR/lost1.lock"; wait $A
echo "--- unlink, no Guard calls:"; cat "$W/e"
check "unlink: end-of-job lost line on stderr with reason" grep -qE 'was lost during the run \(at [0-9:]+Z: its lock file was removed\)' "$W/e"
check "unlink: record outcome=lost" grep -q 'outcome=lost' "$LOGF"
: > "$LOGF"; RENEW=1 bg $EXT "$W/job.php" > "$W/o" 2> "$W/e"; A=$LAST; sleep 0.6
echo x > "$CRONLOCK_LOCK_DIR/new"; mv "$CRONLOCK_LOCK_DIR/new" "$CRONLOCK_LOCK_DIR/lost1.lock"; wait $A
echo "--- replaced, Guard::renew():"; cat "$W/o" "$W/e"
check "replace: renew() false with reason" grep -q 'renew false: at .*its path names another file now' "$W/o"
check "replace: noticed-during-job line on stderr" grep -q 'was lost (at .*) while its job runs' "$W/e"
check "replace: line in log too" grep -q 'while its job runs' "$LOGF"
finish

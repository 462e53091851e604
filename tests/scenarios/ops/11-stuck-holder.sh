#!/bin/bash
# A job hung beyond max_runtime/stale_after: the next run's busy line says "it looks stuck"
# (warning), on_stale exits with its status, `cronlock status --stale-after` shows STATE stuck and exits 1.
. "$(dirname "$0")/lib.sh"
cat > "$W/job.php" <<'PHP'
<?php
$o = ['log' => getenv('LOGF'), 'max_runtime' => 1]; if (getenv('ONSTALE')) $o['on_stale'] = (int)getenv('ONSTALE');
cron_guard(function () { sleep((int)$GLOBALS['argv'][1]); }, 'hung', $o);
PHP
bg $EXT "$W/job.php" 8; sleep 3
$EXT "$W/job.php" 0; RC1=$?
ONSTALE=3 $EXT "$W/job.php" 0; RC2=$?
$CLI status --stale-after 2s > "$W/st"; RC3=$?; $CLI status --stale-after 1h > /dev/null; RC4=$?
$CLI status --stale-after 2s --json > "$W/js"; RC5=$?
cat "$LOGF" "$W/st"
check "busy line says it looks stuck (stale_after = 2 x max_runtime)" grep -q 'longer than stale_after (2 s): it looks stuck' "$LOGF"
check "plain skip exits 0, on_stale exits 3" test "$RC1:$RC2" = 0:3
check "status --stale-after 2s: STATE stuck, exit 1" bash -c "grep -qE '^  hung +stuck' '$W/st' && [ $RC3 = 1 ]"
check "status --stale-after 1h: exit 0" test $RC4 = 0
check "status --json: stuck 1, exit 1" bash -c "grep -q '\"stuck\": 1' '$W/js' && [ $RC5 = 1 ]"
finish

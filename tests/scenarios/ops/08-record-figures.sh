#!/bin/bash
# 'record' => 'runs': waited_ms / held_ms of a run that waited ~1.5 s and held ~1 s; JSON format keys.
. "$(dirname "$0")/lib.sh"
cat > "$W/job.php" <<'PHP'
<?php
$o = ['log' => getenv('LOGF'), 'record' => 'runs', 'record_format' => getenv('FMT') ?: 'text']; if (getenv('WAIT')) $o['wait'] = (float)getenv('WAIT');
cron_guard(function () { usleep((int)($GLOBALS['argv'][1] * 1e6)); }, 'rec', $o);
PHP
bg $EXT "$W/job.php" 2 >/dev/null 2>&1; A=$LAST; sleep 0.5
WAIT=10 $EXT "$W/job.php" 1; wait $A
FMT=json $EXT "$W/job.php" 0.3
cat "$LOGF"
L=$(grep 'outcome=ran' "$LOGF" | tail -1); Wm=$(echo "$L" | grep -o 'waited_ms=[0-9]*' | cut -d= -f2); Hm=$(echo "$L" | grep -o 'held_ms=[0-9]*' | cut -d= -f2)
check "waiter's waited_ms ~1500 (1200..1900): $Wm" test "$Wm" -ge 1200 -a "$Wm" -le 1900
check "waiter's held_ms ~1000 (950..1300): $Hm" test "$Hm" -ge 950 -a "$Hm" -le 1300
check "JSON record has the documented keys" bash -c "tail -1 '$LOGF' | sed 's/^[^{]*//' | php -r '\$j=json_decode(stream_get_contents(STDIN),true); exit(array_keys(\$j)==[\"time\",\"lock\",\"outcome\",\"waited_ms\",\"held_ms\",\"holder\"] && \$j[\"held_ms\"]>=300 && \$j[\"held_ms\"]<600 ? 0 : 1);'"
finish

#!/bin/bash
# cronlock run: command status passed through, 128+N for a signal, busy = 0 or --on-busy N, a
# direct child dies with a kill -9'd wrapper and the lock is free at once.
. "$(dirname "$0")/lib.sh"
$CLI run --lock r -- sh -c 'exit 3'; A=$?
$CLI run --lock r -- sh -c 'kill -TERM $$'; B=$?
bg $CLI run --lock r -- sleep 20.$$; WR=$LAST; sleep 1
$CLI run --lock r -- echo should-not-run > "$W/o"; C=$?
$CLI run --lock r --on-busy 7 -- true; D=$?
kill -9 $WR; wait $WR 2>/dev/null; sleep 0.5
LEFT=$(pgrep -f "^sleep 20.$$\$")
$CLI run --lock r -- true; E=$?
$CLI run --lock r -- ; F=$?
echo "exit 3 -> $A; SIGTERM -> $B; busy -> $C (stdout '$(cat "$W/o")'); --on-busy 7 -> $D; after kill -9 left='$LEFT' next run -> $E; no command -> $F"
check "status passthrough 3" test $A = 3
check "signal 143" test $B = 143
check "busy 0, nothing run" bash -c "[ $C = 0 ] && [ ! -s '$W/o' ]"
check "--on-busy 7" test $D = 7
check "direct child died with the wrapper; next run gets the lock" bash -c "[ -z '$LEFT' ] && [ $E = 0 ]"
check "missing command is a usage error (64)" test $F = 64
finish

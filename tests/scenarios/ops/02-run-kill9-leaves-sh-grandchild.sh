#!/bin/bash
# `cronlock run` killed with kill -9: the command's own grandchildren (the `sleep` of
# `sh -c 'sleep 30 && step2'`) keep running, orphaned, while the lock is already free: the
# next run starts beside the old job's work.
# README: "`run` holds the lock for the command's lifetime and takes the command with it when killed."
. "$(dirname "$0")/lib.sh"
D="30.$$"   # a unique duration identifies our sleep
bg $CLI run --lock backup -- sh -c "sleep $D && echo step2 > $W/step2"; WR=$LAST
sleep 1.5
echo "--- before: $(pgrep -a -f "^sleep $D\$")"
kill -9 $WR; wait $WR 2>/dev/null
sleep 1.5
ORPH=$(pgrep -f "^sleep $D\$")
echo "--- after kill -9 of the wrapper ($WR): left running: ${ORPH:-none} $( [ -n "$ORPH" ] && ps -o ppid= -p $ORPH | sed 's/^/ppid=/')"
$CLI status
for p in $ORPH; do PIDS+=($p); done          # ours: cleaned up at exit
$CLI run --lock backup -- true; echo "--- a new run while the old job's sleep lives: exit $?"
check "no process of the killed run's command is left running" test -z "$ORPH"
finish

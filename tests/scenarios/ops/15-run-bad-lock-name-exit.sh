#!/bin/bash
# `cronlock run --lock 'bad/name'`: an invalid argument exits 75 ("run could not use the lock")
# instead of 64. --help: "64 bad command line; ... 75 run could not use the lock".
. "$(dirname "$0")/lib.sh"
$CLI run --lock 'bad/name' -- true 2> "$W/e"; RC=$?
echo "exit $RC: $(cat "$W/e")"
check "invalid lock name is a bad command line (64)" test $RC = 64
finish

#!/bin/bash
# `cronlock run --lock NAME -- COMMAND` killed with TERM / kill -9: README "run holds the lock for the command's
# lifetime and takes the command with it when killed". Check: no COMMAND survives its run (else the next run
# overlaps it), next run not blocked; status shows the holder while held. Extension and polyfill.
. "$(dirname "$0")/lib.sh"
mkdir -m 700 $T/l; export CRONLOCK_LOCK_DIR=$T/l
CLI=$PKG/cli/bin/cronlock
cat > $T/cmd.sh <<'SH'
#!/bin/bash
echo "S $$ $(date +%s.%N)" >> "$1"
trap '' TERM    # a command that ignores SIGTERM (as many do while finishing work)
for i in $(seq 1 80); do sleep 0.1; done
echo "E $$ $(date +%s.%N)" >> "$1"
SH
chmod +x $T/cmd.sh
for impl in ext poly; do
  P="php"; [ $impl = ext ] && P="$PHPX"
  for sig in TERM KILL; do
    : > $T/j
    $P $CLI run --lock clirun -- $T/cmd.sh $T/j > $T/o1 2>&1 & r1=$!
    for i in $(seq 1 50); do grep -q ^S $T/j && break; sleep 0.1; done
    st=$($P $CLI status 2>&1); echo "[$impl] status while held:"; echo "$st" | sed 's/^/    /'
    echo "$st" | grep -q clirun || fail "$impl: status does not list the held lock"
    kill -$sig $r1; wait $r1; rc1=$?
    sleep 0.3
    cmdpid=$(awk '$1=="S"{print $2; exit}' $T/j)
    # a zombie (killed, not yet reaped by init) is not alive; a killed command writes no E line
    alive=no
    if kill -0 $cmdpid 2>/dev/null && [ "$(awk '{print $3}' /proc/$cmdpid/stat 2>/dev/null)" != Z ]; then alive=yes; fi
    [ $alive = yes ] || grep -q "^E $cmdpid " $T/j || echo "E $cmdpid killed" >> $T/j
    t0=$(date +%s.%N)
    $P $CLI run --lock clirun -- $T/cmd.sh $T/j > $T/o2 2>&1 & r2=$!
    sleep 1.5
    max=$(check_journal $T/j)
    echo "[$impl $sig] first run rc=$rc1, its command (pid $cmdpid) alive after the kill: $alive; max concurrency: $max"
    [ "$max" = 1 ] || fail "$impl kill -$sig of cronlock run: its command survived and the next run overlapped it"
    kill -KILL $r2 2>/dev/null; wait $r2 2>/dev/null
    for p in $(awk '$1=="S"{print $2}' $T/j); do kill -KILL $p 2>/dev/null; done
    sleep 0.2
  done
done
finish

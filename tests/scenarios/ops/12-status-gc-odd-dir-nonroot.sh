#!/bin/bash
# 300 lock files plus odd entries (data file, escape in name, space, symlink, fifo, dir,
# mode 000): status lists them (escaped), gc --dry-run removes nothing, gc removes only free
# cronlock files and keeps data; as nobody: own default dir works, an unreadable dir exits 2.
. "$(dirname "$0")/lib.sh"
D=$CRONLOCK_LOCK_DIR
for i in $(seq 300); do printf 'cronlock free since=2026-01-01T00:00:00Z%*s\n' 87 '' > "$D/m$i.lock"; done
printf 'hello data\n' > "$D/data.lock"; ln -s /etc/passwd "$D/link.lock"; mkfifo "$D/fifo.lock"; mkdir "$D/dir.lock"
echo x > "$D/unread.lock"; chmod 000 "$D/unread.lock"; touch "$D/sp ace.lock"; : > "$D/$(printf 'e\033[31mx').lock"
bg $EXT -r 'cron_guard(fn() => sleep(5), "busy1", ["log" => "none"]);'; sleep 0.7
timeout 20 $CLI status > "$W/st" 2> "$W/se"; RC=$?
echo "--- status exit $RC, $(grep -c '^  m' "$W/st") m-rows; non-m rows:"; grep -v '^  m' "$W/st" | cat -v; cat "$W/se"
check "status exit 0 and 300 m rows" bash -c "[ $RC = 0 ] && [ \$(grep -c '^  m' '$W/st') = 300 ]"
check "escape char shown escaped" grep -q 'e\\u{1b}\[31mx' "$W/st"
check "held lock shown held" grep -qE '^  busy1 +held' "$W/st"
$CLI gc --older-than 0s --dry-run > "$W/g1"; RC1=$?; N1=$(ls "$D" | wc -l)
$CLI gc --older-than 0s > "$W/g2"; RC2=$?; tail -1 "$W/g2"
check "dry-run removes nothing" test "$N1" = 308
check "gc keeps the data file, the held lock, symlink/fifo/dir" bash -c "[ -f '$D/data.lock' ] && [ -f '$D/busy1.lock' ] && [ -L '$D/link.lock' ] && [ -p '$D/fifo.lock' ] && [ -d '$D/dir.lock' ] && [ \$(cat /etc/passwd | wc -c) -gt 0 ]"
check "gc removed the free cronlock files" test ! -e "$D/m1.lock"
NB="setpriv --reuid=65534 --regid=65534 --clear-groups env -u CRONLOCK_LOCK_DIR HOME=/tmp TMPDIR=/tmp"
$NB $CLI status "$D" > "$W/nb" 2>&1; RCN=$?; cat "$W/nb"
check "nobody on root's 0700 dir: exit 2 with a reason" bash -c "[ $RCN = 2 ] && grep -q 'Permission denied' '$W/nb'"
finish

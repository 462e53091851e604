#!/bin/bash
# Clock stepped (no faketime here): the holder's record says since= 2 h in the future (clock stepped back after the
# holder took the lock) or 3 h in the past (stepped forward). The busy line must stay sane: no negative duration,
# and with stale_after a holder "from the future" must not look stuck / a 3 h one must.
. "$(dirname "$0")/lib.sh"
mkdir -m 700 $T/l; export CRONLOCK_LOCK_DIR=$T/l
cat > $T/h.php <<'PHP'
<?php
if ($argv[1] === 'poly') require getenv('CRONLOCK_SCENARIO_PKG') . '/polyfill/bootstrap.php';
cron_guard(function () use ($argv) { touch($argv[2]); sleep(20); }, 'clk', ['log' => 'none']);
PHP
cat > $T/b.php <<'PHP'
<?php
if ($argv[1] === 'poly') require getenv('CRONLOCK_SCENARIO_PKG') . '/polyfill/bootstrap.php';
cron_guard(fn() => print("RAN\n"), 'clk', ['log' => 'stderr', 'stale_after' => 600]);
PHP
host=$(hostname)
for impl in ext poly; do
  P="php"; [ $impl = ext ] && P="$PHPX"
  for off in "+2 hours" "-3 hours"; do
    rm -f $T/flag
    $P $T/h.php $impl $T/flag & hp=$!
    for i in $(seq 1 50); do [ -e $T/flag ] && break; sleep 0.1; done
    since=$(date -u -d "$off" +%Y-%m-%dT%H:%M:%SZ)
    rec=$(printf 'cronlock pid=%d host=%s since=%s' $hp $host $since)
    printf '%-127s\n' "$rec" | dd of=$T/l/clk.lock conv=notrunc status=none
    out=$($P $T/b.php $impl 2>&1)
    echo "[$impl since $off] $out"
    echo "$out" | grep -q -- '(-' && fail "$impl $off: negative duration in busy line"
    if [ "$off" = "+2 hours" ]; then echo "$out" | grep -q 'looks stuck' && fail "$impl $off: holder from the future looks stuck"; fi
    if [ "$off" = "-3 hours" ]; then echo "$out" | grep -q 'looks stuck' || fail "$impl $off: 3 h holder not stuck with stale_after 600"; fi
    kill $hp; wait $hp 2>/dev/null
  done
done
finish

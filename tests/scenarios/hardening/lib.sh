# common helpers for cronlock hardening scenarios
set -u
PKG="${CRONLOCK_SCENARIO_PKG:?run me through tests/scenarios/run}"
EXT="-d extension=$PKG/cronlock.so"
POLY=$PKG/polyfill/bootstrap.php
PHPX="php $EXT"
T=$(mktemp -d ${TMPBASE:-/tmp}/cl-hard.XXXXXX)
chmod 755 "$T"
STARTED_PIDS=()
cleanup() {
  for p in "${STARTED_PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null; done
  for p in "${STARTED_PIDS[@]:-}"; do [ -n "$p" ] && wait "$p" 2>/dev/null; done
  rm -rf "$T"
}
trap cleanup EXIT
FAIL=0
fail() { echo "FAIL: $*"; FAIL=1; }
ok() { echo "ok: $*"; }
finish() { if [ $FAIL -ne 0 ]; then echo "RESULT: BUG"; exit 1; else echo "RESULT: PASS"; exit 0; fi; }
start_redis() {
  mkdir -p "$T/redis"
  redis-server --port 0 --unixsocket "$T/redis/r.sock" --unixsocketperm 777 --save '' --appendonly no --dir "$T/redis" --daemonize no >"$T/redis/log" 2>&1 &
  REDIS_PID=$!
  STARTED_PIDS+=("$REDIS_PID")
  for i in $(seq 1 50); do [ -S "$T/redis/r.sock" ] && break; sleep 0.1; done
  REDIS_DSN="unix://$T/redis/r.sock"
}
rcli() { redis-cli -s "$T/redis/r.sock" "$@"; }
# journal overlap check: lines "S pid t" / "E pid t" appended with flock-free O_APPEND
check_journal() { # file -> prints max concurrency
  awk '{ if ($1=="S") {c++; if (c>m) m=c} else if ($1=="E") c-- } END { print m+0 }' "$1"
}

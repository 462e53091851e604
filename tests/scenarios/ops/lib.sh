# Shared helpers for the cronlock operator scenarios. Source it; never run it.
# Everything runs in a private temp dir; only processes started here are stopped (by pid).
set -u
PKG="${CRONLOCK_SCENARIO_PKG:?run me through tests/scenarios/run}"
EXT="php -d extension=$PKG/cronlock.so"
CLI="$EXT $PKG/cli/bin/cronlock"
W=$(mktemp -d /tmp/cronlock-ops.XXXXXX); chmod 700 "$W"
mkdir -m 700 "$W/locks"
export CRONLOCK_LOCK_DIR="$W/locks"
unset CRONLOCK_LOG CRONLOCK_RECORD CRONLOCK_RECORD_FORMAT
export LOGF="$W/cron.log"; : > "$LOGF"
PIDS=()
REDIS_PID=
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null; done
  [ -n "$REDIS_PID" ] && kill "$REDIS_PID" 2>/dev/null
  sleep 0.2
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null; done
  [ -n "$REDIS_PID" ] && kill -9 "$REDIS_PID" 2>/dev/null
  rm -rf "$W"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
start_redis() {  # start_redis [port]
  export PORT=${1:-${PORT:-$(free_port)}}
  mkdir -p "$W/redis"
  redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$W/redis" \
      --logfile "$W/redis/log" --daemonize no >/dev/null 2>&1 &
  REDIS_PID=$!
  for i in $(seq 50); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "redis did not start" >&2; exit 2
}
stop_redis() { kill "$REDIS_PID"; wait "$REDIS_PID" 2>/dev/null; REDIS_PID=; }
bg() { "$@" & PIDS+=($!); LAST=$!; }   # start in background, remember pid
FAIL=0
check() {  # check "description" command...
  local d=$1; shift
  if "$@"; then echo "ok   - $d"; else echo "FAIL - $d"; FAIL=1; fi
}
finish() { exit $FAIL; }

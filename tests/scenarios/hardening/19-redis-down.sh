#!/bin/bash
# Redis not reachable / stopped server: "a failure is never taken for busy": ConnectionException, job not run,
# cron_guard does not return null; with 'wait' 1.5 it retries until the deadline then throws (bounded time).
. "$(dirname "$0")/lib.sh"
start_redis
cat > $T/j.php <<'PHP'
<?php
if ($argv[1] === 'poly') require getenv('CRONLOCK_SCENARIO_PKG') . '/polyfill/bootstrap.php';
$t = microtime(true);
try {
  $r = cron_guard(fn() => 'RAN', new CronLock\Redis($argv[2], 'cron:down', null, ['connect_timeout' => 0.5, 'read_timeout' => 0.5]), ['wait' => (float)$argv[3], 'log' => 'stderr']);
  echo "returned ", var_export($r, true);
} catch (Throwable $e) { echo get_class($e), ': ', $e->getMessage(); }
printf(" [%.2f s]\n", microtime(true) - $t);
PHP
for impl in ext poly; do
  P="php"; [ $impl = ext ] && P="$PHPX"
  for dsn in redis://127.0.0.1:1 unix://$T/nosuch.sock; do
    for w in 0 1.5; do
      out=$(timeout 20 $P $T/j.php $impl $dsn $w 2>&1); echo "[$impl $dsn wait=$w] $out"
      echo "$out" | grep -q '^CronLock.ConnectionException: ' || fail "$impl $dsn wait=$w: not a ConnectionException"
    done
  done
  kill -STOP $REDIS_PID
  out=$(timeout 20 $P $T/j.php $impl $REDIS_DSN 0 2>&1); echo "[$impl stopped server] $out"
  kill -CONT $REDIS_PID
  echo "$out" | grep -q '^CronLock.ConnectionException: ' || fail "$impl stopped server: not a ConnectionException"
  t=$(echo "$out" | sed -n 's/.*\[\([0-9.]*\) s\]/\1/p'); awk "BEGIN{exit !($t < 3)}" || fail "$impl stopped server: took $t s"
  rcli del cron:down >/dev/null
done
finish

<?php
/**
 * bench/run's Redis topologies beyond the single server: three independent
 * masters (Redlock), a master with a replica and three sentinels, a
 * 3-master cluster — started with the test suite's RedisTopology (free
 * loopback ports, temp dirs). Prints shell assignments for bench.php's
 * environment, then waits for SIGTERM and stops every server by pid.
 */

declare(strict_types=1);

require __DIR__ . '/../php-tests/Support/RedisHarness.php';
require __DIR__ . '/../php-tests/Support/RedisServer.php';
require __DIR__ . '/../php-tests/Support/RedisTopology.php';

use CronLock\Tests\Support\RedisTopology;

$redlock = RedisTopology::masters(3);
$sentinel = RedisTopology::sentinel(1);
$cluster = RedisTopology::cluster();
$ports = static fn (array $servers): string => implode(',', array_map(static fn ($s) => $s->port(), $servers));
$owner = null;
foreach ($cluster->servers as $node) {
    try {
        $node->command('EXISTS', 'bench:cronlock');
        $owner = $node->port();
    } catch (RuntimeException) {
    }
}
printf("BENCH_REDLOCK_PORTS=%s\n", $ports($redlock->servers));
printf("BENCH_SENTINEL_DSN=%s\n", $sentinel->dsn());
printf("BENCH_SENTINEL_PORTS=%s\n", $ports($sentinel->sentinels));
printf("BENCH_SENTINEL_MASTER_PORT=%d\n", $sentinel->master()->port());
printf("BENCH_CLUSTER_DSN=%s\n", $cluster->dsn());
printf("BENCH_CLUSTER_OWNER_PORT=%d\n", $owner);
echo "READY\n";
fflush(STDOUT);

$stop = false;
pcntl_async_signals(true);
pcntl_signal(SIGTERM, static function () use (&$stop): void { $stop = true; });
while (!$stop) {
    usleep(100_000);
}
foreach ([$redlock, $sentinel, $cluster] as $topology) {
    $topology->stop();
}

<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\ConnectionException;
use CronLock\Redis;
use CronLock\Tests\Support\RedisTopology;
use PHPUnit\Framework\TestCase;

/**
 * Redis Cluster calls against a stalled cluster and a cluster that is being
 * resharded carelessly (a real 3-master cluster of our own, RedisTopology):
 * one call is bounded by read_timeout + connect_timeout + read_timeout in
 * all, however many seeds it walks; a redirect loop is ridden out by a wait.
 *
 * @group extension-only
 * cronlock/polyfill has no Cluster support.
 */
final class ClusterTimeoutsTest extends TestCase
{
    private static ?RedisTopology $cluster = null;

    public static function setUpBeforeClass(): void
    {
        self::$cluster = RedisTopology::cluster();
    }

    public static function tearDownAfterClass(): void
    {
        self::$cluster?->stop();
        self::$cluster = null;
    }

    /**
     * Every node SIGSTOPped (a VM pause) and more seeds that accept TCP but
     * never answer: a call costs one budget (here 0.75 s), not a timeout per
     * seed (13 seeds: more than 3 s), and so does the release of a held key
     * when the object goes away at the end of the request.
     */
    public function testAStalledClusterCostsOneBudgetPerCallWhateverTheSeeds(): void
    {
        $silent = [];
        for ($i = 0; $i < 10; $i++) {
            $silent[] = stream_socket_server('tcp://127.0.0.1:0');
        }
        $seeds = array_map(static fn ($socket) => stream_socket_get_name($socket, false), $silent);
        $dsn = self::$cluster->dsn() . ',' . implode(',', $seeds);
        $options = ['connect_timeout' => 0.25, 'read_timeout' => 0.25];
        $key = 'stalled-' . bin2hex(random_bytes(4));
        $held = new Redis($dsn, $key, 30.0, $options);
        self::assertTrue($held->acquire(0));
        $other = new Redis($dsn, "$key-other", 30.0, $options);
        $pids = array_map(static fn ($server) => $server->pid(), self::$cluster->servers);
        foreach ($pids as $pid) {
            posix_kill($pid, SIGSTOP);
        }
        try {
            $t0 = microtime(true);
            try {
                $other->acquire(0);
                self::fail('a stalled cluster cannot grant the lock');
            } catch (ConnectionException) {
            }
            $acquireTook = microtime(true) - $t0;
            $t0 = microtime(true);
            try {
                self::assertFalse($held->renew(), 'unreachable');
            } catch (ConnectionException) {
            }
            $renewTook = microtime(true) - $t0;
            $t0 = microtime(true);
            unset($held, $other);
            $dropTook = microtime(true) - $t0;
        } finally {
            foreach ($pids as $pid) {
                posix_kill($pid, SIGCONT);
            }
        }
        fwrite(STDERR, sprintf("\n[stalled cluster] acquire(0) %.2f s, renew() %.2f s, end of both objects %.2f s\n", $acquireTook, $renewTook, $dropTook));
        // The budget is 0.75 s a call; walking 13 seeds at 0.25 s each is over 3 s.
        self::assertLessThan(2.0, $acquireTook, 'acquire(0): one budget, not one timeout per seed');
        self::assertLessThan(2.0, $renewTook, 'renew(): one budget');
        self::assertLessThan(3.0, $dropTook, 'releasing both at the end: one budget each');
        foreach ($silent as $socket) {
            fclose($socket);
        }
    }
}

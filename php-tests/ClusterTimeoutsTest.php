<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\ConnectionException;
use CronLock\Redis;
use CronLock\Tests\Support\Proc;
use CronLock\Tests\Support\RedisServer;
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

    /**
     * A slot moved with SETSLOT NODE sent to the source first: for a while
     * the source says MOVED to the target and the target (still importing)
     * MOVED back. A waiter's acquire(20) rides it out and takes the lock once
     * the holder releases; the holder's renew() in that window retries within
     * its budget, then throws a message that says what happens (never "use a
     * redis-cluster:// DSN"), and renews once the nodes agree.
     */
    public function testARedirectLoopDuringReshardingIsRiddenOut(): void
    {
        $key = 'reshard-' . bin2hex(random_bytes(4));
        $nodes = self::$cluster->servers;
        $slot = (string) $nodes[0]->command('CLUSTER', 'KEYSLOT', $key);
        $owner = static function (RedisServer $asked) use ($slot): int {
            foreach ($asked->command('CLUSTER', 'SLOTS') as [$from, $to, [, $port]]) {
                if ((int) $slot >= $from && (int) $slot <= $to) {
                    return (int) $port;
                }
            }
            throw new \RuntimeException("nobody owns slot $slot");
        };
        $byPort = [];
        foreach ($nodes as $node) {
            $byPort[$node->port()] = $node;
        }
        $src = $byPort[$owner($nodes[0])];
        $dst = $src === $nodes[0] ? $nodes[1] : $nodes[0];
        $id = static fn (RedisServer $node) => (string) $node->command('CLUSTER', 'MYID');

        $holder = new Redis(self::$cluster->dsn(), $key, 30.0, ['connect_timeout' => 0.3, 'read_timeout' => 0.3]);
        self::assertTrue($holder->acquire(0));
        $waiter = Proc::start(<<<'PHP'
            $lock = new CronLock\Redis($argv[1], $argv[2], 30.0);
            echo "WAITING\n";
            $t0 = microtime(true);
            try {
                $got = var_export($lock->acquire(20.0), true);
            } catch (Throwable $e) {
                $got = get_class($e) . ': ' . $e->getMessage();
            }
            printf("GOT %s after %.2f s\n", $got, microtime(true) - $t0);
            if ($lock->isHeld()) {
                $lock->release();
            }
            PHP, [self::$cluster->dsn(), $key]);
        $waiter->waitForLine('WAITING', 15.0, 'stdout');
        usleep(300_000);
        try {
            $dst->command('CLUSTER', 'SETSLOT', $slot, 'IMPORTING', $id($src));
            $src->command('CLUSTER', 'SETSLOT', $slot, 'MIGRATING', $id($dst));
            $src->command('MIGRATE', '127.0.0.1', (string) $dst->port(), '', '0', '5000', 'KEYS', "{{$key}}:fence", $key);
            // the careless order: the source first
            $src->command('CLUSTER', 'SETSLOT', $slot, 'NODE', $id($dst));
            try {
                $renewed = var_export($holder->renew(), true);
            } catch (ConnectionException $e) {
                $renewed = $e->getMessage();
            }
            usleep(700_000);
        } finally {
            foreach ($nodes as $node) {
                $node->command('CLUSTER', 'SETSLOT', $slot, 'NODE', $id($dst));
            }
        }
        fwrite(STDERR, "\n[redirect loop] holder renew(): $renewed\n");
        self::assertStringNotContainsString('use a redis-cluster:// DSN', $renewed);
        self::assertStringContainsString('kept redirecting', $renewed, 'renew() in the loop says what happens');
        self::assertTrue($holder->renew(), 'once the nodes agree, the moved key is still ours');
        self::assertTrue($holder->release());
        $line = $waiter->waitForLine('GOT', 30.0, 'stdout');
        fwrite(STDERR, "[redirect loop] waiter: $line\n");
        self::assertStringStartsWith('GOT true', $line, 'the waiter rode the loop out and got the lock');
        self::assertSame(0, $waiter->wait());
    }
}

<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\ConnectionException;
use CronLock\Guard;
use CronLock\Redis;
use CronLock\Tests\Support\RedisServer;
use CronLock\Tests\Support\RedisTopology;
use PHPUnit\Framework\TestCase;

/**
 * Redlock with a minority of its masters stopped (SIGSTOP): the lock is
 * taken, kept and given back by the majority, and no call waits for the
 * stopped masters beyond what the validity time allows.
 *
 * @group extension-only
 * cronlock/polyfill talks to one Redis server only (no Redlock).
 */
final class RedlockStalledMastersTest extends TestCase
{
    private ?RedisTopology $topology = null;

    /** @var list<int> */
    private array $stopped = [];

    protected function tearDown(): void
    {
        $this->resume();
        $this->topology?->stop();
        $this->topology = null;
        parent::tearDown();
    }

    /** @return list<RedisServer> */
    private function masters(int $count): array
    {
        $this->topology = RedisTopology::masters($count);
        return $this->topology->servers;
    }

    /** @param list<RedisServer> $masters */
    private function stop(array $masters): void
    {
        foreach ($masters as $master) {
            posix_kill($master->pid(), SIGSTOP);
            $this->stopped[] = $master->pid();
        }
    }

    private function resume(): void
    {
        foreach ($this->stopped as $pid) {
            posix_kill($pid, SIGCONT);
        }
        $this->stopped = [];
    }

    /** @return iterable<string, array{int, int}> */
    public static function minorities(): iterable
    {
        yield '2 of 5 stopped' => [5, 2];
        yield '1 of 3 stopped' => [3, 1];
    }

    /**
     * F01: with the default read_timeout (1 s) longer than the TTL's third,
     * a renewal that waited for the stopped masters came back after the
     * hold had run out: isHeld() flapped, token() went null, release() was
     * false while the key was ours on the majority all along.
     *
     * @dataProvider minorities
     */
    public function testAutoRenewKeepsTheHoldWhileAMinorityIsStopped(int $count, int $stopped): void
    {
        $masters = $this->masters($count);
        $dsns = array_map(static fn (RedisServer $m) => $m->dsn(), $masters);
        $name = 'redlock-stalled-renew';
        $lock = new Redis($dsns, $name, 1.2, ['auto_renew' => true]);

        $outcome = cron_guard(function (Guard $guard) use ($lock, $masters, $stopped, $name): array {
            $token = $lock->token();
            $this->stop(array_slice($masters, -$stopped));
            $samples = [];
            // Three TTLs: each renewal meets the stopped masters.
            $until = microtime(true) + 3.6;
            while (microtime(true) < $until) {
                usleep(100_000);
                $samples[] = $lock->isHeld() && $lock->token() === $token;
            }
            $renewed = $guard->renew();
            $live = array_map(static fn (RedisServer $m) => $m->command('GET', $name), array_slice($masters, 0, -$stopped));
            return [$samples, $renewed, $live, $token];
        }, $lock);

        [$samples, $renewed, $live, $token] = $outcome;
        self::assertNotContains(false, $samples, 'isHeld() and token() stay while a majority confirms: ' . json_encode($samples));
        self::assertTrue($renewed, 'Guard::renew() is true while a majority confirms');
        self::assertSame(array_fill(0, $count - $stopped, $token), $live, 'the key is ours on every live master');
        self::assertFalse($lock->isHeld(), 'cron_guard() released it');
        foreach (array_slice($masters, 0, -$stopped) as $master) {
            self::assertSame(0, $master->command('EXISTS', $name), 'released on the live masters');
        }
    }

    /** @dataProvider minorities */
    public function testRenewAndReleaseAreTrueAndDoNotWaitPastTheValidity(int $count, int $stopped): void
    {
        $masters = $this->masters($count);
        $dsns = array_map(static fn (RedisServer $m) => $m->dsn(), $masters);
        // read_timeout far beyond the TTL: only the validity bounds the wait.
        $lock = new Redis($dsns, 'redlock-stalled-manual', 1.0, ['read_timeout' => 6.0, 'connect_timeout' => 6.0]);
        self::assertTrue($lock->acquire(0));
        $this->stop(array_slice($masters, -$stopped));
        for ($i = 0; $i < 4; $i++) {
            $started = microtime(true);
            self::assertTrue($lock->renew(), "renewal $i: a majority confirms");
            // Generous: the point is "not read_timeout", not a tight bound.
            self::assertLessThan(5.0, microtime(true) - $started, 'renew() does not wait for the stopped masters');
            self::assertTrue($lock->isHeld(), "held after renewal $i");
        }
        $started = microtime(true);
        self::assertTrue($lock->release(), 'true when held, whatever the minority answered');
        self::assertLessThan(5.0, microtime(true) - $started, 'release() does not wait for the stopped masters');
        self::assertFalse($lock->isHeld());
    }

    /**
     * F07: the stopped masters' timeouts used up the validity of a 0.4 s
     * TTL, and the attempt was reported as contention (cron_guard():
     * "held by another process") for a key nobody held.
     */
    public function testAFreeKeyIsTakenWhileAMinorityIsStopped(): void
    {
        $masters = $this->masters(5);
        $dsns = array_map(static fn (RedisServer $m) => $m->dsn(), $masters);
        $this->stop(array_slice($masters, 3));
        // 1 s: the stopped masters' connect_timeout (1 s) used to eat all of
        // it; half of it is left for the live masters on a busy machine.
        $lock = new Redis($dsns, 'redlock-stalled-take', 1.0);
        self::assertTrue($lock->acquire(0), 'three of five masters granted in time');
        self::assertTrue($lock->release());
        self::assertSame('RAN', cron_guard(static fn () => 'RAN', $lock, ['wait' => 3]));
    }

    public function testTooFewMastersInTimeIsAConnectionExceptionNotContention(): void
    {
        $masters = $this->masters(5);
        $dsns = array_map(static fn (RedisServer $m) => $m->dsn(), $masters);
        $this->stop(array_slice($masters, 2));
        $lock = new Redis($dsns, 'redlock-stalled-majority', 0.4);
        try {
            $lock->acquire(0);
            self::fail('three of five masters stopped: expected ConnectionException');
        } catch (ConnectionException $e) {
            // (3, or more on a machine too busy for the live ones to answer)
            self::assertMatchesRegularExpression(
                '/[345] of the 5 Redis masters did not answer within 197 ms \\(the share of the lock\'s validity time a call may wait\\), and a majority \\(3\\) must/',
                $e->getMessage(),
            );
        }
        self::assertFalse($lock->isHeld());
    }
}

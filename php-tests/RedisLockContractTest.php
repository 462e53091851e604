<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\Tests\Support\OncePerContract;
use CronLock\Lock;
use CronLock\Redis;
use CronLock\Tests\Support\RedisTestHelpers;
use CronLock\Tests\Support\WebAssembly;

/**
 * The CronLock\Lock contract for CronLock\Redis: one private redis-server for
 * the class, a unique key per test (uniqueName()).
 *
 * Locks made here live TTL seconds without renewal, so a kill -9'd holder
 * frees its key at most TTL later. The child processes' locks (holders, the
 * fork test, the 8 contending processes) auto-renew, so a child that holds
 * the lock for longer than TTL on a busy machine keeps it, and kill -9 of an
 * auto-renewing holder is what the kill tests exercise.
 */
final class RedisLockContractTest extends LockContractTestCase
{
    use OncePerContract;
    use RedisTestHelpers;

    /**
     * The test process's own locks are not renewed: 3 s outlast the child PHP processes a
     * test starts while it holds one, also with the test command's suites side by side on a
     * loaded machine (1 s ran out there, and release() then said false).
     */
    private const TTL = 3.0;

    /**
     * TTL; 5 s on PHP on WebAssembly, where a child needs about 2 s to start
     * and take an auto-renewing lock (PHP, then its renew helper, about 1 s
     * each), which outlived the test process's own 1 s locks.
     */
    private static function ttl(): float
    {
        return WebAssembly::active() ? 5.0 : self::TTL;
    }

    /** @var array<string, Redis> one reused probe per key (one connection, not one per poll) */
    private array $probes = [];

    protected function tearDown(): void
    {
        foreach ($this->probes as $probe) {
            if ($probe->isHeld()) {
                $probe->release();
            }
        }
        $this->probes = [];
        parent::tearDown();
    }

    private static function dsn(): string
    {
        return self::$server->dsn();
    }

    protected function createLock(string $name): Lock
    {
        return new Redis(self::dsn(), $name, self::ttl());
    }

    protected function lockIsFreeForOthers(string $name): bool
    {
        $probe = $this->probes[$name] ??= new Redis(self::dsn(), $name, self::ttl());
        if (!$probe->acquire(0)) {
            return false;
        }
        self::assertTrue($probe->release(), 'the probe releases what it just took');
        return true;
    }

    protected function createLockCode(string $name): string
    {
        return self::lockCode(self::dsn(), $name, self::ttl(), ['auto_renew' => true]);
    }

    protected function secondsUntilFreeAfterHolderDies(): float
    {
        return self::ttl();
    }

    public function testTheKeyIsTheNameAndHoldsTheToken(): void
    {
        // Not part of the shared contract: ties the contract's "same lock"
        // to the Redis key, so the tests above really share one key.
        $name = $this->uniqueName();
        $lock = $this->createLock($name);
        self::assertInstanceOf(Redis::class, $lock);
        self::assertSame($name, $lock->key());
        self::assertTrue($lock->acquire(0));
        self::assertSame($lock->token(), self::raw('GET', $name));
        self::assertTrue($lock->release());
        self::assertSame(0, self::raw('EXISTS', $name));
    }
}

<?php

declare(strict_types=1);

namespace CronLock\Tests\Frameworks;

use CronLock\Tests\Support\RedisServer;

/**
 * onOneServer() on the redis backend: the two hosts share a redis-server of
 * the test's own, for cronlock and for the applications' cache store. Until
 * CronLock\Redis has claim(), the tick is claimed by Laravel's
 * CacheSchedulingMutex on that cache store (Locks::claimsTicks()); the
 * withoutOverlapping() lock both hosts share lets the next tick run within
 * the lease after a kill -9 of the winner, not a day later.
 */
final class LaravelRedisOnOneServerTest extends LaravelOnOneServerTestCase
{
    private ?RedisServer $redis = null;

    protected function tearDown(): void
    {
        parent::tearDown();
        $this->redis = null;
    }

    protected function claimsWithCronlock(): bool
    {
        return method_exists(\CronLock\Redis::class, 'claim');
    }

    protected function hostEnv(): array
    {
        return ['FIXTURE_CACHE' => 'redis', 'FIXTURE_REDIS_PORT' => (string) $this->redis->port()];
    }

    protected function cronlockConfig(string $base): array
    {
        return ['backend' => 'redis', 'dsn' => $this->redis->dsn(), 'ttl' => 5.0, 'prefix' => 'shop:'];
    }

    protected function setUp(): void
    {
        parent::setUp();
        $this->redis = RedisServer::start();
    }

    protected function claimsExpiredBefore(float $t, array $config): int
    {
        // Redis expires keys itself: what could stay is a key without a TTL, one per tick.
        $perTick = 0;
        foreach ((array) $this->redis->command('KEYS', '*') as $key) {
            if ((int) $this->redis->command('PTTL', $key) === -1 && substr((string) $key, -6) !== ':fence') {
                $perTick++;
            }
        }
        return $perTick;
    }

    protected function recoversOnTheNextTick(): bool
    {
        return false; // the killed winner's key lives until its lease ends
    }
}

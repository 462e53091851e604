<?php

declare(strict_types=1);

namespace CronLock\Tests\Frameworks;

use CronLock\Tests\Support\RedisServer;

/**
 * onOneServer() on the redis backend: the two hosts share a redis-server of
 * the test's own, whose claim keys (Redis::claim()) decide each tick; each
 * application keeps its own file cache, so nothing but the claim decides.
 * What may stay on the server after the run: keys with a TTL only (claims,
 * fencing counters), never one without.
 */
final class LaravelRedisOnOneServerTest extends LaravelOnOneServerTestCase
{
    /** On both implementations: each has its own Redis::claim() (the polyfill's claim.lua). */
    public function testEachTickRunsOnExactlyOneHost(): void
    {
        $this->assertEachTickRunsOnExactlyOneHost();
    }

    private ?RedisServer $redis = null;

    protected function setUp(): void
    {
        parent::setUp();
        $this->redis = RedisServer::start();
    }

    protected function tearDown(): void
    {
        parent::tearDown();
        $this->redis = null;
    }

    protected function cronlockConfig(string $base): array
    {
        return ['backend' => 'redis', 'dsn' => $this->redis->dsn(), 'ttl' => 3.0, 'prefix' => 'shop:'];
    }

    protected function claimsExpiredBefore(float $t, array $config): int
    {
        // Redis expires keys itself: what could stay behind is a key without a TTL.
        $forever = 0;
        foreach ((array) $this->redis->command('KEYS', '*') as $key) {
            if ((int) $this->redis->command('PTTL', (string) $key) === -1) {
                $forever++;
            }
        }
        return $forever;
    }

    protected function recoversOnTheNextTick(): bool
    {
        return false; // the killed winner's key lives until its TTL ends
    }
}

<?php

declare(strict_types=1);

namespace CronLock\Tests\Frameworks;

use CronLock\Tests\Support\RedisServer;

/**
 * LaravelOverlapTestCase on the redis backend, a redis-server of the test's
 * own. A killed holder's key lives until its TTL (3 s here, renewed every
 * third of it while the holder lives), so the tick that runs the job again
 * comes within that bound, not at once.
 */
final class LaravelRedisOverlapTest extends LaravelOverlapTestCase
{
    private static ?RedisServer $redis = null;

    public static function setUpBeforeClass(): void
    {
        parent::setUpBeforeClass();
        self::$redis = RedisServer::start();
    }

    public static function tearDownAfterClass(): void
    {
        self::$redis = null;
        parent::tearDownAfterClass();
    }

    protected function cronlockConfig(): array
    {
        // A prefix per test: a key a killed holder left is the previous test's business.
        return ['backend' => 'redis', 'dsn' => self::$redis->dsn(), 'ttl' => 3.0, 'prefix' => 'test-' . bin2hex(random_bytes(4)) . ':'];
    }

    protected function recoversOnTheNextTick(): bool
    {
        return false;
    }
}

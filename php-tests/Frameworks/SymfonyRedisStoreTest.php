<?php

declare(strict_types=1);

namespace CronLock\Tests\Frameworks;

use CronLock\Symfony\Store\RedisStore;
use CronLock\Tests\Support\Proc;
use CronLock\Tests\Support\RedisServer;
use Symfony\Component\Lock\Exception\LockConflictedException;
use Symfony\Component\Lock\Exception\LockExpiredException;
use Symfony\Component\Lock\Key;
use Symfony\Component\Lock\LockFactory;
use Symfony\Component\Lock\PersistingStoreInterface;

/**
 * CronLock\Symfony\Store\RedisStore on a redis-server of the test's own:
 * SymfonyStoreTestCase, what Symfony Lock's ExpiringStoreTestTrait checks
 * (a key given a TTL expires, a TTL too short aborts, the remaining
 * lifetime), and exists() asking the server.
 */
final class SymfonyRedisStoreTest extends SymfonyStoreTestCase
{
    /** What the expiring cases wait on (Symfony's own uses 100 ms for Redis). */
    private const CLOCK_DELAY = 0.2;

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

    protected function getStore(array $options = []): PersistingStoreInterface
    {
        return new RedisStore(self::$redis->dsn(), $options + ['prefix' => 'sf:', 'initial_ttl' => 3.0]);
    }

    protected function storeCode(): string
    {
        return sprintf('$store = new CronLock\Symfony\Store\RedisStore(%s, ["prefix" => "sf:", "initial_ttl" => 3.0]);', var_export(self::$redis->dsn(), true));
    }

    protected function heldAfterKill(): float
    {
        return 3.0;
    }

    public function testAKeyGivenATtlExpires(): void
    {
        $store = $this->getStore();
        $key = new Key(self::resource());
        $store->save($key);
        $store->putOffExpiration($key, 2 * self::CLOCK_DELAY);
        self::assertTrue($store->exists($key));
        usleep((int) (3 * self::CLOCK_DELAY * 1e6));
        self::assertFalse($store->exists($key));
        self::assertNull(self::$redis->command('GET', "sf:$key"), 'the server let it expire');
    }

    public function testATtlShorterThanAMillisecondAborts(): void
    {
        $store = $this->getStore();
        $key = new Key(self::resource());
        $store->save($key);
        try {
            $store->putOffExpiration($key, 1 / 1000000);
            self::fail('a TTL of 1 µs was accepted');
        } catch (LockExpiredException $e) {
            self::assertFalse($store->exists($key));
            self::assertNull(self::$redis->command('GET', "sf:$key"), 'and given back');
        }
    }

    public function testARefreshedLockLastsItsNewTtl(): void
    {
        $store = $this->getStore();
        $key = new Key(self::resource());
        $store->save($key);
        $store->putOffExpiration($key, self::CLOCK_DELAY);
        self::assertTrue($store->exists($key));
        usleep((int) (2 * self::CLOCK_DELAY * 1e6));
        self::assertFalse($store->exists($key));
    }

    public function testTheRemainingLifetimeIsTheTtlGiven(): void
    {
        $store = $this->getStore();
        $key = new Key(self::resource());
        $store->save($key);
        $store->putOffExpiration($key, 1.0);
        self::assertGreaterThanOrEqual(0.0, $key->getRemainingLifetime());
        self::assertLessThanOrEqual(1.0, $key->getRemainingLifetime());
        $pttl = (int) self::$redis->command('PTTL', "sf:$key");
        self::assertGreaterThan(0, $pttl);
        self::assertLessThanOrEqual(1000, $pttl);
        $store->delete($key);
    }

    public function testAnExpiredKeyLetsAnotherKeyIn(): void
    {
        $store = $this->getStore();
        $resource = self::resource();
        $key = new Key($resource);
        $store->save($key);
        $store->putOffExpiration($key, self::CLOCK_DELAY);
        usleep((int) (2 * self::CLOCK_DELAY * 1e6));
        $other = new Key($resource);
        $store->save($other);
        self::assertTrue($store->exists($other));
        self::assertFalse($store->exists($key));
        $store->delete($other);
    }

    public function testExistsNeverExtendsTheKey(): void
    {
        $store = $this->getStore();
        $key = new Key(self::resource());
        $store->save($key);
        $store->putOffExpiration($key, 1.0);
        $before = (int) self::$redis->command('PTTL', "sf:$key");
        for ($i = 0; $i < 5; $i++) {
            self::assertTrue($store->exists($key));
        }
        self::assertLessThanOrEqual($before, (int) self::$redis->command('PTTL', "sf:$key"), 'exists() changes no TTL (Redis::holder(): one GET)');
        $store->delete($key);
    }

    public function testExistsAsksTheServer(): void
    {
        $store = $this->getStore();
        $key = new Key(self::resource());
        $store->save($key);
        self::$redis->command('DEL', "sf:$key"); // evicted, flushed, a failover that lost it
        self::assertFalse($store->exists($key));
        $lock = (new LockFactory($store))->createLock(self::resource(), 10.0);
        self::assertTrue($lock->acquire());
        self::$redis->command('SET', 'sf:' . self::lockResource($lock), 'someone else');
        self::assertFalse($lock->isAcquired());
        $this->expectException(LockConflictedException::class);
        $lock->refresh();
    }

    public function testWithAutoRenewTheKeyOutlivesTheInitialTtl(): void
    {
        $store = $this->getStore(['initial_ttl' => 1.0, 'auto_renew' => true]);
        $lock = (new LockFactory($store))->createLock(self::resource(), null);
        self::assertTrue($lock->acquire());
        usleep(2_500_000);
        self::assertTrue($lock->isAcquired(), 'renewed every third of the TTL while the process lives');
        $lock->release();
        self::assertFalse($lock->isAcquired());
    }

    /**
     * A blocking acquire that waits longer than initial_ttl holds a key whose lifetime counts
     * from the end of the wait (an outside tester's `--wait` of a console command threw
     * LockExpiredException: "Failed to store the lock").
     */
    public function testABlockingWaitLongerThanTheInitialTtlGetsAFreshLifetime(): void
    {
        $resource = self::resource();
        $holder = Proc::start(SymfonyApp::childPrelude() . sprintf('$store = new CronLock\Symfony\Store\RedisStore(%s, ["prefix" => "sf:", "initial_ttl" => 1.0, "auto_renew" => true]);', var_export(self::$redis->dsn(), true)) . '
            $key = new Symfony\Component\Lock\Key($argv[1]);
            $store->save($key);
            echo "held\n";
            usleep(2500000);
            $store->delete($key);', [$resource]);
        $holder->waitForLine('held', 20.0);
        $lock = (new LockFactory($this->getStore(['initial_ttl' => 1.0, 'auto_renew' => true])))->createLock($resource, null);
        $started = microtime(true);
        self::assertTrue($lock->acquire(true), 'no LockExpiredException after a wait longer than initial_ttl');
        self::assertGreaterThan(1.0, microtime(true) - $started, 'it waited past initial_ttl');
        self::assertTrue($lock->isAcquired());
        self::assertFalse($lock->isExpired());
        $lock->release();
        self::assertSame(0, $holder->wait());
    }

    private static function lockResource(\Symfony\Component\Lock\LockInterface $lock): string
    {
        return (string) (fn () => $this->key)->call($lock);
    }
}

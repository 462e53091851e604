<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\Tests\Support\OncePerContract;
use CronLock\Lock;
use CronLock\Redis;
use CronLock\Tests\Support\RedisTopology;

/**
 * The CronLock\Lock contract for CronLock\Redis through Redis Sentinel: a
 * master, one replica and three sentinels for the class ('replicas' => 1, so
 * every acquire waits for the replica), plus a failover under a held lock.
 *
 * @group extension-only
 * cronlock/polyfill talks to one Redis server only (no Sentinel).
 */
final class SentinelLockContractTest extends LockContractTestCase
{
    use OncePerContract;
    /**
     * The test process's own locks are not renewed: 3 s outlast the child PHP processes a
     * test starts while it holds one, also on a loaded machine (1 s ran out there: another
     * process then acquired the lock the test still thought it held).
     */
    private const TTL = 3.0;

    private static ?RedisTopology $topology = null;

    /** @var array<string, Redis> */
    private array $probes = [];

    public static function setUpBeforeClass(): void
    {
        parent::setUpBeforeClass();
        self::$topology = RedisTopology::sentinel(1);
    }

    public static function tearDownAfterClass(): void
    {
        self::$topology?->stop();
        self::$topology = null;
        parent::tearDownAfterClass();
    }

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

    // WAIT for the replica gets 4/5 of read_timeout. The default 1 s (an 800 ms
    // WAIT) once ran out on the shared 2-core machine under full load, with the
    // replica in sync (scripts/compat zts): a generous bound, as the test is
    // about the contract, not the replica's speed.
    private const OPTIONS = ['replicas' => 1, 'read_timeout' => 5.0];

    protected function createLock(string $name): Lock
    {
        return new Redis(self::$topology->dsn(), $name, self::TTL, self::OPTIONS);
    }

    protected function lockIsFreeForOthers(string $name): bool
    {
        $probe = $this->probes[$name] ??= new Redis(self::$topology->dsn(), $name, self::TTL);
        if (!$probe->acquire(0)) {
            return false;
        }
        self::assertTrue($probe->release(), 'the probe releases what it just took');
        return true;
    }

    protected function createLockCode(string $name): string
    {
        return sprintf('new \CronLock\Redis(%s, %s, %s, %s)', var_export(self::$topology->dsn(), true), var_export($name, true), var_export(self::TTL, true), var_export(['auto_renew' => true] + self::OPTIONS, true));
    }

    protected function secondsUntilFreeAfterHolderDies(): float
    {
        return self::TTL;
    }

    public function testZzAHeldLockFollowsAFailoverAndAKeyTheNewMasterLacksIsReportedLost(): void
    {
        $name = $this->uniqueName();
        $lock = new Redis(self::$topology->dsn(), $name, 30.0, self::OPTIONS);
        self::assertTrue($lock->acquire(0));
        $fence = $lock->fencingToken();
        $new = self::$topology->failover();
        self::assertTrue($lock->renew(), 'the key reached the replica that is the master now');
        self::assertSame($lock->token(), $new->command('GET', $name));
        self::assertSame($fence, $lock->fencingToken());
        $new->command('DEL', $name);
        self::assertFalse($lock->renew(), 'a key the new master lacks is lost, never kept');
        self::assertFalse($lock->isHeld());
    }
}

<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\Tests\Support\OncePerContract;
use CronLock\Lock;
use CronLock\Redis;
use CronLock\Tests\Support\RedisTopology;

/**
 * The CronLock\Lock contract for CronLock\Redis on a 3-master Redis Cluster
 * (every node a seed), plus where the key and its companions live.
 *
 * @group extension-only
 * cronlock/polyfill talks to one Redis server only (no Cluster).
 */
final class ClusterLockContractTest extends LockContractTestCase
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
        self::$topology = RedisTopology::cluster();
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

    private const OPTIONS = [];

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

    public function testTheKeyIsExactlyTheNameAndItsCompanionsShareItsSlot(): void
    {
        $name = $this->uniqueName();
        $lock = $this->createLock($name);
        self::assertTrue($lock->acquire(0));
        $found = 0;
        foreach (self::$topology->servers as $node) {
            try {
                self::assertSame($lock->token(), $node->command('GET', $name));
                self::assertSame((string) $lock->fencingToken(), $node->command('GET', '{' . $name . '}:fence'));
                $found++;
            } catch (\RuntimeException $e) {
                self::assertStringContainsString('MOVED', $e->getMessage());
            }
        }
        self::assertSame(1, $found, 'one node owns the slot');
        self::assertTrue($lock->release());
    }
}

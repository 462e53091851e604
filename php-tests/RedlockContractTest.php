<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\Tests\Support\OncePerContract;
use CronLock\ConnectionException;
use CronLock\Lock;
use CronLock\Redis;
use CronLock\Tests\Support\RedisServer;
use CronLock\Tests\Support\RedisTopology;

/**
 * The CronLock\Lock contract for CronLock\Redis in Redlock mode: three
 * independent redis-servers for the class, a unique key per test. Plus what
 * only Redlock has: a minority down or stopped does not stop the lock, a
 * majority down is a ConnectionException, no fencing number.
 *
 * @group extension-only
 * cronlock/polyfill talks to one Redis server only (no Redlock).
 */
final class RedlockContractTest extends LockContractTestCase
{
    use OncePerContract;
    /**
     * The test process's own locks are not renewed: 3 s outlast the child PHP processes a
     * test starts while it holds one, also on a loaded machine (1 s ran out there: another
     * process then acquired the lock the test still thought it held).
     */
    private const TTL = 3.0;

    private static ?RedisTopology $topology = null;

    /** @var list<RedisServer> */
    private static array $masters = [];

    /** @var array<string, Redis> */
    private array $probes = [];

    public static function setUpBeforeClass(): void
    {
        parent::setUpBeforeClass();
        self::$topology = RedisTopology::masters(3);
        self::$masters = self::$topology->servers;
    }

    public static function tearDownAfterClass(): void
    {
        self::$topology?->stop();
        self::$topology = null;
        self::$masters = [];
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

    /** @return list<string> */
    private static function dsns(): array
    {
        return array_map(static fn (RedisServer $m) => $m->dsn(), self::$masters);
    }

    protected function createLock(string $name): Lock
    {
        return new Redis(self::dsns(), $name, self::TTL);
    }

    protected function lockIsFreeForOthers(string $name): bool
    {
        $probe = $this->probes[$name] ??= new Redis(self::dsns(), $name, self::TTL);
        if (!$probe->acquire(0)) {
            return false;
        }
        self::assertTrue($probe->release(), 'the probe releases what it just took');
        return true;
    }

    protected function createLockCode(string $name): string
    {
        return sprintf('new \CronLock\Redis(%s, %s, %s, %s)', var_export(self::dsns(), true), var_export($name, true), var_export(self::TTL, true), var_export(['auto_renew' => true], true));
    }

    protected function secondsUntilFreeAfterHolderDies(): float
    {
        return self::TTL;
    }

    public function testTheKeyIsOnEveryMasterAndThereIsNoFencingNumber(): void
    {
        $name = $this->uniqueName();
        $lock = $this->createLock($name);
        self::assertTrue($lock->acquire(0));
        foreach (self::$masters as $master) {
            self::assertSame($lock->token(), $master->command('GET', $name));
        }
        self::assertNull($lock->fencingToken(), 'Redlock hands out no fencing number');
        self::assertTrue($lock->release());
        foreach (self::$masters as $master) {
            self::assertSame(0, $master->command('EXISTS', $name));
        }
    }

    public function testAMinorityDownOrStoppedDoesNotStopTheLockAndAMajorityIsAConnectionException(): void
    {
        $masters = [RedisServer::start(), RedisServer::start(['requirepass' => 's3cret-pw']), RedisServer::start()];
        // (one master with a password: no message may show it)
        $dsns = array_map(static fn (RedisServer $m) => $m->dsn(), $masters);
        $options = ['connect_timeout' => 0.3, 'read_timeout' => 0.3];
        $lock = new Redis($dsns, 'redlock-faults', 10.0, $options);

        posix_kill($masters[2]->pid(), SIGSTOP);
        try {
            self::assertTrue($lock->acquire(0), 'one stopped master of three');
            self::assertTrue($lock->renew());
            $masters[0]->kill();
            try {
                $lock->renew();
                self::fail('one master of three answers: expected ConnectionException');
            } catch (ConnectionException $e) {
                self::assertStringNotContainsString('s3cret-pw', $e->getMessage());
                self::assertStringContainsString('2 of the 3 Redis masters did not answer, and a majority (2) must', $e->getMessage());
            }
            self::assertTrue($lock->isHeld(), 'a renewal that could not be confirmed keeps the hold until its TTL');
        } finally {
            posix_kill($masters[2]->pid(), SIGCONT);
        }
        self::assertTrue($lock->release(), 'true while held, whatever the minority answered');
        $masters[1]->kill();
        $other = new Redis($dsns, 'redlock-faults', 10.0, $options);
        try {
            $other->acquire(0);
            self::fail('one master of three left: expected ConnectionException');
        } catch (ConnectionException $e) {
            self::assertStringNotContainsString('s3cret-pw', $e->getMessage());
            self::assertStringContainsString('did not answer, and a majority (2) must', $e->getMessage());
        }
    }

    public function testTheDsnArrayIsChecked(): void
    {
        foreach ([[[], \ValueError::class, 'non-empty list'], [['a' => 'redis://127.0.0.1:1'], \ValueError::class, 'list of DSNs'], [["\xff\xfe" => 'redis://127.0.0.1:1'], \ValueError::class, 'list of DSNs'], [['redis://127.0.0.1:1', 7], \TypeError::class, '$dsn[1]']] as [$dsn, $class, $says]) {
            try {
                new Redis($dsn, 'k', 1.0);
                self::fail("expected $class");
            } catch (\ValueError|\TypeError $e) {
                self::assertInstanceOf($class, $e);
                self::assertStringContainsString($says, $e->getMessage());
            }
        }
    }
}

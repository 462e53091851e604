<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\Database;
use CronLock\Lock;
use CronLock\Tests\Support\DatabaseTestHelpers;

/**
 * The CronLock\Lock contract for CronLock\Database on a private server
 * (one for the class; the subclass names MariaDB or PostgreSQL), DSN locks
 * with their own connection, a unique name per test.
 *
 * The server frees a dead holder's lock when it sees the connection close,
 * a few milliseconds after kill -9 (not inside the kill itself), hence the
 * small bound below.
 */
abstract class DatabaseContractTestCase extends LockContractTestCase
{
    use DatabaseTestHelpers;

    /** @var array<string, Database> one reused probe per name (one connection, not one per poll) */
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

    protected function createLock(string $name): Lock
    {
        return self::dsnLock($name);
    }

    protected function lockIsFreeForOthers(string $name): bool
    {
        $probe = $this->probes[$name] ??= self::dsnLock($name);
        if (!$probe->acquire(0)) {
            return false;
        }
        self::assertTrue($probe->release(), 'the probe releases what it just took');
        return true;
    }

    protected function createLockCode(string $name): string
    {
        return self::dsnLockCode($name);
    }

    protected function secondsUntilFreeAfterHolderDies(): float
    {
        return 1.0;
    }

    public function testASecondObjectOfThisThreadIsBusyAtOnceAndNeverWaitsForTheFirst(): void
    {
        $name = $this->uniqueName();
        $first = $this->createLock($name);
        $second = $this->createLock($name);
        self::assertTrue($first->acquire(0));
        self::assertFalse($second->acquire(0), 'busy at once');
        foreach ([5.0, -1.0] as $timeout) {
            $t0 = microtime(true);
            try {
                $second->acquire($timeout);
                self::fail("acquire($timeout) must throw");
            } catch (\CronLock\LockException $e) {
                self::assertStringContainsString('is already held by this process (pid ' . getmypid() . ') through another CronLock\\Database object; waiting for it would deadlock', $e->getMessage());
            }
            self::assertLessThan(2.0, microtime(true) - $t0, 'thrown at once, without waiting');
        }
        $log = $this->logToFile($this->makeTempDir('busy'));
        self::assertNull(cron_guard(fn () => 'ran', $second));
        self::assertStringEndsWith('is held by this process (pid ' . getmypid() . ') through another lock object; skipping this run', self::logLines($log)[0] ?? '');
        self::assertTrue($first->release());
        self::assertTrue($second->acquire(1.0));
        self::assertTrue($second->release());
    }
}

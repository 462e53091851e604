<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\File;
use CronLock\Lock;

/** The CronLock\Lock contract for CronLock\File: one temp dir of lock files per test. */
final class FileLockContractTest extends LockContractTestCase
{
    private string $dir;

    protected function setUp(): void
    {
        parent::setUp();
        $this->dir = $this->makeTempDir('file-contract');
    }

    private function pathFor(string $name): string
    {
        return "{$this->dir}/$name.lock";
    }

    protected function createLock(string $name): Lock
    {
        return new File($this->pathFor($name));
    }

    protected function lockIsFreeForOthers(string $name): bool
    {
        // isFree() probes with a separate open file description: flock(2)
        // conflicts with it even inside this process, as with another process.
        return $this->isFree($this->pathFor($name));
    }

    protected function createLockCode(string $name): string
    {
        return 'new \CronLock\File(' . var_export($this->pathFor($name), true) . ')';
    }

    protected function secondsUntilFreeAfterHolderDies(): float
    {
        return 0.0; // the kernel drops an flock(2) lock with its last descriptor
    }
}

<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\Guard;
use CronLock\Lock;
use CronLock\Tests\Support\ErrorLogHelpers;
use CronLock\Tests\Support\FileTestHelpers;
use CronLock\Tests\Support\Proc;
use CronLock\Tests\Support\WebAssembly;
use PHPUnit\Framework\TestCase;

/**
 * The CronLock\Lock contract, run against every backend (File, Redis, ...).
 *
 * A backend test extends this and says how to make its locks; nothing here
 * knows what is behind the lock. Real processes (Support\Proc) play the
 * "other" holders: no mocks.
 *
 * Subclasses that override setUp()/tearDown() must call the parent's.
 */
abstract class LockContractTestCase extends TestCase
{
    use ErrorLogHelpers;
    use FileTestHelpers;

    /**
     * A new lock object. Two calls with the same $name give two independent
     * objects on the same underlying lock (same file / same Redis key).
     */
    abstract protected function createLock(string $name): Lock;

    /**
     * Whether somebody other than the objects made so far could take the lock
     * right now. Must leave the lock as it found it (release a probe that got it).
     */
    abstract protected function lockIsFreeForOthers(string $name): bool;

    /**
     * A PHP expression that, evaluated in a child process with the
     * extension loaded, builds a lock object on the same underlying lock as
     * createLock($name), e.g. `new \CronLock\File('/tmp/x/name.lock')`.
     */
    abstract protected function createLockCode(string $name): string;

    /**
     * Upper bound, in seconds, between the kill -9 of a holder and the lock
     * being free for others: 0.0 means "at once" (File); Redis: its TTL.
     */
    abstract protected function secondsUntilFreeAfterHolderDies(): float;

    private string $controlDir;
    /** @var array<int, string> spl_object_id(holder Proc) => its release signal file */
    private array $holderSignals = [];

    protected function setUp(): void
    {
        parent::setUp();
        $this->controlDir = $this->makeTempDir('contract');
    }

    protected function tearDown(): void
    {
        $this->restoreErrorLog();
        $this->reapCommands();
        $this->removeTempDirs();
        parent::tearDown();
    }

    protected function uniqueName(): string
    {
        return 'contract-' . getmypid() . '-' . bin2hex(random_bytes(4));
    }

    // ----------------------------------------------------------------- helpers

    /**
     * A child process holding $name. It prints "HELD <pid>" once it holds the
     * lock, then releases after $releaseAfter seconds (< 0: when
     * releaseHolder() is called) and prints "RELEASED <microtime> <result>".
     * $afterAcquire is PHP run right after the lock is taken ($lock in scope).
     */
    protected function startHolder(string $name, float $releaseAfter = -1.0, string $afterAcquire = ''): Proc
    {
        $signal = $this->controlDir . '/release-' . bin2hex(random_bytes(4));
        $code = '$lock = ' . $this->createLockCode($name) . ";\n" . <<<'PHP'
            if (!$lock->acquire(0)) { echo "BUSY\n"; exit(2); }
            PHP . "\n" . $afterAcquire . "\n" . <<<'PHP'
            echo "HELD ", getmypid(), "\n";
            $releaseAfter = (float) $argv[1];
            $signal = $argv[2];
            $t0 = microtime(true);
            while (!file_exists($signal) && ($releaseAfter < 0 || microtime(true) - $t0 < $releaseAfter)) {
                usleep(500);
            }
            $at = microtime(true);
            $ok = $lock->release();
            printf("RELEASED %.6f %s\n", $at, var_export($ok, true));
            PHP;
        $p = Proc::start($code, [sprintf('%.6F', $releaseAfter), $signal]);
        $this->holderSignals[spl_object_id($p)] = $signal;
        $p->waitForLine('HELD', 15.0, 'stdout');
        return $p;
    }

    /** Signal one holder (by its Proc) to release, and wait for it to exit. */
    protected function releaseHolder(Proc $holder): string
    {
        $signal = $this->holderSignals[spl_object_id($holder)] ?? null;
        if ($signal === null) {
            throw new \LogicException('releaseHolder() needs a Proc made by startHolder()');
        }
        touch($signal);
        $line = $holder->waitForLine('RELEASED', 15.0, 'stdout');
        self::assertSame(0, $holder->wait(15.0), 'holder exit status' . $holder->stderr());
        return $line;
    }

    /** Run a child that tries acquire(0) once: true = it got the lock (and released it). */
    protected function otherProcessAcquires(string $name): bool
    {
        $p = Proc::run('$l = ' . $this->createLockCode($name) . ";\n"
            . 'if ($l->acquire(0)) { echo "GOT\n"; $l->release(); } else { echo "BUSY\n"; }');
        self::assertSame(0, $p->exitCode(), $p->stdout() . $p->stderr());
        return strpos($p->stdout(), 'GOT') !== false;
    }

    // ------------------------------------------------------------------ basics

    public function testAcquireOnceSucceedsAndASecondObjectIsRefused(): void
    {
        $name = $this->uniqueName();
        $a = $this->createLock($name);
        $b = $this->createLock($name);

        self::assertTrue($this->lockIsFreeForOthers($name), 'precondition: free');
        self::assertTrue($a->acquire(0), 'first acquire(0)');
        self::assertFalse($b->acquire(0), 'second object on the same lock must be refused');
        self::assertFalse($b->acquire(), 'default timeout is 0: try once');
        self::assertFalse($b->isHeld());
        self::assertTrue($a->isHeld());
        self::assertFalse($this->lockIsFreeForOthers($name));
        self::assertFalse($this->otherProcessAcquires($name), 'another process must be refused too');

        self::assertTrue($a->release());
        self::assertTrue($b->acquire(0), 'free again after release');
        self::assertTrue($b->release());
    }

    public function testReleaseIsIdempotentAndNeverThrows(): void
    {
        $name = $this->uniqueName();
        $lock = $this->createLock($name);
        self::assertTrue($lock->acquire(0));

        self::assertTrue($lock->release(), 'first release of a held lock');
        self::assertFalse($lock->release(), 'second release');
        self::assertFalse($lock->release(), 'third release');
        self::assertFalse($lock->isHeld());
        self::assertTrue($this->lockIsFreeForOthers($name));
    }

    public function testIsHeldFollowsAcquireAndRelease(): void
    {
        $name = $this->uniqueName();
        $lock = $this->createLock($name);

        self::assertFalse($lock->isHeld(), 'new object');
        self::assertTrue($lock->acquire(0));
        self::assertTrue($lock->isHeld(), 'after acquire');
        self::assertTrue($lock->release());
        self::assertFalse($lock->isHeld(), 'after release');
        self::assertTrue($lock->acquire(0), 're-acquire after release');
        self::assertTrue($lock->isHeld(), 'after re-acquire');
        self::assertTrue($lock->release());
    }

    public function testReleaseOfANeverAcquiredLockIsFalseAndLeavesTheHolderAlone(): void
    {
        $name = $this->uniqueName();
        $never = $this->createLock($name);
        self::assertFalse($never->release(), 'nobody holds it');

        $holder = $this->createLock($name);
        self::assertTrue($holder->acquire(0));
        $other = $this->createLock($name);
        self::assertFalse($other->acquire(0));
        self::assertFalse($other->release(), 'a refused object does not hold the lock');
        self::assertFalse($never->release());
        self::assertTrue($holder->isHeld());
        self::assertFalse($this->lockIsFreeForOthers($name), "someone else's release() must not free it");
        self::assertTrue($holder->release());
    }

    public function testAcquireWhileAlreadyHeldBySameObjectReturnsTrueAtOnce(): void
    {
        $name = $this->uniqueName();
        $lock = $this->createLock($name);
        self::assertTrue($lock->acquire(0));
        self::assertTrue($lock->acquire(0), 'acquire(0) again by the holder');

        $t0 = microtime(true);
        self::assertTrue($lock->acquire(5.0), 'acquire(5.0) again by the holder');
        $elapsed = microtime(true) - $t0;
        self::assertLessThan(2.5, $elapsed, 'the holder must not wait for itself');
        self::assertTrue($lock->isHeld());
        self::assertFalse($this->lockIsFreeForOthers($name));
        self::assertTrue($lock->release());
    }

    // ---------------------------------------------------------------- timeouts

    public function testTimedAcquireGivesUpAfterTheTimeoutWhenHeldElsewhere(): void
    {
        $name = $this->uniqueName();
        // Another process: a wait on a lock this process holds through
        // another object is refused at once (it could never end).
        $holder = $this->startHolder($name);
        $waiter = $this->createLock($name);

        $t0 = microtime(true);
        $got = $waiter->acquire(0.3);
        $elapsed = microtime(true) - $t0;

        self::assertFalse($got);
        self::assertFalse($waiter->isHeld());
        self::assertGreaterThanOrEqual(0.29, $elapsed, 'acquire(0.3) must wait about 0.3 s before giving up');
        self::assertLessThan(10.0, $elapsed, 'acquire(0.3) must give up (generous bound)');
        self::assertStringContainsString('RELEASED', $this->releaseHolder($holder));
    }

    public function testTimedAcquireSucceedsWhenAnotherProcessReleasesDuringTheWait(): void
    {
        $name = $this->uniqueName();
        $holder = $this->startHolder($name, 0.3);
        $lock = $this->createLock($name);

        $t0 = microtime(true);
        $got = $lock->acquire(10.0);
        $acquiredAt = microtime(true);

        self::assertTrue($got, 'the waiter gets the lock released during its wait' . $holder->stderr());
        $released = $holder->waitForLine('RELEASED', 10.0, 'stdout');
        self::assertMatchesRegularExpression('/^RELEASED [0-9.]+ true$/', $released);
        $releasedAt = (float) explode(' ', $released)[1];
        $handoff = $acquiredAt - $releasedAt;
        self::note(sprintf('timed acquire: waited %.3f s, hand-off %.2f ms after release()', $acquiredAt - $t0, $handoff * 1000));

        self::assertGreaterThan(-0.005, $handoff, 'acquired before the holder released?');
        self::assertLessThan(1.0, $handoff, 'a waiter gets the lock soon after release');
        self::assertLessThan(9.0, $acquiredAt - $t0, 'did not need the whole timeout');
        self::assertSame(0, $holder->wait());
        self::assertTrue($lock->isHeld());
        self::assertFalse($this->otherProcessAcquires($name));
        self::assertTrue($lock->release());
    }

    public function testNegativeTimeoutWaitsUntilAcquired(): void
    {
        $name = $this->uniqueName();
        $holder = $this->startHolder($name, 0.3);
        $lock = $this->createLock($name);

        $t0 = microtime(true);
        $got = $lock->acquire(-1.0);
        $acquiredAt = microtime(true);

        self::assertTrue($got);
        $releasedAt = (float) explode(' ', $holder->waitForLine('RELEASED', 10.0, 'stdout'))[1];
        self::note(sprintf('acquire(-1): waited %.3f s, hand-off %.2f ms', $acquiredAt - $t0, ($acquiredAt - $releasedAt) * 1000));
        self::assertGreaterThan(-0.005, $acquiredAt - $releasedAt, 'acquire(-1) returned before the holder released');
        self::assertLessThan(1.0, $acquiredAt - $releasedAt);
        self::assertSame(0, $holder->wait());
        self::assertTrue($lock->release());
    }

    public function testNanTimeoutThrowsValueError(): void
    {
        $name = $this->uniqueName();
        $lock = $this->createLock($name);
        try {
            $lock->acquire(NAN);
            self::fail('acquire(NAN) must throw');
        } catch (\ValueError $e) {
            self::assertStringContainsString('$timeout', $e->getMessage());
        }
        self::assertFalse($lock->isHeld());
        self::assertTrue($this->lockIsFreeForOthers($name));
    }

    // ------------------------------------------------------------------- renew

    public function testRenewIsTrueWhileHeldAndFalseOtherwise(): void
    {
        $name = $this->uniqueName();
        $lock = $this->createLock($name);
        self::assertFalse($lock->renew(), 'never acquired');
        self::assertTrue($lock->acquire(0));
        self::assertTrue($lock->renew(), 'held');
        self::assertTrue($lock->renew(30.0), 'held, explicit ttl');
        self::assertTrue($lock->isHeld(), 'renew keeps holding');
        self::assertFalse($this->lockIsFreeForOthers($name));
        self::assertTrue($lock->release());
        self::assertFalse($lock->renew(), 'released');
        self::assertFalse($lock->isHeld(), 'renew() of a released lock must not take it again');
        self::assertTrue($this->lockIsFreeForOthers($name));
    }

    // ------------------------------------------------------- real processes

    public function testEightProcessesIncrementACounterExactly(): void
    {
        $name = $this->uniqueName();
        $counter = $this->controlDir . '/counter';
        $go = $this->controlDir . '/go';
        file_put_contents($counter, '0');
        $code = '$lock = ' . $this->createLockCode($name) . ";\n" . <<<'PHP'
            [$counter, $go] = [$argv[1], $argv[2]];
            echo "READY\n";
            while (!file_exists($go)) { usleep(500); }
            for ($i = 0; $i < 50; $i++) {
                if (!$lock->acquire(-1)) { echo "ACQUIRE FAILED\n"; exit(3); }
                $n = (int) file_get_contents($counter);
                usleep(100); // widen the window a missing lock would lose updates in
                file_put_contents($counter, (string) ($n + 1));
                if (!$lock->release()) { echo "RELEASE FAILED\n"; exit(4); }
            }
            echo "DONE\n";
            PHP;
        $procs = Proc::startMany(8, $code, [$counter, $go], 'READY');
        $t0 = microtime(true);
        touch($go);
        foreach ($procs as $p) {
            self::assertSame(0, $p->wait(60.0), $p->stdout() . $p->stderr());
            self::assertStringContainsString('DONE', $p->stdout());
        }
        self::note(sprintf('8 processes x 50 locked increments: %.3f s', microtime(true) - $t0));
        self::assertSame('400', file_get_contents($counter), 'every increment happened under the lock');
        self::assertTrue($this->lockIsFreeForOthers($name));
    }

    public function testKillMinus9OfTheHolderFreesTheLock(): void
    {
        $name = $this->uniqueName();
        $holder = $this->startHolder($name);
        self::assertFalse($this->lockIsFreeForOthers($name), 'precondition: held by the child');

        self::assertSame(137, $holder->kill(), 'SIGKILL');
        $bound = $this->secondsUntilFreeAfterHolderDies();
        if ($bound <= 0.0) {
            self::assertTrue($this->lockIsFreeForOthers($name), 'free at once after kill -9 of the holder');
        } else {
            $t0 = microtime(true);
            self::waitUntil(fn () => $this->lockIsFreeForOthers($name), "lock free within $bound s of kill -9", $bound + 5.0);
            self::note(sprintf('free %.3f s after kill -9 (bound %.1f s)', microtime(true) - $t0, $bound));
        }
        self::assertTrue($this->otherProcessAcquires($name));
    }

    /** @return iterable<string, array{string}> */
    public static function forkChildEndings(): iterable
    {
        yield 'child calls release() then exits' => ['release'];
        yield 'child just exits (destructors, request shutdown)' => ['exit'];
        yield 'child unsets the lock object' => ['unset'];
        yield 'child tries acquire(0) then exits' => ['acquire'];
    }

    /** @dataProvider forkChildEndings */
    public function testForkChildNeverFreesTheParentsLock(string $ending): void
    {
        WebAssembly::skip('no pcntl_fork()');
        $name = $this->uniqueName();
        $stop = $this->controlDir . '/stop-fork';
        $childCode = [
            'release' => 'printf("CHILD release=%s\n", var_export($lock->release(), true)); exit(0);',
            'exit' => 'echo "CHILD exiting\n"; exit(0);',
            'unset' => 'unset($lock); gc_collect_cycles(); echo "CHILD unset\n"; exit(0);',
            'acquire' => 'printf("CHILD acquire=%s\n", var_export($lock->acquire(0), true)); exit(0);',
        ][$ending];
        $code = '$lock = ' . $this->createLockCode($name) . ";\n" . <<<'PHP'
            if (!$lock->acquire(0)) { echo "BUSY\n"; exit(2); }
            $pid = pcntl_fork();
            if ($pid === -1) { echo "FORK FAILED\n"; exit(3); }
            if ($pid === 0) {
                CHILD_CODE
            }
            pcntl_waitpid($pid, $status);
            printf("REAPED status=%d held=%s\n", pcntl_wexitstatus($status), var_export($lock->isHeld(), true));
            while (!file_exists($argv[1])) { usleep(1000); }
            printf("PARENT release=%s\n", var_export($lock->release(), true));
            PHP;
        $p = Proc::start(str_replace('CHILD_CODE', $childCode, $code), [$stop]);
        $reaped = $p->waitForLine('REAPED', 15.0, 'stdout');

        self::assertSame('REAPED status=0 held=true', $reaped, $p->stdout() . $p->stderr());
        if ($ending === 'release') {
            self::assertStringContainsString('CHILD release=false', $p->stdout(), "a fork child's release() frees nothing");
        }
        if ($ending === 'acquire') {
            self::assertStringContainsString('CHILD acquire=false', $p->stdout(), 'the parent holds it: a fork child is another process');
        }
        self::assertFalse($this->lockIsFreeForOthers($name), "the parent's lock survived the child ($ending)");
        self::assertFalse($this->otherProcessAcquires($name));

        touch($stop);
        self::assertSame(0, $p->wait(), $p->stdout() . $p->stderr());
        self::assertStringContainsString('PARENT release=true', $p->stdout());
        self::assertTrue($this->lockIsFreeForOthers($name));
    }

    public function testProcOpenChildDoesNotHoldTheLockAfterTheParentReleases(): void
    {
        $name = $this->uniqueName();
        $lock = $this->createLock($name);
        self::assertTrue($lock->acquire(0));
        $sleep = $this->startCommand(['sleep', '5']);
        try {
            self::assertTrue($lock->release());
            self::assertNull($this->commandExitCode($sleep), 'precondition: the sleep child is still alive');
            self::assertTrue($this->otherProcessAcquires($name), 'free at once for another process');
        } finally {
            $this->killCommand($sleep);
        }
    }

    public function testExecAndProcOpenChildrenDoNotKeepTheLockAfterTheHolderIsKilled(): void
    {
        $name = $this->uniqueName();
        $spawn = <<<'PHP'
            $sp = proc_open(['sleep', '30'], [0 => ['file', '/dev/null', 'r'], 1 => ['file', '/dev/null', 'w'], 2 => ['file', '/dev/null', 'w']], $pp);
            echo "SLEEP1 ", proc_get_status($sp)['pid'], "\n";
            echo "SLEEP2 ", (int) exec('sleep 30 > /dev/null 2>&1 & echo $!'), "\n";
            PHP;
        $holder = $this->startHolder($name, -1.0, $spawn);
        $pids = [
            (int) substr($holder->waitForLine('SLEEP1', 5.0, 'stdout'), 7),
            (int) substr($holder->waitForLine('SLEEP2', 5.0, 'stdout'), 7),
        ];
        try {
            self::assertGreaterThan(1, $pids[0]);
            self::assertGreaterThan(1, $pids[1]);
            // Until a child has exec'd it holds every descriptor of the
            // holder, close-on-exec or not: a busy host can leave it between
            // fork and exec after proc_open() has returned.
            foreach ($pids as $pid) {
                self::waitUntil(fn () => strncmp((string) @file_get_contents("/proc/$pid/cmdline"), "sleep\0", 6) === 0, "child $pid to exec sleep", 30.0);
            }
            self::assertSame(137, $holder->kill());
            foreach ($pids as $pid) {
                self::assertTrue(self::processAlive($pid), "precondition: the holder's child $pid outlives it");
            }
            $bound = $this->secondsUntilFreeAfterHolderDies();
            if ($bound <= 0.0) {
                self::assertTrue($this->lockIsFreeForOthers($name), 'children started with proc_open()/exec() must not keep the lock');
            } else {
                self::waitUntil(fn () => $this->lockIsFreeForOthers($name), "lock free within $bound s", $bound + 5.0);
            }
        } finally {
            foreach ($pids as $pid) {
                self::killPid($pid);
            }
        }
    }

    // -------------------------------------------------------------- cron_guard

    public function testCronGuardRunsTheJobUnderThisLock(): void
    {
        $name = $this->uniqueName();
        $lock = $this->createLock($name);
        $seen = null;
        $result = cron_guard(function (Guard $guard) use ($lock, $name, &$seen) {
            $seen = [
                'same lock' => $guard->lock() === $lock,
                'held' => $lock->isHeld(),
                'free for others' => $this->lockIsFreeForOthers($name),
                'guard renew' => $guard->renew(),
            ];
            return 'job result';
        }, $lock);

        self::assertSame('job result', $result);
        self::assertSame(['same lock' => true, 'held' => true, 'free for others' => false, 'guard renew' => true], $seen);
        self::assertFalse($lock->isHeld(), 'released after the job');
        self::assertTrue($this->lockIsFreeForOthers($name));
    }

    public function testCronGuardSkipsTheJobWhenThisLockIsBusy(): void
    {
        $name = $this->uniqueName();
        $holder = $this->startHolder($name);
        $log = $this->logToFile($this->controlDir);
        $ran = false;

        $result = cron_guard(function () use (&$ran) {
            $ran = true;
            return 'ran';
        }, $this->createLock($name));

        self::assertNull($result, 'busy: cron_guard returns null');
        self::assertFalse($ran, 'busy: the job is not called');
        $lines = self::logLines($log);
        self::assertCount(1, $lines, 'one error_log() line when busy: ' . implode("\n", $lines));
        self::assertFalse($this->lockIsFreeForOthers($name), 'the holder keeps its lock');
        $this->releaseHolder($holder);
        self::assertTrue($this->lockIsFreeForOthers($name));
    }
}

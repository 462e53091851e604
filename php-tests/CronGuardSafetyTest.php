<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\File;
use CronLock\Guard;
use CronLock\LockException;
use CronLock\Redis;
use CronLock\Tests\Support\ErrorLogHelpers;
use CronLock\Tests\Support\FileTestHelpers;
use CronLock\Tests\Support\Proc;
use CronLock\Tests\Support\RecordingLock;
use CronLock\Tests\Support\RedisTestHelpers;
use CronLock\Tests\Support\WebAssembly;
use PHPUnit\Framework\TestCase;

/**
 * cron_guard() where outside testing found double holds, hangs, hidden
 * failures and crashes: nested guards, a second lock object on a file this
 * process holds, backend failures with on_busy, waits cut by signals,
 * failing releases, long names, and Fibers that suspend inside guards across fatal errors.
 */
final class CronGuardSafetyTest extends TestCase
{
    use ErrorLogHelpers;
    use FileTestHelpers;
    use RedisTestHelpers;

    private string $lockDir;
    /** @var string|false */
    private $savedLockDir = false;

    protected function setUp(): void
    {
        parent::setUp();
        $this->lockDir = $this->makeTempDir('guard-safety');
        $this->savedLockDir = ini_get('cronlock.lock_dir');
        ini_set('cronlock.lock_dir', $this->lockDir);
        putenv("CRONLOCK_LOCK_DIR={$this->lockDir}"); // cronlock/polyfill's stand-in for the ini
    }

    protected function tearDown(): void
    {
        ini_set('cronlock.lock_dir', (string) $this->savedLockDir);
        putenv('CRONLOCK_LOCK_DIR');
        $this->restoreErrorLog();
        $this->reapCommands();
        $this->removeTempDirs();
        parent::tearDown();
    }

    private function prelude(): string
    {
        return 'ini_set("cronlock.lock_dir", ' . var_export($this->lockDir, true) . ");\n"
            . 'putenv("CRONLOCK_LOCK_DIR=" . ' . var_export($this->lockDir, true) . ");\n"
            . "ini_set('display_errors', 'stderr');\n"
            . 'function lock_is_free(string $name): bool { $p = new \CronLock\File(getenv("CRONLOCK_LOCK_DIR") . "/$name.lock");'
            . ' if (!$p->acquire(0)) { return false; } $p->release(); return true; }' . "\n";
    }

    /** Whether another process could take "<lock_dir>/$name.lock" now. */
    private function freeForOthers(string $path): bool
    {
        return $this->runCommand(['/usr/bin/flock', '-n', $path, 'true'])[0] === 0;
    }

    // ------------------------------------------------------- nested guards (D2)

    public function testANestedGuardOnTheSameFileObjectLeavesTheOuterHoldAlone(): void
    {
        $path = "{$this->lockDir}/nested.lock";
        $lock = new File($path);
        $seen = cron_guard(function () use ($lock, $path) {
            $inner = cron_guard(fn (Guard $g) => $g->lock() === $lock ? 'inner ran' : 'other lock', $lock);
            return [$inner, $lock->isHeld(), $this->freeForOthers($path)];
        }, $lock);
        self::assertSame(['inner ran', true, false], $seen, 'the inner guard must not free the outer lock');
        self::assertFalse($lock->isHeld(), 'the outer guard released it');
        self::assertTrue($this->freeForOthers($path));
    }

    public function testANestedGuardOnTheSameUserlandLockLeavesTheOuterHoldAlone(): void
    {
        $lock = new RecordingLock();
        $seen = cron_guard(function () use ($lock) {
            cron_guard(static fn () => null, $lock);
            return $lock->isHeld();
        }, $lock);
        self::assertTrue($seen);
        self::assertFalse($lock->isHeld());
        self::assertSame(['acquire(0.0)', 'acquire(0.0)', 'release'], $lock->calls, 'only the outer guard releases');
    }

    public function testANestedGuardOnTheSameRedisLockLeavesTheOuterHoldAlone(): void
    {
        $key = 'nested:' . getmypid() . ':' . bin2hex(random_bytes(3));
        $lock = new Redis(self::$server->dsn(), $key, 30.0);
        $seen = cron_guard(function () use ($lock, $key) {
            cron_guard(static fn () => null, $lock);
            return [$lock->isHeld(), self::raw('GET', $key) === $lock->token()];
        }, $lock);
        self::assertSame([true, true], $seen, 'the key must still be ours after the inner guard');
        self::assertNull(self::raw('GET', $key), 'the outer guard released it');
    }

    public function testGuardRenewIsFalseOnceTheLockFileWasReplacedAndTakenByAnotherRun(): void
    {
        $path = "{$this->lockDir}/replaced.lock";
        $seen = cron_guard(function (Guard $g) use ($path) {
            $before = $g->renew();
            unlink($path); // a tmp cleaner
            $other = Proc::start($this->prelude() . 'cron_guard(function () { echo "SECOND RUN\n"; sleep(60); }, "replaced");');
            $other->waitForLine('SECOND RUN', 15.0, 'stdout');
            $after = [$g->lock()->isHeld(), $g->renew(), $g->lock()->isHeld()];
            $other->kill();
            return [$before, $after];
        }, 'replaced');
        self::assertSame([true, [true, false, false]], $seen, 'isHeld() believes; renew() finds out and drops the hold');
    }

    // ------------------------------ another object on a lock this process holds (D3)

    public function testANestedNamedGuardIsBusyAndANestedWaitThrows(): void
    {
        $log = "{$this->lockDir}/child.log";
        // In a child: on a build without the per-thread registry the wait hangs.
        $p = Proc::run($this->prelude() . sprintf(<<<'PHP'
            ini_set('error_log', %s);
            cron_guard(function () {
                var_dump(cron_guard(fn () => 'inner ran', 'job'));
                try {
                    cron_guard(fn () => 'inner ran', 'job', ['wait' => -1]);
                    echo "NO EXCEPTION\n";
                } catch (\CronLock\LockException $e) {
                    echo get_class($e), ': ', $e->getMessage(), "\n";
                }
                echo lock_is_free('job') ? "OUTER LOST\n" : "OUTER HELD\n";
            }, 'job');
            echo lock_is_free('job') ? "FREE\n" : "HELD\n";
            PHP, var_export($log, true)), [], [], 20.0);
        $out = $p->stdout();
        self::assertSame(0, $p->exitCode(), $out . $p->stderr());
        self::assertSame("NULL\nCronLock\\LockException: lock file {$this->lockDir}/job.lock is already held by this process (pid {$p->pid()}) through another CronLock\\File object; waiting for it would deadlock\nOUTER HELD\nFREE\n", $out);
        $lines = self::logLines($log);
        self::assertCount(1, $lines, implode("\n", $lines));
        self::assertStringEndsWith("cron_guard: lock job ({$this->lockDir}/job.lock) is held by this process (pid {$p->pid()}) through another lock object; skipping this run", $lines[0]);
    }

    // ------------------------------------------- backend failures and on_busy (D7)

    /** @return iterable<string, array{string, string}> lock construction, expected uncaught class */
    public static function failingAcquires(): iterable
    {
        yield 'Redis down' => ['new \CronLock\Redis("redis://127.0.0.1:1", "job", 5.0)', 'CronLock\ConnectionException'];
        yield 'userland acquire throws' => [<<<'PHP'
            new class implements \CronLock\Lock {
                public function acquire(float $timeout = 0.0): bool { throw new \RuntimeException('backend down'); }
                public function renew(?float $ttl = null): bool { return false; }
                public function release(): bool { return false; }
                public function isHeld(): bool { return false; }
            }
            PHP, 'RuntimeException'];
    }

    /** @dataProvider failingAcquires */
    public function testABackendFailureInAcquirePropagatesAndNeverExitsWithOnBusy(string $lockCode, string $class): void
    {
        $p = Proc::run($this->prelude() . <<<PHP
            register_shutdown_function(function () { echo "SHUTDOWN\\n"; });
            \$lock = $lockCode;
            cron_guard(function () { echo "JOB RAN\\n"; }, \$lock, ['on_busy' => 3]);
            echo "RETURNED\\n";
            PHP, [], [], 20.0);
        $all = $p->stdout() . $p->stderr();
        self::assertSame(255, $p->exitCode(), 'an uncaught exception, not on_busy: ' . $all);
        self::assertStringContainsString("Uncaught $class", $p->stderr());
        self::assertStringNotContainsString('cron_guard:', $all, 'no busy line for an outage');
        self::assertStringNotContainsString('JOB RAN', $all);
        self::assertStringNotContainsString('RETURNED', $all);
        self::assertStringContainsString('SHUTDOWN', $p->stdout());
    }

    public function testAWaitCutShortByASignalIsLoggedAsSuchAndSkipsOnBusy(): void
    {
        if (!function_exists('pcntl_signal')) {
            self::markTestSkipped('needs ext-pcntl');
        }
        $holder = Proc::start($this->prelude() . 'cron_guard(function () { echo "HELD\n"; sleep(60); }, "job");');
        $holder->waitForLine('HELD', 15.0, 'stdout');
        $log = "{$this->lockDir}/waiter.log";
        $w = Proc::start($this->prelude() . sprintf(<<<'PHP'
            ini_set('error_log', %s);
            pcntl_async_signals(true);
            pcntl_signal(SIGUSR1, function () { echo "HANDLER\n"; });
            echo "WAITING\n";
            $r = cron_guard(function () { echo "JOB RAN\n"; }, 'job', ['wait' => 30, 'on_busy' => 3]);
            echo "RETURNED ", var_export($r, true), "\n";
            PHP, var_export($log, true)));
        $w->waitForLine('WAITING', 15.0, 'stdout');
        usleep(300_000);
        $w->signal(SIGUSR1);
        self::assertSame(0, $w->wait(15.0), 'not the on_busy status: ' . $w->stdout() . $w->stderr());
        self::assertSame("WAITING\nHANDLER\nRETURNED NULL\n", $w->stdout());
        self::assertSame(
            ["cron_guard: waiting for lock job ({$this->lockDir}/job.lock) was interrupted by a signal; waited X s; skipping this run"],
            array_map(static fn (string $l) => preg_replace(['/^\[[^]]*\] /', '/; waited \d+\.\d s;/'], ['', '; waited X s;'], $l), self::logLines($log))
        );
        $holder->kill();
    }

    public function testARedisWaitCutShortByASignalIsLoggedAsSuch(): void
    {
        if (!function_exists('pcntl_signal')) {
            self::markTestSkipped('needs ext-pcntl');
        }
        $key = 'signal:' . getmypid() . ':' . bin2hex(random_bytes(3));
        self::raw('SET', $key, 'someone-else', 'EX', '60');
        $log = "{$this->lockDir}/redis-waiter.log";
        $w = Proc::start(sprintf(<<<'PHP'
            ini_set('error_log', %s);
            pcntl_async_signals(true);
            pcntl_signal(SIGUSR1, function () { echo "HANDLER\n"; });
            echo "WAITING\n";
            $r = cron_guard(function () { echo "JOB RAN\n"; }, %s, ['wait' => 30, 'on_busy' => 3]);
            echo "RETURNED ", var_export($r, true), "\n";
            PHP, var_export($log, true), self::lockCode(self::$server->dsn(), $key, 30.0)));
        $w->waitForLine('WAITING', 15.0, 'stdout');
        usleep(300_000);
        $w->signal(SIGUSR1);
        self::assertSame(0, $w->wait(15.0), $w->stdout() . $w->stderr());
        self::assertSame("WAITING\nHANDLER\nRETURNED NULL\n", $w->stdout());
        self::assertSame(
            ["cron_guard: waiting for lock redis key '$key' at 127.0.0.1:" . self::$server->port() . ' was interrupted by a signal; waited X s; skipping this run'],
            array_map(static fn (string $l) => preg_replace(['/^\[[^]]*\] /', '/; waited \d+\.\d s;/'], ['', '; waited X s;'], $l), self::logLines($log))
        );
        self::raw('DEL', $key);
    }

    // ------------------------------------------------------ failing release (D8)

    private static function brokenReleaseLockCode(): string
    {
        return <<<'PHP'
            final class BrokenRelease implements \CronLock\Lock {
                private bool $held = false;
                public function acquire(float $timeout = 0.0): bool { return $this->held = true; }
                public function renew(?float $ttl = null): bool { return $this->held; }
                public function release(): bool { throw new \RuntimeException('release broke'); }
                public function isHeld(): bool { return $this->held; }
            }
            PHP;
    }

    public function testAFailingReleaseIsLoggedAndThrownWhenTheJobReturned(): void
    {
        eval(self::brokenReleaseLockCode());
        $log = $this->logToFile($this->lockDir);
        try {
            cron_guard(static fn () => 'done', new \BrokenRelease());
            self::fail('the release failure must not be swallowed');
        } catch (\RuntimeException $e) {
            self::assertSame('release broke', $e->getMessage());
        }
        $lines = self::logLines($log);
        self::assertCount(1, $lines);
        self::assertStringEndsWith('cron_guard: releasing lock BrokenRelease failed: release broke', $lines[0]);

        $thrown = new \DomainException('job failed');
        try {
            cron_guard(static function () use ($thrown) { throw $thrown; }, new \BrokenRelease());
            self::fail('the job exception must propagate');
        } catch (\DomainException $e) {
            self::assertSame($thrown, $e, "the job's exception, unchanged");
            self::assertNull($e->getPrevious());
        }
        $lines = self::logLines($log);
        self::assertCount(2, $lines);
        self::assertStringEndsWith('cron_guard: releasing lock BrokenRelease failed: release broke', $lines[1]);
    }

    // ----------------------------------------------------------- long names (D6)

    public function testTheBusyLineCutsALongPathTo200Characters(): void
    {
        WebAssembly::skip('no /proc/locks (php-wasm has its own /proc), so holderPid() is null and the busy line says "pid unknown"');
        $path = "{$this->lockDir}/" . str_repeat('p', 240) . '.lock';
        $holder = Proc::start(sprintf('$l = new \CronLock\File(%s); $l->acquire(0); echo "HELD\n"; sleep(60);', var_export($path, true)));
        $holder->waitForLine('HELD', 15.0, 'stdout');
        $log = $this->logToFile($this->lockDir);
        self::assertNull(cron_guard(static fn () => 'ran', new File($path)));
        $line = self::logLines($log)[0] ?? '';
        self::assertStringContainsString('cron_guard: lock ' . mb_substr($path, 0, 200) . '… is held by pid ' . $holder->pid() . ' on ', $line);
        self::assertStringNotContainsString($path, $line);
        $holder->kill();
    }

    public function testTheBusyLineCutsAHugeRedisKeyTo200Characters(): void
    {
        $key = str_repeat('k', 1 << 20);
        self::raw('SET', $key, 'someone-else');
        try {
            $log = $this->logToFile($this->lockDir);
            self::assertNull(cron_guard(static fn () => 'ran', new Redis(self::$server->dsn(), $key, 5.0)));
            $line = self::logLines($log)[0] ?? '';
            self::assertLessThan(1000, strlen($line), 'not a 1 MB log line');
            self::assertStringContainsString("redis key '" . str_repeat('k', 200) . "…'", $line);
        } finally {
            self::raw('DEL', $key);
        }
    }

    // ----------------------------------------------------------------- Fibers

    /** @return iterable<string, array{string, string, int}> script, expected stdout, exit status */
    public static function fiberScenarios(): iterable
    {
        yield 'fatal in the outer job, the suspended Fiber resumed by a shutdown function' => [<<<'PHP'
            $fiber = null;
            register_shutdown_function(function () use (&$fiber) {
                echo "SHUTDOWN outer ", lock_is_free('outer') ? 'FREE' : 'HELD', ", inner ", lock_is_free('inner') ? 'FREE' : 'HELD', "\n";
                $fiber->resume();
                echo "FIBER ", $fiber->isTerminated() ? 'DONE' : 'ALIVE', "\n";
            });
            cron_guard(function () use (&$fiber) {
                $fiber = new Fiber(function () {
                    cron_guard(function () { Fiber::suspend(); echo "INNER RESUMED\n"; }, 'inner');
                    echo "INNER RETURNED\n";
                });
                $fiber->start();
                trigger_error('outer fatal', E_USER_ERROR);
            }, 'outer');
            PHP, "SHUTDOWN outer FREE, inner FREE\nINNER RESUMED\nINNER RETURNED\nFIBER DONE\n", 255];
        yield 'fatal inside the Fiber guard, nested in the outer guard' => [<<<'PHP'
            register_shutdown_function(function () {
                echo "SHUTDOWN outer ", lock_is_free('outer') ? 'FREE' : 'HELD', ", inner ", lock_is_free('inner') ? 'FREE' : 'HELD', "\n";
            });
            cron_guard(function () {
                $fiber = new Fiber(function () {
                    cron_guard(function () { Fiber::suspend(); trigger_error('inner fatal', E_USER_ERROR); }, 'inner');
                });
                $fiber->start();
                $fiber->resume();
            }, 'outer');
            PHP, "SHUTDOWN outer FREE, inner FREE\n", 255];
        yield 'guards ending out of order across suspend and resume' => [<<<'PHP'
            $a = new Fiber(function () {
                cron_guard(function () { Fiber::suspend(); }, 'a');
                echo "A DONE: a ", lock_is_free('a') ? 'FREE' : 'HELD', ", b ", lock_is_free('b') ? 'FREE' : 'HELD', "\n";
            });
            $a->start();
            cron_guard(function () use ($a) {
                $b = new Fiber(function () { cron_guard(function () { Fiber::suspend(); }, 'c'); });
                $b->start();
                $a->resume();
                echo "IN B: c ", lock_is_free('c') ? 'FREE' : 'HELD', "\n";
                $GLOBALS['b'] = $b;
            }, 'b');
            echo "B DONE: b ", lock_is_free('b') ? 'FREE' : 'HELD', ", c ", lock_is_free('c') ? 'FREE' : 'HELD', "\n";
            $GLOBALS['b']->resume();
            echo "C DONE: c ", lock_is_free('c') ? 'FREE' : 'HELD', "\n";
            PHP, "A DONE: a FREE, b HELD\nIN B: c HELD\nB DONE: b FREE, c HELD\nC DONE: c FREE\n", 0];
        yield 'a Fiber never resumed, with a userland lock' => [<<<'PHP'
            $lock = new class implements \CronLock\Lock {
                private bool $held = false;
                public function acquire(float $timeout = 0.0): bool { return $this->held = true; }
                public function renew(?float $ttl = null): bool { return $this->held; }
                public function release(): bool { echo "RELEASED\n"; $this->held = false; return true; }
                public function isHeld(): bool { return $this->held; }
            };
            $fiber = new Fiber(function () use ($lock) { cron_guard(function () { Fiber::suspend(); }, $lock); });
            $fiber->start();
            echo "END OF SCRIPT: ", $lock->isHeld() ? 'HELD' : 'FREE', "\n";
            PHP, "END OF SCRIPT: HELD\nRELEASED\n", 0];
        // PHP unwinds a suspended Fiber that is destroyed: the guard ends there.
        yield 'a Fiber destroyed while suspended in a guard frees its lock at once' => [<<<'PHP'
            $fiber = new Fiber(function () { cron_guard(function () { Fiber::suspend(); echo "RESUMED\n"; }, 'a'); });
            $fiber->start();
            echo "SUSPENDED: a ", lock_is_free('a') ? 'FREE' : 'HELD', "\n";
            unset($fiber);
            echo "DESTROYED: a ", lock_is_free('a') ? 'FREE' : 'HELD', "\n";
            PHP, "SUSPENDED: a HELD\nDESTROYED: a FREE\n", 0];
        yield 'a destroyed Fiber leaves the hold another Fiber shares on that lock object' => [<<<'PHP'
            $lock = new \CronLock\File(getenv("CRONLOCK_LOCK_DIR") . "/a.lock");
            $job = function () { Fiber::suspend(); };
            $first = new Fiber(function () use ($lock, $job) { cron_guard($job, $lock); });
            $second = new Fiber(function () use ($lock, $job) { cron_guard($job, $lock); echo "SECOND DONE\n"; });
            $first->start();
            $second->start();
            unset($first);
            echo "FIRST DESTROYED: ", $lock->isHeld() ? 'HELD' : 'FREE', "\n";
            $second->resume();
            echo "SECOND ENDED: ", $lock->isHeld() ? 'HELD' : 'FREE', "\n";
            PHP, "FIRST DESTROYED: HELD\nSECOND DONE\nSECOND ENDED: FREE\n", 0];
    }

    /**
     * @dataProvider fiberScenarios
     * @requires PHP >= 8.1
     */
    public function testGuardsInsideFibers(string $script, string $stdout, int $status): void
    {
        for ($run = 0; $run < 3; $run++) { // the crash this guards against was intermittent
            $p = Proc::run($this->prelude() . $script, [], [], 20.0);
            self::assertSame($status, $p->exitCode(), $p->stdout() . $p->stderr());
            self::assertSame($stdout, $p->stdout(), $p->stderr());
            self::assertStringNotContainsString('Couldn', $p->stderr());
        }
        foreach (['outer', 'inner', 'a', 'b', 'c'] as $name) {
            self::assertTrue($this->isFree("{$this->lockDir}/$name.lock"));
        }
    }
}

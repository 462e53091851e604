<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\File;
use CronLock\Redis;
use CronLock\Tests\Support\ErrorLogHelpers;
use CronLock\Tests\Support\FileTestHelpers;
use CronLock\Tests\Support\Proc;
use CronLock\Tests\Support\RecordingLock;
use CronLock\Tests\Support\RedisTestHelpers;
use CronLock\Tests\Support\WebAssembly;
use PHPUnit\Framework\TestCase;

/**
 * cron_guard() where a second round of outside testing crashed it or broke
 * its promises: a userland release() that calls exit(), runs out of memory
 * or suspends its Fiber for good; a fatal error outside every guard while a
 * Fiber is suspended in one; two Fibers guarding one lock object; holder
 * text and paths that would forge log lines; the names '.' and '..'.
 */
final class CronGuardUnwindTest extends TestCase
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
        $this->lockDir = $this->makeTempDir('guard-unwind');
        $this->savedLockDir = ini_get('cronlock.lock_dir');
        ini_set('cronlock.lock_dir', $this->lockDir);
    }

    protected function tearDown(): void
    {
        ini_set('cronlock.lock_dir', (string) $this->savedLockDir);
        $this->restoreErrorLog();
        $this->reapCommands();
        $this->removeTempDirs();
        parent::tearDown();
    }

    /** PHP for a child: the lock dir of this test, errors on stderr, lock_is_free() and a userland lock class. */
    private function prelude(): string
    {
        return 'ini_set("cronlock.lock_dir", ' . var_export($this->lockDir, true) . ");\n"
            . "ini_set('display_errors', 'stderr');\n"
            . 'function lock_is_free(string $name): bool { return (new \CronLock\File(ini_get("cronlock.lock_dir") . "/$name.lock"))->acquire(0); }' . "\n"
            . <<<'PHP'
                class UserLock implements \CronLock\Lock {
                    private bool $held = false;
                    private \Closure $onRelease;
                    public function __construct(\Closure $onRelease) { $this->onRelease = $onRelease; }
                    public function acquire(float $timeout = 0.0): bool { return $this->held = true; }
                    public function renew(?float $ttl = null): bool { return $this->held; }
                    public function release(): bool { $this->held = false; return ($this->onRelease)(); }
                    public function isHeld(): bool { return $this->held; }
                }

                PHP;
    }

    private function runChild(string $script): Proc
    {
        $p = Proc::run($this->prelude() . $script, [], [], 30.0);
        self::assertNull($p->termSignal(), 'the child must not die of a signal' . "\n" . $p->stdout() . $p->stderr());
        return $p;
    }

    // ------------------------------------- exit() inside a userland release()

    /** @return iterable<string, array{string, bool}> how the job ends; whether the polyfill releases at shutdown then */
    public static function jobEndings(): iterable
    {
        yield 'the job returns' => ['return "done";', false];
        yield 'the job throws' => ['throw new \RuntimeException("job failed");', false];
        yield 'the job calls exit(3)' => ['exit(3);', true];
        yield 'the job dies of E_USER_ERROR' => ['trigger_error("job fatal", E_USER_ERROR);', true];
    }

    /** @dataProvider jobEndings */
    public function testAnExitInAUserlandReleaseEndsTheScriptWithItsStatus(string $jobEnd, bool $polyfillReleasesAtShutdown): void
    {
        if ($polyfillReleasesAtShutdown && !extension_loaded('cronlock')) {
            self::markTestSkipped('the polyfill releases in a shutdown function then, where an exit() ends the shutdown functions after it');
        }
        $p = $this->runChild(<<<PHP
            register_shutdown_function(function () {
                echo "SHUTDOWN outer ", lock_is_free('outer') ? 'FREE' : 'HELD', "\\n";
            });
            cron_guard(function () {
                cron_guard(function () { $jobEnd }, new UserLock(function () { echo "RELEASE\\n"; exit(8); }));
            }, 'outer');
            echo "NOT REACHED\\n";
            PHP);
        self::assertSame(8, $p->exitCode(), $p->stdout() . $p->stderr());
        self::assertSame("RELEASE\nSHUTDOWN outer FREE\n", $p->stdout(), $p->stderr());
        self::assertStringNotContainsString('releasing lock', $p->stderr(), 'an exit() is no release failure');
    }

    // --------------------------------------------- memory_limit in a release()

    public function testMemoryLimitInAUserlandReleaseIsTheFatalErrorItIs(): void
    {
        $p = $this->runChild(<<<'PHP'
            register_shutdown_function(function () {
                echo "SHUTDOWN outer ", lock_is_free('outer') ? 'FREE' : 'HELD', "\n";
            });
            ini_set('memory_limit', '16M');
            cron_guard(function () {
                cron_guard(fn () => 'done', new UserLock(function () { $a = []; while (true) { $a[] = str_repeat('x', 100000); } }));
            }, 'outer');
            echo "NOT REACHED\n";
            PHP);
        self::assertSame(255, $p->exitCode(), $p->stdout() . $p->stderr());
        self::assertStringContainsString('Allowed memory size of 16777216 bytes exhausted', $p->stderr());
        self::assertSame("SHUTDOWN outer FREE\n", $p->stdout(), $p->stderr());
    }

    // ------------------------------------------------- Fibers that never end

    /**
     * @requires PHP >= 8.1
     */
    public function testAFiberSuspendedForGoodInsideAUserlandReleaseEndsQuietly(): void
    {
        $p = $this->runChild(<<<'PHP'
            $GLOBALS['fiber'] = new Fiber(fn () => cron_guard(fn () => 'done', new UserLock(function () { Fiber::suspend(); echo "RESUMED\n"; return true; })));
            $GLOBALS['fiber']->start();
            echo "END OF SCRIPT\n";
            PHP);
        self::assertSame(0, $p->exitCode(), $p->stdout() . $p->stderr());
        self::assertSame("END OF SCRIPT\n", $p->stdout(), $p->stderr());
        self::assertSame('', $p->stderr(), 'the Fiber destroyed inside release() is no release failure');
    }

    /**
     * @requires PHP >= 8.1
     */
    public function testAFatalErrorOutsideEveryGuardWhileAFiberIsSuspendedInOneOnAUserlandLock(): void
    {
        for ($run = 0; $run < 3; $run++) {
            $p = $this->runChild(<<<'PHP'
                $GLOBALS['fiber'] = new Fiber(fn () => cron_guard(function () { Fiber::suspend(); }, new UserLock(fn () => true)));
                $GLOBALS['fiber']->start();
                echo "SUSPENDED\n";
                trigger_error('fatal outside', E_USER_ERROR);
                PHP);
            self::assertSame(255, $p->exitCode(), $p->stdout() . $p->stderr());
            self::assertSame("SUSPENDED\n", $p->stdout());
            self::assertStringContainsString('fatal outside', $p->stderr());
        }
    }

    // --------------------------------------- two Fibers on one lock object

    /** Whether another process could take $path now. */
    private function freeForOthers(string $path): bool
    {
        return $this->runCommand(['/usr/bin/flock', '-n', $path, 'true'])[0] === 0;
    }

    /** @return iterable<string, array{bool}> whether the first Fiber's job ends first */
    public static function endingOrders(): iterable
    {
        yield 'the first guard ends first' => [true];
        yield 'the second guard ends first' => [false];
    }

    /**
     * @dataProvider endingOrders
     * @requires PHP >= 8.1
     */
    public function testTwoFibersGuardingOneFileObjectKeepItHeldUntilBothJobsEnd(bool $firstEndsFirst): void
    {
        $path = "{$this->lockDir}/fibers.lock";
        $lock = new File($path);
        $first = new \Fiber(fn () => cron_guard(static function () { \Fiber::suspend(); return 'first'; }, $lock));
        $second = new \Fiber(fn () => cron_guard(static function () { \Fiber::suspend(); return 'second'; }, $lock));
        $first->start();
        $second->start();
        self::assertFalse($this->freeForOthers($path), 'held while both jobs run');

        [$early, $late] = $firstEndsFirst ? [$first, $second] : [$second, $first];
        $early->resume();
        self::assertTrue($early->isTerminated());
        self::assertSame($firstEndsFirst ? 'first' : 'second', $early->getReturn(), 'the guard ran its job');
        self::assertTrue($lock->isHeld(), 'the other job still runs');
        self::assertFalse($this->freeForOthers($path), 'no other process may run the job while one still runs here');

        $late->resume();
        self::assertSame($firstEndsFirst ? 'second' : 'first', $late->getReturn());
        self::assertFalse($lock->isHeld());
        self::assertTrue($this->freeForOthers($path), 'released once the last job ended');
    }

    /**
     * @requires PHP >= 8.1
     */
    public function testTwoFibersGuardingOneUserlandLockReleaseItOnceAfterTheLastJob(): void
    {
        $lock = new RecordingLock();
        $first = new \Fiber(fn () => cron_guard(static function () { \Fiber::suspend(); }, $lock));
        $second = new \Fiber(fn () => cron_guard(static function () { \Fiber::suspend(); }, $lock));
        $first->start();
        $second->start();
        $first->resume();
        self::assertSame(['acquire(0.0)', 'acquire(0.0)'], $lock->calls, 'no release while the second job runs');
        self::assertTrue($lock->isHeld());
        $second->resume();
        self::assertSame(['acquire(0.0)', 'acquire(0.0)', 'release'], $lock->calls);
        self::assertFalse($lock->isHeld());
    }

    /**
     * @requires PHP >= 8.1
     */
    public function testAGuardInAFiberOnALockItsCallerTookItselfReleasesNothing(): void
    {
        $lock = new RecordingLock();
        self::assertTrue($lock->acquire(0));
        $fiber = new \Fiber(fn () => cron_guard(static function () { \Fiber::suspend(); }, $lock));
        $fiber->start();
        $other = new \Fiber(fn () => cron_guard(static fn () => 'ran', $lock));
        $other->start();
        $fiber->resume();
        self::assertSame(['acquire(0.0)', 'acquire(0.0)', 'acquire(0.0)'], $lock->calls, 'the caller\'s hold is the caller\'s to release');
        self::assertTrue($lock->isHeld());
    }

    // ----------------------------------------------- log lines stay one line

    public function testAForgedRedisHolderCannotWriteASecondLogLine(): void
    {
        $key = 'forged:' . getmypid() . ':' . bin2hex(random_bytes(3));
        self::raw('SET', $key, "deadbeef:1@evil\ncron_guard: lock FAKE released; all good");
        try {
            $log = $this->logToFile($this->lockDir);
            self::assertNull(cron_guard(static fn () => 'ran', new Redis(self::$server->dsn(), $key, 5.0)));
            $lines = self::logLines($log);
            self::assertCount(1, $lines, implode("\n", $lines));
            self::assertMatchesRegularExpression('/is held by pid 1 on evil\\\\ncron_guard: lock FAKE released; all good; waited \\d+\\.\\d s; skipping this run/', $lines[0]);
        } finally {
            self::raw('DEL', $key);
        }
    }

    public function testAPathWithControlCharactersStaysOnOneLogLine(): void
    {
        WebAssembly::skip('no /proc/locks (php-wasm has its own /proc), so holderPid() is null and the busy line says "pid unknown"');
        $dir = "{$this->lockDir}/a\nb";
        mkdir($dir);
        $path = "$dir/c\rd\e.lock";
        $holder = Proc::start(sprintf('$l = new \CronLock\File(%s); $l->acquire(0); echo "HELD\n"; sleep(60);', var_export($path, true)));
        $holder->waitForLine('HELD', 15.0, 'stdout');
        $log = $this->logToFile($this->lockDir);
        self::assertNull(cron_guard(static fn () => 'ran', new File($path)));
        $holder->kill();
        $raw = (string) file_get_contents($log);
        self::assertSame(1, substr_count($raw, "\n"), $raw);
        self::assertStringNotContainsString("\r", $raw);
        self::assertStringContainsString("cron_guard: lock {$this->lockDir}/a\\nb/c\\rd\\u{1b}.lock is held by pid {$holder->pid()} on ", $raw);
    }

    public function testAMultiLineReleaseFailureIsLoggedOnOneLine(): void
    {
        $log = $this->logToFile($this->lockDir);
        $lock = new class () implements \CronLock\Lock {
            private bool $held = false;
            public function acquire(float $timeout = 0.0): bool { return $this->held = true; }
            public function renew(?float $ttl = null): bool { return $this->held; }
            public function release(): bool { throw new \RuntimeException("release broke\ncron_guard: all good"); }
            public function isHeld(): bool { return $this->held; }
        };
        try {
            cron_guard(static fn () => 'done', $lock);
            self::fail('the release failure must be thrown');
        } catch (\RuntimeException $e) {
            self::assertSame("release broke\ncron_guard: all good", $e->getMessage(), 'the exception itself is unchanged');
        }
        $lines = self::logLines($log);
        self::assertCount(1, $lines, implode("\n", $lines));
        self::assertStringEndsWith('failed: release broke\ncron_guard: all good', $lines[0]);
    }

    // ------------------------------------------------------ '.' and '..'

    public function testTheNamesDotAndDotDotAreRefusedAsDocumented(): void
    {
        foreach (['.', '..'] as $name) {
            try {
                cron_guard(static fn () => 'ran', $name);
                self::fail("'$name' must be refused");
            } catch (\ValueError $e) {
                self::assertStringContainsString('$lock', $e->getMessage());
                self::assertStringEndsWith(
                    " must be a lock name of 1 to 200 characters [A-Za-z0-9._-] other than '.' and '..', '$name' given",
                    $e->getMessage()
                );
            }
        }
        self::assertSame('ran', cron_guard(static fn () => 'ran', '...'));
        self::assertSame('ran', cron_guard(static fn () => 'ran', '.hidden'));
    }
}

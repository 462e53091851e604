<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\File;
use CronLock\Guard;
use CronLock\Lock;
use CronLock\LockException;
use CronLock\Tests\Support\ErrorLogHelpers;
use CronLock\Tests\Support\FileTestHelpers;
use CronLock\Tests\Support\Proc;
use CronLock\Tests\Support\RecordingLock;
use CronLock\Tests\Support\WebAssembly;
use PHPUnit\Framework\TestCase;

/** cron_guard() and CronLock\Guard, with File locks in a temp cronlock.lock_dir. */
final class CronGuardTest extends TestCase
{
    use ErrorLogHelpers;
    use FileTestHelpers;

    private string $lockDir;
    private string $controlDir;
    /** @var string|false */
    private $savedLockDir = false;

    protected function setUp(): void
    {
        parent::setUp();
        $this->lockDir = $this->makeTempDir('guard');
        $this->controlDir = $this->makeTempDir('guard-control');
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

    /**
     * cron_guard() with $lock and $options must throw a $class before it
     * calls the job; returns what it threw.
     *
     * @param class-string<\Throwable> $class
     * @param mixed $lock
     * @param array<mixed> $options
     */
    private static function guardRefusal(string $class, $lock, array $options = []): \Throwable
    {
        $ran = false;
        try {
            cron_guard(function () use (&$ran) {
                $ran = true;
            }, $lock, $options);
        } catch (\Throwable $e) {
            self::assertInstanceOf($class, $e, $e->getMessage());
            self::assertFalse($ran, 'the job is not called');
            return $e;
        }
        self::fail("expected $class");
    }

    /** PHP for a child: cronlock.lock_dir = this test's directory. */
    private function childPrelude(): string
    {
        return 'ini_set("cronlock.lock_dir", ' . var_export($this->lockDir, true) . ");\n"
            . 'putenv("CRONLOCK_LOCK_DIR=" . ' . var_export($this->lockDir, true) . ");\n";
    }

    /** A child holding "<lock_dir>/$name.lock" until released; prints HELD. */
    private function startHolder(string $name, float $releaseAfter = -1.0): array
    {
        $stop = "{$this->controlDir}/stop-$name";
        $p = Proc::start(sprintf(<<<'PHP'
            $lock = new \CronLock\File(%s);
            if (!$lock->acquire(0)) { echo "BUSY\n"; exit(2); }
            echo "HELD\n";
            $t0 = microtime(true);
            while (!file_exists(%s) && (%F < 0 || microtime(true) - $t0 < %F)) { usleep(500); }
            $lock->release();
            echo "RELEASED\n";
            PHP, var_export("{$this->lockDir}/$name.lock", true), var_export($stop, true), $releaseAfter, $releaseAfter));
        $p->waitForLine('HELD', 15.0, 'stdout');
        return [$p, $stop];
    }

    private function stopHolder(array $holder): void
    {
        [$p, $stop] = $holder;
        touch($stop);
        $p->waitForLine('RELEASED', 10.0, 'stdout');
        self::assertSame(0, $p->wait());
        unlink($stop);
    }

    // -------------------------------------------------------------- basics

    public function testRunsTheJobWithAGuardAndReturnsItsResult(): void
    {
        $result = new \stdClass();
        $args = null;
        $returned = cron_guard(function (...$a) use ($result, &$args) {
            $args = $a;
            return $result;
        }, 'basic');

        self::assertSame($result, $returned, "cron_guard() returns the job's result");
        self::assertIsArray($args);
        self::assertCount(1, $args, 'the job gets one argument');
        self::assertInstanceOf(Guard::class, $args[0]);
        self::assertSame([1, 2], cron_guard(static fn () => [1, 2], 'basic'));
        self::assertSame('', cron_guard(static fn () => '', 'basic'));
        self::assertFalse(cron_guard(static fn () => false, 'basic'));
    }

    public function testANamedLockIsAFileInTheLockDir(): void
    {
        $name = 'sync-orders.v2_X';
        $path = "{$this->lockDir}/$name.lock";
        $seen = cron_guard(function (Guard $g) use ($path) {
            $lock = $g->lock();
            return [
                'class' => get_class($lock),
                'path' => $lock instanceof File ? $lock->path() : null,
                'exists' => file_exists($path),
                'held' => $lock->isHeld(),
                'free for others' => $this->isFree($path),
            ];
        }, $name);

        self::assertSame(['class' => File::class, 'path' => $path, 'exists' => true, 'held' => true, 'free for others' => false], $seen);
        self::assertTrue($this->isFree($path), 'released after the job');
        self::assertFileExists($path, 'never unlinked');

        // the other way round: a process holding that file makes the name busy
        $holder = $this->startHolder($name);
        $log = $this->logToFile($this->controlDir);
        self::assertNull(cron_guard(static fn () => 'ran', $name));
        $this->stopHolder($holder);
        self::assertSame('ran', cron_guard(static fn () => 'ran', $name));
        self::assertCount(1, self::logLines($log));
    }

    public function testTheLongestValidNameIsAccepted(): void
    {
        $name = str_repeat('a', 200);
        self::assertSame('ok', cron_guard(static fn () => 'ok', $name));
        self::assertFileExists("{$this->lockDir}/$name.lock");
    }

    /** @return iterable<string, array{string}> */
    public static function badNames(): iterable
    {
        yield 'empty' => [''];
        yield 'slash' => ['a/b'];
        yield 'dot dot' => ['..'];
        yield 'dot' => ['.'];
        yield 'parent path' => ['../escape'];
        yield 'NUL byte' => ["a\0b"];
        yield '201 chars' => [str_repeat('a', 201)];
        yield 'space' => ['a b'];
        yield 'non-ASCII' => ['zähler'];
        yield 'trailing newline' => ["sync\n"];
        yield 'leading newline' => ["\nsync"];
    }

    /** @dataProvider badNames */
    public function testABadLockNameThrowsValueErrorNamingLock(string $name): void
    {
        $e = self::guardRefusal(\ValueError::class, $name);
        self::assertStringContainsString('$lock', $e->getMessage());
        self::assertSame([], array_values(array_diff(scandir($this->lockDir), ['.', '..'])), 'no file created');
        self::assertFileDoesNotExist(dirname($this->lockDir) . '/escape.lock');
    }

    /** @return iterable<string, array{array<mixed>, class-string<\Throwable>, list<string>}> */
    public static function badOptions(): iterable
    {
        yield 'unknown option' => [['timeout' => 1.0], \ValueError::class, ['$options', "'timeout'"]];
        yield 'int key' => [[5 => 1], \ValueError::class, ['$options', "'5'"]];
        yield 'wait string' => [['wait' => '1'], \TypeError::class, ["\$options['wait']"]];
        yield 'wait array' => [['wait' => []], \TypeError::class, ["\$options['wait']"]];
        yield 'wait NaN' => [['wait' => NAN], \ValueError::class, ["\$options['wait']"]];
        yield 'max_runtime string' => [['max_runtime' => '10'], \TypeError::class, ["\$options['max_runtime']"]];
        yield 'max_runtime zero' => [['max_runtime' => 0], \ValueError::class, ["\$options['max_runtime']"]];
        yield 'max_runtime negative' => [['max_runtime' => -1.0], \ValueError::class, ["\$options['max_runtime']"]];
        yield 'on_busy string' => [['on_busy' => '3'], \TypeError::class, ["\$options['on_busy']"]];
        yield 'on_busy float' => [['on_busy' => 1.5], \TypeError::class, ["\$options['on_busy']"]];
        yield 'on_busy bool' => [['on_busy' => true], \TypeError::class, ["\$options['on_busy']"]];
        yield 'on_busy 256' => [['on_busy' => 256], \ValueError::class, ["\$options['on_busy']"]];
        yield 'on_busy -1' => [['on_busy' => -1], \ValueError::class, ["\$options['on_busy']"]];
    }

    /** @dataProvider badOptions */
    public function testBadOptionsThrowNamingTheOption(array $options, string $class, array $needles): void
    {
        $e = self::guardRefusal($class, 'opts', $options);
        foreach ($needles as $needle) {
            self::assertStringContainsString($needle, $e->getMessage());
        }
    }

    /** @return iterable<string, array{mixed}> */
    public static function wrongLockTypes(): iterable
    {
        yield 'int' => [5];
        yield 'float' => [1.5];
        yield 'bool' => [true];
        yield 'array' => [['job']];
        yield 'stdClass' => [new \stdClass()];
        yield 'closure' => [static fn () => null];
    }

    /**
     * @dataProvider wrongLockTypes
     * @param mixed $lock
     */
    public function testAWrongLockTypeThrowsTypeError($lock): void
    {
        if (!extension_loaded('cronlock') && is_scalar($lock)) {
            self::markTestSkipped('strict_types: cronlock/polyfill cannot see it, and coerces a scalar lock as weak mode does (ArgumentTypesTest)');
        }
        $e = self::guardRefusal(\TypeError::class, $lock);
        self::assertStringContainsString('$lock', $e->getMessage());
    }

    // ------------------------------------------------------ userland locks

    public function testAUserlandLockIsAcquiredAndReleased(): void
    {
        $lock = new RecordingLock();
        $result = cron_guard(function (Guard $g) use ($lock) {
            $lock->calls[] = 'job';
            self::assertSame($lock, $g->lock());
            self::assertTrue($g->renew());
            return 'done';
        }, $lock, ['wait' => 1.5]);

        self::assertSame('done', $result);
        self::assertSame(['acquire(1.5)', 'job', 'renew', 'release'], $lock->calls);
        self::assertFalse($lock->isHeld());
    }

    public function testAUserlandLockIsReleasedWhenTheJobThrows(): void
    {
        $lock = new RecordingLock();
        $thrown = new \LogicException('job failed', 3);
        try {
            cron_guard(function () use ($lock, $thrown) {
                $lock->calls[] = 'job';
                throw $thrown;
            }, $lock);
            self::fail('the exception must propagate');
        } catch (\LogicException $e) {
            self::assertSame($thrown, $e);
        }
        self::assertSame(['acquire(0.0)', 'job', 'release'], $lock->calls);
    }

    public function testABusyUserlandLockSkipsTheJob(): void
    {
        $log = $this->logToFile($this->controlDir);
        $lock = new RecordingLock(false);
        $result = cron_guard(function () use ($lock) {
            $lock->calls[] = 'job';
            return 'ran';
        }, $lock);
        self::assertNull($result);
        self::assertNotContains('job', $lock->calls);
        self::assertSame('acquire(0.0)', $lock->calls[0]);
        self::assertCount(1, self::logLines($log), 'one error_log() line');
    }

    /** @return iterable<string, array{string}> */
    public static function forkChildEndings(): iterable
    {
        yield 'the child exit()s' => ['exit(0);'];
        yield 'the child returns from the job' => ['return "child";'];
        yield 'the child throws' => ['throw new \RuntimeException("the worker failed");'];
    }

    /**
     * A pcntl_fork() worker inherits the cron_guard() running in its parent:
     * its end (exit(), return, an uncaught exception) must not call
     * release() on the parent's lock, which a lock class of the user's own
     * (one flock() file description for both processes) frees for both.
     *
     * @dataProvider forkChildEndings
     */
    public function testAForkChildEndingInsideTheJobNeverReleasesTheParentsLock(string $childEnds): void
    {
        if (!function_exists('pcntl_fork')) {
            self::markTestSkipped('needs pcntl_fork()');
        }
        if (!is_executable('/usr/bin/flock')) {
            self::markTestSkipped('needs util-linux flock(1)');
        }
        $code = <<<'PHP'
            $path = $argv[1];
            $me = getmypid();
            echo "PARENT $me\n";
            $lock = new class ($path) implements CronLock\Lock {
                private $handle;
                private $held = false;
                public function __construct(string $path) { $this->handle = fopen($path, 'c'); }
                public function acquire(float $timeout = 0.0): bool { return $this->held = flock($this->handle, LOCK_EX | LOCK_NB); }
                public function renew(?float $ttl = null): bool { return $this->held; }
                public function release(): bool
                {
                    if (!$this->held) { return false; }
                    $this->held = false;
                    echo "RELEASE in ", getmypid(), "\n";
                    return flock($this->handle, LOCK_UN);
                }
                public function isHeld(): bool { return $this->held; }
            };
            $result = cron_guard(function () use ($path) {
                $pid = pcntl_fork();
                if ($pid === 0) {
                    CHILD_ENDS
                }
                pcntl_waitpid($pid, $status);
                exec('/usr/bin/flock -n ' . escapeshellarg($path) . ' true', $out, $rc);
                echo $rc === 0 ? "OTHER GOT IT\n" : "OTHER BUSY\n";
                return 'parent';
            }, $lock);
            if (getmypid() !== $me) { exit(0); }
            echo "DONE $result\n";
            PHP;
        $p = Proc::start(str_replace('CHILD_ENDS', $childEnds, $code), ["{$this->controlDir}/userland.lock"]);
        $p->wait();
        $out = $p->stdout();
        self::assertMatchesRegularExpression('/^PARENT (\d+)$/m', $out, $out . $p->stderr());
        preg_match('/^PARENT (\d+)$/m', $out, $m);
        self::assertStringContainsString("OTHER BUSY\n", $out, 'the lock stays held while the parent\'s job runs: ' . $out . $p->stderr());
        $releases = array_values(preg_grep('/^RELEASE /', explode("\n", $out)));
        self::assertSame(["RELEASE in {$m[1]}"], $releases, 'release() runs in the parent only, once');
        self::assertStringContainsString("DONE parent\n", $out);
    }

    public function testAnExceptionFromAUserlandAcquirePropagates(): void
    {
        $failing = new class () implements Lock {
            public function acquire(float $timeout = 0.0): bool
            {
                throw new \RuntimeException('backend down');
            }
            public function renew(?float $ttl = null): bool
            {
                return false;
            }
            public function release(): bool
            {
                return false;
            }
            public function isHeld(): bool
            {
                return false;
            }
        };
        $e = self::guardRefusal(\RuntimeException::class, $failing);
        self::assertStringContainsString('backend down', $e->getMessage());
    }

    // ---------------------------------------------------------------- busy

    public function testBusyReturnsNullAndLogsOneLineWithPathAndHolderPid(): void
    {
        WebAssembly::skip('no /proc/locks (php-wasm has its own /proc), so holderPid() is null and the busy line says "pid unknown"');
        [$p] = $holder = $this->startHolder('job');
        $log = $this->logToFile($this->controlDir);
        $ran = false;
        $result = cron_guard(function () use (&$ran) {
            $ran = true;
        }, 'job');

        self::assertNull($result);
        self::assertFalse($ran, 'the job is not called');
        $lines = self::logLines($log);
        self::assertCount(1, $lines, implode("\n", $lines));
        self::assertStringContainsString("{$this->lockDir}/job.lock", $lines[0], 'names the lock');
        self::assertMatchesRegularExpression('/\b' . $p->pid() . '\b/', $lines[0], "names the holder's pid");
        $this->stopHolder($holder);
    }

    /** @return iterable<string, array{int}> */
    public static function busyStatuses(): iterable
    {
        yield 'on_busy 3' => [3];
        yield 'on_busy 0' => [0];
        yield 'on_busy 75 (EX_TEMPFAIL)' => [75];
    }

    /** @dataProvider busyStatuses */
    public function testOnBusyExitsWithThatStatus(int $status): void
    {
        $holder = $this->startHolder('job');
        $t0 = microtime(true);
        $p = Proc::run($this->childPrelude() . sprintf(<<<'PHP'
            register_shutdown_function(function () { echo "SHUTDOWN\n"; });
            $r = cron_guard(function () { echo "JOB RAN\n"; }, 'job', ['on_busy' => %d]);
            echo "AFTER CRON_GUARD\n";
            PHP, $status));
        $elapsed = microtime(true) - $t0;

        self::assertSame($status, $p->exitCode(), $p->stdout() . $p->stderr());
        self::assertStringNotContainsString('JOB RAN', $p->stdout());
        self::assertStringNotContainsString('AFTER CRON_GUARD', $p->stdout(), 'exits at once, as exit() does');
        self::assertStringContainsString("{$this->lockDir}/job.lock", $p->stderr(), 'the busy line (CLI error_log goes to stderr)');
        self::assertLessThan(10.0, $elapsed, 'does not wait (generous bound)');
        $this->stopHolder($holder);
    }

    public function testWaitGetsTheLockWhenTheHolderReleasesInTime(): void
    {
        [$p] = $this->startHolder('job', 0.3);
        $t0 = microtime(true);
        $result = cron_guard(static fn () => 'got it', 'job', ['wait' => 1.0]);
        $elapsed = microtime(true) - $t0;
        self::note(sprintf("'wait' => 1.0: job ran after %.3f s", $elapsed));
        self::assertSame('got it', $result);
        $p->waitForLine('RELEASED', 10.0, 'stdout');
        self::assertSame(0, $p->wait());
    }

    public function testWaitGivesUpWhenTheHolderKeepsTheLock(): void
    {
        $holder = $this->startHolder('job');
        $this->logToFile($this->controlDir);
        $t0 = microtime(true);
        $result = cron_guard(static fn () => 'ran', 'job', ['wait' => 0.3]);
        $elapsed = microtime(true) - $t0;
        self::assertNull($result);
        self::assertGreaterThanOrEqual(0.29, $elapsed, "'wait' => 0.3 waits about that long");
        self::assertLessThan(10.0, $elapsed);
        $this->stopHolder($holder);
    }

    // ------------------------------------------------ every way out releases

    /** @return iterable<string, array{string, int, list<string>}> job body, exit status, stdout/stderr needles */
    public static function waysOut(): iterable
    {
        yield 'return' => ['return 42;', 0, ['RETURNED 42']];
        yield 'exception' => ['throw new \DomainException("boom from job", 7);', 255, ['Uncaught DomainException: boom from job']];
        yield 'exit(5)' => ['exit(5);', 5, []];
        yield 'E_USER_ERROR' => ['trigger_error("fatal from job", E_USER_ERROR);', 255, ['fatal from job']];
        yield 'max_execution_time' => ['set_time_limit(1); $i = 0; while (true) { $i++; }', 255, ['Maximum execution time']];
        yield 'memory_limit' => ['ini_set("memory_limit", "32M"); $a = []; while (true) { $a[] = str_repeat("x", 1 << 20); }', 255, ['Allowed memory size']];
    }

    /** @dataProvider waysOut */
    public function testTheLockIsFreeBeforeShutdownFunctionsRun(string $body, int $status, array $needles): void
    {
        if (strpos($body, 'set_time_limit(') !== false) {
            WebAssembly::skip('max_execution_time never fires');
        }
        $path = "{$this->lockDir}/job.lock";
        $code = $this->childPrelude() . sprintf(<<<'PHP'
            ini_set('display_errors', 'stderr');
            register_shutdown_function(function () {
                $probe = new \CronLock\File(%s);
                $free = $probe->acquire(0);
                if ($free) { $probe->release(); }
                echo $free ? "SHUTDOWN: FREE\n" : "SHUTDOWN: STILL HELD\n";
            });
            $r = cron_guard(function (\CronLock\Guard $g) {
                echo "JOB STARTED\n";
                %s
            }, 'job');
            echo "RETURNED ", var_export($r, true), "\n";
            PHP, var_export($path, true), $body);
        $p = Proc::run($code, [], [], 30.0);
        $all = $p->stdout() . $p->stderr();

        self::assertStringContainsString('JOB STARTED', $p->stdout(), $all);
        self::assertSame($status, $p->exitCode(), $all);
        foreach ($needles as $needle) {
            self::assertStringContainsString($needle, $all);
        }
        self::assertStringContainsString('SHUTDOWN: FREE', $p->stdout(), 'the lock must be released before shutdown functions run: ' . $all);
        self::assertTrue($this->isFree($path));
    }

    /** @return iterable<string, array{string, int}> */
    public static function userlandWaysOut(): iterable
    {
        yield 'exit(4)' => ['exit(4);', 4];
        yield 'E_USER_ERROR' => ['trigger_error("fatal from job", E_USER_ERROR);', 255];
        yield 'uncaught exception' => ['throw new \RuntimeException("boom");', 255];
        yield 'memory_limit' => ['ini_set("memory_limit", "32M"); $a = []; while (true) { $a[] = str_repeat("x", 1 << 20); }', 255];
        yield 'max_execution_time' => ['set_time_limit(1); $i = 0; while (true) { $i++; }', 255];
    }

    /** @dataProvider userlandWaysOut */
    public function testAUserlandLockIsReleasedBeforeShutdownFunctionsOnEveryWayOut(string $body, int $status): void
    {
        if (strpos($body, 'set_time_limit(') !== false) {
            WebAssembly::skip('max_execution_time never fires');
        }
        $code = <<<'PHP'
            final class UserLock implements \CronLock\Lock {
                private bool $held = false;
                public function acquire(float $timeout = 0.0): bool { return $this->held = true; }
                public function renew(?float $ttl = null): bool { return $this->held; }
                public function release(): bool { echo "RELEASE CALLED\n"; $was = $this->held; $this->held = false; return $was; }
                public function isHeld(): bool { return $this->held; }
            }
            $lock = new UserLock();
            register_shutdown_function(function () use ($lock) {
                echo $lock->isHeld() ? "SHUTDOWN: STILL HELD\n" : "SHUTDOWN: RELEASED\n";
            });
            cron_guard(function () { echo "JOB STARTED\n"; BODY }, $lock);
            echo "AFTER\n";
            PHP;
        $p = Proc::run(str_replace('BODY', $body, $code), [], [], 30.0);
        $all = $p->stdout() . $p->stderr();
        self::assertSame($status, $p->exitCode(), $all);
        self::assertStringContainsString('JOB STARTED', $p->stdout(), $all);
        self::assertSame(1, substr_count($p->stdout(), 'RELEASE CALLED'), 'release() called once: ' . $all);
        self::assertStringContainsString('SHUTDOWN: RELEASED', $p->stdout(), $all);
        self::assertStringNotContainsString('AFTER', $p->stdout());
    }

    public function testAnExceptionPropagatesUnchanged(): void
    {
        $previous = new \InvalidArgumentException('cause');
        $thrown = new \DomainException('boom', 42, $previous);
        $path = "{$this->lockDir}/job.lock";
        $heldDuringJob = null;
        try {
            cron_guard(function () use ($thrown, $path, &$heldDuringJob) {
                $heldDuringJob = !$this->isFree($path);
                throw $thrown;
            }, 'job');
            self::fail('the exception must propagate');
        } catch (\Throwable $e) {
            self::assertSame($thrown, $e, 'the very same object');
            self::assertSame(\DomainException::class, get_class($e));
            self::assertSame('boom', $e->getMessage());
            self::assertSame(42, $e->getCode());
            self::assertSame($previous, $e->getPrevious());
        }
        self::assertTrue($heldDuringJob);
        self::assertTrue($this->isFree($path), 'released');
    }

    public function testAnErrorThrownByTheJobPropagatesUnchanged(): void
    {
        $path = "{$this->lockDir}/job.lock";
        try {
            cron_guard(static function () {
                return intdiv(1, 0);
            }, 'job');
            self::fail('DivisionByZeroError must propagate');
        } catch (\DivisionByZeroError $e) {
            self::assertSame('Division by zero', $e->getMessage());
        }
        self::assertTrue($this->isFree($path));
    }

    // ------------------------------------------------------ lock by script

    public function testTheNullLockIsNamedAfterTheScriptsRealPath(): void
    {
        WebAssembly::skip('no /proc/locks (php-wasm has its own /proc), so holderPid() is null and the busy line says "pid unknown"');
        $scripts = $this->makeTempDir('scripts');
        $stop = "$scripts/stop";
        $code = <<<'PHP'
            <?php
            ini_set('cronlock.lock_dir', $argv[1]);
            putenv("CRONLOCK_LOCK_DIR=$argv[1]");
            $r = cron_guard(function (\CronLock\Guard $g) use ($argv) {
                echo "RUNNING ", $g->lock()->path(), "\n";
                while (!file_exists($argv[2])) { usleep(2000); }
                return 'done';
            });
            echo $r === null ? "SKIPPED\n" : "RESULT $r\n";
            PHP;
        mkdir("$scripts/other");
        foreach (['sync_orders.php', 'sync_orders_archive.php', 'other/sync_orders.php'] as $f) {
            file_put_contents("$scripts/$f", $code);
        }
        symlink("$scripts/sync_orders.php", "$scripts/alias.php");
        $args = [$this->lockDir, $stop];

        $running = [];
        $paths = [];
        foreach (['sync_orders.php', 'sync_orders_archive.php', 'other/sync_orders.php'] as $f) {
            $p = Proc::startScript("$scripts/$f", $args);
            $paths[$f] = substr($p->waitForLine('RUNNING', 15.0, 'stdout'), 8);
            $running[$f] = $p;
        }
        self::assertCount(3, array_unique($paths), 'three scripts, three locks: ' . var_export($paths, true));
        foreach ($paths as $path) {
            self::assertFileExists($path);
        }

        $again = Proc::startScript("$scripts/sync_orders.php", $args);
        self::assertSame(0, $again->wait(15.0), $again->stderr());
        self::assertSame("SKIPPED\n", $again->stdout(), 'the same script run twice: the second run is skipped');
        self::assertStringContainsString($paths['sync_orders.php'], $again->stderr(), 'busy line names the lock');
        self::assertMatchesRegularExpression('/\b' . $running['sync_orders.php']->pid() . '\b/', $again->stderr(), 'and the holder pid');

        $viaLink = Proc::startScript("$scripts/alias.php", $args);
        self::assertSame(0, $viaLink->wait(15.0), $viaLink->stderr());
        self::assertSame("SKIPPED\n", $viaLink->stdout(), 'a symlink to the script maps to the same lock');

        touch($stop);
        foreach ($running as $f => $p) {
            self::assertSame(0, $p->wait(15.0), $p->stderr());
            self::assertStringContainsString('RESULT done', $p->stdout(), $f);
        }
    }

    /** A script named in Latin-1 (not UTF-8) runs under its null lock, named byte by byte. */
    public function testTheNullLockOfAScriptWhoseNameIsNotUtf8(): void
    {
        WebAssembly::skip('its file system turns a path that is not UTF-8 into U+FFFD');
        $scripts = $this->makeTempDir('scripts');
        $script = "$scripts/\xfcber.php";
        file_put_contents($script, <<<'PHP'
            <?php
            ini_set('cronlock.lock_dir', $argv[1]);
            putenv("CRONLOCK_LOCK_DIR=$argv[1]");
            cron_guard(function (\CronLock\Guard $g) { echo "PATH ", $g->lock()->path(), "\n"; });
            PHP);
        $p = Proc::startScript($script, [$this->lockDir]);
        self::assertSame(0, $p->wait(15.0), $p->stdout() . $p->stderr());
        self::assertStringStartsWith("PATH {$this->lockDir}/_ber.php.", $p->stdout(), $p->stderr());
    }

    public function testTheNullLockWithoutAScriptFileThrowsValueError(): void
    {
        if ((string) getenv('CRONLOCK_TEST_PREDIS') !== '') {
            // the polyfill takes the first file its auto_prepend_file included as the main script
            self::markTestSkipped('predis is loaded through the auto_prepend_file (CRONLOCK_TEST_PREDIS): its Autoloader.php would be the main script');
        }
        [$code, $out, $err] = $this->runCommand([...self::phpCommand(), '-r', <<<'PHP'
            function_exists('cron_guard') || require getenv('CRONLOCK_POLYFILL'); // php -r skips auto_prepend_file
            ini_set('cronlock.lock_dir', sys_get_temp_dir());
            putenv('CRONLOCK_LOCK_DIR=' . sys_get_temp_dir());
            try { cron_guard(function () { echo "JOB RAN\n"; }); echo "NO EXCEPTION\n"; }
            catch (\Throwable $e) { echo get_class($e), ': ', $e->getMessage(), "\n"; }
            PHP]);
        self::assertSame(0, $code, $err);
        self::assertStringStartsWith('ValueError: ', $out, $err);
        self::assertStringContainsString('$lock', $out);
        self::assertStringNotContainsString('JOB RAN', $out);
    }

    // ---------------------------------------------------------------- Guard

    public function testGuardWithoutMaxRuntime(): void
    {
        $seen = cron_guard(static fn (Guard $g) => [$g->remaining(), $g->expired()], 'guard');
        self::assertSame([null, false], $seen);
    }

    public function testGuardRemainingDecreasesFromMaxRuntime(): void
    {
        [$first, $second] = cron_guard(static function (Guard $g) {
            $first = $g->remaining();
            usleep(50_000);
            return [$first, $g->remaining(), $g->expired()];
        }, 'guard', ['max_runtime' => 30.0]);
        self::assertIsFloat($first);
        self::assertLessThanOrEqual(30.0, $first);
        self::assertGreaterThan(20.0, $first, 'about max_runtime at the start (generous)');
        self::assertLessThan($first, $second, 'remaining() decreases');
        self::assertGreaterThan(0.04, $first - $second, 'by about the time slept');
    }

    public function testGuardExpiresAfterMaxRuntime(): void
    {
        $seen = cron_guard(static function (Guard $g) {
            $before = [$g->remaining()];
            usleep(250_000);
            return [$before[0], $g->remaining(), $g->expired()];
        }, 'guard', ['max_runtime' => 0.2]);
        self::assertIsFloat($seen[0]);
        self::assertLessThanOrEqual(0.2, $seen[0]);
        self::assertSame(0.0, $seen[1], 'nothing left once max_runtime passed');
        self::assertTrue($seen[2], 'expired() after max_runtime');
    }

    public function testGuardExpiredIsFalseBeforeMaxRuntime(): void
    {
        self::assertFalse(cron_guard(static fn (Guard $g) => $g->expired(), 'guard', ['max_runtime' => 60]));
    }

    public function testGuardRenewIsFalseOnceTheLockIsLost(): void
    {
        $path = "{$this->lockDir}/renew.lock";
        $seen = cron_guard(function (Guard $g) use ($path) {
            $before = $g->renew();
            $released = $g->lock()->release();
            return [$before, $released, $g->renew(), $this->isFree($path)];
        }, 'renew');
        self::assertSame([true, true, false, true], $seen);
        self::assertTrue($this->isFree($path));
    }

    // ------------------------------------------------------------- lock_dir

    public function testAWorldWritableLockDirWithoutStickyBitIsRefused(): void
    {
        $dir = $this->makeTempDir('world');
        chmod($dir, 0777);
        clearstatcache();
        ini_set('cronlock.lock_dir', $dir);
        putenv("CRONLOCK_LOCK_DIR=$dir");
        $e = self::guardRefusal(LockException::class, 'job');
        self::assertStringContainsString($dir, $e->getMessage());
        self::assertFileDoesNotExist("$dir/job.lock");

        chmod($dir, 01777);
        clearstatcache();
        self::assertSame('ok', cron_guard(static fn () => 'ok', 'job'), 'with the sticky bit it is fine');
        self::assertFileExists("$dir/job.lock");
    }

    public function testAMissingLockDirThrowsLockExceptionSayingToCreateIt(): void
    {
        $dir = "{$this->lockDir}/does/not/exist";
        ini_set('cronlock.lock_dir', $dir);
        putenv("CRONLOCK_LOCK_DIR=$dir");
        $e = self::guardRefusal(LockException::class, 'job');
        self::assertSame("lock directory $dir does not exist; create it, or set CRONLOCK_LOCK_DIR or cronlock.lock_dir "
            . 'to an existing absolute directory', $e->getMessage());
    }
}

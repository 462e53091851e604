<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\File;
use CronLock\Guard;
use CronLock\Lock;
use CronLock\Redis;
use CronLock\Tests\Support\ErrorLogHelpers;
use CronLock\Tests\Support\FileTestHelpers;
use CronLock\Tests\Support\Proc;
use CronLock\Tests\Support\RedisServer;
use CronLock\Tests\Support\RedisTestHelpers;
use CronLock\Tests\Support\WebAssembly;
use PHPUnit\Framework\TestCase;

/**
 * cron_guard(..., ['once_per' => P]): at most one run per window of P seconds
 * aligned to the Unix epoch (on the Redis server's clock), across hosts.
 * Both implementations: the polyfill runs the extension's window scripts.
 */
final class CronGuardOncePerTest extends TestCase
{
    use ErrorLogHelpers;
    use FileTestHelpers;
    use RedisTestHelpers;

    private string $dir;

    protected function setUp(): void
    {
        parent::setUp();
        $this->dir = $this->makeTempDir('once-per');
    }

    protected function tearDown(): void
    {
        $this->restoreErrorLog();
        $this->reapCommands();
        $this->removeTempDirs();
        parent::tearDown();
    }

    private static function key(): string
    {
        return 'once-per:' . getmypid() . ':' . bin2hex(random_bytes(4));
    }

    /** The Redis server's clock in ms. */
    private static function serverMs(): int
    {
        [$s, $us] = self::raw('TIME');
        return (int) $s * 1000 + intdiv((int) $us, 1000);
    }

    /** Sleeps until the server's clock is at most $maxIntoWindow ms into a window of $windowMs. */
    private static function awaitEarlyInWindow(int $windowMs, int $maxIntoWindow): int
    {
        while (($now = self::serverMs()) % $windowMs > $maxIntoWindow) {
            usleep(20_000);
        }
        return $now;
    }

    public function testLocksWithoutATtlAndBadPeriodsAreRefused(): void
    {
        $userland = new class implements Lock {
            public function acquire(float $timeout = 0.0): bool { return true; }
            public function renew(?float $ttl = null): bool { return true; }
            public function release(): bool { return true; }
            public function isHeld(): bool { return false; }
        };
        $cases = [
            'File' => [new File("{$this->dir}/job.lock"), ['once_per' => 60], 'CronLock\File has none'],
            'named' => ['job-name', ['once_per' => 60], 'CronLock\File has none'],
            'userland' => [$userland, ['once_per' => 60], 'has none'],
            'zero' => [new Redis(self::$server->dsn(), self::key(), 10.0), ['once_per' => 0], 'must be a number of seconds'],
            'negative' => [new Redis(self::$server->dsn(), self::key(), 10.0), ['once_per' => -1], 'must be a number of seconds'],
            'NaN' => [new Redis(self::$server->dsn(), self::key(), 10.0), ['once_per' => NAN], ''],
        ];
        ini_set('cronlock.lock_dir', $this->dir);
        try {
            foreach ($cases as $name => [$lock, $options, $says]) {
                $ran = false;
                try {
                    cron_guard(function () use (&$ran) { $ran = true; }, $lock, $options);
                    self::fail("$name: expected a ValueError");
                } catch (\ValueError $e) {
                    self::assertStringContainsString("\$options['once_per']", $e->getMessage(), $name);
                    self::assertStringContainsString($says, $e->getMessage(), $name);
                }
                self::assertFalse($ran, "$name: the job is not called");
            }
        } finally {
            ini_restore('cronlock.lock_dir');
        }
    }

    public function testAShortOrFailingJobUsesUpItsWindowAndTheKeyExpiresAtTheWindowsEnd(): void
    {
        RedisServer::requireVersion('7.0', 'PEXPIRETIME');
        $key = self::key();
        $started = self::awaitEarlyInWindow(4000, 1500);
        $windowEnd = (intdiv($started, 4000) + 1) * 4000;
        // A TTL far shorter than the window: the key still lives to its end.
        $lock = new Redis(self::$server->dsn(), $key, 0.5);
        self::assertSame('done', cron_guard(static fn () => 'done', $lock, ['once_per' => 4]));
        self::assertFalse($lock->isHeld(), 'the run is over');
        self::assertFalse($lock->release(), 'nothing left to release');
        self::assertNotNull(self::raw('GET', $key), 'the key is left, not deleted');
        self::assertSame($windowEnd, self::raw('PEXPIRETIME', $key), 'it expires at the end of the window');

        $log = $this->logToFile($this->dir);
        $other = new Redis(self::$server->dsn(), $key, 10.0);
        $ran = false;
        self::assertNull(cron_guard(function () use (&$ran) { $ran = true; }, $other, ['once_per' => 4]));
        self::assertFalse($ran, 'a second run in the same window is skipped');
        $lines = self::logLines($log);
        self::assertCount(1, $lines, implode("\n", $lines));
        self::assertStringContainsString("redis key '$key'", $lines[0]);
        self::assertStringContainsString('pid ' . getmypid(), $lines[0], 'names who ran in this window');

        // The next window: one run again, and a job that throws uses it up too.
        while (self::serverMs() <= $windowEnd) { // Redis expires a key once now > PEXPIRETIME
            usleep(20_000);
        }
        try {
            cron_guard(static function () { throw new \RuntimeException('job failed'); }, $other, ['once_per' => 4]);
            self::fail('the exception propagates');
        } catch (\RuntimeException $e) {
            self::assertSame('job failed', $e->getMessage());
        }
        self::assertSame($windowEnd + 4000, self::raw('PEXPIRETIME', $key));
        self::assertNull(cron_guard(static fn () => 'ran', $lock, ['once_per' => 4]));
    }

    public function testAJobEndedByExitOrAFatalErrorUsesUpItsWindow(): void
    {
        RedisServer::requireVersion('7.0', 'PEXPIRETIME');
        foreach (['exit(3);' => 3, 'trigger_error("boom", E_USER_ERROR);' => 255] as $end => $status) {
            $key = self::key();
            $started = self::awaitEarlyInWindow(10_000, 5000);
            $windowEnd = (intdiv($started, 10_000) + 1) * 10_000;
            // the fatal error's message to stderr whatever php.ini says
            // (PHP's compiled-in default display_errors=1 prints it to stdout)
            $p = Proc::run("ini_set('display_errors', 'stderr');\n"
                . '$lock = ' . self::lockCode(self::$server->dsn(), $key, 30.0) . ";\n"
                . "cron_guard(function () { echo \"RAN\\n\"; $end }, \$lock, ['once_per' => 10]);");
            self::assertSame($status, $p->exitCode(), $p->stderr());
            self::assertSame("RAN\n", $p->stdout());
            self::assertSame($windowEnd, self::raw('PEXPIRETIME', $key), "$end: left to expire at the window's end");
        }
    }

    public function testAJobThatOutlastsItsWindowReleasesAsUsual(): void
    {
        $key = self::key();
        $lock = new Redis(self::$server->dsn(), $key, 30.0);
        self::awaitEarlyInWindow(1000, 300);
        cron_guard(static fn () => usleep(1_200_000), $lock, ['once_per' => 1]);
        self::assertSame(0, self::raw('EXISTS', $key), 'deleted: its window is over');
    }

    /**
     * Two "hosts" (process groups) whose clocks differ: each group's cron
     * fires at the ticks of its own clock (the real clock plus an offset
     * injected through CRONLOCK_TEST_CLOCK_OFFSET) and once more half a
     * window later, with two workers per group, like two crontab lines.
     * Over 22 windows of 1 s, every window has exactly one run.
     */
    public function testTwoHostsWithSkewedClocksRunTheJobExactlyOncePerWindow(): void
    {
        $key = self::key();
        $journal = "{$this->dir}/journal";
        // after the four children are up: a PHP on WebAssembly takes about 1 s to start
        $start = floor(microtime(true)) + (WebAssembly::active() ? 6.0 : 2.0);
        $until = $start + 22.0;
        // The warm-up loads the Redis client and connects once before the first
        // tick: a cold first acquire (0.35 s on PHP on WebAssembly) took the
        // host ahead's first run out of the window before the start, which
        // then had none.
        $code = '$lock = fn () => ' . self::lockCode(self::$server->dsn(), $key, 30.0) . ";\n"
            . '$warm = ' . self::lockCode(self::$server->dsn(), "$key:warm-up", 30.0) . ";\n" . <<<'PHP'
            $warm->acquire(0);
            $warm->release();
            [, $journal, $start, $until] = $argv;
            $offset = (float) getenv('CRONLOCK_TEST_CLOCK_OFFSET');
            $clock = fn () => microtime(true) + $offset;   // this "host's" clock
            for ($tick = (float) $start; $tick < (float) $until; $tick += 1.0) {
                foreach ([0.0, 0.5] as $delay) {
                    usleep((int) max(0, ($tick + $delay - $clock()) * 1e6));
                    $t0 = microtime(true);
                    try {
                        cron_guard(function () use ($journal, $t0) {
                            file_put_contents($journal, sprintf("%d %.6F %.6F\n", getmypid(), $t0, microtime(true)), FILE_APPEND | LOCK_EX);
                            usleep(20_000);
                            if (mt_rand(0, 2) === 0) {
                                throw new \RuntimeException('the job failed');
                            }
                        }, $lock(), ['once_per' => 1]);
                    } catch (\RuntimeException $e) {
                    }
                }
            }
            echo "DONE\n";
            PHP;
        $args = [$journal, sprintf('%.1F', $start), sprintf('%.1F', $until)];
        $procs = [];
        foreach (['0.3', '-0.2'] as $offset) {       // one host 0.3 s ahead, one 0.2 s behind
            for ($i = 0; $i < 2; $i++) {
                $procs[] = Proc::start($code, $args, ['CRONLOCK_TEST_CLOCK_OFFSET' => $offset]);
            }
        }
        foreach ($procs as $p) {
            self::assertSame(0, $p->wait(60.0), $p->stdout() . $p->stderr());
        }

        // Each run's acquire happened between t0 and the job's start.
        $perWindow = [];
        $between = [];
        foreach (file($journal, FILE_IGNORE_NEW_LINES) ?: [] as $line) {
            [, $t0, $t1] = explode(' ', $line);
            [$w0, $w1] = [(int) floor((float) $t0), (int) floor((float) $t1)];
            if ($w0 === $w1) {
                $perWindow[$w0][] = $line;
            } else {
                $between[] = [$w0, $w1, $line];
            }
        }
        foreach ($between as [$w0, $w1, $line]) {   // a slow machine: either window may be its own
            $perWindow[isset($perWindow[$w0]) ? $w1 : $w0][] = $line;
        }
        $windows = range((int) $start - 1, (int) $until - 1);   // the host ahead fires its first tick in the window before
        self::assertGreaterThanOrEqual(20, count($windows));
        foreach ($windows as $w) {
            self::assertCount(1, $perWindow[$w] ?? [], "window $w: " . implode(' | ', $perWindow[$w] ?? []));
        }
        self::assertSame(count($windows), array_sum(array_map('count', $perWindow)), 'no run outside the windows');
    }

    /**
     * Inside its window the key lives until the window ends whatever the TTL:
     * a job that renews at points further apart than the TTL (or shortened
     * its TTL) is told the truth, that the key is still ours (review R3b F01).
     */
    public function testInsideItsWindowTheHoldOutlivesTheTtlAndRenewSaysSo(): void
    {
        self::awaitEarlyInWindow(60_000, 50_000); // at least 10 s of the window left
        $key = self::key();
        $lock = new Redis(self::$server->dsn(), $key, 0.3);
        $seen = [];
        $ran = cron_guard(function (Guard $guard) use ($lock, $key, &$seen) {
            usleep(600_000); // twice the TTL, no renewal
            $seen['held after 2 TTLs'] = $lock->isHeld();
            $seen['Guard::renew() after 2 TTLs'] = $guard->renew();
            $seen['renew(0.05)'] = $lock->renew(0.05);
            usleep(200_000);
            $seen['renew() after a shortened TTL ran out'] = $lock->renew();
            $seen['the key is still ours'] = self::raw('GET', $key) === $lock->token();
            return 'ran';
        }, $lock, ['once_per' => 60]);
        self::assertSame('ran', $ran);
        foreach ($seen as $what => $true) {
            self::assertTrue($true, $what);
        }
        self::assertGreaterThan(5_000, self::raw('PTTL', $key), 'left to expire at the window\'s end');
        self::raw('DEL', $key);
    }

    /**
     * acquire() on the held lock, and a guard nested in the job, confirm the
     * hold without cutting the key's life down to the TTL: a run elsewhere
     * in the same window stays busy (review R4 F01: it ran).
     */
    public function testAcquireOnTheHeldLockOrANestedGuardKeepsTheWindow(): void
    {
        self::awaitEarlyInWindow(60_000, 50_000); // at least 10 s of the window left
        $key = self::key();
        $lock = new Redis(self::$server->dsn(), $key, 2.0);
        $pttl = [];
        $ran = cron_guard(function () use ($lock, $key, &$pttl) {
            self::assertTrue($lock->acquire(0), 'acquire() on the held lock');
            $pttl['after acquire() on the held lock'] = self::raw('PTTL', $key);
            self::assertSame('inner', cron_guard(function () { return 'inner'; }, $lock));
            $pttl['after a nested guard'] = self::raw('PTTL', $key);
            self::assertTrue($lock->isHeld());
            return 'ran';
        }, $lock, ['once_per' => 60]);
        self::assertSame('ran', $ran);
        foreach ($pttl as $when => $ms) {
            self::assertGreaterThan(5_000, $ms, "the key still lives to the window's end $when");
        }
        self::raw('DEL', $key);
    }

    /**
     * The key lives on to the window's end and a once_per run of another
     * lock object (another host) in the same window is skipped.
     */
    private function assertTheWindowIsUsedUp(string $key, string $case): void
    {
        self::assertGreaterThan(5_000, self::raw('PTTL', $key), "$case: the key is left to expire at the window's end");
        $log = $this->logToFile($this->dir);
        $other = new Redis(self::$server->dsn(), $key, 30.0);
        self::assertNull(cron_guard(static fn () => 'OTHER RAN', $other, ['once_per' => 60]), "$case: no second run in the window");
        self::assertCount(1, self::logLines($log), "$case: the skipped run says so");
        $this->restoreErrorLog();
        self::raw('DEL', $key);
    }

    /**
     * A once_per guard nested in a plain one on the same lock: the outer
     * guard's release leaves the key to the window's end, and its renewals
     * (auto_renew, a TTL far shorter than the window) never cut it down to
     * the TTL (review R5 F01 A: the key was deleted, another host ran).
     */
    public function testAOncePerGuardNestedInAPlainGuardUsesUpTheWindow(): void
    {
        self::awaitEarlyInWindow(60_000, 50_000); // at least 10 s of the window left
        $key = self::key();
        $lock = new Redis(self::$server->dsn(), $key, 0.3, ['auto_renew' => true]);
        $pttl = null;
        $ran = cron_guard(function () use ($lock, $key, &$pttl) {
            self::assertSame('inner', cron_guard(static fn () => 'inner', $lock, ['once_per' => 60]));
            usleep(700_000); // a few renewals
            $pttl = self::raw('PTTL', $key);
            return 'outer';
        }, $lock);
        self::assertSame('outer', $ran);
        self::assertGreaterThan(5_000, $pttl, 'renewals kept the key to the window\'s end');
        self::assertFalse($lock->isHeld());
        $this->assertTheWindowIsUsedUp($key, 'nested');
    }

    /**
     * A plain guard in one Fiber takes the hold, a once_per guard in
     * another shares it and ends last (review R5 F01 B).
     *
     * @requires PHP >= 8.1
     */
    public function testAOncePerGuardSharingAPlainGuardsHoldInAnotherFiberUsesUpTheWindow(): void
    {
        self::awaitEarlyInWindow(60_000, 50_000);
        $key = self::key();
        $lock = new Redis(self::$server->dsn(), $key, 30.0);
        $ran = [];
        $plain = new \Fiber(function () use ($lock, &$ran) {
            cron_guard(function () use (&$ran) {
                \Fiber::suspend();
                $ran[] = 'plain';
            }, $lock);
        });
        $oncePer = new \Fiber(function () use ($lock, &$ran) {
            cron_guard(function () use (&$ran) {
                \Fiber::suspend();
                $ran[] = 'once_per';
            }, $lock, ['once_per' => 60]);
        });
        $plain->start();
        $oncePer->start();
        $plain->resume();
        self::assertTrue($lock->isHeld(), 'the once_per guard still runs');
        $oncePer->resume();
        self::assertSame(['plain', 'once_per'], $ran);
        self::assertFalse($lock->isHeld());
        $this->assertTheWindowIsUsedUp($key, 'Fibers');
    }

    /**
     * A once_per guard on a lock the caller acquired: the caller's own
     * release() leaves the key to the window's end (review R5 F01 C).
     */
    public function testAOncePerGuardOnALockTheCallerAcquiredUsesUpTheWindow(): void
    {
        self::awaitEarlyInWindow(60_000, 50_000);
        $key = self::key();
        $lock = new Redis(self::$server->dsn(), $key, 2.0);
        self::assertTrue($lock->acquire());
        self::assertSame('ran', cron_guard(static fn () => 'ran', $lock, ['once_per' => 60]));
        self::assertTrue($lock->isHeld(), 'the caller\'s hold, not the guard\'s to release');
        self::assertTrue($lock->release());
        self::assertFalse($lock->isHeld());
        $this->assertTheWindowIsUsedUp($key, 'acquire()');
    }

    /**
     * A once_per guard nested in one with a longer window keeps the key to
     * the longer window's end: confirming a hold never shortens its key.
     */
    public function testANestedGuardWithAShorterWindowKeepsTheLongerOne(): void
    {
        RedisServer::requireVersion('7.0', 'PEXPIRETIME');
        $key = self::key();
        $lock = new Redis(self::$server->dsn(), $key, 2.0);
        $hourEnd = (intdiv(self::serverMs(), 3_600_000) + 1) * 3_600_000;
        $expires = [];
        cron_guard(function () use ($lock, $key, &$expires) {
            cron_guard(static fn () => null, $lock, ['once_per' => 60]);
            $expires[] = self::raw('PEXPIRETIME', $key);
        }, $lock, ['once_per' => 3600]);
        $expires[] = self::raw('PEXPIRETIME', $key);
        self::raw('DEL', $key);
        self::assertSame([$hourEnd, $hourEnd], $expires, 'during the job, and after it');
    }
}

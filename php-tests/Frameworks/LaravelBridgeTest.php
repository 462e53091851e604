<?php

declare(strict_types=1);

namespace CronLock\Tests\Frameworks;

use CronLock\Tests\Support\RedisServer;

/**
 * cronlock/laravel as a user meets it, in a real Laravel 8 application:
 * discovered from composer.json, its config published, schedule:list and
 * schedule:clear-cache, the callbacks and exit status of rewritten events,
 * the lock's name, and a scheduler filter that asks without taking.
 */
final class LaravelBridgeTest extends LaravelTestCase
{
    private const EVENT = '$schedule->command("fixture:job", [$journal, "fg", %s])->everyMinute()->withoutOverlapping()';

    /**
     * @group extension-only
     * not polyfill-specific: the bridge's own logic (Laravel, ScheduleRewriter,
     * cronlock:run), the same whichever implementation is loaded; the polyfill's
     * paths (holder(), its Redis lease) are the other tests of this class.
     */
    public function testTheProviderIsDiscoveredFromComposerJson(): void
    {
        $app = $this->app(true);
        $app->artisan(['package:discover'])->succeed();
        $manifest = require $app->dir() . '/bootstrap/cache/packages.php';
        self::assertSame(['providers' => ['CronLock\\Laravel\\CronLockServiceProvider']], $manifest['cronlock/laravel'] ?? null);
    }

    /**
     * @group extension-only
     * not polyfill-specific: the bridge's own logic (Laravel, ScheduleRewriter,
     * cronlock:run), the same whichever implementation is loaded; the polyfill's
     * paths (holder(), its Redis lease) are the other tests of this class.
     */
    public function testVendorPublishWritesTheConfigFile(): void
    {
        $app = $this->app(true);
        $out = $app->artisan(['vendor:publish', '--tag=cronlock-config'])->succeed()->stdout();
        self::assertStringContainsString('Copied File', $out);
        self::assertFileEquals(dirname(__DIR__, 2) . '/bridges/laravel/config/cronlock.php', $app->dir() . '/config/cronlock.php');
    }

    /**
     * @group extension-only
     * not polyfill-specific: the bridge's own logic (Laravel, ScheduleRewriter,
     * cronlock:run), the same whichever implementation is loaded; the polyfill's
     * paths (holder(), its Redis lease) are the other tests of this class.
     */
    public function testScheduleListShowsTheCommandsAsTheUserWroteThem(): void
    {
        $app = $this->app(true);
        $app->schedule(sprintf(self::EVENT, 1) . ';' . sprintf(self::EVENT, 2) . '->runInBackground();');
        $out = $app->artisan(['schedule:list'])->succeed()->stdout();
        self::assertStringNotContainsString('cronlock:run', $out);
        self::assertStringContainsString("'artisan' fixture:job '{$app->journal()->path()}' 'fg' 1 ", $out);
        self::assertStringContainsString("'artisan' fixture:job '{$app->journal()->path()}' 'fg' 2 ", $out);
    }

    /**
     * @group extension-only
     * not polyfill-specific: the bridge's own logic (Laravel, ScheduleRewriter,
     * cronlock:run), the same whichever implementation is loaded; the polyfill's
     * paths (holder(), its Redis lease) are the other tests of this class.
     */
    public function testTheLockIsNamedAfterTheCommandAsWritten(): void
    {
        $app = $this->app(true);
        $app->schedule(sprintf(self::EVENT, 0) . ';');
        self::runTick($app, 0);
        $command = "'" . PHP_BINARY . "' 'artisan' fixture:job '{$app->journal()->path()}' 'fg' 0";
        self::assertFileExists($app->dir() . '/storage/framework/cronlock/schedule-' . sha1('* * * * *' . $command) . '.lock',
            "Laravel's own mutex name of the event as written (sha1 of expression and command)");
    }

    /**
     * @group extension-only
     * not polyfill-specific: the bridge's own logic (Laravel, ScheduleRewriter,
     * cronlock:run), the same whichever implementation is loaded; the polyfill's
     * paths (holder(), its Redis lease) are the other tests of this class.
     */
    public function testABackgroundEventsCallbacksRunInScheduleFinish(): void
    {
        $app = $this->app(true);
        $done = $app->dir() . '/callbacks.log';
        $app->schedule(sprintf('$e = %s->runInBackground();', sprintf(self::EVENT, 0))
            . sprintf(' $e->onSuccess(function () use ($e) { file_put_contents(%1$s, "success $e->exitCode\n", FILE_APPEND); })'
                . '->onFailure(function () use ($e) { file_put_contents(%1$s, "failure $e->exitCode\n", FILE_APPEND); });', var_export($done, true)));
        self::runTick($app, 0);
        // the line, not the file: file_put_contents() creates it before it writes
        self::waitUntil(fn () => substr_count((string) @file_get_contents($done), "\n") === 1, 'schedule:finish to run the callbacks', 30.0);
        self::assertSame("success 0\n", file_get_contents($done));
        self::runTick($app, 1, ['FIXTURE_JOB_STATUS' => '3']);
        self::waitUntil(fn () => substr_count((string) file_get_contents($done), "\n") === 2, 'the second run\'s callbacks', 30.0);
        self::assertSame("success 0\nfailure 3\n", file_get_contents($done), "schedule:finish found the rewritten event by its mutex name, with the job's status");
    }

    /**
     * @group extension-only
     * not polyfill-specific: the bridge's own logic (Laravel, ScheduleRewriter,
     * cronlock:run), the same whichever implementation is loaded; the polyfill's
     * paths (holder(), its Redis lease) are the other tests of this class.
     */
    public function testAForegroundEventGetsTheJobsExitStatus(): void
    {
        $app = $this->app(true);
        $done = $app->dir() . '/callbacks.log';
        $app->schedule(sprintf('$e = %s;', sprintf(self::EVENT, 0))
            . sprintf(' $e->after(function () use ($e) { file_put_contents(%s, "after $e->exitCode\n", FILE_APPEND); });', var_export($done, true)));
        self::runTick($app, 0, ['FIXTURE_JOB_STATUS' => '3']);
        self::assertSame("after 3\n", file_get_contents($done));
    }

    /**
     * @group extension-only
     * not polyfill-specific: the bridge's own logic (Laravel, ScheduleRewriter,
     * cronlock:run), the same whichever implementation is loaded; the polyfill's
     * paths (holder(), its Redis lease) are the other tests of this class.
     */
    public function testExpiresAtEndsAJobThatRunsThatLong(): void
    {
        $app = $this->app(true);
        $out = $app->dir() . '/event.out';
        $app->schedule('$schedule->command("fixture:job", [$journal, "fg", 120])->everyMinute()->withoutOverlapping(0.05)->appendOutputTo(' . var_export($out, true) . ');');
        $tick = $app->tick(self::clock(0));
        $job = $app->journal()->waitForStarts(1, 30.0, $tick);
        self::assertStringContainsString('No scheduled commands are ready to run.', self::runTick($app, 1), 'a tick within the bound skips');
        self::waitUntil(fn () => !self::processAlive($job['pid']), 'the job to be ended at 3 s (0.05 min)', 30.0);
        $ended = microtime(true) - $job['t'];
        $tick->succeed();
        self::assertStringContainsString('the job ran 0.05 min, its withoutOverlapping() bound: ending it (SIGTERM)', (string) file_get_contents($out));
        self::runTick($app, 2, ['FIXTURE_JOB_SECONDS' => '0']);
        self::assertCount(2, $app->journal()->starts(), 'the next tick runs it');
        self::assertSame(0, $app->journal()->overlaps());
        self::note(sprintf('withoutOverlapping(0.05): the job was ended %.2f s after it started', $ended));
    }

    public function testClearCacheNamesTheHolderAndLeavesItUnlessForced(): void
    {
        $app = $this->app(true);
        $app->schedule(sprintf(self::EVENT, 120) . ';');
        $tick = $app->tick(self::clock(0));
        $job = $app->journal()->waitForStarts(1, 30.0, $tick);
        $holder = self::ancestor($job['pid'], 'cronlock:run');

        $out = $app->artisan(['schedule:clear-cache'])->succeed()->stdout();
        self::assertMatchesRegularExpression('/Held by pid ' . $holder . ' on [^ ]+ since [0-9TZ:-]+: ' . preg_quote("'" . PHP_BINARY . "' 'artisan' fixture:job", '/') . '/', $out, 'File::holder(): the pid, the host and since when');
        self::assertStringContainsString('none of these is stale', $out);
        self::assertTrue(self::processAlive($job['pid']), 'the job runs on');
        self::assertStringContainsString('No scheduled commands are ready to run.', self::runTick($app, 1));

        $out = $app->artisan(['schedule:clear-cache', '--force'])->succeed()->stdout();
        self::assertStringContainsString("sent SIGTERM to pid $holder", $out);
        self::waitUntil(fn () => !self::processAlive($job['pid']), 'the job to end on the holder\'s TERM');
        $tick->wait();
        self::assertStringContainsString('Running scheduled command', self::runTick($app, 2, ['FIXTURE_JOB_SECONDS' => '0']));
        self::assertStringContainsString('No scheduled event holds its lock.', $app->artisan(['schedule:clear-cache'])->succeed()->stdout());
    }

    public function testTheSchedulersFilterSeesAHolderOutsideLaravel(): void
    {
        $app = $this->app(true);
        $app->schedule(sprintf(self::EVENT, 0) . ';');
        self::runTick($app, 0); // makes the lock file
        $files = glob($app->dir() . '/storage/framework/cronlock/schedule-*.lock');
        self::assertCount(1, $files);
        // -w, not -n: the wait below probes the lock with a take and a release,
        // and a flock(1) that tries during a probe must not give up
        $flock = $this->startCommand(['flock', '-w', '30', '--close', $files[0], 'sleep', '60']);
        self::waitUntil(fn () => !$this->isFree($files[0]), 'flock(1) to hold the lock');
        $out = self::runTick($app, 1);
        self::assertStringContainsString('No scheduled commands are ready to run.', $out, 'exists() named flock(1) as the holder');
        self::assertStringContainsString('Held by pid ', $app->artisan(['schedule:clear-cache'])->succeed()->stdout());
        $sleep = (int) trim((string) shell_exec('pgrep -P ' . $this->commandPid($flock)));
        $this->killCommand($flock);
        self::killPid($sleep); // --close: it holds nothing, but would outlive the test
        self::assertStringContainsString('Running scheduled command', self::runTick($app, 2));
        self::assertCount(2, $app->journal()->starts());
    }

    /**
     * A holder cronlock cannot name (flock(1) exited, the program it started
     * kept the locked descriptor): File::holder() says "an unknown process"
     * from the kernel's list, and the filter skips the tick. Were the tick let
     * through, cronlock:run's acquire would skip the job all the same.
     */
    public function testAHolderCronlockCannotNameStillExcludes(): void
    {
        $app = $this->app(true);
        $app->schedule(sprintf(self::EVENT, 0) . ';');
        self::runTick($app, 0);
        $files = glob($app->dir() . '/storage/framework/cronlock/schedule-*.lock');
        $flock = $this->startCommand(['flock', '-w', '30', $files[0], 'sleep', '60']); // -w: as above
        self::waitUntil(fn () => !$this->isFree($files[0]), 'flock(1) to hold the lock');
        $sleep = (int) trim((string) shell_exec('pgrep -P ' . $this->commandPid($flock)));
        self::assertGreaterThan(1, $sleep, 'the sleep flock(1) started');
        $this->killCommand($flock); // the sleep keeps the lock; its locker is gone
        self::assertStringContainsString('No scheduled commands are ready to run.', self::runTick($app, 1));
        self::assertCount(1, $app->journal()->starts());
        self::assertStringContainsString('Held by an unknown process:',
            $app->artisan(['schedule:clear-cache', '--force'])->succeed()->stdout());
        self::assertTrue(self::processAlive($sleep), '--force signals only holders it can name');
        self::killPid($sleep);
        self::runTick($app, 2);
        self::assertCount(2, $app->journal()->starts());
    }

    public function testSkippedTicksLeaveTheRedisFencingCounterAlone(): void
    {
        $redis = RedisServer::start();
        $app = $this->app(true);
        $app->config('cronlock', ['backend' => 'redis', 'dsn' => $redis->dsn(), 'prefix' => 'app:']); // no ttl: cronlock's lease
        $app->schedule('$schedule->call(fn () => Job::run($journal, "cb", 120))->name("cb")->everyMinute()->withoutOverlapping();');
        $tick = $app->tick(self::clock(0));
        $app->journal()->waitForStarts(1, 30.0, $tick);
        $key = 'app:schedule-' . sha1('cb');
        self::assertNotNull($redis->command('GET', $key), 'the running callback holds the key');
        $pttl = (int) $redis->command('PTTL', $key);
        self::assertTrue($pttl > 0 && $pttl <= 30_000, "the lease: 30 s at most, renewed while the holder lives (PTTL $pttl)");
        $fence = $redis->command('GET', "{$key}:fence");
        for ($minute = 1; $minute <= 3; $minute++) {
            self::runTick($app, $minute);
        }
        self::assertCount(1, $app->journal()->starts());
        self::assertSame($fence, $redis->command('GET', "{$key}:fence"), 'no acquire-and-release probe');
        $tick->killGroup();
        foreach ((array) $redis->command('KEYS', '*') as $left) {
            self::assertNotSame(-1, (int) $redis->command('PTTL', (string) $left), "no key without a TTL is left: $left");
        }
    }

    /**
     * A Redis that cannot be reached skips the locked event, says why, and leaves the other
     * events of the tick alone (an outside tester saw the scheduler's filter end the whole
     * schedule:run, unlocked events too).
     *
     * @group extension-only
     * not polyfill-specific: the bridge's own logic, the same whichever implementation is loaded
     */
    public function testAnUnreachableRedisSkipsTheLockedEventAndRunsTheOthers(): void
    {
        $app = $this->app(true);
        $app->config('cronlock', ['backend' => 'redis', 'dsn' => 'redis://127.0.0.1:1', 'prefix' => 'app:']);
        $app->schedule('$schedule->call(fn () => Job::run($journal, "locked", 0))->name("locked")->everyMinute()->withoutOverlapping();'
            . "\n" . '$schedule->call(fn () => Job::run($journal, "plain", 0))->name("plain")->everyMinute();');
        $tick = $app->tick(self::clock(0));
        $tick->wait();
        $labels = array_map(static fn (array $start): string => $start['label'] ?? '', $app->journal()->starts());
        self::assertContains('plain', $labels, 'the event without a lock ran: ' . $tick->stdout() . $tick->stderr());
        self::assertNotContains('locked', $labels, 'the locked event did not run without its lock');
        self::assertStringContainsString('cronlock: skipping schedule-' . sha1('locked') . ' this tick: cannot connect to Redis', $tick->stdout() . $tick->stderr());
    }

    /**
     * @group extension-only
     * not polyfill-specific: the bridge's own logic (Laravel, ScheduleRewriter,
     * cronlock:run), the same whichever implementation is loaded; the polyfill's
     * paths (holder(), its Redis lease) are the other tests of this class.
     */
    public function testAnUnknownBackendIsRefusedWithTheSetting(): void
    {
        $app = $this->app(true);
        $app->config('cronlock', ['backend' => 'memcached']);
        $app->schedule(sprintf(self::EVENT, 0) . ';');
        $tick = $app->tick(self::clock(0));
        $tick->wait();
        self::assertStringContainsString("config('cronlock.backend') must be file, redis or database, not 'memcached'", $tick->stdout() . $tick->stderr());
        $app->config('cronlock', ['backend' => 'redis']);
        $tick = $app->tick(self::clock(1));
        $tick->wait();
        self::assertStringContainsString("config('cronlock.dsn') is empty: the redis backend needs the DSN of its server (CRONLOCK_DSN)", $tick->stdout() . $tick->stderr());
    }
}

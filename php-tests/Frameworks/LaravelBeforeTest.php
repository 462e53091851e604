<?php

declare(strict_types=1);

namespace CronLock\Tests\Frameworks;

use CronLock\Tests\Support\RedisServer;

/**
 * Laravel 8.83's own withoutOverlapping(), without cronlock/laravel: the
 * "before" figures of docs/frameworks.md (issue 20), measured on Debian's
 * php-laravel-framework with the default cache mutex. These tests pin
 * Laravel's behaviour, so a change in it shows up here: each asserts what
 * goes wrong.
 *
 * @group extension-only
 * not polyfill-specific: Laravel without the bridge, whose figures are the same
 * whichever cronlock implementation is loaded (only App\NaiveFileMutex takes a
 * CronLock\File, to show where a lock held by schedule:run ends).
 */
final class LaravelBeforeTest extends LaravelTestCase
{
    private const NOT_READY = 'No scheduled commands are ready to run.';

    public function testKillOfTheWholeProcessGroupLeavesTheMutexFor1440Minutes(): void
    {
        $app = $this->app(false);
        $app->schedule('$schedule->command("fixture:job", [$journal, "fg", 60])->everyMinute()->withoutOverlapping();');
        $tick = $app->tick(self::clock(0));
        $app->journal()->waitForStarts(1, 30.0, $tick);
        $tick->killGroup(); // timeout -s KILL, a cgroup kill, a reboot

        self::assertStringContainsString(self::NOT_READY, self::runTick($app, 1));
        self::assertStringContainsString(self::NOT_READY, self::runTick($app, 1439));
        self::assertStringContainsString('Running scheduled command', self::runTick($app, 1441, ['FIXTURE_JOB_SECONDS' => '0']));
        $app->journal()->waitForStarts(2);
        self::note('file cache store: after kill -9 of the group the event was skipped at +1 and +1439 min, ran at +1441 min');
    }

    public function testOnTheRedisCacheStoreTheMutexOfAKilledRunLivesADay(): void
    {
        $redis = RedisServer::start();
        $app = $this->app(false, ['FIXTURE_CACHE' => 'redis', 'FIXTURE_REDIS_PORT' => (string) $redis->port()]);
        $app->schedule('$schedule->command("fixture:job", [$journal, "fg", 60])->everyMinute()->withoutOverlapping();');
        $tick = $app->tick(self::clock(0));
        $app->journal()->waitForStarts(1, 30.0, $tick);
        $tick->killGroup();

        $redis->command('SELECT', '1');
        $keys = $redis->command('KEYS', '*schedule-*');
        self::assertCount(1, $keys, 'the mutex key');
        $ttl = (int) $redis->command('TTL', $keys[0]);
        self::assertGreaterThan(86_000, $ttl, "the key {$keys[0]}");
        self::assertStringContainsString(self::NOT_READY, self::runTick($app, 1));
        self::note("redis cache store: the killed run's mutex $keys[0] has TTL $ttl s");
    }

    public function testKillingOnlyTheShellOfAForegroundEventLetsTheNextTickOverlap(): void
    {
        $app = $this->app(false);
        $app->schedule('$schedule->command("fixture:job", [$journal, "fg", 20])->everyMinute()->withoutOverlapping();');
        $tick = $app->tick(self::clock(0));
        $job = $app->journal()->waitForStarts(1, 30.0, $tick);
        $shell = $job['ppid'];
        self::assertStringStartsWith('sh -c', self::cmdline($shell), 'the shell Symfony Process starts for the event');
        self::kill9($shell);
        $tick->succeed(); // Process::run() returns, the finally forgets the mutex

        $next = $app->tick(self::clock(1));
        $app->journal()->waitForStarts(2, 30.0, $next);
        self::assertTrue(self::processAlive($job['pid']), 'the first job still runs');
        self::assertSame(1, $app->journal()->overlaps(), $app->journal()->dump());
        self::killPid($job['pid']);
        $next->killGroup();
        self::note('foreground event, kill -9 of the shell only: the next tick overlapped the orphaned job');
    }

    public function testABackgroundEventKilledWithItsShellLeavesTheMutexFor1440Minutes(): void
    {
        $app = $this->app(false);
        $app->schedule('$schedule->command("fixture:job", [$journal, "bg", 60])->everyMinute()->withoutOverlapping()->runInBackground();');
        $tick = $app->tick(self::clock(0));
        $app->journal()->waitForStarts(1, 30.0, $tick);
        $tick->killGroup(); // schedule:run is gone already: this kills the subshell and the job

        self::assertStringContainsString(self::NOT_READY, self::runTick($app, 1));
        self::assertStringContainsString(self::NOT_READY, self::runTick($app, 1439));
        self::assertStringContainsString('Running scheduled command', self::runTick($app, 1441, ['FIXTURE_JOB_SECONDS' => '0']));
        $app->journal()->waitForStarts(2);
        self::note('background event, kill -9 of the group: skipped at +1 and +1439 min, ran at +1441 min');
    }

    public function testALockHeldBySchedulerRunDoesNotCoverABackgroundJob(): void
    {
        $app = $this->app(false, ['FIXTURE_NAIVE_MUTEX' => '1']);
        $app->schedule('$schedule->command("fixture:job", [$journal, "bg", 6])->everyMinute()->withoutOverlapping()->runInBackground();');
        for ($i = 0; $i < 4; $i++) {
            self::runTick($app, $i);
            $app->journal()->waitForStarts($i + 1);
        }
        self::assertSame(3, $app->journal()->overlaps(), $app->journal()->dump());
        $app->journal()->waitForEnds(4);
        self::note('a CronLock\File held by schedule:run (App\NaiveFileMutex): 4 ticks, 4 starts, 3 overlaps');
    }

    public function testOnOneServerAfterKillOfTheWinnerEveryHostSkipsForADay(): void
    {
        $redis = RedisServer::start();
        $env = ['FIXTURE_CACHE' => 'redis', 'FIXTURE_REDIS_PORT' => (string) $redis->port()];
        $base = $this->makeTempDir('laravel-before');
        $journal = "$base/journal.log";
        $hosts = [$this->app(false, $env, "$base/a", $journal), $this->app(false, $env, "$base/b", $journal)];
        foreach ($hosts as $host) {
            $host->schedule('$schedule->command("fixture:job", [$journal, "one", 60])->everyMinute()->onOneServer()->withoutOverlapping();', $journal);
        }
        $winner = $hosts[0]->tick(self::clock(0));
        (new Journal($journal))->waitForStarts(1, 30.0, $winner);
        self::assertStringContainsString(self::NOT_READY, self::runTick($hosts[1], 0), 'the other host, while the run lasts');
        $winner->killGroup();

        foreach ($hosts as $host) {
            self::assertStringContainsString(self::NOT_READY, self::runTick($host, 1));
        }
        $redis->command('SELECT', '1');
        self::assertSame(1, count((new Journal($journal))->starts()));
        $ttls = array_map(static fn ($k) => (int) $redis->command('TTL', $k), $redis->command('KEYS', '*schedule-*'));
        self::assertGreaterThan(86_000, max($ttls), 'the withoutOverlapping mutex');
        self::note('onOneServer + withoutOverlapping, kill -9 of the winner: both hosts skipped the next tick; key TTLs ' . implode(', ', $ttls) . ' s');
    }
}

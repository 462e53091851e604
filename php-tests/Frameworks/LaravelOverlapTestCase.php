<?php

declare(strict_types=1);

namespace CronLock\Tests\Frameworks;

/**
 * withoutOverlapping() with cronlock/laravel, for one backend (the
 * subclass): every event type (a foreground command, a background command,
 * a callback) in every way a run ends badly, with the journal of job starts
 * and ends. In each: no two runs of the event at once (the job's own
 * witness flock, see Journal), and the tick after it runs the job again at
 * once (File) or within the backend's bound (a Redis lease, a database
 * server noticing a closed connection); how many ticks were skipped and how
 * long after the kill the job ran again is reported, not asserted against
 * the clock beyond generous bounds.
 *
 * The cases (issue 20): kill -9 of the job; of the whole process group (a
 * cgroup kill, `timeout -s KILL`); of only the process holding the lock
 * while the job lives on (commands: cronlock:run, whose job must die with
 * it; a callback runs in its holder, so that case is the first); of only
 * Laravel's shell between schedule:run and the holder (the job and its lock
 * live on, so the next tick must skip); a tick arriving while a run is
 * going.
 */
abstract class LaravelOverlapTestCase extends LaravelTestCase
{
    /** How long, at most, a killed holder may keep the next tick from running (seconds). */
    private const RECOVERY_BOUND = 90.0;

    /** config('cronlock') of this backend. */
    abstract protected function cronlockConfig(): array;

    /** Whether the tick right after a kill must run the job (File: the kernel frees the lock as the holder dies). */
    abstract protected function recoversOnTheNextTick(): bool;

    /** @return array<string, array{string}> */
    public static function eventTypes(): array
    {
        return ['foreground command' => ['fg'], 'background command' => ['bg'], 'callback' => ['cb']];
    }

    /** @return array<string, array{string}> */
    public static function commandEventTypes(): array
    {
        return ['foreground command' => ['fg'], 'background command' => ['bg']];
    }

    /** @dataProvider eventTypes */
    public function testKillOfTheJob(string $type): void
    {
        [$app, $tick, $first] = $this->startLongRun($type);
        self::kill9($first['pid']);
        $this->assertRecovers($app, $type, 'kill -9 of the job', microtime(true), 1);
    }

    /** @dataProvider eventTypes */
    public function testKillOfTheWholeProcessGroup(string $type): void
    {
        [$app, $tick, $first] = $this->startLongRun($type);
        $tick->killGroup();
        self::waitUntil(fn () => !self::groupAlive($tick->pid()), 'the killed group to be gone');
        $this->assertRecovers($app, $type, 'kill -9 of the process group', microtime(true), 1);
    }

    /**
     * @dataProvider commandEventTypes
 * @group extension-only
 * not polyfill-specific: what is tested is cronlock:run's Supervisor (cronlock/cli,
 * plain PHP, the same whichever implementation is loaded); the polyfill's own
 * paths here (its locks' release when the holder dies) are testKillOfTheJob's
 * and testKillOfTheWholeProcessGroup's, which run on it.
     */
    public function testKillOfTheHolderAloneEndsTheJob(string $type): void
    {
        [$app, $tick, $first] = $this->startLongRun($type);
        self::kill9(self::ancestor($first['pid'], 'cronlock:run'));
        self::waitUntil(fn () => !self::processAlive($first['pid']), 'the job to end with its holder');
        $this->assertRecovers($app, $type, 'kill -9 of cronlock:run alone', microtime(true), 1);
    }

    /**
     * A command the shell must run (here `cmd; true`, see ShellWords) is
     * `sh -c` under the holder: the parent-death signal reaches that shell,
     * not the job it started; the Supervisor's watchdog ends the command's
     * whole process group.
     *
 * @group extension-only
 * not polyfill-specific: what is tested is cronlock:run's Supervisor (cronlock/cli,
 * plain PHP, the same whichever implementation is loaded); the polyfill's own
 * paths here (its locks' release when the holder dies) are testKillOfTheJob's
 * and testKillOfTheWholeProcessGroup's, which run on it.
     */
    public function testKillOfTheHolderAloneEndsTheJobOfAShellCommand(): void
    {
        $app = $this->app(true, $this->appEnv());
        $app->config('cronlock', $this->cronlockConfig());
        $app->schedule('$schedule->exec(\Illuminate\Console\Application::formatCommandString("fixture:job") . " " . escapeshellarg($journal) . " sh 120; true")->everyMinute()->withoutOverlapping();');
        $tick = $app->tick(self::clock(0));
        $first = $app->journal()->waitForStarts(1, 30.0, $tick);
        self::assertStringContainsString('sh -c', self::cmdline((int) self::ppid($first['pid'])), 'the job is a child of the shell');
        self::kill9(self::ancestor($first['pid'], 'cronlock:run'));
        self::waitUntil(fn () => !self::processAlive($first['pid']), 'the job to end with its holder');
        $this->assertRecovers($app, 'sh', 'kill -9 of cronlock:run alone, a shell command', microtime(true), 1);
    }

    /**
     * @dataProvider commandEventTypes
     * @group extension-only
     * not polyfill-specific: the job keeps its lock in cronlock:run, and the filter
     * asks holder() as in testATickWhileARunIsGoingSkipsIt, which runs on the polyfill.
     */
    public function testKillOfLaravelsShellLeavesTheJobItsLock(string $type): void
    {
        [$app, $tick, $first] = $this->startLongRun($type);
        $holder = self::ancestor($first['pid'], 'cronlock:run');
        $shell = self::ppid($holder);
        self::assertStringStartsWith('sh -c', self::cmdline((int) $shell), 'Laravel\'s shell');
        self::kill9((int) $shell);
        self::assertTrue(self::processAlive($first['pid']), 'the job lives on');

        $next = $app->tick(self::clock(1));
        $next->succeed();
        self::waitUntil(fn () => !self::groupAlive($next->pid()), 'the tick to end');
        self::assertCount(1, $app->journal()->starts(), 'the tick while the job runs on must skip it: ' . $app->journal()->dump());

        self::kill9($first['pid']);
        $this->assertRecovers($app, $type, 'kill -9 of Laravel\'s shell, then of the job', microtime(true), 2);
    }

    /** @dataProvider eventTypes */
    public function testATickWhileARunIsGoingSkipsIt(string $type): void
    {
        $app = $this->scenarioApp($type, 60.0); // ends when told (the .release file below)
        $tick = $app->tick(self::clock(0));
        $app->journal()->waitForStarts(1, 30.0, $tick);
        $next = $app->tick(self::clock(1));
        $next->succeed();
        self::waitUntil(fn () => !self::groupAlive($next->pid()), 'the second tick to end');
        self::assertCount(1, $app->journal()->starts(), $app->journal()->dump());
        self::assertStringContainsString('No scheduled commands are ready to run.', $next->stdout(), 'the filter saw the holder');
        touch($app->journal()->path() . '.release');
        $tick->wait();
        self::waitUntil(fn () => !self::groupAlive($tick->pid()), 'the first run to end');
        [$skipped, $after] = $this->tickUntilItRuns($app, 2, 1);
        self::assertSame(0, $skipped, 'the tick after the run ended runs it');
        self::assertSame(0, $app->journal()->overlaps(), $app->journal()->dump());
        self::note(sprintf('%s, %s: a tick while the run was going skipped it; 0 overlaps', (new \ReflectionClass($this))->getShortName(), $type));
    }

    /**
     * An application whose schedule has one withoutOverlapping() event of $type
     * running the test job for $seconds.
     */
    protected function scenarioApp(string $type, float $seconds): LaravelApp
    {
        $app = $this->app(true, $this->appEnv());
        $app->config('cronlock', $this->cronlockConfig());
        $job = sprintf('$schedule->command("fixture:job", [$journal, "%s", %s])->everyMinute()->withoutOverlapping()', $type, var_export($seconds, true));
        $app->schedule([
            'fg' => $job . ';',
            'bg' => $job . '->runInBackground();',
            'cb' => sprintf('$schedule->call(fn () => Job::run($journal, "cb", %s))->name("cb")->everyMinute()->withoutOverlapping();', var_export($seconds, true)),
        ][$type]);
        return $app;
    }

    /** The application's environment for this backend. */
    protected function appEnv(): array
    {
        return [];
    }

    /** @return array{LaravelApp, AppProcess, array{label: string, pid: int, ppid: int, t: float, alone: bool}} */
    private function startLongRun(string $type): array
    {
        $app = $this->scenarioApp($type, 120.0);
        $tick = $app->tick(self::clock(0));
        $first = $app->journal()->waitForStarts(1, 30.0, $tick);
        return [$app, $tick, $first];
    }

    private function assertRecovers(LaravelApp $app, string $type, string $what, float $killedAt, int $fromMinute): void
    {
        $before = count($app->journal()->starts());
        [$skipped, $after] = $this->tickUntilItRuns($app, $fromMinute + 1, $before, $killedAt);
        self::assertSame(0, $app->journal()->overlaps(), $app->journal()->dump());
        if ($this->recoversOnTheNextTick()) {
            self::assertSame(0, $skipped, 'the tick after the kill runs the job');
        }
        self::note(sprintf('%s, %s, %s: 0 overlaps; the job ran again %.2f s after the kill, %d tick(s) skipped', (new \ReflectionClass($this))->getShortName(), $type, $what, $after, $skipped));
    }

    /**
     * Ticks (one Laravel minute apart, each waited for with every process it
     * started, the job of a run shortened to 0.2 s) until the journal has more
     * than $before starts.
     *
     * @return array{int, float} ticks skipped, seconds from $since to the start
     */
    private function tickUntilItRuns(LaravelApp $app, int $minute, int $before, ?float $since = null): array
    {
        $since ??= microtime(true);
        $deadline = microtime(true) + self::RECOVERY_BOUND;
        for ($skipped = 0; ; $skipped++, $minute++) {
            $tick = $app->tick(self::clock($minute), ['FIXTURE_JOB_SECONDS' => '0.2']);
            $tick->succeed();
            self::waitUntil(fn () => !self::groupAlive($tick->pid()), 'the tick to end', 30.0);
            $starts = $app->journal()->starts();
            if (count($starts) > $before) {
                return [$skipped, $starts[$before]['t'] - $since];
            }
            if (microtime(true) > $deadline) {
                self::fail(sprintf('no tick ran the job within %.0f s (%d ticks): %s%s', self::RECOVERY_BOUND, $skipped + 1, $app->journal()->dump(), $tick->describe()));
            }
        }
    }
}

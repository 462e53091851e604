<?php

declare(strict_types=1);

namespace CronLock\Tests\Frameworks;

/**
 * onOneServer() with cronlock/laravel, for one backend (the subclass): two
 * application directories are two hosts running the same schedule against
 * one server (or, for File, one lock directory on one host). Each tick, the
 * hosts' cron fires up to 2 s apart (both the real start and Laravel's clock
 * differ by that much); exactly one of them runs the job.
 *
 * A tick's claim is per tick, not a mutex: after a kill -9 of the winner the
 * next tick is another window, and runs as soon as the withoutOverlapping()
 * lock lets it. Claims last CLAIM_SECONDS here, so the 20 ticks outlive the
 * first claims, and what the backend still keeps after the run is counted:
 * nothing past its expiry.
 */
abstract class LaravelOnOneServerTestCase extends LaravelTestCase
{
    private const TICKS = 20;
    private const SPREAD = 2.0;
    /** A tick's claim here: more than two hosts' ticks can be apart, less than the 20 ticks take. */
    protected const CLAIM_SECONDS = 8.0;

    /** config('cronlock') both hosts share; $base is the test's directory. */
    abstract protected function cronlockConfig(string $base): array;

    /** How many claims the backend keeps that expired before $t (the run's last tick's start). */
    abstract protected function claimsExpiredBefore(float $t, array $config): int;

    /** Whether the tick right after a kill -9 of the winner must run the job (the withoutOverlapping() lock freed at once). */
    abstract protected function recoversOnTheNextTick(): bool;

    /** The application's environment (its cache store). */
    protected function hostEnv(): array
    {
        return [];
    }

    /** Each subclass's testEachTickRunsOnExactlyOneHost(), with the group its claim calls for. */
    abstract public function testEachTickRunsOnExactlyOneHost(): void;

    /**
     * 20 ticks of both hosts: exactly one run each, 0 overlaps, and no claim
     * left behind past its expiry.
     */
    protected function assertEachTickRunsOnExactlyOneHost(): void
    {
        [$hosts, $journal, $config] = $this->twoHosts(0.2);
        $ran = [0, 0];
        $lastStart = 0.0;
        for ($minute = 0; $minute < self::TICKS; $minute++) {
            $before = count($journal->starts());
            $lastStart = microtime(true);
            $ticks = $this->tickBoth($hosts, $minute);
            foreach ($ticks as $tick) {
                $tick->succeed();
                self::waitUntil(fn () => !self::groupAlive($tick->pid()), 'the tick to end');
            }
            $starts = $journal->starts();
            self::assertCount($before + 1, $starts, "tick $minute: exactly one run\n" . $journal->dump() . $ticks[0]->describe() . $ticks[1]->describe());
            $ran[strpos($ticks[0]->stdout(), 'Running scheduled command') !== false ? 0 : 1]++;
        }
        self::assertSame(0, $journal->overlaps());
        self::assertSame(0, $this->claimsExpiredBefore($lastStart, $config), 'no claim stays behind past its expiry');
        self::note(sprintf('%s: %d ticks, hosts up to %.0f s apart: one run each; host a ran %d, host b %d; no expired claim left',
            (new \ReflectionClass($this))->getShortName(), self::TICKS, self::SPREAD, $ran[0], $ran[1]));
    }

    public function testAfterKillOfTheWinnerTheNextTickRuns(): void
    {
        [$hosts, $journal] = $this->twoHosts(120.0);
        $winner = $hosts[0]->tick(self::clock(0));
        $journal->waitForStarts(1, 30.0, $winner);
        $winner->killGroup();
        $killed = microtime(true);
        for ($minute = 1; count($journal->starts()) === 1; $minute++) {
            self::assertLessThan(60.0, microtime(true) - $killed, 'a tick ran the job again within the bound');
            foreach ($this->tickBoth($hosts, $minute, ['FIXTURE_JOB_SECONDS' => '0.2']) as $tick) {
                $tick->succeed();
                self::waitUntil(fn () => !self::groupAlive($tick->pid()), 'the tick to end');
            }
        }
        self::assertCount(2, $journal->starts(), 'one host ran the recovering tick');
        self::assertSame(0, $journal->overlaps());
        if ($this->recoversOnTheNextTick()) {
            self::assertSame(2, $minute, 'the tick right after the kill ran the job');
        }
        self::note(sprintf('%s: onOneServer + withoutOverlapping, kill -9 of the winner: the job ran again %.2f s later, at tick +%d',
            (new \ReflectionClass($this))->getShortName(), $journal->starts()[1]['t'] - $killed, $minute - 1));
    }

    /**
     * The container's SchedulingMutex, asked directly: the window is the
     * time given, to the minute in UTC (10:05 in Berlin in January is 09:05
     * UTC), exists() answers without claiming, and a claim holds for its
     * window only.
     */
    public function testTheClaimIsTheTimeGivenToTheMinuteInUtcAndExistsOnlyAsks(): void
    {
        $base = $this->makeTempDir('laravel-hosts');
        $app = $this->app(true, $this->hostEnv(), "$base/a");
        $app->config('cronlock', $this->cronlockConfig($base) + ['claim_seconds' => self::CLAIM_SECONDS]);
        $app->schedule('$schedule->command("fixture:job", [$journal, "one", 0])->everyMinute()->onOneServer();');
        $out = $app->php('require "vendor/autoload.php"; $app = require "bootstrap/app.php";
            $app->make(Illuminate\Contracts\Console\Kernel::class)->bootstrap();
            $event = $app->make(Illuminate\Console\Scheduling\Schedule::class)->events()[0];
            $mutex = $app->make(Illuminate\Console\Scheduling\SchedulingMutex::class);
            $berlin = new DateTimeImmutable("2030-01-07 10:05:17", new DateTimeZone("Europe/Berlin"));
            $utc = new DateTimeImmutable("2030-01-07 09:05:59", new DateTimeZone("UTC"));
            echo json_encode([get_class($mutex), $mutex->exists($event, $berlin), $mutex->exists($event, $berlin),
                $mutex->create($event, $berlin), $mutex->exists($event, $utc), $mutex->create($event, $utc),
                $mutex->exists($event, $berlin->modify("+1 minute")), $mutex->create($event, $berlin->modify("+1 minute"))]);')->succeed()->stdout();
        $answers = json_decode($out, true);
        self::assertSame(['CronLock\Laravel\CronLockSchedulingMutex', false, false, true, true, false, false, true], $answers, $out);
    }

    /** @return array{list<LaravelApp>, Journal, array<string, mixed>} */
    private function twoHosts(float $seconds): array
    {
        $base = $this->makeTempDir('laravel-hosts');
        $journal = "$base/journal.log";
        $config = $this->cronlockConfig($base) + ['claim_seconds' => self::CLAIM_SECONDS];
        $hosts = [];
        foreach (['a', 'b'] as $name) {
            $host = $this->app(true, $this->hostEnv(), "$base/$name", $journal);
            $host->config('cronlock', $config);
            $host->schedule(sprintf('$schedule->command("fixture:job", [$journal, "one", %s])->everyMinute()->onOneServer()->withoutOverlapping();', var_export($seconds, true)), $journal);
            $hosts[] = $host;
        }
        return [$hosts, new Journal($journal), $config];
    }

    /**
     * Both hosts' ticks of one minute, the second up to SPREAD s after the
     * first (which host fires first alternates at random), each on its own
     * clock: the minute plus the moment its cron fired.
     *
     * @return list<AppProcess> host a's, host b's
     */
    private function tickBoth(array $hosts, int $minute, array $env = []): array
    {
        $order = random_int(0, 1) === 0 ? [0, 1] : [1, 0];
        $gap = random_int(0, (int) (self::SPREAD * 1000)) / 1000;
        $firstAt = random_int(0, 500) / 1000;
        $ticks = [];
        foreach ($order as $n => $i) {
            $offset = $firstAt + ($n === 1 ? $gap : 0.0);
            if ($n === 1) {
                usleep((int) ($gap * 1e6));
            }
            $ms = (strtotime(self::T0 . ' UTC') + 60 * $minute) * 1000 + (int) ($offset * 1000);
            $now = gmdate('Y-m-d H:i:s', intdiv($ms, 1000)) . sprintf('.%03d', $ms % 1000);
            $ticks[$i] = $hosts[$i]->artisan(['schedule:run'], ['FIXTURE_NOW' => $now] + $env);
        }
        ksort($ticks);
        return array_values($ticks);
    }
}

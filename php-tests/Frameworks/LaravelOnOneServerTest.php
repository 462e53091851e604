<?php

declare(strict_types=1);

namespace CronLock\Tests\Frameworks;

use CronLock\Tests\Support\RedisServer;

/**
 * onOneServer() with cronlock/laravel: two application directories are two
 * hosts running the same schedule against one redis-server (the cache
 * store's and cronlock's). Each tick, the hosts' cron fires up to 2 s apart
 * (both the real start and Laravel's clock differ by that much); exactly one
 * of them runs the job.
 *
 * Which host runs a tick is still decided by Laravel's CacheSchedulingMutex
 * on the application's cache store (cronlock has no claim primitive yet,
 * docs/frameworks.md); what the bridge adds is the withoutOverlapping() lock
 * both hosts share, which after a kill -9 of the winner lets the next tick
 * run within the Redis TTL instead of a day later.
 */
final class LaravelOnOneServerTest extends LaravelTestCase
{
    private const TICKS = 20;
    private const SPREAD = 2.0;

    private ?RedisServer $redis = null;

    protected function tearDown(): void
    {
        parent::tearDown();
        $this->redis = null;
    }

    public function testEachTickRunsOnExactlyOneHost(): void
    {
        [$hosts, $journal] = $this->twoHosts(0.3);
        $ran = [0, 0];
        for ($minute = 0; $minute < self::TICKS; $minute++) {
            $before = count($journal->starts());
            $ticks = $this->tickBoth($hosts, $minute);
            foreach ($ticks as $i => $tick) {
                $tick->succeed();
                self::waitUntil(fn () => !self::groupAlive($tick->pid()), 'the tick to end');
            }
            $starts = $journal->starts();
            self::assertCount($before + 1, $starts, "tick $minute: exactly one run\n" . $journal->dump());
            $ran[strpos($ticks[0]->stdout(), 'Running scheduled command') !== false ? 0 : 1]++;
        }
        self::assertSame(0, $journal->overlaps());
        self::note(sprintf('%d ticks, hosts up to %.0f s apart: one run each; host a ran %d, host b %d', self::TICKS, self::SPREAD, $ran[0], $ran[1]));
    }

    public function testAfterKillOfTheWinnerTheNextTickRunsWithinTheTtl(): void
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
        self::note(sprintf('onOneServer + withoutOverlapping, kill -9 of the winner: the job ran again %.2f s later, at tick +%d', $journal->starts()[1]['t'] - $killed, $minute - 1));
    }

    /** @return array{list<LaravelApp>, Journal} */
    private function twoHosts(float $seconds): array
    {
        $this->redis = RedisServer::start();
        $base = $this->makeTempDir('laravel-hosts');
        $journal = "$base/journal.log";
        $env = ['FIXTURE_CACHE' => 'redis', 'FIXTURE_REDIS_PORT' => (string) $this->redis->port()];
        $hosts = [];
        foreach (['a', 'b'] as $name) {
            $host = $this->app(true, $env, "$base/$name", $journal);
            $host->config('cronlock', ['backend' => 'redis', 'dsn' => $this->redis->dsn(), 'ttl' => 5.0, 'prefix' => 'shop:']);
            $host->schedule(sprintf('$schedule->command("fixture:job", [$journal, "one", %s])->everyMinute()->onOneServer()->withoutOverlapping();', var_export($seconds, true)), $journal);
            $hosts[] = $host;
        }
        return [$hosts, new Journal($journal)];
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

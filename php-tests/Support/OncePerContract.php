<?php

declare(strict_types=1);

namespace CronLock\Tests\Support;

/**
 * cron_guard()'s 'once_per' on a CronLock\Redis of the using contract test
 * (any topology): a short job uses up its window, a second run in it is
 * skipped, and the next window runs again.
 */
trait OncePerContract
{
    public function testOncePerRunsOncePerWindowOnThisTopology(): void
    {
        $name = $this->uniqueName();
        $runs = 0;
        $job = static function () use (&$runs) {
            $runs++;
        };
        $deadline = microtime(true) + 10.0;
        // Start early in a 2 s window (by this machine's clock, which the
        // local servers share), so that both tries fall in it.
        while (fmod(microtime(true), 2.0) > 0.8 && microtime(true) < $deadline) {
            usleep(20_000);
        }
        $window = floor(microtime(true) / 2.0);
        $log = (string) tempnam(sys_get_temp_dir(), 'cronlock-once-per');
        $saved = ini_set('error_log', $log);
        try {
            cron_guard($job, $this->createLock($name), ['once_per' => 2]);
            cron_guard($job, $this->createLock($name), ['once_per' => 2]);
        } finally {
            ini_set('error_log', (string) $saved);
        }
        self::assertSame(1, $runs, 'one run in the window');
        self::assertMatchesRegularExpression(
            "/redis key '" . preg_quote($name, '/') . "' .* is held by pid " . getmypid() . ' /',
            (string) file_get_contents($log),
            'the busy line'
        );
        unlink($log);
        self::assertFalse($this->lockIsFreeForOthers($name), 'the key is left until the window ends');
        while (floor(microtime(true) / 2.0) === $window) {
            usleep(20_000);
        }
        usleep(50_000);
        cron_guard($job, $this->createLock($name), ['once_per' => 2]);
        self::assertSame(2, $runs, 'the next window runs again');
    }
}

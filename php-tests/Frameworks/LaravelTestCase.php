<?php

declare(strict_types=1);

namespace CronLock\Tests\Frameworks;

use CronLock\Tests\Support\FileTestHelpers;
use PHPUnit\Framework\TestCase;

/**
 * Base of the Laravel scheduler tests: applications in temp directories
 * (LaravelApp), ticks of `php artisan schedule:run` on a fake clock, and the
 * processes of a run found through /proc.
 */
abstract class LaravelTestCase extends TestCase
{
    use FileTestHelpers;

    /** The first tick's time on Laravel's clock (FIXTURE_NOW); tick N is N minutes later. */
    protected const T0 = '2030-01-07 10:00:00';

    protected function setUp(): void
    {
        if (($missing = LaravelApp::available()) !== null) {
            self::markTestSkipped($missing);
        }
        parent::setUp();
    }

    /** @var list<Journal> */
    private array $journals = [];

    /**
     * A new application in a temp directory (see LaravelApp::create()); the
     * jobs its journal (or $journal) records are killed in tearDown.
     *
     * @param array<string, string> $env
     */
    protected function app(bool $bridge, array $env = [], ?string $dir = null, ?string $journal = null): LaravelApp
    {
        $app = LaravelApp::create($dir ?? $this->makeTempDir('laravel'), $bridge, $env);
        $this->journals[] = $journal !== null ? new Journal($journal) : $app->journal();
        return $app;
    }

    protected function tearDown(): void
    {
        foreach ($this->journals as $journal) {
            foreach ($journal->starts() as $start) {
                self::killPid($start['pid']);
            }
        }
        $this->journals = [];
        $this->reapCommands();
        $this->removeTempDirs();
        parent::tearDown();
    }

    /** Laravel's clock at T0 plus $minutes. */
    protected static function clock(int $minutes): string
    {
        return gmdate('Y-m-d H:i:s', strtotime(self::T0 . ' UTC') + 60 * $minutes);
    }

    /** Run one tick to its end; returns its output. */
    protected static function runTick(LaravelApp $app, int $minute, array $env = []): string
    {
        $tick = $app->tick(self::clock($minute), $env);
        $tick->succeed(60.0);
        return $tick->stdout();
    }

    protected static function ppid(int $pid): ?int
    {
        $stat = @file_get_contents("/proc/$pid/stat");
        if ($stat === false || strpos($stat, ')') === false) {
            return null; // gone, or exiting while we read it
        }
        return (int) (explode(' ', substr($stat, strrpos($stat, ')') + 2))[1] ?? 0);
    }

    protected static function cmdline(int $pid): string
    {
        return str_replace("\0", ' ', (string) @file_get_contents("/proc/$pid/cmdline"));
    }

    /** The nearest ancestor of $pid (itself included) whose command line contains $needle. */
    protected static function ancestor(int $pid, string $needle): int
    {
        for ($p = $pid; $p !== null && $p > 1; $p = self::ppid($p)) {
            if (strpos(self::cmdline($p), $needle) !== false) {
                return $p;
            }
        }
        throw new \RuntimeException("no ancestor of pid $pid runs '$needle'");
    }

    /** kill -9 a process that is not our child and wait until it is gone. */
    protected static function kill9(int $pid): void
    {
        self::killPid($pid);
        self::waitUntil(fn () => !self::processAlive($pid), "pid $pid to die", 10.0);
    }

    /** Whether any process of the process group $pgid is left (zombies of our own children aside). */
    protected static function groupAlive(int $pgid): bool
    {
        foreach (glob('/proc/[0-9]*/stat') ?: [] as $f) {
            $stat = @file_get_contents($f);
            $close = $stat === false ? false : strrpos($stat, ')');
            if ($close === false) {
                continue; // gone, or exiting while we read it (an empty read)
            }
            $fields = explode(' ', substr($stat, $close + 2));
            if (count($fields) < 3) {
                continue;
            }
            if ((int) $fields[2] === $pgid && $fields[0] !== 'Z') {
                return true;
            }
        }
        return false;
    }
}

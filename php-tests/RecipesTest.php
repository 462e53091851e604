<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\Tests\Support\FileTestHelpers;
use CronLock\Tests\Support\Proc;
use PHPUnit\Framework\TestCase;

/**
 * The README's logger recipes (`// recipe: NAME` blocks), run as written,
 * on both implementations: only the places they name are pointed at this
 * test's (the log file, the StatsD port, the textfile directory) and `$job`
 * is a job of the test's. Monolog is not in Debian: a stand-in with the
 * part of Monolog's API the recipe uses (Logger, pushHandler, StreamHandler,
 * PSR-3 log()) receives the lines.
 */
final class RecipesTest extends TestCase
{
    use FileTestHelpers;

    private string $dir;
    /** @var string|false CRONLOCK_LOG as the suite set it */
    private $savedLog = false;

    protected function setUp(): void
    {
        parent::setUp();
        $this->dir = $this->makeTempDir('recipes');
        putenv("CRONLOCK_LOCK_DIR={$this->dir}");
        $this->savedLog = getenv('CRONLOCK_LOG');
        putenv('CRONLOCK_LOG=none');
    }

    protected function tearDown(): void
    {
        putenv('CRONLOCK_LOCK_DIR');
        putenv($this->savedLog === false ? 'CRONLOCK_LOG' : "CRONLOCK_LOG={$this->savedLog}");
        $this->removeTempDirs();
        parent::tearDown();
    }

    private static function recipe(string $name): string
    {
        $readme = (string) file_get_contents(dirname(__DIR__) . '/README.md');
        self::assertSame(1, preg_match('/```php\n\/\/ recipe: ' . $name . '\n(.*?)```/s', $readme, $m), "README has the $name recipe");
        return $m[1];
    }

    /** Runs $code twice: once free (ran), once while a holder keeps the lock (skipped). */
    private function runTwice(string $code): array
    {
        $job = '$job = function () { usleep(200000); };' . "\n";
        $ran = Proc::run($job . $code);
        self::assertSame(0, $ran->exitCode(), $ran->stdout() . $ran->stderr());
        $stop = "{$this->dir}/stop";
        $holder = Proc::start(sprintf('cron_guard(function () { echo "HELD\n"; while (!file_exists(%s)) { usleep(2000); } }, "sync-orders");', var_export($stop, true)));
        $holder->waitForLine('HELD', 15.0, 'stdout');
        $skipped = Proc::run($job . $code);
        touch($stop);
        $holder->wait();
        self::assertSame(0, $skipped->exitCode(), $skipped->stdout() . $skipped->stderr());
        self::assertSame('', $ran->stdout() . $ran->stderr() . $skipped->stdout() . $skipped->stderr());
        return [$ran, $skipped, $holder];
    }

    public function testMonolog(): void
    {
        $standIn = "{$this->dir}/monolog.php";
        file_put_contents($standIn, <<<'PHP'
            <?php
            namespace Monolog\Handler;
            final class StreamHandler
            {
                public $path;
                public function __construct($path) { $this->path = $path; }
            }
            namespace Monolog;
            final class Logger
            {
                private $handlers = [];
                public function __construct(string $name) {}
                public function pushHandler($handler): self { $this->handlers[] = $handler; return $this; }
                public function log($level, $message, array $context = []): void
                {
                    foreach ($this->handlers as $handler) {
                        file_put_contents($handler->path, strtoupper($level) . ' ' . $message . ' ' . json_encode($context) . "\n", FILE_APPEND);
                    }
                }
            }
            PHP);
        $log = "{$this->dir}/cron-jobs.log";
        $code = 'require ' . var_export($standIn, true) . ";\n" . str_replace("'/var/log/cron-jobs.log'", var_export($log, true), self::recipe('monolog'));
        [, , $holder] = $this->runTwice($code);
        $lines = file($log, FILE_IGNORE_NEW_LINES);
        self::assertCount(3, $lines, implode("\n", $lines));
        self::assertMatchesRegularExpression('/^INFO cron_guard: record lock=sync-orders outcome=ran waited_ms=\d+ held_ms=(1\d\d|2\d\d) holder=\S+ \{"event":"record",/', $lines[0]);
        self::assertMatchesRegularExpression('/^NOTICE cron_guard: lock sync-orders \(.*\) is held by pid ' . $holder->pid() . ' .*\{"event":"busy",.*"outcome":"skipped: busy"/', $lines[1]);
        self::assertStringStartsWith('INFO cron_guard: record lock=sync-orders outcome="skipped: busy"', $lines[2]);
    }

    public function testStatsd(): void
    {
        $server = stream_socket_server('udp://127.0.0.1:0', $errno, $error, STREAM_SERVER_BIND);
        self::assertNotFalse($server, $error);
        $port = (int) substr((string) strrchr(stream_socket_get_name($server, false), ':'), 1);
        $this->runTwice(str_replace('8125', (string) $port, self::recipe('statsd')));
        stream_set_blocking($server, false);
        $received = [];
        while (($datagram = stream_socket_recvfrom($server, 65536)) !== false && $datagram !== '') {
            $received[] = $datagram;
        }
        self::assertCount(2, $received);
        self::assertMatchesRegularExpression("/^cron\\.sync_orders\\.waited:\\d+\\|ms\ncron\\.sync_orders\\.held:\\d+\\|ms\ncron\\.sync_orders\\.ran:1\\|c$/", $received[0]);
        self::assertMatchesRegularExpression("/^cron\\.sync_orders\\.waited:\\d+\\|ms\ncron\\.sync_orders\\.held:0\\|ms\ncron\\.sync_orders\\.skipped:1\\|c$/", $received[1]);
    }

    public function testPrometheusTextfile(): void
    {
        $dir = $this->makeTempDir('textfile');
        $code = str_replace("'/var/lib/prometheus/node-exporter'", var_export($dir, true), self::recipe('prometheus'));
        $job = '$job = function () { usleep(200000); };' . "\n";
        $ran = Proc::run($job . $code);
        self::assertSame('', $ran->stdout() . $ran->stderr());
        $files = glob("$dir/*.prom");
        self::assertSame(["$dir/cronlock-" . md5('sync-orders') . '.prom'], $files);
        $text = (string) file_get_contents($files[0]);
        self::assertMatchesRegularExpression(
            '/^cronlock_last_run_timestamp_seconds\{lock="sync-orders"\} \d+\n'
            . 'cronlock_last_run_held_seconds\{lock="sync-orders"\} 0\.[12]\d*\n'
            . 'cronlock_last_run_waited_seconds\{lock="sync-orders"\} [0-9.]+\n'
            . 'cronlock_last_run_skipped\{lock="sync-orders"\} 0\n$/',
            $text
        );
        self::assertSame([], glob("$dir/*.tmp"));
    }
}

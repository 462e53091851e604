<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\Tests\Support\FileTestHelpers;
use CronLock\Tests\Support\MountNamespace;
use CronLock\Tests\Support\Proc;
use CronLock\Tests\Support\RedisServer;
use PHPUnit\Framework\TestCase;

/**
 * What the person who runs the crontab sees (issue 19, items 1 to 4), on
 * both implementations: a busy run under cron prints nothing and its line
 * reaches syslog; the busy line says who, since when, for how long and how
 * long this run waited; a holder past 'stale_after' looks stuck and
 * 'on_stale' sets the exit status; a lost hold (File path replaced, Redis
 * key deleted or taken) is reported once when noticed and once at the end;
 * the per-run record's figures are what the job measured. Real processes
 * and a real Redis server; syslog through a socket of the test's over
 * /dev/log in a private mount namespace.
 */
final class CronGuardOperationsTest extends TestCase
{
    use FileTestHelpers;

    private string $dir;
    /** @var string|false CRONLOCK_LOG as the suite set it */
    private $savedLog = false;
    private static ?RedisServer $redis = null;

    protected function setUp(): void
    {
        parent::setUp();
        $this->dir = $this->makeTempDir('ops');
        putenv("CRONLOCK_LOCK_DIR={$this->dir}");
        $this->savedLog = getenv('CRONLOCK_LOG');
        putenv('CRONLOCK_LOG');
    }

    protected function tearDown(): void
    {
        putenv('CRONLOCK_LOCK_DIR');
        putenv($this->savedLog === false ? 'CRONLOCK_LOG' : "CRONLOCK_LOG={$this->savedLog}");
        $this->reapCommands();
        $this->removeTempDirs();
        parent::tearDown();
    }

    public static function tearDownAfterClass(): void
    {
        self::$redis?->stop();
        self::$redis = null;
    }

    /** A child holding the named lock $name through cron_guard() until $stop exists; prints HELD. */
    private function holder(string $name, string $stop): Proc
    {
        $p = Proc::start(sprintf(
            'cron_guard(function () { echo "HELD\n"; while (!file_exists(%s)) { usleep(2000); } }, %s, ["log" => "none"]);',
            var_export($stop, true),
            var_export($name, true)
        ));
        $p->waitForLine('HELD', 15.0, 'stdout');
        return $p;
    }

    private static function host(): string
    {
        $name = gethostname();
        return is_string($name) && $name !== '' ? $name : php_uname('n');
    }

    // ---------------------------------------------- 1. quiet, findable skips

    /**
     * The README's crontab example, started twice as cron starts it (sh -c,
     * stdin /dev/null, stdout and stderr captured for the mail): the busy
     * run prints nothing, and its line reaches syslog (facility user,
     * priority notice: <13>) under the ident of the process (the PHP binary's name: php8.2).
     */
    public function testABusyRunUnderCronPrintsNothingAndIsInSyslog(): void
    {
        MountNamespace::skipUnlessAvailable();
        $socketPath = "{$this->dir}/log.sock";
        $socket = stream_socket_server("udg://$socketPath", $errno, $error, STREAM_SERVER_BIND);
        self::assertNotFalse($socket, "cannot bind $socketPath: $error");
        chmod($socketPath, 0666);
        $ns = MountNamespace::start([], [], [], $socketPath);
        $stop = "{$this->dir}/stop";
        $job = "{$this->dir}/sync_orders.php";
        file_put_contents($job, sprintf(<<<'PHP'
            <?php
            cron_guard(function (CronLock\Guard $guard) {
                echo "RUNNING\n";
                while (!file_exists(%s) && !$guard->expired()) {
                    usleep(5000);
                }
            }, 'sync-orders', ['max_runtime' => 50]);
            PHP, var_export($stop, true)));
        $php = [PHP_BINARY, '-d', 'error_log=', '-d', 'display_errors=stderr'];
        if (extension_loaded('cronlock') && !class_exists(\CronLock\Polyfill\CronGuard::class, false)) {
            array_push($php, '-d', 'extension=' . self::extensionPath());
        } else {
            array_push($php, '-n', '-d', 'auto_prepend_file=' . dirname(__DIR__) . '/polyfill/bootstrap.php');
        }
        $dir = $this->dir;
        // as cron starts a crontab line: sh -c, stdin /dev/null, output captured for the mail
        $cron = static fn () => ['env', '-u', 'CRONLOCK_LOG', '-u', 'PHP_INI_SCAN_DIR', "CRONLOCK_LOCK_DIR=$dir", 'sh', '-c', 'exec "$@" </dev/null', 'cron', ...$php, $job];
        $first = $this->startCommand($ns->command($cron()));
        self::waitUntil(fn () => str_contains($this->commandOutput($first), 'RUNNING'), 'the first run holds the lock', 15.0);
        [$code, $out] = $this->runCommand($ns->command($cron()));
        self::assertSame(0, $code);
        self::assertSame('', $out, 'a busy run prints nothing on stdout or stderr: cron mails nothing');
        touch($stop);
        [$code] = $this->finishCommand($first);
        self::assertSame(0, $code);
        $received = [];
        stream_set_blocking($socket, false);
        self::waitUntil(function () use ($socket, &$received) {
            while (($datagram = stream_socket_recvfrom($socket, 65536)) !== false && $datagram !== '') {
                $received[] = $datagram;
            }
            return $received !== [];
        }, 'the busy line at the test syslog socket', 10.0);
        $ns->stop();
        self::assertCount(1, $received, implode("\n", $received));
        self::assertMatchesRegularExpression(
            '~^<13>.*php[0-9.]*(\[\d+\])?: cron_guard: lock sync-orders \(' . preg_quote($this->dir, '~')
            . '/sync-orders\.lock\) is held by pid \d+ on \S+ since \d\d:\d\d:\d\dZ \(\d+ s\); waited \d+\.\d s; skipping this run$~',
            $received[0]
        );
    }

    /** 'log' => a file: one line per skip, after its UTC time; a JSON record alone on its line. */
    public function testALogFileGetsEachLineAfterItsTime(): void
    {
        $stop = "{$this->dir}/stop";
        $holder = $this->holder('filed', $stop);
        $log = "{$this->dir}/cron.log";
        $p = Proc::run(sprintf(
            'var_dump(cron_guard(function () {}, "filed", ["log" => %s, "record" => "skips", "record_format" => "json"]));',
            var_export($log, true)
        ));
        touch($stop);
        $holder->wait();
        self::assertSame("NULL\n", $p->stdout());
        self::assertSame('', $p->stderr());
        $lines = file($log, FILE_IGNORE_NEW_LINES);
        self::assertCount(2, $lines);
        self::assertMatchesRegularExpression('/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ cron_guard: lock filed \(.*\) is held by pid ' . $holder->pid() . ' /', $lines[0]);
        $record = json_decode($lines[1], true, 512, JSON_THROW_ON_ERROR);
        self::assertSame(['time', 'lock', 'outcome', 'waited_ms', 'held_ms', 'holder'], array_keys($record));
        self::assertSame(['filed', 'skipped: busy', 0, $holder->pid() . '@' . self::host()], [$record['lock'], $record['outcome'], $record['held_ms'], $record['holder']]);
    }

    // ------------------------------------- 2. who, since when, how long, waited

    public function testTheBusyLineSaysWhoSinceWhenForHowLongAndHowLongItWaited(): void
    {
        $stop = "{$this->dir}/stop";
        $holder = $this->holder('busy-words', $stop);
        $p = Proc::run(<<<'PHP'
            cron_guard(function () {}, 'busy-words', ['wait' => 0.3, 'log' => 'none', 'logger' => function ($level, $line, $context) {
                echo json_encode([$level, $line, $context]), "\n";
            }]);
            PHP);
        touch($stop);
        $holder->wait();
        self::assertSame('', $p->stderr());
        [$level, $line, $context] = json_decode(trim($p->stdout()), true, 512, JSON_THROW_ON_ERROR);
        self::assertSame('notice', $level);
        self::assertMatchesRegularExpression(
            '~^cron_guard: lock busy-words \(' . preg_quote($this->dir, '~') . '/busy-words\.lock\) is held by pid '
            . $holder->pid() . ' on ' . preg_quote(self::host(), '~') . ' since \d\d:\d\d:\d\dZ \(\d+ s\); waited (0\.[3-9]|[1-9]\d*\.\d) s; skipping this run$~', // 0.3 s or more on a loaded host
            $line
        );
        self::assertSame('busy', $context['event']);
        self::assertSame('busy-words', $context['lock']);
        self::assertSame('skipped: busy', $context['outcome']);
        self::assertSame($holder->pid() . '@' . self::host(), $context['holder']);
        self::assertGreaterThanOrEqual(300, $context['waited_ms']);
    }

    /** A holder past 'stale_after' looks stuck, at warning level; 'on_stale' is the run's exit status. */
    public function testAStaleHolderLooksStuckAndOnStaleSetsTheExitStatus(): void
    {
        $stop = "{$this->dir}/stop";
        $holder = $this->holder('stuck', $stop);
        sleep(2); // the record's since has whole seconds
        $logger = 'function ($level, $line) { echo "$level $line\n"; }';
        $p = Proc::run("cron_guard(function () {}, 'stuck', ['log' => 'none', 'stale_after' => 1, 'on_stale' => 7, 'on_busy' => 3, 'logger' => $logger]);");
        self::assertSame(7, $p->exitCode(), $p->stdout() . $p->stderr());
        self::assertMatchesRegularExpression('/^warning cron_guard: lock stuck \(.*\) is held by pid ' . $holder->pid()
            . ' on \S+ since \S+ \(\d+ s\), longer than stale_after \(1 s\): it looks stuck; waited \d+\.\d s; skipping this run$/', trim($p->stdout()));
        // by default twice max_runtime; a holder younger than that is plain busy (on_busy)
        $p = Proc::run("cron_guard(function () {}, 'stuck', ['log' => 'none', 'max_runtime' => 60, 'on_stale' => 7, 'on_busy' => 3, 'logger' => $logger]);");
        self::assertSame(3, $p->exitCode());
        self::assertStringStartsWith('notice ', $p->stdout());
        $p = Proc::run("cron_guard(function () {}, 'stuck', ['log' => 'none', 'max_runtime' => 0.5, 'on_stale' => 7, 'logger' => $logger]);");
        self::assertSame(7, $p->exitCode());
        self::assertStringContainsString('longer than stale_after (1 s): it looks stuck', $p->stdout());
        // a limit with a fraction is given in tenths, never rounded down to "0 s"
        $p = Proc::run("cron_guard(function () {}, 'stuck', ['log' => 'none', 'stale_after' => 0.5, 'on_stale' => 7, 'logger' => $logger]);");
        self::assertSame(7, $p->exitCode());
        self::assertStringContainsString('longer than stale_after (0.5 s): it looks stuck', $p->stdout());
        touch($stop);
        $holder->wait();
    }

    // ------------------------------------------------------ 3. lost holds

    /** The lines a run wrote to stderr (the CLI's error_log()), without PHP's own. */
    private static function errorLines(Proc $p): array
    {
        return array_values(array_filter(explode("\n", $p->stderr()), static fn ($l) => $l !== ''));
    }

    public function testAReplacedLockFileIsReportedWhenNoticedAndAtTheEnd(): void
    {
        $path = "{$this->dir}/replaced.lock";
        $p = Proc::run(sprintf(<<<'PHP'
            $path = %s;
            cron_guard(function (CronLock\Guard $guard) use ($path) {
                var_dump($guard->lost());
                file_put_contents("$path.new", '');
                rename("$path.new", $path); // another file at the path: another run can lock it
                var_dump($guard->renew(), $guard->lost());
                var_dump($guard->renew()); // noticed once
            }, new CronLock\File($path), ['log' => 'none', 'record' => 'runs', 'logger' => function ($level, $line, $context) {
                if ($context['event'] === 'record') { echo $line, "\n"; }
            }]);
            PHP, var_export($path, true)));
        self::assertSame(0, $p->exitCode(), $p->stderr());
        self::assertMatchesRegularExpression("/^NULL\nbool\\(false\\)\nstring\\(\\d+\\) \"at \\d\\d:\\d\\d:\\d\\dZ: its path names another file now\"\nbool\\(false\\)\ncron_guard: record lock=\\S+ outcome=lost /", $p->stdout());
        $lines = self::errorLines($p);
        self::assertCount(2, $lines, $p->stderr());
        self::assertMatchesRegularExpression('~^cron_guard: lock ' . preg_quote($path, '~') . ' was lost \(at \d\d:\d\d:\d\dZ: its path names another file now\) while its job runs; another run may start$~', $lines[0]);
        self::assertMatchesRegularExpression('~^cron_guard: lock ' . preg_quote($path, '~') . ' was lost during the run \(at \d\d:\d\d:\d\dZ: its path names another file now\); another run may have started$~', $lines[1]);
    }

    /** Never renewed: the job's end finds it (one stat of the path), and says so once. */
    public function testARemovedLockFileIsFoundAtTheEndWithoutARenew(): void
    {
        $path = "{$this->dir}/removed.lock";
        $p = Proc::run(sprintf('cron_guard(function () { unlink(%s); }, new CronLock\File(%1$s), ["log" => "none"]);', var_export($path, true)));
        $lines = self::errorLines($p);
        self::assertCount(1, $lines, $p->stderr());
        self::assertMatchesRegularExpression('/ was lost during the run \(at \S+: its lock file was removed\); another run may have started$/', $lines[0]);
        $p = Proc::run(sprintf(<<<'PHP'
            cron_guard(function (CronLock\Guard $guard) {
                unlink(%s);
                try { $guard->renew(); } catch (CronLock\LockException $e) { echo get_class($e), ': ', $e->getMessage(), "\n"; }
            }, new CronLock\File(%1$s), ['log' => 'none', 'on_lost' => 'throw']);
            PHP, var_export($path, true)));
        self::assertMatchesRegularExpression('~^CronLock\\\\LockException: lock ' . preg_quote($path, '~') . ' was lost \(at \S+: its lock file was removed\); another run may have started\n$~', $p->stdout());
        self::assertCount(2, self::errorLines($p));
    }

    private static function redis(): RedisServer
    {
        return self::$redis ??= RedisServer::start();
    }

    public function testADeletedRedisKeyIsReportedAtRenewAndAtTheEnd(): void
    {
        $port = self::redis()->port();
        $p = Proc::run(sprintf(<<<'PHP'
            $lock = new CronLock\Redis('redis://127.0.0.1:%d', 'ops-deleted', 30.0);
            cron_guard(function (CronLock\Guard $guard) {
                $redis = stream_socket_client('tcp://127.0.0.1:%1$d'); // any PHP: no Redis client needed
                fwrite($redis, "*2\r\n\$3\r\nDEL\r\n\$11\r\nops-deleted\r\n");
                if (fgets($redis) !== ":1\r\n") { exit(3); }
                var_dump($guard->renew());
                echo $guard->lost(), "\n";
            }, $lock, ['log' => 'none']);
            PHP, $port));
        self::assertSame(0, $p->exitCode(), $p->stderr());
        self::assertMatchesRegularExpression("/^bool\\(false\\)\nat \\d\\d:\\d\\d:\\d\\dZ: the key is gone\n$/", $p->stdout());
        $lines = self::errorLines($p);
        self::assertCount(2, $lines, $p->stderr());
        self::assertStringStartsWith("cron_guard: lock redis key 'ops-deleted' at 127.0.0.1:$port was lost (at ", $lines[0]);
        self::assertStringEndsWith('while its job runs; another run may start', $lines[0]);
        self::assertStringEndsWith('; another run may have started', $lines[1]);
    }

    /** Taken by another client while the job never renews: the token-checked release at the end says so. */
    public function testATakenRedisKeyIsFoundAtTheEnd(): void
    {
        $port = self::redis()->port();
        $p = Proc::run(sprintf(<<<'PHP'
            $lock = new CronLock\Redis('redis://127.0.0.1:%d', 'ops-taken', 30.0);
            cron_guard(function () {
                $redis = stream_socket_client('tcp://127.0.0.1:%1$d'); // any PHP: no Redis client needed
                fwrite($redis, "*3\r\n\$3\r\nSET\r\n\$9\r\nops-taken\r\n\$12\r\nsomeone-else\r\n");
                if (fgets($redis) !== "+OK\r\n") { exit(3); }
            }, $lock, ['log' => 'none', 'record' => 'runs', 'logger' => function ($level, $line, $context) {
                if ($context['event'] === 'record') { echo $context['outcome'], "\n"; }
            }]);
            PHP, $port));
        self::assertSame("lost\n", $p->stdout(), $p->stderr());
        $lines = self::errorLines($p);
        self::assertCount(1, $lines, $p->stderr());
        self::assertStringContainsString("lock redis key 'ops-taken' at 127.0.0.1:$port was lost during the run (at ", $lines[0]);
    }

    // ------------------------------------------------- failing release (D8)

    /**
     * The operator's scenario: Redis stops while the job runs, the job
     * returns, release() cannot reach the server. The "releasing lock …
     * failed" line goes where a lost hold's goes (the error log once, the
     * log file, the logger as release_failed), the record says
     * release_failed (not failed: the job did not throw), and the release's
     * exception is what cron_guard() throws.
     */
    public function testARedisReleaseThatFailsAfterTheJobReturnedIsReportedAndRecordedAsSuch(): void
    {
        $redis = RedisServer::start(); // its own: this test stops it
        $port = $redis->port();
        $log = "{$this->dir}/cron.log";
        $go = "{$this->dir}/go";
        $p = Proc::start(sprintf(<<<'PHP'
            $lock = new CronLock\Redis('redis://127.0.0.1:%d', 'cron:sync');
            try {
                cron_guard(function () {
                    echo "RUNNING\n";
                    while (!file_exists(%s)) { usleep(2000); }
                    return 'done';
                }, $lock, ['log' => %s, 'record' => 'runs', 'logger' => function ($level, $line, $context) {
                    echo json_encode([$level, $line, $context['event'], $context['outcome']]), "\n";
                }]);
                echo "RETURNED\n";
            } catch (Throwable $e) {
                echo 'THROWN ', get_class($e), "\n";
            }
            PHP, $port, var_export($go, true), var_export($log, true)));
        $p->waitForLine('RUNNING', 15.0, 'stdout');
        $redis->stop();
        touch($go);
        self::assertSame(0, $p->wait(), $p->stderr());

        $line = "cron_guard: releasing lock redis key 'cron:sync' at 127.0.0.1:$port failed: cannot connect to Redis at 127.0.0.1:$port";
        $outcome = 'release_failed: CronLock\ConnectionException';
        $errorLines = self::errorLines($p);
        self::assertCount(1, $errorLines, 'once to the error log: ' . $p->stderr());
        self::assertStringStartsWith($line, $errorLines[0]);
        $lines = file($log, FILE_IGNORE_NEW_LINES);
        self::assertCount(2, $lines, implode("\n", $lines));
        self::assertMatchesRegularExpression('/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ' . preg_quote($line, '/') . '/', $lines[0]);
        self::assertMatchesRegularExpression('/^\S+ ' . preg_quote('cron_guard: record lock="redis key \'cron:sync\' at 127.0.0.1:' . $port
            . '" outcome="release_failed: CronLock\\\\ConnectionException" waited_ms=', '/') . '\d+ held_ms=\d+ holder=/', $lines[1]);
        $stdout = explode("\n", trim($p->stdout()));
        self::assertSame('RUNNING', array_shift($stdout));
        self::assertSame('THROWN CronLock\ConnectionException', array_pop($stdout), "D8: the job returned, so the release's exception is thrown");
        $told = array_map(static fn ($l) => json_decode($l, true, 512, JSON_THROW_ON_ERROR), $stdout);
        self::assertCount(2, $told, $p->stdout());
        self::assertSame(['error', 'release_failed', $outcome], [$told[0][0], $told[0][2], $told[0][3]]);
        self::assertStringStartsWith($line, $told[0][1]);
        self::assertSame(['info', 'record', $outcome], [$told[1][0], $told[1][2], $told[1][3]]);
    }

    /**
     * A job that threw keeps its outcome (failed: <its class>) and is what
     * cron_guard() throws; the failing release is still reported, once. A
     * job that called exit() records release_failed, as one that returned.
     */
    public function testAFailingReleaseAfterAJobThatThrewOrExitedKeepsTheJobsOutcome(): void
    {
        $code = <<<'PHP'
            final class BrokenRelease implements CronLock\Lock {
                private bool $held = false;
                public function acquire(float $timeout = 0.0): bool { return $this->held = true; }
                public function renew(?float $ttl = null): bool { return $this->held; }
                public function release(): bool { throw new UnexpectedValueException('release broke'); }
                public function isHeld(): bool { return $this->held; }
            }
            $lock = new BrokenRelease();
            $options = ['log' => 'none', 'record' => 'runs', 'logger' => function ($level, $line, $context) {
                echo $context['event'], ' ', $context['outcome'], "\n";
            }];
            PHP;
        $p = Proc::run($code . <<<'PHP'
            try {
                cron_guard(function () { throw new DomainException('job broke'); }, $lock, $options);
            } catch (Throwable $e) {
                echo 'THROWN ', get_class($e), ' ', $e->getMessage(), "\n";
            }
            PHP);
        self::assertSame("release_failed failed: DomainException\nrecord failed: DomainException\nTHROWN DomainException job broke\n", $p->stdout(), $p->stderr());
        $lines = self::errorLines($p);
        self::assertCount(1, $lines, $p->stderr());
        self::assertSame('cron_guard: releasing lock BrokenRelease failed: release broke', $lines[0]);

        $p = Proc::run($code . 'cron_guard(function () { exit(4); }, $lock, $options);');
        self::assertSame(4, $p->exitCode(), $p->stderr());
        self::assertSame("release_failed release_failed: UnexpectedValueException\nrecord release_failed: UnexpectedValueException\n", $p->stdout());
        self::assertCount(1, self::errorLines($p), $p->stderr());
    }

    // ------------------------------------------------- 4. per-run record

    /** waited and held agree with what the job measured. */
    public function testTheRecordsFiguresAreWhatTheJobMeasured(): void
    {
        $stop = "{$this->dir}/stop";
        $holder = $this->holder('measured', $stop);
        $log = "{$this->dir}/records.log";
        $p = Proc::start(sprintf(<<<'PHP'
            $called = microtime(true);
            echo "CALLING\n";
            cron_guard(function () use ($called) {
                $began = microtime(true);
                usleep(400000);
                echo json_encode(['waited' => ($began - $called) * 1000, 'began' => $began]), "\n";
                $GLOBALS['began'] = $began;
            }, 'measured', ['wait' => 5, 'log' => %s, 'record' => 'runs', 'record_format' => 'json']);
            echo json_encode(['held' => (microtime(true) - $GLOBALS['began']) * 1000]), "\n";
            PHP, var_export($log, true)));
        $p->waitForLine('CALLING', 15.0, 'stdout');
        usleep(300000);
        touch($stop);
        self::assertSame(0, $p->wait(), $p->stderr());
        $holder->wait();
        [, $job, $end] = array_map(static fn ($l) => json_decode($l, true), explode("\n", trim($p->stdout())));
        $record = json_decode(trim(file_get_contents($log)), true, 512, JSON_THROW_ON_ERROR);
        self::assertSame('ran', $record['outcome']);
        self::assertSame('measured', $record['lock']);
        self::assertSame($p->pid() . '@' . self::host(), $record['holder']);
        // Bounds from the order of events, which no load can change (a 50 ms tolerance failed
        // at load 14): the wait lies inside [called, began], the hold covers the 400 ms sleep and
        // lies inside [called, end].
        self::assertGreaterThan(200, $record['waited_ms'], 'it waited for the holder');
        self::assertLessThanOrEqual($job['waited'] + 1, $record['waited_ms'], 'the wait lies inside the call before the job');
        self::assertGreaterThanOrEqual(400, $record['held_ms'], 'the hold covers the job');
        self::assertLessThanOrEqual($job['waited'] + $end['held'] + 1, $record['held_ms'], 'the hold lies inside the call');
    }

    public function testTheTextRecordAndTheOutcomes(): void
    {
        $p = Proc::run(<<<'PHP'
            $options = ['log' => 'stderr', 'record' => 'runs'];
            cron_guard(function () {}, 'outcomes', $options);
            try { cron_guard(function () { throw new DomainException('x'); }, 'outcomes', $options); } catch (DomainException $e) {}
            cron_guard(function () {}, 'outcomes', ['record' => 'skips'] + $options); // a run: no record
            PHP);
        $lines = self::errorLines($p);
        self::assertCount(2, $lines, $p->stderr());
        $who = $p->pid() . '@' . self::host();
        self::assertMatchesRegularExpression("/^cron_guard: record lock=outcomes outcome=ran waited_ms=\\d+ held_ms=\\d+ holder=" . preg_quote($who, '/') . '$/', $lines[0]);
        self::assertMatchesRegularExpression("/^cron_guard: record lock=outcomes outcome=\"failed: DomainException\" waited_ms=\\d+ held_ms=\\d+ holder=" . preg_quote($who, '/') . '$/', $lines[1]);
    }

    /** Settings from the environment and php.ini; a value not listed is refused naming where it came from. */
    public function testSettingsAreReadAndRefusedByName(): void
    {
        $code = 'try { cron_guard(function () {}, "settings"); echo "RAN\n"; } catch (Throwable $e) { echo get_class($e), ": ", $e->getMessage(), "\n"; }';
        self::assertSame("ValueError: \$CRONLOCK_LOG must be 'syslog', 'error_log', 'stderr', 'none' or an absolute file path, 'loud' given\n", Proc::run($code, [], ['CRONLOCK_LOG' => 'loud'])->stdout());
        self::assertSame("ValueError: \$CRONLOCK_RECORD must be 'off', 'skips' or 'runs', 'all' given\n", Proc::run($code, [], ['CRONLOCK_RECORD' => 'all'])->stdout());
        $p = Proc::run($code, [], ['CRONLOCK_LOG' => 'stderr', 'CRONLOCK_RECORD' => 'runs', 'CRONLOCK_RECORD_FORMAT' => 'json']);
        self::assertSame("RAN\n", $p->stdout());
        self::assertStringStartsWith('{"time":"', $p->stderr());
    }
}

<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\Tests\Support\CliTestHelpers;
use CronLock\Tests\Support\DatabaseServer;
use CronLock\Tests\Support\FileTestHelpers;
use PHPUnit\Framework\TestCase;

/**
 * `cronlock status --database` against MariaDB (with MariaDB's
 * metadata_lock_info plugin, with performance_schema's mdl instrument, and
 * with neither: the process list) and PostgreSQL servers of our own: held,
 * free, stuck and waiting locks taken by CronLock\Database (`cronlock run
 * --database`) and by plain SQL sessions, names mapped back with --name,
 * and a password that is never printed.
 */
final class CliStatusDatabaseTest extends TestCase
{
    use CliTestHelpers;
    use FileTestHelpers;

    /** @var array<string, DatabaseServer> */
    private static array $servers = [];
    private string $dir;

    public static function tearDownAfterClass(): void
    {
        foreach (self::$servers as $server) {
            $server->stop();
        }
        self::$servers = [];
        parent::tearDownAfterClass();
    }

    protected function setUp(): void
    {
        parent::setUp();
        $this->dir = $this->makeTempDir('cli-db');
        putenv('CRONLOCK_TEST_DB_PASSWORD=' . DatabaseServer::PASSWORD);
    }

    protected function tearDown(): void
    {
        touch("{$this->dir}/stop");
        putenv('CRONLOCK_TEST_DB_PASSWORD');
        putenv('CRONLOCK_TEST_DB');
        $this->reapCommands();
        $this->removeTempDirs();
        parent::tearDown();
    }

    /** @return iterable<string, array{0: string, 1: list<string>, 2: string}> */
    public static function servers(): iterable
    {
        yield 'MariaDB, metadata_lock_info' => ['mysql', ['--plugin-load-add=metadata_lock_info'], 'from information_schema.METADATA_LOCK_INFO'];
        yield 'MariaDB, performance_schema' => ['mysql', ['--performance-schema=ON', '--performance-schema-instrument=wait/lock/metadata/sql/mdl=ON'], 'from performance_schema.metadata_locks'];
        yield 'MariaDB, process list only' => ['mysql', [], 'from the process list and IS_USED_LOCK()'];
        yield 'PostgreSQL' => ['pgsql', [], 'from pg_locks and pg_stat_activity'];
    }

    private static function server(string $kind, array $args): DatabaseServer
    {
        $why = DatabaseServer::available($kind);
        if ($why !== null) {
            self::markTestSkipped($why);
        }
        $id = $kind . implode(' ', $args);
        if (!isset(self::$servers[$id])) {
            self::$servers[$id] = DatabaseServer::start($kind, $args);
            if (in_array('--performance-schema=ON', $args, true)) {
                // what a monitoring login needs to read performance_schema
                self::$servers[$id]->adminPdo('')->exec("GRANT SELECT ON performance_schema.* TO 'cron'@'%'");
            }
        }
        return self::$servers[$id];
    }

    /** The SQL that takes (or, with $timeout, waits for) $name the way CronLock\Database names it on the server. */
    private static function lockSql(string $kind, string $name, int $timeout): string
    {
        if ($kind === 'mysql') {
            $server = strlen($name) <= 64 && preg_match('/\A[\x20-\x7e]*\z/', $name) && strtolower($name) === $name ? $name : 'cronlock:' . sha1($name);
            return sprintf("SELECT GET_LOCK('%s', %d)", $server, $timeout);
        }
        $key = sprintf("('x' || left(md5('%s'), 16))::bit(64)::bigint", $name);
        return $timeout === 0 ? "SELECT pg_try_advisory_lock($key)" : "SELECT pg_advisory_lock($key)";
    }

    /** A plain PDO session running $sql and then idling until tearDown; returns its pid once $sql returned (or, for a waiter, was sent). */
    private function session(DatabaseServer $db, string $sql, bool $waits = false): int
    {
        $ready = "{$this->dir}/ready-" . bin2hex(random_bytes(4));
        $h = $this->startPhp('polyfill', '$pdo = new PDO($argv[1], "cron", getenv("CRONLOCK_TEST_DB_PASSWORD"), [PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION]);
            if ($argv[4] === "wait") { touch($argv[2]); }
            $got = $pdo->query($argv[5])->fetchColumn();
            if ($argv[4] !== "wait" && !in_array($got, [1, "1", true, "t"], true)) { fwrite(STDERR, "not taken: " . var_export($got, true)); exit(2); }
            touch($argv[2]); while (!file_exists($argv[3])) { usleep(10000); }',
            [$db->dsn(), $ready, "{$this->dir}/stop", $waits ? 'wait' : 'hold', $sql]);
        self::waitUntil(fn () => file_exists($ready) || $this->commandExitCode($h) !== null, "a session to run $sql");
        self::assertNull($this->commandExitCode($h), "the session runs $sql");
        return $this->commandPid($h);
    }

    private static function json(string $out): array
    {
        $doc = json_decode($out, true, 512, JSON_THROW_ON_ERROR);
        self::assertSame('cronlock-status/1', $doc['schema']);
        $byName = [];
        foreach ($doc['locks'] as $lock) {
            $byName[$lock['name']] = $lock;
        }
        $doc['locks'] = $byName;
        return $doc;
    }

    /** @dataProvider servers */
    public function testHeldStuckAndWaitingLocks(string $kind, array $serverArgs, string $from): void
    {
        $db = self::server($kind, $serverArgs);
        $viaRun = self::extensionBuilt();
        if ($viaRun) {
            // CronLock\Database through `cronlock run`, the DSN and password from the environment
            putenv('CRONLOCK_TEST_DB=' . $db->dsn());
            $started = "{$this->dir}/run-started";
            $run = $this->startCronlock(['run', '--database-env', 'CRONLOCK_TEST_DB', '--user', 'cron', '--password-env', 'CRONLOCK_TEST_DB_PASSWORD',
                '--name', 'sync-orders', '--', 'sh', '-c', sprintf('touch %s; s=%s; while [ ! -e "$s" ] && [ -d "${s%%/*}" ]; do sleep 0.02; done', escapeshellarg($started), escapeshellarg("{$this->dir}/stop"))], 'extension');
            self::waitUntil(fn () => file_exists($started) || $this->commandExitCode($run) !== null, 'cronlock run to hold sync-orders');
            self::assertNull($this->commandExitCode($run), 'cronlock run holds sync-orders');
            $runPid = $this->commandPid($run);
        } else {
            $this->session($db, self::lockSql($kind, 'sync-orders', 0));
        }
        $this->session($db, self::lockSql($kind, 'Nightly Report', 0));
        $this->session($db, self::lockSql($kind, 'sync-orders', 60), true);
        $this->session($db, self::lockSql($kind, 'sync-orders', 60), true);
        $dsn = $db->dsn() . ';user=cron;password=' . DatabaseServer::PASSWORD;
        putenv("CRONLOCK_TEST_DB=$dsn");
        $title = ($kind === 'mysql' ? 'MySQL/MariaDB' : 'PostgreSQL') . ' at ' . $db->dsn() . ';user=cron;password=***';
        self::waitUntil(function () use ($title) {
            [, $out] = $this->cronlock(['status', '--database-env', 'CRONLOCK_TEST_DB', '--name', 'sync-orders', '--name', 'Nightly Report']);
            return (self::statusTable($out, $title)['sync-orders']['WAITING'] ?? '') === '2';
        }, 'both waiters to show', 20.0);
        sleep(2); // held for 2 s and more: stuck with --stale-after 1s

        $args = ['status', '--database-env', 'CRONLOCK_TEST_DB', '--name', 'sync-orders', '--name', 'Nightly Report'];
        [$code, $out, $err] = $this->cronlock($args);
        self::assertSame(0, $code, $err);
        self::assertStringNotContainsString(DatabaseServer::PASSWORD, $out . $err);
        self::assertStringStartsWith("$title\n  $from", $out);
        $rows = self::statusTable($out, $title);
        self::assertSame(['Nightly Report', 'sync-orders'], array_keys($rows), "names mapped back with --name:\n$out");
        foreach ($rows as $name => $row) {
            self::assertSame('held', $row['STATE'], "$name:\n$out");
            self::assertMatchesRegularExpression($kind === 'mysql' ? '/^MySQL connection \d+$/' : '/^PostgreSQL backend \d+$/', $row['CONNECTION']);
            self::assertStringStartsWith('cron@127.0.0.1:', $row['CLIENT']);
            self::assertMatchesRegularExpression('/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\**$/', $row['SINCE']);
        }
        self::assertSame(['2', '0'], [$rows['sync-orders']['WAITING'], $rows['Nightly Report']['WAITING']]);
        if ($kind === 'pgsql' && $viaRun) {
            self::assertStringContainsString("(cronlock pid $runPid on " . gethostname() . ')', $rows['sync-orders']['CLIENT'], "cronlock's own connection names its process");
        }

        [$code, $out] = $this->cronlock(array_merge($args, ['--json', '--stale-after', '1s']));
        self::assertSame(1, $code, "held 2 s: stuck\n$out");
        $doc = self::json($out);
        self::assertStringNotContainsString(DatabaseServer::PASSWORD, $out);
        $lock = $doc['locks']['sync-orders'];
        self::assertSame([$kind, $title, 'held', true, 2], [$lock['backend'], $lock['source'], $lock['state'], $lock['stuck'], $lock['waiters']]);
        self::assertGreaterThanOrEqual(2, $lock['held_for']);
        $expectedSource = ['mysql' => [$from === 'from information_schema.METADATA_LOCK_INFO' ? 'server' : 'last statement'], 'pgsql' => ['lock statement', 'session start']][$kind];
        self::assertContains($lock['since_source'], $expectedSource);
        if ($kind === 'pgsql' && $viaRun) {
            self::assertSame([$runPid, gethostname(), true], [$lock['pid'], $lock['host'], $lock['pid_alive']]);
        }
        [$code] = $this->cronlock(array_merge($args, ['--stale-after', '1h']));
        self::assertSame(0, $code);

        // without --name: the server's own names
        [, $out] = $this->cronlock(['status', '--database-env', 'CRONLOCK_TEST_DB']);
        $names = array_keys(self::statusTable($out, $title));
        $expected = $kind === 'mysql' ? ['cronlock:' . sha1('Nightly Report'), 'sync-orders']
            : ['key ' . unpack('J', hex2bin(substr(md5('Nightly Report'), 0, 16)))[1], 'key ' . unpack('J', hex2bin(substr(md5('sync-orders'), 0, 16)))[1]];
        sort($expected);
        if ($from === 'from the process list and IS_USED_LOCK()') {
            $expected = ['sync-orders']; // only a waited-for name shows without a lock view
            // and the note says so: an operator reading "(no locks)" took a held lock for free
            self::assertStringContainsString('a lock nobody waits for is listed only when named with --name', $out);
        }
        self::assertSame($expected, $names, $out);
    }

    /**
     * Issue 19: waiters that are CronLock\Database objects of the extension
     * count as WAITING, one on a connection of its own (its wait statement is
     * prepared on the server from the second slice on: MariaDB's process list
     * then shows the statement's text only, never a parameter) and one on the
     * PDO given (emulated statements). Before the fix MariaDB showed 1 of 2.
     *
     * @dataProvider servers
     */
    public function testWaitingCronlockProcessesAreCounted(string $kind, array $serverArgs, string $from): void
    {
        if (!self::extensionBuilt()) {
            self::markTestSkipped('CronLock\Database is the extension\'s; no build at ' . self::extensionPath());
        }
        $db = self::server($kind, $serverArgs);
        $this->session($db, self::lockSql($kind, 'Nightly Report', 0));
        foreach (['dsn', 'pdo'] as $connection) {
            $ready = "{$this->dir}/waits-$connection";
            $h = $this->startPhp('extension', '$options = ["user" => "cron", "password" => getenv("CRONLOCK_TEST_DB_PASSWORD")];
                $lock = $argv[3] === "dsn" ? new CronLock\Database($argv[1], $argv[2], $options)
                    : new CronLock\Database(new PDO($argv[1], $options["user"], $options["password"]), $argv[2]);
                touch($argv[4]);
                $lock->acquire(60);', [$db->dsn(), 'Nightly Report', $connection, $ready]);
            self::waitUntil(fn () => file_exists($ready) || $this->commandExitCode($h) !== null, "the $connection waiter to start");
            self::assertNull($this->commandExitCode($h), "the $connection waiter waits");
        }
        putenv('CRONLOCK_TEST_DB=' . $db->dsn() . ';user=cron;password=' . DatabaseServer::PASSWORD);
        $title = ($kind === 'mysql' ? 'MySQL/MariaDB' : 'PostgreSQL') . ' at ' . $db->dsn() . ';user=cron;password=***';
        $out = '';
        self::waitUntil(function () use ($title, &$out) {
            [, $out] = $this->cronlock(['status', '--database-env', 'CRONLOCK_TEST_DB', '--name', 'Nightly Report']);
            return (self::statusTable($out, $title)['Nightly Report']['WAITING'] ?? '') === '2';
        }, 'both cronlock waiters to show', 20.0);
        self::assertStringStartsWith("$title\n  $from", $out);
        self::assertSame('held', self::statusTable($out, $title)['Nightly Report']['STATE'], $out);
    }

    public function testABusyDatabaseLockSkipsACronlockRun(): void
    {
        if (!self::extensionBuilt()) {
            self::markTestSkipped('CronLock\Database is the extension\'s; no build at ' . self::extensionPath());
        }
        $db = self::server('pgsql', []);
        $this->session($db, self::lockSql('pgsql', 'report', 0));
        putenv('CRONLOCK_TEST_DB=' . $db->dsn());
        $ran = "{$this->dir}/ran";
        [$code, , $err] = $this->cronlock(['run', '--database-env', 'CRONLOCK_TEST_DB', '--user', 'cron', '--password-env', 'CRONLOCK_TEST_DB_PASSWORD',
            '--name', 'report', '--on-busy', '3', '--', 'touch', $ran], 'extension');
        self::assertSame(3, $code, $err);
        self::assertFileDoesNotExist($ran);
        self::assertSame('', $err, 'a busy lock is skipped quietly');
    }

    /** @return array<string, array{string}> */
    public static function kinds(): array
    {
        return ['MariaDB' => ['mysql'], 'PostgreSQL' => ['pgsql']];
    }

    /**
     * A server that is stopped (kill -STOP, a hung host) still completes the
     * TCP connect in the kernel: status must give up within seconds and exit 2,
     * as a monitoring check needs, not wait for the server's answer forever.
     *
     * @dataProvider kinds
     */
    public function testAFrozenServerIsExitTwoWithinSeconds(string $kind): void
    {
        $why = DatabaseServer::available($kind);
        if ($why !== null) {
            self::markTestSkipped($why);
        }
        $db = DatabaseServer::start($kind);
        $pid = (int) $db->pid();
        try {
            posix_kill($pid, SIGSTOP);
            putenv('CRONLOCK_TEST_DB_PASSWORD=' . DatabaseServer::PASSWORD);
            [$code, $out, $err] = $this->cronlock(['status', '--database', $db->dsn(), '--user', 'cron', '--password-env', 'CRONLOCK_TEST_DB_PASSWORD'], 'suite', [], [], 25.0);
            self::assertSame(2, $code, $out . $err);
            self::assertStringContainsString('not read: ', $out);
            self::assertStringNotContainsString(DatabaseServer::PASSWORD, $out . $err);
        } finally {
            posix_kill($pid, SIGCONT);
            $db->stop();
        }
    }

    public function testARefusedLoginIsSaidWithoutThePasswordAndExitsTwo(): void
    {
        $db = self::server('pgsql', []);
        putenv('CRONLOCK_TEST_DB_PASSWORD=wrong-' . DatabaseServer::PASSWORD);
        [$code, $out, $err] = $this->cronlock(['status', '--database', $db->dsn(), '--user', 'cron', '--password-env', 'CRONLOCK_TEST_DB_PASSWORD']);
        self::assertSame(2, $code);
        self::assertStringContainsString('password authentication failed', $out . $err);
        self::assertStringNotContainsString(DatabaseServer::PASSWORD, $out . $err);
    }
}

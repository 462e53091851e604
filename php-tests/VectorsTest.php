<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\Database;
use CronLock\File;
use CronLock\LockException;
use CronLock\Tests\Support\DatabaseServer;
use CronLock\Tests\Support\FileTestHelpers;
use CronLock\Tests\Support\WebAssembly;
use PHPUnit\Framework\TestCase;

/**
 * tests/vectors.json, the formats the extension and cronlock/polyfill must
 * agree on, through each implementation's PHP API (cargo test checks the
 * same file against the extension's Rust functions, tests/vectors.rs):
 * holder records a File lock takes for its own or leaves alone, the lock
 * names cron_guard() gives main scripts, how messages show names and paths,
 * how CronLock\Database names a lock on each server, and the Redis DSNs
 * accepted and refused with their messages.
 */
final class VectorsTest extends TestCase
{
    use FileTestHelpers;

    /** @var array<string, mixed>|null */
    private static ?array $vectors = null;

    protected function tearDown(): void
    {
        $this->reapCommands();
        $this->removeTempDirs();
        parent::tearDown();
    }

    /** @return array<string, mixed> */
    private static function vectors(): array
    {
        if (self::$vectors === null) {
            $json = file_get_contents(dirname(__DIR__) . '/tests/vectors.json');
            self::$vectors = json_decode((string) $json, true, 512, JSON_THROW_ON_ERROR);
        }
        return self::$vectors;
    }

    /** A record's file content: 'text' padded to 127 bytes and a newline, or 'exact'. */
    private static function recordBytes(array $vector): string
    {
        if (isset($vector['exact'])) {
            return $vector['exact'];
        }
        self::assertLessThan(128, strlen($vector['text']));
        return str_pad($vector['text'], 127, ' ') . "\n";
    }

    public function testAFileLockRewritesExactlyTheAcceptedHolderRecords(): void
    {
        $dir = $this->makeTempDir('vectors-records');
        $records = self::vectors()['holder_records'];
        $cases = [];
        foreach ($records['accepted'] as $vector) {
            $cases[] = [$vector, true];
        }
        foreach ($records['refused'] as $vector) {
            $cases[] = [$vector, false];
        }
        foreach ($cases as $i => [$vector, $accepted]) {
            $path = "$dir/record-$i.lock";
            $content = self::recordBytes($vector);
            file_put_contents($path, $content);
            $lock = new File($path);
            self::assertTrue($lock->acquire(0));
            $now = (string) file_get_contents($path);
            self::assertTrue($lock->release());
            $what = json_encode($vector, JSON_UNESCAPED_UNICODE);
            if ($accepted) {
                self::assertStringStartsWith('cronlock pid=' . getmypid() . ' host=', $now, "$what is a holder record: rewritten with ours");
                self::assertSame(128, strlen($now), $what);
            } else {
                self::assertSame($content, $now, "$what is someone's data: never written over");
            }
        }
    }

    public function testMessagesShowNamesAndPathsEscapedAndCut(): void
    {
        foreach (self::vectors()['escapes'] as $vector) {
            try {
                new File($vector['text']);
                self::fail('a path in a missing directory must be refused');
            } catch (LockException $e) {
                self::assertStringStartsWith('cannot open lock file ' . $vector['shown'] . ': ', $e->getMessage(), json_encode($vector, JSON_UNESCAPED_UNICODE));
            }
        }
    }

    public function testRedisDsnsAreAcceptedOrRefusedWithTheSameMessages(): void
    {
        if (!extension_loaded('cronlock') && !extension_loaded('redis') && !class_exists('Predis\Client')) {
            self::markTestSkipped('cronlock/polyfill makes a CronLock\Redis only with phpredis or predis');
        }
        $dsns = self::vectors()['redis_dsns'];
        foreach ($dsns['accepted'] as $dsn) {
            self::assertSame('k', (new \CronLock\Redis($dsn, 'k', 60.0))->key(), $dsn);
        }
        foreach ($dsns['refused'] as $vector) {
            try {
                new \CronLock\Redis($vector['dsn'], 'k', 60.0);
                self::fail(json_encode($vector) . ' must be refused');
            } catch (\Throwable $e) {
                self::assertSame($vector['error'] . ': ' . $vector['message'], get_class($e) . ': ' . $e->getMessage(), json_encode($vector));
            }
        }
    }

    /**
     * The real paths of the vectors are under /srv/cronlock-vectors: the
     * scripts are put there in a private mount namespace, on a tmpfs of
     * their own over /srv, so nothing of the machine's /srv is seen or left.
     */
    public function testCronGuardNamesAScriptsLockAfterItsRealPath(): void
    {
        WebAssembly::skip('no proc_open() of a shell');
        if (posix_geteuid() !== 0 || !is_executable('/usr/bin/unshare') || !is_dir('/srv')) {
            self::markTestSkipped('needs root, unshare(1) and /srv to mount a private tmpfs there');
        }
        $dir = $this->makeTempDir('vectors-scripts');
        $locks = "$dir/locks";
        mkdir($locks, 0700);
        $script = "$dir/job.php";
        file_put_contents($script, "<?php\ncron_guard(function (CronLock\\Guard \$guard) { echo \$guard->lock()->path(), \"\\n\"; });\n");
        $php = implode(' ', array_map('escapeshellarg', self::phpCommand()));
        $shell = 'set -e; mount -t tmpfs -o size=1m cronlock-vectors /srv';
        $expected = [];
        foreach (self::vectors()['script_lock_names'] as $vector) {
            $path = escapeshellarg($vector['path']);
            $shell .= "; mkdir -p \"\$(dirname $path)\"; cp " . escapeshellarg($script) . " $path; $php $path";
            $expected[] = "$locks/{$vector['name']}.lock";
        }
        $env = array_filter(getenv(), static fn ($v) => is_string($v));
        $env['CRONLOCK_LOCK_DIR'] = $locks;
        [$code, $out, $err] = $this->runCommand(['unshare', '--mount', '--propagation', 'private', 'sh', '-c', $shell], 60.0, $env);
        self::assertSame(0, $code, $err);
        self::assertSame($expected, explode("\n", trim($out)), $err);
    }

    /**
     * @group extension-only
     * CronLock\Database needs the extension (cronlock/polyfill has none).
     * @dataProvider databaseKinds
     */
    public function testDatabaseNamesMapToTheServersLocksAsDocumented(string $kind): void
    {
        $missing = DatabaseServer::available($kind);
        if ($missing !== null) {
            self::markTestSkipped($missing);
        }
        $server = DatabaseServer::start($kind);
        try {
            $admin = $server->adminPdo();
            foreach (self::vectors()['database_names'] as $vector) {
                $lock = new Database($server->dsn(), $vector['name'], ['user' => $server->user(), 'password' => $server->password()]);
                self::assertTrue($lock->acquire(0));
                $what = json_encode($vector, JSON_UNESCAPED_UNICODE);
                if ($kind === 'mysql') {
                    $used = $admin->prepare('SELECT IS_USED_LOCK(?)');
                    $used->execute([$vector['mysql']]);
                    self::assertNotNull($used->fetchColumn(), "$what: GET_LOCK name");
                } else {
                    $key = $vector['postgres'];
                    $held = $admin->prepare("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 AND classid = ?::oid AND objid = ?::oid");
                    $held->execute([($key >> 32) & 0xffffffff, $key & 0xffffffff]);
                    self::assertSame(1, (int) $held->fetchColumn(), "$what: advisory key");
                }
                self::assertTrue($lock->release());
            }
        } finally {
            $server->stop();
        }
    }

    /** @return iterable<string, array{string}> */
    public static function databaseKinds(): iterable
    {
        yield 'MariaDB' => ['mysql'];
        yield 'PostgreSQL' => ['pgsql'];
    }
}

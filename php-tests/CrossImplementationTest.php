<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\Tests\Support\FileTestHelpers;
use CronLock\Tests\Support\MountNamespace;
use CronLock\Tests\Support\Proc;
use CronLock\Tests\Support\RedisServer;
use CronLock\Tests\Support\RedisTestHelpers;
use PHPUnit\Framework\TestCase;

/**
 * The extension and cronlock/polyfill exclude each other: processes of both
 * contend for one File path and one Redis key, and the counter they
 * increment under the lock must come out exact. Needs the built extension
 * ($CRONLOCK_EXT, exported by scripts/test) next to the polyfill, so it runs
 * in the extension's run and is skipped in the polyfill's.
 */
final class CrossImplementationTest extends TestCase
{
    use FileTestHelpers;
    use RedisTestHelpers;

    /** @var array{extension: array<string, string|false>, polyfill: array<string, string|false>} */
    private array $envs;

    protected function setUp(): void
    {
        parent::setUp();
        $ext = (string) getenv('CRONLOCK_EXT');
        if ($ext === '' || !is_file($ext)) {
            self::markTestSkipped('needs the built extension in $CRONLOCK_EXT (scripts/test sets it for the extension run)');
        }
        $extDir = $this->makeTempDir('ini-ext');
        file_put_contents("$extDir/cronlock.ini", "extension=$ext\n");
        $polyDir = $this->makeTempDir('ini-poly');
        file_put_contents("$polyDir/cronlock-polyfill.ini", 'auto_prepend_file=' . dirname(__DIR__) . "/polyfill/bootstrap.php\n");
        // ':' first keeps PHP's own conf.d (pcntl, posix, redis).
        $this->envs = [
            'extension' => ['PHP_INI_SCAN_DIR' => ":$extDir", 'CRONLOCK_EXT' => $ext],
            'polyfill' => ['PHP_INI_SCAN_DIR' => ":$polyDir", 'CRONLOCK_EXT' => false],
        ];
    }

    protected function tearDown(): void
    {
        $this->reapCommands();
        $this->removeTempDirs();
        parent::tearDown();
    }

    /** @return list<Proc> 4 children of each implementation, each printing READY, then WHO=<implementation> */
    private function contenders(string $lockCode, string $counter, string $go): array
    {
        $code = '$lock = ' . $lockCode . ";\n" . <<<'PHP'
            [$counter, $go] = [$argv[1], $argv[2]];
            echo "READY\n";
            while (!file_exists($go)) { usleep(500); }
            for ($i = 0; $i < 50; $i++) {
                if (!$lock->acquire(-1)) { echo "ACQUIRE FAILED\n"; exit(3); }
                $n = (int) file_get_contents($counter);
                usleep(200); // widen the window a missing exclusion would lose updates in
                file_put_contents($counter, (string) ($n + 1));
                if (!$lock->release()) { echo "RELEASE FAILED\n"; exit(4); }
            }
            echo "WHO=", extension_loaded('cronlock') ? 'extension' : 'polyfill', "\n";
            PHP;
        $procs = [];
        foreach (['extension', 'polyfill', 'extension', 'polyfill', 'extension', 'polyfill', 'extension', 'polyfill'] as $impl) {
            $procs[] = Proc::start($code, [$counter, $go], $this->envs[$impl]);
        }
        foreach ($procs as $p) {
            $p->waitForLine('READY', 15.0, 'stdout');
        }
        return $procs;
    }

    private function assertExactCount(array $procs, string $counter, string $go): void
    {
        touch($go);
        $who = [];
        foreach ($procs as $p) {
            self::assertSame(0, $p->wait(90.0), $p->stdout() . $p->stderr());
            $who[] = trim(substr($p->waitForLine('WHO=', 1.0, 'stdout'), 4));
        }
        sort($who);
        self::assertSame(['extension', 'extension', 'extension', 'extension', 'polyfill', 'polyfill', 'polyfill', 'polyfill'], $who);
        self::assertSame('400', file_get_contents($counter), 'every increment happened under the one lock');
    }

    public function testExtensionAndPolyfillProcessesShareOneFileLockExactly(): void
    {
        $dir = $this->makeTempDir('cross-file');
        $lockCode = 'new \CronLock\File(' . var_export("$dir/job.lock", true) . ')';
        file_put_contents("$dir/counter", '0');
        $this->assertExactCount($this->contenders($lockCode, "$dir/counter", "$dir/go"), "$dir/counter", "$dir/go");
    }

    public function testExtensionAndPolyfillProcessesShareOneRedisKeyExactly(): void
    {
        RedisServer::requirePolyfillClient(); // the polyfill side needs phpredis or predis
        $dir = $this->makeTempDir('cross-redis');
        $key = 'cross-' . bin2hex(random_bytes(4));
        file_put_contents("$dir/counter", '0');
        // an existing counter counts on by one (a new one would start at the server's clock)
        self::assertSame('OK', (string) self::raw('SET', "$key:fence", '1000'));
        $procs = $this->contenders(self::lockCode(self::$server->dsn(), $key, 5.0), "$dir/counter", "$dir/go");
        $this->assertExactCount($procs, "$dir/counter", "$dir/go");
        self::assertSame('1400', (string) self::raw('GET', "$key:fence"), 'both INCR the one fencing counter');
        self::assertGreaterThan(0, self::raw('PTTL', "$key:fence"), 'and give it its TTL');
    }

    /** @return iterable<string, array{string, string}> holder implementation, waiter implementation */
    public static function pairs(): iterable
    {
        yield 'extension holds, polyfill waits' => ['extension', 'polyfill'];
        yield 'polyfill holds, extension waits' => ['polyfill', 'extension'];
    }

    /** @dataProvider pairs */
    public function testEachSeesTheOthersHoldAndHolderRecord(string $holderImpl, string $waiterImpl): void
    {
        RedisServer::requirePolyfillClient(); // the polyfill side needs phpredis or predis
        $dir = $this->makeTempDir('cross-busy');
        $path = "$dir/job.lock";
        $key = 'cross-busy-' . bin2hex(random_bytes(4));
        $holder = Proc::start(sprintf(<<<'PHP'
            $f = new \CronLock\File(%s);
            $r = new \CronLock\Redis(%s, %s, 30.0);
            if (!$f->acquire(0) || !$r->acquire(0)) { echo "BUSY\n"; exit(2); }
            echo "HELD ", getmypid(), "\n";
            while (!file_exists($argv[1])) { usleep(1000); }
            echo "RELEASED ", var_export($f->release() && $r->release(), true), "\n";
            PHP, var_export($path, true), var_export(self::$server->dsn(), true), var_export($key, true)), ["$dir/stop"], $this->envs[$holderImpl]);
        $pid = (int) substr($holder->waitForLine('HELD', 15.0, 'stdout'), 5);

        $probe = sprintf(<<<'PHP'
            $f = new \CronLock\File(%s);
            $r = new \CronLock\Redis(%s, %s, 30.0);
            $holder = $f->holderPid(); // before we take it ourselves
            $who = $f->holder();
            printf("file=%%s redis=%%s holder=%%s who=%%s\n", var_export($f->acquire(0.2), true), var_export($r->acquire(0.2), true), var_export($holder, true), var_export($who, true));
            PHP, var_export($path, true), var_export(self::$server->dsn(), true), var_export($key, true));
        $busy = Proc::run($probe, [], $this->envs[$waiterImpl]);
        $record = (string) file_get_contents($path);
        self::assertStringStartsWith("cronlock pid=$pid host=", $record, 'the same 128-byte holder record');
        self::assertSame(128, filesize($path));
        self::assertSame(1, preg_match('/ host=(\S+) since=(\S+)/', $record, $m));
        self::assertSame("file=false redis=false holder=$pid who='pid $pid on {$m[1]} since {$m[2]}'\n", $busy->stdout(), $busy->stderr());

        touch("$dir/stop");
        self::assertStringContainsString('RELEASED true', $holder->waitForLine('RELEASED', 10.0, 'stdout'));
        self::assertSame(0, $holder->wait());
        self::assertMatchesRegularExpression('/\Acronlock free since=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ {87}\n\z/', (string) file_get_contents($path), 'the same free record once released');
        $free = Proc::run($probe, [], $this->envs[$waiterImpl]);
        self::assertSame("file=true redis=true holder=NULL who=NULL\n", $free->stdout(), $free->stderr());
    }

    /**
     * A holder recorded in the key as a process of this host that no longer runs: both say
     * so in the same words, with when the key expires (rounded up to whole seconds, which
     * is all that may differ between the two probes: time passes), and neither deletes it.
     */
    public function testBothSayInTheSameWordsThatTheHolderIsNotRunningHere(): void
    {
        RedisServer::requirePolyfillClient(); // the polyfill side needs phpredis or predis
        $key = 'cross-dead-' . bin2hex(random_bytes(4));
        $gone = Proc::run('echo getmypid(), "\n";', [], $this->envs['polyfill']);
        $pid = (int) $gone->stdout();
        self::raw('SET', $key, bin2hex(random_bytes(16)) . ":$pid@" . gethostname(), 'PX', '100000');
        $probe = "ini_set('error_log', '');\n" . sprintf('var_dump(cron_guard(function () { echo "RAN\n"; }, new \CronLock\Redis(%s, %s)));',
            var_export(self::$server->dsn(), true), var_export($key, true));
        $lines = [];
        $before = self::raw('PTTL', $key);
        foreach (['extension', 'polyfill'] as $impl) {
            $p = Proc::run($probe, [], $this->envs[$impl]);
            self::assertSame("NULL\n", $p->stdout(), $impl . ': ' . $p->stderr());
            // how long the try took is each run's own; the rest is the same words
            $lines[$impl] = preg_replace('/; waited [0-9]+\.[0-9] s;/', '; waited 0.0 s;', $p->stderr());
        }
        $after = self::raw('PTTL', $key);
        $line = sprintf("cron_guard: lock redis key '%s' at 127.0.0.1:%d is held by pid %d on %s (not running on this host; the key expires in %%d s); waited 0.0 s; skipping this run\n",
            $key, self::$server->port(), $pid, gethostname());
        foreach ($lines as $impl => $said) {
            $seconds = sscanf($said, $line);
            self::assertNotNull($seconds[0] ?? null, "$impl said: $said");
            self::assertSame(sprintf($line, $seconds[0]), $said, $impl);
            self::assertGreaterThanOrEqual(intdiv($after + 999, 1000), $seconds[0]);
            self::assertLessThanOrEqual(intdiv($before + 999, 1000), $seconds[0]);
        }
        self::assertSame(1, self::raw('EXISTS', $key), 'never deleted on that guess');
    }

    /**
     * The same refusals in the same words: each case's exception (class and
     * message) or busy line, printed by an extension process and by
     * polyfill processes (phpredis, and predis where it is installed). What
     * userland cannot match is in the README and not here: Database, Redlock,
     * sentinel and cluster DSNs (the polyfill refuses them).
     */
    /**
     * The null lock of a script whose name is not ASCII: both implementations name the
     * same lock file (one '_' per byte), so they exclude each other on it.
     */
    public function testTheNullLockOfANonAsciiScriptNameIsOneFileForBoth(): void
    {
        $scripts = $this->makeTempDir('scripts');
        $lockDir = $this->makeTempDir('lock-dir');
        $script = "$scripts/sync órders.php";
        file_put_contents($script, <<<'PHP'
            <?php
            cron_guard(function (\CronLock\Guard $g) { echo "PATH ", $g->lock()->path(), "\n"; });
            PHP);
        $paths = [];
        foreach (['extension', 'polyfill'] as $impl) {
            $p = Proc::startScript($script, [], $this->envs[$impl] + ['CRONLOCK_LOCK_DIR' => $lockDir]);
            self::assertSame(0, $p->wait(), $p->stdout() . $p->stderr());
            $paths[$impl] = substr($p->waitForLine('PATH', 1.0, 'stdout'), 5);
        }
        self::assertSame($paths['extension'], $paths['polyfill']);
        self::assertStringStartsWith("$lockDir/sync___rders.php.", $paths['polyfill']);
    }

    /**
     * PHP runs an auto_prepend_file before the main script: the null lock is named after
     * the main script all the same (else every script of such a host shared one lock and
     * all but one cron job were skipped), by both implementations.
     */
    public function testTheNullLockIsNamedAfterTheMainScriptNotTheAutoPrependFile(): void
    {
        $scripts = $this->makeTempDir('scripts');
        $lockDir = $this->makeTempDir('lock-dir');
        file_put_contents("$scripts/prepend.php", sprintf(
            "<?php if (!extension_loaded('cronlock')) { require %s; }\n",
            var_export(dirname(__DIR__) . '/polyfill/bootstrap.php', true)
        ));
        file_put_contents("$scripts/sync_orders.php", <<<'PHP'
            <?php
            cron_guard(function (\CronLock\Guard $g) { echo "PATH ", $g->lock()->path(), "\n"; });
            PHP);
        foreach (['extension', 'polyfill'] as $impl) {
            $env = array_filter(array_merge(getenv(), $this->envs[$impl], ['CRONLOCK_LOCK_DIR' => $lockDir]), static fn ($v) => $v !== false);
            [$code, $out, $err] = $this->runCommand([PHP_BINARY, '-d', "auto_prepend_file=$scripts/prepend.php", "$scripts/sync_orders.php"], 20.0, $env);
            self::assertSame(0, $code, "$impl: $out $err");
            self::assertStringStartsWith("PATH $lockDir/sync_orders.php.", $out, $impl);
        }
    }

    public function testBothRefuseInTheSameWords(): void
    {
        RedisServer::requirePolyfillClient(); // the polyfill side needs phpredis or predis
        $dir = $this->makeTempDir('cross-words');
        $secured = RedisServer::start(['requirepass' => 'RightPW']);
        try {
            mkdir("$dir/dir.lock");
            symlink("$dir/absent", "$dir/link.lock");
            symlink("$dir/dir.lock", "$dir/dirlink.lock");
            posix_mkfifo("$dir/fifo.lock", 0600);
            file_put_contents("$dir/plain", '');
            mkdir("$dir/shared", 0777);
            chmod("$dir/shared", 0777);
            touch("$dir/shared/theirs.lock");
            $root = posix_geteuid() === 0 && chown("$dir/shared/theirs.lock", 65534);
            self::raw('SET', 'cross-words-other', 'abcdef0123456789abcdef0123456789:4242@otherhost', 'PX', '60000');
            self::raw('SET', 'cross-words-foreign', 'not a cronlock token', 'PX', '60000');
            self::raw('DEL', 'cross-words-list');
            self::raw('RPUSH', 'cross-words-list', 'x');

            $code = sprintf(<<<'PHP'
                [$dir, $dsn, $port, $secured] = [%s, %s, %d, %d];
                $log = "$dir/log." . getmypid();
                ini_set('error_log', $log);
                $busy = function ($lock) use ($log) {
                    @unlink($log);
                    $ran = cron_guard(fn () => 'ran', $lock);
                    return ($ran ?? 'skipped') . ': ' . preg_replace('/^\[[^\]]*\] /', '', trim((string) @file_get_contents($log)));
                };
                $cases = [
                    'wrong password' => fn () => (new CronLock\Redis("redis://:WrongPW@127.0.0.1:$secured", 'k', 5.0))->acquire(),
                    'wrong user' => fn () => (new CronLock\Redis("redis://bob:WrongPW@127.0.0.1:$secured", 'k', 5.0))->acquire(),
                    'no password' => fn () => (new CronLock\Redis("redis://127.0.0.1:$secured", 'k', 5.0))->acquire(),
                    'db out of range' => fn () => (new CronLock\Redis("redis://:RightPW@127.0.0.1:$secured/99", 'k', 5.0))->acquire(),
                    'refused' => fn () => (new CronLock\Redis("redis://127.0.0.1:1", 'k', 5.0))->acquire(),
                    'no socket' => fn () => (new CronLock\Redis("unix://$dir/absent.sock", 'k', 5.0))->acquire(),
                    'not a string' => fn () => (new CronLock\Redis($dsn, 'cross-words-list', 5.0))->acquire(),
                    'new Guard' => fn () => new CronLock\Guard(),
                    'symlink' => fn () => (new CronLock\File("$dir/link.lock"))->acquire(),
                    'symlink to a directory' => fn () => (new CronLock\File("$dir/dirlink.lock"))->acquire(),
                    'directory' => fn () => (new CronLock\File("$dir/dir.lock"))->acquire(),
                    'FIFO' => fn () => (new CronLock\File("$dir/fifo.lock"))->acquire(),
                    'under a file' => fn () => (new CronLock\File("$dir/plain/x.lock"))->acquire(),
                    'missing directory' => fn () => (new CronLock\File("$dir/absent/x.lock"))->acquire(),
                    'holderPid of a directory' => fn () => (new CronLock\File("$dir/dir.lock"))->holderPid(),
                    'lock dir is a file' => function () use ($dir) {
                        putenv("CRONLOCK_LOCK_DIR=$dir/plain");
                        ini_set('cronlock.lock_dir', "$dir/plain");
                        return cron_guard(fn () => 'ran', 'job');
                    },
                    'busy, cronlock holder' => fn () => $busy(new CronLock\Redis($dsn, 'cross-words-other', 5.0)),
                    'busy, foreign value' => fn () => $busy(new CronLock\Redis($dsn, 'cross-words-foreign', 5.0)),
                    'once_per on a File' => fn () => cron_guard(fn () => 'ran', new CronLock\File("$dir/ok.lock"), ['once_per' => 60]),
                    'once_per zero' => fn () => cron_guard(fn () => 'ran', new CronLock\Redis($dsn, 'k', 5.0), ['once_per' => 0]),
                    'serialize' => fn () => serialize(new CronLock\File("$dir/ok.lock")),
                    'key not UTF-8' => fn () => new CronLock\Redis($dsn, "k\xff", 5.0),
                    'name too long' => fn () => (new CronLock\File("$dir/" . str_repeat("a\n", 150) . '.lock'))->acquire(),
                    'path too long' => fn () => (new CronLock\File($dir . str_repeat('/ccccccccc', 500) . '/x.lock'))->acquire(),
                ];
                foreach (["z\u{e4}hler", "sync\n", "it's \"q\" \\", "\xff\xfeab", "\u{1F600}\x7f\t", str_repeat("\u{e9}", 201)] as $i => $name) {
                    $cases["bad name $i"] = fn () => cron_guard(fn () => 'ran', $name);
                }
                if (%s) {
                    $cases['foreign file in a shared directory'] = fn () => (new CronLock\File("$dir/shared/theirs.lock"))->acquire();
                }
                foreach (['http://h', 'redis://', 'redis:///0', 'redis://h:abc', 'redis://h:99999', 'redis://[::1',
                    'redis://h/abc', 'redis://h/0/1', 'redis://h/-1', 'unix://', 'unix://relative', 'rediss://h#bogus', '',
                    'redis://:pw@', 'redis://a b', 'valkey://h:1', 'valkeys://h:1', 'redis+unix://', 'redis://h:0',
                    'redis://h:1/1?db=2', 'redis://h?db=1&db=1', 'redis://h?database=2', 'redis://h?db', 'redis://h?db=x',
                    'redis://h?db=-1', 'redis://h?', 'redis://h:/0', 'redis://[::1]:', 'redis://h#insecure', 'unix:///s#x',
                    'unix:///s?db=1&timeout=2', 'rediss://h?db=1#bogus'] as $bad) {
                    $cases["DSN '$bad'"] = fn () => new CronLock\Redis($bad, 'k');
                }
                foreach ($cases as $name => $case) {
                    try {
                        echo "$name => ", json_encode($case()), "\n";
                    } catch (\Throwable $e) {
                        echo "$name => ", get_class($e), ': ', $e->getMessage(), "\n";
                    }
                }
                PHP, var_export($dir, true), var_export(self::$server->dsn(), true), self::$server->port(), $secured->port(), var_export($root, true));

            $said = [];
            foreach ($this->envs + $this->predisEnv() as $impl => $env) {
                $p = Proc::run($code, [], $env);
                self::assertSame(0, $p->exitCode(), "$impl: " . $p->stdout() . $p->stderr());
                // How long a busy acquire took is the machine's load, not the words
                $said[$impl] = (string) preg_replace('/; waited \d+\.\d s;/', '; waited 0.0 s;', $p->stdout());
            }
            $extension = $said['extension'];
            foreach ([
                "symlink => CronLock\\LockException: cannot open lock file $dir/link.lock: Too many levels of symbolic links",
                "directory => CronLock\\LockException: cannot open lock file $dir/dir.lock: Is a directory",
                "under a file => CronLock\\LockException: cannot open lock file $dir/plain/x.lock: Not a directory",
                'new Guard => Error: Cannot directly construct CronLock\Guard, call cron_guard() instead',
                'wrong password => CronLock\ConnectionException: cannot connect to Redis at 127.0.0.1:' . $secured->port() . " to acquire key 'k': wrong user name or password (or the user is disabled)",
                "busy, cronlock holder => \"skipped: cron_guard: lock redis key 'cross-words-other' at 127.0.0.1:" . self::$server->port() . ' is held by pid 4242 on otherhost; waited 0.0 s; skipping this run"',
            ] as $line) {
                self::assertStringContainsString($line, $extension, 'the extension says so');
            }
            foreach ($said as $impl => $output) {
                self::assertSame($extension, $output, "$impl says it as the extension does");
            }
        } finally {
            $secured->stop();
            self::raw('DEL', 'cross-words-other', 'cross-words-foreign', 'cross-words-list');
        }
    }

    /**
     * @return iterable<string, array{string, array<string, array<string, mixed>>, list<string>, string, array<string, string|false>, string}>
     *         user, the fresh places, hidden top-level directories, a shell command run as root first, the child's environment, the refusal
     */
    public static function lockDirectoryRefusals(): iterable
    {
        $set = 'set CRONLOCK_LOCK_DIR or cronlock.lock_dir to an absolute directory of your own';
        $closedRunLock = ['/run' => ['mode' => 0755], '/run/lock' => ['mode' => 0755, 'readonly' => true], '/tmp' => ['mode' => 01777]];
        yield 'no inodes left in /run/lock' => ['nobody', ['/run' => ['mode' => 0755], '/run/lock' => ['mode' => 01777, 'inodes' => 1]], [], '', [],
            "lock directory /run/lock/cronlock-65534 cannot be created: No space left on device; free space or inodes on the file system of /run/lock, or $set"];
        yield 'root, /run read-only' => ['root', ['/run' => ['mode' => 0755, 'readonly' => true]], [], '', [],
            "lock directory /run/cronlock cannot be created: Read-only file system; this user may not create entries in /run, so $set"];
        yield '/tmp closed to nobody' => ['nobody', ['/tmp' => ['mode' => 0755]] + $closedRunLock, [], '', [],
            "lock directory /tmp/cronlock-65534 cannot be created: Permission denied; this user may not create entries in /tmp, so $set"];
        yield 'no /tmp' => ['nobody', $closedRunLock, ['/tmp'], '', [],
            "lock directory /tmp/cronlock-65534 cannot be created: its parent directory /tmp does not exist; create /tmp or $set"];
        yield 'root, no /run' => ['root', [], ['/run'], '', [],
            "lock directory /run/cronlock cannot be created: its parent directory /run does not exist; create /run or $set"];
        yield "another user's directory" => ['nobody', $closedRunLock, [], 'runuser -u daemon -- mkdir /tmp/cronlock-65534', [],
            "lock directory /tmp/cronlock-65534 is owned by uid 1, not by this process's uid 65534; have its owner or root remove it (cronlock recreates it), or $set"];
        yield 'a file in its place' => ['nobody', $closedRunLock, [], 'runuser -u nobody -- touch /tmp/cronlock-65534', [],
            "lock directory /tmp/cronlock-65534 is not a directory; remove it (cronlock recreates it) or $set"];
        yield 'a symlink in its place' => ['nobody', $closedRunLock, [], 'runuser -u nobody -- ln -s /tmp /tmp/cronlock-65534', [],
            "lock directory /tmp/cronlock-65534 is not a directory; remove it (cronlock recreates it) or $set"];
        yield 'writable by others' => ['nobody', $closedRunLock, [], 'runuser -u nobody -- mkdir -m 777 /tmp/cronlock-65534', [],
            "lock directory /tmp/cronlock-65534 is writable by group or others (mode 0777); chmod 700 it or $set"];
        yield 'an explicit directory that does not exist' => ['nobody', $closedRunLock, [], '', ['CRONLOCK_LOCK_DIR' => '/nonexistent/locks'],
            'lock directory /nonexistent/locks does not exist; create it, or set CRONLOCK_LOCK_DIR or cronlock.lock_dir to an existing absolute directory'];
        yield 'an explicit directory that is a file' => ['nobody', $closedRunLock, [], '', ['CRONLOCK_LOCK_DIR' => '/etc/passwd'],
            'lock directory /etc/passwd is not a directory; set CRONLOCK_LOCK_DIR or cronlock.lock_dir to an existing absolute directory'];
    }

    /**
     * Each cause why cron_guard() cannot use the lock directory gets its own
     * advice, in the same words from both (decision D10), in a private mount
     * namespace with fresh /run, /run/lock and /tmp (or none at all).
     *
     * @dataProvider lockDirectoryRefusals
     * @param array<string, array<string, mixed>> $places
     * @param list<string> $hide
     * @param array<string, string|false> $env
     */
    public function testBothRefuseTheLockDirectoryInTheSameWords(string $user, array $places, array $hide, string $setup, array $env, string $refusal): void
    {
        MountNamespace::skipUnlessAvailable();
        self::requireRootAndRunuser();
        $this->requireRunnableAs($user, (string) getenv('CRONLOCK_EXT'));
        $ns = MountNamespace::start($places, [], $hide);
        if ($setup !== '') {
            [$code, , $err] = $this->runCommand($ns->command(['sh', '-c', $setup]));
            self::assertSame(0, $code, $err);
        }
        $said = [];
        foreach (['extension', 'polyfill'] as $impl) {
            [$code, $out, $err] = $this->runCommand($ns->php($impl, (string) getenv('CRONLOCK_EXT'), $user, ['-r', <<<'PHP'
                try { cron_guard(function () { echo "JOB RAN\n"; }, 'job'); }
                catch (\Throwable $e) { echo get_class($e), ': ', $e->getMessage(), "\n"; }
                PHP], $env, [], '/'));
            self::assertSame(0, $code, "$impl: $out $err");
            $said[$impl] = $out;
        }
        self::assertSame("CronLock\\LockException: $refusal\n", $said['extension'], 'the extension');
        self::assertSame($said['extension'], $said['polyfill'], 'the polyfill says it as the extension does');
    }

    /** @return array<string, array<string, string|false>> the polyfill through predis on a PHP without phpredis, where predis is installed */
    private function predisEnv(): array
    {
        $autoloader = '/usr/share/php/Predis/Autoloader.php';
        $scanned = php_ini_scanned_files();
        if (!is_file($autoloader) || $scanned === false) {
            return [];
        }
        $dir = $this->makeTempDir('ini-predis');
        foreach (array_map('trim', explode(',', $scanned)) as $ini) {
            if ($ini !== '' && !str_contains(basename($ini), 'redis') && !str_contains(basename($ini), 'cronlock')) {
                copy($ini, "$dir/" . basename($ini));
            }
        }
        file_put_contents("$dir/prepend.php", '<?php require_once ' . var_export($autoloader, true) . "; Predis\\Autoloader::register();\n"
            . 'require_once ' . var_export(dirname(__DIR__) . '/polyfill/bootstrap.php', true) . ";\n");
        file_put_contents("$dir/zz-cronlock-polyfill.ini", "auto_prepend_file=$dir/prepend.php\n");
        return ['polyfill through predis' => ['PHP_INI_SCAN_DIR' => $dir, 'CRONLOCK_EXT' => false]];
    }
}

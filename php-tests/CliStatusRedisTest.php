<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\Tests\Support\CliTestHelpers;
use CronLock\Tests\Support\FileTestHelpers;
use CronLock\Tests\Support\RedisServer;
use CronLock\Tests\Support\RedisTopology;
use PHPUnit\Framework\TestCase;

/**
 * `cronlock status --redis` against servers of our own (tests/redis-harness):
 * held, free, stuck and waiting keys, holders alive, dead and on other
 * hosts, through each client (builtin, phpredis, predis), a DSN with a
 * password from the environment that is never printed, a Cluster and a
 * Sentinel master; and `cronlock run --redis`.
 */
final class CliStatusRedisTest extends TestCase
{
    use CliTestHelpers;
    use FileTestHelpers;

    private const PASSWORD = 'cli-s3cret-pw';
    private const PREDIS = '/usr/share/php/Predis/Autoloader.php';

    private static ?RedisServer $redis = null;
    private string $dir;

    public static function setUpBeforeClass(): void
    {
        parent::setUpBeforeClass();
        self::$redis = RedisServer::start(['requirepass' => self::PASSWORD]);
    }

    public static function tearDownAfterClass(): void
    {
        if (self::$redis !== null) {
            self::$redis->stop();
        }
        self::$redis = null;
        parent::tearDownAfterClass();
    }

    protected function setUp(): void
    {
        parent::setUp();
        $this->dir = $this->makeTempDir('cli-redis');
        self::$redis->command('FLUSHALL');
        putenv('CRONLOCK_TEST_REDIS=' . self::$redis->dsn());
    }

    protected function tearDown(): void
    {
        touch("{$this->dir}/stop");
        putenv('CRONLOCK_TEST_REDIS');
        $this->reapCommands();
        $this->removeTempDirs();
        parent::tearDown();
    }

    /** The implementation whose waiters subscribe to `<key>:released` (the extension's), else null. */
    private static function subscribingImpl(): ?string
    {
        return self::extensionBuilt() ? 'extension' : null;
    }

    /** `cronlock run --redis-env … --key $key` holding until tearDown; returns the wrapper's pid. */
    private function runHolder(string $key, string $impl = 'suite', string $env = 'CRONLOCK_TEST_REDIS'): int
    {
        $started = "{$this->dir}/started-" . md5($key);
        $h = $this->startCronlock(['run', '--redis-env', $env, '--key', $key, '--', 'sh', '-c',
            sprintf('touch %s; s=%s; while [ ! -e "$s" ] && [ -d "${s%%/*}" ]; do sleep 0.02; done', escapeshellarg($started), escapeshellarg("{$this->dir}/stop"))], $impl);
        self::waitUntil(fn () => file_exists($started) || $this->commandExitCode($h) !== null, "the holder of $key");
        self::assertNull($this->commandExitCode($h), "holds $key");
        return $this->commandPid($h);
    }

    /** A waiter of the extension: acquire($key, 60 s) in a child, subscribed to the release channel. */
    private function waiter(string $dsn, string $key, string $channel, callable $subscribers): void
    {
        $before = $subscribers($channel);
        $this->startPhp('extension', '$l = new \CronLock\Redis(getenv("CRONLOCK_TEST_REDIS_WAIT"), $argv[1], 10.0); $l->acquire(60.0);', [$key]);
        self::waitUntil(fn () => $subscribers($channel) > $before, "a waiter subscribed to $channel");
    }

    private static function numsub(RedisServer $server, string $channel): int
    {
        return (int) $server->command('PUBSUB', 'NUMSUB', $channel)[1];
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

    /** @return iterable<string, array{0: string}> */
    public static function clients(): iterable
    {
        yield 'builtin' => ['builtin'];
        yield 'phpredis' => ['phpredis'];
        yield 'predis' => ['predis'];
    }

    /**
     * @dataProvider clients
     */
    public function testHeldFreeStuckAndWaitingKeys(string $client): void
    {
        $phpArgs = [];
        if ($client === 'phpredis' && !extension_loaded('redis')) {
            self::markTestSkipped('phpredis is not installed (apt-get install php-redis)');
        }
        if ($client === 'predis') {
            if (!is_file(self::PREDIS)) {
                self::markTestSkipped('predis is not installed at ' . self::PREDIS . ' (apt-get install php-predis)');
            }
            $prepend = "{$this->dir}/predis.php";
            file_put_contents($prepend, '<?php require ' . var_export(self::PREDIS, true) . '; Predis\Autoloader::register();');
            $phpArgs = ['-d', "auto_prepend_file=$prepend"];
        }
        $holder = $this->runHolder('cron:held');
        $heldFrom = microtime(true); // the holder's process started before this
        putenv('CRONLOCK_TEST_REDIS_WAIT=' . self::$redis->dsn());
        $waiting = self::subscribingImpl() !== null;
        if ($waiting) {
            $this->waiter(self::$redis->dsn(), 'cron:held', 'cron:held:released', fn ($c) => self::numsub(self::$redis, $c));
        }
        // free: taken and released, its fencing counter stays
        [$code, , $err] = $this->cronlock(['run', '--redis-env', 'CRONLOCK_TEST_REDIS', '--key', 'cron:done', '--', 'true']);
        self::assertSame(0, $code, $err);
        // a holder on this host killed with kill -9: the key stays until its TTL
        $dead = $this->startPhp('suite', '$l = new \CronLock\Redis(getenv("CRONLOCK_TEST_REDIS"), "cron:dead", 60.0);
            if (!$l->acquire(0)) { exit(2); } echo "HELD\n"; sleep(60);');
        self::waitUntil(fn () => self::$redis->command('GET', 'cron:dead') !== null, 'the doomed holder to take cron:dead');
        $deadPid = $this->commandPid($dead);
        $this->killCommand($dead);
        // a holder on another host, and a value that is not a cronlock token on a key with a counter
        self::$redis->command('SET', 'cron:remote', str_repeat('ab', 16) . ':4242@web7', 'PX', '90000');
        self::$redis->command('SET', 'cron:remote:fence', '17');
        self::$redis->command('SET', 'cron:odd', "by hand\n");
        self::$redis->command('SET', 'cron:odd:fence', '3');
        self::$redis->command('SET', 'unrelated', 'hello');
        self::$redis->command('HSET', 'a-hash', 'f', 'v');

        $args = ['status', '--redis-env', 'CRONLOCK_TEST_REDIS', '--redis-client', $client];
        [$code, $out, $err] = $this->cronlock($args, 'suite', [], $phpArgs);
        self::assertSame(0, $code, $err);
        self::assertStringNotContainsString(self::PASSWORD, $out . $err, 'the password is never printed');
        $title = 'Redis redis://127.0.0.1:' . self::$redis->port() . '/0';
        self::assertStringStartsWith("$title\n  through $client\n", $out);
        $rows = self::statusTable($out, $title);
        self::assertSame(['cron:dead', 'cron:done', 'cron:held', 'cron:odd', 'cron:remote'], array_keys($rows), "only cronlock's keys:\n$out");
        $held = $rows['cron:held'];
        self::assertSame(['held', (string) $holder, gethostname(), 'yes', self::$redis->command('GET', 'cron:held:fence'), $waiting ? '1' : '0'],
            [$held['STATE'], $held['PID'], $held['HOST'], $held['ALIVE'], $held['FENCE'], $held['WAITING']], $out);
        self::assertMatchesRegularExpression('/^\d+ s$/', $held['TTL'], "the run's 60 s TTL, renewed");
        self::assertStringEndsWith('Z*', $held['SINCE'], "since: the holder's process start, footnoted");
        $doneFence = self::$redis->command('GET', 'cron:done:fence'); // a new counter: the server's clock in µs
        self::assertSame(['free', '-', '-', '-', $doneFence, '0'], [$rows['cron:done']['STATE'], $rows['cron:done']['PID'], $rows['cron:done']['TTL'],
            $rows['cron:done']['SINCE'], $rows['cron:done']['FENCE'], $rows['cron:done']['WAITING']]);
        self::assertSame(['held', (string) $deadPid, 'no', '-'], [$rows['cron:dead']['STATE'], $rows['cron:dead']['PID'], $rows['cron:dead']['ALIVE'], $rows['cron:dead']['SINCE']],
            'a dead holder of this host: alive no, and no process start to show');
        self::assertSame(['held', '4242', 'web7', '?', '-', '17'], [$rows['cron:remote']['STATE'], $rows['cron:remote']['PID'], $rows['cron:remote']['HOST'],
            $rows['cron:remote']['ALIVE'], $rows['cron:remote']['SINCE'], $rows['cron:remote']['FENCE']], 'another host: alive cannot be told');
        self::assertSame(['held', '-', '3'], [$rows['cron:odd']['STATE'], $rows['cron:odd']['PID'], $rows['cron:odd']['FENCE']]);

        // held for is whole seconds since the holder's process start: in its
        // first second it is 0 s, which is not longer than 0 s (compat 8.4 got there)
        usleep((int) max(0, ($heldFrom + 2.0 - microtime(true)) * 1e6));
        [$code, $out] = $this->cronlock(array_merge($args, ['--json', '--stale-after', '0s']), 'suite', [], $phpArgs);
        self::assertSame(1, $code, 'the live holder on this host is held longer than 0 s: stuck');
        $doc = self::json($out);
        self::assertStringNotContainsString(self::PASSWORD, $out);
        self::assertSame([['backend' => 'redis', 'title' => $title, 'exists' => true, 'read' => true, 'note' => "through $client"]], $doc['sources']);
        $lock = $doc['locks']['cron:held'];
        self::assertSame(['redis', $title, null, 'held', true, $holder, gethostname(), true, 'process start', $waiting ? 1 : 0, (int) self::$redis->command('GET', 'cron:held:fence')],
            [$lock['backend'], $lock['source'], $lock['path'], $lock['state'], $lock['stuck'], $lock['pid'], $lock['host'], $lock['pid_alive'],
                $lock['since_source'], $lock['waiters'], $lock['fence']]);
        self::assertGreaterThan(50.0, $lock['ttl']);
        self::assertLessThanOrEqual(60.0, $lock['ttl']);
        self::assertSame(1, $doc['stuck'], 'only the holder whose start is known is judged');
        self::assertSame([false, null, null], [$doc['locks']['cron:remote']['stuck'], $doc['locks']['cron:remote']['pid_alive'], $doc['locks']['cron:remote']['held_for']]);
        self::assertSame('value by hand\n', $doc['locks']['cron:odd']['client']);
        self::assertSame(['free', null, null, (int) self::$redis->command('GET', 'cron:done:fence')], [$doc['locks']['cron:done']['state'], $doc['locks']['cron:done']['ttl'], $doc['locks']['cron:done']['pid'], $doc['locks']['cron:done']['fence']]);

        [, $out] = $this->cronlock(array_merge($args, ['--prefix', 'cron:re']), 'suite', [], $phpArgs);
        self::assertSame(['cron:remote'], array_keys(self::statusTable($out, "$title (keys cron:re*)")));
    }

    public function testAPasswordInArgvWorksButIsWarnedAboutAndNeverPrinted(): void
    {
        $this->runHolder('cron:argv');
        [$code, $out, $err] = $this->cronlock(['status', '--redis', self::$redis->dsn()]);
        self::assertSame(0, $code, $err);
        self::assertStringContainsString('--redis names a password, which every user of this host can read in ps; use --redis-env VARIABLE', $err);
        self::assertStringNotContainsString(self::PASSWORD, $out . $err);
        self::assertArrayHasKey('cron:argv', self::statusTable($out, 'Redis redis://127.0.0.1:' . self::$redis->port() . '/0'));
        [$code, $out, $err] = $this->cronlock(['status', '--redis', 'redis://:wrong-' . self::PASSWORD . '@127.0.0.1:' . self::$redis->port()]);
        self::assertSame(2, $code, 'a refused login: not read');
        self::assertStringContainsString('WRONGPASS', $out . $err);
        self::assertStringNotContainsString(self::PASSWORD, $out . $err);
    }

    public function testAServerThatDoesNotAnswerExitsTwo(): void
    {
        $port = self::$redis->port();
        self::$redis->stop();
        try {
            [$code, $out, $err] = $this->cronlock(['status', '--redis', "redis://127.0.0.1:$port", '--json']);
        } finally {
            self::$redis = RedisServer::start(['requirepass' => self::PASSWORD]);
        }
        self::assertSame(2, $code);
        $doc = self::json($out);
        self::assertSame(false, $doc['sources'][0]['read']);
        self::assertStringContainsString("cannot connect to Redis at 127.0.0.1:$port", $doc['errors'][0]);
        self::assertStringContainsString("cannot connect to Redis at 127.0.0.1:$port", $err);
    }

    public function testACronlockRunOnABusyKeyIsSkipped(): void
    {
        $this->runHolder('cron:busy');
        $ran = "{$this->dir}/ran";
        [$code, , $err] = $this->cronlock(['run', '--redis-env', 'CRONLOCK_TEST_REDIS', '--key', 'cron:busy', '--on-busy', '4', '--', 'touch', $ran]);
        self::assertSame(4, $code, $err);
        self::assertFileDoesNotExist($ran);
        self::assertSame('', $err, 'a busy lock is skipped quietly');
    }

    /** Cluster and Sentinel holders need the extension (cronlock/polyfill takes single servers only). */
    private static function requireExtensionHolders(): void
    {
        if (!self::extensionBuilt()) {
            self::markTestSkipped('Cluster and Sentinel holders need the cronlock extension, and there is no build at ' . self::extensionPath());
        }
    }

    public function testEveryMasterOfACluster(): void
    {
        self::requireExtensionHolders();
        $cluster = RedisTopology::cluster();
        try {
            putenv('CRONLOCK_TEST_REDIS=' . $cluster->dsn());
            putenv('CRONLOCK_TEST_REDIS_WAIT=' . $cluster->dsn());
            $keys = ['cron:a', 'cron:b', 'cron:c', '{cron}:tagged'];
            $pids = [];
            foreach ($keys as $key) {
                $pids[$key] = $this->runHolder($key, 'extension');
            }
            [$code, , $err] = $this->cronlock(['run', '--redis-env', 'CRONLOCK_TEST_REDIS', '--key', 'cron:free', '--', 'true'], 'extension');
            self::assertSame(0, $code, $err);
            $waiting = self::subscribingImpl() !== null;
            if ($waiting) {
                $all = array_merge($cluster->servers);
                $this->waiter($cluster->dsn(), 'cron:a', '{cron:a}:released',
                    fn ($c) => array_sum(array_map(fn (RedisServer $s) => self::numsub($s, $c), $all)));
            }
            foreach (['builtin', 'suite'] as $client) {
                $args = ['status', '--redis-env', 'CRONLOCK_TEST_REDIS'];
                if ($client === 'builtin') {
                    $args = array_merge($args, ['--redis-client', 'builtin']);
                }
                [$code, $out, $err] = $this->cronlock($args);
                self::assertSame(0, $code, $err);
                $title = 'Redis ' . preg_replace('#/$#', '', $cluster->dsn());
                $rows = self::statusTable($out, $title);
                self::assertSame(['cron:a', 'cron:b', 'cron:c', 'cron:free', '{cron}:tagged'], array_keys($rows), "keys of every master:\n$out");
                self::assertMatchesRegularExpression('/^  through \w+, 3 masters$/m', $out);
                foreach ($keys as $key) {
                    self::assertSame(['held', (string) $pids[$key]], [$rows[$key]['STATE'], $rows[$key]['PID']], "$key:\n$out");
                    // a new counter starts at the server's clock in µs
                    self::assertMatchesRegularExpression('/^\d{16}$/', $rows[$key]['FENCE'], "$key:\n$out");
                }
                self::assertSame('free', $rows['cron:free']['STATE'], '{cron:free}:fence without its key');
                self::assertMatchesRegularExpression('/^\d{16}$/', $rows['cron:free']['FENCE']);
                self::assertSame($waiting ? '1' : '0', $rows['cron:a']['WAITING'], 'subscribers of {cron:a}:released on any node');
            }
            [, $out] = $this->cronlock(['status', '--redis-env', 'CRONLOCK_TEST_REDIS', '--prefix', 'cron:f']);
            self::assertSame(['cron:free'], array_keys(self::statusTable($out, 'Redis ' . $cluster->dsn() . ' (keys cron:f*)')),
                'a free lock whose counter is {cron:free}:fence, outside the prefix');
        } finally {
            touch("{$this->dir}/stop");
            $this->reapCommands();
            $cluster->stop();
        }
    }

    public function testTheMasterASentinelNames(): void
    {
        self::requireExtensionHolders();
        $sentinel = RedisTopology::sentinel(1);
        try {
            putenv('CRONLOCK_TEST_REDIS=' . $sentinel->dsn());
            $pid = $this->runHolder('cron:s', 'extension');
            [$code, $out, $err] = $this->cronlock(['status', '--redis-env', 'CRONLOCK_TEST_REDIS', '--redis-client', 'builtin']);
            self::assertSame(0, $code, $err);
            $title = 'Redis ' . $sentinel->dsn();
            self::assertStringContainsString("$title\n  through builtin, master 127.0.0.1:" . $sentinel->master()->port() . "\n", $out);
            self::assertSame((string) $pid, self::statusTable($out, $title)['cron:s']['PID']);
        } finally {
            touch("{$this->dir}/stop");
            $this->reapCommands();
            $sentinel->stop();
        }
    }
}

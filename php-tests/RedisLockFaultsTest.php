<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\ConnectionException;
use CronLock\LockException;
use CronLock\Redis;
use CronLock\Tests\Support\Proc;
use CronLock\Tests\Support\RedisServer;
use CronLock\Tests\Support\WebAssembly;
use PHPUnit\Framework\TestCase;

/**
 * CronLock\Redis when the truth on the server and this object's memory part
 * ways, and when the connection does: acquire() on a held lock asks the
 * server (D1/D4), two objects on one key in one process (D3), idle
 * connections the server dropped, CLIENT PAUSE WRITE (what FAILOVER does),
 * a server restart under a waiter, signals during a wait (D9), messages in
 * words (D6), serialization and a second __construct() (D5).
 * Every test runs its own redis-server.
 */
final class RedisLockFaultsTest extends TestCase
{
    /** WebAssembly::skip() reason of the "Connection refused" checks, which come last for it */
    private const NO_REFUSED_CONNECT = 'its sockets connect to a closed port, and the first read fails ("Error while reading line from the server", not "Connection refused")';

    /** @var list<RedisServer> */
    private array $servers = [];

    protected function tearDown(): void
    {
        foreach ($this->servers as $server) {
            $server->kill();
        }
        $this->servers = [];
        parent::tearDown();
    }

    /** @param list<string> $args extra redis-server arguments */
    private function server(array $args = []): RedisServer
    {
        $server = RedisServer::start($args === [] ? [] : ['args' => $args]);
        $this->servers[] = $server;
        return $server;
    }

    /** @return array{0: \Throwable, 1: float} what $fn threw (it must throw $class) and how long it took */
    private static function throws(string $class, callable $fn): array
    {
        $t0 = microtime(true);
        try {
            $result = $fn();
        } catch (\Throwable $e) {
            self::assertInstanceOf($class, $e, (string) $e);
            return [$e, microtime(true) - $t0];
        }
        self::fail("expected $class, got " . var_export($result, true));
    }

    // ------------------------------------------------------- D1, D3, D4

    public function testAcquireOnAHeldLockAsksTheServerAndExtendsTheTtl(): void
    {
        $server = $this->server();
        $lock = new Redis($server->dsn(), 'job', 10.0);
        self::assertTrue($lock->acquire(0));
        $token = $lock->token();
        $server->command('PEXPIRE', 'job', '2000');
        self::assertTrue($lock->acquire(0), 'still ours');
        self::assertGreaterThan(9000, $server->command('PTTL', 'job'), 'extended to the lock\'s TTL');
        self::assertSame($token, $lock->token());

        // The key is lost on the server (DEL, eviction, restart) and taken
        // by someone else: the old holder's acquire() must say so.
        $server->command('DEL', 'job');
        $server->command('SET', 'job', 'someone-else', 'PX', '20000');
        self::assertFalse($lock->acquire(0), 'the key is no longer ours');
        self::assertFalse($lock->isHeld());
        self::assertNull($lock->token());
        self::assertSame('someone-else', $server->command('GET', 'job'), 'never touched');

        // Lost without a new holder: false too, and not silently retaken.
        $server->command('DEL', 'job');
        self::assertTrue($lock->acquire(0));
        $server->command('DEL', 'job');
        self::assertFalse($lock->acquire(5.0));
        self::assertNull($server->command('GET', 'job'));

        // acquire(); acquire(); release(): one release frees it.
        self::assertTrue($lock->acquire(0));
        self::assertTrue($lock->acquire(0));
        self::assertTrue($lock->release());
        self::assertNull($server->command('GET', 'job'));
        self::assertFalse($lock->release());
    }

    public function testTwoObjectsOnOneKeyInOneProcessNeverWaitOnEachOther(): void
    {
        $server = $this->server();
        $a = new Redis($server->dsn(), 'job', 10.0);
        $b = new Redis($server->dsn(), 'job', 10.0);
        self::assertTrue($a->acquire(0));

        $t0 = microtime(true);
        self::assertFalse($b->acquire(0), 'busy at once');
        [$e, $took] = self::throws(LockException::class, fn () => $b->acquire(-1));
        self::assertNotInstanceOf(ConnectionException::class, $e);
        self::assertSame(
            "redis key 'job' at 127.0.0.1:{$server->port()} is already held by this process (pid "
                . getmypid() . ') through another CronLock\Redis object; waiting for it would deadlock',
            $e->getMessage(),
        );
        self::throws(LockException::class, fn () => $b->acquire(30.0));
        self::assertLessThan(2.0, microtime(true) - $t0, 'no wait on itself');
        self::assertFalse($b->isHeld());

        // Another database is another lock; a released one is free again.
        $c = new Redis($server->dsn(3), 'job', 10.0);
        self::assertTrue($c->acquire(0));
        self::assertTrue($a->release());
        self::assertTrue($b->acquire(1.0));
        self::assertTrue($b->release());
    }

    // ---------------------------------------------------- broken connections

    public function testAnIdleConnectionTheServerDroppedIsRetriedOnRelease(): void
    {
        $server = $this->server(['--timeout', '2']);
        $lock = new Redis($server->dsn(), 'job', 300.0);
        $auto = new Redis($server->dsn(), 'auto', 300.0, ['auto_renew' => true]);
        $renewed = new Redis($server->dsn(), 'renewed', 300.0);
        self::assertTrue($lock->acquire(0));
        self::assertTrue($auto->acquire(0));
        self::assertTrue($renewed->acquire(0));
        sleep(3); // the job; the server closes idle connections after 2 s

        self::assertTrue($renewed->renew(), 'renew reconnects');
        self::assertTrue($renewed->acquire(0), 'acquire on the held lock reconnects');
        self::assertTrue($lock->release(), 'release reconnects');
        self::assertNull($server->command('GET', 'job'), 'the key is gone, not left for its TTL');
        self::assertTrue($auto->release(), 'the lock\'s own connection is reconnected, not only the renewer\'s');
        self::assertNull($server->command('GET', 'auto'));
        self::assertTrue($renewed->release());
    }

    public function testClientPauseWriteDuringReleaseRenewAndAcquireIsRiddenOut(): void
    {
        RedisServer::requireVersion('6.2', 'CLIENT PAUSE … WRITE');
        $server = $this->server();
        $lock = new Redis($server->dsn(), 'job', 10.0); // read_timeout 1 s
        self::assertTrue($lock->acquire(0));
        foreach (['renew', 'acquire', 'release'] as $method) {
            self::assertSame('OK', $server->command('CLIENT', 'PAUSE', '1500', 'WRITE'));
            $t0 = microtime(true);
            self::assertTrue($lock->$method(), "$method() during a 1.5 s write pause");
            self::assertLessThan(5.0, microtime(true) - $t0);
            usleep(100_000);
        }
        self::assertNull($server->command('GET', 'job'));

        // A waiter rides out a pause too.
        $server->command('SET', 'job', 'other', 'PX', '1000');
        self::assertSame('OK', $server->command('CLIENT', 'PAUSE', '1500', 'WRITE'));
        self::assertTrue($lock->acquire(10.0));
        self::assertTrue($lock->release());
    }

    public function testAWaiterRidesOutAServerRestart(): void
    {
        $server = $this->server();
        $server->command('SET', 'job', 'holder-that-will-be-lost');
        $waiter = Proc::start(sprintf(<<<'PHP'
            $lock = new \CronLock\Redis(%s, 'job', 10.0);
            echo "WAITING\n";
            $t0 = microtime(true);
            try {
                $got = $lock->acquire(20.0);
                printf("RESULT %%s %%.3f %%s\n", var_export($got, true), microtime(true) - $t0, $lock->token());
            } catch (\Throwable $e) {
                printf("RESULT %%s %%.3f %%s\n", get_class($e), microtime(true) - $t0, $e->getMessage());
            }
            sleep(30); // holds it until killed
            PHP, var_export($server->dsn(), true)));
        $waiter->waitForLine('WAITING', 15.0, 'stdout');
        usleep(300_000);
        $server->kill();
        usleep(1_500_000); // longer than connect_timeout + read_timeout
        $server->restart(); // empty: the old holder's key is gone
        $line = $waiter->waitForLine('RESULT', 25.0, 'stdout');
        [, $got, $took, $token] = explode(' ', $line, 4);
        self::assertSame('true', $got, $line);
        self::assertLessThan(15.0, (float) $took, 'not at the end of its timeout');
        self::assertSame($token, $server->command('GET', 'job'));
        $waiter->kill();
    }

    public function testAWaiterThrowsTheLastErrorWhenTheServerStaysDownPastTheDeadline(): void
    {
        $server = $this->server();
        $port = $server->port();
        $server->kill();
        $lock = new Redis("redis://127.0.0.1:$port", 'job', 10.0);
        [$e, $took] = self::throws(ConnectionException::class, fn () => $lock->acquire(1.5));
        self::assertGreaterThan(1.3, $took, 'retried until the deadline');
        self::assertLessThan(5.0, $took);
        self::assertFalse($lock->isHeld());
        [, $took] = self::throws(ConnectionException::class, fn () => $lock->acquire(0));
        self::assertLessThan(1.0, $took, 'a try is one try');
        WebAssembly::skip(self::NO_REFUSED_CONNECT);
        self::assertSame("cannot connect to Redis at 127.0.0.1:$port to acquire key 'job': Connection refused", $e->getMessage());
    }

    // ------------------------------------------------------------------ D9

    public function testSignalHandlersRunWithinASecondDuringARedisWait(): void
    {
        if (!function_exists('pcntl_signal')) {
            self::markTestSkipped('needs ext-pcntl');
        }
        $server = $this->server();
        $server->command('SET', 'job', 'busy');
        foreach (['-1.0', '30.0'] as $timeout) {
            $p = Proc::start(sprintf(<<<'PHP'
                pcntl_async_signals(true);
                $ran = null;
                pcntl_signal(SIGTERM, function () use (&$ran) { $ran = microtime(true); });
                $lock = new \CronLock\Redis(%s, 'job', 10.0);
                echo "WAITING\n";
                $t0 = microtime(true);
                $got = $lock->acquire(%s);
                printf("RESULT %%s %%.3f\n", var_export($got, true), ($ran ?? INF) - $t0);
                PHP, var_export($server->dsn(), true), $timeout));
            $p->waitForLine('WAITING', 15.0, 'stdout');
            usleep(500_000);
            $sent = microtime(true);
            posix_kill($p->pid(), SIGTERM);
            $line = $p->waitForLine('RESULT', 10.0, 'stdout');
            self::assertLessThan(1.5, microtime(true) - $sent, "acquire($timeout) returned soon after the signal");
            self::assertStringStartsWith('RESULT false ', $line, "acquire($timeout): the wait was cut short");
            self::assertSame(0, $p->wait(10.0), $p->stderr());
        }
    }

    /**
     * @group extension-only
     * cronlock/polyfill cannot cut short a read that blocks inside phpredis
     * (the client this suite's polyfill run uses): PHP's socket streams call
     * poll() again after EINTR with the whole timeout, phpredis gives
     * userland no socket to poll in slices, and PHP runs a signal handler
     * only after that internal call returns (seen with phpredis 5.3.7: the
     * read went on for the whole read_timeout after the signal). Through
     * predis the polyfill does not poll in slices either.
     */
    public function testASignalCutsShortAWaitOnAStalledServer(): void
    {
        RedisServer::requireVersion('6.2', 'CLIENT PAUSE … WRITE');
        if (!function_exists('pcntl_signal')) {
            self::markTestSkipped('needs ext-pcntl');
        }
        $server = $this->server();
        $server->command('SET', 'job', 'busy');
        $p = Proc::start(sprintf(<<<'PHP'
            pcntl_async_signals(true);
            $ran = null;
            pcntl_signal(SIGTERM, function () use (&$ran) { $ran = microtime(true); });
            $lock = new \CronLock\Redis(%s, 'job', 10.0, ['read_timeout' => 8.0]);
            $lock->acquire(0); // connected
            echo "WAITING\n";
            try {
                $got = var_export($lock->acquire(30.0), true);
            } catch (\Throwable $e) {
                $got = get_class($e) . ': ' . $e->getMessage();
            }
            echo "RESULT $got\n";
            PHP, var_export($server->dsn(), true)));
        $p->waitForLine('WAITING', 15.0, 'stdout');
        // The waiter's next script blocks in the server: a read of up to 8 s.
        self::assertSame('OK', $server->command('CLIENT', 'PAUSE', '20000', 'WRITE'));
        usleep(500_000);
        $sent = microtime(true);
        posix_kill($p->pid(), SIGTERM);
        $line = $p->waitForLine('RESULT', 15.0, 'stdout');
        self::assertLessThan(1.5, microtime(true) - $sent, 'the read was not waited out');
        self::assertSame('RESULT false', $line, 'a signal is not a connection failure');
        self::assertSame(0, $p->wait(10.0), $p->stderr());
    }

    public function testAKeyOfTheWrongTypeThrowsEverywhereAndIsNeverBusy(): void
    {
        $server = $this->server();
        $port = $server->port();
        foreach (['list' => ['RPUSH', 'cron:wrongtype', 'x'], 'hash' => ['HSET', 'cron:wrongtype', 'f', 'v']] as $type => $make) {
            $server->command('DEL', 'cron:wrongtype');
            $server->command(...$make);
            $expected = "Redis at 127.0.0.1:$port refused to acquire key 'cron:wrongtype': the key holds a $type value, not a string";
            $lock = new Redis($server->dsn(), 'cron:wrongtype', 5.0);
            [$e] = self::throws(LockException::class, fn () => $lock->acquire(0));
            self::assertNotInstanceOf(ConnectionException::class, $e);
            self::assertSame($expected, $e->getMessage());
            [$e, $took] = self::throws(LockException::class, fn () => $lock->acquire(3.0));
            self::assertSame($expected, $e->getMessage());
            self::assertLessThan(2.5, $took, 'not waited on as if busy');
            [$e] = self::throws(LockException::class, fn () => cron_guard(fn () => 'RAN', $lock, ['wait' => 1.0]));
            self::assertSame($expected, $e->getMessage());
            self::assertFalse($lock->isHeld());
        }
        // on_busy would exit the process: run it in a child.
        $p = Proc::run(sprintf(<<<'PHP'
            $lock = new \CronLock\Redis(%s, 'cron:wrongtype', 5.0);
            try {
                var_dump(cron_guard(fn () => 'RAN', $lock, ['on_busy' => 3]));
            } catch (\CronLock\LockException $e) {
                echo get_class($e), ': ', $e->getMessage(), "\n";
            }
            PHP, var_export($server->dsn(), true)));
        self::assertSame(0, $p->exitCode(), $p->stdout() . $p->stderr());
        self::assertStringContainsString('CronLock\LockException: ', $p->stdout());
        self::assertStringContainsString('the key holds a hash value, not a string', $p->stdout());
        self::assertStringNotContainsString('held by', $p->stderr());

        // A held key replaced by a list: acquire() on the hold throws too.
        $server->command('DEL', 'cron:wrongtype');
        $lock = new Redis($server->dsn(), 'cron:wrongtype', 5.0);
        self::assertTrue($lock->acquire(0));
        $server->command('DEL', 'cron:wrongtype');
        $server->command('RPUSH', 'cron:wrongtype', 'x');
        self::throws(LockException::class, fn () => $lock->acquire(0));
    }

    /** The server stalls (SIGSTOP, as in a VM pause) while an acquire waits for its reply. */
    private static function acquireThroughAStall(RedisServer $server, Redis $lock): string
    {
        self::assertTrue($lock->acquire(0), 'connected');
        self::assertTrue($lock->release());
        posix_kill($server->pid(), SIGSTOP);
        $resume = microtime(true) + 1.5;
        try {
            [$e] = self::throws(ConnectionException::class, fn () => $lock->acquire(0));
            self::assertStringContainsString('no answer within', $e->getMessage());
        } finally {
            usleep((int) max(0, ($resume - microtime(true)) * 1e6));
            posix_kill($server->pid(), SIGCONT);
        }
        $deadline = microtime(true) + 5.0;
        while (($value = $server->command('GET', 'cron:stall')) === null && microtime(true) < $deadline) {
            usleep(10_000);
        }
        self::assertIsString($value, 'the stalled script ran when the server resumed');
        self::assertStringContainsString(':' . getmypid() . '@', $value);
        return $value;
    }

    /** The object keeps the token of an acquire that got no answer (both implementations). */
    public function testAnAcquireThatGotNoAnswerIsTakenOverOrCleanedUpByItsObject(): void
    {
        if (!function_exists('posix_kill')) {
            self::markTestSkipped('needs ext-posix');
        }
        $server = $this->server();
        $options = ['read_timeout' => 0.3, 'connect_timeout' => 0.3];
        $lock = new Redis($server->dsn(), 'cron:stall', 60.0, $options);
        $stalled = self::acquireThroughAStall($server, $lock);
        self::assertTrue($lock->acquire(0), 'the leftover is ours');
        self::assertSame($stalled, $lock->token());
        self::assertTrue($lock->release());
        self::assertNull($server->command('GET', 'cron:stall'));

        $lock = new Redis($server->dsn(), 'cron:stall', 60.0, $options);
        self::acquireThroughAStall($server, $lock);
        self::assertTrue($lock->release());
        self::assertNull($server->command('GET', 'cron:stall'));

        $lock = new Redis($server->dsn(), 'cron:stall', 60.0, $options);
        self::acquireThroughAStall($server, $lock);
        unset($lock);
        self::assertNull($server->command('GET', 'cron:stall'), 'destruction cleans up');

        // cron_guard() throws; the next run (another process) is not skipped.
        $lock = new Redis($server->dsn(), 'cron:stall', 60.0, $options);
        self::assertTrue($lock->acquire(0));
        self::assertTrue($lock->release());
        posix_kill($server->pid(), SIGSTOP);
        try {
            self::throws(ConnectionException::class, fn () => cron_guard(fn () => 'RAN', $lock));
        } finally {
            usleep(1_500_000);
            posix_kill($server->pid(), SIGCONT);
        }
        usleep(200_000);
        unset($lock);
        $p = Proc::run(sprintf(
            'var_dump(cron_guard(fn () => "run 2 ran", new \CronLock\Redis(%s, "cron:stall", 60.0)));',
            var_export($server->dsn(), true),
        ));
        self::assertStringContainsString('run 2 ran', $p->stdout(), $p->stderr());
    }

    // ------------------------------------------------------------------ D6

    public function testMessagesSayWhatHappenedInWords(): void
    {
        $server = $this->server();
        $port = $server->port();
        $longKey = str_repeat('k', 100_000);

        $server->command('CONFIG', 'SET', 'maxmemory', '1');
        $lock = new Redis($server->dsn(), $longKey, 10.0);
        [$e] = self::throws(ConnectionException::class, fn () => $lock->acquire(0));
        self::assertSame(
            "Redis at 127.0.0.1:$port refused to acquire key '" . str_repeat('k', 200)
                . "…': out of memory (maxmemory reached)",
            $e->getMessage(),
        );
        $server->command('CONFIG', 'SET', 'maxmemory', '0');

        // '&*' (pub/sub channels) exists from Redis 6.2; 6.0 allows every channel
        $channels = version_compare(RedisServer::version(), '6.2', '>=') ? ['&*'] : [];
        $rules = ['~*', ...$channels, '+@all', '-evalsha', '-eval'];
        $server->command('ACL', 'SETUSER', 'cron', 'on', '>pw', ...$rules);
        $denied = new Redis("redis://cron:pw@127.0.0.1:$port", 'job', 10.0);
        [$e] = self::throws(ConnectionException::class, fn () => $denied->acquire(0));
        self::assertStringStartsWith("Redis at 127.0.0.1:$port refused to acquire key 'job': permission denied by ACL (", $e->getMessage());
        self::assertStringNotContainsString('NoPerm', $e->getMessage());

        $wrong = new Redis("redis://cron:Wrong-Pw@127.0.0.1:$port", 'job', 10.0);
        [$e] = self::throws(ConnectionException::class, fn () => $wrong->acquire(0));
        self::assertStringStartsWith("cannot connect to Redis at 127.0.0.1:$port to acquire key 'job': wrong user name or password", $e->getMessage());
        self::assertStringNotContainsString('Wrong-Pw', $e->getMessage());

        $server->command('REPLICAOF', '127.0.0.1', '1');
        [$e] = self::throws(ConnectionException::class, fn () => (new Redis($server->dsn(), 'job', 10.0))->acquire(0));
        self::assertSame("Redis at 127.0.0.1:$port refused to acquire key 'job': it is a read-only replica", $e->getMessage());

        $server->kill();
        [$e] = self::throws(ConnectionException::class, fn () => (new Redis($server->dsn(), 'job', 10.0))->acquire(0));
        WebAssembly::skip(self::NO_REFUSED_CONNECT);
        self::assertSame("cannot connect to Redis at 127.0.0.1:$port to acquire key 'job': Connection refused", $e->getMessage());
    }

    // ------------------------------------------------------------------ D5

    public function testSerializingConstructingTwiceAndCloningChangeNothing(): void
    {
        $server = $this->server();
        $lock = new Redis($server->dsn(), 'job', 10.0);
        self::assertTrue($lock->acquire(0));
        $token = $lock->token();

        [$e] = self::throws(\Error::class, fn () => $lock->__construct($server->dsn(), 'other', 5.0));
        self::assertSame('Cannot call CronLock\Redis::__construct() twice', $e->getMessage());
        self::assertSame('job', $lock->key());
        self::assertTrue($lock->isHeld());
        self::assertSame($token, $server->command('GET', 'job'), 'still held, not released');

        $refusal = 'a CronLock\Redis cannot be serialized: a lock belongs to the process that holds it';
        foreach ([
            'serialize' => fn () => serialize(['lock' => $lock]),
            'unserialize O:' => fn () => unserialize('O:14:"CronLock\Redis":1:{s:3:"key";s:3:"job";}'),
            'unserialize C:' => fn () => unserialize('C:14:"CronLock\Redis":0:{}'),
        ] as $what => $fn) {
            [$e] = self::throws(LockException::class, $fn);
            self::assertSame($refusal, $e->getMessage(), $what);
        }
        self::throws(\Error::class, fn () => clone $lock);
        self::assertTrue($lock->isHeld());
        self::assertTrue($lock->release());
    }
}

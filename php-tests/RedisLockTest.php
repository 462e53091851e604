<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\ConnectionException;
use CronLock\Lock;
use CronLock\Redis;
use CronLock\Tests\Support\FileTestHelpers;
use CronLock\Tests\Support\Proc;
use CronLock\Tests\Support\RedisServer;
use CronLock\Tests\Support\RedisTestHelpers;
use CronLock\Tests\Support\WebAssembly;
use PHPUnit\Framework\TestCase;

/**
 * CronLock\Redis against real redis-servers of our own (Support\RedisServer):
 * DSN forms, authentication, TLS, argument checks, what is stored in Redis,
 * fencing, expiry and takeover, interop with plain SET NX clients,
 * auto-renew, kill -9, a dying or stalled server, waiting, fork and
 * contention between processes. The Lock contract itself runs in
 * RedisLockContractTest.
 *
 * What the module docs of src/lock/redis/mod.rs promise and these tests hold it to:
 * `<key>` holds `<32 hex>:<pid>@<host>` with the TTL, `<key>:fence` is INCRed
 * by every successful acquire, `<key>:released` is published on release;
 * a failed release() throws ConnectionException and forgets the lock (the
 * key expires by its TTL), a failed renew() throws ConnectionException and
 * the lock stays held as far as we know until its TTL runs out.
 */
final class RedisLockTest extends TestCase
{
    use FileTestHelpers;
    use RedisTestHelpers;

    private string $controlDir;
    /** @var list<RedisServer> servers made by one test, stopped in tearDown */
    private array $ownServers = [];
    /** @var string|false */
    private $savedIgnoreArgs = false;

    /** self::$server: plain TCP that also listens on a unix socket. */
    protected static function classServerOptions(): array
    {
        return ['unix' => true];
    }

    protected function setUp(): void
    {
        parent::setUp();
        $this->controlDir = $this->makeTempDir('redis-lock');
        $this->savedIgnoreArgs = ini_get('zend.exception_ignore_args');
        // Make traces carry the call arguments, so a password passed around
        // would show in getTraceAsString() and (string) $e.
        ini_set('zend.exception_ignore_args', '0');
    }

    protected function tearDown(): void
    {
        ini_set('zend.exception_ignore_args', (string) $this->savedIgnoreArgs);
        foreach ($this->ownServers as $server) {
            $server->kill();
        }
        $this->ownServers = [];
        $this->reapCommands();
        $this->removeTempDirs();
        parent::tearDown();
    }

    // ----------------------------------------------------------------- helpers

    private static function key(string $what = 'job'): string
    {
        return "redis-test:$what:" . getmypid() . ':' . bin2hex(random_bytes(4));
    }

    private static function dsn(?int $db = null): string
    {
        return self::$server->tcpDsn($db);
    }

    /** @param array<string, mixed> $opts RedisServer::start() options */
    private function ownServer(array $opts = []): RedisServer
    {
        $server = RedisServer::start($opts);
        $this->ownServers[] = $server;
        return $server;
    }

    /** A port nothing listens on (a server of ours that was stopped). */
    private function deadPort(): int
    {
        $server = RedisServer::start();
        $port = $server->port();
        $server->stop();
        return $port;
    }

    /**
     * A child process that builds the lock from $lockCode, acquire(0)s it and
     * prints "HELD <token> <fence>" (or "BUSY" / "ERROR <class>: <message>"
     * and exits 2 / 3). It releases when the returned signal file appears (or
     * after $releaseAfter s when >= 0) and prints "RELEASED <microtime> <result>".
     *
     * @param array<string, string|false> $env
     * @return array{0: Proc, 1: string} the child and its signal file
     */
    private function startHolder(string $lockCode, float $releaseAfter = -1.0, array $env = [], bool $waitHeld = true): array
    {
        $signal = $this->controlDir . '/release-' . bin2hex(random_bytes(4));
        $code = '$lock = ' . $lockCode . ";\n" . <<<'PHP'
            try {
                if (!$lock->acquire(0)) { echo "BUSY\n"; exit(2); }
            } catch (\Throwable $e) {
                echo "ERROR ", get_class($e), ": ", $e->getMessage(), "\n";
                exit(3);
            }
            echo "HELD ", $lock->token(), " ", $lock->fencingToken(), "\n";
            [, $releaseAfter, $signal] = $argv;
            $releaseAfter = (float) $releaseAfter;
            $t0 = microtime(true);
            while (!file_exists($signal) && ($releaseAfter < 0 || microtime(true) - $t0 < $releaseAfter)) {
                usleep(500);
            }
            $at = microtime(true);
            $ok = $lock->release();
            printf("RELEASED %.6f %s\n", $at, var_export($ok, true));
            PHP;
        $p = Proc::start($code, [sprintf('%.6F', $releaseAfter), $signal], $env);
        if ($waitHeld) {
            $p->waitForLine('HELD', 15.0, 'stdout');
        }
        return [$p, $signal];
    }

    /** @return array{0: string, 1: int} token and fence from a holder's HELD line */
    private static function heldLine(Proc $p): array
    {
        $line = $p->waitForLine('HELD', 15.0, 'stdout');
        self::assertMatchesRegularExpression('/^HELD \S+ \d+$/', $line);
        [, $token, $fence] = explode(' ', $line);
        return [$token, (int) $fence];
    }

    private function releaseHolder(Proc $p, string $signal): string
    {
        touch($signal);
        $line = $p->waitForLine('RELEASED', 15.0, 'stdout');
        self::assertSame(0, $p->wait(15.0), $p->stdout() . $p->stderr());
        return $line;
    }

    /**
     * The exception $fn throws, which must be a ConnectionException; fails
     * the test otherwise. Also returns how long the call took.
     *
     * @return array{0: ConnectionException, 1: float}
     */
    private static function connectionFailure(callable $fn, string $what): array
    {
        $t0 = microtime(true);
        try {
            $result = $fn();
        } catch (ConnectionException $e) {
            return [$e, microtime(true) - $t0];
        }
        self::fail("$what: expected a ConnectionException, got " . var_export($result, true));
    }

    private static function assertNoSecret(\Throwable $e, string ...$secrets): void
    {
        foreach ($secrets as $secret) {
            for ($t = $e; $t !== null; $t = $t->getPrevious()) {
                self::assertStringNotContainsString($secret, $t->getMessage(), 'the password leaks into getMessage()');
            }
        }
        if (!extension_loaded('cronlock') && PHP_VERSION_ID < 80200) {
            self::markTestSkipped('cronlock/polyfill on PHP < 8.2: without #[\SensitiveParameter] the password its functions pass on shows in stack traces');
        }
        foreach ($secrets as $secret) {
            for ($t = $e; $t !== null; $t = $t->getPrevious()) {
                if (PHP_VERSION_ID >= 80200) {
                    self::assertStringNotContainsString($secret, $t->getTraceAsString(), 'the password leaks into getTraceAsString()');
                    continue;
                }
                // The extension before PHP 8.2 (no #[\SensitiveParameter]):
                // this test's own helpers show the DSN in their frames, so
                // only cronlock's frames are checked (as the stub says, its
                // DSN parameter is hidden from PHP 8.2 on; these frames take
                // no DSN)
                foreach ($t->getTrace() as $frame) {
                    $in = $frame['class'] ?? $frame['function'];
                    if (strpos($in, 'CronLock\\') === 0 && strpos($frame['class'] ?? '', 'CronLock\\Tests\\') !== 0) {
                        self::assertStringNotContainsString($secret, var_export($frame['args'] ?? [], true), "the password leaks into the frame of {$frame['function']}()");
                    }
                }
            }
            if (PHP_VERSION_ID >= 80200) {
                self::assertStringNotContainsString($secret, (string) $e, 'the password leaks into (string) $e');
            }
        }
    }

    /** A lock with $server's DSN works: acquire(0) stores its token at $key, release() frees it. */
    private static function assertLockWorksOn(RedisServer $server, string $key): void
    {
        $lock = new Redis($server->dsn(), $key, 10.0);
        self::assertTrue($lock->acquire(0));
        self::assertSame($lock->token(), $server->command('GET', $key));
        self::assertTrue($lock->release());
    }

    /**
     * acquire(0) with a $dsn whose credentials the server refuses: a quick
     * ConnectionException that shows none of $secrets, and nothing held.
     */
    private static function assertCredentialsRefused(
        #[\SensitiveParameter]
        string $dsn,
        string $key,
        string $what,
        #[\SensitiveParameter]
        string ...$secrets
    ): void {
        $bad = new Redis($dsn, $key, 10.0);
        [$e, $took] = self::connectionFailure(fn () => $bad->acquire(0), $what);
        self::note(sprintf('%s: %s (%.3f s)', $what, $e->getMessage(), $took));
        self::assertLessThan(3.0, $took, "$what: refused quickly");
        self::assertNoSecret($e, ...$secrets);
        self::assertFalse($bad->isHeld());
    }

    private static function pttl(string $key, ?RedisServer $server = null): int
    {
        return ($server ?? self::$server)->command('PTTL', $key);
    }

    // ------------------------------------------------------------ extension

    /**
     * @group extension-only
     * Needs the extension: php --ri cronlock.
     */
    public function testPhpRiReportsRedisAndTlsSupport(): void
    {
        [$code, $out, $err] = $this->runCommand([...self::phpCommand(), '--ri', 'cronlock']);
        self::assertSame(0, $code, $err);
        self::assertMatchesRegularExpression('/^redis locks => enabled$/m', $out, $out);
        self::assertMatchesRegularExpression('#^redis TLS \(rediss://\) => enabled\b#m', $out, $out);
    }

    public function testRedisIsAFinalLockWithTheContractMethods(): void
    {
        $class = new \ReflectionClass(Redis::class);
        self::assertTrue($class->isFinal());
        self::assertTrue($class->implementsInterface(Lock::class));
        foreach (['token' => '?string', 'fencingToken' => '?int', 'key' => 'string'] as $method => $type) {
            $returns = $class->getMethod($method)->getReturnType(); // (string) of it is deprecated on 7.4
            self::assertSame($type, ($returns->allowsNull() ? '?' : '') . $returns->getName(), $method);
        }
        $params = array_map(static fn (\ReflectionParameter $p) => $p->getName(), $class->getConstructor()->getParameters());
        self::assertSame(['dsn', 'key', 'ttl', 'options'], $params);
    }

    // ------------------------------------------------------------ DSN forms

    public function testPlainTcpDsn(): void
    {
        $key = self::key();
        $lock = new Redis('redis://127.0.0.1:' . self::$server->port(), $key, 10.0);
        self::assertSame($key, $lock->key());
        self::assertFalse($lock->isHeld());
        self::assertTrue($lock->acquire(0));
        self::assertSame($lock->token(), self::raw('GET', $key));
        self::assertTrue($lock->release());
        self::assertSame(0, self::raw('EXISTS', $key));
    }

    public function testTheDbInTheDsnIsWhereTheKeyLands(): void
    {
        $key = self::key();
        $lock = new Redis(self::dsn(5), $key, 10.0);
        $other = new Redis(self::dsn(), $key, 10.0);
        self::assertTrue($lock->acquire(0));
        try {
            self::assertSame('OK', self::raw('SELECT', '5'));
            $inDb5 = [self::raw('GET', $key), self::raw('GET', "$key:fence")];
        } finally {
            self::assertSame('OK', self::raw('SELECT', '0'));
        }
        self::assertSame([$lock->token(), (string) $lock->fencingToken()], $inDb5, 'the key and its fence counter are in db 5');
        self::assertSame(0, self::raw('EXISTS', $key), 'nothing in db 0');
        self::assertSame(0, self::raw('EXISTS', "$key:fence"));
        self::assertTrue($other->acquire(0), 'the same key in db 0 is another lock');
        self::assertTrue($other->release());
        self::assertTrue($lock->release());
    }

    /**
     * `/2`, `?db=2`, `/?db=2` and `unix://…?db=2` are one lock in db 2: were
     * one form quietly read as db 0, two hosts configured differently would
     * both hold it.
     */
    public function testEveryFormOfTheDatabaseNumberIsTheSameLock(): void
    {
        WebAssembly::skip('no Unix domain sockets');
        $key = self::key();
        $holder = new Redis(self::dsn(2), $key, 10.0);
        self::assertTrue($holder->acquire(0));
        $base = 'redis://127.0.0.1:' . self::$server->port();
        foreach (["$base?db=2", "$base/?db=2", "$base/2?db=2", 'unix://' . self::$server->socketPath() . '?db=2'] as $dsn) {
            self::assertFalse((new Redis($dsn, $key, 10.0))->acquire(0), "$dsn is the lock in db 2");
        }
        self::assertSame(0, self::raw('EXISTS', $key), 'nothing in db 0');
        self::assertTrue($holder->release());
        $viaQuery = new Redis("$base?db=2", $key, 10.0);
        self::assertTrue($viaQuery->acquire(0));
        try {
            self::assertSame('OK', self::raw('SELECT', '2'));
            self::assertSame($viaQuery->token(), self::raw('GET', $key), '?db=2 put the key in db 2');
        } finally {
            self::assertSame('OK', self::raw('SELECT', '0'));
        }
        self::assertTrue($viaQuery->release());
    }

    public function testRequirepassDsn(): void
    {
        // whatever php.ini says (PHP's default shows 15 characters of each
        // string argument, Debian's php.ini none): every frame in full (PHP 7
        // has no such setting and shows 15 characters)
        if (PHP_VERSION_ID >= 80000) {
            $this->iniSet('zend.exception_string_param_max_len', '1000000');
        }
        // reserved characters, percent-encoded in the DSN
        $server = $this->ownServer(['requirepass' => 'Master@Pw/7x']);
        self::assertStringStartsWith('redis://:Master%40Pw%2F7x@127.0.0.1:', $server->dsn());
        $key = self::key();
        self::assertLockWorksOn($server, $key);

        $port = $server->port();
        foreach (["redis://:Wrong-Pw-1x@127.0.0.1:$port", "redis://127.0.0.1:$port"] as $i => $dsn) {
            self::assertCredentialsRefused($dsn, $key, "requirepass, credentials #$i", 'Wrong-Pw-1x', 'Master@Pw/7x', 'Master%40Pw%2F7x');
        }
        self::assertSame(0, $server->command('EXISTS', $key));
    }

    public function testAclUserDsn(): void
    {
        RedisServer::requireVersion('6.2', "ACL pub/sub channel rules ('&*')");
        // whatever php.ini says (PHP's default shows 15 characters of each
        // string argument, Debian's php.ini none): every frame in full (PHP 7
        // has no such setting and shows 15 characters)
        if (PHP_VERSION_ID >= 80000) {
            $this->iniSet('zend.exception_string_param_max_len', '1000000');
        }
        $server = $this->ownServer(['acl_user' => ['name' => 'cron', 'password' => 'Cron-Pw-9z']]);
        self::assertStringStartsWith('redis://cron:Cron-Pw-9z@127.0.0.1:', $server->dsn());
        $key = self::key();
        self::assertLockWorksOn($server, $key);

        $port = $server->port();
        $wrong = [
            'wrong password' => "redis://cron:Wrong-Pw-1x@127.0.0.1:$port",
            'unknown user' => "redis://nobody:Cron-Pw-9z@127.0.0.1:$port",
        ];
        foreach ($wrong as $what => $dsn) {
            self::assertCredentialsRefused($dsn, $key, "ACL $what", 'Wrong-Pw-1x', 'Cron-Pw-9z');
        }
    }

    public function testUnixSocketDsn(): void
    {
        WebAssembly::skip('no Unix domain sockets');
        $path = self::$server->socketPath();
        $dsn = 'unix://' . $path;
        self::assertSame($dsn, self::$server->dsn());
        $key = self::key();
        $viaSocket = new Redis($dsn, $key, 10.0);
        $viaTcp = new Redis(self::dsn(), $key, 10.0);
        self::assertTrue($viaSocket->acquire(0));
        self::assertSame($viaSocket->token(), self::raw('GET', $key));
        self::assertFalse($viaTcp->acquire(0), 'the same key over TCP is the same lock');
        self::assertTrue($viaSocket->release());
        self::assertTrue($viaTcp->acquire(0));
        self::assertFalse($viaSocket->acquire(0));
        self::assertTrue($viaTcp->release());

        $missing = new Redis('unix://' . $this->controlDir . '/no-such.sock', $key, 10.0);
        [$e, $took] = self::connectionFailure(fn () => $missing->acquire(0), 'missing socket');
        self::assertLessThan(3.0, $took);
    }

    /** @return iterable<string, array{string, array<string, string|false>, bool}> dsn suffix, env, trusted */
    public static function tlsCases(): iterable
    {
        yield 'SSL_CERT_FILE = our CA' => ['', ['SSL_CERT_FILE' => 'CA'], true];
        yield 'no CA of ours: refused' => ['', ['SSL_CERT_FILE' => false, 'SSL_CERT_DIR' => false], false];
        yield '#insecure, no CA' => ['#insecure', ['SSL_CERT_FILE' => false, 'SSL_CERT_DIR' => false], true];
        yield '/#insecure, no CA' => ['/#insecure', ['SSL_CERT_FILE' => false, 'SSL_CERT_DIR' => false], true];
    }

    /**
     * @dataProvider tlsCases
     * @param array<string, string|false> $env
     */
    public function testTlsDsnInAChildProcess(string $suffix, array $env, bool $trusted): void
    {
        $server = $this->ownServer(['tls' => true]);
        $dsn = $server->dsn() . $suffix;
        self::assertStringStartsWith('rediss://127.0.0.1:', $dsn);
        $env = array_map(fn ($v) => $v === 'CA' ? $server->caFile() : $v, $env);
        $key = self::key();

        [$p, $signal] = $this->startHolder(self::lockCode($dsn, $key, 10.0), -1.0, $env, false);
        if (!$trusted) {
            self::assertSame(3, $p->wait(15.0), $p->stdout() . $p->stderr());
            self::assertStringStartsWith('ERROR CronLock\ConnectionException: ', $p->stdout(), 'an unknown CA is refused');
            self::note('TLS without our CA: ' . trim($p->stdout()));
            self::assertSame(0, $server->command('EXISTS', $key));
            return;
        }
        [$token] = self::heldLine($p);
        self::assertSame($token, $server->command('GET', $key), 'the key was set over TLS');
        self::assertStringEndsWith('true', $this->releaseHolder($p, $signal));
        self::assertSame(0, $server->command('EXISTS', $key));
    }

    /**
     * Every new TLS connection's first command must get its answer. Below
     * PHP 8.4, phpredis's check of the stream before each command could
     * block forever, with no timeout, when the TLS 1.3 server's session
     * tickets arrived before that check (php-src GH-10495; see
     * PhpRedisClient::eofCheckMayHangOnTls13()): a race each connect lost
     * about as often as not on PHP 7.4, so 30 fresh connections in a row
     * (each lock object opens its own) hung within a few. The bound only
     * says "does not hang": they take well under a second.
     */
    public function testFreshTlsConnectionsNeverHangOnTheirFirstCommand(): void
    {
        $server = $this->ownServer(['tls' => true]);
        $key = self::key();
        $code = sprintf(<<<'PHP'
            for ($i = 0; $i < 30; $i++) {
                $lock = new \CronLock\Redis(%s, %s . ":$i", 10.0);
                if (!$lock->acquire(0) || !$lock->release()) { echo "FAILED $i\n"; exit(2); }
                unset($lock); // closes its connection
            }
            echo "DONE\n";
            PHP, var_export($server->dsn(), true), var_export($key, true));
        $t0 = microtime(true);
        $p = Proc::start($code, [], ['SSL_CERT_FILE' => $server->caFile()]);
        self::assertSame(0, $p->wait(60.0), $p->stdout() . $p->stderr());
        self::assertSame("DONE\n", $p->stdout());
        self::note(sprintf('30 fresh TLS connections, acquire + release each: %.3f s', microtime(true) - $t0));
    }

    /**
     * One server spelled two ways (localhost, 127.0.0.1, [::ffff:127.0.0.1], /0) is one lock
     * in this process: a second object is busy at once and a wait throws instead of
     * waiting for this process (which would never end with -1).
     */
    public function testTwoSpellingsOfOneServerAreOneLockInThisProcess(): void
    {
        $port = self::$server->port();
        $key = self::key();
        $holder = new Redis("redis://localhost:$port", $key, 10.0);
        self::assertTrue($holder->acquire(0));
        foreach (["redis://127.0.0.1:$port", "redis://[::ffff:127.0.0.1]:$port", "redis://LOCALHOST:$port/0"] as $dsn) {
            $other = new Redis($dsn, $key, 10.0);
            self::assertFalse($other->acquire(0), $dsn);
            try {
                $other->acquire(-1);
                self::fail("$dsn: a wait on this process's own lock returned");
            } catch (\CronLock\LockException $e) {
                self::assertStringContainsString('already held by this process', $e->getMessage(), $dsn);
            }
        }
        self::assertTrue($holder->release());
    }

    /**
     * One server reached through its unix socket and through its port: no DSN comparison
     * can tell, but the key holds the token of the other object of this process, so a
     * second object is busy at once and a wait throws instead of waiting for itself.
     */
    public function testAServerReachedThroughItsSocketAndItsPortIsOneLockInThisProcess(): void
    {
        WebAssembly::skip('no Unix domain sockets');
        $server = $this->ownServer(['unix' => true]);
        $key = self::key();
        $holder = new Redis('unix://' . $server->socketPath(), $key, 10.0);
        self::assertTrue($holder->acquire(0));
        $other = new Redis($server->tcpDsn(), $key, 10.0);
        self::assertFalse($other->acquire(0));
        try {
            $other->acquire(-1);
            self::fail('a wait on this process\'s own lock returned');
        } catch (\CronLock\LockException $e) {
            self::assertStringContainsString('already held by this process', $e->getMessage());
        }
        self::assertTrue($holder->release());
        self::assertTrue($other->acquire(0), 'free once released');
        self::assertTrue($other->release());
    }

    /** Dumping the lock object (a logger's context, a debug print) never shows the password. */
    public function testDumpingTheLockObjectNeverShowsThePassword(): void
    {
        $lock = new Redis("redis://cron:Dump-Pw-7q@127.0.0.1:{$this->deadPort()}", self::key(), 10.0);
        ob_start();
        var_dump($lock);
        $shown = ob_get_clean() . var_export($lock, true) . print_r($lock, true) . print_r((array) $lock, true)
            . var_export(get_object_vars($lock), true);
        self::assertStringNotContainsString('Dump-Pw-7q', $shown);
    }

    public function testServerDownIsAQuickConnectionExceptionWithoutThePassword(): void
    {
        $port = $this->deadPort();
        $lock = new Redis("redis://cron:Down-Pw-5k@127.0.0.1:$port/2", self::key(), 10.0);
        [$e, $took] = self::connectionFailure(fn () => $lock->acquire(0), 'server down');
        self::note(sprintf('server down: %s (%.3f s)', $e->getMessage(), $took));
        self::assertLessThan(3.0, $took);
        self::assertInstanceOf(\CronLock\LockException::class, $e);
        self::assertNoSecret($e, 'Down-Pw-5k');
        self::assertFalse($lock->isHeld());
        self::assertNull($lock->token());

        // waiting does not turn a dead server into "busy" either
        [, $took] = self::connectionFailure(fn () => $lock->acquire(2.0), 'server down, acquire(2.0)');
        self::assertLessThan(3.0, $took);
        self::assertFalse($lock->release(), 'never held');
    }

    public function testConnectTimeoutBoundsTheWholeConnectToASilentServer(): void
    {
        // Accepts TCP connections (the kernel does, into the backlog) but
        // never answers: AUTH and SELECT get no reply.
        $silent = stream_socket_server('tcp://127.0.0.1:0', $errno, $errstr);
        self::assertNotFalse($silent, $errstr);
        $name = stream_socket_get_name($silent, false);
        $port = (int) substr($name, strrpos($name, ':') + 1);
        try {
            $lock = new Redis("redis://cron:Silent-Pw-8w@127.0.0.1:$port/3", self::key(), 10.0, ['connect_timeout' => 0.3]);
            [$e, $took] = self::connectionFailure(fn () => $lock->acquire(0), 'silent server');
            self::note(sprintf('connect_timeout 0.3, silent server: %s after %.3f s', $e->getMessage(), $took));
            self::assertNoSecret($e, 'Silent-Pw-8w');
            self::assertGreaterThanOrEqual(0.25, $took, 'waited about connect_timeout');
            // src/lock/redis/mod.rs: "the connection is opened ... within
            // connect_timeout (TCP connect plus AUTH/SELECT)"
            self::assertLessThan(0.9, $took, 'connect_timeout (0.3 s) bounds TCP connect plus AUTH/SELECT, not each step');
        } finally {
            fclose($silent);
        }
    }

    // -------------------------------------------------------- bad arguments

    /** @return iterable<string, array{string}> */
    public static function malformedDsns(): iterable
    {
        yield 'empty' => [''];
        yield 'http scheme' => ['http://x'];
        yield 'no host' => ['redis://'];
        yield 'port not a number' => ['redis://host:notaport'];
        yield 'NUL byte' => ["redis://127.0.0.1:6379\0/0"];
        // A URL parser strips leading and trailing C0 controls: the NUL check
        // must not be left to it.
        yield 'NUL byte at the end' => ["redis://127.0.0.1:6379\0"];
        yield 'NUL byte at the start' => ["\0redis://127.0.0.1:6379"];
        yield 'NUL byte after the db' => ["redis://127.0.0.1:6379/0\0"];
        yield 'NUL byte in a unix socket path' => ["unix:///tmp/cronlock\0.sock"];
        yield 'no scheme' => ['127.0.0.1:6379'];
        // what the DSN says is never silently dropped
        yield 'two different databases' => ['redis://127.0.0.1:6379/1?db=2'];
        yield 'db given twice' => ['redis://127.0.0.1:6379?db=2&db=2'];
        yield 'unknown query parameter' => ['redis://127.0.0.1:6379?database=2'];
        yield 'password as a TCP query parameter' => ['redis://127.0.0.1:6379?pass=pw'];
        yield 'empty port' => ['redis://127.0.0.1:/0'];
        yield 'fragment on redis://' => ['redis://127.0.0.1:6379#insecure'];
        yield 'fragment on unix://' => ['unix:///tmp/redis.sock#x'];
        yield 'unknown unix:// parameter' => ['unix:///tmp/redis.sock?db=1&timeout=2'];
    }

    /** @dataProvider malformedDsns */
    public function testAMalformedDsnThrowsValueErrorNamingDsn(string $dsn): void
    {
        try {
            new Redis($dsn, 'job', 10.0);
            self::fail('expected ValueError for ' . json_encode($dsn));
        } catch (\ValueError $e) {
            self::assertStringContainsString('$dsn', $e->getMessage());
        }
    }

    public function testAMalformedDsnNeverEchoesItsPassword(): void
    {
        $dsns = [
            'redis://:Dsn-Secret-4u@host:notaport',
            'redis://user:Dsn-Secret-4u@host:notaport/0',
            "redis://:Dsn-Secret-4u@127.0.0.1:63\0" . '79',
            'redis://:Dsn-Secret-4u@127.0.0.1:6379/notadb?x=1',
            'unix://user:Dsn-Secret-4u@/tmp/x.sock',
            'redis://:Dsn-Secret-4u@[::1:6379',
            'redis://:Dsn-Secret-4u@host:99999',
            'redis://:Dsn-Secret-4u@127.0.0.1:6379/notadb',
            'rediss://user:Dsn-Secret-4u@:6379',
        ];
        foreach ($dsns as $dsn) {
            try {
                new Redis($dsn, 'job', 10.0);
                self::fail('expected ValueError for ' . json_encode($dsn));
            } catch (\ValueError $e) {
                self::assertStringContainsString('$dsn', $e->getMessage());
                self::assertStringNotContainsString('Dsn-Secret-4u', $e->getMessage(), json_encode($dsn));
            }
        }
    }

    /** @return iterable<string, array{string}> */
    public static function badKeys(): iterable
    {
        yield 'empty' => [''];
        yield 'NUL byte' => ["job\0x"];
        yield 'not UTF-8' => ["job\xff"];
    }

    /** @dataProvider badKeys */
    public function testABadKeyThrowsValueErrorNamingKey(string $key): void
    {
        $this->expectException(\ValueError::class);
        $this->expectExceptionMessage('$key');
        new Redis(self::dsn(), $key, 10.0);
    }

    /** @return iterable<string, array{float}> */
    public static function badTtls(): iterable
    {
        yield '0' => [0.0];
        yield 'negative' => [-1.0];
        yield 'NAN' => [NAN];
        yield 'INF' => [INF];
        yield '-INF' => [-INF];
        yield 'more than 10 years' => [11 * 365 * 86400.0];
    }

    /** @dataProvider badTtls */
    public function testABadTtlThrowsValueErrorNamingTtl(float $ttl): void
    {
        $this->expectException(\ValueError::class);
        $this->expectExceptionMessage('$ttl');
        new Redis(self::dsn(), 'job', $ttl);
    }

    /** A finite TTL too long to represent is "too long", not "not finite". */
    public function testAHugeFiniteTtlIsReportedAsTooLong(): void
    {
        foreach ([11 * 365 * 86400.0, 1e20, 1e300, PHP_FLOAT_MAX] as $ttl) {
            try {
                new Redis(self::dsn(), 'job', $ttl);
                self::fail("$ttl accepted");
            } catch (\ValueError $e) {
                self::assertStringContainsString('$ttl must be at most 315360000 seconds (10 years)', $e->getMessage(), (string) $ttl);
            }
        }
    }

    public function testABadRenewTtlThrowsValueErrorAndKeepsTheLock(): void
    {
        $key = self::key();
        $lock = new Redis(self::dsn(), $key, 10.0);
        self::assertTrue($lock->acquire(0));
        foreach ([0.0, -2.0, NAN] as $ttl) {
            try {
                $lock->renew($ttl);
                self::fail("renew($ttl) must throw");
            } catch (\ValueError $e) {
                self::assertStringContainsString('$ttl', $e->getMessage());
            }
        }
        self::assertTrue($lock->isHeld());
        self::assertSame($lock->token(), self::raw('GET', $key));
        self::assertTrue($lock->release());
    }

    /** @return iterable<string, array{array<mixed>, class-string<\Throwable>, string}> */
    public static function badOptions(): iterable
    {
        yield 'unknown key' => [['auto_renw' => true], \ValueError::class, '$options'];
        yield 'list instead of keys' => [[true], \ValueError::class, '$options'];
        yield 'auto_renew int' => [['auto_renew' => 1], \TypeError::class, "\$options['auto_renew']"];
        yield 'auto_renew string' => [['auto_renew' => 'yes'], \TypeError::class, "\$options['auto_renew']"];
        yield 'connect_timeout string' => [['connect_timeout' => '1.5'], \TypeError::class, "\$options['connect_timeout']"];
        yield 'read_timeout string' => [['read_timeout' => 'x'], \TypeError::class, "\$options['read_timeout']"];
        yield 'connect_timeout 0' => [['connect_timeout' => 0], \ValueError::class, "\$options['connect_timeout']"];
        yield 'connect_timeout 0.0' => [['connect_timeout' => 0.0], \ValueError::class, "\$options['connect_timeout']"];
        yield 'connect_timeout negative' => [['connect_timeout' => -1.5], \ValueError::class, "\$options['connect_timeout']"];
        yield 'connect_timeout NAN' => [['connect_timeout' => NAN], \ValueError::class, "\$options['connect_timeout']"];
        yield 'read_timeout 0' => [['read_timeout' => 0], \ValueError::class, "\$options['read_timeout']"];
        yield 'read_timeout negative' => [['read_timeout' => -0.1], \ValueError::class, "\$options['read_timeout']"];
    }

    /**
     * @dataProvider badOptions
     * @param array<mixed> $options
     * @param class-string<\Throwable> $class
     */
    public function testBadOptionsThrowNamingTheOption(array $options, string $class, string $needle): void
    {
        try {
            new Redis(self::dsn(), 'job', 10.0, $options);
            self::fail('expected ' . $class);
        } catch (\Throwable $e) {
            self::assertSame($class, get_class($e), $e->getMessage());
            self::assertStringContainsString($needle, $e->getMessage());
        }
    }

    public function testGoodOptionsAreAccepted(): void
    {
        $lock = new Redis(self::dsn(), self::key(), 10.0, ['auto_renew' => false, 'connect_timeout' => 2, 'read_timeout' => 0.5]);
        self::assertTrue($lock->acquire(0));
        self::assertTrue($lock->release());
    }

    // ------------------------------------------------- what is in Redis

    public function testAcquireStoresTheTokenWithTheTtl(): void
    {
        $key = self::key();
        $lock = new Redis(self::dsn(), $key, 7.5);
        self::assertNull($lock->token(), 'no token before acquire');
        self::assertNull($lock->fencingToken());
        self::assertTrue($lock->acquire(0));

        $token = $lock->token();
        self::assertSame($token, self::raw('GET', $key), "the key's value is token()");
        $pttl = self::pttl($key);
        self::assertLessThanOrEqual(7500, $pttl, 'PX = ttl in ms');
        self::assertGreaterThan(6500, $pttl, 'PX = ttl in ms (generous)');
        self::assertMatchesRegularExpression('/^[0-9a-f]{32}:(\d+)@(.+)$/', $token, '<32 hex>:<pid>@<host>');
        preg_match('/^[0-9a-f]{32}:(\d+)@(.+)$/', $token, $m);
        self::assertSame((string) getmypid(), $m[1], 'the holder pid');
        self::assertSame(gethostname(), $m[2], 'the holder host');

        self::assertTrue($lock->release());
        self::assertNull($lock->token(), 'no token after release');
        self::assertSame(0, self::raw('EXISTS', $key));
    }

    public function testTokensAreRandomAndDifferPerAcquire(): void
    {
        $key = self::key();
        $a = new Redis(self::dsn(), $key, 10.0);
        $b = new Redis(self::dsn(), $key, 10.0);
        $randoms = [];
        for ($i = 0; $i < 25; $i++) {
            foreach ([$a, $b] as $lock) {
                self::assertTrue($lock->acquire(0));
                $randoms[] = substr($lock->token(), 0, 32);
                self::assertTrue($lock->release());
            }
        }
        self::assertCount(50, array_unique($randoms), 'a new token for every acquire');
        // 50 tokens of 128 random bits: every hex digit shows up, and about
        // half the bits are set (a counter or a timestamp would not do that).
        $hex = implode('', $randoms);
        self::assertSame('0123456789abcdef', count_chars($hex, 3), 'all 16 hex digits, no others');
        $ones = 0;
        foreach (str_split($hex) as $digit) {
            $ones += substr_count(decbin(hexdec($digit)), '1');
        }
        $ratio = $ones / (strlen($hex) * 4);
        self::assertGreaterThan(0.4, $ratio);
        self::assertLessThan(0.6, $ratio);
    }

    public function testFencingTokensIncreaseAcrossHoldersAndProcesses(): void
    {
        $key = self::key();
        $a = new Redis(self::dsn(), $key, 10.0);
        $b = new Redis(self::dsn(), $key, 10.0);
        $fences = [];

        self::assertTrue($a->acquire(0));
        $fences[] = $a->fencingToken();
        self::assertSame((string) $a->fencingToken(), self::raw('GET', "$key:fence"), 'fencingToken() is the <key>:fence counter');
        self::assertFalse($b->acquire(0));
        self::assertNull($b->fencingToken());
        self::assertSame((string) $a->fencingToken(), self::raw('GET', "$key:fence"), 'a refused acquire does not count');
        self::assertGreaterThan(7 * 86400 * 1000 - 60000, self::pttl("$key:fence"), 'the fence counter expires 7 days after its last use');
        self::assertTrue($a->release());
        self::assertNull($a->fencingToken());

        [$p, $signal] = $this->startHolder(self::lockCode(self::dsn(), $key, 10.0));
        [, $childFence] = self::heldLine($p);
        $fences[] = $childFence;
        self::assertSame((string) $childFence, self::raw('GET', "$key:fence"));
        $this->releaseHolder($p, $signal);

        self::assertTrue($b->acquire(0));
        $fences[] = $b->fencingToken();
        self::assertTrue($b->release());
        self::assertTrue($a->acquire(0));
        $fences[] = $a->fencingToken();
        self::assertSame((string) $a->fencingToken(), self::raw('GET', "$key:fence"));
        self::assertSame($a->fencingToken(), $a->fencingToken(), 'stable while held');
        self::assertTrue($a->acquire(0), 'acquire while held');
        self::assertSame(end($fences), $a->fencingToken(), 'acquire while held hands out no new number');
        self::assertTrue($a->release());

        for ($i = 1; $i < count($fences); $i++) {
            self::assertGreaterThan($fences[$i - 1], $fences[$i], 'strictly increasing: ' . implode(', ', $fences));
        }
        self::assertSame(0, self::raw('EXISTS', $key), 'only the fence counter stays');
        self::assertSame(1, self::raw('EXISTS', "$key:fence"));
        self::assertGreaterThan(0, self::pttl("$key:fence"), 'with a TTL');
    }

    /**
     * No key of cronlock is left without a TTL after release, and a fence
     * counter made anew (expired, or lost in a restart without persistence)
     * starts at the server's clock in µs, above every number handed out.
     */
    public function testFencingTokensIncreaseAcrossTheCountersExpiryAndARestart(): void
    {
        $server = RedisServer::start();
        $fences = [];
        $cycle = function (float $ttl) use ($server, &$fences): void {
            $lock = new Redis($server->dsn(), 'job', $ttl);
            self::assertTrue($lock->acquire(0));
            $fences[] = $lock->fencingToken();
            self::assertTrue($lock->release());
            foreach ($server->command('KEYS', '*') as $left) {
                self::assertGreaterThan(0, $server->command('PTTL', $left), "$left has a TTL");
            }
        };
        $cycle(10.0);
        [$secs, $micros] = $server->command('TIME');
        $now = (int) $secs * 1000000 + (int) $micros;
        self::assertLessThanOrEqual($now, $fences[0]);
        self::assertGreaterThan($now - 60000000, $fences[0], 'a new counter starts at the server clock in µs');
        $cycle(10.0);
        self::assertSame($fences[0] + 1, $fences[1], 'then counts by one');
        $cycle(7200.0);
        self::assertGreaterThan(7200 * 100 * 1000 - 60000, $server->command('PTTL', 'job:fence'), '100 TTLs when that is longer');

        self::assertSame(1, $server->command('PEXPIRE', 'job:fence', '1'));
        usleep(20000);
        self::assertSame(0, $server->command('EXISTS', 'job:fence'), 'expired');
        $cycle(10.0);
        $server->restart(); // empty: nothing was persisted
        self::assertSame(0, $server->command('EXISTS', 'job:fence'), 'lost in the restart');
        $cycle(10.0);
        for ($i = 1; $i < count($fences); $i++) {
            self::assertGreaterThan($fences[$i - 1], $fences[$i], 'strictly increasing: ' . implode(', ', $fences));
        }
        $server->stop();
    }

    /**
     * Issue 21's resource count: per-order locks (1,000 distinct keys, each
     * acquired and released, with its fencing number asked) leave nothing
     * that lives forever: the fence counters stay, each with a TTL, and
     * nothing else does. Counted on a server of our own, so no other test's
     * keys are in it.
     */
    public function testAThousandDistinctLocksLeaveOnlyFenceCountersAndEachHasATtl(): void
    {
        $server = RedisServer::start();
        try {
            for ($order = 1; $order <= 1000; $order++) {
                $lock = new Redis($server->dsn(), "order:$order", 10.0);
                self::assertTrue($lock->acquire(0));
                self::assertIsInt($lock->fencingToken());
                self::assertTrue($lock->release());
            }
            self::assertSame(1000, $server->command('DBSIZE'), 'one fence counter per key, nothing else');
            $withoutTtl = [];
            foreach ($server->command('KEYS', '*') as $left) {
                if ($server->command('PTTL', $left) < 0) {
                    $withoutTtl[] = $left;
                }
            }
            self::assertSame([], $withoutTtl, 'no key without a TTL');
            self::assertSame(1000, count($server->command('KEYS', 'order:*:fence')), 'and each is a fence counter');
        } finally {
            $server->stop();
        }
    }

    /**
     * A connection lives while a lock object that used it does: a worker
     * that locks on many databases or as many users does not pile up
     * connections (and passwords), and a password revoked since is refused
     * to the next object once the objects that logged in with it are gone.
     */
    public function testConnectionsCloseWithTheirLastObjectAndARevokedPasswordIsThenRefused(): void
    {
        $server = RedisServer::start();
        try {
            $clients = fn (): int => count(array_filter(explode("\n", (string) $server->command('CLIENT', 'LIST')), 'strlen'));
            $alone = $clients();
            for ($db = 1; $db <= 12; $db++) {
                $lock = new Redis($server->dsn($db), 'tenant', 10.0);
                self::assertTrue($lock->acquire(0));
                self::assertTrue($lock->release());
                unset($lock);
            }
            self::assertSame($alone, $clients(), '12 databases, one after another: no connection kept');

            self::assertSame('OK', $server->command('ACL', 'SETUSER', 'tenant1', 'on', '>first', '~*', '&*', '+@all'));
            $dsn = 'redis://tenant1:first@127.0.0.1:' . $server->port();
            $a = new Redis($dsn, 'job', 10.0);
            $b = new Redis($dsn, 'other', 10.0);
            self::assertTrue($a->acquire(0));
            self::assertTrue($a->release());
            self::assertSame($alone + 1, $clients(), 'one connection while an object that used it lives');
            self::assertSame('OK', $server->command('ACL', 'SETUSER', 'tenant1', 'resetpass', '>second'));
            unset($a, $b);
            self::assertSame($alone, $clients(), 'closed with the last object');
            try {
                (new Redis($dsn, 'job', 10.0))->acquire(0);
                self::fail('the revoked password logs in again');
            } catch (ConnectionException $e) {
                self::assertStringNotContainsString('first', $e->getMessage());
            }
            self::assertSame(0, $server->command('EXISTS', 'job'));
            $fresh = new Redis('redis://tenant1:second@127.0.0.1:' . $server->port(), 'job', 10.0);
            self::assertTrue($fresh->acquire(0));
            self::assertTrue($fresh->release());
        } finally {
            $server->stop();
        }
    }

    // ------------------------------------------------- expiry and takeover

    public function testAnExpiredLockTakenOverIsNeverTouchedByItsFormerHolder(): void
    {
        $key = self::key();
        $a = new Redis(self::dsn(), $key, 0.3);
        $b = new Redis(self::dsn(), $key, 5.0);
        self::assertTrue($a->acquire(0));
        $aToken = $a->token();
        usleep(500_000);
        self::assertSame(0, self::raw('EXISTS', $key), 'expired after its 0.3 s TTL');
        self::assertTrue($b->acquire(0), 'B takes over the expired lock');
        $bToken = $b->token();
        self::assertNotSame($aToken, $bToken);
        self::assertGreaterThan(0, $b->fencingToken());

        self::assertFalse($a->isHeld(), 'A knows its TTL ran out');
        self::assertFalse($a->renew(60.0), "A must not extend B's key");
        self::assertFalse($a->release(), "A must not delete B's key");
        self::assertFalse($a->isHeld());
        self::assertNull($a->token());

        self::assertSame($bToken, self::raw('GET', $key), "B's key value is unchanged");
        self::assertLessThanOrEqual(5000, self::pttl($key), "B's TTL was not extended by A's renew(60)");
        self::assertTrue($b->isHeld());
        self::assertTrue($b->renew());
        self::assertTrue($b->release());
        self::assertSame(0, self::raw('EXISTS', $key));
    }

    public function testInteropWithAPlainSetNxClient(): void
    {
        $key = self::key();
        $ours = new Redis(self::dsn(), $key, 10.0);

        // They hold it: we are refused, and never delete their value.
        self::assertSame('OK', self::raw('SET', $key, 'other', 'NX', 'PX', '10000'));
        self::assertFalse($ours->acquire(0), 'their SET NX excludes us');
        $t0 = microtime(true);
        self::assertFalse($ours->acquire(0.2));
        self::assertGreaterThanOrEqual(0.19, microtime(true) - $t0);
        self::assertFalse($ours->isHeld());
        self::assertFalse($ours->release());
        self::assertFalse($ours->renew(60.0));
        self::assertSame('other', self::raw('GET', $key));
        self::assertLessThanOrEqual(10000, self::pttl($key), 'their TTL untouched');

        // We hold it: their SET NX fails.
        self::assertSame(1, self::raw('DEL', $key));
        self::assertTrue($ours->acquire(0));
        self::assertNull(self::raw('SET', $key, 'theirs', 'NX', 'PX', '10000'), 'our key excludes their SET NX');
        self::assertSame($ours->token(), self::raw('GET', $key));

        // They overwrite it (as after an expiry): we leave their value alone.
        self::assertSame('OK', self::raw('SET', $key, 'theirs'));
        self::assertFalse($ours->renew(), 'not ours any more');
        self::assertFalse($ours->isHeld());
        self::assertFalse($ours->release());
        self::assertSame('theirs', self::raw('GET', $key));
        self::assertSame(-1, self::pttl($key), 'no TTL was put on their key');

        self::assertFalse($ours->acquire(0), 'still theirs');
        self::assertSame(1, self::raw('DEL', $key));
    }

    public function testReleaseNeverDeletesAValueSetByAnotherClientAfterOursWasTaken(): void
    {
        $key = self::key();
        $ours = new Redis(self::dsn(), $key, 10.0);
        self::assertTrue($ours->acquire(0));
        // Another client deletes and re-takes the key behind our back.
        self::assertSame(1, self::raw('DEL', $key));
        self::assertSame('OK', self::raw('SET', $key, 'other', 'NX', 'PX', '10000'));
        self::assertTrue($ours->isHeld(), 'we cannot know without asking');
        self::assertFalse($ours->release(), 'release finds the key is not ours');
        self::assertSame('other', self::raw('GET', $key));
        self::assertFalse($ours->isHeld());
    }

    public function testRenewSetsTheGivenTtl(): void
    {
        $key = self::key();
        $lock = new Redis(self::dsn(), $key, 10.0);
        self::assertTrue($lock->acquire(0));
        self::assertTrue($lock->renew(2.5));
        $pttl = self::pttl($key);
        self::assertLessThanOrEqual(2500, $pttl, 'renew(2.5) sets PTTL 2500');
        self::assertGreaterThan(2000, $pttl);
        self::assertTrue($lock->renew(30.0));
        self::assertGreaterThan(29000, self::pttl($key), 'renew(30)');
        self::assertTrue($lock->renew());
        $pttl = self::pttl($key);
        self::assertLessThanOrEqual(10000, $pttl, 'renew() goes back to the lock TTL');
        self::assertGreaterThan(9000, $pttl);
        self::assertSame($lock->token(), self::raw('GET', $key), 'renew keeps the token');
        self::assertTrue($lock->release());
    }

    public function testRenewExtendsTheHoldBeyondTheFirstTtl(): void
    {
        $key = self::key();
        $lock = new Redis(self::dsn(), $key, 0.6);
        self::assertTrue($lock->acquire(0));
        for ($i = 0; $i < 6; $i++) {
            usleep(150_000);
            self::assertTrue($lock->renew(), "renew #$i");
        }
        // 0.9 s after acquire, beyond the TTL: held only thanks to renew()
        self::assertTrue($lock->isHeld());
        self::assertSame($lock->token(), self::raw('GET', $key));
        self::assertTrue($lock->release());
    }

    public function testADestroyedLockReleasesItsKey(): void
    {
        $key = self::key();
        $lock = new Redis(self::dsn(), $key, 30.0);
        self::assertTrue($lock->acquire(0));
        self::assertSame(1, self::raw('EXISTS', $key));
        unset($lock);
        self::assertSame(0, self::raw('EXISTS', $key), 'destroying a held lock releases it (no 30 s wait for the TTL)');
    }

    public function testReleasePublishesOnTheReleasedChannel(): void
    {
        $key = self::key();
        $lock = new Redis(self::dsn(), $key, 10.0);
        self::assertTrue($lock->acquire(0));
        $sub = stream_socket_client('tcp://127.0.0.1:' . self::$server->port(), $errno, $errstr, 5.0);
        self::assertNotFalse($sub, $errstr);
        stream_set_timeout($sub, 3);
        $channel = "$key:released";
        fwrite($sub, sprintf("*2\r\n\$9\r\nSUBSCRIBE\r\n\$%d\r\n%s\r\n", strlen($channel), $channel));
        $read = static function () use ($sub): array {
            $lines = [];
            $header = fgets($sub);
            self::assertIsString($header, 'a pub/sub reply within 3 s');
            for ($i = 0, $n = (int) substr($header, 1); $i < $n; $i++) {
                $line = rtrim((string) fgets($sub), "\r\n");
                if ($line[0] === '$') {
                    $line = rtrim((string) fgets($sub), "\r\n");
                }
                $lines[] = $line;
            }
            return $lines;
        };
        self::assertSame(['subscribe', $channel, ':1'], $read());
        self::assertTrue($lock->release());
        self::assertSame(['message', $channel, ''], $read(), 'release() publishes "" on <key>:released');
        fclose($sub);
    }

    public function testAFenceCounterOfTheWrongTypeIsALockExceptionAndLeavesNoKey(): void
    {
        $key = self::key();
        self::assertSame(1, self::raw('HSET', "$key:fence", 'f', 'v'));
        $lock = new Redis(self::dsn(), $key, 10.0);
        try {
            $lock->acquire(0);
            self::fail('expected a LockException');
        } catch (\CronLock\LockException $e) {
            self::assertNotInstanceOf(ConnectionException::class, $e, 'the server answered: not a connection problem');
        }
        self::assertFalse($lock->isHeld());
        self::assertSame(0, self::raw('EXISTS', $key), 'no lock left behind that nobody knows it holds');
        self::raw('DEL', "$key:fence");
    }

    // ------------------------------------------------------------- auto-renew

    public function testAutoRenewKeepsAShortTtlLockHeldUntilRelease(): void
    {
        $key = self::key();
        $lock = new Redis(self::dsn(), $key, 0.5, ['auto_renew' => true]);
        self::assertTrue($lock->acquire(0));
        $acquiredAt = microtime(true);
        $token = $lock->token();

        // Another process tries 1.2 s in: more than twice the TTL.
        $probe = Proc::start('$l = ' . self::lockCode(self::dsn(), $key, 5.0) . ";\n" . <<<'PHP'
            while (microtime(true) < (float) $argv[1]) { usleep(1000); }
            $at = microtime(true);
            printf("%s %.6f\n", $l->acquire(0) ? "GOT" : "BUSY", $at);
            PHP, [sprintf('%.6F', $acquiredAt + 1.2)]);

        $minPttl = PHP_INT_MAX;
        // At least 2 s, and until the probe has reported (a slow start must
        // not make it try after our release).
        while (microtime(true) - $acquiredAt < 2.0 || ($probe->isRunning() && microtime(true) - $acquiredAt < 15.0)) {
            usleep(100_000);
            $pttl = self::pttl($key);
            $minPttl = min($minPttl, $pttl);
            self::assertGreaterThan(0, $pttl, sprintf('PTTL %d at %.2f s', $pttl, microtime(true) - $acquiredAt));
            self::assertSame($token, self::raw('GET', $key));
            self::assertTrue($lock->isHeld());
        }
        self::assertSame(0, $probe->wait(15.0), $probe->stderr());
        self::assertMatchesRegularExpression('/^BUSY /', $probe->stdout(), 'another process cannot acquire an auto-renewed lock');
        $probedAt = (float) explode(' ', trim($probe->stdout()))[1];
        self::assertGreaterThan(0.5, $probedAt - $acquiredAt, 'the probe ran after the first TTL had passed');
        self::note(sprintf('auto_renew ttl 0.5: lowest PTTL seen %d ms over 2 s', $minPttl));

        self::assertTrue($lock->release());
        self::assertSame(0, self::raw('EXISTS', $key));
        usleep(700_000); // several renew periods (ttl/3)
        self::assertSame(0, self::raw('EXISTS', $key), 'no renewal resurrects a released key');
        self::assertFalse($lock->isHeld());
    }

    public function testAutoRenewNoticesATakeoverAndNeverOverwritesIt(): void
    {
        $key = self::key();
        $lock = new Redis(self::dsn(), $key, 0.3, ['auto_renew' => true]);
        self::assertTrue($lock->acquire(0));
        self::assertSame('OK', self::raw('SET', $key, 'intruder'));
        self::waitUntil(fn () => !$lock->isHeld(), 'the renewer finds the key is not ours', 3.0);
        self::assertFalse($lock->renew());
        self::assertFalse($lock->release());
        self::assertSame('intruder', self::raw('GET', $key));
        self::assertSame(-1, self::pttl($key), 'no TTL put on their key');
        self::raw('DEL', $key);
    }

    public function testKillMinus9OfAnAutoRenewingHolderFreesTheKeyWithinOneTtl(): void
    {
        $key = self::key();
        $ttl = 1.0;
        [$p] = $this->startHolder(self::lockCode(self::dsn(), $key, $ttl, ['auto_renew' => true]));
        [$token] = self::heldLine($p);
        usleep(1_500_000);
        self::assertSame($token, self::raw('GET', $key), 'the child renewed past its first TTL');

        self::assertSame(137, $p->kill());
        $killedAt = microtime(true);
        self::assertGreaterThan(0, self::pttl($key), 'precondition: the key outlives its holder for a while');
        self::waitUntil(fn () => self::raw('EXISTS', $key) === 0, 'the key expires', 10.0);
        $gone = microtime(true) - $killedAt;
        self::note(sprintf('key gone %.3f s after kill -9 (ttl %.1f s)', $gone, $ttl));
        self::assertLessThan($ttl + 1.0, $gone, 'at most one TTL (+ margin) after kill -9');
        $other = new Redis(self::dsn(), $key, 5.0);
        self::assertTrue($other->acquire(0));
        self::assertTrue($other->release());
    }

    /**
     * Ctrl-C (or kill -INT -PGID, a terminal hang-up, timeout(1)'s TERM) reaches every
     * process of the job's group. A holder whose handler lets the job finish must stay
     * the holder: whatever renews for it (the polyfill's helper process) goes on until the
     * holder releases or dies.
     */
    public function testJobControlSignalsToTheHoldersProcessGroupDoNotStopItsRenewals(): void
    {
        if (!function_exists('pcntl_signal') || !function_exists('posix_kill')) {
            self::markTestSkipped('needs pcntl and posix');
        }
        $key = self::key();
        $ttl = 0.6;
        $stop = $this->controlDir . '/stop-' . bin2hex(random_bytes(4));
        $code = '$lock = ' . self::lockCode(self::dsn(), $key, $ttl, ['auto_renew' => true]) . ";\n" . <<<'PHP'
            foreach ([SIGINT, SIGTERM, SIGHUP, SIGQUIT] as $signal) {
                pcntl_signal($signal, function ($s) { echo "SIGNAL $s\n"; });
            }
            if (!$lock->acquire(0)) { echo "BUSY\n"; exit(2); }
            echo "HELD ", $lock->token(), "\n";
            while (!file_exists($argv[1])) { usleep(1000); pcntl_signal_dispatch(); }
            printf("RELEASED %s\n", var_export($lock->release(), true));
            PHP;
        $p = Proc::start($code, [$stop]);
        $token = substr($p->waitForLine('HELD', 15.0, 'stdout'), 5);
        $group = array_merge([$p->pid()], self::descendants($p->pid()));
        foreach ([SIGINT, SIGTERM, SIGHUP, SIGQUIT] as $signal) {
            foreach ($group as $pid) {
                posix_kill($pid, $signal);
            }
        }
        $other = new Redis(self::dsn(), $key, 5.0);
        $until = microtime(true) + 5 * $ttl;
        while (microtime(true) < $until) {
            self::assertFalse($other->acquire(0), 'the holder still runs its job: nobody else may take the key');
            usleep(50_000);
        }
        self::assertSame($token, self::raw('GET', $key), 'still the holder\'s key after five TTLs');
        touch($stop);
        $p->wait();
        self::assertStringContainsString('RELEASED true', $p->stdout(), $p->stdout() . $p->stderr());
        self::assertSame(4, substr_count($p->stdout(), 'SIGNAL '), 'the holder saw each signal: ' . $p->stdout());
    }

    /**
     * A pcntl_fork() worker that outlives the job (a daemonised child) keeps nothing
     * alive and holds nothing up: destroying the parent's auto-renewing lock object
     * returns at once.
     */
    public function testDestroyingAnAutoRenewingLockDoesNotWaitForALivingForkChild(): void
    {
        if (!function_exists('pcntl_fork')) {
            self::markTestSkipped('needs pcntl_fork()');
        }
        $key = self::key();
        $stop = $this->controlDir . '/stop-' . bin2hex(random_bytes(4));
        $code = '$lock = ' . self::lockCode(self::dsn(), $key, 30.0, ['auto_renew' => true]) . ";\n" . <<<'PHP'
            $child = 0;
            cron_guard(function () use (&$child, $argv) {
                $child = pcntl_fork();
                if ($child === 0) {
                    while (!file_exists($argv[1])) { usleep(10000); }
                    exit(0);
                }
            }, $lock);
            echo "RELEASED\n";
            unset($lock);
            echo "DESTROYED\n";
            touch($argv[1]);
            pcntl_waitpid($child, $status);
            PHP;
        $p = Proc::start($code, [$stop]);
        try {
            $p->waitForLine('DESTROYED', 20.0, 'stdout');
        } finally {
            touch($stop);
        }
        self::assertSame(0, $p->wait(), $p->stdout() . $p->stderr());
        self::assertSame(0, self::raw('EXISTS', $key), 'released');
    }

    /**
     * A stopped holder (SIGSTOP, Ctrl-Z) renews nothing: its auto-renewed key expires
     * within one TTL, as a holder that hangs must not keep every other run out for ever.
     */
    public function testAStoppedAutoRenewingHolderLetsItsKeyExpire(): void
    {
        if (!function_exists('posix_kill')) {
            self::markTestSkipped('needs posix_kill()');
        }
        $key = self::key();
        $ttl = 0.6;
        [$p, $signal] = $this->startHolder(self::lockCode(self::dsn(), $key, $ttl, ['auto_renew' => true]));
        usleep(1_000_000);
        self::assertSame(1, self::raw('EXISTS', $key), 'renewed past its first TTL');
        posix_kill($p->pid(), SIGSTOP);
        try {
            self::waitUntil(fn () => self::raw('EXISTS', $key) === 0, 'the stopped holder\'s key expires', 10.0);
        } finally {
            posix_kill($p->pid(), SIGCONT);
        }
        touch($signal);
        $p->wait();
        self::assertStringContainsString('RELEASED', $p->stdout(), $p->stdout() . $p->stderr());
    }

    /** @return list<int> the pids of every descendant of $pid, from /proc */
    private static function descendants(int $pid): array
    {
        $parents = [];
        foreach (glob('/proc/[0-9]*/stat') ?: [] as $stat) {
            $line = @file_get_contents($stat);
            if ($line !== false && preg_match('/\) \S+ (\d+)/', $line, $m)) {
                $parents[(int) basename(dirname($stat))] = (int) $m[1];
            }
        }
        $found = [];
        $todo = [$pid];
        while ($todo) {
            $parent = array_pop($todo);
            foreach ($parents as $child => $ppid) {
                if ($ppid === $parent) {
                    $found[] = $child;
                    $todo[] = $child;
                }
            }
        }
        return $found;
    }

    // ------------------------------------------------------ server trouble

    public function testAKilledServerMakesReleaseAndRenewThrowQuicklyAndARestartedOneWorks(): void
    {
        $server = $this->ownServer();
        $dsn = $server->dsn();
        $released = new Redis($dsn, 'a', 10.0);
        $renewed = new Redis($dsn, 'b', 10.0);
        $auto = new Redis($dsn, 'auto', 0.6, ['auto_renew' => true]);
        self::assertTrue($released->acquire(0));
        self::assertTrue($renewed->acquire(0));
        self::assertTrue($auto->acquire(0));
        $server->kill();

        // src/lock/redis/mod.rs: a failed release throws ConnectionException and
        // forgets the lock (the key expires by its TTL).
        [$e, $took] = self::connectionFailure(fn () => $released->release(), 'release() with the server dead');
        self::note(sprintf('release() on a dead server: %s (%.3f s)', $e->getMessage(), $took));
        self::assertLessThan(3.0, $took);
        self::assertFalse($released->isHeld(), 'a failed release forgets the lock');
        self::assertFalse($released->release(), 'and the next release is a plain false');

        // A failed renew throws ConnectionException; the lock stays held as
        // far as we know, until its TTL runs out.
        [$e, $took] = self::connectionFailure(fn () => $renewed->renew(), 'renew() with the server dead');
        self::assertLessThan(3.0, $took);
        self::assertTrue($renewed->isHeld(), 'still ours until the TTL runs out');

        [, $took] = self::connectionFailure(fn () => (new Redis($dsn, 'c', 10.0))->acquire(0), 'acquire() with the server dead');
        self::assertLessThan(3.0, $took);

        // The auto-renewer cannot renew: the lock is lost once its TTL ran
        // out, and a lost lock's release() is a plain false.
        self::waitUntil(fn () => !$auto->isHeld(), 'the auto-renewed lock is lost after its TTL', 5.0);
        self::assertFalse($auto->release());

        $server->restart(); // empty: nothing was persisted
        self::assertFalse($renewed->renew(), 'the key is gone after the restart: not ours any more');
        self::assertFalse($renewed->isHeld());
        self::assertTrue($released->acquire(0), 'reconnects after the restart');
        self::assertSame($released->token(), $server->command('GET', 'a'));
        $fresh = new Redis($dsn, 'b', 10.0);
        self::assertTrue($fresh->acquire(0));
        self::assertTrue($fresh->release());
        self::assertTrue($released->release());
    }

    public function testReadTimeoutWhenTheServerStallsIsAConnectionException(): void
    {
        $server = $this->ownServer();
        $holder = new Redis($server->dsn(), 'held', 10.0, ['read_timeout' => 0.3]);
        self::assertTrue($holder->acquire(0));
        $lock = new Redis($server->dsn(), 'job', 10.0, ['read_timeout' => 0.3]);
        self::assertSame('OK', $server->command('CLIENT', 'PAUSE', '10000'));

        // No answer to the connect's PING within connect_timeout (1 s); a
        // command on an open connection: read_timeout, then one retry.
        [$e, $took] = self::connectionFailure(fn () => $lock->acquire(0), 'acquire() on a paused server');
        self::note(sprintf('read_timeout 0.3 s, paused server: %s after %.3f s', $e->getMessage(), $took));
        self::assertGreaterThanOrEqual(0.9, $took, 'waited about connect_timeout');
        self::assertLessThan(3.0, $took, 'gave up long before the 10 s pause ended');
        self::assertFalse($lock->isHeld());

        [, $took] = self::connectionFailure(fn () => $holder->renew(), 'renew() on a paused server');
        self::assertLessThan(3.0, $took);
        self::assertTrue($holder->isHeld(), 'a renew that timed out keeps the lock until its TTL');
        // The server stays paused; tearDown kills it.
    }

    // ---------------------------------------------------------------- waiting

    public function testAWaiterGetsTheLockPromptlyAfterTheHolderProcessReleases(): void
    {
        $key = self::key();
        [$p] = $this->startHolder(self::lockCode(self::dsn(), $key, 10.0), 0.3);
        $lock = new Redis(self::dsn(), $key, 10.0);
        $t0 = microtime(true);
        $got = $lock->acquire(5.0);
        $acquiredAt = microtime(true);
        self::assertTrue($got, $p->stdout() . $p->stderr());
        $line = $p->waitForLine('RELEASED', 10.0, 'stdout');
        self::assertMatchesRegularExpression('/^RELEASED [0-9.]+ true$/', $line);
        $handoff = $acquiredAt - (float) explode(' ', $line)[1];
        self::note(sprintf('acquire(5): waited %.3f s, hand-off %.2f ms after the holder released', $acquiredAt - $t0, $handoff * 1000));
        self::assertGreaterThan(-0.005, $handoff, 'acquired before the holder released?');
        self::assertLessThan(1.0, $handoff);
        self::assertSame(0, $p->wait());
        self::assertSame($lock->token(), self::raw('GET', $key));
        self::assertTrue($lock->release());
    }

    public function testAWaiterGetsTheLockWhenTheHoldersKeyExpires(): void
    {
        $key = self::key();
        $lock = new Redis(self::dsn(), $key, 10.0);

        // A plain client's key: expires without any publish.
        self::assertSame('OK', self::raw('SET', $key, 'crashed', 'PX', '800'));
        $t0 = microtime(true);
        self::assertTrue($lock->acquire(5.0));
        $waited = microtime(true) - $t0;
        self::note(sprintf('expiry of a plain key (PX 800) -> waiter holds after %.3f s', $waited));
        self::assertGreaterThan(0.6, $waited, 'not before the key expired');
        self::assertLessThan(0.8 + 1.0, $waited, 'soon after the key expired');
        self::assertTrue($lock->release());

        // A cronlock holder killed with -9: nobody releases, its key expires.
        [$p] = $this->startHolder(self::lockCode(self::dsn(), $key, 0.8));
        self::assertSame(137, $p->kill());
        $left = self::pttl($key) / 1000;
        $t0 = microtime(true);
        self::assertTrue($lock->acquire(5.0));
        $waited = microtime(true) - $t0;
        self::note(sprintf('kill -9 of a holder with %.3f s left -> waiter holds after %.3f s', $left, $waited));
        self::assertLessThan(max($left, 0.0) + 1.0, $waited);
        self::assertTrue($lock->release());
    }

    public function testAWaiterGetsTheLockWhenAnotherClientDeletesTheKeyWithoutPublishing(): void
    {
        $key = self::key();
        self::assertSame('OK', self::raw('SET', $key, 'no-ttl-holder'));
        $lock = new Redis(self::dsn(), $key, 10.0, ['read_timeout' => 0.2]);

        // No TTL and no publish: the waiter must poll, and waiting longer
        // than read_timeout is no error.
        $t0 = microtime(true);
        self::assertFalse($lock->acquire(0.6));
        self::assertGreaterThanOrEqual(0.59, microtime(true) - $t0);

        $deleter = Proc::start(sprintf(<<<'PHP'
            usleep(300_000);
            $c = stream_socket_client('tcp://127.0.0.1:%d');
            $at = microtime(true);
            fwrite($c, "*2\r\n\$3\r\nDEL\r\n\$%d\r\n%s\r\n");
            echo trim(fgets($c)), sprintf(" %%.6f\n", $at);
            PHP, self::$server->port(), strlen($key), $key));
        self::assertTrue($lock->acquire(5.0));
        $acquiredAt = microtime(true);
        self::assertSame(0, $deleter->wait(10.0), $deleter->stderr());
        [$reply, $deletedAt] = explode(' ', trim($deleter->stdout()));
        self::assertSame(':1', $reply);
        $handoff = $acquiredAt - (float) $deletedAt;
        self::note(sprintf('DEL without publish -> waiter holds %.1f ms later', $handoff * 1000));
        self::assertLessThan(1.0, $handoff);
        self::assertTrue($lock->release());
    }

    // ------------------------------------------------------------------ fork

    /** @return iterable<string, array{bool, bool}> tls, auto_renew */
    public static function forkCases(): iterable
    {
        yield 'plain' => [false, false];
        yield 'auto_renew' => [false, true];
        yield 'TLS + auto_renew' => [true, true];
    }

    /** @dataProvider forkCases */
    public function testAForkedChildNeverReleasesAndTheParentKeepsItsConnection(bool $tls, bool $autoRenew): void
    {
        WebAssembly::skip('no pcntl_fork()');
        $server = $tls ? $this->ownServer(['tls' => true]) : self::$server;
        $env = $tls ? ['SSL_CERT_FILE' => $server->caFile()] : [];
        $key = self::key();
        $ttl = $autoRenew ? 0.9 : 10.0;
        $step = $this->controlDir . '/step';
        $code = '$lock = ' . self::lockCode($server->dsn(), $key, $ttl, ['auto_renew' => $autoRenew]) . ";\n" . <<<'PHP'
            $step = $argv[1];
            if (!$lock->acquire(0)) { echo "BUSY\n"; exit(2); }
            echo "HELD ", $lock->token(), "\n";
            $pid = pcntl_fork();
            if ($pid === -1) { echo "FORK FAILED\n"; exit(3); }
            if ($pid === 0) {
                $seen = [
                    'held' => $lock->isHeld(),
                    'token' => $lock->token(),
                    'fence' => $lock->fencingToken(),
                    'release' => $lock->release(),
                    'renew' => $lock->renew(),
                    'acquire' => $lock->acquire(0),
                ];
                echo "CHILD ", json_encode($seen), "\n";
                usleep(400_000); // outlive a renew period of the parent
                exit(0); // destructors and request shutdown run
            }
            pcntl_waitpid($pid, $status);
            echo "REAPED ", pcntl_wexitstatus($status), " held=", var_export($lock->isHeld(), true), "\n";
            while (!file_exists("$step.1")) { usleep(1000); }
            echo "PARENT renew=", var_export($lock->renew(5.0), true), " held=", var_export($lock->isHeld(), true), "\n";
            while (!file_exists("$step.2")) { usleep(1000); }
            echo "PARENT release=", var_export($lock->release(), true), "\n";
            PHP;
        $p = Proc::start($code, [$step], $env);
        $token = substr($p->waitForLine('HELD', 15.0, 'stdout'), 5);
        $reaped = $p->waitForLine('REAPED', 15.0, 'stdout');
        $out = $p->stdout() . $p->stderr();
        self::assertSame('REAPED 0 held=true', $reaped, $out);
        $child = json_decode(substr($p->waitForLine('CHILD', 1.0, 'stdout'), 6), true);
        self::assertSame(
            ['held' => false, 'token' => null, 'fence' => null, 'release' => false, 'renew' => false, 'acquire' => false],
            $child,
            'in a fork child the lock is not held and release()/renew() do nothing',
        );
        self::assertSame($token, $server->command('GET', $key), "the child's exit left the parent's key alone");
        if ($autoRenew) {
            usleep(1_000_000); // beyond the TTL: only the parent's renewer keeps the key
            self::assertSame($token, $server->command('GET', $key), "the parent's renewer still works after the fork");
        }

        touch("$step.1");
        self::assertSame('PARENT renew=true held=true', $p->waitForLine('PARENT renew', 10.0, 'stdout'), $p->stdout() . $p->stderr());
        if (!$autoRenew) {
            // (an auto-renewer would set the lock's TTL again at its next tick)
            self::assertGreaterThan(4000, self::pttl($key, $server), "the parent's renew(5) went through");
        }
        self::assertSame($token, $server->command('GET', $key));
        touch("$step.2");
        self::assertSame('PARENT release=true', $p->waitForLine('PARENT release', 10.0, 'stdout'));
        self::assertSame(0, $p->wait(15.0), $p->stdout() . $p->stderr());
        self::assertSame(0, $server->command('EXISTS', $key));
    }

    /**
     * The extension's renewer is a thread of the holder, which a fork child
     * does not have: `kill -9` of the holder stops the renewals even while a
     * child it forked lives on (cronlock/polyfill: its helper process checks
     * that the process that took the lock is still there).
     */
    public function testKillMinus9OfAnAutoRenewingHolderFreesTheKeyWhileItsForkChildLives(): void
    {
        WebAssembly::skip('no pcntl_fork()');
        $key = self::key();
        $ttl = 1.0;
        $code = '$lock = ' . self::lockCode(self::dsn(), $key, $ttl, ['auto_renew' => true]) . ";\n" . <<<'PHP'
            if (!$lock->acquire(0)) { echo "BUSY\n"; exit(2); }
            $pid = pcntl_fork();
            if ($pid === -1) { echo "FORK FAILED\n"; exit(3); }
            if ($pid === 0) {
                fclose(STDOUT); // the test's pipes are not the child's to keep open
                fclose(STDERR);
                sleep(60); // outlives the test, which kills it
                exit(0);
            }
            echo "HELD ", $lock->token(), " ", $pid, "\n";
            sleep(60);
            PHP;
        $p = Proc::start($code);
        $line = $p->waitForLine('HELD', 15.0, 'stdout');
        [, $token, $childPid] = explode(' ', $line);
        try {
            usleep(1_500_000);
            self::assertSame($token, self::raw('GET', $key), 'renewed past its first TTL');
            $killedAt = microtime(true);
            self::assertSame(137, $p->kill());
            self::assertTrue(self::processAlive((int) $childPid), 'precondition: the fork child still lives');
            self::waitUntil(fn () => self::raw('EXISTS', $key) === 0, 'the key expires while the fork child lives', 10.0);
            $gone = microtime(true) - $killedAt;
            self::note(sprintf('key gone %.3f s after kill -9 of the holder, its fork child alive (ttl %.1f s)', $gone, $ttl));
            self::assertLessThan($ttl + 1.0, $gone, 'at most one TTL (+ margin) after kill -9');
            self::assertTrue(self::processAlive((int) $childPid), 'the fork child lived all along');
        } finally {
            posix_kill((int) $childPid, SIGKILL);
        }
    }

    // ----------------------------------------------------------- contention

    public function testEightProcessesIncrementARedisCounterExactlyWithIncreasingFences(): void
    {
        $key = self::key();
        $counter = "$key:counter";
        $go = $this->controlDir . '/go';
        $code = self::rawClientCode() . '$lock = ' . self::lockCode(self::dsn(), $key, 5.0) . ";\n" . <<<'PHP'
            [, $counter, $go] = $argv;
            $raw('PING'); // connect before the race, not inside the first locked section
            echo "READY\n";
            while (!file_exists($go)) { usleep(500); }
            $fences = [];
            for ($i = 0; $i < 50; $i++) {
                if (!$lock->acquire(10.0)) { echo "ACQUIRE FAILED\n"; exit(3); }
                $fences[] = $lock->fencingToken();
                $n = (int) $raw('GET', $counter);
                usleep(100); // widen the window a missing lock would lose updates in
                $raw('SET', $counter, (string) ($n + 1));
                if (!$lock->release()) { echo "RELEASE FAILED\n"; exit(4); }
            }
            echo "FENCES ", implode(',', $fences), "\n";
            PHP;
        $procs = Proc::startMany(8, $code, [$counter, $go], 'READY');
        $t0 = microtime(true);
        touch($go);
        $all = [];
        foreach ($procs as $p) {
            self::assertSame(0, $p->wait(60.0), $p->stdout() . $p->stderr());
            $fences = array_map('intval', explode(',', substr($p->waitForLine('FENCES', 1.0, 'stdout'), 7)));
            self::assertCount(50, $fences);
            for ($i = 1; $i < 50; $i++) {
                self::assertGreaterThan($fences[$i - 1], $fences[$i], 'increasing within a process');
            }
            array_push($all, ...$fences);
        }
        self::note(sprintf('8 processes x 50 increments of a Redis counter: %.3f s', microtime(true) - $t0));
        self::assertSame('400', self::raw('GET', $counter), 'every increment happened under the lock');
        self::assertCount(400, array_unique($all), 'every acquire got its own fencing token');
        self::assertSame((string) max($all), self::raw('GET', "$key:fence"));
        self::assertSame(0, self::raw('EXISTS', $key));
    }
}

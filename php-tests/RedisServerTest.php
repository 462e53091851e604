<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\Tests\Support\Proc;
use CronLock\Tests\Support\RedisServer;
use CronLock\Tests\Support\WebAssembly;
use PHPUnit\Framework\TestCase;

/** The test helpers themselves: throw-away redis servers and child processes. */
final class RedisServerTest extends TestCase
{
    public function testPlainServerAnswersAndStopLeavesNoProcess(): void
    {
        $redis = RedisServer::start();
        $pid = $redis->pid();

        self::assertSame('PONG', $redis->command('PING'));
        self::assertSame('OK', $redis->command('SET', 'k', "bin\r\nary\0"));
        self::assertSame("bin\r\nary\0", $redis->command('GET', 'k'));
        self::assertNull($redis->command('GET', 'missing'));
        self::assertSame(2, $redis->command('RPUSH', 'l', 'a', 'b'));
        self::assertSame(['a', 'b'], $redis->command('LRANGE', 'l', '0', '-1'));
        self::assertSame("redis://127.0.0.1:{$redis->port()}", $redis->dsn());
        self::assertSame("redis://127.0.0.1:{$redis->port()}/3", $redis->dsn(3));
        self::assertSame(['save', ''], $redis->command('CONFIG', 'GET', 'save'));

        $redis->stop();
        self::assertFalse($redis->isRunning());
        self::assertProcessGone($pid);
    }

    public function testErrorReplyThrows(): void
    {
        $redis = RedisServer::start();
        $this->expectException(\RuntimeException::class);
        $this->expectExceptionMessage('Redis error: ERR unknown command');
        $redis->command('NO-SUCH-COMMAND');
    }

    public function testRequirepass(): void
    {
        $redis = RedisServer::start(['requirepass' => 'p@ss/word']);
        self::assertSame('PONG', $redis->command('PING'));
        self::assertSame("redis://:p%40ss%2Fword@127.0.0.1:{$redis->port()}", $redis->dsn());
        self::assertSame('NOAUTH', self::firstWord(self::rawCommand($redis->port(), 'GET', 'k')));
    }

    public function testAclUser(): void
    {
        RedisServer::requireVersion('6.2', "ACL pub/sub channel rules ('&*')");
        $redis = RedisServer::start(['acl_user' => ['name' => 'cron', 'password' => 'secret']]);
        self::assertSame("redis://cron:secret@127.0.0.1:{$redis->port()}", $redis->dsn());
        self::assertSame('OK', $redis->command('AUTH', 'cron', 'secret'));
        self::assertSame('cron', $redis->command('ACL', 'WHOAMI'));
        self::assertSame('WRONGPASS', self::firstWord(self::rawCommand($redis->port(), 'AUTH', 'cron', 'nope')));
    }

    public function testUnixSocket(): void
    {
        WebAssembly::skip('no Unix domain sockets');
        $redis = RedisServer::start(['unix' => true]);
        $path = $redis->socketPath();
        self::assertNotNull($path);
        self::assertSame("unix://$path", $redis->dsn());
        self::assertSame(0700, fileperms($path) & 0777);

        $sock = stream_socket_client("unix://$path", $errno, $errstr, 2.0);
        self::assertNotFalse($sock, $errstr);
        fwrite($sock, "PING\r\n");
        self::assertSame("+PONG\r\n", fgets($sock));
        fclose($sock);

        self::assertSame('PONG', $redis->command('PING')); // TCP still on
    }

    public function testTls(): void
    {
        $redis = RedisServer::start(['tls' => true]);
        self::assertSame("rediss://127.0.0.1:{$redis->port()}", $redis->dsn());
        self::assertFileExists($redis->caFile());
        self::assertSame('PONG', $redis->command('PING')); // verified against caFile()

        // The certificate also verifies for "localhost" through the CA file.
        $ctx = stream_context_create(['ssl' => ['cafile' => $redis->caFile(), 'peer_name' => 'localhost']]);
        $sock = stream_socket_client("tls://127.0.0.1:{$redis->port()}", $errno, $errstr, 2.0, STREAM_CLIENT_CONNECT, $ctx);
        self::assertNotFalse($sock, $errstr);
        fwrite($sock, "PING\r\n");
        self::assertSame("+PONG\r\n", fgets($sock));
        fclose($sock);

        // Plain TCP is off: a plaintext PING gets no PONG.
        self::assertNotSame("+PONG\r\n", self::rawCommand($redis->port(), 'PING'));
    }

    public function testKillAndRestartOnSamePort(): void
    {
        $redis = RedisServer::start();
        $port = $redis->port();
        $pid = $redis->pid();
        $redis->command('SET', 'k', 'v');

        $redis->kill();
        self::assertProcessGone($pid);
        try {
            $redis->command('PING');
            self::fail('a killed server must not answer');
        } catch (\RuntimeException $e) {
            self::assertStringContainsString('redis', $e->getMessage());
        }

        $redis->restart();
        self::assertSame($port, $redis->port());
        self::assertNotSame($pid, $redis->pid());
        self::assertSame('PONG', $redis->command('PING'));
        self::assertNull($redis->command('GET', 'k'), 'nothing is persisted');
    }

    public function testDestructorStopsServer(): void
    {
        $redis = RedisServer::start();
        $pid = $redis->pid();
        unset($redis);
        self::assertProcessGone($pid);
    }

    public function testForkedChildDoesNotStopParentsServer(): void
    {
        if (!function_exists('pcntl_fork')) {
            self::markTestSkipped('pcntl not loaded');
        }
        $redis = RedisServer::start();
        $child = pcntl_fork();
        if ($child === 0) {
            // Runs destructors and shutdown functions on the way out.
            exit(0);
        }
        pcntl_waitpid($child, $status);
        self::assertSame('PONG', $redis->command('PING'));
    }

    /**
     * @group extension-only
     * Needs the extension: asserts extension_loaded() in the child.
     */
    public function testProcHelperRunsChildrenWithTheExtension(): void
    {
        $p = Proc::run('echo extension_loaded("cronlock") ? "loaded" : "missing"; fwrite(STDERR, "err line\n"); exit(3);');
        self::assertSame('loaded', $p->stdout());
        self::assertSame("err line\n", $p->stderr());
        self::assertSame(3, $p->exitCode());

        $bg = Proc::startBackground('echo "ready ", getmypid(), "\n"; sleep(30);');
        self::assertSame('ready ' . $bg->pid(), $bg->waitForLine('ready'));
        self::assertTrue($bg->isRunning());
        self::assertSame(128 + 9, $bg->kill());
        self::assertSame(9, $bg->termSignal());
        self::assertProcessGone($bg->pid());
    }

    /**
     * @runInSeparateProcess
     * @group extension-only
     * Needs the extension: asserts extension_loaded().
     */
    public function testSeparateProcessChildrenLoadTheExtension(): void
    {
        self::assertTrue(extension_loaded('cronlock'));
        self::assertTrue(extension_loaded('pcntl'), 'Debian conf.d must still be scanned');
        self::assertSame('PONG', RedisServer::start()->command('PING'));
    }

    public function testProcWaitForLineFailsWithOutputWhenChildExits(): void
    {
        $p = Proc::start('echo "something else\n";');
        try {
            $p->waitForLine('never printed', 5.0);
            self::fail('waitForLine must throw');
        } catch (\RuntimeException $e) {
            self::assertStringContainsString('exited (0)', $e->getMessage());
            self::assertStringContainsString('something else', $e->getMessage());
        }
    }

    private static function assertProcessGone(?int $pid): void
    {
        self::assertNotNull($pid);
        // The server's parent is init, not this process (tests/redis-harness
        // started it): dead means no /proc entry, or a zombie init has not
        // reaped yet.
        $stat = @file_get_contents("/proc/$pid/stat");
        self::assertTrue($stat === false || substr($stat, strrpos($stat, ')') + 2, 1) === 'Z', "process $pid still runs: $stat");
    }

    /** One inline command on a fresh, unauthenticated plain-TCP connection. */
    private static function rawCommand(int $port, string ...$args): string
    {
        $sock = stream_socket_client("tcp://127.0.0.1:$port", $errno, $errstr, 2.0);
        self::assertNotFalse($sock, $errstr);
        stream_set_timeout($sock, 2);
        fwrite($sock, implode(' ', $args) . "\r\n");
        $line = (string) fgets($sock);
        fclose($sock);
        return $line;
    }

    private static function firstWord(string $reply): string
    {
        return explode(' ', ltrim($reply, '-+'))[0];
    }
}

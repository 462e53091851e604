<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\LockException;
use CronLock\Redis;
use CronLock\Tests\Support\RedisServer;
use PHPUnit\Framework\TestCase;

/**
 * What a Redlock list of DSNs must be: at least two masters, no server
 * twice, whether the DSNs show it (refused at construction) or only a
 * connection does (refused by the first acquire).
 *
 * @group extension-only
 * cronlock/polyfill talks to one Redis server only (no Redlock).
 */
final class RedlockMasterListTest extends TestCase
{
    /** @var list<RedisServer> */
    private array $servers = [];

    protected function tearDown(): void
    {
        foreach ($this->servers as $server) {
            $server->stop();
        }
        $this->servers = [];
        parent::tearDown();
    }

    /** @return iterable<string, array{list<string>, string}> */
    public static function oneServerSpelledTwice(): iterable
    {
        yield 'localhost' => [['redis://127.0.0.1:%d', 'redis://localhost:%d', 'redis://127.0.0.2:%d'], 'twice (also as localhost:%d)'];
        yield 'IPv4-mapped IPv6' => [['redis://127.0.0.2:%d', 'redis://127.0.0.1:%d', 'redis://[::ffff:127.0.0.1]:%d'], 'twice (also as '];
        yield 'IPv6 loopback' => [['redis://[::1]:%d', 'redis://127.0.0.1:%d'], 'twice (also as 127.0.0.1:%d)'];
        yield 'IPv4-mapped, any spelling' => [['redis://[::ffff:7f00:2]:%d', 'redis://127.0.0.2:%d'], 'twice'];
        yield 'upper-case localhost' => [['redis://LocalHost:%d', 'redis://127.0.0.1:%d'], 'twice'];
        yield 'databases' => [['redis://127.0.0.1:%d/0', 'redis://127.0.0.1:%d/1', 'redis://127.0.0.1:%d/2'], 'twice (also as 127.0.0.1:%d/1)'];
        yield 'default database and /0' => [['redis://127.0.0.1:%d', 'redis://127.0.0.1:%d/0'], 'twice'];
    }

    /**
     * F08 / rev9 F12: aliases of one address, or databases of one server,
     * were taken as independent masters: one server made a majority.
     *
     * @dataProvider oneServerSpelledTwice
     * @param list<string> $dsns
     */
    public function testOneServerSpelledTwiceIsAValueError(array $dsns, string $says): void
    {
        // Refused without connecting: nothing listens on the port.
        $port = 1;
        try {
            new Redis(array_map(static fn (string $dsn) => sprintf($dsn, $port), $dsns), 'k', 5.0);
            self::fail('expected ValueError');
        } catch (\ValueError $e) {
            self::assertStringContainsString('names the Redis master', $e->getMessage());
            self::assertStringContainsString(sprintf($says, $port), $e->getMessage());
            self::assertStringContainsString('Redlock needs independent masters', $e->getMessage());
        }
    }

    public function testDistinctAddressesAreIndependentMasters(): void
    {
        $lock = new Redis(['redis://127.0.0.1:1', 'redis://127.0.0.2:1', 'redis://127.0.0.1:2', 'redis://[::2]:1'], 'k', 5.0);
        self::assertFalse($lock->isHeld());
    }

    public function testOneServerThroughASocketAndAPortIsRefusedByTheFirstAcquire(): void
    {
        $this->servers[] = $twice = RedisServer::start(['unix' => true]);
        $this->servers[] = $other = RedisServer::start();
        $lock = new Redis([$twice->tcpDsn(), $other->dsn(), $twice->dsn()], 'redlock-one-server', 5.0);
        foreach ([1, 2] as $attempt) {
            try {
                $lock->acquire(0);
                self::fail("attempt $attempt: expected LockException");
            } catch (LockException $e) {
                self::assertStringContainsString(
                    sprintf('the Redis masters 127.0.0.1:%d and %s are one server (the same run_id); Redlock needs independent masters', $twice->port(), $twice->socketPath()),
                    $e->getMessage(),
                );
            }
            self::assertFalse($lock->isHeld());
            self::assertSame(0, $twice->command('EXISTS', 'redlock-one-server'), 'the grants are given back');
            self::assertSame(0, $other->command('EXISTS', 'redlock-one-server'), 'the grants are given back');
        }
    }

    public function testAListOfOneDsnIsAValueErrorAndAStringIsOneMaster(): void
    {
        $this->servers[] = $server = RedisServer::start();
        try {
            new Redis([$server->dsn()], 'redlock-one', 5.0);
            self::fail('expected ValueError');
        } catch (\ValueError $e) {
            self::assertStringContainsString('must list at least 2 Redlock masters (one master is a DSN string, not a list)', $e->getMessage());
        }
        $single = new Redis($server->dsn(), 'redlock-one', 5.0);
        self::assertTrue($single->acquire(0));
        self::assertIsInt($single->fencingToken(), 'one master: a fencing number');
        self::assertTrue($single->release());
    }
}

<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\ConnectionException;
use CronLock\LockException;
use CronLock\Redis;
use CronLock\Tests\Support\RedisTopology;
use CronLock\Tests\Support\RedisTestHelpers;
use PHPUnit\Framework\TestCase;

/**
 * CronLock\Redis::holder() (who holds the key: one read-only GET) and
 * claim() (a window claimed once across hosts, for Laravel's onOneServer()),
 * against real redis-servers; commands are counted with INFO commandstats,
 * never timed.
 */
final class RedisHolderClaimTest extends TestCase
{
    use RedisTestHelpers;

    private static function key(): string
    {
        return 'holder-claim:' . getmypid() . ':' . bin2hex(random_bytes(4));
    }

    /** @return array<string, int> calls per command since the server started, INFO's own left out */
    private static function commandCalls(): array
    {
        $calls = [];
        preg_match_all('/^cmdstat_([a-z|]+):calls=(\d+)/m', (string) self::raw('INFO', 'commandstats'), $m, PREG_SET_ORDER);
        foreach ($m as [, $name, $count]) {
            if ($name !== 'info') {
                $calls[$name] = (int) $count;
            }
        }
        return $calls;
    }

    /** @param array<string, int> $before @return array<string, int> */
    private static function callsSince(array $before): array
    {
        $delta = [];
        foreach (self::commandCalls() as $name => $count) {
            if ($count !== ($before[$name] ?? 0)) {
                $delta[$name] = $count - ($before[$name] ?? 0);
            }
        }
        ksort($delta);
        return $delta;
    }

    public function testHolderIsTheKeysValueInOneReadOnlyRoundTrip(): void
    {
        $key = self::key();
        $lock = new Redis(self::$server->dsn(), $key, 30.0);
        $other = new Redis(self::$server->dsn(), $key, 30.0);
        self::assertNull($lock->holder(), 'no key');
        self::assertTrue($lock->acquire(0));
        self::assertSame($lock->token(), $lock->holder(), 'ours: the token');
        self::assertSame($lock->token(), $other->holder(), 'another object sees the same');
        $fence = self::raw('GET', "$key:fence");
        $pttl = self::raw('PTTL', $key);

        $before = self::commandCalls();
        self::assertSame($lock->token(), $other->holder());
        self::assertSame(['get' => 1], self::callsSince($before), 'one GET, nothing else');
        self::assertSame($fence, self::raw('GET', "$key:fence"), 'no fencing number drawn');
        self::assertLessThanOrEqual($pttl, self::raw('PTTL', $key), 'the expiry untouched');
        self::assertFalse($other->isHeld());

        self::assertTrue($lock->release());
        self::assertNull($other->holder());
        self::raw('SET', $key, "another client\xff\xfe!");
        self::assertSame('another client\xff\xfe!', $other->holder(), 'bytes that are not UTF-8 as \xNN');
        self::raw('DEL', $key);
        self::raw('HSET', $key, 'f', 'v');
        try {
            $other->holder();
            self::fail('a hash is no holder');
        } catch (LockException $e) {
            self::assertNotInstanceOf(ConnectionException::class, $e);
            self::assertStringContainsString("to read key '$key'", $e->getMessage());
            self::assertStringContainsString('the key holds a value of another type', $e->getMessage());
        }
        self::raw('DEL', $key);
    }

    public function testHolderOfAServerThatIsGoneIsAConnectionException(): void
    {
        $server = \CronLock\Tests\Support\RedisServer::start();
        $lock = new Redis($server->dsn(), self::key(), 30.0, ['connect_timeout' => 0.5, 'read_timeout' => 0.5]);
        $server->stop();
        $this->expectException(ConnectionException::class);
        $this->expectExceptionMessage('to read key');
        $lock->holder();
    }

    public function testAWindowIsClaimedOnceAndNothingIsLeftAfterItsSeconds(): void
    {
        $key = self::key();
        $web1 = new Redis(self::$server->dsn(), $key, 30.0);
        $web2 = new Redis(self::$server->dsn(), $key, 30.0);
        self::assertTrue($web1->claim('warm-up', 0.5), 'connected, the script loaded');
        $before = self::commandCalls();
        self::assertTrue($web1->claim('2026-12-01T14:05', 5.0), 'the first host claims the tick');
        self::assertSame(['evalsha' => 1, 'set' => 1], self::callsSince($before), 'one script, one SET');
        self::assertFalse($web2->claim('2026-12-01T14:05', 5.0), 'the second does not');
        self::assertFalse($web1->claim('2026-12-01T14:05', 5.0), 'nor does a second call of the first');
        self::assertTrue($web2->claim('2026-12-01T14:06', 5.0), 'the next tick is free');
        $claimKey = "$key:claim:2026-12-01T14:05";
        self::assertMatchesRegularExpression('/^[0-9a-f]{32}:\d+@/', (string) self::raw('GET', $claimKey));
        $pttl = self::raw('PTTL', $claimKey);
        self::assertGreaterThan(4000, $pttl);
        self::assertLessThanOrEqual(5000, $pttl);
        self::assertSame(0, self::raw('EXISTS', $key), 'the lock key is not touched');
        self::assertSame(0, self::raw('EXISTS', "$key:fence"), 'no fence counter');
        self::assertFalse($web1->isHeld());

        self::assertTrue($web1->claim('short', 0.2));
        usleep(400000);
        self::assertSame([], self::raw('KEYS', "$key:claim:short*"), 'nothing left after its seconds');
        self::assertTrue($web2->claim('short', 0.2), 'and it can be claimed again');

        // A held lock is neither needed nor changed.
        self::assertTrue($web1->acquire(0));
        $token = $web1->token();
        self::assertTrue($web1->claim('while-held', 5.0));
        self::assertSame($token, self::raw('GET', $key));
        self::assertTrue($web1->release());
        self::raw('DEL', "$key:claim:2026-12-01T14:05", "$key:claim:2026-12-01T14:06", "$key:claim:short", "$key:claim:while-held", "$key:fence");
    }

    public function testTheClaimScriptCountsItsOwnTokenAndGivesBackOnlyItsOwn(): void
    {
        // What a command sent again after a broken connection finds, and a
        // Redlock's give-back: the script as both implementations run it.
        $lua = (string) file_get_contents(dirname(__DIR__) . '/polyfill/resources/redis/claim.lua');
        $key = self::key() . ':claim:w';
        self::assertSame(1, self::raw('EVAL', $lua, '1', $key, 'tok-a', '5000'));
        self::assertSame(1, self::raw('EVAL', $lua, '1', $key, 'tok-a', '5000'), 'its own token: claimed');
        self::assertSame(0, self::raw('EVAL', $lua, '1', $key, 'tok-b', '5000'));
        self::assertSame(0, self::raw('EVAL', $lua, '1', $key, 'tok-b', '0'), 'give-back of another token');
        self::assertSame('tok-a', self::raw('GET', $key));
        self::assertSame(0, self::raw('EVAL', $lua, '1', $key, 'tok-a', '0'));
        self::assertSame(0, self::raw('EXISTS', $key), 'its own: given back');
    }

    /** @return iterable<string, array{string, float}> */
    public static function badClaims(): iterable
    {
        yield 'empty window' => ['', 5.0, '$window', 'must not be empty'];
        yield 'NUL byte' => ["a\0b", 5.0, '$window', 'must not contain NUL bytes'];
        yield 'over 200 bytes' => [str_repeat('w', 201), 5.0, '$window', 'must be at most 200 bytes'];
        yield 'not UTF-8' => ["\xff", 5.0, '$window', 'must be valid UTF-8'];
        yield 'zero seconds' => ['w', 0.0, '$seconds', 'must be greater than 0'];
        yield 'negative seconds' => ['w', -1.0, '$seconds', 'must be a finite number greater than 0'];
        yield 'NaN seconds' => ['w', NAN, '$seconds', 'must be a finite number greater than 0'];
    }

    /** @dataProvider badClaims */
    public function testABadClaimIsAValueErrorAndSendsNothing(string $window, float $seconds, string $arg, string $reason): void
    {
        $lock = new Redis(self::$server->dsn(), self::key(), 30.0);
        $before = self::commandCalls();
        try {
            $lock->claim($window, $seconds);
            self::fail('accepted');
        } catch (\ValueError $e) {
            self::assertStringContainsString($arg, $e->getMessage());
            self::assertStringContainsString($reason, $e->getMessage());
        }
        self::assertSame([], self::callsSince($before));
        self::assertTrue($lock->claim(str_repeat('w', 200), 0.5), '200 bytes are fine');
    }

    /**
     * @group extension-only
     * Redlock (a list of DSNs) needs the extension.
     */
    public function testRedlockHolderIsTheMajoritysValueAndAClaimNeedsAMajority(): void
    {
        $masters = RedisTopology::masters(3);
        try {
            $key = self::key();
            $lock = new Redis($masters->dsn(), $key, 30.0);
            $on = fn (int $i, string ...$args) => $masters->servers[$i]->command(...$args);
            self::assertNull($lock->holder());
            self::assertTrue($lock->acquire(0));
            self::assertSame($lock->token(), $lock->holder());
            $on(2, 'DEL', $key);
            self::assertSame($lock->token(), $lock->holder(), 'two of three still hold it');
            self::assertTrue($lock->release());
            $on(0, 'SET', $key, 'x');
            self::assertNull($lock->holder(), 'one of three: a majority has no key');
            $on(1, 'SET', $key, 'y');
            try {
                $lock->holder();
                self::fail('no majority agrees');
            } catch (ConnectionException $e) {
                self::assertStringContainsString('disagree', $e->getMessage());
            }
            $on(2, 'SET', $key, 'x');
            self::assertSame('x', $lock->holder());
            $on(0, 'DEL', $key);
            $on(1, 'DEL', $key);
            $on(2, 'DEL', $key);

            self::assertTrue($lock->claim('t1', 5.0));
            foreach ([0, 1, 2] as $i) {
                self::assertSame(1, $on($i, 'EXISTS', "$key:claim:t1"), "granted by master $i");
            }
            self::assertFalse($lock->claim('t1', 5.0));
            $on(0, 'SET', "$key:claim:t2", 'other');
            $on(1, 'SET', "$key:claim:t2", 'other');
            self::assertFalse($lock->claim('t2', 5.0), 'a majority claimed by another');
            self::assertSame(0, $on(2, 'EXISTS', "$key:claim:t2"), 'the minority grant given back');

            $masters->servers[1]->stop();
            $masters->servers[2]->stop();
            $short = new Redis($masters->dsn(), $key, 30.0, ['connect_timeout' => 0.5, 'read_timeout' => 0.5]);
            try {
                $short->claim('t3', 5.0);
                self::fail('one master of three cannot decide');
            } catch (ConnectionException $e) {
                self::assertStringContainsString('a majority (2) must', $e->getMessage());
            }
            self::assertSame(0, $on(0, 'EXISTS', "$key:claim:t3"), 'its grant given back');
        } finally {
            $masters->stop();
        }
    }
}

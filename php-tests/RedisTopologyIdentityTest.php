<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\LockException;
use CronLock\Redis;
use CronLock\Tests\Support\ErrorLogHelpers;
use CronLock\Tests\Support\RedisServer;
use CronLock\Tests\Support\RedisTopology;
use PHPUnit\Framework\TestCase;

/**
 * D3 across topologies: two CronLock\Redis objects of one thread on the
 * same key of the same Cluster, Sentinel master or Redlock masters, but
 * written differently (other seeds or sentinels, masters in another order,
 * 'localhost' for 127.0.0.1), are one lock: while one holds it the other's
 * acquire(0) is false at once, a wait throws the "would deadlock"
 * LockException, and cron_guard() says "held by this process".
 *
 * @group extension-only
 * cronlock/polyfill talks to one Redis server only.
 */
final class RedisTopologyIdentityTest extends TestCase
{
    use ErrorLogHelpers;

    /** @var array<string, RedisTopology> */
    private static array $topologies = [];
    private ?string $dir = null;

    public static function tearDownAfterClass(): void
    {
        foreach (self::$topologies as $topology) {
            $topology->stop();
        }
        self::$topologies = [];
    }

    protected function tearDown(): void
    {
        $this->restoreErrorLog();
        if ($this->dir !== null) {
            array_map('unlink', glob("$this->dir/*") ?: []);
            rmdir($this->dir);
            $this->dir = null;
        }
        parent::tearDown();
    }

    private static function topology(string $kind): RedisTopology
    {
        return self::$topologies[$kind] ??= match ($kind) {
            'cluster' => RedisTopology::cluster(),
            'sentinel' => RedisTopology::sentinel(0),
            'masters' => RedisTopology::masters(3),
        };
    }

    /** @param list<RedisServer> $servers */
    private static function hosts(array $servers, string $host = '127.0.0.1'): string
    {
        return implode(',', array_map(static fn (RedisServer $s) => "$host:" . $s->port(), $servers));
    }

    /** @return array<string, array{0: string, 1: \Closure(): array{0: string|list<string>, 1: string|list<string>}}> */
    public static function spellings(): array
    {
        return [
            'cluster: every seed, then one other seed by host name' => ['cluster', static function (): array {
                $nodes = self::topology('cluster')->servers;
                return ['redis-cluster://' . self::hosts($nodes), 'redis-cluster://' . self::hosts([$nodes[2]], 'localhost')];
            }],
            'cluster: the same seeds in another order' => ['cluster', static function (): array {
                $nodes = self::topology('cluster')->servers;
                return ['redis-cluster://' . self::hosts($nodes), 'redis-cluster://' . self::hosts(array_reverse($nodes))];
            }],
            'sentinel: three sentinels, then only the last' => ['sentinel', static function (): array {
                $sentinels = self::topology('sentinel')->sentinels;
                return ['redis-sentinel://' . self::hosts($sentinels) . '/mymaster', 'redis-sentinel://' . self::hosts([$sentinels[2]]) . '/mymaster'];
            }],
            'sentinel: the same sentinels in another order' => ['sentinel', static function (): array {
                $sentinels = self::topology('sentinel')->sentinels;
                return ['redis-sentinel://' . self::hosts($sentinels) . '/mymaster', 'redis-sentinel://' . self::hosts(array_reverse($sentinels)) . '/mymaster'];
            }],
            'redlock: the same masters in another order' => ['masters', static function (): array {
                $masters = self::topology('masters')->servers;
                $dsns = array_map(static fn (RedisServer $s) => 'redis://127.0.0.1:' . $s->port() . '/0', $masters);
                return [$dsns, [$dsns[2], $dsns[0], $dsns[1]]];
            }],
            'redlock: the same masters by host name and default database' => ['masters', static function (): array {
                $masters = self::topology('masters')->servers;
                return [
                    array_map(static fn (RedisServer $s) => 'redis://127.0.0.1:' . $s->port() . '/0', $masters),
                    array_map(static fn (RedisServer $s) => 'redis://localhost:' . $s->port(), array_reverse($masters)),
                ];
            }],
            'one server: 127.0.0.1 and localhost' => ['masters', static function (): array {
                $port = self::topology('masters')->servers[0]->port();
                return ["redis://127.0.0.1:$port/0", "redis://localhost:$port"];
            }],
        ];
    }

    /**
     * @dataProvider spellings
     * @param \Closure(): array{0: string|list<string>, 1: string|list<string>} $dsns
     */
    public function testTwoSpellingsOfOneTopologyAreOneLockInThisThread(string $kind, \Closure $dsns): void
    {
        [$first, $second] = $dsns();
        $key = "identity-$kind-" . bin2hex(random_bytes(4));
        $holder = new Redis($first, $key, 30.0);
        $other = new Redis($second, $key, 30.0);
        self::assertTrue($holder->acquire(0));

        $t0 = microtime(true);
        self::assertFalse($other->acquire(0), 'busy while the first object holds it');
        try {
            $other->acquire(5.0);
            self::fail('a wait on a lock this thread holds through another object must throw');
        } catch (LockException $e) {
            self::assertStringContainsString('is already held by this process (pid ' . getmypid() . ') through another CronLock\Redis object; waiting for it would deadlock', $e->getMessage());
        }
        self::assertLessThan(4.0, microtime(true) - $t0, 'the wait threw instead of waiting');
        self::assertFalse($other->isHeld());

        $this->dir = RedisServer::makeTempDir('cronlock-identity');
        $log = $this->logToFile($this->dir);
        $ran = false;
        self::assertNull(cron_guard(function () use (&$ran) { $ran = true; }, $other));
        self::assertFalse($ran);
        $lines = self::logLines($log);
        self::assertCount(1, $lines, implode("\n", $lines));
        self::assertStringContainsString('is held by this process (pid ' . getmypid() . ') through another lock object; skipping this run', $lines[0]);
        try {
            cron_guard(function () use (&$ran) { $ran = true; }, $other, ['wait' => 5.0]);
            self::fail("cron_guard()'s wait must throw too");
        } catch (LockException $e) {
            self::assertStringContainsString('would deadlock', $e->getMessage());
        }
        self::assertFalse($ran);

        self::assertTrue($holder->release());
        self::assertTrue($other->acquire(0), 'free once the first object released it');
        self::assertTrue($other->release());
    }
}

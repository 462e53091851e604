<?php

declare(strict_types=1);

namespace CronLock\Tests\Support;

/**
 * Redis topologies of our own, started by tests/redis-harness (free loopback
 * ports, one temp dir, stopped by pid); each node is a RedisServer:
 *
 *   $t = RedisTopology::sentinel(1);     // a master, 1 replica, 3 sentinels ('mymaster')
 *   $t = RedisTopology::masters(3);      // 3 independent masters (Redlock)
 *   $t = RedisTopology::cluster();       // a 3-master Redis Cluster (redis-cli --cluster create)
 *   $t->dsn();                            // what CronLock\Redis takes: string or list
 *   $t->failover();                       // Sentinel: SENTINEL FAILOVER, until the new master answers
 *   $t->master()->kill(); $t->awaitMaster($old);   // Sentinel: kill -9 of the master
 *   $t->stop();                           // every node; also on destruction
 */
final class RedisTopology
{
    private int $ownerPid;
    /** @var list<RedisServer> data nodes (the first the initial master); read-only */
    public array $servers;
    /** @var list<RedisServer> read-only */
    public array $sentinels;
    private bool $isCluster;
    /** read-only */
    public string $dir;

    /**
     * @param list<RedisServer> $servers data nodes (the first the initial master)
     * @param list<RedisServer> $sentinels
     */
    private function __construct(array $servers, array $sentinels, bool $isCluster, string $dir)
    {
        $this->servers = $servers;
        $this->sentinels = $sentinels;
        $this->isCluster = $isCluster;
        $this->dir = $dir;
        $this->ownerPid = getmypid();
    }

    public static function cluster(): self
    {
        return self::start('cluster', []);
    }

    public static function masters(int $count): self
    {
        return self::start('redlock', [], (string) $count);
    }

    /**
     * @param array{requirepass?: string, sentinel_requirepass?: string} $opts
     *        'requirepass': the data nodes' password (the sentinels and
     *        replicas are told it); 'sentinel_requirepass': the sentinels' own.
     */
    public static function sentinel(int $replicas, array $opts = []): self
    {
        $args = ['--replicas=' . $replicas];
        if (isset($opts['requirepass'])) {
            $args[] = '--requirepass=' . $opts['requirepass'];
        }
        if (isset($opts['sentinel_requirepass'])) {
            $args[] = '--sentinel-requirepass=' . $opts['sentinel_requirepass'];
        }
        return self::start('sentinel', $opts, ...$args);
    }

    /** @param array{requirepass?: string, sentinel_requirepass?: string} $opts */
    private static function start(string $kind, array $opts = [], string ...$args): self
    {
        $dir = RedisHarness::newDir("redis-$kind");
        if ($kind === 'redlock') {
            $lines = RedisHarness::run('start', $kind, $args[0], $dir);
        } else {
            $lines = RedisHarness::run('start', $kind, $dir, ...$args);
        }
        $dir = (string) RedisHarness::fact($lines, 'dir');
        $servers = $sentinels = [];
        foreach (RedisHarness::nodes($lines) as $node) {
            $password = $node['role'] === 'sentinel' ? ($opts['sentinel_requirepass'] ?? null) : ($opts['requirepass'] ?? null);
            $server = RedisServer::fromHarness($password === null ? [] : ['requirepass' => $password], $dir, $node, false);
            if ($node['role'] === 'sentinel') {
                $sentinels[] = $server;
            } else {
                $servers[] = $server;
            }
        }
        return new self($servers, $sentinels, $kind === 'cluster', $dir);
    }

    /** @return string|list<string> */
    public function dsn()
    {
        if ($this->isCluster) {
            $hosts = array_map(static fn (RedisServer $s) => '127.0.0.1:' . $s->port(), $this->servers);
            return 'redis-cluster://' . implode(',', $hosts);
        }
        if ($this->sentinels === []) {
            return array_map(static fn (RedisServer $s) => $s->dsn(), $this->servers);
        }
        $hosts = array_map(static fn (RedisServer $s) => '127.0.0.1:' . $s->port(), $this->sentinels);
        return 'redis-sentinel://' . implode(',', $hosts) . '/mymaster';
    }

    /**
     * Sentinel: the data node the sentinels name as the master now, once
     * every live sentinel names the same one and it answers as a master
     * (tests/redis-harness master: it waits out a failover in progress).
     */
    public function master(): RedisServer
    {
        return $this->serverOn(RedisHarness::nodes(RedisHarness::run('master', $this->dir))[0]['port']);
    }

    /** Sentinel: SENTINEL FAILOVER; returns the new master once every sentinel names it, it answers as one and every other node replicates from it. */
    public function failover(): RedisServer
    {
        return $this->serverOn(RedisHarness::nodes(RedisHarness::run('failover', $this->dir))[0]['port']);
    }

    /** Sentinel: after $old (the master) was killed, the new master once every sentinel names it and it answers as one. */
    public function awaitMaster(RedisServer $old): RedisServer
    {
        $name = basename(dirname($old->logFile()));
        return $this->serverOn(RedisHarness::nodes(RedisHarness::run('await-master', $this->dir, $name))[0]['port']);
    }

    public function stop(): void
    {
        clearstatcache();
        if (getmypid() === $this->ownerPid && is_dir($this->dir)) {
            RedisHarness::run('stop', $this->dir);
        }
    }

    public function __destruct()
    {
        $this->stop();
    }

    private function serverOn(int $port): RedisServer
    {
        foreach ($this->servers as $server) {
            if ($server->port() === $port) {
                return $server;
            }
        }
        throw new \RuntimeException("the sentinels name an unknown master on port $port");
    }
}

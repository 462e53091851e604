<?php

declare(strict_types=1);

namespace CronLock\Tests\Support;

/**
 * Redis topologies of our own, made of RedisServer processes (free loopback
 * ports, temp dirs, stopped by pid):
 *
 *   $t = RedisTopology::sentinel(1);     // a master, 1 replica, 3 sentinels ('mymaster')
 *   $t = RedisTopology::masters(3);      // 3 independent masters (Redlock)
 *   $t = RedisTopology::cluster();       // a 3-master Redis Cluster (redis-cli --cluster create)
 *   $t->dsn();                            // what CronLock\Redis takes: string or list
 *   $t->failover();                       // Sentinel: SENTINEL FAILOVER, until the new master answers
 *   $t->stop();
 */
final class RedisTopology
{
    /**
     * @param list<RedisServer> $servers data nodes (the first the initial master)
     * @param list<RedisServer> $sentinels
     */
    private function __construct(
        public readonly array $servers,
        public readonly array $sentinels,
        private readonly bool $isCluster = false,
    ) {
    }

    public static function cluster(): self
    {
        $args = ['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', '2000'];
        $servers = array_map(static fn () => RedisServer::start(['args' => $args]), range(1, 3));
        $cmd = ['redis-cli', '--cluster', 'create'];
        foreach ($servers as $server) {
            $cmd[] = '127.0.0.1:' . $server->port();
        }
        array_push($cmd, '--cluster-replicas', '0', '--cluster-yes');
        $proc = proc_open($cmd, [0 => ['file', '/dev/null', 'r'], 1 => ['file', '/dev/null', 'w'], 2 => ['file', '/dev/null', 'w']], $pipes);
        if ($proc === false || proc_close($proc) !== 0) {
            throw new \RuntimeException('redis-cli --cluster create failed');
        }
        $deadline = microtime(true) + 20.0;
        foreach ($servers as $server) {
            while (!str_contains((string) $server->command('CLUSTER', 'INFO'), 'cluster_state:ok')) {
                if (microtime(true) > $deadline) {
                    throw new \RuntimeException('the cluster did not become ok within 20 s');
                }
                usleep(100_000);
            }
        }
        return new self($servers, [], true);
    }

    public static function masters(int $count): self
    {
        return new self(array_map(static fn () => RedisServer::start(), range(1, $count)), []);
    }

    public static function sentinel(int $replicas): self
    {
        $master = RedisServer::start();
        $servers = [$master];
        for ($i = 0; $i < $replicas; $i++) {
            $servers[] = RedisServer::start(['args' => ['--replicaof', '127.0.0.1', (string) $master->port()]]);
        }
        $sentinels = [];
        for ($i = 0; $i < 3; $i++) {
            $sentinels[] = RedisServer::start(['sentinel_of' => $master->port()]);
        }
        $topology = new self($servers, $sentinels);
        $deadline = microtime(true) + 20.0;
        while (!$topology->sentinelsSeeEveryReplica()) {
            if (microtime(true) > $deadline) {
                throw new \RuntimeException('the sentinels did not see the replicas within 20 s');
            }
            usleep(100_000);
        }
        return $topology;
    }

    /** @return string|list<string> */
    public function dsn(): string|array
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

    /** Sentinel: the data node the sentinels name as the master now. */
    public function master(): RedisServer
    {
        [, $port] = $this->sentinels[0]->command('SENTINEL', 'get-master-addr-by-name', 'mymaster');
        foreach ($this->servers as $server) {
            if ($server->port() === (int) $port) {
                return $server;
            }
        }
        throw new \RuntimeException("the sentinels name an unknown master on port $port");
    }

    /** Sentinel: SENTINEL FAILOVER; returns the new master once every sentinel names it, it answers as one and every other node replicates from it. */
    public function failover(): RedisServer
    {
        $old = $this->master();
        $this->sentinels[0]->command('SENTINEL', 'FAILOVER', 'mymaster');
        $told = false;
        $deadline = microtime(true) + 30.0;
        while (microtime(true) < $deadline) {
            try {
                $named = [];
                foreach ($this->sentinels as $sentinel) {
                    [, $port] = $sentinel->command('SENTINEL', 'get-master-addr-by-name', 'mymaster');
                    $named[(int) $port] = true;
                }
                $new = $this->master();
                if ($new !== $old && !$told && $old->isRunning()) {
                    // Sentinel turns the old master into a replica only after
                    // about 10 s; an operator would not wait either.
                    $old->command('REPLICAOF', '127.0.0.1', (string) $new->port());
                    $told = true;
                }
                // …and every other data node replicates from it again, so the
                // next test's 'replicas' => N can be met.
                if (count($named) === 1 && $new !== $old && $new->command('ROLE')[0] === 'master'
                    && substr_count((string) $new->command('INFO', 'replication'), 'state=online') >= count($this->servers) - 1) {
                    return $new;
                }
            } catch (\RuntimeException $e) {
                // A promotion ends with CLIENT KILL TYPE normal on the new
                // master (and a REPLICAOF on the old one), which closes our
                // cached connection to it; command() reconnects next time.
                if (!$e->getPrevious() instanceof \UnexpectedValueException && !str_starts_with($e->getMessage(), 'write to redis')) {
                    throw $e;
                }
            }
            usleep(100_000);
        }
        throw new \RuntimeException('no failover within 30 s');
    }

    public function stop(): void
    {
        foreach ([...$this->sentinels, ...$this->servers] as $server) {
            $server->stop();
        }
    }

    private function sentinelsSeeEveryReplica(): bool
    {
        $replicas = count($this->servers) - 1;
        foreach ($this->sentinels as $sentinel) {
            if (count($sentinel->command('SENTINEL', 'replicas', 'mymaster')) < $replicas) {
                return false;
            }
        }
        foreach (array_slice($this->servers, 1) as $replica) {
            if (!str_contains((string) $replica->command('INFO', 'replication'), 'master_link_status:up')) {
                return false;
            }
        }
        return true;
    }
}

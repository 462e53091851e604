<?php

namespace CronLock\Cli;

use CronLock\Cli\Redis\Connection;
use CronLock\Cli\Redis\Dsn;
use CronLock\Cli\Redis\ReplyError;

/**
 * `cronlock status --redis DSN [--prefix P]`: CronLock\Redis keys on a
 * server (or every master of a Cluster, or a Sentinel's current master).
 * A lock is a string key whose value is a cronlock token
 * (`<32 hex>:<pid>@<host>`), or any key that has a fencing counter
 * (`<key>:fence`; on a Cluster `{<key>}:fence` when the key has no hash
 * tag); a counter without its key is a free lock. Waiters are the
 * subscribers of `<key>:released` (PUBSUB NUMSUB, summed over every node of
 * a Cluster, as each counts only its own): the extension's waiters
 * subscribe, cronlock/polyfill's poll and are not counted. Redis keeps no
 * time of a SET: since is the holder's process start when it lives on
 * this host, else unknown. Read-only: SCAN, GET, PTTL, PUBSUB.
 */
final class RedisLocks
{
    const TOKEN = '/\A[0-9a-f]{32}:([0-9]+)@(.*)\z/s';

    /** @throws UsageError for a DSN CronLock\Redis would refuse */
    public static function report(StatusReport $report, string $dsnText, string $prefix, string $client)
    {
        $dsn = Dsn::parse($dsnText);
        $title = 'Redis ' . $dsn->describe() . ($prefix !== '' ? ' (keys ' . $prefix . '*)' : '');
        $connections = [];
        try {
            list($masters, $connections) = self::connect($dsn, $client);
            $rows = [];
            foreach ($masters as $master) {
                $rows = array_merge($rows, self::locks($master, $dsn, $prefix, $title));
            }
            self::countWaiters($rows, $connections, $dsn);
            usort($rows, function (LockRow $a, LockRow $b) {
                return strcmp($a->name, $b->name);
            });
            $note = 'through ' . $connections[0]->client();
            if ($dsn->topology === 'sentinel') {
                $note .= ', master ' . $masters[0]->address();
            } elseif (count($masters) > 1) {
                $note .= ', ' . count($masters) . ' masters';
            }
            $report->add('redis', $title, $rows, $note);
        } catch (Missing $e) {
            throw $e;
        } catch (\RuntimeException $e) {
            $report->add('redis', $title, false, 'not read: ' . $e->getMessage());
            $report->error("$title: " . $e->getMessage());
        } finally {
            foreach ($connections as $connection) {
                $connection->close();
            }
        }
    }

    /** @return array{0: Connection[], 1: Connection[]} the masters that hold keys, and every node (for waiters) */
    private static function connect(Dsn $dsn, string $client): array
    {
        if ($dsn->topology === 'single') {
            $connection = Connection::open($dsn, $dsn->nodes[0], $client);
            return [[$connection], [$connection]];
        }
        $failures = [];
        foreach ($dsn->nodes as $node) {
            try {
                $first = Connection::open($dsn, $node, $client, $dsn->topology === 'sentinel');
            } catch (ReplyError $e) {
                $failures[] = Dsn::address($node) . ': ' . $e->getMessage();
                continue;
            } catch (\RuntimeException $e) {
                if ($e instanceof Missing) {
                    throw $e;
                }
                $failures[] = $e->getMessage();
                continue;
            }
            if ($dsn->topology === 'sentinel') {
                $address = $first->command(['SENTINEL', 'get-master-addr-by-name', (string) $dsn->master]);
                $first->close();
                if (!is_array($address) || count($address) !== 2) {
                    $failures[] = Dsn::address($node) . ": knows no master named '{$dsn->master}'";
                    continue;
                }
                $master = Connection::open($dsn, [(string) $address[0], (int) $address[1]], $client);
                return [[$master], [$master]];
            }
            return self::clusterNodes($first, $dsn, $node, $client);
        }
        throw new \RuntimeException('no node answered: ' . implode('; ', $failures));
    }

    /**
     * Every node of the Cluster $seed belongs to (CLUSTER NODES), connected.
     *
     * @param array{0: string, 1: int} $seedNode
     * @return array{0: Connection[], 1: Connection[]}
     */
    private static function clusterNodes(Connection $seed, Dsn $dsn, array $seedNode, string $client): array
    {
        $masters = [];
        $all = [];
        foreach (explode("\n", (string) $seed->command(['CLUSTER', 'NODES'])) as $line) {
            // <id> <ip:port@cport[,hostname]> <flags> <master> <ping> <pong> <epoch> <link> <slot>…
            $f = explode(' ', trim($line));
            if (count($f) < 8 || preg_match('/(^|,)(fail|noaddr|handshake)(,|$)/', $f[2])) {
                continue;
            }
            $address = explode('@', $f[1])[0];
            $colon = strrpos($address, ':');
            $host = trim(substr($address, 0, $colon), '[]');
            $node = [$host === '' ? $seedNode[0] : $host, (int) substr($address, $colon + 1)];
            $connection = strpos($f[2], 'myself') !== false ? $seed : Connection::open($dsn, $node, $client);
            $all[] = $connection;
            if (preg_match('/(^|,)master(,|$)/', $f[2]) && count($f) > 8) {
                $masters[] = $connection;
            }
        }
        if ($masters === []) {
            throw new \RuntimeException('CLUSTER NODES named no master with slots');
        }
        return [$masters, $all];
    }

    /** @return LockRow[] the locks among the keys of $server */
    private static function locks(Connection $server, Dsn $dsn, string $prefix, string $title): array
    {
        $cluster = $dsn->topology === 'cluster';
        $pattern = self::globEscape($prefix) . '*';
        $keys = self::scan($server, $pattern);
        if ($cluster && $prefix !== '') {
            // the counter of a key without hash tag is {key}:fence, outside the prefix
            $keys = array_merge($keys, self::scan($server, '{' . $pattern));
        }
        $names = [];
        foreach ($keys as $key) {
            $key = (string) $key;
            if (substr($key, -6) !== ':fence') {
                $names[$key] = true;
                continue;
            }
            $base = substr($key, 0, -6);
            if ($cluster && preg_match('/\A\{(.+)\}\z/s', $base, $m) && !self::hasHashTag($m[1])) {
                $base = $m[1];
            }
            if (self::companions($base, $cluster)[0] === $key && strncmp($base, $prefix, strlen($prefix)) === 0) {
                $names[$base] = true;
            }
        }
        $hostname = Processes::hostname();
        $rows = [];
        foreach (array_keys($names) as $name) {
            $name = (string) $name;
            try {
                $value = $server->command(['GET', $name]);
                $fence = $server->command(['GET', self::companions($name, $cluster)[0]]);
            } catch (ReplyError $e) {
                continue; // WRONGTYPE: not a lock of ours
            }
            $isToken = is_string($value) && preg_match(self::TOKEN, $value, $token);
            if (!$isToken && $fence === null) {
                continue;
            }
            $row = new LockRow();
            $row->backend = 'redis';
            $row->source = $title;
            $row->name = $name;
            $row->fence = $fence !== null && preg_match('/\A-?[0-9]+\z/', (string) $fence) ? (int) $fence : null;
            if ($value !== null) {
                $row->state = 'held';
                $ttl = (int) $server->command(['PTTL', $name]);
                $row->ttl = $ttl < 0 ? -1.0 : $ttl / 1000;
                if ($isToken) {
                    $row->pid = (int) $token[1];
                    $row->host = $token[2];
                } else {
                    $row->client = 'value ' . Text::cut(Text::oneLine((string) $value), 80);
                }
                if ($row->pid !== null && $row->host === $hostname) {
                    $row->pidAlive = Processes::alive($row->pid);
                    $row->since = $row->pidAlive ? Processes::startTime($row->pid) : null;
                    $row->sinceSource = $row->since === null ? null : 'process start';
                }
            }
            $rows[] = $row;
        }
        return $rows;
    }

    /** @return string[] */
    private static function scan(Connection $server, string $pattern): array
    {
        $keys = [];
        $cursor = '0';
        do {
            $reply = $server->command(['SCAN', $cursor, 'MATCH', $pattern, 'COUNT', 1000]);
            $cursor = (string) $reply[0];
            $keys = array_merge($keys, is_array($reply[1]) ? $reply[1] : []);
        } while ($cursor !== '0');
        return array_values(array_unique(array_map('strval', $keys)));
    }

    /**
     * Subscribers of each lock's `:released` channel, summed over $nodes.
     *
     * @param LockRow[] $rows
     * @param Connection[] $nodes
     */
    private static function countWaiters(array $rows, array $nodes, Dsn $dsn)
    {
        foreach ($rows as $row) {
            $row->waiters = 0;
        }
        foreach (array_chunk($rows, 100) as $chunk) {
            $channels = [];
            foreach ($chunk as $row) {
                $channels[] = self::companions($row->name, $dsn->topology === 'cluster')[1];
            }
            foreach ($nodes as $node) {
                $reply = $node->command(array_merge(['PUBSUB', 'NUMSUB'], $channels));
                for ($i = 0; $i + 1 < count($reply); $i += 2) {
                    $chunk[$i / 2]->waiters += (int) $reply[$i + 1];
                }
            }
        }
    }

    /** @return array{0: string, 1: string} the fencing counter and the release channel of $key */
    private static function companions(string $key, bool $cluster): array
    {
        $base = $cluster && !self::hasHashTag($key) ? '{' . $key . '}' : $key;
        return ["$base:fence", "$base:released"];
    }

    /** Redis Cluster's rule: the part between the first `{` and the first `}` after it, when not empty, is hashed. */
    private static function hasHashTag(string $key): bool
    {
        $open = strpos($key, '{');
        if ($open === false) {
            return false;
        }
        $close = strpos($key, '}', $open + 1);
        return $close !== false && $close > $open + 1;
    }

    private static function globEscape(string $text): string
    {
        return (string) preg_replace('/([*?\[\]\\\\])/', '\\\\$1', $text);
    }
}

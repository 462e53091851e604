<?php

namespace CronLock\Cli\Redis;

use CronLock\Cli\Text;
use CronLock\Cli\UsageError;

/**
 * A Redis DSN as CronLock\Redis takes it: one server (redis://, rediss://,
 * unix://), a Cluster (redis-cluster://, rediss-cluster://: seed nodes) or
 * a Sentinel master (redis-sentinel://, rediss-sentinel://: sentinels and
 * the master's name). The password stays inside; describe() never shows it.
 */
final class Dsn
{
    /** @var string 'single', 'cluster' or 'sentinel' */
    public $topology = 'single';
    /** @var string 'tcp', 'tls' or 'unix' */
    public $transport = 'tcp';
    /** @var array<int, array{0: string, 1: int}> host (or socket path) and port of each node given */
    public $nodes = [];
    /** @var int */
    public $db = 0;
    /** @var string|null */
    public $user;
    /** @var string|null */
    public $password;
    /** @var bool rediss…#insecure: no certificate checks */
    public $insecure = false;
    /** @var string|null Sentinel: the master's name */
    public $master;

    /** @throws UsageError for what CronLock\Redis would refuse too (the message never holds the password) */
    public static function parse(string $dsn): self
    {
        $self = new self();
        $bad = function (string $why) use ($dsn) {
            return new UsageError('Redis DSN ' . Text::oneLine(Text::withoutPassword($dsn)) . " $why");
        };
        if (!preg_match('#\A([a-z-]+)://(.*)\z#is', $dsn, $m)) {
            throw $bad('must look like redis://[[user]:password@]host[:port][/db], rediss://…, unix:///path, redis-cluster://… or redis-sentinel://…/master');
        }
        $scheme = strtolower($m[1]);
        $rest = $m[2];
        $schemes = ['redis' => ['single', 'tcp'], 'rediss' => ['single', 'tls'], 'unix' => ['single', 'unix'],
            'redis-cluster' => ['cluster', 'tcp'], 'rediss-cluster' => ['cluster', 'tls'],
            'redis-sentinel' => ['sentinel', 'tcp'], 'rediss-sentinel' => ['sentinel', 'tls']];
        if (!isset($schemes[$scheme])) {
            throw $bad("has an unknown scheme $scheme://");
        }
        list($self->topology, $self->transport) = $schemes[$scheme];
        if (($hash = strpos($rest, '#')) !== false) {
            if (substr($rest, $hash) !== '#insecure' || $self->transport !== 'tls') {
                throw $bad('may only end in #insecure (rediss…)');
            }
            $self->insecure = true;
            $rest = substr($rest, 0, $hash);
        }
        $query = [];
        if (($q = strpos($rest, '?')) !== false) {
            parse_str(substr($rest, $q + 1), $query);
            $rest = substr($rest, 0, $q);
            foreach (array_keys($query) as $name) {
                if (!in_array($name, $self->transport === 'unix' ? ['db', 'user', 'pass'] : ['db'], true)) {
                    throw $bad("has the query parameter '$name', which CronLock\\Redis does not take");
                }
            }
        }
        if ($self->transport === 'unix') {
            if ($rest === '' || $rest[0] !== '/') {
                throw $bad('needs the socket path: unix:///path/to/redis.sock');
            }
            $self->nodes = [[rawurldecode($rest), 0]];
            $self->user = isset($query['user']) && $query['user'] !== '' ? (string) $query['user'] : null;
            $self->password = isset($query['pass']) && $query['pass'] !== '' ? (string) $query['pass'] : null;
            $self->db = isset($query['db']) ? self::db((string) $query['db'], $bad) : 0;
            return $self;
        }
        $slash = strpos($rest, '/');
        $authority = $slash === false ? $rest : substr($rest, 0, $slash);
        $path = $slash === false ? '' : substr($rest, $slash + 1);
        if (($at = strrpos($authority, '@')) !== false) {
            $userinfo = substr($authority, 0, $at);
            $authority = substr($authority, $at + 1);
            $colon = strpos($userinfo, ':');
            // redis://secret@host: a lone user info is the password, as in the redis crate
            $user = $colon === false ? '' : substr($userinfo, 0, $colon);
            $password = $colon === false ? $userinfo : substr($userinfo, $colon + 1);
            $self->user = $user === '' ? null : rawurldecode($user);
            $self->password = $password === '' ? null : rawurldecode($password);
        }
        $default = $self->topology === 'sentinel' ? 26379 : 6379;
        foreach ($self->topology === 'single' ? [$authority] : explode(',', $authority) as $node) {
            if (!preg_match('/\A(?:\[([0-9a-fA-F:.]+)\]|([^:\[\]]+))(?::([0-9]{1,5}))?\z/', $node, $hm) || (isset($hm[3]) && (int) $hm[3] > 65535)) {
                throw $bad('needs host[:port]' . ($self->topology === 'single' ? '' : ' for each node, separated by commas'));
            }
            $self->nodes[] = [$hm[1] !== '' ? $hm[1] : rawurldecode($hm[2]), isset($hm[3]) ? (int) $hm[3] : $default];
        }
        $parts = $path === '' ? [] : explode('/', $path);
        if ($self->topology === 'sentinel') {
            if ($parts === [] || $parts[0] === '') {
                throw $bad("needs the master's name: redis-sentinel://host[:port][,host…]/mymaster[/db]");
            }
            $self->master = rawurldecode(array_shift($parts));
        }
        if (count($parts) > 1 || ($parts !== [] && $self->topology === 'cluster')) {
            throw $bad('has a path CronLock\Redis would refuse');
        }
        $self->db = $parts !== [] ? self::db($parts[0], $bad) : (isset($query['db']) ? self::db((string) $query['db'], $bad) : 0);
        return $self;
    }

    private static function db(string $db, callable $bad): int
    {
        if (!preg_match('/\A[0-9]{1,9}\z/', $db)) {
            throw $bad("names the database '" . Text::oneLine($db) . "', not a number");
        }
        return (int) $db;
    }

    /** The DSN as it may be printed: scheme, nodes, master, database; never a password. */
    public function describe(): string
    {
        $schemes = ['single' => ['tcp' => 'redis', 'tls' => 'rediss', 'unix' => 'unix'], 'cluster' => ['tcp' => 'redis-cluster', 'tls' => 'rediss-cluster'],
            'sentinel' => ['tcp' => 'redis-sentinel', 'tls' => 'rediss-sentinel']];
        $scheme = $schemes[$this->topology][$this->transport];
        if ($this->transport === 'unix') {
            return "unix://{$this->nodes[0][0]}" . ($this->db !== 0 ? "?db={$this->db}" : '');
        }
        $nodes = implode(',', array_map([self::class, 'address'], $this->nodes));
        $user = $this->user !== null ? rawurlencode($this->user) . '@' : '';
        $master = $this->master !== null ? '/' . rawurlencode($this->master) : '';
        return "$scheme://$user$nodes$master" . ($this->db !== 0 || $this->topology === 'single' ? "/{$this->db}" : '');
    }

    /** @param array{0: string, 1: int} $node */
    public static function address(array $node): string
    {
        return (strpos($node[0], ':') !== false ? "[{$node[0]}]" : $node[0]) . ':' . $node[1];
    }
}

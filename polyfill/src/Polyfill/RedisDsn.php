<?php

namespace CronLock\Polyfill;

/**
 * A parsed redis://, rediss:// or unix:// DSN, as the extension accepts them.
 *
 * @internal
 */
final class RedisDsn
{
    /** @var string 'tcp', 'tls' or 'unix' */
    public $transport;
    /** @var string host name, IP address, or socket path */
    public $host;
    /** @var int */
    public $port = 6379;
    /** @var int */
    public $db = 0;
    /** @var string|null */
    public $user;
    /** @var bool rediss://…#insecure: no certificate checks */
    public $insecure = false;

    /**
     * The passwords, kept off the objects (->password goes through __get/__set): var_export(),
     * (array) and get_object_vars() of a CronLock\Redis, which no __debugInfo() hides, must
     * not show one, as the extension's objects show none.
     *
     * @var array<string, string|null>
     */
    private static $passwords = [];

    /** @return string|null */
    public function __get(string $name)
    {
        if ($name !== 'password') {
            throw new \Error('Undefined property: ' . self::class . "::\$$name");
        }
        $id = spl_object_hash($this);
        return isset(self::$passwords[$id]) ? self::$passwords[$id] : null;
    }

    /** @param string|null $value */
    public function __set(string $name, $value)
    {
        if ($name !== 'password') {
            throw new \Error('Cannot create dynamic property ' . self::class . "::\$$name");
        }
        self::$passwords[spl_object_hash($this)] = $value === null ? null : (string) $value;
    }

    public function __destruct()
    {
        unset(self::$passwords[spl_object_hash($this)]);
    }

    /**
     * @throws \ValueError for a malformed DSN (the message never holds the password)
     * @throws \CronLock\LockException for a kind of DSN only the extension supports
     */
    public static function parse(
        #[\SensitiveParameter]
        string $dsn
    ): self
    {
        if (preg_match('/[\x00-\x1f\x7f]/', $dsn)) {
            throw Args::value('$dsn', 'must not contain NUL bytes or other control characters');
        }
        if (trim($dsn) !== $dsn) {
            throw Args::value('$dsn', 'must not have leading or trailing spaces');
        }
        // The reasons in parentheses are the redis crate's, which the extension shows.
        $bad = function ($why) {
            return Args::value('$dsn', "must look like redis://[[user]:password@]host[:port][/db], rediss://… or unix:///path/to/redis.sock ($why)");
        };
        if (!preg_match('#^([a-z][a-z0-9+.-]*)://(.*)$#is', $dsn, $m)) {
            throw $bad('Redis URL did not parse');
        }
        $scheme = strtolower($m[1]);
        // the redis crate's other names for them
        $aliases = ['valkey' => 'redis', 'valkeys' => 'rediss', 'redis+unix' => 'unix', 'valkey+unix' => 'unix'];
        $scheme = isset($aliases[$scheme]) ? $aliases[$scheme] : $scheme;
        $rest = $m[2];
        if (in_array($scheme, ['redis-sentinel', 'rediss-sentinel', 'redis-cluster', 'rediss-cluster'], true)) {
            throw new \CronLock\LockException("$scheme:// DSNs need the cronlock extension; cronlock/polyfill supports redis://, rediss:// and unix:// (one server)");
        }
        if ($scheme !== 'redis' && $scheme !== 'rediss' && $scheme !== 'unix') {
            throw $bad('Redis URL did not parse');
        }
        $self = new self();
        // What the extension refuses rather than ignores: a fragment other
        // than rediss://'s #insecure, unknown or repeated query parameters.
        $fragment = null;
        if (($hash = strpos($rest, '#')) !== false) {
            $fragment = substr($rest, $hash + 1);
            $rest = substr($rest, 0, $hash);
            if ($scheme !== 'rediss') {
                throw Args::value('$dsn', 'must not have a #fragment (only rediss:// takes #insecure)');
            }
        }
        $query = [];
        if (($q = strpos($rest, '?')) !== false) {
            foreach (explode('&', substr($rest, $q + 1)) as $pair) {
                $eq = strpos($pair, '=');
                $name = $eq === false ? $pair : substr($pair, 0, $eq);
                $known = $name === 'db' || ($scheme === 'unix' && ($name === 'user' || $name === 'pass'));
                if (!$known || $eq === false) {
                    throw Args::value('$dsn', 'must not have query parameters other than ?db=N (and, for unix://, user= and pass=)');
                }
                if (array_key_exists($name, $query)) {
                    throw Args::value('$dsn', "gives the query parameter '$name' more than once");
                }
                $value = (string) substr($pair, $eq + 1);
                $query[$name] = $scheme === 'unix' ? urldecode($value) : $value;
            }
            $rest = substr($rest, 0, $q);
        }
        if ($scheme === 'unix') {
            if ($rest === '' || $rest[0] !== '/') {
                throw $bad('Missing path');
            }
            $self->transport = 'unix';
            $self->host = rawurldecode($rest);
            $self->port = 0;
            if (isset($query['db'])) {
                $self->db = self::db($query['db'], $bad);
            }
            $self->user = isset($query['user']) && $query['user'] !== '' ? (string) $query['user'] : null;
            $self->password = isset($query['pass']) && $query['pass'] !== '' ? (string) $query['pass'] : null;
            return $self;
        }
        $self->transport = $scheme === 'rediss' ? 'tls' : 'tcp';
        if ($fragment !== null && $fragment !== 'insecure') {
            throw $bad('only #insecure is supported as URL fragment');
        }
        $self->insecure = $fragment === 'insecure';
        $slash = strpos($rest, '/');
        $authority = $slash === false ? $rest : substr($rest, 0, $slash);
        $path = $slash === false ? '' : substr($rest, $slash + 1);
        if (($at = strrpos($authority, '@')) !== false) {
            $userinfo = substr($authority, 0, $at);
            $authority = substr($authority, $at + 1);
            $colon = strpos($userinfo, ':');
            $user = $colon === false ? $userinfo : substr($userinfo, 0, $colon);
            $password = $colon === false ? '' : substr($userinfo, $colon + 1);
            // redis://secret@host: a lone user info is the password, as in the redis crate.
            if ($colon === false) {
                list($user, $password) = ['', $user];
            }
            $self->user = $user === '' ? null : rawurldecode($user);
            $self->password = $password === '' ? null : rawurldecode($password);
        }
        if (preg_match('/^\[([0-9a-fA-F:.]+)\](?::([0-9]*))?$/', $authority, $hm)) {
            $self->host = $hm[1];
            $port = isset($hm[2]) ? $hm[2] : '';
        } elseif (preg_match('/^([^:\[\]<>\\\\^| ]+)(?::([0-9]*))?$/', $authority, $hm)) {
            $self->host = rawurldecode($hm[1]);
            $port = isset($hm[2]) ? $hm[2] : '';
        } else {
            throw $bad($authority === '' && $at === false ? 'Missing hostname' : 'Redis URL did not parse');
        }
        if (isset($hm[2]) && $port === '') {
            throw Args::value('$dsn', "has ':' but no port after it (leave both out for 6379)");
        }
        if ($port !== '') {
            if (strlen($port) > 5 || (int) $port > 65535) {
                throw $bad('Redis URL did not parse');
            }
            $self->port = (int) $port;
        }
        $pathDb = $path !== '' ? self::db($path, $bad) : null;
        $queryDb = isset($query['db']) ? self::db($query['db'], $bad) : null;
        if ($pathDb !== null && $queryDb !== null && $pathDb !== $queryDb) {
            throw Args::value('$dsn', "names database $pathDb in its path and $queryDb in ?db=; give it once");
        }
        $self->db = $pathDb !== null ? $pathDb : ($queryDb !== null ? $queryDb : 0);
        return $self;
    }

    private static function db(string $db, callable $bad): int
    {
        if ($db !== '' && $db[0] === '-' && (preg_match('/^[0-9]+\z/', substr($db, 1)) === 1)) {
            throw Args::value('$dsn', 'must not name a negative database');
        }
        if (!(preg_match('/^[0-9]+\z/', $db) === 1) || strlen($db) > 9) {
            throw $bad('Invalid database number');
        }
        return (int) $db;
    }

    /** host:port or the socket path, for messages and the busy line. */
    /**
     * The server as far as the DSN shows it, as the extension compares them: one spelling
     * for every loopback address (localhost, 127.0.0.1, ::1, ::ffff:127.0.0.1) and for an
     * IPv4 address and its IPv4-mapped IPv6 form.
     */
    public function identity(): string
    {
        if ($this->transport === 'unix') {
            return $this->host;
        }
        $host = trim($this->host, '[]');
        $packed = strcasecmp($host, 'localhost') === 0 ? false : @inet_pton($host);
        if ($packed === false) {
            $host = strcasecmp($host, 'localhost') === 0 ? 'loopback' : strtolower($host);
        } else {
            if (strlen($packed) === 16 && strncmp($packed, str_repeat("\0", 10) . "\xff\xff", 12) === 0) {
                $packed = substr($packed, 12);
            }
            $host = in_array($packed, ["\x7f\0\0\x01", str_repeat("\0", 15) . "\x01"], true) ? 'loopback' : (string) inet_ntop($packed);
        }
        return "$host:{$this->port}";
    }

    public function address(): string
    {
        if ($this->transport === 'unix') {
            return $this->host;
        }
        $host = strpos($this->host, ':') !== false ? "[{$this->host}]" : $this->host;
        return "$host:{$this->port}";
    }
}

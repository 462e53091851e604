<?php

namespace CronLock\Polyfill;

/**
 * One connection to one Redis server through phpredis (when loaded) or
 * predis (when its classes can be autoloaded). Runs the lock's Lua scripts
 * with EVALSHA, loading them with EVAL only on NOSCRIPT, like the extension.
 * Failures are RedisFailure: connect (server unreachable or refusing us),
 * io (no answer, broken connection) or reply (an error reply: the lock
 * cannot work with this key or server).
 *
 * @internal
 */
abstract class RedisClient
{
    /** @var RedisDsn */
    protected $dsn;
    /** @var float */
    protected $connectTimeout;
    /** @var float */
    protected $readTimeout;

    /** @var array<string, RedisClient> the process's clients, one per server, credentials and timeouts */
    private static $shared = [];
    /** @var int the process that opened them */
    private static $sharedPid = 0;
    /** @var array<int, RedisClient> a fork child's inherited clients: never used, never closed early */
    private static $inherited = [];
    /** @var array<string, array<string, true>> per shared client, the lock objects that used it */
    private static $users = [];

    /**
     * The process's one client for $dsn's server, credentials and these timeouts,
     * opened on first use: the locks of a process share it (and reconnect together),
     * and it is closed when the last lock object that used it ($user) goes (forget()).
     *
     * @throws RedisFailure
     * @throws \CronLock\LockException when neither phpredis nor predis is available
     */
    public static function shared(RedisDsn $dsn, float $connectTimeout, float $readTimeout, string $user): self
    {
        $pid = Process::pid();
        if (self::$sharedPid !== $pid) {
            // a fork child: the parent's sockets (and TLS sessions) are not ours to use or close
            foreach (self::$shared as $client) {
                self::$inherited[] = $client;
            }
            self::$shared = [];
            self::$users = [];
            self::$sharedPid = $pid;
        }
        $key = implode("\0", [$dsn->transport, $dsn->host, $dsn->port, $dsn->db, (string) $dsn->user,
            $dsn->password === null ? '-' : sha1($dsn->password), $dsn->insecure ? 'insecure' : '', $connectTimeout, $readTimeout]);
        if (!isset(self::$shared[$key])) {
            self::$shared[$key] = self::open($dsn, $connectTimeout, $readTimeout);
        }
        self::$users[$key][$user] = true;
        return self::$shared[$key];
    }

    /**
     * Lock object $user is gone: the clients no other object used are closed, so a
     * worker that locks on many servers, databases or users does not keep them all
     * open, and the next object logs in again (a password revoked since is refused).
     */
    public static function forget(string $user)
    {
        if (self::$sharedPid !== Process::pid()) {
            return; // a fork child's copies: the parent's
        }
        foreach (self::$users as $key => $users) {
            unset(self::$users[$key][$user]);
            if (self::$users[$key] === []) {
                unset(self::$users[$key]);
                if (isset(self::$shared[$key])) {
                    self::$shared[$key]->close();
                    unset(self::$shared[$key]);
                }
            }
        }
    }

    /** A shared client that failed by I/O or timeout: closed, so its next user opens a new one. */
    public static function discard(RedisClient $client)
    {
        foreach (self::$shared as $key => $kept) {
            if ($kept === $client) {
                unset(self::$shared[$key]);
            }
        }
        $client->close();
    }

    /** @throws \CronLock\LockException when neither phpredis nor predis is available */
    public static function open(RedisDsn $dsn, float $connectTimeout, float $readTimeout): self
    {
        $client = self::available() === 'phpredis' ? new PhpRedisClient() : new PredisClient();
        $client->dsn = $dsn;
        $client->connectTimeout = $connectTimeout;
        $client->readTimeout = $readTimeout;
        $client->connect();
        return $client;
    }

    /**
     * The client library that serves: 'phpredis' when loaded, else 'predis'.
     *
     * @throws \CronLock\LockException when neither is available
     */
    public static function available(): string
    {
        if (extension_loaded('redis') && class_exists('Redis', false)) {
            return 'phpredis';
        }
        if (class_exists('Predis\Client')) {
            return 'predis';
        }
        throw new \CronLock\LockException(
            'CronLock\Redis in cronlock/polyfill needs a Redis client: install the phpredis extension '
            . '(pecl install redis, or apt-get install php-redis) or predis (composer require predis/predis), '
            . 'or load the cronlock extension'
        );
    }

    /** @throws RedisFailure */
    abstract protected function connect();

    /**
     * @param string[] $keys
     * @param array<int, string|int> $args
     * @return mixed the script's reply
     * @throws RedisFailure
     */
    abstract public function script(string $lua, array $keys, array $args);

    /**
     * WAIT: how many replicas acknowledged this connection's writes within $timeoutMs.
     *
     * @throws RedisFailure
     */
    abstract public function wait(int $replicas, int $timeoutMs): int;

    /**
     * GET: the key's value, null when there is no key.
     *
     * @throws RedisFailure
     */
    abstract public function get(string $key): ?string;

    abstract public function close();

    protected function tlsContext(): array
    {
        $ssl = ['verify_peer' => !$this->dsn->insecure, 'verify_peer_name' => !$this->dsn->insecure];
        $ca = getenv('SSL_CERT_FILE');
        if (is_string($ca) && $ca !== '') {
            $ssl['cafile'] = $ca;
        }
        $dir = getenv('SSL_CERT_DIR');
        if (is_string($dir) && $dir !== '') {
            $ssl['capath'] = $dir;
        }
        return $ssl;
    }

    protected function timedOut(float $started, float $limit): bool
    {
        return Process::now() - $started >= $limit * 0.9;
    }
}

/**
 * A failure of one step: connect (reaching the server, AUTH, SELECT), io (no
 * answer in time, a broken connection) or reply (an error reply). The
 * message is the OS reason or the server's reply as the client gave it.
 *
 * @internal
 */
final class RedisFailure extends \Exception
{
    const CONNECT = 'connect';
    const IO = 'io';
    const REPLY = 'reply';
    /** The key was taken, but too few replicas acknowledged it ('replicas'); it was given back. */
    const REPLICAS = 'replicas';

    /** Server replies that say "not now": a waiter retries them (as the extension does). */
    const TRANSIENT_CODES = ['LOADING', 'BUSY', 'TRYAGAIN', 'MASTERDOWN'];
    /** Server replies that say the lock cannot work with this key or server: LockException. */
    const UNUSABLE_CODES = ['ERR', 'EXECABORT', 'CROSSSLOT', 'WRONGTYPE'];

    /** @var string */
    public $kind;
    /** @var bool no answer in time (as opposed to a broken connection) */
    public $timedOut;
    /** @var string|null the server's error code ("OOM", "NOPERM", ...); null for an OS failure */
    public $code;
    /** @var string what follows the code */
    private $detail = '';

    public function __construct(string $kind, string $message, bool $timedOut = false)
    {
        parent::__construct($message);
        $this->kind = $kind;
        $this->timedOut = $timedOut;
        if ($kind !== self::IO && preg_match('/^([A-Z][A-Z0-9_]+)(?:\s+(.*))?$/s', trim($message), $m)) {
            $this->code = $m[1];
            $this->detail = isset($m[2]) ? trim($m[2]) : '';
        }
    }

    /** Whether a waiter should try again: unreachable, broken, timed out, or "not now". */
    public function transient(): bool
    {
        return $this->code === null ? $this->kind !== self::REPLY : in_array($this->code, self::TRANSIENT_CODES, true);
    }

    public function makesLockUnusable(): bool
    {
        return $this->kind === self::REPLY && ($this->code === null || in_array($this->code, self::UNUSABLE_CODES, true));
    }

    /** What went wrong, in words: the OS reason, or the reply with the common codes explained (D6). */
    public function describe(): string
    {
        if ($this->code === null) {
            $text = trim($this->getMessage());
            // phpredis and predis name a connection the server closed so
            if ($this->kind === self::IO && preg_match('/^(Connection lost|read error on connection|socket error on read|Error while reading line from the server|Connection closed)/i', $text)) {
                return 'the server closed the connection';
            }
            return $text;
        }
        $detail = $this->detail;
        $with = function (string $words) use ($detail) {
            return $detail === '' ? $words : "$words ($detail)";
        };
        switch ($this->code) {
            case 'OOM':
                return 'out of memory (maxmemory reached)';
            case 'NOPERM':
                return $with('permission denied by ACL');
            case 'READONLY':
                return 'it is a read-only replica';
            case 'WRONGPASS':
                return 'wrong user name or password (or the user is disabled)';
            case 'NOAUTH':
                return 'it requires a password, and the DSN has none';
            case 'LOADING':
                return 'it is still loading its data set';
            case 'BUSY':
                return 'it is busy running a script';
            case 'MASTERDOWN':
                return 'it is a replica that lost its master';
            case 'MOVED':
            case 'ASK':
            case 'CLUSTERDOWN':
            case 'CROSSSLOT':
            case 'TRYAGAIN':
                return 'it is a Redis Cluster node, and cluster mode is not supported';
            case 'WRONGTYPE':
                // the acquire script names the type itself
                return strpos($detail, 'the key holds a ') === 0 ? $detail : 'the key holds a value of another type';
            case 'ERR':
                return $detail !== '' ? $detail : 'err';
        }
        return $with(strtolower($this->code));
    }
}

/** @internal */
final class PhpRedisClient extends RedisClient
{
    /** @var \Redis|null */
    private $redis;

    protected function connect()
    {
        $r = new \Redis();
        $d = $this->dsn;
        $started = Process::now();
        try {
            if ($d->transport === 'unix') {
                $ok = $r->connect($d->host, 0, $this->connectTimeout, null, 0, $this->connectTimeout);
            } elseif ($d->transport === 'tls') {
                $ssl = $this->tlsContext();
                if (self::eofCheckMayHangOnTls13()) {
                    $ssl['crypto_method'] = STREAM_CRYPTO_METHOD_TLSv1_2_CLIENT;
                }
                $ok = $r->connect('tls://' . $d->host, $d->port, $this->connectTimeout, null, 0, $this->connectTimeout, ['stream' => $ssl]);
            } else {
                $ok = $r->connect($d->host, $d->port, $this->connectTimeout, null, 0, $this->connectTimeout);
            }
            if (!$ok) {
                throw new RedisFailure(RedisFailure::CONNECT, $r->getLastError() ?: 'connection failed');
            }
            if ($d->password !== null) {
                if (!$r->auth($d->user !== null ? [$d->user, $d->password] : $d->password)) {
                    throw new RedisFailure(RedisFailure::CONNECT, $r->getLastError() ?: 'authentication failed');
                }
            }
            if ($d->db !== 0 && !$r->select($d->db)) {
                throw new RedisFailure(RedisFailure::CONNECT, $r->getLastError() ?: "SELECT {$d->db} failed");
            }
            if ($d->password === null && $d->db === 0) {
                $r->ping(); // something that accepts TCP is not yet a Redis that answers
            }
            $r->setOption(\Redis::OPT_READ_TIMEOUT, (string) $this->readTimeout);
        } catch (\RedisException $e) {
            throw new RedisFailure(RedisFailure::CONNECT, $e->getMessage(), $this->timedOut($started, $this->connectTimeout));
        }
        $this->redis = $r;
    }

    /**
     * phpredis checks its stream with php_stream_eof() before every command.
     * On a TLS stream PHP answers that with SSL_peek() on the blocking
     * socket (php-src GH-10495): when all that is readable is a record
     * without data, such as the session tickets a TLS 1.3 server sends
     * just after the handshake, SSL_peek() waits for data that never comes,
     * with no timeout. The first command on a new connection (PING, AUTH,
     * or phpredis reconnecting after a fork child's exit closed the
     * parent's TLS session) then hangs whenever the tickets arrive first.
     * TLS 1.2 sends no records after the handshake. Measured with a 100 ms
     * pause between connect and feof(): PHP 7.4.33, 8.1.2 and 8.3.6 hang,
     * 8.2.36 and 8.4.27 do not; the fix came in a 2024 patch release of
     * 8.2 and 8.3, which PHP_VERSION cannot tell apart, so below 8.4 the
     * polyfill connects with TLS 1.2 through phpredis (predis never calls
     * feof(), and keeps TLS 1.3).
     */
    private static function eofCheckMayHangOnTls13(): bool
    {
        return PHP_VERSION_ID < 80400;
    }

    public function script(string $lua, array $keys, array $args)
    {
        $started = Process::now();
        $r = $this->redis;
        $params = array_merge($keys, $args);
        try {
            $reply = $r->evalSha(sha1($lua), $params, count($keys));
            $error = $r->getLastError();
            if ($reply === false && $error !== null && strpos($error, 'NOSCRIPT') === 0) {
                $r->clearLastError();
                $reply = $r->eval($lua, $params, count($keys));
                $error = $r->getLastError();
            }
            if ($reply === false && $error !== null) {
                $r->clearLastError();
                throw new RedisFailure(RedisFailure::REPLY, $error);
            }
            return $reply;
        } catch (\RedisException $e) {
            // phpredis throws some error replies too ("OOM command not allowed ...")
            if (preg_match('/^[A-Z][A-Z0-9_]+ /', $e->getMessage())) {
                throw new RedisFailure(RedisFailure::REPLY, $e->getMessage());
            }
            throw new RedisFailure(RedisFailure::IO, $e->getMessage(), $this->timedOut($started, $this->readTimeout));
        }
    }

    public function get(string $key): ?string
    {
        $started = Process::now();
        $r = $this->redis;
        try {
            $r->clearLastError();
            $reply = $r->rawCommand('GET', $key);
        } catch (\RedisException $e) {
            if (preg_match('/^[A-Z][A-Z0-9_]+ /', $e->getMessage())) {
                throw new RedisFailure(RedisFailure::REPLY, $e->getMessage());
            }
            throw new RedisFailure(RedisFailure::IO, $e->getMessage(), $this->timedOut($started, $this->readTimeout));
        }
        if ($reply === false || $reply === null) {
            $error = $r->getLastError();
            if ($error !== null) {
                $r->clearLastError();
                throw new RedisFailure(RedisFailure::REPLY, $error);
            }
            return null; // phpredis reads a nil reply as false
        }
        return (string) $reply;
    }

    public function wait(int $replicas, int $timeoutMs): int
    {
        $started = Process::now();
        try {
            $reply = $this->redis->rawCommand('WAIT', $replicas, $timeoutMs);
        } catch (\RedisException $e) {
            throw new RedisFailure(RedisFailure::IO, $e->getMessage(), $this->timedOut($started, $this->readTimeout));
        }
        if (!is_int($reply)) {
            throw new RedisFailure(RedisFailure::REPLY, (string) ($this->redis->getLastError() ?: 'unexpected reply to WAIT'));
        }
        return $reply;
    }

    public function close()
    {
        if ($this->redis !== null) {
            try {
                $this->redis->close();
            } catch (\Throwable $e) {
                // already broken
            }
            $this->redis = null;
        }
    }
}

/** @internal */
final class PredisClient extends RedisClient
{
    /** @var \Predis\Client|null */
    private $client;

    protected function connect()
    {
        $d = $this->dsn;
        $params = ['timeout' => $this->connectTimeout, 'read_write_timeout' => $this->connectTimeout];
        if ($d->transport === 'unix') {
            $params += ['scheme' => 'unix', 'path' => $d->host];
        } else {
            $params += ['scheme' => $d->transport, 'host' => $d->host, 'port' => $d->port];
            if ($d->transport === 'tls') {
                $params['ssl'] = $this->tlsContext();
            }
        }
        $started = Process::now();
        try {
            $client = new \Predis\Client($params);
            $client->connect();
            $this->client = $client;
            if ($d->password !== null) {
                $this->raw($d->user !== null ? ['AUTH', $d->user, $d->password] : ['AUTH', $d->password], RedisFailure::CONNECT);
            }
            if ($d->db !== 0) {
                $this->raw(['SELECT', (string) $d->db], RedisFailure::CONNECT);
            }
            if ($d->password === null && $d->db === 0) {
                $this->raw(['PING'], RedisFailure::CONNECT);
            }
            $stream = $client->getConnection()->getResource();
            $secs = (int) floor($this->readTimeout);
            stream_set_timeout($stream, $secs, (int) (($this->readTimeout - $secs) * 1e6));
        } catch (\Predis\PredisException $e) {
            $this->client = null;
            throw new RedisFailure(RedisFailure::CONNECT, self::reason($e), $this->timedOut($started, $this->connectTimeout));
        } catch (RedisFailure $e) {
            $this->client = null;
            throw $e;
        }
    }

    /** @param string[] $command */
    private function raw(array $command, string $kind)
    {
        $error = false;
        $reply = $this->client->executeRaw($command, $error);
        if ($error) {
            throw new RedisFailure($kind === RedisFailure::CONNECT ? RedisFailure::CONNECT : RedisFailure::REPLY, (string) $reply);
        }
        return $reply;
    }

    public function script(string $lua, array $keys, array $args)
    {
        $started = Process::now();
        $params = array_map('strval', array_merge($keys, $args));
        try {
            $error = false;
            $reply = $this->client->executeRaw(array_merge(['EVALSHA', sha1($lua), (string) count($keys)], $params), $error);
            if ($error && strpos((string) $reply, 'NOSCRIPT') === 0) {
                $error = false;
                $reply = $this->client->executeRaw(array_merge(['EVAL', $lua, (string) count($keys)], $params), $error);
            }
            if ($error) {
                throw new RedisFailure(RedisFailure::REPLY, (string) $reply);
            }
            return $reply;
        } catch (\Predis\PredisException $e) {
            throw new RedisFailure(RedisFailure::IO, self::reason($e), $this->timedOut($started, $this->readTimeout));
        }
    }

    public function get(string $key): ?string
    {
        $started = Process::now();
        try {
            $reply = $this->raw(['GET', $key], RedisFailure::REPLY);
        } catch (\Predis\PredisException $e) {
            throw new RedisFailure(RedisFailure::IO, self::reason($e), $this->timedOut($started, $this->readTimeout));
        }
        return $reply === null ? null : (string) $reply;
    }

    public function wait(int $replicas, int $timeoutMs): int
    {
        $started = Process::now();
        try {
            $reply = $this->raw(['WAIT', (string) $replicas, (string) $timeoutMs], RedisFailure::REPLY);
        } catch (\Predis\PredisException $e) {
            throw new RedisFailure(RedisFailure::IO, self::reason($e), $this->timedOut($started, $this->readTimeout));
        }
        return (int) $reply;
    }

    /** predis appends " [tcp://host:port]" or " [unix:/path]": the caller names the address itself. */
    private static function reason(\Exception $e): string
    {
        return (string) preg_replace('/ \[(?:tcp|tls|unix):[^\]]*\]$/', '', $e->getMessage());
    }

    public function close()
    {
        if ($this->client !== null) {
            try {
                $this->client->disconnect();
            } catch (\Throwable $e) {
                // already broken
            }
            $this->client = null;
        }
    }
}

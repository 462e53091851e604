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

    /** @throws \CronLock\LockException when neither phpredis nor predis is available */
    public static function open(RedisDsn $dsn, float $connectTimeout, float $readTimeout): self
    {
        if (extension_loaded('redis') && class_exists('Redis', false)) {
            $client = new PhpRedisClient();
        } elseif (class_exists('Predis\Client')) {
            $client = new PredisClient();
        } else {
            throw new \CronLock\LockException(
                'CronLock\Redis in cronlock/polyfill needs a Redis client: install the phpredis extension '
                . '(pecl install redis, or apt-get install php-redis) or predis (composer require predis/predis), '
                . 'or load the cronlock extension'
            );
        }
        $client->dsn = $dsn;
        $client->connectTimeout = $connectTimeout;
        $client->readTimeout = $readTimeout;
        $client->connect();
        return $client;
    }

    /** Which client library serves, for the renewer process. */
    abstract public function library(): string;

    /** @throws RedisFailure */
    abstract protected function connect();

    /**
     * @param string[] $keys
     * @param array<int, string|int> $args
     * @return mixed the script's reply
     * @throws RedisFailure
     */
    abstract public function script(string $lua, array $keys, array $args);

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
        return microtime(true) - $started >= $limit * 0.9;
    }
}

/** @internal */
final class RedisFailure extends \Exception
{
    const CONNECT = 'connect';
    const IO = 'io';
    const REPLY = 'reply';

    /** @var string */
    public $kind;
    /** @var bool no answer in time (as opposed to a broken connection) */
    public $timedOut;

    public function __construct(string $kind, string $message, bool $timedOut = false)
    {
        parent::__construct($message);
        $this->kind = $kind;
        $this->timedOut = $timedOut;
    }
}

/** @internal */
final class PhpRedisClient extends RedisClient
{
    /** @var \Redis|null */
    private $redis;

    public function library(): string
    {
        return 'phpredis';
    }

    protected function connect()
    {
        $r = new \Redis();
        $d = $this->dsn;
        $started = microtime(true);
        try {
            if ($d->transport === 'unix') {
                $ok = $r->connect($d->host, 0, $this->connectTimeout, null, 0, $this->connectTimeout);
            } elseif ($d->transport === 'tls') {
                $ok = $r->connect('tls://' . $d->host, $d->port, $this->connectTimeout, null, 0, $this->connectTimeout, ['stream' => $this->tlsContext()]);
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
            $why = $this->timedOut($started, $this->connectTimeout)
                ? sprintf('no answer within %d ms', $this->connectTimeout * 1000) : $e->getMessage();
            throw new RedisFailure(RedisFailure::CONNECT, $why);
        }
        $this->redis = $r;
    }

    public function script(string $lua, array $keys, array $args)
    {
        $started = microtime(true);
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
            $late = $this->timedOut($started, $this->readTimeout);
            $why = $late ? sprintf('no answer within %d ms', $this->readTimeout * 1000) : $e->getMessage();
            throw new RedisFailure(RedisFailure::IO, $why, $late);
        }
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

    public function library(): string
    {
        return 'predis';
    }

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
        $started = microtime(true);
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
            $why = $this->timedOut($started, $this->connectTimeout)
                ? sprintf('no answer within %d ms', $this->connectTimeout * 1000) : self::reason($e);
            throw new RedisFailure(RedisFailure::CONNECT, $why);
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
        $started = microtime(true);
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
            $late = $this->timedOut($started, $this->readTimeout);
            $why = $late ? sprintf('no answer within %d ms', $this->readTimeout * 1000) : self::reason($e);
            throw new RedisFailure(RedisFailure::IO, $why, $late);
        }
    }

    /** predis appends " [tcp://host:port]": the caller names the address itself. */
    private static function reason(\Exception $e): string
    {
        return (string) preg_replace('/ \[[a-z]+:\/\/[^\]]*\]$/', '', $e->getMessage());
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

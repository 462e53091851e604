<?php

namespace CronLock\Cli\Redis;

/** phpredis (ext-redis): rawCommand(), whose nil reply is false (told from an error by getLastError()). */
final class PhpRedisConnection extends Connection
{
    /** @var \Redis */
    private $redis;

    public function client(): string
    {
        return 'phpredis';
    }

    protected function connect(Dsn $dsn, array $node)
    {
        $this->redis = new \Redis();
        try {
            if ($dsn->transport === 'unix') {
                $ok = $this->redis->connect($node[0], 0, self::CONNECT_TIMEOUT, null, 0, self::READ_TIMEOUT);
            } elseif ($dsn->transport === 'tls') {
                $ok = $this->redis->connect('tls://' . $node[0], $node[1], self::CONNECT_TIMEOUT, null, 0, self::READ_TIMEOUT, ['stream' => self::tlsContext($dsn)]);
            } else {
                $ok = $this->redis->connect($node[0], $node[1], self::CONNECT_TIMEOUT, null, 0, self::READ_TIMEOUT);
            }
        } catch (\RedisException $e) {
            throw new \RuntimeException("cannot connect to Redis at {$this->address}: " . $e->getMessage());
        }
        if (!$ok) {
            throw new \RuntimeException("cannot connect to Redis at {$this->address}: " . ($this->redis->getLastError() ?: 'connection failed'));
        }
        if (!$this->sentinel) {
            $this->login($dsn);
        }
    }

    public function command(array $args)
    {
        $this->redis->clearLastError();
        try {
            $reply = $this->redis->rawCommand(...array_map('strval', $args));
        } catch (\RedisException $e) {
            throw new \RuntimeException("Redis at {$this->address}: " . $e->getMessage());
        }
        $error = $this->redis->getLastError();
        if ($reply === false && $error !== null) {
            throw new ReplyError($error);
        }
        return $reply === false ? null : $reply;
    }

    public function close()
    {
        try {
            $this->redis->close();
        } catch (\RedisException $e) {
            // closing a broken connection: nothing to do
        }
    }
}

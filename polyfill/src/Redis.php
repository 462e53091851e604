<?php

namespace CronLock;

use CronLock\Polyfill\Args;
use CronLock\Polyfill\Process;
use CronLock\Polyfill\RedisClient;
use CronLock\Polyfill\RedisDsn;
use CronLock\Polyfill\RedisFailure;
use CronLock\Polyfill\Registry;
use CronLock\Polyfill\Renewer;

/**
 * A Redis lock with the extension's keys, token format, Lua scripts and
 * fencing counter, so the extension and this class exclude each other on one
 * key: `<key>` holds `<32 hex digits>:<pid>@<host>` with the TTL,
 * `<key>:fence` is INCRed by every acquire, `<key>:released` is published
 * on release. Through phpredis when loaded, else predis.
 */
final class Redis implements Lock
{
    const MAX_TTL = 315360000.0; // 10 years, as in the extension
    const MAX_TIMEOUT = 86400.0;
    /** Longest pause between two tries of a wait (waiters poll; see the README). */
    const MAX_POLL = 0.05;

    // Byte for byte the extension's scripts (src/lock/redis.rs).
    const ACQUIRE_LUA = "
-- KEYS[1] lock key, KEYS[2] fence counter; ARGV[1] token, ARGV[2] ttl in ms
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence = redis.pcall('INCR', KEYS[2])
  if type(fence) == 'table' then
    -- do not leave behind a lock the caller will never know it holds
    redis.call('DEL', KEYS[1])
    return fence
  end
  return {1, fence, ''}
end
-- busy: when it expires at the latest, and who holds it (for the log line)
local holder = redis.pcall('GET', KEYS[1])
if type(holder) ~= 'string' then holder = '' end
return {0, redis.call('PTTL', KEYS[1]), holder}
";

    const RENEW_LUA = "
-- KEYS[1] lock key; ARGV[1] token, ARGV[2] ttl in ms
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
";

    const RELEASE_LUA = "
-- KEYS[1] lock key; ARGV[1] token, ARGV[2] release channel
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  -- pcall: a user without channel rights may still release
  redis.pcall('PUBLISH', ARGV[2], '')
  return 1
end
return 0
";

    /** @var RedisDsn|null */
    private $dsn;
    /** @var string */
    private $key = '';
    /** @var float */
    private $ttl = 300.0;
    /** @var bool */
    private $autoRenew = false;
    /** @var float */
    private $connectTimeout = 1.0;
    /** @var float */
    private $readTimeout = 1.0;
    /** @var int */
    private $ownerPid = 0;
    /** @var RedisClient|null */
    private $client;
    /** @var array{token: string, fence: int, validUntil: float, lost: bool}|null */
    private $hold;
    /** @var Renewer|null the auto-renew helper process, kept across acquires */
    private $renewer;
    /** @var int number of this object's successful acquires, to tell the helper's reports apart */
    private $holdSeq = 0;
    /** @var string|null the value of the key when the last acquire found it busy */
    private $lastHolder;
    /** @var array<int, mixed> a fork child's inherited connections: never used, never closed early */
    private static $inherited = [];

    /**
     * Validates the arguments; connects on first use.
     *
     * @param string|array $dsn 'redis://[[user]:password@]host[:port][/db]', 'rediss://…'
     *        ('#insecure' skips certificate checks), 'unix:///path/to/redis.sock'. A list
     *        (Redlock), sentinel and cluster DSNs need the extension: LockException.
     * @param array{auto_renew?: bool, connect_timeout?: float, read_timeout?: float} $options
     * @throws \ValueError for an empty key, a NUL byte, ttl <= 0, a malformed DSN or an unknown option.
     * @throws \TypeError for a $dsn or option of the wrong type.
     * @throws LockException for a DSN kind only the extension supports.
     */
    public function __construct(
        #[\SensitiveParameter]
        $dsn,
        string $key,
        float $ttl = 300.0,
        array $options = []
    ) {
        if ($this->dsn !== null) {
            throw new \Error('Cannot call CronLock\Redis::__construct() twice');
        }
        if (is_array($dsn)) {
            throw new LockException('a list of DSNs (Redlock) needs the cronlock extension; cronlock/polyfill supports one redis://, rediss:// or unix:// DSN');
        }
        if (!is_string($dsn)) {
            throw new \TypeError('CronLock\Redis::__construct(): Argument #1 ($dsn) must be of type array|string, ' . Args::typeName($dsn) . ' given');
        }
        if ($key === '') {
            throw Args::value('$key', 'must not be empty');
        }
        if (strpos($key, "\0") !== false) {
            throw Args::value('$key', 'must not contain NUL bytes');
        }
        $this->ttl = self::checkTtl($ttl);
        Args::options($options, ['auto_renew', 'connect_timeout', 'read_timeout']);
        $this->connectTimeout = self::timeoutOption($options, 'connect_timeout');
        $this->readTimeout = self::timeoutOption($options, 'read_timeout');
        $this->autoRenew = Args::bool($options, 'auto_renew', false);
        $parsed = RedisDsn::parse($dsn);
        $this->key = $key;
        $this->ownerPid = Process::pid();
        $this->dsn = $parsed;
    }

    /** One round trip per try: SET NX PX and the fencing INCR in one script. @throws ConnectionException */
    public function acquire(float $timeout = 0.0): bool
    {
        Args::timeout($timeout);
        $this->adoptProcess();
        $owner = spl_object_hash($this);
        Registry::noteRefusal($owner, null);
        if ($this->hold !== null) {
            if ($this->isHeld()) {
                // Check-and-extend (decision D1): one token-checked PEXPIRE to the lock's TTL.
                return $this->renew();
            }
            $this->forgetHold();
        }
        $token = bin2hex(random_bytes(16)) . ':' . Process::pid() . '@' . Process::hostname();
        if ($timeout == 0) {
            return $this->tryToLock($timeout, $owner, $token);
        }
        return Process::watchingSignals(function () use ($timeout, $owner, $token) {
            return $this->tryToLock($timeout, $owner, $token);
        });
    }

    /** The tries of one acquire(): the acquire script, then pauses until the deadline. */
    private function tryToLock(float $timeout, string $owner, string $token): bool
    {
        $deadline = $timeout > 0 && is_finite($timeout) ? microtime(true) + $timeout : null;
        $forever = $timeout < 0 || is_infinite($timeout);
        $pause = 0.002;
        while (true) {
            if (Registry::heldByOther($this->lockId(), $owner, false) !== null) {
                if ($timeout != 0) {
                    throw Registry::deadlock("redis key '" . Args::cut($this->key) . "'", 'CronLock\Redis');
                }
                Registry::noteRefusal($owner, 'self');
                return false;
            }
            $sent = microtime(true);
            $reply = $this->run(self::ACQUIRE_LUA, [$this->key, $this->key . ':fence'], [$token, $this->ttlMs($this->ttl)]);
            if (!is_array($reply) || count($reply) < 3) {
                throw new LockException(sprintf('Redis at %s failed: unexpected reply to the acquire script', $this->dsn->address()));
            }
            if ((int) $reply[0] === 1) {
                $this->hold = ['token' => $token, 'fence' => (int) $reply[1], 'validUntil' => $sent + $this->ttl, 'lost' => false];
                Registry::hold($this->lockId(), $owner, false, $this->autoRenew ? INF : $sent + $this->ttl);
                if ($this->autoRenew) {
                    $this->startRenewing($token);
                }
                return true;
            }
            $this->lastHolder = (string) $reply[2];
            $expiresIn = (int) $reply[1] >= 0 ? (int) $reply[1] / 1000 : null;
            if (!$forever && ($deadline === null || microtime(true) >= $deadline)) {
                return false;
            }
            $nap = $pause;
            if ($deadline !== null) {
                $nap = min($nap, $deadline - microtime(true));
            }
            if ($expiresIn !== null) {
                $nap = min($nap, $expiresIn);
            }
            if (Process::nap(max(0.001, $nap))) {
                Registry::noteRefusal($owner, 'signal');
                return false;
            }
            $pause = min($pause * 2, self::MAX_POLL);
        }
    }

    /** Token-checked PEXPIRE; false (and not held) when the key is no longer ours. @throws ConnectionException */
    public function renew(?float $ttl = null): bool
    {
        $this->adoptProcess();
        $ttl = self::checkTtl($ttl === null ? $this->ttl : $ttl);
        if ($this->hold === null) {
            return false;
        }
        $this->readRenewer();
        if ($this->hold['lost']) {
            $this->forgetHold();
            return false;
        }
        $sent = microtime(true);
        $renewed = (int) $this->run(self::RENEW_LUA, [$this->key], [$this->hold['token'], $this->ttlMs($ttl)]) === 1;
        if (!$renewed) {
            $this->forgetHold();
            return false;
        }
        $this->hold['validUntil'] = $sent + $ttl;
        Registry::hold($this->lockId(), spl_object_hash($this), false, $this->autoRenew ? INF : $sent + $ttl);
        return true;
    }

    /** Token-checked DEL; false (key untouched) when it is no longer ours. @throws ConnectionException */
    public function release(): bool
    {
        $this->adoptProcess();
        if ($this->hold === null) {
            return false;
        }
        $valid = $this->isHeld();
        $token = $this->hold['token'];
        $this->forgetHold();
        if (!$valid) {
            return false; // lost, or past its TTL unrenewed: not ours to delete any more
        }
        return (int) $this->run(self::RELEASE_LUA, [$this->key], [$token, $this->key . ':released']) === 1;
    }

    public function isHeld(): bool
    {
        if ($this->hold === null || $this->ownerPid !== Process::pid()) {
            return false;
        }
        $this->readRenewer();
        return !$this->hold['lost'] && microtime(true) < $this->hold['validUntil'];
    }

    /** The random token stored as the key's value; null when not held. */
    public function token(): ?string
    {
        return $this->isHeld() ? $this->hold['token'] : null;
    }

    /** Strictly increasing per key with each successful acquire; null when not held. */
    public function fencingToken(): ?int
    {
        return $this->isHeld() ? $this->hold['fence'] : null;
    }

    public function key(): string
    {
        return $this->key;
    }

    public function __destruct()
    {
        if ($this->ownerPid !== Process::pid()) {
            $this->adoptProcess();
            return;
        }
        if ($this->hold !== null) {
            try {
                $this->release();
            } catch (\Throwable $e) {
                // nobody to tell; the key expires by its TTL
            }
        }
        if ($this->renewer !== null) {
            $this->renewer->stop();
            $this->renewer = null;
        }
        if ($this->client !== null) {
            $this->client->close();
        }
    }

    public function __clone()
    {
        throw new \Error('Trying to clone an uncloneable object of class CronLock\Redis');
    }

    public function __sleep()
    {
        throw self::notSerializable();
    }

    public function __wakeup()
    {
        throw self::notSerializable();
    }

    public function __serialize(): array
    {
        throw self::notSerializable();
    }

    public function __unserialize(array $data)
    {
        throw self::notSerializable();
    }

    public function __debugInfo()
    {
        return ['key' => $this->key, 'ttl' => $this->ttl, 'held' => $this->isHeld()];
    }

    private static function notSerializable(): LockException
    {
        return new LockException('a CronLock\Redis cannot be serialized: a lock belongs to the process that holds it');
    }

    private function lockId(): string
    {
        return 'redis:' . $this->dsn->address() . '/' . $this->dsn->db . ':' . $this->key;
    }

    private static function checkTtl(float $ttl): float
    {
        if (is_nan($ttl) || is_infinite($ttl) || $ttl < 0) {
            throw Args::value('$ttl', 'must be a finite number greater than 0');
        }
        if ($ttl == 0) {
            throw Args::value('$ttl', 'must be greater than 0');
        }
        if ($ttl > self::MAX_TTL) {
            throw Args::value('$ttl', 'must be at most 315360000 seconds (10 years)');
        }
        return $ttl;
    }

    /** @param array<string, mixed> $options */
    private static function timeoutOption(array $options, string $name): float
    {
        $seconds = Args::seconds($options, $name);
        if ($seconds === null) {
            return 1.0;
        }
        if (!($seconds > 0) || $seconds > self::MAX_TIMEOUT) {
            throw Args::value("\$options['$name']", 'must be a number of seconds greater than 0 and at most 86400');
        }
        return $seconds;
    }

    /** Redis takes whole milliseconds; rounding up keeps a tiny TTL from becoming 0. */
    private function ttlMs(float $ttl): int
    {
        return max(1, (int) ceil($ttl * 1000));
    }

    /**
     * Runs a script on this lock's connection, opening it if needed. A
     * connection that was already open and breaks (not a timeout) is
     * reopened once: it may be stale, e.g. after a fork child closed its
     * copy of a TLS session. Every script is safe to run twice.
     *
     * @return mixed
     */
    private function run(string $lua, array $keys, array $args)
    {
        $fresh = false;
        for ($attempt = 0; ; $attempt++) {
            try {
                if ($this->client === null) {
                    $fresh = true;
                    $this->client = RedisClient::open($this->dsn, $this->connectTimeout, $this->readTimeout);
                }
                return $this->client->script($lua, $keys, $args);
            } catch (RedisFailure $f) {
                if ($f->kind !== RedisFailure::REPLY && $this->client !== null) {
                    $this->client->close();
                    $this->client = null;
                }
                if ($f->kind === RedisFailure::IO && !$f->timedOut && !$fresh && $attempt === 0) {
                    continue;
                }
                throw $this->failure($f);
            }
        }
    }

    private function failure(RedisFailure $f): LockException
    {
        $address = $this->dsn->address();
        $message = $f->kind === RedisFailure::CONNECT
            ? "cannot connect to Redis at $address: " . $f->getMessage()
            : "Redis at $address failed: " . $f->getMessage();
        if ($this->dsn->password !== null && $this->dsn->password !== '') {
            $message = str_replace([$this->dsn->password, rawurlencode($this->dsn->password)], '***', $message);
        }
        return $f->kind === RedisFailure::REPLY ? new LockException($message) : new ConnectionException($message);
    }

    private function startRenewing(string $token)
    {
        $this->holdSeq++;
        try {
            for ($try = 0; $try < 2; $try++) {
                if ($this->renewer === null) {
                    $this->renewer = Renewer::start($this->dsn, $this->client->library(), $this->key, $this->ttl, $this->connectTimeout, $this->readTimeout);
                }
                if ($this->renewer->hold($this->holdSeq, $token)) {
                    return;
                }
                $this->renewer->stop(); // it died: start a new one
                $this->renewer = null;
            }
            throw new LockException('cannot start the auto-renew process: it exits at once');
        } catch (LockException $e) {
            try {
                $this->run(self::RELEASE_LUA, [$this->key], [$token, $this->key . ':released']);
            } catch (LockException $ignored) {
                // best effort: otherwise the key stays until its TTL
            }
            $this->forgetHold();
            throw $e;
        }
    }

    /** Picks up what the auto-renew process reported: renewals, or that the key is not ours. */
    private function readRenewer()
    {
        if ($this->renewer === null || $this->hold === null) {
            return;
        }
        foreach ($this->renewer->reports() as $report) {
            list($what, $seq, $until) = $report;
            if ($seq !== $this->holdSeq) {
                continue; // about an earlier acquisition
            }
            if ($what === 'LOST') {
                $this->hold['lost'] = true;
            } else {
                $this->hold['validUntil'] = max($this->hold['validUntil'], $until);
            }
        }
    }

    private function forgetHold()
    {
        if ($this->renewer !== null && $this->hold !== null) {
            $this->renewer->idle();
        }
        $this->hold = null;
        Registry::drop($this->lockId(), spl_object_hash($this));
    }

    /**
     * In a pcntl_fork() child the connection and the renew process are the
     * parent's: keep them unused (closing would not help the parent), and
     * start over as this process's lock.
     */
    private function adoptProcess()
    {
        $pid = Process::pid();
        if ($this->ownerPid === $pid) {
            return;
        }
        self::$inherited[] = [$this->client, $this->renewer];
        if ($this->renewer !== null) {
            $this->renewer->disown();
        }
        $this->client = null;
        $this->renewer = null;
        $this->hold = null;
        $this->ownerPid = $pid;
    }
}

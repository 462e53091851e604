<?php

namespace CronLock;

use CronLock\Polyfill\Args;
use CronLock\Polyfill\Process;
use CronLock\Polyfill\RedisClient;
use CronLock\Polyfill\RedisDsn;
use CronLock\Polyfill\RedisFailure;
use CronLock\Polyfill\Registry;
use CronLock\Polyfill\Renewer;
use CronLock\Polyfill\Scripts;
use CronLock\Polyfill\Signals;

/**
 * A Redis lock with the extension's keys, token format, Lua scripts and
 * fencing counter, so the extension and this class exclude each other on one
 * key: `<key>` holds `<32 hex digits>:<pid>@<host>` with the TTL,
 * `<key>:fence` is INCRed by every acquire, `<key>:released` is published
 * on release. Through phpredis when loaded, else predis.
 */
final class Redis implements Lock, \Serializable
{
    use \CronLock\Polyfill\RefusesSerialization;

    const MAX_TTL = 315360000.0; // 10 years, as in the extension
    /** The TTL of a key held without a $ttl, renewed every 10 s while the process lives, as in the extension. */
    const LEASE = 30.0;
    const MAX_TIMEOUT = 86400.0;
    /** The longest window id claim() takes, as in the extension. */
    const MAX_WINDOW_BYTES = 200;

    /** Why a hold was lost (cron_guard()'s lost line), the extension's words. */
    const LOSS_KEY_GONE = 'the key is gone';
    const LOSS_ANOTHER_TOKEN = 'the key holds another token';
    const LOSS_RAN_OUT = 'its TTL ran out before a renewal';
    const LOSS_UNREACHABLE = 'its TTL ran out while the server could not be reached';
    /** Longest pause between two tries of a wait (waiters poll; see the README). */
    const MAX_POLL = 0.05;

    /** Shortest and longest pause of a waiter whose server fails, as in the extension. */
    const RECONNECT_BACKOFF_MIN = 0.02;
    const RECONNECT_BACKOFF_MAX = 0.1;
    /** Seconds a renewal helper may take to start after the key was taken (its first renewal is due at ttl/3). */
    const HELPER_START_MARGIN = 2.0;

    /** Longest single pause of a waiter, so that pending signal handlers run (D9). */
    const INTERRUPT_CHECK_INTERVAL = 0.1;

    /** @var RedisDsn|null */
    private $dsn;
    /** @var string */
    private $key = '';
    /** @var float */
    private $ttl = self::LEASE;
    /** @var bool */
    private $autoRenew = false;
    /** @var float */
    private $connectTimeout = 1.0;
    /** @var float */
    private $readTimeout = 1.0;
    /** @var int 'replicas': an acquire counts once this many replicas acknowledged the key */
    private $replicas = 0;
    /** @var int */
    private $ownerPid = 0;
    /** @var array{token: string, fence: int, validUntil: float, keptUntil: float, lost: bool, windowEnd: int, lossWhy?: string, lossAt?: float, lossNoted?: bool, unreachable?: bool}|null lossWhy/lossAt: what the renewal helper found (Process::now() clock); unreachable: its last renewal could not reach the server; windowEnd: Unix ms of the server's clock when the latest once-per window the hold was taken or confirmed in ends (0: none) */
    private $hold;
    /** @var int|null cron_guard()'s 'once_per' in ms, set for its acquire only (see Polyfill\CronGuard) */
    private $oncePerMs;
    /** @var Renewer|null the renewal helper process of this process, while a hold of ours renews */
    private $renewer;
    /** @var int number of this object's successful acquires, to tell its holds apart */
    private $holdSeq = 0;
    /** @var string|null the value of the key when the last acquire found it busy */
    private $lastHolder;
    /** @var int|null when the key expires (ms) as the last acquire found it busy; null: no TTL */
    private $lastExpiresMs;
    /**
     * @var string|null the token of an acquire that got no answer (its script may have
     *                  set the key): the next acquire() uses it again, so that such a key
     *                  is ours, and release() or destruction without a hold deletes it
     */
    private $unsettled;
    /** @var array{0: float, 1: string}|null when (Unix time) and why the last hold was found lost, as the extension says it */
    private $loss;

    /**
     * Validates the arguments; connects on first use.
     *
     * @param string|array $dsn 'redis://[[user]:password@]host[:port][/db]', 'rediss://…'
     *        ('#insecure' skips certificate checks), 'unix:///path/to/redis.sock'. A list
     *        (Redlock), sentinel and cluster DSNs need the extension: LockException.
     * @param float|null $ttl seconds; null: a 30 s lease that this process renews every 10 s
     *        while it lives (auto_renew false is then refused)
     * @param array{auto_renew?: bool, connect_timeout?: float, read_timeout?: float, replicas?: int, sentinel_password?: string, sentinel_user?: string} $options
     *        'sentinel_password' and 'sentinel_user' apply to Sentinel DSNs only, which need the extension.
     * @throws \ValueError for an empty key, a NUL byte, ttl <= 0, a malformed DSN or an unknown option.
     * @throws \TypeError for a $dsn or option of the wrong type.
     * @throws LockException for a DSN kind only the extension supports.
     */
    public function __construct(
        #[\SensitiveParameter]
        $dsn,
        string $key,
        ?float $ttl = null,
        array $options = []
    ) {
        if ($this->dsn !== null) {
            throw new \Error('Cannot call CronLock\Redis::__construct() twice');
        }
        if (is_array($dsn)) {
            throw new LockException('a list of DSNs (Redlock) needs the cronlock extension; cronlock/polyfill supports one redis://, rediss:// or unix:// DSN');
        }
        if (!is_string($dsn)) {
            $dsn = Args::weakString($dsn, 'CronLock\Redis::__construct', 1, 'dsn', 'array|string');
        }
        if ($key === '') {
            throw Args::value('$key', 'must not be empty');
        }
        if (preg_match('//u', $key) !== 1) {
            throw Args::value('$key', 'must be valid UTF-8');
        }
        if (strpos($key, "\0") !== false) {
            throw Args::value('$key', 'must not contain NUL bytes');
        }
        if ($ttl !== null) {
            $this->ttl = self::checkTtl($ttl);
        }
        Args::options($options, ['auto_renew', 'connect_timeout', 'read_timeout', 'replicas', 'sentinel_password', 'sentinel_user']);
        $this->connectTimeout = self::timeoutOption($options, 'connect_timeout');
        $this->readTimeout = self::timeoutOption($options, 'read_timeout');
        $this->autoRenew = Args::bool($options, 'auto_renew', $ttl === null);
        if ($ttl === null && !$this->autoRenew) {
            throw Args::value("\$options['auto_renew']", sprintf('must not be false without a $ttl: the key is then held on a %d s lease that only renewal keeps; give a $ttl to hold it without renewal', self::LEASE));
        }
        $replicas = Args::int($options, 'replicas');
        if ($replicas !== null && ($replicas < 0 || $replicas > 1000)) {
            throw Args::value("\$options['replicas']", 'must be a number of replicas from 0 to 1000');
        }
        $this->replicas = (int) $replicas;
        $sentinelAuth = self::sentinelAuth($options);
        $parsed = RedisDsn::parse($dsn); // a Sentinel DSN needs the extension: LockException
        if ($sentinelAuth) {
            throw Args::value("\$options['sentinel_password']", 'applies to a redis-sentinel:// or rediss-sentinel:// DSN only');
        }
        $this->key = $key;
        $this->ownerPid = Process::pid();
        $this->dsn = $parsed;
    }

    /**
     * One round trip per try: SET NX PX and the fencing INCR in one script.
     * On a held lock, one token-checked round trip that extends the TTL
     * (decision D1). A waiter rides out a server that cannot be reached or
     * stops answering until its deadline; then that failure is thrown.
     *
     * @throws ConnectionException
     */
    public function acquire(float $timeout = 0.0): bool
    {
        Args::timeout($timeout);
        $this->adoptProcess();
        $owner = spl_object_hash($this);
        Registry::noteRefusal($owner, null);
        if ($this->hold !== null) {
            if ($this->isHeld()) {
                return $this->confirmHold();
            }
            $this->forgetHold();
        }
        if (Registry::heldByOther($this->lockId(), $owner, false) !== null) {
            if ($timeout != 0) {
                throw Registry::deadlock($this->describe(), 'CronLock\Redis');
            }
            Registry::noteRefusal($owner, 'self');
            return false;
        }
        $token = $this->unsettled !== null ? $this->unsettled : self::newToken();
        // A try once starts the helper after it took the key, so a busy try
        // starts no process; unless the first renewal (ttl/3) is so soon that
        // a slow start could miss it. A wait starts it first: it may take long.
        $helperFirst = $this->autoRenew && ($timeout != 0 || $this->ttl / 3 < self::HELPER_START_MARGIN);
        if ($helperFirst) {
            $this->startRenewer();
        }
        if ($timeout == 0) {
            try {
                $attempt = $this->attempt($token, false);
            } catch (RedisFailure $f) {
                $this->noteUnanswered($token, $f);
                throw $this->failure('acquire', $f);
            }
            $this->unsettled = null;
            if ($attempt[0]) {
                if ($this->autoRenew && !$helperFirst) {
                    try {
                        $this->startRenewer();
                    } catch (LockException $e) {
                        try {
                            $this->deleteIfOurs($token); // no renewal: not a hold to hand out
                        } catch (LockException $gone) {
                            $this->unsettled = $token; // the next acquire or release settles it
                        }
                        throw $e;
                    }
                }
                return $this->startHold($token, $attempt[1], $attempt[2], $attempt[3], $attempt[4]);
            }
            if ($this->lastHolder !== null && Registry::tokenHeldByOther($this->lastHolder, $owner)) {
                Registry::noteRefusal($owner, 'self');
            }
            return false;
        }
        return Process::watchingSignals(function () use ($timeout, $owner, $token) {
            return $this->waitFor($timeout, $owner, $token);
        });
    }

    /** The tries of a waiting acquire(): the acquire script, then pauses until the deadline. */
    private function waitFor(float $timeout, string $owner, string $token): bool
    {
        $deadline = $timeout > 0 && is_finite($timeout) ? Process::now() + $timeout : null;
        $pause = 0.002;
        $backoff = self::RECONNECT_BACKOFF_MIN;
        while (true) {
            $started = Process::now();
            try {
                $attempt = $this->attempt($token, false, true);
            } catch (RedisFailure $f) {
                if (Process::signalled()) {
                    // a handler ran while the read blocked: not a failure (D9)
                    Registry::noteRefusal($owner, 'signal');
                    return false;
                }
                // A restart, failover or pause: ride it out until the deadline.
                $this->noteUnanswered($token, $f);
                if (!$f->transient() || ($deadline !== null && Process::now() >= $deadline)) {
                    throw $this->failure('acquire', $f);
                }
                $attempt = null;
                $nap = max(0.0, $backoff - (Process::now() - $started));
                $backoff = min($backoff * 2, self::RECONNECT_BACKOFF_MAX);
            }
            if ($attempt !== null) {
                $this->unsettled = null;
                if ($attempt[0]) {
                    return $this->startHold($token, $attempt[1], $attempt[2], $attempt[3], $attempt[4]);
                }
                if ($this->lastHolder !== null && Registry::tokenHeldByOther($this->lastHolder, $owner)) {
                    throw Registry::deadlock($this->describe(), 'CronLock\Redis');
                }
                if ($deadline !== null && Process::now() >= $deadline) {
                    return false;
                }
                $backoff = self::RECONNECT_BACKOFF_MIN;
                $nap = $attempt[1] === null ? $pause : min($pause, $attempt[1]);
                $pause = min($pause * 2, self::MAX_POLL);
            }
            if ($deadline !== null) {
                $nap = min($nap, $deadline - Process::now());
            }
            if (Process::nap(min(max(0.001, $nap), self::INTERRUPT_CHECK_INTERVAL))) {
                Registry::noteRefusal($owner, 'signal');
                return false;
            }
        }
    }

    /**
     * One run of the acquire script (retried once on a broken connection: it
     * is idempotent for a given token); in once-per mode the one that also
     * keeps the key until its window ends (a confirmed hold too).
     *
     * @return array{0: bool, 1: int|float|null, 2: float, 3: int, 4: float} [true, fence, sent,
     *         window end in ms or 0, seconds the window keeps the key from sent on] when the key
     *         holds our token; [false, seconds until it expires or null, sent, 0, 0.0] when busy
     * @throws RedisFailure
     */
    private function attempt(string $token, bool $confirm, bool $inWait = false): array
    {
        $sent = Process::now();
        $keys = [$this->key, $this->key . ':fence'];
        if ($this->oncePerMs !== null) {
            list($reply) = $this->run(Scripts::get(Scripts::ACQUIRE_IN_WINDOW), $keys, [$token, $this->ttlMs($this->ttl), $this->oncePerMs, $confirm ? '1' : '0'], $inWait);
        } else {
            list($reply) = $this->run(Scripts::get(Scripts::ACQUIRE), $keys, [$token, $this->ttlMs($this->ttl), $confirm ? '1' : '0'], $inWait);
        }
        if (!is_array($reply) || count($reply) < 5) {
            throw new RedisFailure(RedisFailure::REPLY, 'unexpected reply to the acquire script');
        }
        if ((int) $reply[0] === 1) {
            if (!$confirm && $this->replicas > 0) {
                $this->awaitReplicas($token);
            }
            return [true, (int) $reply[1], $sent, (int) $reply[3], max(0, (int) $reply[4]) / 1000];
        }
        $this->lastHolder = (string) $reply[2];
        // PTTL is -1 for a key without TTL, -2 for no key.
        $this->lastExpiresMs = (int) $reply[1] >= 0 ? (int) $reply[1] : null;
        return [false, $this->lastExpiresMs !== null ? $this->lastExpiresMs / 1000 : null, $sent, 0, 0.0];
    }

    /**
     * 'replicas' => N: a new hold counts once N replicas acknowledged the key
     * (WAIT on the connection that set it, within 4/5 of read_timeout, so it
     * gives up before the socket would); else the key is given back and the
     * failure is transient, which a wait rides out (as the extension does).
     *
     * @throws RedisFailure
     */
    private function awaitReplicas(string $token)
    {
        $waitMs = max(1, intdiv((int) floor($this->readTimeout * 1000 + 1e-6) * 4, 5));
        // the acquire's connection: the process's one to this server
        $client = RedisClient::shared($this->dsn, $this->connectTimeout, $this->readTimeout, spl_object_hash($this));
        try {
            $acks = $client->wait($this->replicas, $waitMs);
        } catch (RedisFailure $f) {
            if ($f->kind !== RedisFailure::REPLY) {
                // as run() does: a late reply would be read as the next command's
                RedisClient::discard($client);
            }
            throw $f;
        }
        if ($acks >= $this->replicas) {
            return;
        }
        try {
            $this->deleteIfOurs($token);
        } catch (LockException $e) {
            $this->unsettled = $token; // still ours, maybe: the next acquire or release settles it
        }
        throw new RedisFailure(RedisFailure::REPLICAS, sprintf(
            '%s was taken, but only %d of the %d replicas asked for acknowledged it within %d ms; it was given back',
            $this->describe(),
            $acks,
            $this->replicas,
            $waitMs
        ));
    }

    /**
     * 'sentinel_password' and 'sentinel_user' checked as the extension checks
     * them; whether any was given. Never echoes a value.
     *
     * @param array<string, mixed> $options
     */
    private static function sentinelAuth(array $options): bool
    {
        $user = Args::string($options, 'sentinel_user');
        $password = Args::string($options, 'sentinel_password');
        if ($password === null) {
            if ($user !== null) {
                throw Args::value("\$options['sentinel_user']", "needs 'sentinel_password' too (AUTH takes a user and a password)");
            }
            return false;
        }
        if ($password === '') {
            throw Args::value("\$options['sentinel_password']", 'must not be empty (leave it out when the sentinels need no password)');
        }
        if ($user === '') {
            throw Args::value("\$options['sentinel_user']", 'must not be empty (leave it out for the default user)');
        }
        return true;
    }

    /**
     * D1: acquire() on a held lock asks the server and extends the TTL; false drops the hold.
     * In once-per mode (a once-per guard on a hold it did not take: the caller's acquire(),
     * an outer guard, a guard in another Fiber) it also keeps the key to the end of the
     * current window, and the hold then ends as one taken in that window does, whoever
     * releases it.
     */
    private function confirmHold(): bool
    {
        if ($this->oncePerMs === null && $this->hold['windowEnd'] !== 0) {
            // the acquire script's PEXPIRE would cut the key's life from its
            // once-per window's end down to the TTL; renew() never shortens it
            return $this->renew();
        }
        try {
            $attempt = $this->attempt($this->hold['token'], true);
        } catch (RedisFailure $f) {
            throw $this->failure('acquire', $f);
        }
        if (!$attempt[0]) {
            $this->lose($this->lastHolder === '' ? self::LOSS_KEY_GONE : self::LOSS_ANOTHER_TOKEN);
            $this->forgetHold();
            return false;
        }
        $this->hold['validUntil'] = max($this->hold['validUntil'], $attempt[2] + $this->ttl);
        if ($attempt[3] > $this->hold['windowEnd']) {
            $this->hold['windowEnd'] = $attempt[3];
            $this->hold['keptUntil'] = max($this->hold['keptUntil'], $attempt[2] + $attempt[4]);
            if ($this->renewer !== null) {
                // Its renewals must not cut the key's life below the window's end either.
                // The key was just extended from $sent on, so its schedule restarts there.
                // A helper that is gone lets the hold run out as it would anyway.
                $this->renewer->hold($this->holdId(), $this->dsn, $this->key, $this->hold['token'], $this->ttl, $this->connectTimeout, $this->readTimeout, $attempt[3], $attempt[2]);
            }
            Signals::holding($this->holdId(), $this->dsn, $this->key, $this->hold['token'], $attempt[3], $this->connectTimeout);
        }
        Registry::hold($this->lockId(), spl_object_hash($this), false, $this->autoRenew ? INF : $this->validUntil());
        return true;
    }

    /** Records a fresh hold: the key holds $token since after $sent (until the window's end at least, if $windowEnd is not 0). */
    private function startHold(string $token, int $fence, float $sent, int $windowEnd, float $windowLeft): bool
    {
        // once_per: the key lives until its window ends whatever the TTL, so the hold does too
        $this->hold = ['token' => $token, 'fence' => $fence, 'validUntil' => $sent + $this->ttl, 'keptUntil' => $sent + $windowLeft, 'lost' => false, 'windowEnd' => $windowEnd];
        $this->loss = null;
        Registry::hold($this->lockId(), spl_object_hash($this), false, $this->autoRenew ? INF : $this->validUntil());
        Registry::holdToken($token, spl_object_hash($this));
        $this->holdSeq++;
        if ($this->autoRenew) {
            $this->startRenewing($token, $windowEnd, $sent);
        }
        Signals::holding($this->holdId(), $this->dsn, $this->key, $token, $windowEnd, $this->connectTimeout);
        return true;
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
        if ($this->hold['lost'] || Process::now() >= $this->validUntil()) {
            $this->lose(self::LOSS_RAN_OUT);
            $this->forgetHold();
            return false;
        }
        $sent = Process::now();
        try {
            list($reply) = $this->run(Scripts::get(Scripts::RENEW), [$this->key], [$this->hold['token'], $this->ttlMs($ttl), $this->hold['windowEnd']]);
        } catch (RedisFailure $f) {
            throw $this->failure('renew', $f); // still held until its TTL runs out
        }
        $renewed = (int) $reply === 1;
        if (!$renewed) {
            $this->lose(self::refusal($reply));
            $this->forgetHold();
            return false;
        }
        $this->hold['validUntil'] = $sent + $ttl;
        Registry::hold($this->lockId(), spl_object_hash($this), false, $this->autoRenew ? INF : $this->validUntil());
        return true;
    }

    /** Token-checked DEL; false (key untouched) when it is no longer ours. @throws ConnectionException */
    public function release(): bool
    {
        $this->adoptProcess();
        if ($this->hold === null) {
            return $this->releaseUnsettled();
        }
        $valid = $this->isHeld();
        $token = $this->hold['token'];
        $windowEnd = $this->hold['windowEnd'];
        if (!$valid) {
            $this->lose(self::LOSS_RAN_OUT); // or what the renewal helper said
            $this->forgetHold();
            return false; // lost, or past its TTL unrenewed: not ours to delete any more
        }
        $this->forgetHold();
        $reply = 1;
        $released = $windowEnd !== 0 ? $this->leaveToExpire($token, $windowEnd, $reply) : $this->deleteIfOurs($token, $reply);
        if (!$released) {
            $this->noteLoss(self::refusal($reply), Process::now());
        }
        return $released;
    }

    /**
     * Releases a hold taken in once-per mode: still ours and its window not
     * over (by the server's clock), the key is left to expire at the
     * window's end, so nobody takes it again in that window; past it, deleted.
     *
     * @throws LockException
     */
    private function leaveToExpire(string $token, int $windowEnd, &$reply = null): bool
    {
        try {
            list($reply) = $this->run(Scripts::get(Scripts::END_WINDOW), [$this->key], [$token, $windowEnd, $this->key . ':released']);
        } catch (RedisFailure $f) {
            throw $this->failure('leave to expire', $f);
        }
        // -1 as for release: no key is a lost hold.
        return (int) $reply === 1 || (int) $reply === 2;
    }

    /** @throws LockException */
    /**
     * $f may have left the acquire script run (sent, never answered; a failed reconnect
     * after a lost reply too): keep $token. Costless when it did not: the token is ours alone.
     */
    private function noteUnanswered(string $token, RedisFailure $f)
    {
        if ($f->kind !== RedisFailure::REPLY && $f->kind !== RedisFailure::REPLICAS) {
            $this->unsettled = $token;
        }
    }

    /**
     * Deletes the key if an unanswered acquire left our token in it (true then). Best
     * effort: one try, and the token is forgotten either way (the key then expires by its TTL).
     */
    private function releaseUnsettled(): bool
    {
        $token = $this->unsettled;
        $this->unsettled = null;
        if ($token === null) {
            return false;
        }
        try {
            return $this->deleteIfOurs($token);
        } catch (LockException $e) {
            return false;
        }
    }

    /** @param mixed $reply set to the script's reply */
    private function deleteIfOurs(string $token, &$reply = null): bool
    {
        try {
            list($reply) = $this->run(Scripts::get(Scripts::RELEASE), [$this->key], [$token, $this->key . ':released']);
        } catch (RedisFailure $f) {
            throw $this->failure('release', $f); // not held any more; the key expires by its TTL
        }
        // -1, no key at all, also after a broken connection, is a lost hold
        // (D20): a server restarted without persistence lost it, and another
        // run may have taken it meanwhile; a first try's lost reply after it
        // deleted the key is reported so too (a false alarm, never a silent loss).
        return (int) $reply === 1;
    }

    /** Local and cheap, no round trip: what this object believes (D4); renew() or acquire() ask the server. */
    public function isHeld(): bool
    {
        if ($this->hold === null || $this->ownerPid !== Process::pid()) {
            return false;
        }
        $this->readRenewer();
        return !$this->hold['lost'] && Process::now() < $this->validUntil();
    }

    /** Until when the hold is valid as far as we know: its TTL, or its once-per window's end if later. */
    private function validUntil(): float
    {
        return max($this->hold['validUntil'], $this->hold['keptUntil']);
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

    /**
     * Who holds the key now: GET, one read-only round trip (bytes that are
     * not UTF-8 as \xNN); null when there is no key.
     *
     * @throws ConnectionException
     */
    public function holder(): ?string
    {
        $this->adoptProcess();
        $key = $this->key;
        try {
            list($value) = $this->onClient(function (RedisClient $client) use ($key) {
                return $client->get($key);
            });
        } catch (RedisFailure $f) {
            throw $this->failure('read', $f);
        }
        return $value === null ? null : Args::escapeNonUtf8($value);
    }

    /**
     * Claims the window $window for $seconds, exactly once across hosts
     * (SET <key>:claim:<window> <token> NX PX, in the claim script).
     *
     * @throws \ValueError for an empty $window, a NUL byte, over 200 bytes, $seconds <= 0 or NaN
     * @throws ConnectionException
     */
    public function claim(string $window, float $seconds): bool
    {
        if ($window === '') {
            throw Args::value('$window', 'must not be empty');
        }
        if (preg_match('//u', $window) !== 1) {
            throw Args::value('$window', 'must be valid UTF-8');
        }
        if (strpos($window, "\0") !== false) {
            throw Args::value('$window', 'must not contain NUL bytes');
        }
        if (strlen($window) > self::MAX_WINDOW_BYTES) {
            throw Args::value('$window', sprintf('must be at most %d bytes', self::MAX_WINDOW_BYTES));
        }
        $seconds = self::checkLifetime('$seconds', $seconds);
        $this->adoptProcess();
        try {
            list($reply) = $this->run(Scripts::get(Scripts::CLAIM), [$this->key . ':claim:' . $window], [self::newToken(), $this->ttlMs($seconds)]);
        } catch (RedisFailure $f) {
            throw $this->failure('claim a window of', $f);
        }
        return (int) $reply === 1;
    }

    /** A new token: 128 random bits in hex, then who holds it. */
    private static function newToken(): string
    {
        return bin2hex(random_bytes(16)) . ':' . Process::pid() . '@' . Process::hostname();
    }

    public function __destruct()
    {
        if ($this->ownerPid !== Process::pid()) {
            $this->adoptProcess();
            return;
        }
        if ($this->hold !== null || $this->unsettled !== null) {
            try {
                $this->release();
            } catch (\Throwable $e) {
                // nobody to tell; the key expires by its TTL
            }
        }
        RedisClient::forget(spl_object_hash($this));
    }

    public function __clone()
    {
        // The refused copy is destroyed at once: it must not release the
        // original's key nor close its connection or renewer.
        $this->hold = null;
        $this->renewer = null;
        throw new \Error('Trying to clone an uncloneable object of class CronLock\Redis');
    }

    /** This hold's name for the renewal helper and the signal handlers. */
    private function holdId(): string
    {
        return spl_object_hash($this) . '.' . $this->holdSeq;
    }

    /**
     * For the busy line: when the holder the last acquire found is not running on this host,
     * " (not running on this host; the key expires in N s)", else ''. Only words: containers
     * share host names, so the key is never deleted on that guess.
     */
    private function holderNotRunning(): string
    {
        if ($this->lastHolder === null || !preg_match('/^[^:]*:([0-9]+)@(.*)$/s', $this->lastHolder, $m)) {
            return '';
        }
        $pid = (int) $m[1];
        if ($m[2] !== Process::hostname() || (string) $pid !== $m[1] || $pid === Process::pid() || Process::alive($pid)) {
            return '';
        }
        return $this->lastExpiresMs === null ? ' (not running on this host)'
            : sprintf(' (not running on this host; the key expires in %d s)', intdiv($this->lastExpiresMs + 999, 1000));
    }

    public function __debugInfo()
    {
        return ['key' => $this->key, 'ttl' => $this->ttl, 'held' => $this->isHeld()];
    }

    private function lockId(): string
    {
        return 'redis:' . $this->dsn->identity() . '/' . $this->dsn->db . ':' . $this->key;
    }

    private static function checkTtl(float $ttl): float
    {
        return self::checkLifetime('$ttl', $ttl);
    }

    private static function checkLifetime(string $arg, float $seconds): float
    {
        if (is_nan($seconds) || is_infinite($seconds) || $seconds < 0) {
            throw Args::value($arg, 'must be a finite number greater than 0');
        }
        if ($seconds == 0) {
            throw Args::value($arg, 'must be greater than 0');
        }
        if ($seconds > self::MAX_TTL) {
            throw Args::value($arg, 'must be at most 315360000 seconds (10 years)');
        }
        return $seconds;
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

    /** `redis key '<key>' at <address>[/db]` for messages and the busy line, the key cut to 200 characters. */
    private function describe(): string
    {
        return sprintf("redis key '%s' at %s%s", Args::cut($this->key), $this->dsn->address(), $this->dsn->db === 0 ? '' : '/' . $this->dsn->db);
    }

    /**
     * Runs a script on this lock's connection, opening it if needed, and
     * once more on a new connection when it failed by I/O (an idle
     * connection the server or a firewall dropped, a reset, a timeout, a
     * fork child that closed its copy of a TLS session): every script is
     * safe to run twice. An error reply is not retried, nor, in a wait
     * ($inWait), a failed read during which a signal handler ran: the waiter
     * returns to PHP at once.
     *
     * @return array{0: mixed, 1: bool} the reply, and whether it ran twice
     * @throws RedisFailure
     */
    private function run(string $lua, array $keys, array $args, bool $inWait = false): array
    {
        return $this->onClient(function (RedisClient $client) use ($lua, $keys, $args) {
            return $client->script($lua, $keys, $args);
        }, $inWait);
    }

    /**
     * Runs $command on this lock's connection as run() runs a script (every
     * command sent here is safe to run twice).
     *
     * @param callable(RedisClient): mixed $command
     * @return array{0: mixed, 1: bool} the reply, and whether it ran twice
     * @throws RedisFailure
     */
    private function onClient(callable $command, bool $inWait = false): array
    {
        $retried = false;
        while (true) {
            // the process's one client for this server, credentials and timeouts
            $client = RedisClient::shared($this->dsn, $this->connectTimeout, $this->readTimeout, spl_object_hash($this));
            try {
                return [$command($client), $retried];
            } catch (RedisFailure $f) {
                if ($f->kind !== RedisFailure::REPLY) {
                    // after a timeout or I/O error its replies may be out of step:
                    // every lock on this server reconnects
                    RedisClient::discard($client);
                }
                if ($f->kind !== RedisFailure::IO || $retried || ($inWait && Process::signalled())) {
                    throw $f;
                }
                $retried = true;
            }
        }
    }

    /** The failure of $op ('acquire', 'renew', 'release') in words (decision D6), never with the password. */
    private function failure(string $op, RedisFailure $f): LockException
    {
        $address = $this->dsn->address();
        $key = Args::cut($this->key);
        if ($f->kind === RedisFailure::CONNECT) {
            $message = sprintf("cannot connect to Redis at %s to %s key '%s': %s", $address, $op, $key, $f->timedOut
                ? sprintf('no answer within %d ms', (int) round($this->connectTimeout * 1000)) : $f->describe());
        } elseif ($f->kind === RedisFailure::IO && $f->timedOut) {
            $message = sprintf("Redis at %s gave no answer within %d ms to %s key '%s'", $address, (int) round($this->readTimeout * 1000), $op, $key);
        } elseif ($f->kind === RedisFailure::REPLICAS) {
            $message = $f->getMessage(); // the extension's words, the address in them
        } elseif ($f->kind === RedisFailure::IO) {
            $message = sprintf("lost the connection to Redis at %s while trying to %s key '%s': %s", $address, $op, $key, $f->describe());
        } else {
            $message = sprintf("Redis at %s refused to %s key '%s': %s", $address, $op, $key, $f->describe());
        }
        if ($this->dsn->password !== null && $this->dsn->password !== '') {
            $message = str_replace([$this->dsn->password, rawurlencode($this->dsn->password)], '***', $message);
        }
        return $f->makesLockUnusable() ? new LockException($message) : new ConnectionException($message);
    }

    private function startRenewing(string $token, int $windowEnd, float $sent)
    {
        try {
            for ($try = 0; $try < 2; $try++) {
                $this->startRenewer();
                if ($this->renewer->hold($this->holdId(), $this->dsn, $this->key, $token, $this->ttl, $this->connectTimeout, $this->readTimeout, $windowEnd, $sent)) {
                    return;
                }
                $this->renewer = null; // it died: Renewer::shared() starts a new one
            }
            throw new LockException('cannot start the auto-renew process: it exits at once');
        } catch (LockException $e) {
            try {
                $this->run(Scripts::get(Scripts::RELEASE), [$this->key], [$token, $this->key . ':released']);
            } catch (RedisFailure $ignored) {
                // best effort: otherwise the key stays until its TTL
            }
            $this->forgetHold();
            throw $e;
        }
    }

    /**
     * Starts the auto-renew process if there is none, and waits until it is
     * ready. acquire() calls it before it takes the key: a helper slow to
     * start (a busy host, many starting at once) then delays the acquire,
     * never the renewals the key's TTL needs.
     *
     * @throws LockException
     */
    private function startRenewer()
    {
        try {
            $this->renewer = Renewer::shared();
        } catch (LockException $e) {
            if ($this->ttl === self::LEASE && $this->autoRenew) {
                throw new LockException($e->getMessage() . '; without it a key held on a lease would expire in 30 s: give CronLock\Redis a $ttl to hold it without renewal');
            }
            throw $e;
        }
    }

    /** A token-checked script's "no": -1 is no key, anything else someone else's value. */
    private static function refusal($reply): string
    {
        return (int) $reply === -1 ? self::LOSS_KEY_GONE : self::LOSS_ANOTHER_TOKEN;
    }

    /**
     * Marks the hold lost for $why (unless the renewal helper or a call
     * found it lost before), found now; a hold that ran out: when its TTL passed.
     */
    private function lose(string $why)
    {
        if ($this->hold === null || !empty($this->hold['lossNoted'])) {
            return;
        }
        $this->hold['lossNoted'] = true;
        if (!empty($this->hold['lossWhy'])) {
            $this->noteLoss($this->hold['lossWhy'], $this->hold['lossAt']);
        } elseif ($why === self::LOSS_RAN_OUT || $why === self::LOSS_UNREACHABLE) {
            $this->noteLoss(empty($this->hold['unreachable']) ? $why : self::LOSS_UNREACHABLE, min(Process::now(), $this->validUntil()));
        } else {
            $this->noteLoss($why, Process::now());
        }
        $this->hold['lost'] = true;
    }

    /** $at on the Process::now() clock. */
    private function noteLoss(string $why, float $at)
    {
        $this->loss = [microtime(true) - (Process::now() - $at), $why];
    }

    /**
     * For cron_guard() (Polyfill\Run): when (Unix time) and why the hold was lost, as the
     * renewal helper or the call that found out saw it; a hold whose TTL passed unrenewed
     * without anyone finding out: when it passed. Null while held.
     *
     * @return array{0: float, 1: string}|null
     */
    private function lossFound(): ?array
    {
        if ($this->hold !== null && $this->ownerPid === Process::pid() && !$this->isHeld()) {
            $this->lose(self::LOSS_RAN_OUT);
        }
        return $this->hold !== null && !$this->hold['lost'] ? null : $this->loss;
    }

    /** Picks up what the auto-renew process reported: renewals, or that the key is not ours. */
    private function readRenewer()
    {
        if ($this->renewer === null || $this->hold === null) {
            return;
        }
        foreach ($this->renewer->reports($this->holdId()) as $report) {
            list($what, $until) = $report;
            if ($what === 'LOST') {
                $this->hold['lost'] = true;
                $this->hold['lossWhy'] = $report[2];
                $this->hold['lossAt'] = $until;
            } elseif ($what === 'DOWN') {
                $this->hold['unreachable'] = true;
            } else {
                $this->hold['unreachable'] = false;
                $this->hold['validUntil'] = max($this->hold['validUntil'], $until);
            }
        }
    }

    private function forgetHold()
    {
        if ($this->renewer !== null && $this->hold !== null) {
            $this->renewer->drop($this->holdId());
        }
        if ($this->hold !== null) {
            Registry::dropToken($this->hold['token']);
            Signals::released($this->holdId());
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
        $this->renewer = null; // the parent's clients: RedisClient::shared() forgets them
        $this->hold = null;
        $this->unsettled = null; // the parent's to settle
        $this->ownerPid = $pid;
    }
}

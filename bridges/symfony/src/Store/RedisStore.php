<?php

namespace CronLock\Symfony\Store;

use CronLock\Redis;
use Symfony\Component\Lock\BlockingStoreInterface;
use Symfony\Component\Lock\Exception\InvalidTtlException;
use Symfony\Component\Lock\Exception\LockConflictedException;
use Symfony\Component\Lock\Exception\LockExpiredException;
use Symfony\Component\Lock\Key;
use Symfony\Component\Lock\Store\ExpiringStoreTrait;

/**
 * A symfony/lock store over CronLock\Redis: one key per resource
 * ("<prefix><resource>"), token-checked renew and release, waits that wake
 * on the release (BlockingStoreInterface), every DSN cronlock takes
 * (Sentinel, Cluster and Redlock lists with the extension).
 *
 * Expiry: save() sets the key for the store's initial TTL (as Symfony's own
 * RedisStore); Lock::refresh() (putOffExpiration) sets it to the TTL given.
 * With 'auto_renew' => true cronlock renews the key every third of the
 * initial TTL while the process lives instead (for a console command that
 * runs as long as it needs); refresh() still sets the TTL it is given.
 *
 * exists() asks the server without changing anything: the key's value
 * (CronLock\Redis::holder(), one GET) is this hold's token(). A key
 * deleted, evicted, expired or taken over is reported lost; so is a Key
 * whose own TTL ran out (without auto_renew).
 */
final class RedisStore implements BlockingStoreInterface
{
    use ExpiringStoreTrait;
    use HeldKeys;

    /** @var string|list<string> */
    private $dsn;
    /** @var float */
    private $initialTtl;
    /** @var string */
    private $prefix;
    /** @var bool */
    private $autoRenew;
    /** @var array<string, mixed> */
    private $options;

    /**
     * @param string|list<string> $dsn a CronLock\Redis DSN (or a Redlock list)
     * @param array<string, mixed> $options 'prefix' (of every key, default ''),
     *        'initial_ttl' (seconds, default 300.0), 'auto_renew' (default false),
     *        and CronLock\Redis's options ('connect_timeout', 'read_timeout', …)
     */
    public function __construct($dsn, array $options = [])
    {
        $this->dsn = $dsn;
        $this->prefix = (string) ($options['prefix'] ?? '');
        $this->initialTtl = (float) ($options['initial_ttl'] ?? 300.0);
        $this->autoRenew = (bool) ($options['auto_renew'] ?? false);
        unset($options['prefix'], $options['initial_ttl']);
        if ($this->initialTtl <= 0) {
            throw new InvalidTtlException(sprintf('"%s()" expects a strictly positive TTL. Got %.2F.', __METHOD__, $this->initialTtl));
        }
        $this->options = $options;
    }

    public function save(Key $key)
    {
        $this->take($key, 0.0);
    }

    public function waitAndSave(Key $key)
    {
        $this->take($key, -1.0);
    }

    public function putOffExpiration(Key $key, float $ttl)
    {
        $state = $this->state($key);
        if ($state === null) {
            throw new LockConflictedException(sprintf('The "%s" lock is not held by this key.', $key));
        }
        $key->reduceLifetime($ttl);
        if ($ttl < 0.001) { // below Redis' millisecond: expired before any round trip
            $this->forget($key);
            throw new LockExpiredException(sprintf('Failed to put off the expiration of the "%s" lock within the specified time.', $key));
        }
        if (!$state['lock']->renew($ttl)) {
            $key->removeState(self::class);
            throw new LockConflictedException(sprintf('The "%s" lock was lost (expired or taken over).', $key));
        }
        $this->remember($key, $state['lock'], ['expires' => self::now() + $ttl]);
        $this->checkNotExpired($key);
    }

    public function delete(Key $key)
    {
        $this->forget($key);
    }

    public function exists(Key $key)
    {
        $state = $this->state($key);
        if ($state === null) {
            return false;
        }
        $lock = $state['lock'];
        $expired = !$this->autoRenew && $state['expires'] - self::now() < 0.001;
        if (!$expired && $lock->token() !== null && $lock->holder() === $lock->token()) {
            return true;
        }
        $this->forget($key);
        return false;
    }

    private function take(Key $key, float $timeout): void
    {
        $state = $this->state($key);
        $lock = $state['lock'] ?? new Redis($this->dsn, $this->prefix . $key, $this->initialTtl, $this->options);
        if ($state === null) {
            $key->resetLifetime(); // a new hold: what an earlier, failed attempt counted is void
        }
        $key->reduceLifetime($this->initialTtl); // counted from before the round trip
        if (!$lock->acquire($timeout)) {
            if ($state !== null) {
                $key->removeState(self::class);
            }
            throw new LockConflictedException(sprintf('The "%s" lock is held by someone else.', $key));
        }
        if ($state === null && $timeout !== 0.0) {
            // A wait ends with the key set: its lifetime counts from then, not from before the
            // wait (a wait longer than initial_ttl threw LockExpiredException; an outside tester
            // found `--wait` failing so). Optimistic by the last round trip, well under a TTL.
            $key->resetLifetime();
            $key->reduceLifetime($this->initialTtl);
        }
        $this->remember($key, $lock, ['expires' => self::now() + $this->initialTtl]);
        $this->checkNotExpired($key);
    }

    /** A clock no clock change steps (hrtime() where it exists, PHP 7.3+). */
    private static function now(): float
    {
        return function_exists('hrtime') ? hrtime(true) / 1e9 : microtime(true);
    }
}

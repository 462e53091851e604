<?php

namespace CronLock\Symfony\Store;

use CronLock\Database;
use Symfony\Component\Lock\BlockingStoreInterface;
use Symfony\Component\Lock\Exception\LockConflictedException;
use Symfony\Component\Lock\Key;

/**
 * A symfony/lock store over CronLock\Database: MySQL/MariaDB GET_LOCK() or
 * PostgreSQL advisory locks, named "<prefix><resource>", which the server
 * frees the moment the session ends (a killed or crashed holder never
 * blocks the next one). They do not expire: putOffExpiration() asks the
 * server whether this session still holds the lock, as exists() does
 * (without side effects: IS_USED_LOCK() = CONNECTION_ID(), pg_locks). Needs
 * the cronlock extension (cronlock/polyfill has no database locks).
 *
 * With a DSN each Key's lock has a connection of its own, opened at its
 * first save(); with a \PDO all of them live on that connection, and end
 * with it.
 */
final class DatabaseStore implements BlockingStoreInterface
{
    use HeldKeys;

    /** @var \PDO|string */
    private $connection;
    /** @var string */
    private $prefix;
    /** @var array<string, mixed> */
    private $options;

    /**
     * @param \PDO|string $connection a PDO (mysql, pgsql) or a PDO DSN
     * @param array<string, mixed> $options 'prefix' (of every lock name, default ''),
     *        and with a DSN CronLock\Database's 'user', 'password', 'pdo_options'
     */
    public function __construct($connection, array $options = [])
    {
        $this->connection = $connection;
        $this->prefix = (string) ($options['prefix'] ?? '');
        unset($options['prefix']);
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
        if (!$this->exists($key)) {
            throw new LockConflictedException(sprintf('The "%s" lock is not held by this key (its session ended?).', $key));
        }
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
        if ($state['lock']->renew()) {
            return true;
        }
        $this->forget($key);
        return false;
    }

    private function take(Key $key, float $timeout): void
    {
        $state = $this->state($key);
        $lock = $state['lock'] ?? new Database($this->connection, $this->prefix . $key, $this->options);
        if (!$lock->acquire($timeout)) {
            if ($state !== null) {
                $key->removeState(self::class);
            }
            throw new LockConflictedException(sprintf('The "%s" lock is held by someone else.', $key));
        }
        $this->remember($key, $lock);
    }
}

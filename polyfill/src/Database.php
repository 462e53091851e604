<?php

namespace CronLock;

/**
 * Not in cronlock/polyfill: database locks (MySQL/MariaDB GET_LOCK,
 * PostgreSQL advisory locks) come with the cronlock extension only. The class
 * exists so that code naming it fails with a LockException that says so,
 * not with "class not found" (decision D25).
 */
final class Database implements Lock
{
    /**
     * @param \PDO|string $connection
     * @throws LockException always: install the cronlock extension for database locks.
     */
    public function __construct($connection, string $name, array $options = [])
    {
        throw new LockException('CronLock\Database needs the cronlock extension; cronlock/polyfill has CronLock\File and CronLock\Redis only');
    }

    public function acquire(float $timeout = 0.0): bool
    {
        return false;
    }

    public function renew(?float $ttl = null): bool
    {
        return false;
    }

    public function release(): bool
    {
        return false;
    }

    public function isHeld(): bool
    {
        return false;
    }

    public function name(): string
    {
        return '';
    }
}

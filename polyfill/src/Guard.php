<?php

namespace CronLock;

/** Handed to the job by cron_guard(). */
final class Guard implements \Serializable
{
    /** @var Lock */
    private $lock;
    /** @var float|null microtime(true) of the soft deadline */
    private $deadline;

    /** Guards are made by cron_guard() only: constructing one throws. */
    public function __construct()
    {
        throw new \Error('CronLock\Guard objects are made by cron_guard() only');
    }

    /** The lock the job runs under. */
    public function lock(): Lock
    {
        return $this->lock;
    }

    /** Seconds left before 'max_runtime' (never negative); null when no max_runtime is set. */
    public function remaining(): ?float
    {
        return $this->deadline === null ? null : max(0.0, $this->deadline - microtime(true));
    }

    /** true once 'max_runtime' has passed: the job should stop at its next safe point. */
    public function expired(): bool
    {
        return $this->deadline !== null && microtime(true) >= $this->deadline;
    }

    /**
     * Renew the lock.
     *
     * @return bool false when it has been lost: the job should stop.
     * @throws LockException
     */
    public function renew(): bool
    {
        return (bool) $this->lock->renew();
    }

    public function __clone()
    {
        throw new \Error('Trying to clone an uncloneable object of class CronLock\Guard');
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

    /** \Serializable: PHP 7.1-7.3, and the C: format of unserialize(). */
    public function serialize()
    {
        throw self::notSerializable();
    }

    /** @param string $data */
    public function unserialize($data)
    {
        throw self::notSerializable();
    }

    private static function notSerializable(): LockException
    {
        return new LockException('a CronLock\Guard cannot be serialized: a lock belongs to the process that holds it');
    }
}

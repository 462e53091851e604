<?php

namespace CronLock;

/** Handed to the job by cron_guard(). */
final class Guard implements \Serializable
{
    use \CronLock\Polyfill\RefusesSerialization;

    /** @var Lock */
    private $lock;
    /** @var float|null Polyfill\Process::now() of the soft deadline */
    private $deadline;

    /** Guards are made by cron_guard() only: constructing one throws \Error, as the extension does. */
    public function __construct()
    {
        throw new \Error('Cannot directly construct CronLock\Guard, call cron_guard() instead');
    }

    /** The lock the job runs under. */
    public function lock(): Lock
    {
        return $this->lock;
    }

    /** Seconds left before 'max_runtime' (never negative); null when no max_runtime is set. */
    public function remaining(): ?float
    {
        return $this->deadline === null ? null : max(0.0, $this->deadline - Polyfill\Process::now());
    }

    /** true once 'max_runtime' has passed: the job should stop at its next safe point. */
    public function expired(): bool
    {
        return $this->deadline !== null && Polyfill\Process::now() >= $this->deadline;
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

}

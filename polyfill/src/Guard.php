<?php

namespace CronLock;

/** Handed to the job by cron_guard(). */
final class Guard implements \Serializable
{
    use \CronLock\Polyfill\RefusesSerialization;

    /** @var Lock */
    private $lock;
    /** @var float|null 'max_runtime' in seconds */
    private $maxRuntime;
    /**
     * @var float Polyfill\Process::now() when the job began. remaining() counts the
     * time since then down from max_runtime, never beyond it: a deadline of
     * start + max_runtime minus a clock that has not moved (a coarse one)
     * came out a rounding above max_runtime.
     */
    private $started = 0.0;
    /** @var Polyfill\Run what became of the hold */
    private $run;

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
        if ($this->maxRuntime === null) {
            return null;
        }
        return max(0.0, min($this->maxRuntime, $this->maxRuntime - (Polyfill\Process::now() - $this->started)));
    }

    /**
     * true once 'max_runtime' has passed: the job should stop at its next safe point.
     *
     * @throws LockException when the hold was lost and 'on_lost' is 'throw'
     */
    public function expired(): bool
    {
        $this->run->check();
        $this->run->refuseIfLost();
        return $this->maxRuntime !== null && Polyfill\Process::now() - $this->started >= $this->maxRuntime;
    }

    /**
     * When and why the hold was lost (`at 14:52:07Z: its lock file was removed`); null while held.
     */
    public function lost(): ?string
    {
        $this->run->check();
        return $this->run->lossWords();
    }

    /**
     * Renew the lock.
     *
     * @return bool false when it has been lost: the job should stop.
     * @throws LockException
     */
    public function renew(): bool
    {
        $this->run->refuseIfLost();
        $renewed = (bool) $this->lock->renew();
        if (!$renewed) {
            $this->run->lose('renew() returned false', true);
            $this->run->refuseIfLost();
        }
        return $renewed;
    }

    public function __clone()
    {
        throw new \Error('Trying to clone an uncloneable object of class CronLock\Guard');
    }

}

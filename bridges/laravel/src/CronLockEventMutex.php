<?php

namespace CronLock\Laravel;

use CronLock\Lock;
use Illuminate\Console\Scheduling\Event;
use Illuminate\Console\Scheduling\EventMutex;

/**
 * withoutOverlapping() on cronlock locks: what Laravel's scheduler asks
 * (Schedule.php takes the container's EventMutex).
 *
 * - A command event is run under cronlock:run (ScheduleRewriter), which
 *   holds the lock for the job's lifetime in the job's own process tree.
 *   Here create() only looks (the wrapper's acquire decides, so two ticks
 *   racing past this look still run the job once) and forget() does
 *   nothing: the lock is the wrapper's, and ends with it.
 * - A callback event runs inside schedule:run: create() takes the lock in
 *   this process and forget() releases it. The kernel (File), the server
 *   (Database) or the lease (Redis) frees it when the process dies.
 * - exists() is the scheduler's filter: it asks who holds the lock without
 *   taking it (Locks::holder()).
 *
 * Laravel's $expiresAt is not a timer here: a lock is held while its holder
 * lives, and no longer (docs/frameworks.md).
 */
final class CronLockEventMutex implements EventMutex
{
    /** @var Locks */
    private $locks;
    /** @var ScheduleRewriter */
    private $rewriter;
    /** @var array<string, Lock> the holds this process took, by lock name */
    private $held = [];

    public function __construct(Locks $locks, ScheduleRewriter $rewriter)
    {
        $this->locks = $locks;
        $this->rewriter = $rewriter;
    }

    public function create(Event $event)
    {
        $this->rewriter->ensure($event);
        $name = $this->rewriter->lockName($event);
        if ($this->rewriter->isWrapped($event)) {
            return $this->locks->holder($name) === null;
        }
        if (isset($this->held[$name])) {
            return false;
        }
        $lock = $this->locks->make($name);
        if (!$lock->acquire(0)) {
            return false;
        }
        $this->held[$name] = $lock;
        return true;
    }

    public function exists(Event $event)
    {
        $this->rewriter->ensure($event);
        $name = $this->rewriter->lockName($event);
        if (isset($this->held[$name])) {
            return true;
        }
        try {
            return $this->locks->holder($name) !== null;
        } catch (\CronLock\ConnectionException $e) {
            // The scheduler asks outside its per-event try: a Redis or database that cannot
            // be reached would end the whole schedule:run, events without a lock too (an
            // outside tester's finding). This event is skipped (it cannot run without its
            // lock anyway) and says why; the others run.
            error_log('cronlock: skipping ' . $name . ' this tick: ' . $e->getMessage());
            return true;
        }
    }

    public function forget(Event $event)
    {
        $name = $this->rewriter->lockName($event);
        if (isset($this->held[$name])) {
            $lock = $this->held[$name];
            unset($this->held[$name]);
            $lock->release();
        }
    }
}

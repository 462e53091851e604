<?php

namespace CronLock\Laravel;

use DateTimeInterface;
use Illuminate\Console\Scheduling\Event;
use Illuminate\Console\Scheduling\SchedulingMutex;

/**
 * onOneServer() on cronlock claims: what Laravel's scheduler asks
 * (Schedule::serverShouldRun() takes the container's SchedulingMutex).
 *
 * - The tick is the $time Laravel passes (schedule:run's own start on its
 *   own clock), to the minute in UTC: hosts' cron fires within seconds of
 *   each other, so their ticks name the same window; nothing re-aligns it
 *   to a server's clock.
 * - The claim is per tick, not a mutex: a winner killed with kill -9 costs
 *   nothing at the next tick, which is another window.
 * - Nothing stays behind per tick: a Redis claim key expires by itself,
 *   Database::claim() and FileClaims delete expired claims as claims go on
 *   (Locks::claim()).
 */
final class CronLockSchedulingMutex implements SchedulingMutex
{
    /** @var Locks */
    private $locks;
    /** @var ScheduleRewriter */
    private $rewriter;

    public function __construct(Locks $locks, ScheduleRewriter $rewriter)
    {
        $this->locks = $locks;
        $this->rewriter = $rewriter;
    }

    public function create(Event $event, DateTimeInterface $time)
    {
        $this->rewriter->ensure($event);
        return $this->locks->claim($this->rewriter->lockName($event), self::window($time));
    }

    public function exists(Event $event, DateTimeInterface $time)
    {
        $this->rewriter->ensure($event);
        return $this->locks->claimed($this->rewriter->lockName($event), self::window($time));
    }

    /** The tick's window: Laravel's time to the minute, in UTC ("2026-12-01 10:05"). */
    public static function window(DateTimeInterface $time): string
    {
        return gmdate('Y-m-d H:i', $time->getTimestamp());
    }
}

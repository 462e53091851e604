<?php

namespace App;

use CronLock\File;
use Illuminate\Console\Scheduling\Event;
use Illuminate\Console\Scheduling\EventMutex;

/**
 * What a straightforward bridge would do, kept to show why cronlock/laravel
 * does not: a CronLock\File held by the process that calls create(). For a
 * background event that is schedule:run, which exits right after starting
 * the job, so the lock is gone before the job even begins
 * (php-tests/Frameworks/LaravelBeforeTest.php measures it). Bound only with
 * FIXTURE_NAIVE_MUTEX=1.
 */
final class NaiveFileMutex implements EventMutex
{
    /** @var array<string, File> */
    private $held = [];

    public function create(Event $event)
    {
        $lock = new File(storage_path('framework/' . basename($event->mutexName()) . '.lock'));
        if (!$lock->acquire(0)) {
            return false;
        }
        $this->held[$event->mutexName()] = $lock;
        return true;
    }

    public function exists(Event $event)
    {
        return (new File(storage_path('framework/' . basename($event->mutexName()) . '.lock')))->holderPid() !== null;
    }

    public function forget(Event $event)
    {
        if (isset($this->held[$event->mutexName()])) {
            $this->held[$event->mutexName()]->release();
            unset($this->held[$event->mutexName()]);
        }
    }
}

<?php

namespace CronLock\Laravel\Console;

use CronLock\Laravel\Locks;
use CronLock\Laravel\ScheduleRewriter;
use Illuminate\Console\Command;
use Illuminate\Console\Scheduling\Schedule;

/**
 * schedule:clear-cache with cronlock: a cronlock lock is never stale (it
 * ends with its holder: the kernel frees a File lock, the server a Database
 * lock, the lease a Redis key), so there is nothing to delete. It lists the
 * events whose lock is held, and by whom. With --force it ends the holders
 * it can (a process on this host, named by a File lock: SIGTERM, which
 * cronlock:run passes to the job before it lets go); a holder elsewhere is
 * named, not touched.
 */
final class ClearCacheCommand extends Command
{
    protected $signature = 'schedule:clear-cache {--force : End the processes on this host that hold a lock (SIGTERM)}';

    protected $description = 'Show which scheduled events hold their cronlock lock (--force: end those holders)';

    public function handle(Schedule $schedule, Locks $locks, ScheduleRewriter $rewriter)
    {
        $held = 0;
        foreach ($schedule->events() as $event) {
            if (!$event->withoutOverlapping) {
                continue;
            }
            $name = $rewriter->lockName($event);
            $holder = $locks->holder($name);
            if ($holder === null) {
                continue;
            }
            $held++;
            $this->line(sprintf('<info>Held by %s:</info> %s (%s)', $holder, $event->description ?: $rewriter->originalCommand($event), $locks->describe($name)));
            if (!$this->option('force')) {
                continue;
            }
            if (preg_match('/^pid (\d+)\b/', $holder, $m) && function_exists('posix_kill')) {
                $pid = (int) $m[1];
                if (posix_kill($pid, defined('SIGTERM') ? SIGTERM : 15)) {
                    $this->line("  sent SIGTERM to pid $pid");
                } else {
                    $this->error("  could not signal pid $pid: " . posix_strerror(posix_get_last_error()));
                }
            } else {
                $this->line('  not on this host as a process cronlock can name: left alone');
            }
        }
        if ($held === 0) {
            $this->info('No scheduled event holds its lock.');
        } elseif (!$this->option('force')) {
            $this->line("cronlock locks end with their holder, so none of these is stale; --force ends the holders on this host.");
        }
        return 0;
    }
}

<?php

namespace CronLock\Laravel\Console;

use CronLock\Cli\Supervisor;
use CronLock\Laravel\Locks;
use CronLock\Laravel\ScheduleRewriter;
use CronLock\Laravel\ShellWords;
use Illuminate\Console\Command;

/**
 * `php artisan cronlock:run <lock> <command>`: what ScheduleRewriter makes
 * of a withoutOverlapping() command event. Takes the event's lock from the
 * application's config (so no DSN or password is ever in a command line)
 * and runs the user's command under it (directly when it is one plain
 * command, see ShellWords, else through `sh -c`) with cronlock's
 * Supervisor (cronlock/cli, the same as `cronlock run`): the lock is held
 * while the job lives, the job is killed if this process dies (a parent
 * death signal), TERM, INT and HUP are passed on to it, and the exit status
 * is the job's (128 + N for signal N). When another run holds the lock (two
 * ticks that both passed the scheduler's look, see CronLockEventMutex) the
 * job is not started: cron_guard()'s busy line goes to the event's output
 * and the status is 0, as for any skipped cron_guard() run.
 */
final class RunCommand extends Command
{
    protected $signature = ScheduleRewriter::COMMAND . ' {lock : the event\'s lock name} {encoded : the event\'s command, base64}';

    protected $description = 'Run a scheduled command under its cronlock lock (the scheduler writes these)';

    protected $hidden = true;

    public function handle(Locks $locks)
    {
        $name = (string) $this->argument('lock');
        $command = ScheduleRewriter::unwrap((string) $this->argument('encoded'));
        if ($command === null || !preg_match('/^schedule-[0-9a-f]{40}$/', $name)) {
            $this->error('cronlock:run runs what the scheduler wrote: a lock name (schedule-<sha1>) and a base64 command');
            return 2;
        }
        $argv = ShellWords::split($command) ?? ['/bin/sh', '-c', $command];
        $status = (new Supervisor())->runLocked($locks->make($name), $argv);
        return $status === null ? 0 : $status;
    }
}

<?php

namespace CronLock\Laravel\Console;

use CronLock\Cli\Supervisor;
use CronLock\Laravel\Locks;
use CronLock\Laravel\ScheduleRewriter;
use Illuminate\Console\Command;

/**
 * `php artisan cronlock:run <lock> <command>`: what ScheduleRewriter makes
 * of a withoutOverlapping() command event. Takes the event's lock from the
 * application's config (so no DSN or password is ever in a command line)
 * and runs the user's command (`sh -c`) under it with cronlock's
 * Supervisor: the lock is held while the job lives, the job is ended if
 * this process dies, and the exit status is the job's.
 */
final class RunCommand extends Command
{
    protected $signature = ScheduleRewriter::COMMAND . ' {lock : the event\'s lock name} {command : the event\'s command, base64}';

    protected $description = 'Run a scheduled command under its cronlock lock (the scheduler writes these)';

    protected $hidden = true;

    public function handle(Locks $locks)
    {
        $name = (string) $this->argument('lock');
        $command = ScheduleRewriter::unwrap((string) $this->argument('command'));
        if ($command === null || !preg_match('/^schedule-[0-9a-f]{40}$/', $name)) {
            $this->error('cronlock:run runs what the scheduler wrote: a lock name (schedule-<sha1>) and a base64 command');
            return 2;
        }
        return (new Supervisor())->run($locks->make($name), ['/bin/sh', '-c', $command]);
    }
}

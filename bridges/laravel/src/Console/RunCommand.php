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
 * while the job lives, the job and everything it started (its process
 * group) is killed if this process dies, TERM, INT and HUP are passed on to
 * that group, and the exit status
 * is the job's (128 + N for signal N). When another run holds the lock (two
 * ticks that both passed the scheduler's look, see CronLockEventMutex) the
 * job is not started, quietly, and the status is 0, as for `cronlock run`. A job that runs
 * longer than its event's withoutOverlapping() $expiresAt is ended
 * (endAfter()).
 */
final class RunCommand extends Command
{
    /** How long a job ended at its bound has after TERM before KILL (seconds). */
    private const GRACE = 30;

    protected $signature = ScheduleRewriter::COMMAND . ' {lock : the event\'s lock name} {encoded : the event\'s command, base64}'
        . ' {--expires=0 : minutes after which the job is ended (withoutOverlapping()\'s $expiresAt); 0: never}';

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
        $supervisor = new Supervisor();
        $this->endAfter((float) $this->option('expires'), $supervisor);
        $status = $supervisor->runLocked($locks->make($name), $argv);
        if (function_exists('pcntl_alarm')) {
            pcntl_alarm(0);
        }
        return $status === null ? 0 : $status;
    }

    /**
     * Laravel's $expiresAt as a bound on the job: after $minutes the job gets
     * TERM (a line in the event's output says why), and KILL GRACE seconds
     * later if it is still there. The lock is released when it has ended,
     * so the next tick never overlaps it.
     */
    private function endAfter(float $minutes, Supervisor $supervisor): void
    {
        if ($minutes <= 0 || !function_exists('pcntl_alarm')) {
            return;
        }
        $terminated = false;
        pcntl_async_signals(true);
        pcntl_signal(SIGALRM, function () use ($supervisor, $minutes, &$terminated) {
            $pid = $supervisor->childPid();
            if ($pid === null) {
                return;
            }
            if (!$terminated) {
                $terminated = true;
                fwrite(STDERR, sprintf("cronlock:run: the job ran %s min, its withoutOverlapping() bound: ending it (SIGTERM)\n", rtrim(rtrim(sprintf('%.3F', $minutes), '0'), '.')));
                posix_kill(-$pid, SIGTERM); // the job's process group (Supervisor)
                pcntl_alarm(self::GRACE);
                return;
            }
            fwrite(STDERR, sprintf("cronlock:run: the job is still there %d s after SIGTERM: SIGKILL\n", self::GRACE));
            posix_kill(-$pid, SIGKILL);
        });
        pcntl_alarm(max(1, (int) ceil($minutes * 60)));
    }
}

<?php

namespace CronLock\Laravel;

use Illuminate\Console\Application;
use Illuminate\Console\Scheduling\CallbackEvent;
use Illuminate\Console\Scheduling\Event;
use Illuminate\Console\Scheduling\Schedule;
use SplObjectStorage;

/**
 * Runs the command of every withoutOverlapping() command event under
 * `php artisan cronlock:run`, which holds the event's lock in the job's own
 * process tree: the lock lives exactly as long as the job (a background
 * event's `schedule:run` has exited before its job starts; a foreground
 * event's job outlives a killed shell), and the job dies with its holder.
 *
 * Traps it closes:
 * - schedule:finish finds a background event by mutexName(), the SHA-1 of
 *   the cron expression and the command, in a schedule it builds anew. The
 *   command is rewritten in every process that builds the schedule (the
 *   provider hooks the resolution of Schedule), the same way in each, so
 *   the rewritten mutex names agree.
 * - The lock is named after the command the user wrote (the name is taken
 *   before the rewrite), so renaming nothing in the rewrite can move it.
 * - The user's command travels base64-encoded: Laravel puts the command of
 *   an event with ->user() between single quotes without escaping them
 *   (`sudo -u … -- sh -c '…'`), which a quoted argument would break. No DSN
 *   or password is in it: cronlock:run reads the application's config.
 * - `schedule:list` shows the user's command: the provider marks that run
 *   for display, and the commands are then left (or put back) as written.
 * - Events added after the schedule was resolved (a package that adds them
 *   later) are rewritten when the mutex first sees them (see ensure()).
 * - withoutOverlapping($expiresAt) was a timer after which Laravel let the
 *   next run in, whether or not the last one still ran; a lock that lives
 *   exactly as long as its job needs none, so it becomes a bound on the
 *   job: cronlock:run ends a job that runs $expiresAt minutes (--expires).
 */
final class ScheduleRewriter
{
    public const COMMAND = 'cronlock:run';

    /** @var SplObjectStorage<Event, array{lock: string, original: string}> */
    private $wrapped;
    /** @var bool */
    private $forDisplay = false;

    public function __construct()
    {
        $this->wrapped = new SplObjectStorage();
    }

    /** Rewrite every event of the schedule that needs the wrapper (idempotent). */
    public function rewrite(Schedule $schedule): void
    {
        foreach ($schedule->events() as $event) {
            $this->ensure($event);
        }
    }

    /** Rewrite $event if it needs the wrapper and is not rewritten yet. */
    public function ensure(Event $event): void
    {
        if ($this->forDisplay || $this->wrapped->contains($event) || !self::needsWrapper($event)) {
            return;
        }
        $lock = Locks::lockName($event);
        $this->wrapped[$event] = ['lock' => $lock, 'original' => $event->command];
        $event->command = self::wrap($lock, $event->command, (float) $event->expiresAt);
    }

    /**
     * From now on commands are shown as the user wrote them (schedule:list):
     * rewritten events get their command back, and no event is rewritten.
     */
    public function showOriginals(): void
    {
        $this->forDisplay = true;
        foreach ($this->wrapped as $event) {
            $event->command = $this->wrapped[$event]['original'];
        }
        $this->wrapped = new SplObjectStorage();
    }

    /** Whether cronlock:run takes this event's lock (in the job's process), not the mutex in schedule:run. */
    public function isWrapped(Event $event): bool
    {
        return $this->wrapped->contains($event);
    }

    /** The name of the event's lock (see Locks::lockName()), whether or not it is rewritten. */
    public function lockName(Event $event): string
    {
        return $this->wrapped->contains($event) ? $this->wrapped[$event]['lock'] : Locks::lockName($event);
    }

    /** The command as the user wrote it. */
    public function originalCommand(Event $event): ?string
    {
        return $this->wrapped->contains($event) ? $this->wrapped[$event]['original'] : $event->command;
    }

    /** The command cronlock:run is given for $command under the lock $lock, ended after $minutes. */
    public static function wrap(string $lock, string $command, float $minutes): string
    {
        return Application::formatCommandString(self::COMMAND) . ' ' . $lock . ' ' . base64_encode($command)
            . ' --expires=' . rtrim(rtrim(sprintf('%.3F', $minutes), '0'), '.');
    }

    /** The user's command from cronlock:run's argument; null if it is not one wrap() made. */
    public static function unwrap(string $encoded): ?string
    {
        $command = base64_decode($encoded, true);
        return $command === false || $command === '' ? null : $command;
    }

    private static function needsWrapper(Event $event): bool
    {
        return !$event instanceof CallbackEvent && $event->withoutOverlapping && is_string($event->command) && $event->command !== '';
    }
}

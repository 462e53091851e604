<?php

namespace CronLock\Laravel;

/**
 * onOneServer() on the file backend: "this tick runs once on this host"
 * (two schedule:run of one minute: two cron entries, a manual run during
 * the cron one, two deployments sharing the lock directory). A claim is a
 * file named after the event's lock and the tick, created with O_EXCL:
 * `<directory>/<lock name>.<window, url-encoded>.claim`.
 *
 * Why files and not a lock: a claim must outlive the process that made it
 * (the second schedule:run of the minute may start after the first ended),
 * and a held flock() ends with its holder.
 *
 * Traps it closes:
 * - Two processes claiming one tick at once: fopen('x') is O_CREAT|O_EXCL,
 *   so exactly one of them creates the file.
 * - Claim files piling up, one a minute per event: every claim first
 *   deletes this lock's claim files whose claim expired (their mtime plus
 *   the claim's seconds), so what stays is the claims still running.
 * - A window that comes back after its claim expired (a clock stepped back
 *   by more than the claim lasts): the expired file is swept, and the tick
 *   runs again, as Laravel's cache claim would let it.
 */
final class FileClaims
{
    /**
     * Claims $window of the lock $name for $seconds: true for the one call
     * that created the claim, false while another call's claim stands.
     *
     * @throws \CronLock\LockException when the claim file cannot be created for another reason
     */
    public static function claim(string $directory, string $name, string $window, float $seconds): bool
    {
        self::sweep($directory, $name, $seconds);
        $path = self::path($directory, $name, $window);
        $file = @fopen($path, 'x');
        if ($file === false) {
            if (file_exists($path)) {
                return false;
            }
            throw new \CronLock\LockException("cannot create the claim file $path: " . (error_get_last()['message'] ?? 'unknown error'));
        }
        fwrite($file, sprintf("pid %d on %s\n", getmypid(), (string) gethostname()));
        fclose($file);
        return true;
    }

    /** Whether a claim of $window of the lock $name stands (asked without claiming). */
    public static function claimed(string $directory, string $name, string $window, float $seconds): bool
    {
        $mtime = @filemtime(self::path($directory, $name, $window));
        return $mtime !== false && $mtime + $seconds > time();
    }

    private static function path(string $directory, string $name, string $window): string
    {
        return sprintf('%s/%s.%s.claim', $directory, $name, rawurlencode($window));
    }

    private static function sweep(string $directory, string $name, float $seconds): void
    {
        $now = time();
        foreach (glob(sprintf('%s/%s.*.claim', $directory, $name), GLOB_NOSORT) ?: [] as $path) {
            $mtime = @filemtime($path);
            if ($mtime !== false && $mtime + $seconds <= $now) {
                @unlink($path);
            }
        }
    }
}

<?php

// cron_guard() of cronlock/polyfill; the work is in Polyfill\CronGuard.

use CronLock\Polyfill\CronGuard;

// Registered as the package loads, so it runs before the shutdown functions
// of the script: they already see every cron_guard() lock released after
// exit() or a fatal error.
register_shutdown_function([CronGuard::class, 'releaseAll']);

/**
 * Run $job under a lock; skip it quietly when another run holds the lock.
 * Same options, busy line and release guarantees as the extension's
 * cron_guard() (stubs/cronlock.stub.php).
 *
 * @param callable(\CronLock\Guard): mixed $job
 * @param \CronLock\Lock|string|null $lock
 * @param array{wait?: float, max_runtime?: float, on_busy?: int|null, once_per?: float} $options
 * @return mixed the job's result; null when skipped.
 * @throws \ValueError for a bad name or option value (on PHP 7: the package's \ValueError);
 *         'once_per' with a lock that has no TTL (anything but CronLock\Redis).
 * @throws \TypeError for a $lock or option of the wrong type.
 * @throws \CronLock\LockException when the lock cannot be used.
 */
function cron_guard(callable $job, $lock = null, array $options = [])
{
    return CronGuard::run($job, $lock, $options);
}

<?php
/**
 * sync_orders.php - the classic cron job, guarded by cronlock.
 *
 * crontab (every minute; a run that finds the previous one still going is
 * skipped quietly, with one line in the error log):
 *
 *   * * * * *  php /srv/app/examples/sync_orders.php >> /var/log/sync_orders.log 2>&1
 *
 * The lock is the file "sync-orders" in the directory set by the ini setting
 * cronlock.lock_dir. It is released however the job ends: return, exception,
 * exit() or a fatal error - and by the kernel if the process is killed.
 * SYNC_ORDERS_SECONDS (default 3) sets how long the pretend work takes.
 */

declare(strict_types=1);

if (!extension_loaded('cronlock') || !function_exists('cron_guard')) {
    fwrite(STDERR, "cron_guard() is missing: load the cronlock extension, e.g.\n"
        . "  php -d extension=/path/to/libcronlock.so " . __FILE__ . "\n");
    exit(1);
}

$pid = getmypid();
$seconds = (float) (getenv('SYNC_ORDERS_SECONDS') ?: 3);
printf("[%s] pid %d: started\n", date('H:i:s'), $pid);

$synced = cron_guard(function (CronLock\Guard $guard) use ($pid, $seconds): int {
    printf("[%s] pid %d: got the lock, syncing orders...\n", date('H:i:s'), $pid);
    $batches = 0;
    $end = microtime(true) + $seconds;
    while (microtime(true) < $end) {
        if ($guard->expired()) {    // past max_runtime: stop at a safe point
            printf("[%s] pid %d: max_runtime reached, stopping early\n", date('H:i:s'), $pid);
            break;
        }
        usleep(100_000);            // "sync one batch of orders"
        $batches++;
    }
    return $batches;
}, 'sync-orders', ['max_runtime' => 50]);

if ($synced === null) {
    printf("[%s] pid %d: skipped - the previous run still holds the lock\n", date('H:i:s'), $pid);
    exit(0);
}
printf("[%s] pid %d: synced %d batches, finished\n", date('H:i:s'), $pid, $synced);

<?php
/**
 * A cron-style job for the memory row: lock, do a little work, unlock, then
 * print the process's peak RSS (VmHWM, kB) as JSON.
 *
 *   php bench/cronjob.php userland      # fopen/flock/ftruncate/fwrite pattern
 *   php -d extension=… -d cronlock.lock_dir=DIR bench/cronjob.php cron_guard
 *
 * Environment: BENCH_EXT4_DIR (lock directory of the userland variant).
 */

declare(strict_types=1);

$job = function (): int {
    $orders = [];
    for ($i = 0; $i < 1000; $i++) {
        $orders[] = ['id' => $i, 'sku' => "SKU-$i", 'qty' => $i % 7];
    }
    return array_sum(array_column($orders, 'qty'));
};

$variant = $argv[1] ?? '';
if ($variant === 'userland') {
    $h = fopen(getenv('BENCH_EXT4_DIR') . '/cronjob.lock', 'c');
    if (flock($h, LOCK_EX | LOCK_NB)) {
        ftruncate($h, 0);
        fwrite($h, (string) getmypid());
        $job();
        flock($h, LOCK_UN);
    }
    fclose($h);
} elseif ($variant === 'cron_guard') {
    cron_guard($job, 'cronjob');
} else {
    fwrite(STDERR, "usage: cronjob.php userland|cron_guard\n");
    exit(2);
}

// VmHWM: the peak of all resident pages. RssAnon (now): the private part.
// RssFile: pages of mapped files (php, its libraries, libcronlock.so), which
// belong to the page cache and are shared by every process mapping them.
$status = (string) file_get_contents('/proc/self/status');
$kb = fn (string $field): int => preg_match("/^$field:\\s+(\\d+) kB/m", $status, $m) ? (int) $m[1] : -1;
echo json_encode([
    'mode' => 'memory',
    'row' => "memory.$variant",
    'ext' => extension_loaded('cronlock'),
    'kb' => $kb('VmHWM'),
    'anon_kb' => $kb('RssAnon'),
    'file_kb' => $kb('RssFile'),
]), "\n";

<?php
/**
 * Start-up cost of loading the extension: `php -n -r ''` with and without
 * `-d extension=…` (and with phpredis, for scale), run alternately
 * (A B C C B A A B C …) so that machine noise,
 * which comes in bursts on a shared box, hits both commands alike.
 *
 *   php bench/startup.php /abs/path/libcronlock.so RUNS
 *
 * Prints one JSON line: per-run wall time and CPU time (user + sys, from the
 * child's rusage; the kernel scales it to the exact runtime, so it does not
 * count time spent waiting for the CPU) in ns, for each command.
 */

declare(strict_types=1);

[, $ext, $runs] = $argv + [null, null, '100'];
$php = PHP_BINARY;
$commands = [
    'base' => [$php, '-n', '-r', ''],
    'ext' => [$php, '-n', '-d', "extension=$ext", '-r', ''],
    // For scale: loading C extensions, phpredis and igbinary (which Debian's
    // phpredis needs loaded first).
    'phpredis' => [$php, '-n', '-d', 'extension=igbinary', '-d', 'extension=redis', '-r', ''],
];

function spawn(array $argv): array
{
    $t0 = hrtime(true);
    $pid = pcntl_fork();
    if ($pid === 0) {
        pcntl_exec($argv[0], array_slice($argv, 1));
        exit(127);
    }
    pcntl_waitpid($pid, $status, 0, $ru);
    $wall = hrtime(true) - $t0;
    if (!pcntl_wifexited($status) || pcntl_wexitstatus($status) !== 0) {
        fwrite(STDERR, "startup: command failed: " . implode(' ', $argv) . "\n");
        exit(1);
    }
    $cpu = ($ru['ru_utime.tv_sec'] + $ru['ru_stime.tv_sec']) * 1_000_000_000
        + ($ru['ru_utime.tv_usec'] + $ru['ru_stime.tv_usec']) * 1000;
    return [$wall, $cpu];
}

$out = ['mode' => 'startup', 'row' => 'startup', 'ext' => false];
foreach ($commands as $name => $argv) {
    // A command must run silently (spawn() does not redirect its output);
    // this also warms the page cache.
    $lines = [];
    exec(implode(' ', array_map('escapeshellarg', $argv)) . ' 2>&1', $lines, $rc);
    if ($rc !== 0 || $lines) {
        $out['skipped'][$name] = $lines[0] ?? "exit $rc";
        unset($commands[$name]);
        continue;
    }
    spawn($argv);
}
for ($i = 0; $i < (int) $runs; $i++) {
    $order = array_keys($commands);
    foreach ($i % 2 ? array_reverse($order) : $order as $name) {
        [$wall, $cpu] = spawn($commands[$name]);
        $out["{$name}_wall_ns"][] = $wall;
        $out["{$name}_cpu_ns"][] = $cpu;
    }
}
echo json_encode($out), "\n";

<?php
/**
 * System calls per lock cycle, counted by strace -c: each row runs N and then
 * 2N cycles (bench.php count), and the difference over N is what one cycle
 * makes, whatever the process does to start and set the row up.
 *
 *   php bench/syscalls.php EXT CYCLES ROW...
 *
 * EXT: libcronlock.so, loaded for the cronlock rows (peers run without it).
 * Prints one JSON line per row: {"mode": "syscalls", "row", "per_cycle":
 * {syscall: calls per cycle}}, or {"na": why} without strace.
 */

declare(strict_types=1);

[, $ext, $cycles] = $argv + [null, null, '2000'];
$rows = array_slice($argv, 3);
$cycles = max(100, (int) $cycles);
$strace = trim((string) shell_exec('command -v strace 2>/dev/null'));

/** @return array<string, int> calls by syscall, from one strace -c run of $n cycles */
function count_calls(string $strace, array $php, string $row, int $n): array
{
    $out = tempnam(sys_get_temp_dir(), 'cronlock-strace');
    $cmd = array_merge([$strace, '-f', '-c', '-o', $out], $php, [__DIR__ . '/bench.php', 'count', $row, (string) $n]);
    $p = proc_open($cmd, [0 => ['file', '/dev/null', 'r'], 1 => ['file', '/dev/null', 'w'], 2 => ['file', '/dev/null', 'w']], $pipes);
    $status = is_resource($p) ? proc_close($p) : -1;
    $text = (string) file_get_contents($out);
    unlink($out);
    if ($status !== 0) {
        throw new RuntimeException("strace of $row exited $status");
    }
    $calls = [];
    foreach (explode("\n", $text) as $line) {
        // "% time     seconds  usecs/call     calls    errors syscall"
        if (preg_match('/^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?([a-z_0-9]+)\s*$/', $line, $m)) {
            $calls[$m[2]] = (int) $m[1];
        }
    }
    return $calls;
}

foreach ($rows as $row) {
    $out = ['mode' => 'syscalls', 'row' => $row, 'ext' => str_contains($row, 'cronlock')];
    if ($strace === '') {
        $out['na'] = 'strace not installed';
        echo json_encode($out), "\n";
        continue;
    }
    $php = str_contains($row, 'cronlock') ? [PHP_BINARY, '-d', "extension=$ext"] : [PHP_BINARY];
    try {
        $once = count_calls($strace, $php, $row, $cycles);
        $twice = count_calls($strace, $php, $row, 2 * $cycles);
        $per = [];
        foreach ($twice as $name => $calls) {
            $n = ($calls - ($once[$name] ?? 0)) / $cycles;
            if ($n >= 0.05) {
                $per[$name] = round($n, 2);
            }
        }
        arsort($per);
        $out['per_cycle'] = $per;
    } catch (RuntimeException $e) {
        $out['na'] = $e->getMessage();
    }
    echo json_encode($out), "\n";
}

<?php
/**
 * Turns bench/run's raw results into the markdown tables and the PASS/MISS
 * lines. Usage: php bench/report.php RESULTS_DIR
 *
 * RESULTS_DIR/results.jsonl  one JSON line per bench.php / cronjob.php run
 * Environment: BENCH_EXT4_FS, BENCH_TMPFS_FS (filesystem types used), BENCH_ROUNDS.
 */

declare(strict_types=1);

function median(array $xs): ?float
{
    if (!$xs) {
        return null;
    }
    sort($xs);
    $n = count($xs);
    return $n % 2 ? (float) $xs[intdiv($n, 2)] : ($xs[$n / 2 - 1] + $xs[$n / 2]) / 2;
}

/** Nearest-rank percentile. */
function pct(array $xs, float $p): ?float
{
    if (!$xs) {
        return null;
    }
    sort($xs);
    return (float) $xs[max(0, (int) ceil($p / 100 * count($xs)) - 1)];
}

function fmt(?float $x, int $dec = 2): string
{
    return $x === null ? 'n/a' : number_format($x, $dec, '.', ',');
}

$dir = $argv[1] ?? exit("usage: report.php RESULTS_DIR\n");
$ext4 = getenv('BENCH_EXT4_FS') ?: 'ext4';
$tmpfs = getenv('BENCH_TMPFS_FS') ?: 'tmpfs';

// ---- collect -------------------------------------------------------------
$cycle = [];    // row => ['plain' => [ns...], 'ext' => [ns...]]
$handoff = [];  // row => [ns...]
$memory = [];   // "row|ext" => [kB...]
$anon = [];       // "row|ext" => [RssAnon kB...]
$fileBacked = []; // "row|ext" => [RssFile kB...]
$na = [];       // row => reason
$statements = [];  // row => [statements per cycle...] (database rows: the server's counters)
$commands = [];    // row => [command => calls per cycle] (Redis rows: INFO commandstats)
$startupRuns = [];
$waits = [];     // row => [result...]
$syscalls = [];  // row => [syscall => calls per cycle]
$malformed = [];  // output that is not a result (PHP warnings...)
foreach (file("$dir/results.jsonl", FILE_IGNORE_NEW_LINES | FILE_SKIP_EMPTY_LINES) as $line) {
    $r = json_decode($line, true);
    if (!is_array($r)) {
        $malformed[] = $line;
        continue;
    }
    if (isset($r['na'])) {
        $na[$r['row']] = $r['na'];
        continue;
    }
    $k = $r['ext'] ? 'ext' : 'plain';
    if (isset($r['statements_per_cycle'])) {
        $statements[$r['row']][] = $r['statements_per_cycle'];
    }
    if (isset($r['commands_per_cycle'])) {
        $commands[$r['row']] = $r['commands_per_cycle']; // the same in every round
    }
    if ($r['mode'] === 'memory' && isset($r['anon_kb'], $r['file_kb'])) {
        $anon[$r['row'] . '|' . $k][] = $r['anon_kb'];
        $fileBacked[$r['row'] . '|' . $k][] = $r['file_kb'];
    }
    match ($r['mode']) {
        'cycle' => $cycle[$r['row']][$k][$r['round'] ?? count($cycle[$r['row']][$k] ?? [])] = $r['ns_per_cycle'],
        'handoff' => $handoff[$r['row']] = array_merge($handoff[$r['row']] ?? [], $r['samples_ns']),
        'memory' => $memory[$r['row'] . '|' . $k][] = $r['kb'],
        'startup' => $startupRuns[] = $r,
        'wait' => $waits[$r['row']][] = $r,
        'syscalls' => $syscalls[$r['row']] = $r['per_cycle'],
    };
}

if ($malformed) {
    fwrite(STDERR, sprintf("report: %d non-result output line(s) ignored, first: %s\n", count($malformed), $malformed[0]));
}

/** Median µs/cycle of a row: peers without the extension, cronlock with it. */
function us(array $cycle, string $row, string $k = ''): ?float
{
    $k = $k ?: (str_contains($row, 'cronlock') ? 'ext' : 'plain');
    $m = median($cycle[$row][$k] ?? []);
    return $m === null ? null : $m / 1000;
}

/** $a / $b: the median of the per-round ratios (both ran in the same round,
 *  minutes apart at most), or the ratio of the medians if no round has both. */
function ratio(array $cycle, string $a, string $b): ?float
{
    $side = fn (string $row) => $cycle[$row][str_contains($row, 'cronlock') ? 'ext' : 'plain'] ?? [];
    [$ra, $rb] = [$side($a), $side($b)];
    $per = [];
    foreach (array_intersect_key($ra, $rb) as $round => $ns) {
        $per[] = $ns / $rb[$round];
    }
    if ($per) {
        return median($per);
    }
    return ($ra && $rb) ? median($ra) / median($rb) : null;
}

// ---- cycle table -----------------------------------------------------------
$groups = [
    'File' => [
        'file.floor' => 'floor: raw `flock(LOCK_EX\\|LOCK_NB)` + `flock(LOCK_UN)`, one open handle',
        'file.userland.ext4' => "userland pattern (fopen 'c', flock, ftruncate, fwrite pid, flock UN, fclose), $ext4",
        'file.userland.tmpfs' => "userland pattern, $tmpfs",
        'file.symfony' => 'symfony/lock FlockStore (createLock + acquire + release; no pid recorded)',
        'file.malkusch' => 'malkusch/lock FlockMutex (fopen + synchronized + fclose; no pid recorded)',
        'file.cronlock.new' => "cronlock: new `CronLock\\File` per cycle (pid recorded), $ext4",
        'file.cronlock.new.tmpfs' => "cronlock: new `CronLock\\File` per cycle (pid recorded), $tmpfs",
        'file.cronlock.reused' => "cronlock: one `CronLock\\File` reused (pid recorded), $ext4",
    ],
    'Redis' => [
        'redis.floor' => 'floor: two PINGs, phpredis',
        'redis.phpredis' => 'phpredis: `SET NX EX` + Lua compare-and-delete',
        'redis.predis' => 'predis: `SET NX EX` + Lua compare-and-delete',
        'redis.symfony' => 'symfony/lock RedisStore (phpredis; acquire + release)',
        'redis.cronlock' => 'cronlock: `CronLock\\Redis` acquire + fencingToken() + release',
    ],
    'MariaDB' => [
        'mysql.floor' => 'floor: two `SELECT 1` round trips, PDO `query()`',
        'mysql.pdo' => 'PDO by hand: prepared `GET_LOCK(?, 0)` + `RELEASE_LOCK(?)`',
        'mysql.cronlock' => 'cronlock: one `CronLock\\Database` (DSN, own connection) acquire + release',
        'mysql.cronlock.pdo' => 'cronlock: one `CronLock\\Database` on the PDO given, acquire + release',
    ],
    'PostgreSQL' => [
        'pgsql.floor' => 'floor: two `SELECT 1` round trips, PDO `exec()`',
        'pgsql.pdo' => 'PDO by hand: prepared `pg_try_advisory_lock` + `pg_advisory_unlock`',
        'pgsql.cronlock' => 'cronlock: one `CronLock\\Database` (DSN, own connection) acquire + release',
        'pgsql.cronlock.pdo' => 'cronlock: one `CronLock\\Database` on the PDO given, acquire + release',
    ],
    'Redlock (3 masters)' => [
        'redlock.floor' => 'floor: two round trips, each a PING to all 3 masters at once (raw RESP)',
        'redlock.serial' => 'for scale: two PINGs to each of the 3 masters, one after another, phpredis',
        'redlock.cronlock' => 'cronlock: `CronLock\\Redis([3 DSNs])` acquire + release (all masters at once)',
    ],
    'Sentinel' => [
        'sentinel.floor' => 'floor: two PINGs to the master, phpredis',
        'sentinel.asking' => 'for scale: two (sentinel PING + master PING), phpredis: a lock that asks a sentinel before each call',
        'sentinel.cronlock' => 'cronlock: `redis-sentinel://` acquire + release (asks a sentinel on connect and on failure only)',
    ],
    'Cluster (3 masters)' => [
        'cluster.floor' => "floor: two PINGs to the key's node, phpredis",
        'cluster.cronlock' => 'cronlock: `redis-cluster://` acquire + release',
    ],
];
echo "### Lock cycle: one acquire + release\n\n";
echo "µs per cycle: median of the rounds. × floor: median of the per-round ratios to the group's floor.\n";
echo "Peers run without cronlock loaded; the last column re-runs them with\n";
echo "`-d extension=libcronlock.so` to show whether loading it changes them.\n\n";
echo "| Group | Row | µs / cycle | ops/s | × floor | peer with cronlock loaded: µs (Δ) |\n";
echo "|---|---|---:|---:|---:|---:|\n";
foreach ($groups as $group => $rows) {
    $floorRow = array_key_first($rows);
    if (!array_filter(array_keys($rows), fn (string $row): bool => isset($cycle[$row]) || isset($na[$row]))) {
        continue; // not run (bench/run --only)
    }
    foreach ($rows as $row => $label) {
        $u = us($cycle, $row);
        if ($u === null) {
            $why = $na[$row] ?? 'no result';
            echo "| $group | $label | n/a ($why) | | | |\n";
            continue;
        }
        $with = '';
        if (!str_contains($row, 'cronlock') && ($w = us($cycle, $row, 'ext')) !== null) {
            $with = sprintf('%s (%+.0f%%)', fmt($w), ($w / $u - 1) * 100);
        }
        printf("| %s | %s | %s | %s | %s | %s |\n", $group, $label, fmt($u), fmt(1e6 / $u, 0),
            fmt(ratio($cycle, $row, $floorRow)) . '×', $with);
    }
}

// ---- Redis commands -----------------------------------------------------------
if ($commands) {
    echo "\n### Redis: commands per cycle, as the server counts them\n\n";
    echo "`INFO commandstats` deltas over 1,000 cycles after the timed ones; commands run inside scripts count.\n\n";
    echo "| Row | commands / cycle | which |\n|---|---:|---|\n";
    foreach ($groups['Redis'] as $row => $label) {
        if (isset($commands[$row])) {
            $list = implode(', ', array_map(fn ($name, $n) => ($n == 1 ? '' : fmt($n, $n == (int) $n ? 0 : 2) . ' × ') . "`$name`",
                array_keys($commands[$row]), $commands[$row]));
            printf("| %s | %s | %s |\n", $label, fmt(array_sum($commands[$row]), 0), $list);
        }
    }
}

// ---- database statements ------------------------------------------------------
if ($statements) {
    echo "\n### Database: statements per cycle, as the server counts them\n\n";
    echo "MariaDB `Questions`, PostgreSQL `pg_stat_statements` (calls), over 200 cycles after the timed ones.\n\n";
    echo "| Row | statements / cycle |\n|---|---:|\n";
    foreach (['MariaDB', 'PostgreSQL'] as $group) {
        foreach ($groups[$group] as $row => $label) {
            if (isset($statements[$row])) {
                printf("| %s: %s | %s |\n", $group, $label, fmt(median($statements[$row])));
            }
        }
    }
}

// ---- hand-off, start-up, memory (not run by bench/run --only) ----------------
/** One figure of a wait row: the median over its runs. */
$wait = fn (string $row, string $what): ?float => median(array_map(fn ($r) => $r[$what], $waits[$row] ?? []));
$partial = !$handoff && !$startupRuns && !$memory;
$startupDelta = null;
if (!$partial) {
// ---- hand-off table ----------------------------------------------------------
$handoffRows = [
    'handoff.file.userland.block' => 'File, userland waiter: blocking `flock(LOCK_EX)`',
    'handoff.file.userland.poll' => 'File, userland waiter: `flock(LOCK_EX\\|LOCK_NB)` + `usleep(100000)` loop',
    'handoff.file.cronlock.timed' => 'File, cronlock waiter: `acquire(30.0)` (what cron_guard `wait` does)',
    'handoff.file.cronlock.forever' => 'File, cronlock waiter: `acquire(-1)`',
    'handoff.redis.userland.poll' => 'Redis, userland waiter: `SET NX EX` + `usleep(100000)` loop',
    'handoff.redis.cronlock' => 'Redis, cronlock waiter: `acquire(30.0)`',
];
echo "\n### Hand-off latency: holder releases → waiter holds (two processes)\n\n";
echo "| Row | samples | median ms | p99 ms |\n|---|---:|---:|---:|\n";
foreach ($handoffRows as $row => $label) {
    $s = $handoff[$row] ?? [];
    if (!$s) {
        printf("| %s | 0 | n/a (%s) | |\n", $label, $na[$row] ?? 'no result');
        continue;
    }
    printf("| %s | %d | %s | %s |\n", $label, count($s), fmt(median($s) / 1e6, 3), fmt(pct($s, 99) / 1e6, 3));
}

// ---- waits --------------------------------------------------------------------------
$waitRows = [
    'wait.file.php.block' => "PHP's blocking `flock(\$h, LOCK_EX)` (what `flock -w` costs)",
    'wait.file.cronlock.timed' => 'cronlock `acquire($seconds)`, given up at its timeout',
    'wait.file.cronlock.forever' => 'cronlock `acquire(-1)`, the holder lets go at the end',
];
echo "
### Waiting: what a waiter costs while the lock stays held

";
echo "The waiter's own CPU time (user + sys) and context switches over the wait (getrusage), the lock held by another process.

";
echo "| Wait | s | CPU ms | voluntary switches | involuntary switches |
|---|---:|---:|---:|---:|
";
foreach ($waitRows as $row => $label) {
    if (!isset($waits[$row])) {
        printf("| %s | n/a (%s) | | | |
", $label, $na[$row] ?? 'no result');
        continue;
    }
    printf("| %s | %s | %s | %s | %s |
", $label, fmt($wait($row, 'wait_s'), 1), fmt($wait($row, 'cpu_s') * 1000, 1),
        fmt($wait($row, 'voluntary'), 0), fmt($wait($row, 'involuntary'), 0));
}

// ---- system calls per cycle -----------------------------------------------------------
echo "
### System calls per cycle (strace -f -c; N and 2N cycles, the difference over N)

";
echo "| Row | total | calls |
|---|---:|---|
";
foreach ($syscalls as $row => $calls) {
    $label = $row;
    foreach ($groups as $group => $rows) {
        if (isset($rows[$row])) {
            $label = $group === 'File' ? $rows[$row] : "$group: {$rows[$row]}";
        }
    }
    $total = $calls['total'] ?? array_sum($calls);
    unset($calls['total']);
    if (!$calls) {
        printf("| %s | n/a (the row did not run) | |\n", $label); // e.g. its servers did not start
        continue;
    }
    $list = implode(', ', array_map(fn ($name, $n) => ($n == 1 ? '' : fmt($n, $n == (int) $n ? 0 : 2) . ' × ') . "`$name`", array_keys($calls), $calls));
    printf("| %s | %s | %s |
", $label, fmt($total, $total == (int) $total ? 0 : 2), $list);
}

// ---- start-up ------------------------------------------------------------------
// startup.php runs the two commands alternately; the added cost is the median
// of the per-pair differences, which cancels drift on a busy machine.
$st = [];
foreach ($startupRuns as $r) {
    foreach ($r['skipped'] ?? [] as $cmd => $why) {
        fwrite(STDERR, "report: start-up command '$cmd' skipped: $why\n");
    }
    foreach ($r as $k => $v) {
        if (str_ends_with($k, '_ns')) {
            $st[$k] = array_merge($st[$k] ?? [], $v);
        }
    }
}
$ms = fn (array $xs): ?float => ($m = median($xs)) === null ? null : $m / 1e6;
$added = fn (string $cmd, string $what): ?float => $ms(array_map(
    fn ($e, $b) => $e - $b, $st["{$cmd}_{$what}_ns"] ?? [], $st["base_{$what}_ns"] ?? []));
$startupDelta = $added('ext', 'wall');
echo "\n### Start-up: `php -n -r ''` with and without `-d extension=libcronlock.so`\n\n";
echo "The commands run alternately, ", count($st['base_wall_ns'] ?? []), " times each; medians.",
    " CPU = user + sys of the child. \"Added\" = median of the per-run differences to `php -n` run next to it.\n\n";
echo "| Command | wall ms | CPU ms | added wall ms | added CPU ms |\n|---|---:|---:|---:|---:|\n";
foreach (['base' => ["php -n -r ''", ''], 'ext' => ["php -n -d extension=libcronlock.so -r ''", ''],
          'phpredis' => ["php -n -d extension=igbinary -d extension=redis -r ''", ' (for scale: C extensions)']] as $cmd => [$code, $note]) {
    printf("| `%s`%s | %s | %s | %s | %s |\n", $code, $note,
        fmt($ms($st["{$cmd}_wall_ns"] ?? []), 3), fmt($ms($st["{$cmd}_cpu_ns"] ?? []), 3),
        $cmd === 'base' ? '' : fmt($added($cmd, 'wall'), 3), $cmd === 'base' ? '' : fmt($added($cmd, 'cpu'), 3));
}

// ---- memory ----------------------------------------------------------------------
$memRows = [
    'memory.userland|plain' => 'cron-style job, userland flock pattern, without the extension',
    'memory.userland|ext' => 'the same job with the extension loaded (unused)',
    'memory.cron_guard|ext' => 'the same job run through `cron_guard()`',
];
echo "\n### Memory: peak RSS (VmHWM) of a cron-style job\n\n";
echo "Private = `RssAnon` at the job's end; file-backed = `RssFile` (pages of php, its libraries and",
    " libcronlock.so: page cache, shared by every process that maps the same file).\n\n";
echo "| Script | runs | peak RSS kB (median) | private kB | file-backed kB |\n|---|---:|---:|---:|---:|\n";
foreach ($memRows as $k => $label) {
    printf("| %s | %d | %s | %s | %s |\n", $label, count($memory[$k] ?? []), fmt(median($memory[$k] ?? []), 0),
        fmt(median($anon[$k] ?? []), 0), fmt(median($fileBacked[$k] ?? []), 0));
}
}

// ---- targets ---------------------------------------------------------------------
$hmed = fn (string $row): ?float => ($s = $handoff[$row] ?? []) ? median($s) / 1e6 : null;
$targets = [
    // [label, measured, comparison, limit, unit]
    ['File new object: userland pattern on ' . $ext4 . ' / cronlock', ratio($cycle, 'file.userland.ext4', 'file.cronlock.new'), '>=', 20, '×'],
    ['File new object: symfony FlockStore / cronlock', ratio($cycle, 'file.symfony', 'file.cronlock.new'), '>=', 1.5, '×'],
    ['File reused object: cronlock / floor', ratio($cycle, 'file.cronlock.reused', 'file.floor'), '<=', 3, '×'],
    ['Redis: cronlock (fencing token incl.) / phpredis SET NX + Lua', ratio($cycle, 'redis.cronlock', 'redis.phpredis'), '<=', 1, '×'],
    ['Redis: cronlock (fencing token incl.) / two-PING floor', ratio($cycle, 'redis.cronlock', 'redis.floor'), '<=', 1.2, '×'],
    ['Sentinel: cronlock / two PINGs to the master', ratio($cycle, 'sentinel.cronlock', 'sentinel.floor'), '<=', 1.2, '×'],
    ['Cluster: cronlock / two PINGs to the key\'s node', ratio($cycle, 'cluster.cronlock', 'cluster.floor'), '<=', 1.2, '×'],
    ['Redlock: cronlock / two round trips to all masters at once', ratio($cycle, 'redlock.cronlock', 'redlock.floor'), '<=', 1.2, '×'],
    ['MariaDB: cronlock DSN / PDO by hand', ratio($cycle, 'mysql.cronlock', 'mysql.pdo'), '<=', 1, '×'],
    ['MariaDB: cronlock DSN / two-SELECT 1 floor', ratio($cycle, 'mysql.cronlock', 'mysql.floor'), '<=', 1.2, '×'],
    ['PostgreSQL: cronlock DSN / PDO by hand', ratio($cycle, 'pgsql.cronlock', 'pgsql.pdo'), '<=', 1, '×'],
    ['PostgreSQL: cronlock DSN / two-SELECT 1 floor', ratio($cycle, 'pgsql.cronlock', 'pgsql.floor'), '<=', 1.2, '×'],
    ['Hand-off median, File (cronlock acquire(30.0))', $hmed('handoff.file.cronlock.timed'), '<=', 2, ' ms'],
    ['Hand-off median, Redis (cronlock acquire(30.0))', $hmed('handoff.redis.cronlock'), '<=', 5, ' ms'],
    // A timed wait and acquire(-1) wait alike; what the median of a few
    // 10 s waits still differs by on a shared VM (~1 ms, 2 switches) is noise.
    ['File wait: CPU, timed wait - acquire(-1), ' . fmt($wait('wait.file.cronlock.timed', 'wait_s'), 0) . ' s each', ($t = $wait('wait.file.cronlock.timed', 'cpu_s')) !== null && ($f = $wait('wait.file.cronlock.forever', 'cpu_s')) !== null ? ($t - $f) * 1000 : null, '<=', 1, ' ms'],
    ['File wait: voluntary switches, timed wait minus acquire(-1)', ($t = $wait('wait.file.cronlock.timed', 'voluntary')) !== null && ($f = $wait('wait.file.cronlock.forever', 'voluntary')) !== null ? $t - $f : null, '<=', 2, ''],
    ["Start-up: extension adds to `php -n -r ''`", $startupDelta, '<=', 0.5, ' ms'],
    ['Memory: peak RSS of a cron job, extension loaded - without', ($e = median($memory['memory.userland|ext'] ?? [])) !== null && ($p = median($memory['memory.userland|plain'] ?? [])) !== null ? ($e - $p) / 1024 : null, '<=', 1, ' MB'],
    ['Memory: peak RSS of a cron job, run by cron_guard() - without', ($g = median($memory['memory.cron_guard|ext'] ?? [])) !== null && ($p = median($memory['memory.userland|plain'] ?? [])) !== null ? ($g - $p) / 1024 : null, '<=', 1, ' MB'],
    ['Memory: private (RssAnon) of a cron job, run by cron_guard() - without', ($g = median($anon['memory.cron_guard|ext'] ?? [])) !== null && ($p = median($anon['memory.userland|plain'] ?? [])) !== null ? ($g - $p) / 1024 : null, '<=', 1, ' MB'],
];
echo "\n### Targets\n\n```\n";
foreach ($targets as [$label, $v, $op, $limit, $unit]) {
    if ($partial && $v === null) {
        continue;
    }
    $verdict = $v === null ? 'N/A ' : ((($op === '>=') ? $v >= $limit : $v <= $limit) ? 'PASS' : 'MISS');
    printf("%s  %-58s %s (target %s %s%s)\n", $verdict, $label, $v === null ? 'n/a' : fmt($v) . $unit, $op === '>=' ? '≥' : '≤', $limit, $unit);
}
echo "```\n";

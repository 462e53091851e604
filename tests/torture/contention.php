<?php

declare(strict_types=1);

/*
 * 1. Contention: P processes x K locked read-increment-write cycles of one
 * counter file. Any lapse of mutual exclusion loses an update, so the final
 * counter must equal the number of increments the workers report.
 */

namespace Torture;

require __DIR__ . '/lib/common.php';

T::init('contention', $argv);

$p = (int) T::q(8, 16);
$k = (int) T::q(500, 3000);

/**
 * @param list<array{0: string, 1: string}> $kinds  [backend, mode] per worker (cycled)
 */
function run_counter(string $name, array $kinds, int $p, int $k, string $lockArg, ?string $flockPath = null, int $flockWorkers = 0): void
{
    $dir = T::$tmp . '/' . preg_replace('/[^a-z0-9]+/i', '-', $name);
    @mkdir($dir, 0755, true);
    $counter = "$dir/counter";
    $go = "$dir/go";
    file_put_contents($counter, '0');
    @unlink($go);
    $procs = [];
    $started = microtime(true);
    $expected = 0;
    $readers = 0;
    for ($i = 0; $i < $p; $i++) {
        [$backend, $mode] = $kinds[$i % count($kinds)];
        $procs[] = [$backend, $mode, new Proc(array_merge(T::php(), [T::worker(), 'counter', $backend, $mode, (string) $k, $lockArg, $counter, $go]))];
        if ($backend === 'file-shared-reader') {
            $readers++;
        } else {
            $expected += $k;
        }
    }
    // util-linux flock(1) users on the same file: the fd form, as shell scripts use it
    for ($i = 0; $i < $flockWorkers; $i++) {
        $script = 'exec 9<>"$1"; while [ ! -e "$3" ]; do sleep 0.01; done; '
            . 'for ((i=0;i<$2;i++)); do '
            . '  if ((i % 2)); then flock -x 9; else flock -x -w 60 9 || exit 7; fi; '
            . '  n=; read -r n <"$4" || :; echo $((n+1)) >"$4"; flock -u 9; '
            . 'done; echo "DONE $2 0 0"';
        $procs[] = ['flock(1)', 'block', new Proc(['bash', '-c', $script, 'flock1', $flockPath, (string) $k, $go, $counter])];
        $expected += $k;
    }
    touch($go);
    $done = 0;
    $timeouts = 0;
    $busy = 0;
    $ok = true;
    foreach ($procs as [$backend, $mode, $proc]) {
        if (!$proc->wait(T::quick() ? 200 : 900)) {
            T::fail("$name: a $backend/$mode worker (pid {$proc->pid}) did not finish in time; killing it");
            $proc->kill(9);
            $proc->wait(30);
            $ok = false;
        }
        $out = $proc->out();
        if (str_contains($out, 'TORN')) {
            T::fail("$name: a shared reader saw the counter change under LOCK_SH: " . trim($out));
        }
        if ($proc->exitCode !== 0 || !preg_match('/DONE (\d+) (\d+) (\d+)/', $out, $m)) {
            T::fail("$name: $backend/$mode worker pid {$proc->pid}: {$proc->describeExit()}: " . trim($out . ' ' . $proc->err()));
            $ok = false;
        } else {
            if ($backend !== 'file-shared-reader') {
                $done += (int) $m[1];
            }
            $timeouts += (int) $m[2];
            $busy += (int) $m[3];
            if (trim($proc->err()) !== '') {
                T::fail("$name: $backend/$mode worker wrote to stderr: " . trim($proc->err()));
            }
        }
        $proc->close();
    }
    $final = (int) file_get_contents($counter);
    $secs = microtime(true) - $started;
    $n = count($procs);
    if ($kinds[0][0] === 'none') {
        // negative control: without a lock the same workload must lose updates
        T::check($final !== $expected, "control without any lock gets the count wrong (counter $final, expected $expected)");
        T::say(sprintf('  %-46s %2d procs x %5d  counter=%-6d expected=%-6d %s  %.1fs',
            $name, $n, $k, $final, $expected, $final !== $expected ? 'wrong, as it must be' : 'NO RACE SEEN', $secs));
        return;
    }
    T::add('iterations', $done + $readers * $k);
    T::check($ok && $final === $expected && $done === $expected,
        sprintf('%s: %d processes, counter %d, expected %d (%d increments reported)', $name, $n, $final, $expected, $done));
    T::say(sprintf('  %-46s %2d procs x %5d  counter=%-6d expected=%-6d %s  %.1fs  (timed-out waits %d, busy tries %d)',
        $name, $n, $k, $final, $expected, $final === $expected ? 'exact' : 'LOST UPDATES', $secs, $timeouts, $busy));
}

$lockDir = T::$tmp . '/locks';
@mkdir($lockDir, 0755, true);

T::say("contention (P=$p, K=$k):");
run_counter('control: no lock at all', [['none', 'block']], 4, 200, '-');
run_counter('File acquire(-1)', [['file', 'block']], $p, $k, "$lockDir/block.lock");
run_counter('File acquire(timeout)', [['file', 'timed']], $p, $k, "$lockDir/timed.lock");
run_counter('File acquire(0)+backoff', [['file', 'try']], (int) T::q(4, 8), (int) T::q(250, 1500), "$lockDir/try.lock");
// mixed: cronlock (three ways) + PHP flock() + util-linux flock(1), one file
$mixed = "$lockDir/mixed.lock";
run_counter('File + PHP flock() + flock(1) mixed', [['file', 'block'], ['file', 'timed'], ['phpflock', 'block'], ['file', 'try'], ['phpflock', 'timed']], $p, $k, $mixed, $mixed, (int) T::q(2, 4));
run_counter('File exclusive writers + shared readers', [['file', 'block'], ['file-shared-reader', 'block'], ['file', 'timed'], ['file-shared-reader', 'timed']], $p, (int) T::q(250, 1500), "$lockDir/shared.lock");

// one File object made before pcntl_fork(), used by all the children
$dir = T::$tmp . '/fork-inherited';
@mkdir($dir, 0755, true);
file_put_contents("$dir/counter", '0');
$fp = (int) T::q(6, 12);
$fk = (int) T::q(300, 2000);
$t0 = microtime(true);
$proc = new Proc(array_merge(T::php(), [T::worker(), 'counter-fork', (string) $fp, (string) $fk, "$dir/fork.lock", "$dir/counter"]));
$proc->wait(T::quick() ? 200 : 900) || T::fail('fork-inherited: did not finish');
T::add('processes', $fp);
$final = (int) file_get_contents("$dir/counter");
$okFork = $proc->exitCode === 0 && preg_match('/DONE (\d+) 0 /', $proc->out()) === 1 && $final === $fp * $fk;
T::check($okFork, "File object inherited by $fp pcntl_fork() children: counter $final, expected " . ($fp * $fk) . ' ' . trim($proc->out() . $proc->err()));
T::add('iterations', $final);
T::say(sprintf('  %-46s %2d procs x %5d  counter=%-6d expected=%-6d %s  %.1fs', 'File object shared by pcntl_fork() children', $fp, $fk, $final, $fp * $fk, $final === $fp * $fk ? 'exact' : 'LOST UPDATES', microtime(true) - $t0));
$proc->close();

if (T::redisAvailable()) {
    $redis = new RedisServer(T::$tmp . '/redis');
    $redis->start();
    try {
        $dsn = $redis->dsn();
        run_counter('Redis acquire(-1)', [['redis', 'block']], $p, $k, "$dsn|torture:block|30");
        run_counter('Redis acquire(timeout) + acquire(0)', [['redis', 'timed'], ['redis', 'try']], $p, (int) T::q(250, 1500), "$dsn|torture:timed|30");
        run_counter('Redis + plain SET NX PX clients mixed', [['redis', 'block'], ['setnx', 'block'], ['redis', 'timed']], $p, (int) T::q(250, 1500), "$dsn|torture:setnx|30");
    } finally {
        $redis->stop();
    }
} else {
    T::pending('Redis contention (acquire(-1), timed/try, mixed with SET NX clients)');
}

T::finish();

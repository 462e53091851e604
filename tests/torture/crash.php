<?php

declare(strict_types=1);

/*
 * 2. Crashes: holders are killed with SIGKILL at random moments (while
 * acquiring, holding or releasing) while others contend. Every holder appends
 * "enter TAG seq" / "leave TAG seq" to a journal opened with O_APPEND (TAG is
 * pid:starttime, unique even when pids are reused). The journal must show no
 * two holders at once: an "enter" may only follow a "leave", or the "enter" of
 * a holder that we killed and that was dead by then (each holder checks that
 * online, through /proc, and writes OVERLAP otherwise). Then: kill -9 of a
 * lone holder frees a File lock at once, a Redis lock within one TTL.
 */

namespace Torture;

require __DIR__ . '/lib/common.php';

T::init('crash', $argv);

/**
 * @param list<string> $modes acquire modes, cycled over the slots
 */
function storm(string $name, string $backend, string $lockArg, array $modes, int $p, int $kills, float $budget, int $holdUs, int $gapMs, float $stallLimit, bool $control = false): void
{
    $dir = T::$tmp . '/' . preg_replace('/[^a-z0-9]+/i', '-', $name);
    @mkdir($dir, 0755, true);
    $journal = "$dir/journal";
    $phaseFile = "$dir/phase";
    $stop = "$dir/stop";
    file_put_contents($journal, '');
    file_put_contents($phaseFile, str_repeat('O', $p));
    @unlink($stop);

    $spawn = function (int $slot) use ($backend, $lockArg, $modes, $journal, $phaseFile, $stop, $holdUs): Proc {
        $mode = $modes[$slot % count($modes)];
        return new Proc(array_merge(T::php(), [T::worker(), 'holder', $backend, $mode, $lockArg, $journal, $phaseFile, (string) $slot, $stop, (string) $holdUs]));
    };
    /** @var array<int, Proc> $slots */
    $slots = [];
    for ($i = 0; $i < $p; $i++) {
        $slots[$i] = $spawn($i);
    }
    if ($control) {
        // The negative control must see holders overlap, not kills of holders that had
        // not started yet (a PHP start takes a second on a loaded machine): let them
        // run until the journal has some holds first.
        $until = microtime(true) + $budget / 2;
        while (microtime(true) < $until && substr_count((string) @file_get_contents($journal), 'enter ') < 20) {
            usleep(50000);
        }
    }
    $killed = [];          // tag => phase at kill time
    $phases = ['A' => 0, 'H' => 0, 'R' => 0, 'O' => 0, '?' => 0];
    $start = microtime(true);
    $lastSize = 0;
    $lastGrowth = microtime(true);
    $n = 0;
    $stalled = false;
    $crashed = 0;
    while ($n < $kills && microtime(true) - $start < $budget) {
        usleep(mt_rand(0, $gapMs * 1000));
        $slot = pick_victim($phaseFile, $p);
        $victim = $slots[$slot];
        if (!$victim->running()) {
            // exited by itself: that is a failure unless we asked it to stop
            $crashed++;
            T::fail("$name: holder pid {$victim->pid} died on its own ({$victim->describeExit()}): " . trim($victim->out() . ' ' . $victim->err()));
            $victim->close();
            $slots[$slot] = $spawn($slot);
            continue;
        }
        $tag = Pids::tag($victim->pid);
        $phase = @file_get_contents($phaseFile, false, null, $slot, 1) ?: '?';
        $victim->kill(9);
        $victim->wait(60);
        $victim->close();
        if ($tag !== null) {
            $killed[$tag] = $phase;
        }
        $phases[$phase] = ($phases[$phase] ?? 0) + 1;
        $n++;
        $control || T::add('kills');
        $slots[$slot] = $spawn($slot);
        clearstatcache();
        $size = filesize($journal);
        if ($size !== $lastSize) {
            $lastSize = $size;
            $lastGrowth = microtime(true);
        } elseif (microtime(true) - $lastGrowth > $stallLimit) {
            T::fail("$name: no holder got the lock for {$stallLimit}s (lock stuck after a kill?)");
            $stalled = true;
            break;
        }
    }
    // let everyone finish its turn and leave
    touch($stop);
    foreach ($slots as $slot => $proc) {
        if (!$proc->wait(120)) {
            T::fail("$name: holder pid {$proc->pid} did not stop within 120 s after the stop file");
            $proc->kill(9);
            $proc->wait(30);
        } elseif ($proc->exitCode !== 0) {
            T::fail("$name: holder pid {$proc->pid} ended with {$proc->describeExit()}: " . trim($proc->err()));
        } elseif (trim($proc->err()) !== '') {
            T::fail("$name: holder pid {$proc->pid} wrote to stderr: " . trim($proc->err()));
        }
        $proc->close();
    }
    $secs = microtime(true) - $start;

    // offline check of the whole journal
    $holder = null;
    $holds = 0;
    $takeovers = 0;
    $violations = [];
    foreach (file($journal, FILE_IGNORE_NEW_LINES) as $lineNo => $line) {
        $f = explode(' ', $line);
        switch ($f[0]) {
            case 'enter':
                $holds++;
                if ($holder !== null) {
                    if (isset($killed[$holder])) {
                        $takeovers++;
                    } else {
                        $violations[] = 'line ' . ($lineNo + 1) . ": $f[1] entered while $holder (not killed) held the lock";
                    }
                }
                $holder = $f[1];
                break;
            case 'leave':
                if ($holder !== $f[1]) {
                    $violations[] = 'line ' . ($lineNo + 1) . ": $f[1] left but the holder was " . ($holder ?? 'nobody');
                }
                $holder = null;
                break;
            case 'OVERLAP':
                $violations[] = 'line ' . ($lineNo + 1) . ": $f[1] entered while $f[2] was still alive";
                break;
            case 'LOST':
                $violations[] = 'line ' . ($lineNo + 1) . ": $f[1] lost the lock at $f[2]";
                break;
            default:
                $violations[] = 'line ' . ($lineNo + 1) . ": garbled journal line '$line'";
        }
    }
    if ($control) {
        // negative control: holders without a lock must be caught overlapping
        T::check(count($violations) > 0, "$name: the journal check catches overlaps (" . count($violations) . ' found)');
        T::say(sprintf('  %-30s %2d holders  %5d kills  %6d holds  overlaps %d (as it must)  %.1fs', $name, $p, $n, $holds, count($violations), $secs));
        return;
    }
    T::add('iterations', $holds);
    foreach (array_slice($violations, 0, 10) as $v) {
        T::fail("$name: $v");
    }
    T::check($violations === [] && !$stalled && $crashed === 0, "$name: $holds holds, $n kills, no overlap");
    T::check($holds > $n / 4, "$name: the lock kept changing hands under the kills ($holds holds for $n kills)");
    T::say(sprintf('  %-30s %2d holders  %5d kills (acquiring %d, holding %d, releasing %d, between %d)  %6d holds  %d takeovers from killed holders  overlaps %d  %.1fs',
        $name, $p, $n, $phases['A'], $phases['H'], $phases['R'], $phases['O'] + $phases['?'], $holds, $takeovers, count($violations), $secs));
}

/**
 * A third of the kills go to any holder, a third to the one holding the lock,
 * a third to one caught releasing (polled for up to 30 ms): so that every
 * phase is hit, not only the long wait in acquire().
 */
function pick_victim(string $phaseFile, int $p): int
{
    $want = [null, 'H', 'R'][mt_rand(0, 2)];
    if ($want !== null) {
        $end = microtime(true) + 0.03;
        do {
            $phases = (string) @file_get_contents($phaseFile);
            $at = strpos($phases, $want);
            if ($at !== false && $at < $p) {
                return $at;
            }
        } while (microtime(true) < $end);
    }
    return mt_rand(0, $p - 1);
}

/** kill -9 of a lone holder, then the lock must be free (File: at once). */
function kill_and_probe_file(int $rounds): void
{
    $path = T::$tmp . '/lone.lock';
    $probe = new \CronLock\File($path);
    $fails = 0;
    for ($i = 0; $i < $rounds; $i++) {
        $holder = new Proc(array_merge(T::php(), [T::worker(), 'hold', 'file', $path]));
        if (!$holder->waitFor('HELD', 60)) {
            T::fail('lone File holder never reported HELD: ' . $holder->err());
            $holder->close();
            continue;
        }
        $busy = !$probe->acquire(0.0);
        $holder->kill(9);
        $holder->wait(60);   // reaped: the process is gone
        $holder->close();
        T::add('kills');
        $free = $probe->acquire(0.0);
        if ($free) {
            $probe->release();
        }
        if (!$busy || !$free) {
            $fails++;
            T::fail("lone File holder round $i: busy while held=" . var_export($busy, true) . ', free right after kill -9=' . var_export($free, true));
        }
    }
    T::check($fails === 0, "File: $rounds x kill -9 of a lone holder, free at once each time");
    T::say(sprintf('  %-30s %d rounds: held while alive, free immediately after kill -9 + reap: %s', 'File lone holder kill -9', $rounds, $fails === 0 ? 'yes' : "NO ($fails)"));
}

function kill_and_probe_redis(RedisServer $redis, int $rounds, float $ttl): void
{
    $key = 'torture:lone';
    $lockArg = $redis->dsn() . "|$key|$ttl";
    $probe = new \CronLock\Redis($redis->dsn(), $key, $ttl, ['connect_timeout' => 10.0, 'read_timeout' => 10.0]);
    $fails = 0;
    $worst = 0.0;
    for ($i = 0; $i < $rounds; $i++) {
        $holder = new Proc(array_merge(T::php(), [T::worker(), 'hold', 'redis', $lockArg]));
        if (!$holder->waitFor('HELD', 60)) {
            T::fail('lone Redis holder never reported HELD: ' . $holder->err());
            $holder->close();
            continue;
        }
        $holder->kill(9);
        $t0 = microtime(true);
        $holder->wait(60);
        $holder->close();
        T::add('kills');
        $early = $probe->acquire(0.0);
        if ($early) {
            $probe->release();
        }
        $got = $probe->acquire($ttl + 30.0);
        $dt = microtime(true) - $t0;
        $worst = max($worst, $dt);
        if ($got) {
            $probe->release();
        }
        // The dead holder's key may only go at its expiry: never before (unless
        // we were so slow that the TTL ran out anyway), and not much after.
        if (($early && microtime(true) - $t0 < $ttl * 0.5) || !$got || $dt > $ttl + 2.0) {
            $fails++;
            T::fail(sprintf('lone Redis holder round %d: taken before expiry=%s, acquired=%s after %.2fs (ttl %.1fs)', $i, var_export($early, true), var_export($got, true), $dt, $ttl));
        }
    }
    T::check($fails === 0, "Redis: $rounds x kill -9 of a lone holder, lock free within one TTL (+2 s slack)");
    T::say(sprintf('  %-30s %d rounds: free within one TTL (%.1fs) after kill -9: %s; slowest %.2fs', 'Redis lone holder kill -9', $rounds, $ttl, $fails === 0 ? 'yes' : "NO ($fails)", $worst));
}

$p = (int) T::q(8, 12);
T::say('crash:');
$lockDir = T::$tmp . '/locks';
@mkdir($lockDir, 0755, true);
// Holds of 20 ms: with four holders alive, two are inside at once within
// moments, also when a loaded machine starts them slowly (with 2 ms, five
// kills came and went without one overlap on a machine at load 15).
storm('control: no lock at all', 'none', '-', ['block'], 4, 10, 30.0, 20000, 40, 60.0, true);
storm('File under kill -9', 'file', "$lockDir/storm.lock", ['block', 'timed', 'try'], $p,
    (int) T::q(120, 2000), (float) T::q(120, 600), 2000, (int) T::q(40, 60), 60.0);
kill_and_probe_file((int) T::q(20, 200));

if (T::redisAvailable()) {
    $redis = new RedisServer(T::$tmp . '/redis');
    $redis->start();
    try {
        $ttl = 2.0;
        storm('Redis under kill -9', 'redis', $redis->dsn() . "|torture:storm|$ttl", ['block', 'timed', 'try'], (int) T::q(6, 8),
            (int) T::q(40, 300), (float) T::q(60, 300), 2000, (int) T::q(200, 200), 60.0);
        kill_and_probe_redis($redis, (int) T::q(3, 10), $ttl);
    } finally {
        $redis->stop();
    }
} else {
    T::pending('Redis kill -9 storm and lone-holder expiry');
}

T::finish();

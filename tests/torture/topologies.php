<?php

declare(strict_types=1);

/*
 * 10. Sentinel and Cluster under faults: workers contend in cron_guard() on
 * one key of a Sentinel-managed master (kill -9 of the master, then
 * SENTINEL FAILOVER) and of a three-master Cluster (kill -9 of the node serving
 * the key, restarted empty at once), all servers started by tests/redis-harness.
 * Each job appends to an O_APPEND journal "enter", then three times "ask"
 * (before Guard::renew()) and "ok"/"lost"/"fail" (renew() true, false, or
 * a ConnectionException), then "leave". The journal check: once another
 * holder has entered, a holder still inside its job never hears "ok" for a
 * renew it asked afterwards and does not leave before it heard "lost" or
 * "fail" (no two holders at once; every loss is reported to the holder),
 * and the lock keeps changing hands after each fault.
 */

namespace Torture;

require __DIR__ . '/lib/common.php';

T::init('topologies', $argv);
T::say('sentinel and cluster under faults:');

if (!T::redisAvailable()) {
    T::pending('Sentinel and Cluster journal checks');
    T::finish();
}

const WORKER = <<<'PHP'
    [, $dsn, $key, $journal, $stop, $slot] = $argv;
    $log = function (string $line) use ($journal): void {
        // One write(2) per line on an O_APPEND file: lines never interleave.
        file_put_contents($journal, $line . "\n", FILE_APPEND);
    };
    $tag = getmypid();
    for ($seq = 1; !file_exists($stop); $seq++) {
        // Half of the runs wait for a replica's acknowledgement (Sentinel).
        $options = ['connect_timeout' => 0.5, 'read_timeout' => 0.5];
        if (str_starts_with($dsn, 'redis-sentinel:') && ($seq + (int) $slot) % 2 === 0) {
            $options['replicas'] = 1;
        }
        try {
            $lock = new CronLock\Redis($dsn, $key, 2.0, $options);
            cron_guard(function (CronLock\Guard $guard) use ($log, $tag, $seq): void {
                $log("enter $tag $seq");
                for ($i = 0; $i < 3; $i++) {
                    usleep(random_int(5_000, 30_000));
                    $log("ask $tag $seq");
                    try {
                        $ok = $guard->renew();
                    } catch (CronLock\ConnectionException $e) {
                        $log("fail $tag $seq");
                        break;
                    }
                    $log(($ok ? 'ok' : 'lost') . " $tag $seq");
                    if (!$ok) {
                        break;
                    }
                }
                $log("leave $tag $seq");
            }, $lock, ['wait' => 0.3]);
        } catch (Throwable $e) {
            $log("error $tag $seq " . get_class($e));
            usleep(50_000);
        }
    }
    PHP;

/**
 * The journal check; returns [violations, figures].
 *
 * @param list<string> $lines
 * @return array{0: list<string>, 1: array<string, int>}
 */
function check_journal(array $lines): array
{
    $violations = [];
    $figures = ['holds' => 0, 'overlaps' => 0, 'reported' => 0, 'told' => 0, 'errors' => 0, 'holds after last fault' => 0];
    $inside = [];      // tag => ['seq', 'superseded' => line number or null, 'asked' => line of the pending ask]
    foreach ($lines as $n => $line) {
        $w = explode(' ', $line);
        $event = $w[0];
        $tag = $w[1] ?? '';
        switch ($event) {
            case 'fault':
                $figures['holds after last fault'] = 0;
                break;
            case 'enter':
                $figures['holds']++;
                $figures['holds after last fault']++;
                foreach ($inside as $other => &$hold) {
                    $figures['overlaps']++;
                    $hold['superseded'] ??= $n;
                }
                unset($hold);
                $inside[$tag] = ['superseded' => null, 'asked' => null];
                break;
            case 'ask':
                if (isset($inside[$tag])) {
                    $inside[$tag]['asked'] = $n;
                }
                break;
            case 'ok':
                $hold = $inside[$tag] ?? null;
                if ($hold !== null && $hold['superseded'] !== null && $hold['asked'] > $hold['superseded']) {
                    $violations[] = 'line ' . ($n + 1) . ": two holders at once: renew() true for $tag, asked after another holder entered on line " . ($hold['superseded'] + 1);
                }
                break;
            case 'lost':
            case 'fail':
                $figures['told']++;
                if (isset($inside[$tag]) && $inside[$tag]['superseded'] !== null) {
                    $figures['reported']++;
                    $inside[$tag]['superseded'] = null; // told: it stops now
                }
                break;
            case 'leave':
                $hold = $inside[$tag] ?? null;
                if ($hold !== null && $hold['superseded'] !== null) {
                    $violations[] = 'line ' . ($n + 1) . ": $tag left its job without being told that another holder entered on line " . ($hold['superseded'] + 1);
                }
                unset($inside[$tag]);
                break;
            case 'error':
                $figures['errors']++;
                unset($inside[$tag]); // the job did not run, or its end threw: no longer inside
                break;
            default:
                $violations[] = 'line ' . ($n + 1) . ": garbled journal line '$line'";
        }
    }
    return [$violations, $figures];
}

// The check must see what it looks for: a holder told "ok" after another
// holder entered, and one that never heard of it.
[$v] = check_journal(['enter 1 1', 'ask 1 1', 'ok 1 1', 'enter 2 1', 'ask 1 1', 'ok 1 1', 'leave 1 1', 'leave 2 1']);
T::check(str_contains($v[0] ?? '', 'two holders at once'), 'journal check catches a renew() true while another holds: ' . json_encode($v));
[$v] = check_journal(['enter 1 1', 'enter 2 1', 'leave 1 1', 'leave 2 1']);
T::check(count($v) === 1, 'journal check catches an unreported loss: ' . json_encode($v));
[$v] = check_journal(['enter 1 1', 'ask 1 1', 'enter 2 1', 'lost 1 1', 'leave 1 1', 'leave 2 1']);
T::check($v === [], 'journal check accepts a loss reported by renew() false');

/**
 * Runs $workers workers on $dsn while $faults(journal) injects faults,
 * then checks the journal.
 */
function contend(string $name, string $dsn, string $key, int $workers, callable $faults): void
{
    $dir = T::$tmp . '/' . trim((string) preg_replace('/[^a-z0-9]+/i', '-', $name), '-');
    @mkdir($dir, 0700, true);
    $journal = "$dir/journal";
    $stop = "$dir/stop";
    file_put_contents($journal, '');
    $t0 = microtime(true);
    $procs = [];
    for ($i = 0; $i < $workers; $i++) {
        // cron_guard()'s busy lines go to a file, not to a pipe nobody drains.
        $procs[] = new Proc(array_merge(T::php(['error_log' => "$dir/worker-$i.log"]), ['-r', WORKER, $dsn, $key, $journal, $stop, (string) $i]), null, null, false);
        T::add('processes');
    }
    try {
        $faults($journal);
    } finally {
        // Also when a fault helper threw: no worker may outlive the section.
        touch($stop);
        foreach ($procs as $p) {
            if (!$p->wait(30)) {
                $p->kill(9);
                $p->wait(10);
                T::fail("$name: a worker did not stop within 30 s");
            }
            $p->close();
        }
    }
    $lines = file($journal, FILE_IGNORE_NEW_LINES) ?: [];
    [$violations, $f] = check_journal($lines);
    foreach (array_slice($violations, 0, 10) as $violation) {
        T::fail("$name: $violation");
    }
    T::check($violations === [], "$name: no two holders at once, every loss reported (" . count($violations) . ' violations)');
    T::check($f['holds after last fault'] > 0, "$name: the lock changes hands after the last fault ({$f['holds after last fault']} holds)");
    T::add('iterations', $f['holds']);
    T::say(sprintf(
        '  %-34s %d workers %4d holds, %3d renew() false or failed, %2d overlaps (%2d told), %3d errors, %3d holds after the last fault  %.1fs',
        $name, $workers, $f['holds'], $f['told'], $f['overlaps'], $f['reported'], $f['errors'], $f['holds after last fault'], microtime(true) - $t0,
    ));
}

function fault(string $journal, string $what): void
{
    file_put_contents($journal, "fault $what\n", FILE_APPEND);
    T::add('faults');
}

$run = T::q(0.7, 5.0); // seconds of contention between faults
$workers = (int) T::q(4, 8);

// --- Sentinel: kill -9 of the master, then SENTINEL FAILOVER (in this
// order: after a failover a sentinel starts no other one for 2 x
// failover-timeout, and a kill right after one could wait that long)
$sentinel = new RedisTopology(T::$tmp . '/sentinel-servers', 'sentinel', '--replicas=2');
try {
    contend('Sentinel master kill -9 + failover', $sentinel->dsn, 'torture:journal', $workers, function (string $journal) use ($sentinel, $run): void {
        usleep((int) ($run * 1e6));
        $master = $sentinel->master();
        fault($journal, "kill $master");
        $sentinel->kill($master);
        T::add('kills');
        $t = microtime(true);
        $new = $sentinel->awaitMaster($master);
        T::info(sprintf('kill -9 of %s: %s promoted after %.1fs', $master, $new, microtime(true) - $t));
        usleep((int) ($run * 1e6));
        fault($journal, 'failover');
        $t = microtime(true);
        $new = $sentinel->failover();
        T::info(sprintf('failover to %s in %.1fs', $new, microtime(true) - $t));
        usleep((int) ($run * 1e6));
    });
} finally {
    $sentinel->stop();
}

// --- Cluster: kill -9 of the node serving the key, restarted at once, empty
$cluster = new RedisTopology(T::$tmp . '/cluster-servers', 'cluster');
try {
    $key = '{torture}:journal';
    contend('Cluster key owner kill -9', $cluster->dsn, $key, $workers, function (string $journal) use ($cluster, $key, $run): void {
        usleep((int) ($run * 1e6));
        $owner = $cluster->ownerOf($key);
        fault($journal, "kill $owner");
        $cluster->kill($owner);
        T::add('kills');
        // At once: the key and its holder's token are gone, the slot is
        // served again (the node keeps its id in nodes.conf).
        $cluster->restart($owner);
        $t = microtime(true);
        $cluster->awaitClusterOk();
        T::info(sprintf('%s restarted, cluster ok after %.1fs', $owner, microtime(true) - $t));
        usleep((int) ($run * 1e6));
    });
} finally {
    $cluster->stop();
}

T::finish();

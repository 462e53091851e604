<?php

declare(strict_types=1);

/*
 * 4. Redis faults, against a redis-server of our own: killed and restarted
 * while a lock is held, stalled (CLIENT PAUSE, DEBUG SLEEP) past read_timeout,
 * a TTL that runs out mid-job, auto-renew across server loss, fork children.
 * Timings are reported; the bounds asserted are generous (noisy machine).
 */

namespace Torture;

require __DIR__ . '/lib/common.php';

T::init('redis-faults', $argv);
T::say('redis faults:');

if (!T::redisAvailable()) {
    T::pending('Redis faults (server kill/restart, CLIENT PAUSE, DEBUG SLEEP, TTL expiry mid-job, auto-renew, fork)');
    T::finish();
}

$server = new RedisServer(T::$tmp . '/redis');
$server->start();
register_shutdown_function(fn () => $server->stop());
$dsn = $server->dsn();
$slack = 2.0; // seconds of scheduling noise we tolerate on top of a timeout
$startThreads = count(glob('/proc/self/task/*') ?: []); // before any lock: one renewal thread per process comes with the first

function lock(string $key, float $ttl, array $opts = []): \CronLock\Redis
{
    global $dsn;
    return new \CronLock\Redis($dsn, $key, $ttl, $opts + ['connect_timeout' => 1.0, 'read_timeout' => 1.0]);
}

/** Runs $f, returns [outcome string, seconds]. */
function timed(callable $f): array
{
    $t0 = microtime(true);
    $o = outcome($f);
    return [$o, microtime(true) - $t0];
}

function threads(): int
{
    return count(glob('/proc/self/task/*') ?: []);
}

function line(string $what, string $result): void
{
    T::say(sprintf('  %-62s %s', $what, $result));
}

$rounds = (int) T::q(1, 5);
for ($round = 1; $round <= $rounds; $round++) {
    $tag = $rounds > 1 ? " [round $round]" : '';

    // --- a. server killed while held, then restarted empty
    $l = lock("fault:kill:$round", 10.0);
    T::check($l->acquire(), "kill: acquire$tag");
    $server->kill();
    T::add('faults');
    [$o, $dt] = timed(fn () => $l->renew());
    T::check(str_starts_with($o, 'CronLock\\ConnectionException') || $o === 'ok: false', "kill: renew() with the server dead reports it ($o, {$dt}s)$tag");
    T::check($dt < 1.0 + $slack, "kill: renew() fails within connect_timeout (+{$slack}s): {$dt}s$tag");
    $server->start();
    [$o2, $dt2] = timed(fn () => $l->renew());
    T::check($o2 === 'ok: false', "kill: after a restart (data lost) renew() is false: $o2$tag");
    T::check($l->isHeld() === false, "kill: isHeld() false once the loss is known$tag");
    T::check($l->release() === false, "kill: release() false afterwards$tag");
    $round === 1 && line('server kill -9 while held: renew()', sprintf('%s in %.2fs; after restart renew() %s', strtok($o, ':'), $dt, $o2));

    // --- b. restarted and taken by someone else: never extended, never deleted
    $l = lock("fault:taken:$round", 10.0);
    $l->acquire();
    $server->kill();
    $server->start();
    T::add('faults');
    $r = $server->client();
    $r->cmd('SET', "fault:taken:$round", 'someone-else', 'PX', '20000');
    // The first call after the restart meets the dead connection and
    // reconnects by itself.
    $o = outcome(fn () => $l->renew());
    T::check($o === 'ok: false', "taken: renew() false when the key is someone else's, on the first call after the restart: $o$tag");
    T::check(outcome(fn () => $l->release()) === 'ok: false', "taken: release() false$tag");
    T::check($r->cmd('GET', "fault:taken:$round") === 'someone-else' && $r->cmd('PTTL', "fault:taken:$round") > 15000,
        "taken: the other client's key is untouched (value and TTL)$tag");
    $round === 1 && line('server restarted, key taken by another client', "renew false, release false, other's key untouched");

    // --- c. auto-renew across a server loss: the renewer must stop, nothing may crash
    $l = lock("fault:auto:$round", 1.5, ['auto_renew' => true]);
    T::check($l->acquire(), "auto: acquire with auto_renew$tag");
    T::check(threads() === $startThreads + 1, 'auto: the process\'s one renewal thread runs while held (' . threads() . " threads, $startThreads before any lock)$tag");
    usleep(2500000); // > TTL: only the renewer keeps it
    T::check($l->isHeld() && (int) $r->cmd('PTTL', "fault:auto:$round") > 0, "auto: still held after 2.5 s with ttl 1.5 s$tag");
    $server->kill();
    T::add('faults');
    $t0 = microtime(true);
    while ($l->isHeld() && microtime(true) - $t0 < 10) {
        usleep(20000);
    }
    $lostAfter = microtime(true) - $t0;
    T::check(!$l->isHeld(), sprintf('auto: isHeld() turns false once the TTL passed unrenewed (%.2fs after the kill; ttl 1.5)%s', $lostAfter, $tag));
    T::check($lostAfter < 1.5 + $slack, sprintf('auto: ... within one TTL (+%.0fs): %.2fs%s', $slack, $lostAfter, $tag));
    T::check(threads() === $startThreads + 1, 'auto: no thread per lock: only the idle renewal thread of the process (' . threads() . " threads)$tag");
    $server->start();
    $r = $server->client();
    $r->cmd('SET', "fault:auto:$round", 'new-owner', 'PX', '20000');
    usleep(1000000);
    T::check($r->cmd('GET', "fault:auto:$round") === 'new-owner' && $r->cmd('PTTL', "fault:auto:$round") > 15000, "auto: the new owner's key is not touched by the old renewer$tag");
    T::check(outcome(fn () => $l->release()) === 'ok: false', "auto: release() false, new owner's key kept$tag");
    T::check($r->cmd('GET', "fault:auto:$round") === 'new-owner', "auto: key still the new owner's after release()$tag");
    $round === 1 && line('auto_renew, server killed', sprintf('held lost %.2fs after kill (ttl 1.5s), renewal stopped, new owner untouched', $lostAfter));

    // --- d. stalls beyond read_timeout: a single call throws after its one
    // retry (read_timeout + connect_timeout), a waiter rides the stall out
    $l = lock("fault:stall:$round", 30.0, ['read_timeout' => 0.5, 'connect_timeout' => 0.5]);
    T::check($l->acquire(), "stall: acquire$tag");
    foreach ([['CLIENT', 'PAUSE', '3000'], ['DEBUG', 'SLEEP', '3']] as $cmd) {
        $name = implode(' ', $cmd);
        $r = $server->client(10.0);
        if ($cmd[0] === 'DEBUG') {
            $r->send(...$cmd);       // the server stops answering anyone
        } else {
            $r->cmd(...$cmd);
        }
        T::add('faults');
        usleep(100000);
        [$o, $dt] = timed(fn () => $l->renew());
        T::check(str_starts_with($o, 'CronLock\\ConnectionException'), "stall $name: renew() throws ConnectionException: $o$tag");
        T::check($dt < 1.0 + $slack, sprintf('stall %s: renew() gives up within read_timeout + connect_timeout 1 s (+%.0fs): %.2fs%s', $name, $slack, $dt, $tag));
        $fresh = lock("fault:stall2:$round", 30.0, ['read_timeout' => 0.5, 'connect_timeout' => 0.5]);
        [$o3, $dt3] = timed(fn () => $fresh->acquire(-1));
        T::check($o3 === 'ok: true', "stall $name: a waiter in acquire(-1) rides out the stall and gets the free lock: $o3$tag");
        T::check($dt3 < 3.0 + $slack, sprintf('stall %s: ... soon after the 3 s stall (+%.0fs): %.2fs%s', $name, $slack, $dt3, $tag));
        $fresh->release();
        $round === 1 && line("server stalled ($name, 3 s)", sprintf('renew() %.2fs -> ConnectionException; acquire(-1) got it after %.2fs (timeouts 0.5 s)', $dt, $dt3));
        // wait out the stall; the lock is usable again
        $end = microtime(true) + 15;
        while (microtime(true) < $end) {
            try {
                if ($l->renew()) {
                    break;
                }
            } catch (\CronLock\ConnectionException) {
            }
            usleep(100000);
        }
        T::check($l->isHeld(), "stall $name: renew() works again after the stall and the lock is still ours$tag");
        $r->close();
    }
    T::check($l->release() === true, "stall: release() true after the stalls$tag");

    // --- e. a waiter blocked in acquire(-1) while the server dies and comes
    // back empty: it gets the lock; one in acquire(2) with the server gone
    // throws the last failure at its deadline
    $holder = lock("fault:waiter:$round", 30.0);
    $holder->acquire();
    $w = new Proc(array_merge(T::php(), ['-r', '
        $l = new CronLock\Redis($argv[1], $argv[2], 30.0, ["connect_timeout" => 1.0, "read_timeout" => 1.0]);
        echo "WAITING\n";
        $t = microtime(true);
        try { var_dump($l->acquire(-1)); } catch (Throwable $e) { echo get_class($e), "\n"; }
        printf("after %.2f\n", microtime(true) - $t);', $dsn, "fault:waiter:$round"]));
    $w->waitFor('WAITING', 60);
    usleep(500000);
    $server->kill();
    T::add('faults');
    usleep(1500000);
    $server->start();
    $ok = $w->wait(30.0);
    T::check($ok && str_contains($w->out(), 'bool(true)'), 'waiter: acquire(-1) gets the lock once the server is back empty: ' . trim($w->out() . $w->err()) . $tag);
    $w->close();
    $round === 1 && line('server killed and restarted under a waiter in acquire(-1)', preg_match('/after ([\d.]+)/', $w->out(), $m) ? "acquired {$m[1]}s after its start" : 'no answer');
    $server->kill();
    $l = lock("fault:gone:$round", 30.0);
    [$o, $dt] = timed(fn () => $l->acquire(2.0));
    T::check(str_starts_with($o, 'CronLock\\ConnectionException') && str_contains($o, 'Connection refused'), "waiter: acquire(2) with the server gone throws its last failure: $o$tag");
    T::check($dt >= 1.9 && $dt < 2.0 + $slack, sprintf('waiter: ... at its deadline (2 s, +%.0fs): %.2fs%s', $slack, $dt, $tag));
    $server->start();

    // --- f. TTL runs out mid-job: Guard::renew() false; the next holder's key is safe
    $key = "fault:midjob:$round";
    $other = null;
    $result = cron_guard(function (\CronLock\Guard $g) use ($server, $key, &$other) {
        $fence = $g->lock()->fencingToken();
        usleep(1300000);           // ttl 0.5 s: gone by now
        $other = new \CronLock\Redis($server->dsn(), $key, 30.0);
        $took = $other->acquire();  // someone else's run takes it
        return [$g->renew(), $g->lock()->isHeld(), $took, $other->fencingToken() > $fence];
    }, lock($key, 0.5));
    T::check($result === [false, false, true, true], 'mid-job expiry: Guard::renew() false, isHeld() false, next run takes it with a higher fencing token: ' . json_encode($result) . $tag);
    T::check($other !== null && $other->isHeld() && $other->renew(), "mid-job expiry: cron_guard's release did not delete the next run's key$tag");
    $other?->release();
    $round === 1 && line('TTL 0.5 s runs out in a 1.3 s job', 'Guard::renew() false; next holder kept its key; fencing token increased');

    // --- g. auto-renew over a long job keeps others out; killed -9 -> free within one TTL
    $p = new Proc(array_merge(T::php(), ['-r', '
        $l = new CronLock\Redis($argv[1], $argv[2], 1.0, ["auto_renew" => true]);
        $l->acquire();
        echo "HELD\n";
        sleep(300);', $dsn, "fault:autokill:$round"]));
    $p->waitFor('HELD', 60);
    $probe = lock("fault:autokill:$round", 5.0);
    $kept = true;
    for ($i = 0; $i < 6; $i++) {
        usleep(500000);
        $kept = $kept && !$probe->acquire(0.0);
    }
    T::check($kept, "auto-renew: a 1 s TTL lock stays held for 3 s by its renewer$tag");
    $p->kill(9);
    $t0 = microtime(true);
    $p->wait(30);
    $p->close();
    T::add('kills');
    $got = $probe->acquire(10.0);
    $dt = microtime(true) - $t0;
    T::check($got && $dt < 1.0 + $slack, sprintf('auto-renew holder killed -9: free after %.2fs (ttl 1 s, +%.0fs slack)%s', $dt, $slack, $tag));
    $probe->release();
    $round === 1 && line('auto_renew holder (ttl 1 s) killed -9 after 3 s', sprintf('held throughout; free %.2fs after the kill', $dt));

    // --- h. fork: the child neither frees, renews nor keeps the parent's key
    $l = lock("fault:fork:$round", 10.0, ['auto_renew' => true]);
    $l->acquire();
    $token = $l->token();
    $pid = pcntl_fork();
    if ($pid === 0) {
        $ok = $l->isHeld() === false && $l->release() === false && $l->renew() === false && $l->token() === null;
        $l = null;
        exit($ok ? 0 : 1);
    }
    pcntl_waitpid($pid, $st);
    // the child inherited the shutdown function that stops this server; a
    // SIGTERMed redis-server exits within one cron tick (100 ms)
    usleep(500000);
    try {
        $alive = $server->client(2.0)->cmd('PING') === 'PONG';
    } catch (\Throwable $e) {
        $alive = false;
    }
    T::check($alive, "fork: the child's exit() left the harness's redis-server running$tag");
    $r = $server->client();
    T::check(pcntl_wexitstatus($st) === 0, "fork: in the child isHeld/release/renew/token say 'not ours'$tag");
    T::check($r->cmd('GET', "fault:fork:$round") === $token && $l->isHeld() && $l->renew(), "fork: the parent's key survives the child's exit and renews$tag");
    T::check($l->release() && $r->cmd('GET', "fault:fork:$round") === null, "fork: the parent releases it$tag");
    $round === 1 && line('pcntl_fork child of a holder (auto_renew)', 'child: not held, release/renew false; parent key intact');
    T::add('iterations');
}

$server->stop();
T::finish();

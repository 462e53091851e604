<?php

declare(strict_types=1);

/*
 * Signals while waiting: a job blocked in acquire() that receives SIGTERM
 * (timeout(1), systemd, a supervisor) or its own pcntl_alarm() watchdog must
 * get to run its PHP signal handler while the lock is still held elsewhere,
 * as it does when it waits in PHP's own flock(): handlers installed with
 * pcntl_signal(..., restart_syscalls: false) interrupt the wait.
 */

namespace Torture;

require __DIR__ . '/lib/common.php';

T::init('signals', $argv);
T::say('signals while waiting:');

$dir = T::$tmp;
$lockFile = "$dir/sig.lock";
$rounds = (int) T::q(1, 5);
$redis = null;
if (T::redisAvailable()) {
    $redis = new RedisServer("$dir/redis");
    $redis->start();
} else {
    T::pending('signals while waiting in a Redis acquire()');
}

$waits = [
    'PHP flock(LOCK_EX) (baseline)' => '$fp = fopen($argv[1], "c"); $r = flock($fp, LOCK_EX);',
    'File acquire(-1)' => '$l = new CronLock\File($argv[1]); $r = $l->acquire(-1);',
    'File acquire(60)' => '$l = new CronLock\File($argv[1]); $r = $l->acquire(60.0);',
];
if ($redis !== null) {
    $waits['Redis acquire(-1)'] = '$l = new CronLock\Redis($argv[2], "sig:key", 60.0); $r = $l->acquire(-1);';
}
$signals = ['SIGTERM from outside' => 'term', 'pcntl_alarm(1) watchdog' => 'alarm'];

foreach ($waits as $what => $code) {
    foreach ($signals as $sigName => $how) {
        $worst = 0.0;
        $okRounds = 0;
        for ($r = 0; $r < $rounds; $r++) {
            // the holder keeps the lock for the whole test
            $holder = str_starts_with($what, 'Redis')
                ? new \CronLock\Redis($redis->dsn(), 'sig:key', 60.0)
                : new \CronLock\File($lockFile);
            $holder->acquire();
            $script = 'pcntl_async_signals(true); $t0 = microtime(true);
                $h = function () use (&$t0) { printf("HANDLER %.3f\n", microtime(true) - $t0); exit(7); };
                pcntl_signal(SIGTERM, $h, false); pcntl_signal(SIGALRM, $h, false);
                echo "WAITING\n";' . ($how === 'alarm' ? ' pcntl_alarm(1);' : '') . $code . '
                printf("RETURNED %s %.3f\n", var_export($r, true), microtime(true) - $t0);';
            $p = new Proc(array_merge(T::php(), ['-r', $script, $lockFile, $redis?->dsn() ?? '']));
            $p->waitFor('WAITING', 60);
            usleep(300000);
            $sent = microtime(true);
            if ($how === 'term') {
                $p->kill(15);
            }
            $p->wait(5.0);
            $still = $p->running();
            $dt = microtime(true) - $sent - ($how === 'alarm' ? 0.7 : 0.0);
            $holder->release();
            $p->wait(30);
            $out = $p->out();
            $p->close();
            $handled = !$still && str_contains($out, 'HANDLER');
            $okRounds += $handled ? 1 : 0;
            $worst = max($worst, $still ? 5.0 : $dt);
            T::check($handled, sprintf('%s: %s runs the PHP handler while the lock is still held elsewhere (%s)',
                $what, $sigName, $still ? 'still waiting 5 s later; ran only once the lock was released: ' . trim($out) : trim($out)));
            T::add('iterations');
            T::add('faults');
        }
        T::say(sprintf('  %-32s %-24s handler ran while waiting: %d/%d%s', $what, $sigName, $okRounds, $rounds, $okRounds === $rounds ? sprintf(' (within %.1fs)', $worst) : ' (deferred until the lock was free)'));
    }
}
$redis?->stop();
T::finish();

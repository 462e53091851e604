<?php

declare(strict_types=1);

/*
 * 3. Fork and exec: children made by pcntl_fork(), exec(), proc_open(),
 * shell_exec('cmd &'), system(), popen() never keep or free the parent's lock.
 *
 * Each scenario runs in its own php process (`fork.php --scenario=NAME DIR`),
 * so that a crash or a hang is caught and named; it prints "CHECK 1 what" or
 * "CHECK 0 what" lines. The lock's state is always judged from outside too,
 * by util-linux flock(1) -n, which knows nothing of cronlock.
 */

namespace Torture;

require __DIR__ . '/lib/common.php';

// ---------------------------------------------------------------- helpers

function chk(bool $ok, string $what): void
{
    echo 'CHECK ', $ok ? '1' : '0', ' ', $what, "\n";
}

/** Second opinion from another open file description in this process. */
function free_for_others(string $path): bool
{
    $other = new \CronLock\File($path);
    $free = $other->acquire(0.0);
    if ($free) {
        $other->release();
    }
    return $free;
}

/** Does any descriptor of process $pid point at $path? */
function proc_has_fd_on(int $pid, string $path): bool
{
    foreach (glob("/proc/$pid/fd/*") ?: [] as $fd) {
        if (@readlink($fd) === $path) {
            return true;
        }
    }
    return false;
}

function wait_child(int $pid): int
{
    pcntl_waitpid($pid, $status);
    return pcntl_wifexited($status) ? pcntl_wexitstatus($status) : 128 + pcntl_wtermsig($status);
}

/**
 * Parent holds; a pcntl_fork() child does $inChild and ends its own way;
 * the parent must still hold, exclusively, afterwards.
 */
function child_ends_parent_keeps(string $dir, string $how, callable $inChild): void
{
    $path = "$dir/fork-" . preg_replace('/[^a-z0-9]+/i', '-', $how) . '.lock';
    $lock = new \CronLock\File($path);
    chk($lock->acquire(0.0), "$how: parent acquires");
    $pid = pcntl_fork();
    if ($pid === 0) {
        $inChild($lock, $path);
        exit(0);
    }
    wait_child($pid);
    chk($lock->isHeld(), "$how: parent still believes it holds after the child ended");
    chk(!flock1_free($path), "$how: flock(1) still finds the lock taken after the child ended");
    chk(!free_for_others($path), "$how: another File still cannot take it");
    chk($lock->release(), "$how: parent release() returns true");
    chk(flock1_free($path), "$how: free after the parent released");
}

// -------------------------------------------------------------- scenarios

$scenarios = [];

$scenarios['child-release'] = function (string $dir): void {
    child_ends_parent_keeps($dir, 'child calls release()', function (\CronLock\File $lock, string $path): void {
        $mine = getmypid();
        // the child reports over stdout too; its exit code is not looked at
        chk($lock->isHeld() === false, 'child: isHeld() is false in a fork child');
        chk($lock->release() === false, 'child: release() returns false (not ours)');
        chk($lock->renew() === false, 'child: renew() returns false');
        chk(!flock1_free($path), 'child: the lock is still taken after the child called release()');
        chk($lock->holderPid() === posix_getppid(), 'child: holderPid() names the parent (' . var_export($lock->holderPid(), true) . ' vs ' . posix_getppid() . ')');
        chk($lock->acquire(0.0) === false, 'child: acquire(0) on the inherited object is false while the parent holds');
        chk((new \CronLock\File($path))->acquire(0.0) === false, 'child: a new File cannot take it either');
        chk($lock->acquire(0.3) === false, 'child: timed acquire(0.3) is false too');
        chk(getmypid() === $mine, 'child: pid stable');
    });
};

$ends = [
    'exit(0)' => fn () => exit(0),
    'exit(3) mid-function' => function (): void {
        (function () {
            exit(3);
        })();
    },
    'uncaught exception' => function (): void {
        throw new \RuntimeException('boom in child');
    },
    'fatal error' => function (): void {
        ini_set('display_errors', '0');
        \undefined_function_in_child();
    },
    'memory_limit fatal' => function (): void {
        ini_set('display_errors', '0');
        ini_set('memory_limit', '8M');
        $a = [];
        while (true) {
            $a[] = str_repeat('x', 1 << 20);
        }
    },
    'kill -9 of itself' => fn () => posix_kill(getmypid(), SIGKILL),
    'SIGTERM of itself' => fn () => posix_kill(getmypid(), SIGTERM),
    'pcntl_exec(/bin/true)' => fn () => pcntl_exec('/bin/true'),
    'unset() of the object' => function (\CronLock\File &$lock): void {
        $lock = null;
        gc_collect_cycles();
    },
];
foreach ($ends as $how => $end) {
    $scenarios["child-$how"] = function (string $dir) use ($how, $end): void {
        child_ends_parent_keeps($dir, "child ends by $how", function (\CronLock\File $lock) use ($end): void {
            $end($lock);
        });
    };
}

$scenarios['cron_guard-fork'] = function (string $dir): void {
    ini_set('cronlock.lock_dir', $dir);
    ini_set('error_log', "$dir/error.log");
    ini_set('cronlock.log', 'error_log'); // a skip goes to syslog by default
    $path = "$dir/guarded.lock";
    $r = cron_guard(function (\CronLock\Guard $g) use ($path) {
        foreach (['exit' => fn () => exit(0), 'return' => fn () => null, 'throw' => function () {
            throw new \LogicException('x');
        }, 'nested cron_guard' => fn () => cron_guard(fn () => 'inner ran', 'guarded')] as $how => $f) {
            $pid = pcntl_fork();
            if ($pid === 0) {
                try {
                    $r = $f();
                    if ($how === 'nested cron_guard') {
                        chk($r === null, 'child: a nested cron_guard() on the parent\'s lock is skipped as busy (' . var_export($r, true) . ')');
                    }
                } catch (\Throwable) {
                }
                exit(0);
            }
            wait_child($pid);
            chk(!flock1_free($path), "cron_guard: lock still taken after a fork child ended by $how inside the job");
            chk($g->lock()->isHeld(), "cron_guard: Guard::lock()->isHeld() after child $how");
            chk($g->renew(), "cron_guard: Guard::renew() true after child $how");
        }
        return 'job done';
    }, 'guarded', ['on_busy' => null]);
    chk($r === 'job done', 'cron_guard returned the job result');
    $log = (string) @file_get_contents("$dir/error.log");
    chk(str_contains($log, 'guarded.lock') && str_contains($log, 'pid ' . getmypid()),
        "the child's busy line names the lock and the parent's pid: " . trim($log));
    chk(flock1_free($path), 'cron_guard: free after the job returned');
};

$scenarios['child-acquires-own'] = function (string $dir): void {
    $path = "$dir/own.lock";
    $lock = new \CronLock\File($path);
    $lock->acquire(0.0);
    $pipe = "$dir/own.sync";
    @unlink($pipe);
    $pid = pcntl_fork();
    if ($pid === 0) {
        // waits for the parent to let go, then holds it itself
        $t0 = microtime(true);
        $got = $lock->acquire(-1.0);
        // whole or not at all: the parent polls for the file
        file_put_contents("$pipe.part", $got ? 'got' : 'no');
        rename("$pipe.part", $pipe);
        usleep(300000);
        $stillFree = !free_for_others($path);
        exit($got && $stillFree ? 0 : 1);
    }
    usleep(200000);
    chk(!file_exists($pipe), 'child blocked in acquire(-1) while the parent holds');
    $lock->release();
    $end = microtime(true) + 30;
    while (!file_exists($pipe) && microtime(true) < $end) {
        usleep(1000);
    }
    chk(@file_get_contents($pipe) === 'got', 'child got the lock (through the inherited object) once the parent released');
    chk($lock->acquire(0.0) === false, 'parent cannot take it back while the child holds');
    chk(wait_child($pid) === 0, 'child held it exclusively');
    chk($lock->acquire(0.0) === true, 'parent takes it again once the child exited (its hold ended with it)');
    $lock->release();
};

$scenarios['fork-before-acquire'] = function (string $dir): void {
    $path = "$dir/before.lock";
    $lock = new \CronLock\File($path);
    foreach (['exits normally' => 0, 'is killed -9' => 9] as $how => $sig) {
        $pid = pcntl_fork();
        if ($pid === 0) {
            if (!$lock->acquire(5.0)) {
                exit(1);
            }
            if ($sig) {
                posix_kill(getmypid(), $sig);
            }
            sleep(1);
            exit(0); // without release(): the destructor / exit releases
        }
        $end = microtime(true) + 30;
        while (flock1_free($path) && microtime(true) < $end) {
            usleep(2000);
            if (pcntl_waitpid($pid, $st, WNOHANG) === $pid) {
                $pid = 0;
                break;
            }
        }
        chk($lock->isHeld() === false, "parent object is not held while the child $how");
        if ($pid) {
            wait_child($pid);
        }
        chk($lock->acquire(0.0), "parent acquires at once after the child that held it $how");
        $lock->release();
    }
};

$scenarios['exec-children'] = function (string $dir): void {
    $path = realpath($dir) . '/exec.lock';
    $lock = new \CronLock\File($path);
    $lock->acquire(0.0);
    $q = escapeshellarg($path);
    // the child lists its own descriptors: none may be the lock file
    $probe = "for f in /proc/self/fd/*; do readlink \"\$f\"; done | grep -cxF $q || true";
    $out = [];
    exec($probe, $out);
    chk(trim(implode('', $out)) === '0', 'exec(): the child has no descriptor on the lock file (' . implode(' ', $out) . ')');
    chk(trim((string) shell_exec($probe)) === '0', 'shell_exec(): no descriptor on the lock file');
    if (PHP_VERSION_ID < 80500) { // PHP 8.5 deprecates the operator at compile time: only in eval
        chk(trim((string) eval('return `$probe`;')) === '0', 'backticks: no descriptor on the lock file');
    }
    ob_start();
    system($probe);
    chk(trim((string) ob_get_clean()) === '0', 'system(): no descriptor on the lock file');
    $h = popen($probe, 'r');
    chk(trim((string) stream_get_contents($h)) === '0', 'popen(): no descriptor on the lock file');
    pclose($h);
    $p = proc_open(['sh', '-c', $probe], [1 => ['pipe', 'w']], $pipes);
    chk(trim((string) stream_get_contents($pipes[1])) === '0', 'proc_open(array): no descriptor on the lock file');
    fclose($pipes[1]);
    proc_close($p);
    $p = proc_open($probe, [1 => ['pipe', 'w']], $pipes);
    chk(trim((string) stream_get_contents($pipes[1])) === '0', 'proc_open(string): no descriptor on the lock file');
    fclose($pipes[1]);
    proc_close($p);
    // release while children are still running, take back: the children changed nothing
    chk($lock->release() && flock1_free($path), 'release works with exec children around');
};

/**
 * The process that holds the lock (this scenario) starts long-lived children
 * every way PHP can, then prints HELD; the driver kills it with -9 and checks
 * that the lock is free at once while all the children live on.
 */
$scenarios['holder-with-children'] = function (string $dir): void {
    $path = realpath($dir) . '/orphans.lock';
    ini_set('cronlock.lock_dir', realpath($dir));
    $kids = [];
    cron_guard(function () use ($path, &$kids) {
        $lock = new \CronLock\File($path);
        $lock->acquire(0.0);
        // pcntl_fork() child that lives on
        $pid = pcntl_fork();
        if ($pid === 0) {
            sleep(300);
            exit(0);
        }
        $kids[] = $pid;
        // a child of the child (fork of a fork)
        $pid = pcntl_fork();
        if ($pid === 0) {
            $g = pcntl_fork();
            if ($g === 0) {
                sleep(300);
                exit(0);
            }
            echo "KID $g\n";
            sleep(300);
            exit(0);
        }
        $kids[] = $pid;
        // exec('cmd &'), shell_exec('cmd &'), proc_open()
        $kids[] = (int) exec('sleep 300 >/dev/null 2>&1 & echo $!');
        $kids[] = (int) shell_exec('sleep 301 >/dev/null 2>&1 & echo $!');
        $p = proc_open(['sleep', '302'], [], $pipes);
        $kids[] = proc_get_status($p)['pid'];
        $GLOBALS['keep'] = [$p, $lock];
        echo 'KIDS ', implode(' ', $kids), "\n";
        echo 'HELD ', getmypid(), "\n";
        while (true) {
            sleep(1);
        }
    }, 'guarded-with-children');
};

// ---------------------------------------------------------------- driver

if (preg_match('/^--scenario=(.+)$/', $argv[1] ?? '', $m)) {
    T::init('fork', [$argv[0]]);
    $scenarios[$m[1]]($argv[2]);
    exit(0);
}

T::init('fork', $argv);
T::say('fork and exec:');
$rounds = (int) T::q(1, 5);
for ($round = 0; $round < $rounds; $round++) {
    foreach ($scenarios as $name => $_) {
        if ($name === 'holder-with-children') {
            continue;
        }
        $dir = T::$tmp . "/$round-" . preg_replace('/[^a-z0-9]+/i', '-', $name);
        @mkdir($dir, 0755, true);
        $proc = new Proc(array_merge(T::php(), [__FILE__, "--scenario=$name", $dir]));
        if (!$proc->wait(120)) {
            T::fail("scenario $name hung; killed");
            $proc->kill(9);
            $proc->wait(10);
        }
        $out = $proc->out();
        $good = preg_match_all('/^CHECK 1 (.*)$/m', $out, $okLines);
        preg_match_all('/^CHECK 0 (.*)$/m', $out, $bad);
        foreach ($okLines[1] as $l) {
            T::check(true, "$name: $l");
        }
        foreach ($bad[1] as $l) {
            T::check(false, "$name: $l");
        }
        $err = trim($proc->err());
        // fatal errors and exceptions in children are on purpose in some scenarios
        $expectedNoise = str_contains($name, 'fatal') || str_contains($name, 'exception') || str_contains($name, 'memory');
        if ($proc->exitCode !== 0 || $good === 0) {
            T::fail("scenario $name: {$proc->describeExit()}, " . ($good) . " checks passed; stderr: $err");
        } elseif ($err !== '' && !$expectedNoise) {
            T::fail("scenario $name wrote to stderr: $err");
        }
        T::add('iterations');
        if ($round === 0) {
            T::say(sprintf('  %-40s %2d checks  %s', $name, $good + count($bad[1]), count($bad[1]) === 0 && $proc->exitCode === 0 ? 'ok' : 'FAILED'));
        }
        $proc->close();
    }
}

// the holder dies of kill -9 while its children (every kind) live on
$orphanRounds = (int) T::q(3, 20);
$okRounds = 0;
for ($i = 0; $i < $orphanRounds; $i++) {
    $dir = T::$tmp . "/orphans-$i";
    @mkdir($dir, 0755, true);
    $path = realpath($dir) . '/orphans.lock';
    $guardPath = realpath($dir) . '/guarded-with-children.lock';
    $proc = new Proc(array_merge(T::php(), [__FILE__, '--scenario=holder-with-children', $dir]));
    if (!$proc->waitFor('HELD', 60) || !preg_match('/^KIDS (.*)$/m', $proc->out(), $km)) {
        T::fail('holder-with-children never reported HELD: ' . $proc->err());
        $proc->kill(9);
        $proc->close();
        continue;
    }
    preg_match('/^KID (\d+)$/m', $proc->out(), $gm) || $proc->waitFor('KID ', 10);
    preg_match('/^KID (\d+)$/m', $proc->out(), $gm);
    $kids = array_map('intval', explode(' ', trim($km[1])));
    if (isset($gm[1])) {
        $kids[] = (int) $gm[1];
    }
    $heldBefore = !flock1_free($path) && !flock1_free($guardPath);
    $proc->kill(9);
    $proc->wait(60);
    $proc->close();
    T::add('kills');
    $alive = array_filter($kids, fn ($k) => $k > 0 && Pids::stat($k) !== null && Pids::stat($k)['state'] !== 'Z');
    $free = flock1_free($path) && flock1_free($guardPath);
    $cronFree = (new \CronLock\File($path))->acquire(0.0);
    $leaks = array_filter($kids, fn ($k) => proc_has_fd_on($k, $path) || proc_has_fd_on($k, $guardPath));
    $ok = $heldBefore && $free && $cronFree && count($alive) === count($kids) && $leaks === [];
    $okRounds += $ok ? 1 : 0;
    T::check($ok, sprintf('kill -9 of a holder with %d live children (pcntl_fork, fork of fork, exec &, shell_exec &, proc_open): held before=%s, free at once=%s (cronlock: %s), children alive %d/%d, children with a descriptor on the lock: %s',
        count($kids), var_export($heldBefore, true), var_export($free, true), var_export($cronFree, true), count($alive), count($kids), $leaks ? implode(',', $leaks) : 'none'));
    foreach ($kids as $k) {
        if ($k > 0) {
            posix_kill($k, SIGKILL);
        }
    }
    T::add('processes', count($kids));
}
T::say(sprintf('  %-40s %d/%d rounds: lock free at once while %s children live on', 'holder kill -9 with live children', $okRounds, $orphanRounds, '6'));

// cronlock's fork handler must never touch descriptors that are not live locks
$dir = T::$tmp . '/fd-registry';
@mkdir($dir, 0755, true);
@posix_mkfifo("$dir/fifo", 0600);
$registryCases = [
    'after a refused non-regular file (/dev/null)' => ['/dev/null'],
    'after a refused FIFO' => ["$dir/fifo"],
    'in a fork child that closed its inherited lock' => ['fork-child'],
];
foreach ($registryCases as $what => [$bad]) {
    $code = $bad === 'fork-child' ? <<<'PHP'
        $lock = new CronLock\File($argv[1] . '/reg.lock');
        $pid = pcntl_fork();
        if ($pid === 0) {
            $lock = null;                        // the child closes its detached copy
            $fp = fopen($argv[1] . '/data', 'w'); // and reuses the descriptor number
            $g = pcntl_fork();
            if ($g === 0) { exit(@fwrite($fp, "grandchild\n") ? 0 : 1); }
            pcntl_waitpid($g, $st);
            exit(pcntl_wexitstatus($st));
        }
        pcntl_waitpid($pid, $st);
        echo file_get_contents($argv[1] . '/data') === "grandchild\n" ? "INTACT\n" : "BROKEN\n";
        PHP : <<<'PHP'
        try { new CronLock\File($argv[2]); } catch (CronLock\LockException $e) {}
        $fp = fopen($argv[1] . '/data', 'w');   // reuses the descriptor number
        $pid = pcntl_fork();
        if ($pid === 0) { exit(@fwrite($fp, "child\n") ? 0 : 1); }
        pcntl_waitpid($pid, $st);
        echo file_get_contents($argv[1] . '/data') === "child\n" ? "INTACT\n" : "BROKEN\n";
        PHP;
    @unlink("$dir/data");
    $proc = new Proc(array_merge(T::php(), ['-r', $code, $dir, $bad]));
    $proc->wait(60);
    $intact = str_contains($proc->out(), 'INTACT');
    T::check($intact, "a pcntl_fork() child's unrelated file descriptor works $what (got: " . trim($proc->out()) . ')');
    T::say(sprintf('  %-40s %s', 'child fd intact ' . $what, $intact ? 'ok' : 'BROKEN: the fork handler replaced an unrelated descriptor with /dev/null'));
    $proc->close();
}

T::finish();

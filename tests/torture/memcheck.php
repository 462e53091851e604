<?php

declare(strict_types=1);

/*
 * 6a. Memory safety under valgrind (memcheck), with USE_ZEND_ALLOC=0 so every
 * PHP allocation is visible and ZEND_DONT_UNLOAD_MODULES=1 so the frames of
 * libcronlock.so keep their names in leak reports.
 *
 * Fails on: any memory error (invalid read/write/free, uninitialised value,
 * bad syscall argument) anywhere; any leak (definite or possible) with a frame
 * in libcronlock.so that is not a one-time allocation of module startup.
 * One-time startup leaks (a fixed number of bytes per process, from MINIT)
 * are counted and reported separately.
 *
 * quick: a few of the torture scripts; soak: adds the whole PHPUnit suite.
 */

namespace Torture;

require __DIR__ . '/lib/common.php';

T::init('memcheck', $argv);
T::say('memcheck (valgrind):');

if (trim((string) shell_exec('command -v valgrind')) === '') {
    T::skip('valgrind', 'valgrind is not installed (apt-get install valgrind)');
    T::finish();
}

$dir = T::$tmp;
$runs = [];
$sb = "$dir/sandbox";
@mkdir($sb, 0755, true);

/** A small workload script written for valgrind: every API path, few iterations. */
$workload = "$dir/workload.php";
file_put_contents($workload, <<<'PHP'
<?php
$sb = $argv[1];
$dsn = $argv[2] ?? '';
ini_set('cronlock.lock_dir', $sb);
for ($i = 0; $i < (int) ($argv[3] ?? 50); $i++) {
    $l = new CronLock\File("$sb/w.lock", ['mode' => 0600]);
    $l->acquire(0.01); $l->holderPid(); $l->renew(); $l->isHeld(); $l->path();
    $o = new CronLock\File("$sb/w.lock");
    $o->acquire(0); $o->holderPid();
    try { $o->acquire(0.002); } catch (CronLock\LockException) {} // held by $l in this thread
    $l->release(); $l->release();
    cron_guard(fn (CronLock\Guard $g) => [$g->remaining(), $g->expired(), $g->renew(), $g->lock()], "wl$i", ['max_runtime' => 10.0]);
    try { cron_guard(function () { throw new RuntimeException('x'); }, 'wl-throw'); } catch (RuntimeException) {}
    foreach ([fn () => new CronLock\File(''), fn () => new CronLock\File("a\0b"), fn () => new CronLock\File($sb),
              fn () => new CronLock\File('/dev/null'), fn () => new CronLock\File("$sb/x", ['bogus' => 1]),
              fn () => new CronLock\File("$sb/x", ["\xff" => 1]), fn () => cron_guard('strlen', '../x'),
              fn () => (new CronLock\File("$sb/x"))->acquire(NAN)] as $f) {
        try { $f(); } catch (Throwable) {}
    }
    if ($dsn !== '' && class_exists('CronLock\Redis')) {
        $r = new CronLock\Redis($dsn, "vg:$i", 5.0, ['auto_renew' => $i % 2 === 0]);
        $r->acquire(); $r->token(); $r->fencingToken(); $r->renew(); $r->renew(2.0); $r->key();
        $q = new CronLock\Redis($dsn, "vg:$i", 5.0);
        $q->acquire(0); // busy at once: held through $r (D3)
        try { $q->acquire(0.06); } catch (CronLock\LockException) {} // a wait on itself is refused
        $r->release();
        cron_guard(fn (CronLock\Guard $g) => $g->renew(), new CronLock\Redis($dsn, 'vg:guard', 5.0));
        try { (new CronLock\Redis('redis://:secret@127.0.0.1:1', 'k', 1.0))->acquire(); } catch (Throwable) {}
        try { new CronLock\Redis('nope', 'k', 1.0); } catch (Throwable) {}
    }
    if ($i % 10 === 0 && function_exists('pcntl_fork')) {
        $l->acquire();
        $pid = pcntl_fork();
        if ($pid === 0) { $l->release(); $l = null; exit(0); }
        pcntl_waitpid($pid, $st);
        $l->release();
    }
}
echo "WORKLOAD DONE\n";
PHP);

/*
 * Fibers: guards suspended and resumed in any order, a Fiber never resumed,
 * and fatal errors outside and inside a Fiber's guard with a shutdown
 * function resuming the suspended Fiber (as event loops do). Each prints
 * FIBERS DONE from its last step, so a run that ended early is seen.
 */
$fibers = "$dir/fibers.php";
file_put_contents($fibers, <<<'PHP'
<?php
$sb = $argv[1];
ini_set('cronlock.lock_dir', $sb);
final class FiberUserLock implements CronLock\Lock {
    private bool $held = false;
    public function acquire(float $timeout = 0.0): bool { return $this->held = true; }
    public function renew(?float $ttl = null): bool { return $this->held; }
    public function release(): bool { $was = $this->held; $this->held = false; return $was; }
    public function isHeld(): bool { return $this->held; }
}
switch ($argv[2]) {
    case 'order':
        for ($i = 0; $i < 20; $i++) {
            $a = new Fiber(function () { cron_guard(fn () => Fiber::suspend(), 'fa'); });
            $a->start();
            cron_guard(function () use ($a, &$b) {
                $b = new Fiber(function () { cron_guard(fn () => Fiber::suspend(), new FiberUserLock()); });
                $b->start();
                $a->resume();
            }, 'fb');
            $b->resume();
        }
        $never = new Fiber(function () { cron_guard(fn () => Fiber::suspend(), new FiberUserLock()); });
        $never->start();
        $never2 = new Fiber(function () { cron_guard(fn () => Fiber::suspend(), 'fnever'); });
        $never2->start();
        echo "FIBERS DONE\n";
        break;
    case 'fatal-outer':
        register_shutdown_function(function () use (&$fiber) { $fiber->resume(); echo "FIBERS DONE\n"; });
        cron_guard(function () use (&$fiber) {
            $fiber = new Fiber(function () {
                cron_guard(fn () => Fiber::suspend(), new FiberUserLock());
                cron_guard(fn () => 'after', 'fafter');
            });
            $fiber->start();
            trigger_error('outer fatal', E_USER_ERROR);
        }, 'fouter');
        break;
    case 'fatal-inner':
        register_shutdown_function(function () { echo "FIBERS DONE\n"; });
        cron_guard(function () {
            $fiber = new Fiber(function () {
                cron_guard(function () { Fiber::suspend(); trigger_error('inner fatal', E_USER_ERROR); }, 'finner');
            });
            $fiber->start();
            $fiber->resume();
        }, new FiberUserLock());
        break;
}
PHP);
@mkdir("$sb/fibers");

$server = null;
$dsn = '';
if (T::redisAvailable()) {
    $server = new RedisServer("$dir/redis");
    $server->start();
    $dsn = $server->dsn();
} else {
    T::pending('Redis paths under valgrind');
}

$quickRuns = [
    'workload x5' => [$workload, $sb, $dsn, '5'],
    'workload x40' => [$workload, $sb, $dsn, '40'],
    'fuzz chunk (300 calls)' => [T::$root . '/tests/torture/fuzz.php', '--chunk=4242:300', "$sb/fuzz", $dsn, (string) RedisServer::freePort()],
    'fork scenario child-release' => [T::$root . '/tests/torture/fork.php', '--scenario=child-release', "$sb/fork1"],
    'fork scenario cron_guard-fork' => [T::$root . '/tests/torture/fork.php', '--scenario=cron_guard-fork', "$sb/fork2"],
    'fibers: guards out of order, never resumed' => [$fibers, "$sb/fibers", 'order'],
    'fibers: fatal outside the Fiber' => [$fibers, "$sb/fibers", 'fatal-outer'],
    'fibers: fatal inside the Fiber' => [$fibers, "$sb/fibers", 'fatal-inner'],
];
/** Runs that end in a fatal error on purpose: exit status 255, and they must still reach their end. */
$fatalRuns = ['fibers: fatal outside the Fiber', 'fibers: fatal inside the Fiber'];
@mkdir("$sb/fork1");
@mkdir("$sb/fork2");
@mkdir("$sb/fuzz");
$soakRuns = [
    'fuzz chunk (3000 calls)' => [T::$root . '/tests/torture/fuzz.php', '--chunk=777:3000', "$sb/fuzz", $dsn, (string) RedisServer::freePort()],
    'workload x300' => [$workload, $sb, $dsn, '300'],
    // PHPUnit's child processes load the extension the way scripts/test does: PHP_INI_SCAN_DIR
    // (memory_limit is not enforced with USE_ZEND_ALLOC=0: those data sets cannot pass under valgrind)
    'phpunit php-tests/' => ['@phpunit', '/usr/bin/phpunit', '-c', T::$root . '/php-tests/phpunit.xml.dist', '--filter', '/^(?!.*memory_limit)/'],
];
$plan = T::quick() ? $quickRuns : $quickRuns + $soakRuns;

$startupLeakBytes = [];
$only = getenv('TORTURE_ONLY') ?: null;   // a regex, to re-run some runs by name
foreach ($plan as $name => $args) {
    if ($only !== null && !preg_match($only, $name)) {
        continue;
    }
    $xml = "$dir/vg-" . preg_replace('/[^a-z0-9]+/i', '-', $name) . '-%p.xml';
    $cmd = array_merge(
        ['valgrind', '--tool=memcheck', '--xml=yes', "--xml-file=$xml", '--leak-check=full',
         '--show-leak-kinds=definite,possible', '--errors-for-leak-kinds=definite,possible',
         '--child-silent-after-fork=no', '--trace-children=no', '--num-callers=40'],
        // PCRE's JIT code has no symbols and trips memcheck: interpret instead
        $args[0] === '@phpunit' ? [PHP_BINARY, '-d', 'pcre.jit=0'] : array_merge(T::php(), ['-d', 'pcre.jit=0']),
        array_slice($args, $args[0] === '@phpunit' ? 1 : 0)
    );
    $env = ['USE_ZEND_ALLOC' => '0', 'ZEND_DONT_UNLOAD_MODULES' => '1', 'TORTURE_TMP' => $dir, 'CRONLOCK_EXT' => T::$ext, 'PATH' => getenv('PATH')];
    if ($args[0] === '@phpunit') {
        @mkdir("$dir/ini");
        file_put_contents("$dir/ini/cronlock.ini", 'extension=' . T::$ext . "\npcre.jit=0\n");
        $env['PHP_INI_SCAN_DIR'] = ":$dir/ini";
        $env['CRONLOCK_TEST_TMP'] = "$dir/phpunit-tmp";
        @mkdir("$dir/phpunit-tmp");
    }
    $t0 = microtime(true);
    $p = new Proc($cmd, null, $env);
    if (!$p->wait(T::quick() ? 300 : 2400)) {
        $p->kill(9);
        $p->wait(10);
        T::fail("valgrind $name did not finish in time");
    }
    $secs = microtime(true) - $t0;
    $files = glob(str_replace('%p', '*', $xml)) ?: [];
    $errors = ['memory' => [], 'leak-runtime' => [], 'leak-startup' => []];
    $other = 0;
    $parsed = [];
    $execd = 0;
    foreach ($files as $f) {
        $text = (string) file_get_contents($f);
        if (!str_contains($text, '</valgrindoutput>')) {
            // a fork child that exec'd an untraced program (flock(1), sh): its
            // log stops at the exec; whatever it holds up to there still counts
            $execd++;
            $text .= "\n</valgrindoutput>\n";
        }
        $x = @simplexml_load_string($text);
        if ($x === false) {
            T::fail("valgrind $name: unreadable log $f");
            continue;
        }
        $parsed[(int) $x->pid] = [$x, (int) $x->ppid];
    }
    $pids = array_keys($parsed);
    $forkChildLeaks = 0;
    $abandonedByFatal = 0;
    foreach ($parsed as $pid => [$x, $ppid]) {
        $isForkChild = in_array($ppid, $pids, true);
        foreach ($x->error as $e) {
            $kind = (string) $e->kind;
            $objs = [];
            $fns = [];
            foreach ($e->stack[0]->frame ?? [] as $fr) {
                $objs[] = (string) $fr->obj;
                $fns[] = (string) $fr->fn;
            }
            $ours = (bool) array_filter($objs, fn ($o) => str_ends_with($o, 'libcronlock.so'));
            $top = implode(' < ', array_slice(array_values(array_filter($fns)), 0, 6));
            $what = (string) ($e->what ?? $e->xwhat->text ?? '');
            if (str_starts_with($kind, 'Leak_')) {
                if (!$ours) {
                    $other++;
                    continue;
                }
                // A fatal error longjmps out of every frame between the error
                // and the engine's bailout point, Rust glue included: what
                // those frames had allocated is lost, once per fatal error.
                if (in_array($name, $fatalRuns, true)) {
                    $abandonedByFatal += (int) ($e->xwhat->leakedbytes ?? 0);
                    continue;
                }
                $startup = (bool) array_filter($fns, fn ($fn) => in_array($fn, ['php_module_startup', 'zend_startup_module_ex', 'php_load_extension'], true));
                $bytes = (int) ($e->xwhat->leakedbytes ?? 0);
                // a fork child forgets (never closes) the Redis connections it
                // inherited, on purpose: closing would disturb the parent's;
                // so is what the parent's renewal thread allocated (the thread
                // does not exist in the child, only its memory does)
                $onAThread = in_array('start_thread', $fns, true);
                if ($isForkChild && ($onAThread || array_filter($fns, fn ($fn) => str_starts_with($fn, 'redis::') || str_contains($fn, 'lock::redis')))) {
                    $forkChildLeaks += $bytes;
                    continue;
                }
                if ($startup) {
                    $errors['leak-startup'][] = $bytes;
                } else {
                    $errors['leak-runtime'][] = "$kind $bytes bytes: $top";
                }
            } else {
                $errors['memory'][] = "$kind" . ($ours ? ' [in libcronlock.so]' : '') . ": $what at $top";
            }
        }
    }
    $mem = array_unique($errors['memory']);
    $leaks = array_unique($errors['leak-runtime']);
    $startupBytes = array_sum($errors['leak-startup']);
    $startupLeakBytes[$name] = $startupBytes;
    $done = $p->exitCode === (in_array($name, $fatalRuns, true) ? 255 : 0)
        && (!str_contains($name, 'workload') || str_contains($p->out(), 'WORKLOAD DONE'))
        && (!str_contains($name, 'fibers') || str_contains($p->out(), 'FIBERS DONE'));
    T::add('iterations');
    T::check($done, "valgrind $name ran to the end ({$p->describeExit()})" . ($done ? '' : ': ' . substr(trim($p->err() . $p->out()), -400)));
    T::check($mem === [], "valgrind $name: no memory errors" . ($mem ? ': ' . count($errors['memory']) . ' errors, e.g. ' . implode(' | ', array_slice($mem, 0, 3)) : ''));
    T::check($leaks === [], "valgrind $name: no runtime leak in libcronlock.so frames" . ($leaks ? ': ' . implode(' | ', array_slice($leaks, 0, 3)) : ''));
    T::say(sprintf('  %-30s %3d process(es)  memory errors %d  cronlock leaks %d  startup leaks %d B/process  fork-child forgotten Redis connections %d B  (leaks outside cronlock %d)%s  %.0fs',
        $name, count($files), count($errors['memory']), count($errors['leak-runtime']), count($files) ? $startupBytes / count($files) : 0, $forkChildLeaks, $other,
        in_array($name, $fatalRuns, true) ? sprintf('  abandoned by the fatal error %d B', $abandonedByFatal) : '', $secs));
    $p->close();
}
$server?->stop();
$per = array_unique(array_values(array_filter(array_map(null, $startupLeakBytes))));
if (array_sum($startupLeakBytes) > 0) {
    T::note('one-time startup (MINIT) allocations in libcronlock.so frames are never freed: ' . implode(', ', array_map(fn ($k, $v) => "$k $v bytes", array_keys($startupLeakBytes), $startupLeakBytes)));
}
T::finish();

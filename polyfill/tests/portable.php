<?php

// A self-contained test runner for cronlock/polyfill on any PHP from 7.1 on
// (no PHPUnit, no proc_open; pcntl only for the signal test, skipped without
// it): scripts/test runs it on PHP 7.4 and 8.0 compiled to WebAssembly, and
// on the host's PHP. The PHPUnit suite in
// php-tests/ covers the rest (processes, signals, fork, kill -9).
//
//   php portable.php [--held PATH] [--redis DSN] [--predis AUTOLOADER] [--count | --only N]
//
// --count prints how many tests there are; --only N runs test N (from 0)
// alone, so each runs in a fresh process (php-wasm's engine can be left
// broken by one test's exception for the next, see scripts/test).
// --held PATH: a lock file another process (the caller) holds: it must be
// busy here. --redis DSN (with --predis, predis' Autoloader.php): also test
// CronLock\Redis against that server, and that --redis-held KEY is busy.

error_reporting(E_ALL);
ini_set('display_errors', 'stderr');
$opts = getopt('', ['held:', 'redis:', 'predis:', 'redis-held:', 'count', 'only:']);
if (isset($opts['predis'])) {
    require_once $opts['predis'];
    Predis\Autoloader::register();
}
require __DIR__ . '/../bootstrap.php';
putenv('CRONLOCK_LOG=error_log'); // the busy lines checked below are read from the error log (default: syslog)

$passed = $failed = $skipped = 0;
$tmp = rtrim(sys_get_temp_dir(), '/') . '/cronlock-portable-' . getmypid() . '-' . bin2hex(random_bytes(4));
mkdir($tmp, 0700);

function check($cond, $what)
{
    if (!$cond) {
        throw new RuntimeException("expected: $what");
    }
}

/** @return Throwable the exception $fn threw, which must be a $class */
function throws($class, callable $fn, $needle = '')
{
    try {
        $fn();
    } catch (Throwable $e) {
        check($e instanceof $class, "$class, got " . get_class($e) . ': ' . $e->getMessage());
        check($needle === '' || strpos($e->getMessage(), $needle) !== false, "'$needle' in '{$e->getMessage()}'");
        return $e;
    }
    throw new RuntimeException("expected $class, nothing thrown");
}

$tests = [];
$notes = [];

$tests['the package defines the API, and \ValueError on PHP 7'] = function () {
    foreach (['CronLock\Lock', 'CronLock\File', 'CronLock\Redis', 'CronLock\Guard', 'CronLock\LockException', 'CronLock\ConnectionException', 'ValueError'] as $name) {
        check(class_exists($name) || interface_exists($name), "$name defined");
    }
    check(function_exists('cron_guard'), 'cron_guard() defined');
    check(is_subclass_of('CronLock\ConnectionException', 'CronLock\LockException'), 'ConnectionException extends LockException');
    check(is_subclass_of('CronLock\LockException', 'RuntimeException'), 'LockException is a RuntimeException');
    check(is_subclass_of('ValueError', 'Error'), 'ValueError is an Error');
};

$tests['File: exclusion, idempotent release, check-and-extend, D3'] = function () use ($tmp) {
    $a = new CronLock\File("$tmp/a.lock");
    $b = new CronLock\File("$tmp/a.lock");
    check($a->acquire(0) === true, 'a acquires');
    check($a->acquire(0) === true, 'a acquires again (D1)');
    check($b->acquire(0) === false, 'b is refused');
    throws('CronLock\LockException', function () use ($b) { $b->acquire(0.2); }, 'would deadlock');
    check($a->isHeld() && !$b->isHeld(), 'isHeld');
    check($a->renew() === true, 'renew while held');
    check($a->release() === true && $a->release() === false, 'release once');
    check($b->acquire(0.2) === true, 'b acquires after release');
    check($b->release(), 'b releases');
};

$tests['File: created with the mode, holder record in place, 128 bytes'] = function () use ($tmp) {
    $old = umask(022);
    $l = new CronLock\File("$tmp/mode.lock", ['mode' => 0640]);
    umask($old);
    clearstatcache();
    check((fileperms("$tmp/mode.lock") & 0777) === 0640, 'mode 0640, got ' . decoct(fileperms("$tmp/mode.lock") & 0777));
    check(filesize("$tmp/mode.lock") === 0, 'nothing written before the lock is held');
    check($l->acquire(), 'acquire');
    $rec = file_get_contents("$tmp/mode.lock");
    check(strlen($rec) === 128 && strpos($rec, 'cronlock pid=' . getmypid() . ' host=') === 0 && substr($rec, -1) === "\n", "record: $rec");
    check(preg_match('/ since=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ +\n$/', $rec) === 1, 'since= UTC time');
    $l->release();
};

$tests['File: never writes into a foreign file, never truncates, never unlinks'] = function () use ($tmp) {
    file_put_contents("$tmp/script.php", "<?php echo 'hi';\n");
    $l = new CronLock\File("$tmp/script.php");
    check($l->acquire() && $l->release(), 'locks it');
    unset($l);
    check(file_get_contents("$tmp/script.php") === "<?php echo 'hi';\n", 'content untouched');
};

$tests['File: refuses symlinks, directories; names the path'] = function () use ($tmp) {
    file_put_contents("$tmp/target", 'x');
    if (@symlink("$tmp/target", "$tmp/link.lock")) {
        throws('CronLock\LockException', function () use ($tmp) { new CronLock\File("$tmp/link.lock"); }, 'symbolic link');
        check(file_get_contents("$tmp/target") === 'x', 'target untouched');
    }
    throws('CronLock\LockException', function () use ($tmp) { new CronLock\File($tmp); }, 'directory');
    throws('CronLock\LockException', function () use ($tmp) { new CronLock\File("$tmp/no/such/x.lock"); }, "$tmp/no/such/x.lock");
};

$tests['File: bad arguments are ValueError / TypeError naming the argument'] = function () use ($tmp) {
    throws('ValueError', function () { new CronLock\File(''); }, '$path');
    throws('ValueError', function () { new CronLock\File("a\0b"); }, '$path');
    throws('ValueError', function () use ($tmp) { new CronLock\File("$tmp/x.lock", ['mode' => 010000]); }, "\$options['mode']");
    throws('ValueError', function () use ($tmp) { new CronLock\File("$tmp/x.lock", ['nope' => 1]); }, 'nope');
    throws('TypeError', function () use ($tmp) { new CronLock\File("$tmp/x.lock", ['shared' => 1]); }, "\$options['shared']");
    $l = new CronLock\File("$tmp/x.lock");
    throws('ValueError', function () use ($l) { $l->acquire(NAN); }, '$timeout');
};

$tests['File: a relative path is resolved once; a replaced file loses the hold (D1, D11)'] = function () use ($tmp) {
    $cwd = getcwd();
    chdir($tmp);
    $l = new CronLock\File('rel.lock');
    chdir($cwd);
    check($l->path() === "$tmp/rel.lock", 'absolute path(): ' . $l->path());
    check($l->acquire(), 'acquire');
    unlink("$tmp/rel.lock");
    check($l->renew() === false && !$l->isHeld(), 'unlinked: renew() false, not held');
    check($l->acquire() === true, 'acquire takes the new file');
    check(file_exists("$tmp/rel.lock"), 'recreated');
    $l->release();
};

$tests['File: shared holders coexist'] = function () use ($tmp) {
    $r1 = new CronLock\File("$tmp/sh.lock", ['shared' => true]);
    $r2 = new CronLock\File("$tmp/sh.lock", ['shared' => true]);
    $w = new CronLock\File("$tmp/sh.lock");
    check($r1->acquire() && $r2->acquire(), 'two readers');
    check($w->acquire(0) === false, 'writer refused');
    check(filesize("$tmp/sh.lock") === 0, 'readers record nothing');
};

$tests['cron_guard: runs, returns, releases; busy; exceptions; nested (D2); options'] = function () use ($tmp) {
    putenv("CRONLOCK_LOCK_DIR=$tmp");
    $seen = null;
    $r = cron_guard(function (CronLock\Guard $g) use (&$seen) {
        $seen = [$g->lock()->isHeld(), $g->renew(), $g->expired(), $g->remaining() > 0];
        return 'result';
    }, 'job', ['max_runtime' => 30]);
    check($r === 'result' && $seen === [true, true, false, true], 'job ran under the lock');
    $probe = new CronLock\File("$tmp/job.lock");
    check($probe->acquire(0), 'released after the job');

    $log = "$tmp/error.log";
    ini_set('error_log', $log);
    $ran = false;
    check(cron_guard(function () use (&$ran) { $ran = true; }, 'job') === null && !$ran, 'busy: skipped');
    $lines = file($log, FILE_IGNORE_NEW_LINES);
    check(count($lines) === 1 && strpos($lines[0], "cron_guard: lock job ($tmp/job.lock) is held by this process (pid " . getmypid() . ') through another lock object; skipping this run') !== false, 'busy line: ' . implode("\n", $lines));
    $probe->release();

    try {
        cron_guard(function () { throw new DomainException('boom', 3); }, 'job');
        check(false, 'exception propagates');
    } catch (DomainException $e) {
        check($e->getMessage() === 'boom' && $e->getCode() === 3, 'unchanged');
    }
    check($probe->acquire(0) && $probe->release(), 'released after the exception');

    $outer = new CronLock\File("$tmp/nested.lock");
    cron_guard(function () use ($outer) {
        cron_guard(function () use ($outer) {
            check($outer->isHeld(), 'inner runs re-entrantly');
        }, $outer);
        check($outer->isHeld(), 'the inner guard released nothing (D2)');
    }, $outer);
    check(!$outer->isHeld(), 'the outer guard released');

    throws('ValueError', function () { cron_guard(function () {}, 'bad/name'); }, '$lock');
    throws('TypeError', function () { cron_guard(function () {}, new stdClass()); }, '$lock'); // 5 would be the lock name '5' (weak mode)
    throws('TypeError', function () { cron_guard(function () {}, 'job', ['wait' => '1']); }, "\$options['wait']");
    throws('ValueError', function () { cron_guard(function () {}, 'job', ['on_busy' => 256]); }, "\$options['on_busy']");
    throws('ValueError', function () { cron_guard(function () {}, 'job', ['max_runtime' => 0]); }, "\$options['max_runtime']");
    putenv('CRONLOCK_LOCK_DIR');
    ini_restore('error_log');
};

$tests['CronLock\Database says it needs the extension'] = function () {
    throws('CronLock\LockException', function () { new CronLock\Database('mysql:host=127.0.0.1', 'job'); }, 'needs the cronlock extension');
};

$tests['locks cannot be serialized or cloned (D5)'] = function () use ($tmp) {
    $l = new CronLock\File("$tmp/ser.lock");
    throws('CronLock\LockException', function () use ($l) { serialize($l); }, 'cannot be serialized');
    throws('Error', function () use ($l) { $x = clone $l; });
    throws('Error', function () use ($l, $tmp) { $l->__construct("$tmp/other.lock"); }, 'twice');
};

if (isset($opts['held'])) {
    $tests['File: a lock another process holds is busy here'] = function () use ($opts) {
        $l = new CronLock\File($opts['held']);
        check($l->acquire(0) === false, 'acquire(0) refused');
        $t0 = microtime(true);
        check($l->acquire(0.3) === false, 'acquire(0.3) refused');
        check(microtime(true) - $t0 >= 0.29, 'waited the timeout');
    };
}

if (isset($opts['held']) && function_exists('pcntl_signal') && function_exists('pcntl_alarm')) {
    $tests['a signal cuts a wait short; cron_guard() logs it as interrupted, not busy (D7, D9)'] = function () use ($opts, $tmp) {
        $fired = 0;
        pcntl_signal(SIGALRM, function () use (&$fired) { $fired++; });
        foreach ([true, false] as $async) {
            pcntl_async_signals($async);
            $l = new CronLock\File($opts['held']);
            pcntl_alarm(1);
            $t0 = microtime(true);
            check($l->acquire(30.0) === false, 'acquire(30) returns false');
            $took = microtime(true) - $t0;
            check($fired === ($async ? 1 : 2) && $took < 10.0, sprintf('the handler ran during the wait (async %s, %.2f s)', var_export($async, true), $took));
        }
        $log = "$tmp/signal.log";
        ini_set('error_log', $log);
        pcntl_alarm(1);
        check(cron_guard(function () { return 'ran'; }, new CronLock\File($opts['held']), ['wait' => 30, 'on_busy' => 3]) === null, 'skipped, on_busy not applied');
        $lines = file($log, FILE_IGNORE_NEW_LINES);
        check(count($lines) === 1 && strpos($lines[0], 'cron_guard: waiting for lock ' . $opts['held'] . ' was interrupted by a signal; waited ') !== false, 'line: ' . implode("\n", $lines));
        ini_restore('error_log');
        pcntl_signal(SIGALRM, SIG_DFL);
        pcntl_async_signals(false);
    };
} elseif (isset($opts['held']) && (!isset($opts['only']) || $opts['only'] === '0')) {
    $skipped++;
    $notes[] = "skip the signal test: no pcntl in this PHP\n";
}

if (isset($opts['redis'])) {
    $tests['Redis: token, fencing, exclusion, renew, release'] = function () use ($opts) {
        $key = 'portable-' . bin2hex(random_bytes(4));
        $a = new CronLock\Redis($opts['redis'], $key, 5.0);
        $b = new CronLock\Redis($opts['redis'], $key, 5.0);
        check($a->acquire(0), 'a acquires');
        check(preg_match('/^[0-9a-f]{32}:' . getmypid() . '@/', $a->token()) === 1, 'token format: ' . $a->token());
        $fence = $a->fencingToken();
        check(is_int($fence) && $fence >= 1, 'fencing token');
        check($a->acquire(0) === true, 'acquire on held (D1)');
        check($b->acquire(0) === false, 'b refused (D3)');
        check($a->renew(10.0) === true, 'renew');
        check($a->release() === true && $a->release() === false, 'release once');
        check($b->acquire(0) === true && $b->fencingToken() === $fence + 1, 'b acquires with the next fence');
        check($b->release(), 'b releases');
        throws('ValueError', function () use ($opts) { new CronLock\Redis($opts['redis'], '', 5.0); }, '$key');
        throws('ValueError', function () use ($opts) { new CronLock\Redis($opts['redis'], 'k', 0.0); }, '$ttl');
        throws('ValueError', function () { new CronLock\Redis('redis://:sekrit@', 'k'); }, '$dsn');
    };
    if (isset($opts['redis-held'])) {
        $tests['Redis: a key another process holds is busy here'] = function () use ($opts) {
            $l = new CronLock\Redis($opts['redis'], $opts['redis-held'], 5.0);
            check($l->acquire(0.2) === false, 'refused');
        };
    }
}

// Last: on PHP 8.0 for WebAssembly, a later wait after this test's
// exception crashes php-wasm itself ("table index is out of bounds").
if (isset($opts['redis'])) {
    $tests['Redis: an unreachable server is a ConnectionException without the password'] = function () {
        $l = new CronLock\Redis('redis://:sekrit@127.0.0.1:1', 'k', 5.0, ['connect_timeout' => 0.5]);
        $e = throws('CronLock\ConnectionException', function () use ($l) { $l->acquire(0); }, '127.0.0.1:1');
        check(strpos($e->getMessage(), 'sekrit') === false, 'no password in the message');
    };
}

if (isset($opts['count'])) {
    echo count($tests), "\n";
    exit(0);
}
echo implode('', $notes);
if (isset($opts['only'])) {
    $tests = array_slice($tests, (int) $opts['only'], 1, true);
}
foreach ($tests as $name => $test) {
    try {
        $test();
        $passed++;
        echo "ok   $name\n";
    } catch (Throwable $e) {
        $failed++;
        echo "FAIL $name: ", get_class($e), ': ', $e->getMessage(), ' (', basename($e->getFile()), ':', $e->getLine(), ")\n";
    }
}
foreach (glob("$tmp/*") as $f) {
    @unlink($f);
}
@rmdir($tmp);
echo 'PHP ', PHP_VERSION, ': ';
echo "$passed passed, $failed failed, $skipped skipped\n";
exit($failed === 0 ? 0 : 1);

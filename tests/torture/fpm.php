<?php

declare(strict_types=1);

/*
 * 7. php-fpm: a persistent worker (pm = static, max_children = 1) takes a
 * lock and then dies of a fatal error, memory_limit, max_execution_time, an
 * uncaught exception, exit(), or simply returns with the lock in a global or
 * a reference cycle; the next request, served by the same worker (same pid),
 * must get the lock, and so must an outside process at once.
 * Our own php-fpm master (config in a temp dir, unix socket), spoken to with
 * cgi-fcgi (libfcgi-bin); stopped by pid.
 */

namespace Torture;

require __DIR__ . '/lib/common.php';

T::init('fpm', $argv);
T::say('php-fpm:');

// the php-fpm of this very PHP (version and ZTS-ness): the extension under
// test was built for it (scripts/compat runs this on other PHPs too)
$fpmBin = null;
$minor = PHP_MAJOR_VERSION . '.' . PHP_MINOR_VERSION;
foreach (["php-fpm$minor", "/usr/sbin/php-fpm$minor", dirname(PHP_BINARY, 2) . '/sbin/php-fpm', 'php-fpm'] as $c) {
    $w = trim((string) shell_exec('command -v ' . escapeshellarg($c) . ' 2>/dev/null'));
    $info = $w === '' ? '' : (string) shell_exec(escapeshellarg($w) . ' -n -i 2>/dev/null');
    if ($w !== '' && preg_match('/^PHP Version => ' . preg_quote(PHP_VERSION, '/') . '$/m', $info)
        && str_contains($info, 'Thread Safety => ' . (PHP_ZTS ? 'enabled' : 'disabled'))) {
        $fpmBin = $w;
        break;
    }
}
$cgi = trim((string) shell_exec('command -v cgi-fcgi 2>/dev/null'));
if ($fpmBin === null || $cgi === '') {
    T::skip('php-fpm section', ($fpmBin === null ? "no php-fpm of PHP " . PHP_VERSION . " (apt-get install php$minor-fpm)" : '') . ($cgi === '' ? ' cgi-fcgi not installed (apt-get install libfcgi-bin)' : ''));
    T::finish();
}

$dir = T::$tmp;
$www = "$dir/www";
@mkdir($www, 0755, true);
@mkdir("$dir/locks", 0755, true);
$sock = "$dir/fpm.sock";
$ext = T::$ext;

/**
 * Starts our own php-fpm master; $how: 'admin_value' loads cronlock with
 * php_admin_value[extension] in the pool (as a shared host would), 'ini'
 * with extension= in the master's php.ini, 'opcache' with -d extension= on
 * the host's php.ini (which loads opcache) and opcache.enable=1. Returns [Proc, stop closure].
 */
function start_fpm(string $fpmBin, string $dir, string $sock, string $ext, string $how): array
{
    @unlink($sock);
    @unlink("$dir/fpm.log");
    $extLine = $how === 'admin_value' ? "php_admin_value[extension] = $ext" : '';
    file_put_contents("$dir/fpm.conf", <<<INI
[global]
pid = $dir/fpm.pid
error_log = $dir/fpm.log
daemonize = no
log_level = notice

[torture]
listen = $sock
listen.mode = 0600
pm = static
pm.max_children = 1
pm.max_requests = 0
request_terminate_timeout = 120
catch_workers_output = yes
clear_env = no
$extLine
php_admin_value[error_log] = $dir/php-error.log
php_admin_flag[log_errors] = on
php_admin_flag[display_errors] = on
php_admin_value[output_buffering] = 0
INI);
    // PHP before 8.1.25 / 8.2.12 crashes every extension (its own xml too)
    // loaded by php_admin_value[extension] in a master without opcache
    // (php-src GH-12232; Ubuntu 22.04 ships 8.1.2): load opcache there, as
    // such hosts must
    $engineBug = PHP_VERSION_ID < 80125 || (PHP_VERSION_ID >= 80200 && PHP_VERSION_ID < 80212);
    file_put_contents("$dir/php.ini", $how === 'ini' ? "extension=$ext\n" : ($engineBug ? "zend_extension=opcache\n" : ''));
    // 'opcache' runs on the host's own php.ini and conf.d, as a production
    // master does: with PHP's defaults (-n) the heap is laid out so that
    // the use-after-free this checks for went unnoticed
    $ini = $how === 'opcache' ? ['-d', 'opcache.enable=1', '-d', "extension=$ext"] : ['-n', '-c', "$dir/php.ini"];
    $env = getenv();
    unset($env['PHP_INI_SCAN_DIR']); // scripts/test's, which loads cronlock too
    $fpm = new Proc([$fpmBin, '-R', '-F', ...$ini, '-y', "$dir/fpm.conf"], null, $how === 'opcache' ? $env : null, false);
    $stop = function () use ($fpm): void {
        if ($fpm->running()) {
            $fpm->kill(15);
            if (!$fpm->wait(15)) {
                $fpm->kill(9);
                $fpm->wait(10);
            }
        }
        $fpm->close();
    };
    register_shutdown_function($stop);
    $end = microtime(true) + 30;
    while (!file_exists($sock) && microtime(true) < $end && $fpm->running()) {
        usleep(50000);
    }
    usleep(300000);
    return [$fpm, $stop];
}

file_put_contents("$www/app.php", <<<'PHP'
<?php
// One request of the torture suite. ?do=WHAT&lock=PATH
$path = $_GET['lock'] ?? '';
$do = $_GET['do'] ?? 'probe';
ini_set('cronlock.lock_dir', dirname(__DIR__) . '/locks');
echo 'PID ', getmypid(), "\n";
if ($do === 'probe') {
    $l = str_starts_with($path, 'redis:') ? new CronLock\Redis(substr($path, 6), 'fpm:key', 30.0) : new CronLock\File($path);
    echo 'OPCACHE ', function_exists('opcache_get_status') && opcache_get_status(false) ? 'on' : 'off', "\n";
    $free = $l->acquire(0.0);
    echo $free ? 'FREE' : 'BUSY', "\n";
    $l->release();
    return;
}
$take = function () use ($path) {
    $l = str_starts_with($path, 'redis:') ? new CronLock\Redis(substr($path, 6), 'fpm:key', 30.0) : new CronLock\File($path);
    if (!$l->acquire(0.0)) {
        echo "NOT ACQUIRED\n";
        exit(1);
    }
    echo "HELD\n";
    flush();
    return $l;
};
switch ($do) {
    case 'fatal':
        $l = $take();
        undefined_function_for_the_torture();
        break;
    case 'memory':
        $l = $take();
        ini_set('memory_limit', '16M');
        $a = [];
        while (true) {
            $a[] = str_repeat('x', 1 << 20);
        }
    case 'timeout':
        $l = $take();
        set_time_limit(1);
        for ($i = 0; ; $i++) {
            $x = md5((string) $i);
        }
    case 'exception':
        $l = $take();
        throw new RuntimeException('uncaught in fpm');
    case 'exit':
        $l = $take();
        exit(3);
    case 'global':
        $GLOBALS['kept'] = $take();
        return;
    case 'static':
        (function () use ($take) {
            static $keep;
            $keep = $take();
        })();
        undefined_function_for_the_torture();
        break;
    case 'cycle':
        $o = new stdClass();
        $o->self = $o;
        $o->lock = $take();
        unset($o);
        undefined_function_for_the_torture();
        break;
    case 'guard-fatal':
        cron_guard(function () {
            echo "HELD\n";
            flush();
            undefined_function_for_the_torture();
        }, $path);
        break;
    case 'guard-timeout':
        cron_guard(function () {
            echo "HELD\n";
            flush();
            set_time_limit(1);
            for ($i = 0; ; $i++) {
                $x = md5((string) $i);
            }
        }, $path);
        break;
    case 'guard-fiber-fatal':
        // a Fiber suspended inside its own guard, a fatal error in the outer
        // job, and a shutdown function that resumes the Fiber (event loops do)
        register_shutdown_function(function () use (&$fiber) {
            $fiber?->resume();
        });
        cron_guard(function () use (&$fiber, $path) {
            $fiber = new Fiber(function () use ($path) {
                cron_guard(fn () => Fiber::suspend(), "$path-inner");
            });
            $fiber->start();
            echo "HELD\n";
            flush();
            undefined_function_for_the_torture();
        }, $path);
        break;
    case 'guard-fiber-inner-fatal':
        cron_guard(function () use ($path) {
            $fiber = new Fiber(function () use ($path) {
                cron_guard(function () {
                    Fiber::suspend();
                    undefined_function_for_the_torture();
                }, "$path-inner");
            });
            $fiber->start();
            echo "HELD\n";
            flush();
            $fiber->resume();
        }, $path);
        break;
    case 'guard-fiber-never':
        cron_guard(function () use ($path) {
            $GLOBALS['fiber'] = new Fiber(function () use ($path) {
                cron_guard(fn () => Fiber::suspend(), "$path-inner");
            });
            $GLOBALS['fiber']->start();
            echo "HELD\n";
        }, $path);
        return;
    case 'shutdown-fatal':
        $l = $take();
        register_shutdown_function(function () {
            undefined_function_in_shutdown();
        });
        return;
}
PHP);

/** One FastCGI GET request through cgi-fcgi; returns [pid, body]. */
function request(string $cgi, string $sock, string $script, array $query): array
{
    $env = [
        'REQUEST_METHOD' => 'GET', 'SCRIPT_FILENAME' => $script, 'SCRIPT_NAME' => '/' . basename($script),
        'QUERY_STRING' => http_build_query($query), 'SERVER_PROTOCOL' => 'HTTP/1.1', 'GATEWAY_INTERFACE' => 'CGI/1.1',
        'REMOTE_ADDR' => '127.0.0.1', 'SERVER_NAME' => 'localhost', 'SERVER_PORT' => '80', 'PATH' => getenv('PATH'),
    ];
    $p = new Proc([$cgi, '-bind', '-connect', $sock], null, $env);
    if (!$p->wait(90)) {
        $p->kill(9);
        $p->wait(10);
    }
    $out = $p->out();
    $p->close();
    $pid = preg_match('/^PID (\d+)$/m', $out, $m) ? (int) $m[1] : 0;
    return [$pid, $out];
}

// --- php_admin_value[extension]: the worker must come up and serve
[$fpm, $stopFpm] = start_fpm($fpmBin, $dir, $sock, $ext, 'admin_value');
[$pid, $out] = file_exists($sock) ? request($cgi, $sock, "$www/app.php", ['do' => 'probe', 'lock' => "$dir/locks/admin.lock"]) : [0, ''];
usleep(300000);
$log = (string) @file_get_contents("$dir/fpm.log");
$adminOk = $pid > 0 && str_contains($out, 'FREE') && !str_contains($log, 'SIGSEGV');
T::check($adminOk, 'php-fpm with php_admin_value[extension]=libcronlock.so: the worker starts and serves a request'
    . ($adminOk ? '' : ' | response: ' . trim(preg_replace('/\s+/', ' ', substr($out, 0, 200))) . ' | fpm log: ' . trim(preg_replace('/\s+/', ' ', implode(' ', array_slice(array_filter(explode("\n", $log), fn ($l) => str_contains($l, 'WARNING') || str_contains($l, 'ERROR')), 0, 2))))));
$stopFpm();
T::say('  php_admin_value[extension] pool: ' . ($adminOk ? 'worker serves requests' : 'WORKER CRASHES AT START (' . (str_contains($log, 'SIGSEGV') ? 'SIGSEGV' : 'no answer') . ')'));

// --- opcache: it moves the arginfo class names cronlock set at startup into
// shared memory and frees the originals; a graceful stop (SIGQUIT) of the
// master must exit 0 (a freed name made it abort in about a third of stops)
$opcacheStops = [];
for ($r = 0, $n = (int) T::q(8, 20); $r < $n; $r++) {
    [$fpm, $stopFpm] = start_fpm($fpmBin, $dir, $sock, $ext, 'opcache');
    [$pid, $out] = file_exists($sock) ? request($cgi, $sock, "$www/app.php", ['do' => 'probe', 'lock' => "$dir/locks/opcache.lock"]) : [0, ''];
    $fpm->kill(3);
    $fpm->wait(30);
    $opcacheStops[] = (str_contains($out, 'FREE') ? 'served' : 'NOT SERVED') . (str_contains($out, 'OPCACHE on') ? '' : ' without opcache')
        . ', ' . $fpm->describeExit();
    $stopFpm();
}
$bad = array_filter($opcacheStops, fn ($s) => $s !== 'served, exit code 0');
T::check($bad === [], 'php-fpm with opcache.enable=1: every master served a request and stopped cleanly on SIGQUIT: ' . implode('; ', $opcacheStops));
T::say(sprintf('  opcache.enable=1: %d/%d masters served and stopped with exit code 0', count($opcacheStops) - count($bad), count($opcacheStops)));

// the scenarios run in the pool that works: php_admin_value if it does, else extension= in php.ini
$how = $adminOk ? 'admin_value' : 'ini';
T::say("  scenarios (extension loaded by $how):");
[$fpm, $stopFpm] = start_fpm($fpmBin, $dir, $sock, $ext, $how);
if (!file_exists($sock)) {
    T::fail("php-fpm ($how) did not start: " . @file_get_contents("$dir/fpm.log"));
    T::finish();
}
$scenarios = ['fatal' => 'fatal error', 'memory' => 'memory_limit', 'timeout' => 'max_execution_time', 'exception' => 'uncaught exception',
    'exit' => 'exit()', 'global' => 'lock left in a global', 'static' => 'static var + fatal', 'cycle' => 'reference cycle + fatal',
    'guard-fatal' => 'cron_guard + fatal', 'guard-timeout' => 'cron_guard + max_execution_time', 'shutdown-fatal' => 'fatal in a shutdown function',
    'guard-fiber-fatal' => 'Fiber guard suspended + fatal outside it', 'guard-fiber-inner-fatal' => 'fatal inside a Fiber guard',
    'guard-fiber-never' => 'Fiber guard never resumed'];
$rounds = (int) T::q(1, 10);
$app = "$www/app.php";
$redis = null;
if (T::redisAvailable()) {
    $redis = new RedisServer("$dir/redis");
    $redis->start();
    foreach (['fatal', 'timeout', 'exit'] as $s) {
        $scenarios["redis:$s"] = "Redis lock + {$scenarios[$s]}";
    }
} else {
    T::pending('php-fpm with a Redis lock');
}
$pids = [];
foreach ($scenarios as $do => $what) {
    $okRounds = 0;
    for ($r = 0; $r < $rounds; $r++) {
        $isRedis = str_starts_with($do, 'redis:');
        $action = $isRedis ? substr($do, 6) : $do;
        $name = "fpm-$action-$r";
        $lock = $isRedis ? 'redis:' . $redis->dsn() : (str_starts_with($action, 'guard') ? $name : "$dir/locks/$name.lock");
        $lockFile = str_starts_with($action, 'guard') ? "$dir/locks/$name.lock" : $lock;
        [$pid1, $out1] = request($cgi, $sock, $app, ['do' => $action, 'lock' => $lock]);
        T::add('iterations');
        $held = str_contains($out1, 'HELD');
        $outside = $isRedis ? null : flock1_free($lockFile);
        if (str_starts_with($action, 'guard-fiber') && $outside !== null) {
            $outside = $outside && flock1_free("$dir/locks/$name-inner.lock");
        }
        [$pid2, $out2] = request($cgi, $sock, $app, ['do' => 'probe', 'lock' => $isRedis ? $lock : $lockFile]);
        $free = str_contains($out2, 'FREE');
        $same = $pid1 > 0 && $pid1 === $pid2;
        $pids[$pid1] = true;
        $ok = $held && $free && $same && $outside !== false;
        $okRounds += $ok ? 1 : 0;
        T::check($ok, sprintf('fpm %s: held=%s; next request same worker=%s (pids %d/%d) and lock free=%s; free from outside=%s%s',
            $what, var_export($held, true), var_export($same, true), $pid1, $pid2, var_export($free, true), var_export($outside, true),
            $ok ? '' : ' | first: ' . trim(preg_replace('/\s+/', ' ', substr($out1, 0, 400))) . ' | probe: ' . trim(preg_replace('/\s+/', ' ', $out2))));
    }
    T::say(sprintf('  %-40s %d/%d rounds: same worker pid, lock free in the next request', $what, $okRounds, $rounds));
}
T::check(count($pids) === 1, 'fpm: one worker served everything (pids: ' . implode(',', array_keys($pids)) . ')');
$redis?->stop();
$stopFpm();

T::finish();

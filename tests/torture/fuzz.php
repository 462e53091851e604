<?php

declare(strict_types=1);

/*
 * 6b. Property test of argument parsing: thousands of random paths, names,
 * DSNs, keys, TTLs, timeouts and option arrays thrown at new CronLock\File,
 * new CronLock\Redis, cron_guard() and the lock methods. Only the documented
 * classes may come out (ValueError, TypeError incl. ArgumentCountError,
 * CronLock\LockException incl. ConnectionException), no warning may be
 * emitted, and the process must never crash. Seeded and reproducible:
 *
 *   tests/torture/run --only=fuzz --seed=N      (or the chunk: fuzz.php --chunk=SEED:COUNT)
 *
 * The driver runs chunks of iterations in child processes so that a crash
 * names the seed of the chunk that crashed. Paths stay inside a sandbox
 * (checked afterwards); DSNs only ever name 127.0.0.1 / unix sockets / our
 * own redis-server.
 */

namespace Torture;

require __DIR__ . '/lib/common.php';

final class Gen
{
    public function __construct(public string $sb, public ?string $liveDsn)
    {
    }

    public function pick(array $a): mixed
    {
        return $a[mt_rand(0, count($a) - 1)];
    }

    public function bytes(int $max): string
    {
        $n = mt_rand(0, $max);
        $s = '';
        for ($i = 0; $i < $n; $i++) {
            $s .= chr(mt_rand(0, 255));
        }
        return $s;
    }

    public function word(): string
    {
        return match (mt_rand(0, 9)) {
            0 => '',
            1 => $this->bytes(12),
            2 => str_repeat($this->pick(['a', '.', '-', '_', 'é', "\0"]), mt_rand(1, 300)),
            3 => $this->pick(['.', '..', '...', '-', '~', '*', '?', '$x', '%00', '%2F', ' ', "\t", "\n"]),
            4 => $this->pick(['ünïcødé', '日本', "\u{202e}rtl", "\xc3\x28", "\xff\xfe"]),
            default => substr(str_shuffle('abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-'), 0, mt_rand(1, 20)),
        };
    }

    /** A path that can only land inside the sandbox (no '/' or '..' in generated parts). */
    public function path(): mixed
    {
        $part = fn () => str_replace(['/', '..'], ['_', '__'], $this->word());
        return match (mt_rand(0, 12)) {
            0 => $this->scalar(),
            1 => $this->pick(['/dev/null', '/dev/zero', '/', '/proc/self/status', '/proc', '', "\0", '/nonexistent-dir/x']),
            2 => $this->sb . '/' . str_repeat('x/', mt_rand(1, 2000)),
            3 => $this->sb . '/sub/' . $part(),
            4 => $this->sb . '/' . $this->pick(['dir', 'link-file', 'link-dir', 'fifo', 'file', 'dangling']),
            5 => $this->sb . '/' . $part() . "\0" . $part(),
            default => $this->sb . '/' . $part() . $this->pick(['', '.lock', '/']),
        };
    }

    public function float(): float
    {
        return $this->pick([0.0, -0.0, 1e-9, 1e-300, PHP_FLOAT_EPSILON, PHP_FLOAT_MIN, 0.001, 0.01, 1.0, 1.5,
            -1.0, -1e300, 1e300, PHP_FLOAT_MAX, -PHP_FLOAT_MAX, INF, -INF, NAN, -NAN, (float) PHP_INT_MAX,
            mt_rand() / mt_getrandmax() * 10 - 5, 315360000.0, 315360000.001, 9007199254740993.0]);
    }

    public function scalar(): mixed
    {
        return match (mt_rand(0, 11)) {
            0 => null,
            1 => (bool) mt_rand(0, 1),
            2 => $this->pick([0, 1, -1, 255, 256, 0644, 07777, 010000, PHP_INT_MAX, PHP_INT_MIN, mt_rand()]),
            3, 4 => $this->float(),
            5, 6 => $this->word(),
            7 => $this->pick(['1', '1.5', '0x10', ' 1', '1e3', 'INF', 'NAN', 'true', '']),
            8 => [],
            9 => [$this->word() => $this->word()],
            10 => new \stdClass(),
            11 => $this->pick([fn () => 1, STDERR, new \ArrayObject([1])]),
        };
    }

    /** Timeouts/TTLs: mostly floats, sometimes anything. */
    public function seconds(): mixed
    {
        return mt_rand(0, 4) === 0 ? $this->scalar() : $this->float();
    }

    public function options(array $known): mixed
    {
        if (mt_rand(0, 9) === 0) {
            return $this->scalar();
        }
        $o = [];
        $n = mt_rand(0, 4);
        for ($i = 0; $i < $n; $i++) {
            $key = mt_rand(0, 5) === 0 ? $this->pick([0, 1, -1, '', 'MODE', 'mode ', $this->word()]) : $this->pick($known);
            $o[$key] = mt_rand(0, 2) === 0 ? $this->scalar() : $this->pick([true, false, 0, 0600, 1, $this->float(), null]);
        }
        return $o;
    }

    public function dsn(int $deadPort): mixed
    {
        $host = $this->pick(['127.0.0.1', 'localhost', '[::1]', '', '[::1', '127.0.0.1:', '[zz]']);
        $port = $this->pick(['', ":$deadPort", ':0', ':65536', ':-1', ':abc', ':' . PHP_INT_MAX]);
        $auth = $this->pick(['', 'user:pw@', ':pw@', 'user@', ':@', 'a@b@', 'us%40er:p%3Aw@', rawurlencode($this->bytes(8)) . '@']);
        $db = $this->pick(['', '/0', '/1', '/-1', '/abc', '/99999999999999999999', '/0?x=1', '#insecure', '/0?db=3']);
        $scheme = $this->pick(['redis://', 'rediss://', 'REDIS://', 'unix://', 'http://', '', 'redis:/', 'redis:///']);
        return match (mt_rand(0, 9)) {
            0 => $this->scalar(),
            1 => 'unix://' . $this->sb . '/' . $this->pick(['nope.sock', 'file', 'dir', '']) . $this->pick(['', '?db=1', '?user=u&pass=p']),
            2 => $scheme . $this->bytes(20),
            3 => $this->liveDsn ?? "redis://127.0.0.1:$deadPort",
            default => $scheme . $auth . $host . $port . $db,
        };
    }
}

function allowed(\Throwable $e): bool
{
    return $e instanceof \ValueError || $e instanceof \TypeError || $e instanceof \CronLock\LockException;
}

/** One chunk of iterations in this process. Prints "CHUNK seed n counts json". */
function run_chunk(int $seed, int $count, string $sb, ?string $liveDsn, int $deadPort): void
{
    mt_srand($seed);
    $g = new Gen($sb, $liveDsn);
    ini_set('cronlock.lock_dir', "$sb/lockdir");
    $warnings = [];
    set_error_handler(function (int $no, string $msg, string $file, int $line) use (&$warnings, &$current): bool {
        $warnings[] = "$msg (during $current)";
        return true;
    });
    $counts = [];
    $bad = [];
    $redis = class_exists('CronLock\\Redis');
    for ($i = 0; $i < $count; $i++) {
        $target = mt_rand(0, $redis ? 9 : 6);
        $args = [];
        $current = '';
        try {
            switch (true) {
                case $target <= 2:
                    $args = [$g->path(), $g->options(['mode', 'shared', 'allow_network_fs'])];
                    $current = 'new File' . json_encode(array_map('Torture\\show', $args));
                    $l = mt_rand(0, 4) === 0 ? new \CronLock\File($args[0]) : new \CronLock\File(...$args);
                    $t = $g->seconds();
                    $current .= '->acquire(' . show($t) . ')';
                    // never wait forever on a lock someone could hold: nobody does here
                    if ($l->acquire($t)) {
                        $l->renew($g->seconds());
                        $l->holderPid();
                        $l->release();
                    }
                    $l->release();
                    $l->isHeld();
                    $l->path();
                    break;
                case $target <= 5:
                    $lock = match (mt_rand(0, 3)) {
                        0 => $g->word(),
                        1 => $g->scalar(),
                        2 => substr(str_shuffle('abcdefghijklmnopqrstuvwxyz._-0123456789'), 0, mt_rand(1, 30)),
                        3 => null,
                    };
                    $opts = $g->options(['wait', 'max_runtime', 'on_busy']);
                    if (is_array($opts) && isset($opts['on_busy']) && is_int($opts['on_busy'])) {
                        unset($opts['on_busy']); // an int exits the process when busy (never busy here, but be safe)
                    }
                    $args = [$lock, $opts];
                    $current = 'cron_guard' . json_encode(array_map('Torture\\show', $args));
                    cron_guard(function (\CronLock\Guard $gd) {
                        $gd->remaining();
                        $gd->expired();
                        $gd->renew();
                        $gd->lock()->isHeld();
                        return 1;
                    }, $lock, $opts);
                    break;
                case $target <= 6:
                    $current = 'acquire(timeout) on a fresh File';
                    $l = new \CronLock\File("$sb/fixed.lock");
                    $t = $g->seconds();
                    $current = 'File(fixed)->acquire(' . show($t) . ')';
                    $l->acquire($t);
                    $l->renew($g->seconds());
                    $l->release();
                    break;
                default:
                    $args = [$g->dsn($deadPort), mt_rand(0, 5) ? 'fuzz:' . $g->word() : $g->scalar(), $g->seconds(), $g->options(['auto_renew', 'connect_timeout', 'read_timeout'])];
                    $current = 'new Redis' . json_encode(array_map('Torture\\show', $args));
                    $r = new \CronLock\Redis(...$args);
                    if ($args[0] === $liveDsn || mt_rand(0, 3) === 0) {
                        // only our own server or a closed loopback port / missing socket
                        $t = mt_rand(0, 1) ? 0.0 : $g->seconds();
                        if (!is_float($t) || is_nan($t) || $t < 0 || $t > 0.05) {
                            $t = 0.0;
                        }
                        $current .= '->acquire(' . show($t) . ')';
                        if ($r->acquire($t)) {
                            $r->token();
                            $r->fencingToken();
                            $r->renew(mt_rand(0, 1) ? null : $g->seconds());
                        }
                        $r->release();
                    }
                    break;
            }
            $counts['ok'] = ($counts['ok'] ?? 0) + 1;
        } catch (\Throwable $e) {
            $cls = get_class($e);
            $counts[$cls] = ($counts[$cls] ?? 0) + 1;
            if (!allowed($e)) {
                $bad[] = "iteration $i: $cls: " . $e->getMessage() . " <- $current";
            } elseif (($e instanceof \ValueError || $e instanceof \TypeError) && !preg_match('/\$|argument/', $e->getMessage())) {
                $bad[] = "iteration $i: $cls without an argument name: " . $e->getMessage() . " <- $current";
            }
        }
        unset($l, $r);
    }
    restore_error_handler();
    foreach (array_slice($warnings, 0, 5) as $w) {
        $bad[] = "warning: $w";
    }
    echo 'CHUNK ', json_encode(['seed' => $seed, 'n' => $count, 'counts' => $counts, 'bad' => array_slice($bad, 0, 10), 'nbad' => count($bad) + max(0, count($warnings) - 5)]), "\n";
}

function show(mixed $v): string
{
    if (is_string($v)) {
        $s = strlen($v) > 60 ? substr($v, 0, 60) . '…(' . strlen($v) . ')' : $v;
        return '"' . addcslashes($s, "\0..\37\177..\377") . '"';
    }
    if (is_float($v)) {
        return is_nan($v) ? 'NAN' : (is_infinite($v) ? ($v > 0 ? 'INF' : '-INF') : var_export($v, true));
    }
    if (is_array($v)) {
        return '[' . implode(', ', array_map(fn ($k, $x) => show($k) . '=>' . show($x), array_keys($v), $v)) . ']';
    }
    return is_object($v) ? get_class($v) : (is_resource($v) ? 'resource' : var_export($v, true));
}

function prepare_sandbox(string $sb): void
{
    @mkdir("$sb/sub", 0755, true);
    @mkdir("$sb/lockdir", 0755, true);
    @mkdir("$sb/dir", 0755, true);
    @touch("$sb/file");
    @symlink("$sb/file", "$sb/link-file");
    @symlink("$sb/dir", "$sb/link-dir");
    @symlink("$sb/nowhere", "$sb/dangling");
    if (!file_exists("$sb/fifo")) {
        posix_mkfifo("$sb/fifo", 0600);
    }
}

// ---------------------------------------------------------------- entry

if (preg_match('/^--chunk=(\d+):(\d+)$/', $argv[1] ?? '', $m)) {
    // a chunk, in its own process: fuzz.php --chunk=SEED:COUNT SANDBOX [LIVE_DSN] [DEAD_PORT]
    $sb = $argv[2] ?? (sys_get_temp_dir() . '/cronlock-fuzz-' . getmypid());
    @mkdir($sb, 0755, true);
    prepare_sandbox($sb);
    chdir($sb); // relative paths (random strings) land in the sandbox too
    run_chunk((int) $m[1], (int) $m[2], $sb, ($argv[3] ?? '') !== '' ? $argv[3] : null, (int) ($argv[4] ?? 1));
    exit(0);
}

T::init('fuzz', $argv);
$seed = T::$seed ?? random_int(1, 2 ** 31 - 1);
$total = (int) T::q(4000, 40000);
$chunk = 500;
T::say("fuzz (seed $seed; rerun with: tests/torture/run --only=fuzz --seed=$seed):");
$root = T::$tmp;
$sb = "$root/sandbox";
@mkdir($sb, 0755, true);
prepare_sandbox($sb);
$outsideBefore = scandir($root);
$cwdBefore = scandir(getcwd());
$server = null;
$liveDsn = '';
if (T::redisAvailable()) {
    $server = new RedisServer("$root/redis");
    $server->start();
    $liveDsn = $server->dsn();
}
$deadPort = RedisServer::freePort();
$counts = [];
$chunks = 0;
for ($done = 0, $c = 0; $done < $total; $done += $chunk, $c++) {
    $chunkSeed = $seed + $c;
    $p = new Proc(array_merge(T::php(), [__FILE__, "--chunk=$chunkSeed:$chunk", $sb, $liveDsn, (string) $deadPort]));
    if (!$p->wait(300)) {
        $p->kill(9);
        $p->wait(10);
        T::fail("chunk seed $chunkSeed hung (> 300 s); reproduce: php -d extension=… tests/torture/fuzz.php --chunk=$chunkSeed:$chunk");
        continue;
    }
    $chunks++;
    $out = $p->out();
    if (!preg_match('/^CHUNK (.*)$/m', $out, $m)) {
        T::fail("chunk seed $chunkSeed crashed ({$p->describeExit()}); reproduce: php -d extension=" . T::$ext . " tests/torture/fuzz.php --chunk=$chunkSeed:$chunk $sb; stderr: " . substr(trim($p->err()), -500));
        $p->close();
        continue;
    }
    $r = json_decode($m[1], true);
    foreach ($r['counts'] as $k => $v) {
        $counts[$k] = ($counts[$k] ?? 0) + $v;
    }
    foreach ($r['bad'] as $b) {
        T::fail("seed $chunkSeed $b");
    }
    if ($p->exitCode !== 0) {
        T::fail("chunk seed $chunkSeed exited with {$p->describeExit()}: " . substr(trim($p->err()), -300));
    } elseif (trim($p->err()) !== '') {
        T::fail("chunk seed $chunkSeed wrote to stderr: " . substr(trim($p->err()), 0, 300));
    }
    T::add('inputs', $r['n']);
    $p->close();
}
$server?->stop();
// nothing may have been created next to the sandbox (paths never escape it)
$outsideAfter = scandir($root);
$new = array_diff($outsideAfter, $outsideBefore, ['redis']);
T::check($new === [], 'fuzz: nothing written outside the sandbox' . ($new ? ': ' . implode(', ', $new) : ''));
$newHere = array_diff(scandir(getcwd()), $cwdBefore);
T::check($newHere === [], 'fuzz: nothing written in the working directory' . ($newHere ? ': ' . implode(', ', array_map('json_encode', $newHere)) : ''));
ksort($counts);
T::check(true, "fuzz: $total random inputs in $chunks chunks");
T::say(sprintf('  %d random calls (%d chunks of %d, seeds %d..%d): %s', $total, $chunks, $chunk, $seed, $seed + $chunks - 1,
    implode(', ', array_map(fn ($k, $v) => "$k $v", array_keys($counts), $counts))));
T::finish();

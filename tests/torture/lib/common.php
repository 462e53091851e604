<?php

declare(strict_types=1);

/*
 * Shared helpers of the cronlock torture suite (tests/torture/run).
 *
 * Every section script is started as
 *     php -d extension=…/libcronlock.so tests/torture/<section>.php --mode=quick|soak [--verbose] [--seed=N]
 * with TORTURE_TMP (a scratch dir that the runner removes) and CRONLOCK_EXT in
 * the environment. It prints human lines, then one machine line
 *     TORTURE-RESULT {"section":…,"processes":…,"failures":…,…}
 * that the runner adds up. A failure is printed as "FAIL: …" at once.
 */

namespace Torture;

const RESULT_TAG = 'TORTURE-RESULT ';

final class T
{
    public static string $section = '?';
    public static string $mode = 'quick';
    public static bool $verbose = false;
    public static ?int $seed = null;
    public static string $tmp = '';
    public static string $ext = '';
    public static string $root = '';
    /** @var array<string, int|float|string> */
    public static array $figures = [
        'processes' => 0, 'iterations' => 0, 'kills' => 0, 'faults' => 0,
        'inputs' => 0, 'checks' => 0, 'passed' => 0, 'failures' => 0, 'skipped' => 0, 'pending' => 0,
    ];
    /** @var list<string> */
    public static array $notes = [];
    /** @var list<string> */
    public static array $failureLines = [];
    public static float $started = 0.0;

    /** @param list<string> $argv */
    public static function init(string $section, array $argv): void
    {
        self::$section = $section;
        self::$started = microtime(true);
        foreach (array_slice($argv, 1) as $arg) {
            if (preg_match('/^--mode=(quick|soak)$/', $arg, $m)) {
                self::$mode = $m[1];
            } elseif ($arg === '--verbose' || $arg === '-v') {
                self::$verbose = true;
            } elseif (preg_match('/^--seed=(\d+)$/', $arg, $m)) {
                self::$seed = (int) $m[1];
            }
        }
        self::$tmp = rtrim((string) getenv('TORTURE_TMP'), '/');
        if (self::$tmp === '' || !is_dir(self::$tmp)) {
            self::$tmp = sys_get_temp_dir() . '/cronlock-torture-' . getmypid();
            @mkdir(self::$tmp, 0700, true);
        }
        self::$tmp .= '/' . $section;
        @mkdir(self::$tmp, 0755, true);
        self::$ext = (string) getenv('CRONLOCK_EXT');
        if (self::$ext === '') {
            self::$ext = dirname(__DIR__, 3) . '/target/release/libcronlock.so';
        }
        self::$root = dirname(__DIR__, 3);
        if (!extension_loaded('cronlock')) {
            fwrite(STDERR, "cronlock is not loaded: run through tests/torture/run\n");
            exit(2);
        }
    }

    public static function quick(): bool
    {
        return self::$mode === 'quick';
    }

    /** Pick the quick or the soak figure. */
    public static function q(int|float $quick, int|float $soak): int|float
    {
        return self::quick() ? $quick : $soak;
    }

    public static function add(string $figure, int|float $n = 1): void
    {
        self::$figures[$figure] = (self::$figures[$figure] ?? 0) + $n;
    }

    public static function say(string $line): void
    {
        echo $line, "\n";
    }

    public static function info(string $line): void
    {
        if (self::$verbose) {
            echo '    ', $line, "\n";
        }
    }

    public static function fail(string $what): void
    {
        self::add('failures');
        $line = '[' . self::$section . '] ' . $what;
        self::$failureLines[] = $line;
        echo 'FAIL: ', $line, "\n";
    }

    /** A checked property: counts as a check, prints FAIL when false. */
    public static function check(bool $ok, string $what): bool
    {
        self::add('checks');
        if (!$ok) {
            self::fail($what);
        } else {
            self::add('passed');
            self::info("ok: $what");
        }
        return $ok;
    }

    public static function note(string $line): void
    {
        if (in_array($line, self::$notes, true)) {
            return;
        }
        self::$notes[] = $line;
        echo 'NOTE: ', $line, "\n";
    }

    public static function skip(string $what, string $reason): void
    {
        self::add('skipped');
        echo "SKIP: $what: $reason\n";
        self::$notes[] = "skipped $what: $reason";
    }

    public static function pending(string $what): void
    {
        self::add('pending');
        echo "PENDING: $what (class CronLock\\Redis does not exist yet)\n";
    }

    public static function finish(): never
    {
        $result = ['section' => self::$section, 'mode' => self::$mode]
            + self::$figures
            + ['seconds' => round(microtime(true) - self::$started, 1), 'notes' => self::$notes];
        echo RESULT_TAG, json_encode($result, JSON_UNESCAPED_SLASHES), "\n";
        exit(self::$figures['failures'] > 0 ? 1 : 0);
    }

    /** The php command that loads this build, for child processes. */
    public static function php(array $ini = []): array
    {
        $cmd = [PHP_BINARY, '-d', 'extension=' . self::$ext, '-d', 'display_errors=stderr', '-d', 'error_reporting=-1'];
        foreach ($ini as $k => $v) {
            $cmd[] = '-d';
            $cmd[] = "$k=$v";
        }
        return $cmd;
    }

    public static function worker(): string
    {
        return __DIR__ . '/worker.php';
    }

    public static function redisAvailable(): bool
    {
        return class_exists('CronLock\\Redis');
    }
}

/** A child process started without a shell: its pid is the program's own. */
final class Proc
{
    /** @var resource */
    public $proc;
    public int $pid;
    /** @var array<int, resource> */
    public array $pipes = [];
    public ?int $exitCode = null;
    public ?int $termSignal = null;
    private string $out = '';
    private string $err = '';

    /**
     * @param list<string> $cmd
     * @param array<string,string>|null $env
     */
    public function __construct(array $cmd, ?string $stdoutFile = null, ?array $env = null, bool $captureStdout = true)
    {
        $spec = [
            0 => ['file', '/dev/null', 'r'],
            1 => $stdoutFile !== null ? ['file', $stdoutFile, 'a'] : ($captureStdout ? ['pipe', 'w'] : ['file', '/dev/null', 'w']),
            2 => ['pipe', 'w'],
        ];
        $proc = proc_open($cmd, $spec, $this->pipes, null, $env);
        if (!is_resource($proc)) {
            throw new \RuntimeException('proc_open failed: ' . implode(' ', $cmd));
        }
        $this->proc = $proc;
        $this->pid = proc_get_status($proc)['pid'];
        foreach ($this->pipes as $p) {
            stream_set_blocking($p, false);
        }
        T::add('processes');
    }

    /** Drain pipes without blocking (so a chatty child never stalls). */
    public function pump(): void
    {
        if (isset($this->pipes[1]) && is_resource($this->pipes[1])) {
            while (($chunk = fread($this->pipes[1], 65536)) !== false && $chunk !== '') {
                $this->out .= $chunk;
            }
        }
        if (isset($this->pipes[2]) && is_resource($this->pipes[2])) {
            while (($chunk = fread($this->pipes[2], 65536)) !== false && $chunk !== '') {
                $this->err .= $chunk;
            }
        }
    }

    public function running(): bool
    {
        if ($this->exitCode !== null || $this->termSignal !== null) {
            return false;
        }
        $this->pump();
        $st = proc_get_status($this->proc);
        if ($st['running']) {
            return true;
        }
        if ($st['signaled']) {
            $this->termSignal = $st['termsig'];
            $this->exitCode = -1;
        } else {
            $this->exitCode = $st['exitcode'];
        }
        return false;
    }

    /** Wait (polling, so that slowness never deadlocks us) until it exits. */
    public function wait(float $timeout = 120.0): bool
    {
        $end = microtime(true) + $timeout;
        $sleep = 1000;
        while ($this->running()) {
            if (microtime(true) > $end) {
                return false;
            }
            usleep($sleep);
            $sleep = min($sleep * 2, 20000);
        }
        $this->pump();
        return true;
    }

    public function kill(int $sig = 9): void
    {
        if ($this->exitCode === null && $this->termSignal === null) {
            posix_kill($this->pid, $sig);
        }
    }

    /** Read stdout until $needle shows up (or the process ends / times out). */
    public function waitFor(string $needle, float $timeout = 60.0): bool
    {
        $end = microtime(true) + $timeout;
        while (true) {
            $this->pump();
            if (str_contains($this->out, $needle)) {
                return true;
            }
            if (!$this->running() || microtime(true) > $end) {
                $this->pump();
                return str_contains($this->out, $needle);
            }
            usleep(2000);
        }
    }

    public function out(): string
    {
        $this->pump();
        return $this->out;
    }

    public function err(): string
    {
        $this->pump();
        return $this->err;
    }

    public function close(): void
    {
        foreach ($this->pipes as $p) {
            if (is_resource($p)) {
                fclose($p);
            }
        }
        $this->pipes = [];
        if (is_resource($this->proc)) {
            $this->wait(5.0);
            if ($this->running()) {
                $this->kill(9);
                $this->wait(30.0);
            }
            proc_close($this->proc);
        }
    }

    public function describeExit(): string
    {
        if ($this->termSignal !== null) {
            return "killed by signal {$this->termSignal}";
        }
        return "exit code {$this->exitCode}";
    }
}

/** Facts about processes from /proc. */
final class Pids
{
    /** "pid:starttime" of this process, unique even when pids are reused. */
    public static function tag(int $pid): ?string
    {
        $st = self::stat($pid);
        return $st === null ? null : $pid . ':' . $st['start'];
    }

    /** @return array{state: string, flags: int, start: string}|null */
    public static function stat(int $pid): ?array
    {
        $raw = @file_get_contents("/proc/$pid/stat");
        if ($raw === false || $raw === '') {
            return null;
        }
        $rest = substr($raw, strrpos($raw, ')') + 2);
        $f = explode(' ', $rest);
        // after "pid (comm) ": [0]=state [1]=ppid … [6]=flags … [19]=starttime
        return ['state' => $f[0], 'flags' => (int) $f[6], 'start' => $f[19]];
    }

    /**
     * Whether the process tagged "pid:start" is gone or on its way out (zombie,
     * or PF_EXITING: the kernel drops its flocks while exiting, before it
     * becomes a zombie).
     */
    public static function deadOrExiting(string $tag): bool
    {
        [$pid, $start] = explode(':', $tag);
        $st = self::stat((int) $pid);
        if ($st === null || $st['start'] !== $start) {
            return true;
        }
        return in_array($st['state'], ['Z', 'X', 'x'], true) || ($st['flags'] & 0x4) !== 0;
    }
}

require_once __DIR__ . '/../../../php-tests/Support/RedisHarness.php';

/**
 * Runs tests/redis-harness (the one harness that starts every Redis server of
 * the test suites) through the PHPUnit suite's RedisHarness. Returns the
 * lines it printed.
 *
 * @return list<string>
 */
function redis_harness(string ...$args): array
{
    return \CronLock\Tests\Support\RedisHarness::run(...$args);
}

/**
 * The node lines of the harness's facts, by name.
 *
 * @param list<string> $lines
 * @return array<string, array{name: string, role: string, port: int, pid: int, dir: string}>
 */
function redis_nodes(array $lines): array
{
    return array_column(\CronLock\Tests\Support\RedisHarness::nodes($lines), null, 'name');
}

/**
 * A redis-server of our own (DEBUG allowed) on a free loopback port in $dir,
 * started and stopped by pid through tests/redis-harness. Only the process
 * that made the object starts, kills or stops it: a pcntl_fork() child's
 * shutdown functions must not stop the parent's server.
 */
final class RedisServer
{
    public int $port = 0;
    private int $owner;

    public function __construct(public string $dir)
    {
        $this->owner = getmypid();
    }

    /** A port nothing listens on (for "connection refused" inputs). */
    public static function freePort(): int
    {
        for ($i = 0; $i < 50; $i++) {
            $s = @stream_socket_server('tcp://127.0.0.1:0', $errno, $errstr);
            if ($s === false) {
                continue;
            }
            $name = stream_socket_get_name($s, false);
            fclose($s);
            $port = (int) substr($name, strrpos($name, ':') + 1);
            if ($port > 1024) {
                return $port;
            }
        }
        throw new \RuntimeException('no free port');
    }

    /** The first time: a new server; after kill(): the same port again, empty. */
    public function start(): void
    {
        clearstatcache();
        $lines = is_file("$this->dir/harness.state")
            ? redis_harness('restart', $this->dir, 'n0')
            : redis_harness('start', 'single', $this->dir, '--debug');
        $this->port = redis_nodes($lines)['n0']['port'];
    }

    public function dsn(): string
    {
        return "redis://127.0.0.1:{$this->port}";
    }

    /** SIGKILL, like a crash; the port stays ours for start(). */
    public function kill(): void
    {
        if (getmypid() === $this->owner) {
            redis_harness('kill', $this->dir, 'n0');
        }
    }

    /** Stops the server and removes its directory. */
    public function stop(): void
    {
        clearstatcache();
        if (getmypid() === $this->owner && is_file("$this->dir/harness.state")) {
            redis_harness('stop', $this->dir);
        }
    }

    public function client(float $timeout = 5.0): Resp
    {
        return new Resp($this->port, $timeout);
    }
}

/**
 * A Sentinel (master, replicas, three sentinels watching 'mymaster') or a
 * three-master Cluster of our own in $dir, through tests/redis-harness.
 */
final class RedisTopology
{
    public string $dsn;
    /** @var array<string, array{role: string, port: int, pid: int}> */
    public array $nodes;
    private int $owner;

    /** @param string $kind 'sentinel' or 'cluster' */
    public function __construct(public string $dir, string $kind, string ...$options)
    {
        $this->owner = getmypid();
        $lines = redis_harness('start', $kind, $dir, ...$options);
        $this->nodes = redis_nodes($lines);
        foreach ($lines as $line) {
            if (str_starts_with($line, 'dsn ')) {
                $this->dsn = substr($line, 4);
            }
        }
    }

    /** Sentinel: the name of the node the sentinels name as the master now. */
    public function master(): string
    {
        return array_key_first(redis_nodes(redis_harness('master', $this->dir)));
    }

    /** Sentinel: SENTINEL FAILOVER, until it is done; the new master's name. */
    public function failover(): string
    {
        return array_key_first(redis_nodes(redis_harness('failover', $this->dir)));
    }

    /** Sentinel: after a kill of master $old, the new master's name once the sentinels agree. */
    public function awaitMaster(string $old): string
    {
        return array_key_first(redis_nodes(redis_harness('await-master', $this->dir, $old)));
    }

    public function kill(string $node): void
    {
        redis_harness('kill', $this->dir, $node);
    }

    /** Starts $node again, same port and arguments (empty: nothing was persisted). */
    public function restart(string $node): void
    {
        $this->nodes[$node]['pid'] = redis_nodes(redis_harness('restart', $this->dir, $node))[$node]['pid'];
    }

    /** Cluster: the node that serves $key (the one that answers without MOVED). */
    public function ownerOf(string $key): string
    {
        foreach (array_keys($this->nodes) as $node) {
            try {
                $this->client($node)->cmd('EXISTS', $key);
                return $node;
            } catch (\RuntimeException) {
            }
        }
        throw new \RuntimeException("no node serves $key");
    }

    /** Cluster: until every node says cluster_state:ok (30 s at most). */
    public function awaitClusterOk(): void
    {
        $deadline = microtime(true) + 30;
        foreach (array_keys($this->nodes) as $node) {
            while (!str_contains((string) $this->client($node)->cmd("CLUSTER", "INFO"), "cluster_state:ok")) {
                if (microtime(true) > $deadline) {
                    throw new \RuntimeException('the cluster did not become ok within 30 s');
                }
                usleep(100_000);
            }
        }
    }

    public function client(string $node, float $timeout = 5.0): Resp
    {
        return new Resp($this->nodes[$node]['port'], $timeout);
    }

    public function stop(): void
    {
        clearstatcache();
        if (getmypid() === $this->owner && is_file("$this->dir/harness.state")) {
            redis_harness('stop', $this->dir);
        }
    }
}

/** Minimal RESP2 client: enough for SET NX, EVAL, CLIENT PAUSE, DEBUG SLEEP. */
final class Resp
{
    /** @var resource */
    private $s;

    public function __construct(int $port, float $timeout = 5.0)
    {
        $s = @stream_socket_client("tcp://127.0.0.1:$port", $errno, $errstr, $timeout);
        if ($s === false) {
            throw new \RuntimeException("connect to redis :$port failed: $errstr");
        }
        stream_set_timeout($s, (int) ceil($timeout));
        $this->s = $s;
    }

    public function cmd(string ...$args): mixed
    {
        $out = '*' . count($args) . "\r\n";
        foreach ($args as $a) {
            $out .= '$' . strlen($a) . "\r\n$a\r\n";
        }
        if (@fwrite($this->s, $out) !== strlen($out)) {
            throw new \RuntimeException('redis write failed');
        }
        return $this->reply();
    }

    /** Send without reading the reply (for DEBUG SLEEP, which blocks the server). */
    public function send(string ...$args): void
    {
        $out = '*' . count($args) . "\r\n";
        foreach ($args as $a) {
            $out .= '$' . strlen($a) . "\r\n$a\r\n";
        }
        @fwrite($this->s, $out);
    }

    private function line(): string
    {
        $l = fgets($this->s);
        if ($l === false) {
            throw new \RuntimeException('redis read failed');
        }
        return substr($l, 0, -2);
    }

    public function reply(): mixed
    {
        $l = $this->line();
        $t = $l[0];
        $v = substr($l, 1);
        switch ($t) {
            case '+':
                return $v;
            case '-':
                throw new \RuntimeException("redis error: $v");
            case ':':
                return (int) $v;
            case '$':
                if ((int) $v < 0) {
                    return null;
                }
                $data = '';
                $need = (int) $v + 2;
                while (strlen($data) < $need) {
                    $chunk = fread($this->s, $need - strlen($data));
                    if ($chunk === false || $chunk === '') {
                        throw new \RuntimeException('redis read failed');
                    }
                    $data .= $chunk;
                }
                return substr($data, 0, -2);
            case '*':
                if ((int) $v < 0) {
                    return null;
                }
                $a = [];
                for ($i = 0; $i < (int) $v; $i++) {
                    $a[] = $this->reply();
                }
                return $a;
        }
        throw new \RuntimeException("bad redis reply: $l");
    }

    public function close(): void
    {
        fclose($this->s);
    }
}

/**
 * Snapshot of a directory tree (type, mode, owner, size, content hash, link
 * target) to prove that nothing was written outside the intended files.
 *
 * @return array<string, string>
 */
function snapshot(string $dir): array
{
    $out = [];
    $walk = function (string $d, string $rel) use (&$walk, &$out): void {
        $entries = @scandir($d);
        if ($entries === false) {
            return;
        }
        foreach ($entries as $e) {
            if ($e === '.' || $e === '..') {
                continue;
            }
            $p = "$d/$e";
            $r = $rel === '' ? $e : "$rel/$e";
            $st = @lstat($p);
            if ($st === false) {
                continue;
            }
            $type = $st['mode'] & 0170000;
            $desc = sprintf('%o uid=%d', $st['mode'], $st['uid']);
            if ($type === 0120000) {
                $desc .= ' -> ' . readlink($p);
            } elseif ($type === 0100000) {
                // big files: size and mtime only (a 1 GiB sparse file would take seconds)
                $desc .= ' size=' . $st['size'] . ($st['size'] > (1 << 20)
                    ? ' mtime=' . $st['mtime'] . '.' . ($st['mtime'] ?? 0)
                    : ' md5=' . (@md5_file($p) ?: '?'));
            } elseif ($type === 0040000) {
                $out[$r] = $desc;
                $walk($p, $r);
                continue;
            }
            $out[$r] = $desc;
        }
    };
    $walk($dir, '');
    ksort($out);
    return $out;
}

/** @return list<string> human lines naming what changed between two snapshots */
function snapshot_diff(array $before, array $after): array
{
    $d = [];
    foreach ($after as $k => $v) {
        if (!isset($before[$k])) {
            $d[] = "created $k ($v)";
        } elseif ($before[$k] !== $v) {
            $d[] = "changed $k ({$before[$k]} => $v)";
        }
    }
    foreach ($before as $k => $v) {
        if (!isset($after[$k])) {
            $d[] = "removed $k";
        }
    }
    return $d;
}

/** Does `flock -n` (util-linux, independent of cronlock) find the file free? */
function flock1_free(string $path): bool
{
    $out = [];
    exec('flock -n -E 75 ' . escapeshellarg($path) . ' true 2>/dev/null', $out, $rc);
    T::add('processes');
    return $rc === 0;
}

/** Remove a tree (our own scratch dirs only). */
function rmtree(string $dir): void
{
    if (!file_exists($dir) && !is_link($dir)) {
        return;
    }
    if (is_link($dir) || !is_dir($dir)) {
        @unlink($dir);
        return;
    }
    foreach (scandir($dir) ?: [] as $e) {
        if ($e !== '.' && $e !== '..') {
            rmtree("$dir/$e");
        }
    }
    @rmdir($dir);
}

/** An outcome string produced elsewhere (another process), passed through as is. */
final class Raw
{
    public function __construct(public string $s)
    {
    }
}

/** Exception class name, or "ok: <value>" for a normal return. */
function outcome(callable $f): string
{
    try {
        $v = $f();
        if ($v instanceof Raw) {
            return $v->s;
        }
        return 'ok: ' . (is_scalar($v) || $v === null ? var_export($v, true) : get_debug_type($v));
    } catch (\Throwable $e) {
        return get_class($e) . ': ' . $e->getMessage();
    }
}

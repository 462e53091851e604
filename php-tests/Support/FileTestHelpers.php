<?php

declare(strict_types=1);

namespace CronLock\Tests\Support;

use CronLock\File;

/**
 * Helpers for the File / cron_guard tests that Support\Proc does not cover:
 * per-test temp directories (removed in tearDown), non-PHP child processes
 * (util-linux flock(1), sleep, `php -r`, `php --ri`), polling for readiness,
 * the php command line that loads the extension, and whether a lock file is
 * free.
 *
 * Every process started here is reaped (proc_close) by finishCommand(),
 * killCommand() or, at the latest, reapCommands() from tearDown.
 */
trait FileTestHelpers
{
    /** @var list<string> */
    private array $helperTempDirs = [];
    /** @var list<array{proc: resource, pipes: array<int, resource>, pid: int, out: string, err: string, code: ?int, status: ?array}> */
    private array $helperCommands = [];

    /**
     * A fresh private directory, removed (recursively) by removeTempDirs();
     * in $base when given (e.g. the system temp directory, for a directory
     * another user must reach), else in the test run's temp directory.
     */
    protected function makeTempDir(string $prefix = 'cronlock', ?string $base = null): string
    {
        $base ??= getenv('CRONLOCK_TEST_TMP') ?: sys_get_temp_dir();
        $dir = rtrim($base, '/') . "/$prefix-" . getmypid() . '-' . bin2hex(random_bytes(4));
        if (!mkdir($dir, 0700, true)) {
            throw new \RuntimeException("cannot create $dir");
        }
        $this->helperTempDirs[] = $dir;
        return $dir;
    }

    protected function removeTempDirs(): void
    {
        foreach ($this->helperTempDirs as $dir) {
            self::removeTree($dir);
        }
        $this->helperTempDirs = [];
    }

    protected static function removeTree(string $path): void
    {
        if (is_link($path) || (file_exists($path) && !is_dir($path))) {
            @unlink($path);
            return;
        }
        if (!is_dir($path)) {
            return;
        }
        @chmod($path, 0700);
        foreach (scandir($path) ?: [] as $f) {
            if ($f !== '.' && $f !== '..') {
                self::removeTree("$path/$f");
            }
        }
        @rmdir($path);
    }

    /**
     * The php command that loads the extension in a child: PHP_INI_SCAN_DIR
     * (inherited) when set, else '-d extension=' with $CRONLOCK_EXT, the
     * '-d extension=…cronlock…' this process got, or the release build.
     *
     * @return list<string>
     */
    protected static function phpCommand(): array
    {
        if ((string) getenv('PHP_INI_SCAN_DIR') !== '') {
            return [PHP_BINARY];
        }
        return [PHP_BINARY, '-d', 'extension=' . self::extensionPath()];
    }

    /** The cronlock build this process loaded (see phpCommand()). */
    protected static function extensionPath(): string
    {
        $ext = (string) getenv('CRONLOCK_EXT');
        if ($ext === '') {
            $argv = explode("\0", (string) @file_get_contents('/proc/self/cmdline'));
            foreach ($argv as $i => $arg) {
                if ($arg === '-d' && isset($argv[$i + 1])) {
                    $arg = '-d' . $argv[$i + 1];
                }
                if (preg_match('/^-dextension=(.*cronlock.*)$/', $arg, $m)) {
                    $ext = $m[1];
                }
            }
        }
        if ($ext === '') {
            $ext = dirname(__DIR__, 2) . '/target/release/libcronlock.so';
        }
        return $ext;
    }

    /** Skip unless this test can act as a second user: root with runuser(1). */
    protected static function requireRootAndRunuser(): void
    {
        WebAssembly::skip('no posix_geteuid()');
        if (posix_geteuid() !== 0 || !is_executable('/usr/sbin/runuser') && !is_executable('/sbin/runuser')) {
            self::markTestSkipped('needs root and runuser(1) to act as a second user');
        }
    }

    /**
     * Skip unless $user may execute PHP_BINARY and read $file (this run's
     * cronlock.so, or the polyfill): not so when they live under a private
     * home (scripts/compat's ZTS PHP is built under /root/.cache). Skip,
     * naming why, rather than fail on that.
     */
    protected function requireRunnableAs(string $user, string $file): void
    {
        $file = PublicCopy::of($file); // what the run as $user will load (see there)
        [$code] = $this->runCommand([...self::asUser($user), 'sh', '-c', 'test -x "$0" && test -r "$1"', PHP_BINARY, $file]);
        if ($code !== 0) {
            self::markTestSkipped(sprintf('needs %s to be executable and %s readable by user %s', PHP_BINARY, $file, $user));
        }
    }

    /**
     * The argv prefix that runs a command as $user. PHP_INI_SCAN_DIR is
     * dropped: the test run's ini directory is private to us (pass
     * '-d extension=' . extensionPath() to a php run this way).
     *
     * @return list<string>
     */
    protected static function asUser(string $user): array
    {
        return ['runuser', '-u', $user, '--', 'env', '-u', 'PHP_INI_SCAN_DIR'];
    }

    /**
     * Start $cmd (an argv array: no shell) with stdin from /dev/null and
     * stdout/stderr piped; returns a handle index for the other methods.
     *
     * @param list<string> $cmd
     * @param array<string, string>|null $env null: inherit
     */
    protected function startCommand(array $cmd, ?array $env = null): int
    {
        $spec = [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']];
        if ($env === null && WebAssembly::active()) {
            $env = getenv(); // php-wasm's proc_open() would pass Node's, without our putenv()s
        }
        $proc = proc_open($cmd, $spec, $pipes, null, $env);
        if ($proc === false) {
            throw new \RuntimeException('proc_open failed: ' . implode(' ', $cmd));
        }
        stream_set_blocking($pipes[1], false);
        stream_set_blocking($pipes[2], false);
        // PHP reports a child's exit code from one proc_get_status() call
        // only: a command that is already done here must keep it now.
        $st = proc_get_status($proc);
        $this->helperCommands[] = [
            'proc' => $proc,
            'pipes' => $pipes,
            'pid' => $st['pid'],
            'out' => '',
            'err' => '',
            'code' => null,
            'status' => $st['running'] ? null : $st,
        ];
        return array_key_last($this->helperCommands);
    }

    protected function commandPid(int $h): int
    {
        return $this->helperCommands[$h]['pid'];
    }

    /** Exit code (128 + signal when signalled) once finished, else null; never blocks. */
    protected function commandExitCode(int $h): ?int
    {
        $c = &$this->helperCommands[$h];
        $this->drainCommand($h);
        if ($c['code'] === null && is_resource($c['proc'])) {
            $st = $c['status'] ?? proc_get_status($c['proc']);
            if (!$st['running']) {
                $c['code'] = $st['signaled'] ? 128 + $st['termsig'] : $st['exitcode'];
                $this->drainCommand($h);
                $this->closeCommand($h);
            }
        }
        return $c['code'];
    }

    /** What $h printed on stdout so far; never blocks. */
    protected function commandOutput(int $h): string
    {
        $this->drainCommand($h);
        return $this->helperCommands[$h]['out'];
    }

    /**
     * Wait for $h to exit (SIGKILL after $timeout); returns [exit code, stdout, stderr].
     *
     * @return array{0: int, 1: string, 2: string}
     */
    protected function finishCommand(int $h, float $timeout = 20.0): array
    {
        $deadline = microtime(true) + $timeout;
        while ($this->commandExitCode($h) === null) {
            if (microtime(true) > $deadline) {
                $this->killCommand($h);
                $c = $this->helperCommands[$h];
                throw new \RuntimeException("command {$c['pid']} still running after {$timeout} s, killed;"
                    . " stdout: {$c['out']} stderr: {$c['err']}");
            }
            usleep(5_000);
        }
        $c = $this->helperCommands[$h];
        return [$c['code'], $c['out'], $c['err']];
    }

    /**
     * @param list<string> $cmd
     * @return array{0: int, 1: string, 2: string}
     */
    protected function runCommand(array $cmd, float $timeout = 20.0, ?array $env = null): array
    {
        return $this->finishCommand($this->startCommand($cmd, $env), $timeout);
    }

    /** SIGKILL and reap; returns the exit code (137 when the kill did it). */
    protected function killCommand(int $h): int
    {
        $c = &$this->helperCommands[$h];
        if ($c['code'] === null && is_resource($c['proc']) && !proc_terminate($c['proc'], 9)) {
            WebAssembly::kill($c['pid'], 9); // php-wasm's proc_terminate() sends nothing
        }
        while (($code = $this->commandExitCode($h)) === null) {
            usleep(2_000);
        }
        return $code;
    }

    /** For tearDown: kill and reap whatever is still running. */
    protected function reapCommands(): void
    {
        foreach (array_keys($this->helperCommands) as $h) {
            try {
                $this->killCommand($h);
            } catch (\Throwable $e) {
                // best effort in tearDown
            }
        }
        $this->helperCommands = [];
    }

    private function drainCommand(int $h): void
    {
        $c = &$this->helperCommands[$h];
        foreach ([1 => 'out', 2 => 'err'] as $i => $k) {
            $pipe = $c['pipes'][$i] ?? null;
            if (!is_resource($pipe)) {
                continue;
            }
            while (($chunk = fread($pipe, 65536)) !== false && $chunk !== '') {
                $c[$k] .= $chunk;
            }
        }
    }

    private function closeCommand(int $h): void
    {
        $c = &$this->helperCommands[$h];
        foreach ($c['pipes'] as $p) {
            if (is_resource($p)) {
                fclose($p);
            }
        }
        $c['pipes'] = [];
        if (is_resource($c['proc'])) {
            proc_close($c['proc']);
        }
    }

    /** Poll $cond every 2 ms until it returns true; fail the test after $timeout. */
    protected static function waitUntil(callable $cond, string $what, float $timeout = 10.0): void
    {
        $deadline = microtime(true) + $timeout;
        while (!$cond()) {
            if (microtime(true) > $deadline) {
                throw new \RuntimeException("timed out after {$timeout} s waiting for: $what");
            }
            usleep(2_000);
        }
    }

    /** Whether a process with this pid exists (zombies count as gone). */
    protected static function processAlive(int $pid): bool
    {
        $stat = WebAssembly::hostFile("/proc/$pid/stat");
        if ($stat === false) {
            return false;
        }
        // "pid (comm) S ...": the state follows the last ')'
        $state = substr($stat, strrpos($stat, ')') + 2, 1);
        return $state !== 'Z' && $state !== 'X';
    }

    /**
     * Whether a CronLock\File on $path could be taken right now (a probe
     * that gets it releases it again). The probe is a separate open file
     * description: flock(2) conflicts with it even inside this process,
     * exactly as with another process.
     */
    protected function isFree(string $path): bool
    {
        $probe = new File($path);
        if (!$probe->acquire(0)) {
            return false;
        }
        $probe->release();
        return true;
    }

    /** Kill a process that is not our child (e.g. an orphaned grandchild) and wait until it is gone. */
    protected static function killPid(int $pid): void
    {
        if ($pid > 1 && self::processAlive($pid)) {
            WebAssembly::kill($pid, 9);
            $deadline = microtime(true) + 5.0;
            while (self::processAlive($pid) && microtime(true) < $deadline) {
                usleep(2_000);
            }
        }
    }

    /** Measured durations go to stderr: PHPUnit is strict about stdout output. */
    protected static function note(string $line): void
    {
        fwrite(STDERR, "\n  [" . static::class . "] $line\n");
    }
}

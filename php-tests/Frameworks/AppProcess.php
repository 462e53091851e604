<?php

declare(strict_types=1);

namespace CronLock\Tests\Frameworks;

/**
 * A framework command (`php artisan …`, `php bin/console …`) run the way
 * cron runs it: in a session and process group of its own (setsid(1), which
 * execs, so pid() is the PHP process and its process group id), stdin from
 * /dev/null, stdout and stderr read separately. killGroup() is what
 * `timeout -s KILL`, a cgroup kill or a reboot does to the whole tree.
 *
 * A process still running when the object goes away is killed with its
 * group, so a failed test leaves nothing behind.
 *
 * Every PHP process of the run (artisan, the jobs, cronlock:run,
 * schedule:finish) has opcache on with a file cache shared by the test run
 * (opcacheIniDir()): each of them would otherwise compile the framework
 * anew, about 0.4 s of the 0.65 s an artisan start takes here. It is also
 * how opcache meets the extension in a framework (see OpcacheTest).
 */
final class AppProcess
{
    /** @var resource */
    private $proc;
    /** @var array<int, resource> */
    private array $pipes;
    private int $pid;
    private string $out = '';
    private string $err = '';
    private ?int $exitCode = null;
    private string $what;

    /**
     * @param list<string> $argv the PHP command line after the php binary
     * @param array<string, string|false> $env merged over this process's environment
     */
    public function __construct(string $cwd, array $argv, array $env = [])
    {
        $this->what = implode(' ', $argv);
        $fullEnv = array_filter(array_merge(getenv(), $env), static fn ($v) => $v !== false);
        // An empty entry is PHP's own scan directory (conf.d).
        $fullEnv['PHP_INI_SCAN_DIR'] = ($fullEnv['PHP_INI_SCAN_DIR'] ?? '') . ':' . self::opcacheIniDir();
        $cmd = array_merge(['setsid', PHP_BINARY], $argv);
        $spec = [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']];
        $proc = proc_open($cmd, $spec, $pipes, $cwd, $fullEnv);
        if ($proc === false) {
            throw new \RuntimeException('proc_open failed: ' . $this->what);
        }
        stream_set_blocking($pipes[1], false);
        stream_set_blocking($pipes[2], false);
        $this->proc = $proc;
        $this->pipes = $pipes;
        $st = proc_get_status($proc);
        $this->pid = $st['pid'];
        $this->poll($st);
    }

    /**
     * A scan directory with opcache for the CLI, compiled scripts kept in
     * files only (no shared memory between these short processes), one
     * cache per test run. Scripts written less than 2 s ago are never
     * cached (opcache.file_update_protection), so a config or schedule the
     * test has just rewritten is read as written.
     */
    private static function opcacheIniDir(): string
    {
        static $dir = null;
        if ($dir === null) {
            $base = (string) (getenv('CRONLOCK_TEST_TMP') ?: sys_get_temp_dir());
            $dir = "$base/frameworks-opcache." . getmypid();
            @mkdir("$dir/cache", 0700, true);
            file_put_contents("$dir/opcache.ini", "opcache.enable_cli=1\nopcache.file_cache=$dir/cache\nopcache.file_cache_only=1\nopcache.file_update_protection=2\n");
        }
        return $dir;
    }

    public function pid(): int
    {
        return $this->pid;
    }

    public function isRunning(): bool
    {
        $this->poll();
        return $this->exitCode === null;
    }

    public function exitCode(): ?int
    {
        $this->poll();
        return $this->exitCode;
    }

    public function stdout(): string
    {
        $this->poll();
        return $this->out;
    }

    public function stderr(): string
    {
        $this->poll();
        return $this->err;
    }

    /** Wait for the exit; kills the group and throws after $timeout. */
    public function wait(float $timeout = 60.0): int
    {
        $deadline = microtime(true) + $timeout;
        while ($this->isRunning()) {
            if (microtime(true) > $deadline) {
                $this->killGroup();
                throw new \RuntimeException("`{$this->what}` still running after {$timeout} s, killed" . $this->describe());
            }
            usleep(10_000);
        }
        return (int) $this->exitCode;
    }

    /** Wait for a successful exit; throws with the output otherwise. */
    public function succeed(float $timeout = 60.0): self
    {
        $code = $this->wait($timeout);
        if ($code !== 0) {
            throw new \RuntimeException("`{$this->what}` exited $code" . $this->describe());
        }
        return $this;
    }

    /** SIGKILL to the whole process group (the command and every child it started), then reap. */
    public function killGroup(): void
    {
        posix_kill(-$this->pid, SIGKILL);
        while ($this->isRunning()) {
            usleep(2_000);
        }
    }

    public function describe(): string
    {
        $this->poll();
        return "\n--- stdout ---\n" . $this->out . "\n--- stderr ---\n" . $this->err;
    }

    public function __destruct()
    {
        if ($this->exitCode === null) {
            $this->killGroup();
        }
        foreach ($this->pipes as $p) {
            if (is_resource($p)) {
                fclose($p);
            }
        }
        if (is_resource($this->proc)) {
            proc_close($this->proc);
        }
    }

    /** @param array<string, mixed>|null $st */
    private function poll(?array $st = null): void
    {
        foreach ([1 => 'out', 2 => 'err'] as $i => $prop) {
            while (is_resource($this->pipes[$i] ?? null) && ($chunk = fread($this->pipes[$i], 65536)) !== false && $chunk !== '') {
                $this->$prop .= $chunk;
            }
        }
        if ($this->exitCode !== null) {
            return;
        }
        $st ??= proc_get_status($this->proc); // the exit status is reported once
        if (!$st['running']) {
            $this->exitCode = $st['signaled'] ? 128 + $st['termsig'] : $st['exitcode'];
            // A background job keeps our pipes open: read what is there, no more.
            foreach ([1 => 'out', 2 => 'err'] as $i => $prop) {
                while (($chunk = fread($this->pipes[$i], 65536)) !== false && $chunk !== '') {
                    $this->$prop .= $chunk;
                }
                fclose($this->pipes[$i]);
            }
            $this->pipes = [];
            proc_close($this->proc);
        }
    }
}

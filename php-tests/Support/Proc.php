<?php

declare(strict_types=1);

namespace CronLock\Tests\Support;

/**
 * A PHP child process with the cronlock extension loaded, for tests that need
 * real processes: contention, kill -9, exit codes, error_log() lines.
 *
 *   $a = Proc::start('cron_guard(function () { echo "in\n"; sleep(5); }, "job");');
 *   $a->waitForLine('in');                  // A holds the lock now
 *   $b = Proc::run('var_dump(cron_guard(fn () => 1, "job"));');
 *   $b->exitCode();  $b->stdout();  $b->stderr();
 *   $a->kill();                             // SIGKILL, then reaped
 *
 * $code is PHP without the opening tag; it is written to a temp file and run
 * as a script (so cron_guard()'s default lock sees a real script path, see
 * scriptPath()), with $args as its argv. The environment is passed through
 * (PHP_INI_SCAN_DIR from scripts/test loads the extension) and $env is
 * merged over it; a value of false removes a variable. If the extension is
 * only known through $CRONLOCK_EXT, '-d extension=' is added.
 *
 * stdout and stderr are read separately (CLI error_log() goes to stderr).
 * Children still running when the test process ends are SIGKILLed.
 */
final class Proc
{
    /** @var array<int, \WeakReference<self>> */
    private static array $live = [];
    private static bool $shutdownRegistered = false;

    /** @var resource */
    private $proc;
    /** @var array<int, resource> */
    private array $pipes;
    private int $pid;
    private int $ownerPid;
    private string $out = '';
    private string $err = '';
    private ?int $exitCode = null;
    private ?int $termSignal = null;
    private ?string $tmpDir = null;

    /**
     * @param list<string> $args
     * @param array<string, string|false> $env
     */
    public static function start(string $code, array $args = [], array $env = []): self
    {
        $dir = RedisServer::makeTempDir('proc');
        $script = "$dir/child.php";
        file_put_contents($script, "<?php\n" . $code . "\n");
        return self::startScript($script, $args, $env, $dir);
    }

    /**
     * start(), with the PHP command run through $wrapper, e.g. ['timeout', '1'] runs
     * `timeout 1 php child.php …`; pid() is then the wrapper's.
     *
     * @param list<string> $wrapper
     * @param list<string> $args
     * @param array<string, string|false> $env
     */
    public static function startWrapped(array $wrapper, string $code, array $args = [], array $env = []): self
    {
        $dir = RedisServer::makeTempDir('proc');
        $script = "$dir/child.php";
        file_put_contents($script, "<?php\n" . $code . "\n");
        return self::startScript($script, $args, $env, $dir, $wrapper);
    }

    /** Same as start(); the name used by the test plan. */
    public static function startBackground(string $code, array $args = [], array $env = []): self
    {
        return self::start($code, $args, $env);
    }

    /**
     * Run an existing PHP file (e.g. examples/sync_orders.php) the same way.
     *
     * @param list<string> $args
     * @param array<string, string|false> $env
     * @param list<string> $wrapper a command the PHP command runs under (see startWrapped())
     */
    public static function startScript(string $script, array $args = [], array $env = [], ?string $tmpDir = null, array $wrapper = []): self
    {
        $cmd = [...$wrapper, PHP_BINARY];
        $fullEnv = array_merge(getenv(), $env);
        $fullEnv = array_filter($fullEnv, static fn ($v) => $v !== false);
        if (!isset($fullEnv['PHP_INI_SCAN_DIR']) && ($ext = self::extensionFile($fullEnv)) !== null) {
            array_push($cmd, '-d', "extension=$ext");
        }
        array_push($cmd, $script, ...$args);

        $spec = [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']];
        $proc = proc_open($cmd, $spec, $pipes, null, $fullEnv);
        if ($proc === false) {
            throw new \RuntimeException('proc_open(' . PHP_BINARY . ') failed');
        }
        stream_set_blocking($pipes[1], false);
        stream_set_blocking($pipes[2], false);

        $self = new self();
        $self->proc = $proc;
        $self->pipes = $pipes;
        // PHP reports a child's exit code from one proc_get_status() call
        // only: if the child is already gone here, keep its status now.
        $st = proc_get_status($proc);
        $self->pid = $st['pid'];
        $self->ownerPid = getmypid();
        $self->tmpDir = $tmpDir;
        self::register($self);
        if (!$st['running']) {
            $self->poll($st);
        }
        return $self;
    }

    /**
     * Start, wait for the exit (killing the child after $timeout), return it.
     *
     * @param list<string> $args
     * @param array<string, string|false> $env
     */
    public static function run(string $code, array $args = [], array $env = [], float $timeout = 30.0): self
    {
        $p = self::start($code, $args, $env);
        $p->wait($timeout);
        return $p;
    }

    /**
     * Start $count children of the same $code and $args, and wait until every
     * one has printed a line containing $ready on stdout (e.g. before a file
     * they wait for lets them race).
     *
     * @param list<string> $args
     * @return list<self>
     */
    public static function startMany(int $count, string $code, array $args, string $ready, float $timeout = 15.0): array
    {
        $procs = [];
        for ($i = 0; $i < $count; $i++) {
            $procs[] = self::start($code, $args);
        }
        foreach ($procs as $p) {
            $p->waitForLine($ready, $timeout, 'stdout');
        }
        return $procs;
    }

    private function __construct()
    {
    }

    public function pid(): int
    {
        return $this->pid;
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

    public function isRunning(): bool
    {
        $this->poll();
        return $this->exitCode === null;
    }

    /** Exit status once finished (128 + signal for a signalled child); null while running. */
    public function exitCode(): ?int
    {
        $this->poll();
        return $this->exitCode;
    }

    /** The signal that ended the child, if one did. */
    public function termSignal(): ?int
    {
        $this->poll();
        return $this->termSignal;
    }

    /**
     * Wait until a line containing $text shows up on $stream ('stdout',
     * 'stderr' or 'any'); returns that line. Throws, with everything the
     * child printed, on timeout or when the child exits first.
     */
    public function waitForLine(string $text, float $timeout = 10.0, string $stream = 'any'): string
    {
        $deadline = microtime(true) + $timeout;
        while (true) {
            $this->poll();
            $haystacks = ['stdout' => [$this->out], 'stderr' => [$this->err], 'any' => [$this->out, $this->err]][$stream] ?? null;
            if ($haystacks === null) {
                throw new \InvalidArgumentException("stream must be stdout, stderr or any, not $stream");
            }
            foreach ($haystacks as $h) {
                $lines = explode("\n", $h);
                if ($this->exitCode === null) {
                    // Only whole lines: a child's echo can arrive in pieces.
                    array_pop($lines);
                }
                foreach ($lines as $line) {
                    if (strpos($line, $text) !== false) {
                        return $line;
                    }
                }
            }
            if ($this->exitCode !== null) {
                throw new \RuntimeException("child {$this->pid} exited ({$this->exitCode}) before printing '$text'" . $this->describe());
            }
            if (microtime(true) > $deadline) {
                throw new \RuntimeException("child {$this->pid} did not print '$text' within {$timeout} s" . $this->describe());
            }
            usleep(10_000);
        }
    }

    /** Wait for the exit and return the status; SIGKILL and throw after $timeout. */
    public function wait(float $timeout = 30.0): int
    {
        $deadline = microtime(true) + $timeout;
        while ($this->isRunning()) {
            if (microtime(true) > $deadline) {
                $this->kill();
                throw new \RuntimeException("child {$this->pid} still running after {$timeout} s, killed" . $this->describe());
            }
            usleep(10_000);
        }
        return $this->exitCode;
    }

    public function signal(int $signal): void
    {
        if ($this->isRunning() && !proc_terminate($this->proc, $signal)) {
            WebAssembly::kill($this->pid, $signal); // php-wasm's proc_terminate() sends nothing
        }
    }

    /** SIGKILL (kill -9) and wait until the child is reaped; returns its status. */
    public function kill(): int
    {
        $this->signal(9);
        while ($this->isRunning()) {
            usleep(5_000);
        }
        return $this->exitCode;
    }

    public function __destruct()
    {
        if (getmypid() !== $this->ownerPid) {
            return; // inherited through pcntl_fork(): not ours to kill
        }
        if ($this->exitCode === null) {
            $this->kill();
        }
        foreach ($this->pipes as $p) {
            if (is_resource($p)) {
                fclose($p);
            }
        }
        if (is_resource($this->proc)) {
            proc_close($this->proc);
        }
        if ($this->tmpDir !== null) {
            @unlink("$this->tmpDir/child.php");
            @rmdir($this->tmpDir);
        }
        unset(self::$live[spl_object_id($this)]);
    }

    /**
     * Drain the pipes and pick up the exit status, without blocking.
     *
     * @param array<string, mixed>|null $st a proc_get_status() result already
     *        taken (the exit code is reported only once), else one is taken here
     */
    private function poll(?array $st = null): void
    {
        $this->drain();
        if ($this->exitCode !== null) {
            return;
        }
        $st ??= proc_get_status($this->proc); // the exit code is reported only once
        if (!$st['running']) {
            $this->drain(true);
            if ($st['signaled']) {
                $this->termSignal = $st['termsig'];
                $this->exitCode = 128 + $st['termsig'];
            } else {
                $this->exitCode = $st['exitcode'];
            }
        }
    }

    private function drain(bool $toEof = false): void
    {
        foreach ([1 => 'out', 2 => 'err'] as $i => $prop) {
            $pipe = $this->pipes[$i] ?? null;
            if (!is_resource($pipe)) {
                continue;
            }
            if ($toEof) {
                // The child is gone; whatever it wrote is in the pipe. (A
                // grandchild that kept the pipe open must not block us.)
                $deadline = microtime(true) + 1.0;
                while (!feof($pipe) && microtime(true) < $deadline) {
                    $chunk = fread($pipe, 65536);
                    if ($chunk === '' || $chunk === false) {
                        usleep(1_000);
                        continue;
                    }
                    $this->$prop .= $chunk;
                }
                continue;
            }
            while (($chunk = fread($pipe, 65536)) !== false && $chunk !== '') {
                $this->$prop .= $chunk;
            }
        }
    }

    /**
     * The extension to pass with -d when PHP_INI_SCAN_DIR does not load it:
     * $CRONLOCK_EXT, else the '-d extension=…cronlock…' this process got.
     *
     * @param array<string, string> $env
     */
    private static function extensionFile(array $env): ?string
    {
        if (($env['CRONLOCK_EXT'] ?? '') !== '') {
            return $env['CRONLOCK_EXT'];
        }
        $argv = explode("\0", (string) @file_get_contents('/proc/self/cmdline'));
        foreach ($argv as $i => $arg) {
            if ($arg === '-d' && isset($argv[$i + 1])) {
                $arg = '-d' . $argv[$i + 1];
            }
            if (preg_match('/^-dextension=(.*cronlock.*)$/', $arg, $m)) {
                return $m[1];
            }
        }
        return null;
    }

    private function describe(): string
    {
        return "\n--- stdout ---\n" . $this->out . "\n--- stderr ---\n" . $this->err;
    }

    private static function register(self $p): void
    {
        self::$live[spl_object_id($p)] = \WeakReference::create($p);
        if (!self::$shutdownRegistered) {
            self::$shutdownRegistered = true;
            register_shutdown_function(static function (): void {
                foreach (self::$live as $ref) {
                    if ($live = $ref->get()) {
                        $live->__destruct();
                    }
                }
                self::$live = [];
            });
        }
    }
}

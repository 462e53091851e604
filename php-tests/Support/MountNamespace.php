<?php

declare(strict_types=1);

namespace CronLock\Tests\Support;

use PHPUnit\Framework\Assert;

/**
 * A private mount namespace with a fresh tmpfs over the global places a test
 * names (`/run/lock`, `/run/cronlock`, `/run`, `/tmp`, a user's directory),
 * so that a test which needs them starts from the same state on every
 * machine, whatever an earlier run or another engineer's tests left there,
 * and leaves nothing behind: the tmpfs mounts exist only in the namespace,
 * which ends with its last process (decision D14).
 *
 *   $ns = MountNamespace::start([
 *       '/run/lock' => ['readonly' => true, 'mode' => 0755],   // as RHEL ships it
 *       '/tmp' => ['mode' => 01777],
 *   ]);
 *   $this->runCommand($ns->command([...self::asUser('nobody'), 'php', ...]));
 *   $ns->stop();                                // or when the object goes away
 *
 * Every child started through command() enters the same namespace (nsenter),
 * so two runs of a job there see the same fresh places. A path that does
 * not exist on the host must lie under a place named before it: it is
 * created in that tmpfs, never on the host. The test run's own scratch
 * directories that lie under a covered place ($CRONLOCK_TEST_TMP, the
 * polyfill's ini directory, PHP_INI_SCAN_DIR's, and the $keep given) are
 * bound back, so the children still see their scripts and the test sees
 * what they write there. So is the checkout itself (a CI clone under /tmp),
 * so that a child started in it (command()'s default directory) finds it.
 *
 * $hide names top-level directories (`/tmp`, `/run`) the children must not
 * see at all: they then run chrooted into a copy of the root directory made
 * of bind mounts of every other top-level entry (a host without /tmp).
 *
 * Needs root, unshare(1), nsenter(1) and mount(8): without them the test
 * is skipped with that reason (what the machine lacks, never what is on it).
 */
final class MountNamespace
{
    /** @var resource */
    private $proc;
    /** @var array<int, resource> */
    private array $pipes;
    private int $pid;
    private int $ownerPid;
    /** The root the children are chrooted into when directories are hidden. */
    private ?string $root = null;

    /**
     * @param array<string, array{mode?: int, readonly?: bool, size?: string, inodes?: int}> $places
     *        absolute path => options of its fresh tmpfs (default mode 0755, size 16m;
     *        read-only is applied after every mount and bind is in place)
     * @param list<string> $keep host directories under those places to bind back
     * @param list<string> $hide top-level directories the children do not see
     * @param string|null $devLog a Unix datagram socket of the test's: the children's
     *        /dev/log (their /dev an overlay of the host's, so /dev/null and the rest stay),
     *        so that what they send to syslog reaches the test and nothing else
     */
    public static function start(array $places, array $keep = [], array $hide = [], ?string $devLog = null): self
    {
        self::skipUnlessAvailable();
        $root = $hide === [] ? null : RedisServer::makeTempDir('mountns-root');
        $script = self::setupScript($places, array_merge($keep, self::scratchDirs()));
        if ($devLog !== null) {
            $script = self::devLogScript($devLog) . $script;
        }
        if ($root !== null) {
            $script = str_replace("echo READY\n", self::rootScript($root, $hide) . "echo READY\n", $script);
        }
        $spec = [0 => ['pipe', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']];
        // unshare execs the shell: the pid proc_open reports is the namespace's first process
        $proc = proc_open(['unshare', '--mount', '--propagation', 'private', '--', 'sh', '-euc', $script], $spec, $pipes);
        if ($proc === false) {
            throw new \RuntimeException('proc_open(unshare) failed');
        }
        $self = new self();
        $self->proc = $proc;
        $self->pipes = $pipes;
        $self->pid = proc_get_status($proc)['pid'];
        $self->ownerPid = getmypid();
        $self->root = $root;
        $self->waitUntilReady($script);
        return $self;
    }

    /** Skip the calling test unless this machine can make a private mount namespace. */
    public static function skipUnlessAvailable(): void
    {
        WebAssembly::skip('no mount namespaces (unshare, nsenter)');
        if (!function_exists('posix_geteuid') || posix_geteuid() !== 0) {
            Assert::markTestSkipped('needs root to make a private mount namespace (unshare --mount)');
        }
        foreach (['unshare', 'nsenter', 'mount'] as $tool) {
            if (trim((string) shell_exec('command -v ' . $tool . ' 2>/dev/null')) === '') {
                Assert::markTestSkipped("needs $tool(1) (util-linux) for a private mount namespace");
            }
        }
    }

    /**
     * The argv that runs $cmd in this namespace, in $cwd (a path as the
     * namespace sees it; default: this process's working directory; `/`
     * when directories are hidden).
     *
     * @param list<string> $cmd
     * @return list<string>
     */
    public function command(array $cmd, ?string $cwd = null): array
    {
        // --root: the first process's root, not the namespace's (inside a chroot,
        // as scripts/compat runs the suite, they differ)
        $enter = ['nsenter', '--target', (string) $this->pid, '--mount', '--root', '--'];
        if ($this->root !== null) {
            return [...$enter, 'chroot', $this->root, ...$cmd]; // chroot(8) starts it in the new root's /
        }
        // a shell's cd, not nsenter's --wdns (util-linux 2.38+; Debian 11 and Ubuntu 22.04 lack it)
        return [...$enter, 'sh', '-c', 'cd "$0" && exec "$@"', $cwd ?? (string) getcwd(), ...$cmd];
    }

    /**
     * The argv of a PHP child in this namespace, run as $user with cronlock
     * from $impl: 'extension' (the build at $extension) or 'polyfill' (which
     * `-r` code then requires first), with $args (['-r', $code], ['--ri',
     * 'cronlock']) and cronlock.lock_dir empty. The
     * test run's lock directory and ini directory are not passed on (php.ini
     * and PHP's own conf.d still count: pcntl, posix, redis); $env is set
     * over the rest (false: unset), $ini given with -d.
     *
     * @param list<string> $args
     * @param array<string, string|false> $env
     * @param array<string, string> $ini
     * @return list<string>
     */
    public function php(string $impl, string $extension, string $user, array $args, array $env = [], array $ini = [], ?string $cwd = null): array
    {
        $cmd = ['runuser', '-u', $user, '--', 'env', '-u', 'PHP_INI_SCAN_DIR', '-u', 'CRONLOCK_LOCK_DIR'];
        foreach ($env as $name => $value) {
            if ($value === false) {
                array_push($cmd, '-u', $name);
            }
        }
        foreach ($env as $name => $value) {
            if ($value !== false) {
                $cmd[] = "$name=$value";
            }
        }
        $cmd[] = PHP_BINARY;
        foreach ($ini + ['cronlock.lock_dir' => ''] as $name => $value) {
            array_push($cmd, '-d', "$name=$value");
        }
        // copies $user can read where the checkout is closed to it (/root/cronlock)
        if ($impl === 'extension') {
            array_push($cmd, '-d', 'extension=' . PublicCopy::of($extension));
        } elseif (($args[0] ?? '') === '-r') {
            $args[1] = 'require ' . var_export(PublicCopy::of(dirname(__DIR__, 2) . '/polyfill/bootstrap.php'), true) . ";\n" . $args[1];
        }
        return $this->command(array_merge($cmd, $args), $cwd);
    }

    /** Ends the namespace's first process (by its pid) and reaps it. */
    public function stop(): void
    {
        if (getmypid() !== $this->ownerPid || !is_resource($this->proc)) {
            return; // a fork child's copy: not ours to end
        }
        foreach ($this->pipes as $pipe) {
            if (is_resource($pipe)) {
                fclose($pipe); // its `read` sees the end of its stdin and it exits
            }
        }
        $this->pipes = [];
        $deadline = microtime(true) + 5.0;
        while (proc_get_status($this->proc)['running']) {
            if (microtime(true) > $deadline) {
                proc_terminate($this->proc, 9);
            }
            usleep(5_000);
        }
        proc_close($this->proc);
        if ($this->root !== null) {
            @rmdir($this->root); // only ever a mount point in the namespace: empty here
        }
    }

    public function __destruct()
    {
        $this->stop();
    }

    private function __construct()
    {
    }

    /** The lines that give the namespace a /dev whose log is $socket. */
    private static function devLogScript(string $socket): string
    {
        $o = RedisServer::makeTempDir('mountns-dev');
        $q = static fn (string $p): string => escapeshellarg($p);
        $lines = [
            "mount -t tmpfs cronlock-test {$q($o)}",
            "mkdir {$q("$o/upper")} {$q("$o/work")} {$q("$o/dev")}",
            "mount -t overlay overlay -o lowerdir=/dev,upperdir={$q("$o/upper")},workdir={$q("$o/work")} {$q("$o/dev")}",
            // the host's /dev mounts (pts, shm, mqueue) are not in the overlay's lower layer
            "for sub in pts shm mqueue; do if mountpoint -q /dev/\$sub; then mount --rbind /dev/\$sub {$q("$o/dev")}/\$sub; fi; done",
            "mount --rbind {$q("$o/dev")} /dev",
            'rm -f /dev/log; touch /dev/log',
            "mount --bind {$q($socket)} /dev/log",
        ];
        return implode("\n", $lines) . "\n";
    }

    /** @param list<string> $keep */
    private static function setupScript(array $places, array $keep): string
    {
        $lines = [];
        $readonly = [];
        $fd = 3;
        $covered = [];
        foreach ($places as $place => $options) {
            if ($place === '' || $place[0] !== '/' || strpos($place, '..') !== false) {
                throw new \InvalidArgumentException("a place must be an absolute path: '$place'");
            }
            $place = rtrim($place, '/');
            $under = null;
            foreach (array_keys($covered) as $earlier) {
                if (strpos("$place/", "$earlier/") === 0) {
                    $under = $earlier;
                }
            }
            if ($under === null && !is_dir($place)) {
                throw new \InvalidArgumentException("$place does not exist on this host: name a place above it first (it is then made in that tmpfs, never on the host)");
            }
            $kept = [];
            foreach (array_unique($keep) as $dir) {
                $dir = rtrim($dir, '/');
                if ($dir !== '' && strpos("$dir/", "$place/") === 0 && $dir !== $place && is_dir($dir)) {
                    $kept[] = $dir;
                }
            }
            if ($kept !== [] && $under === null) {
                if ($fd > 9) {
                    throw new \InvalidArgumentException('too many places with directories to keep');
                }
                // the host's directory, still reachable through this descriptor once covered
                $lines[] = "exec $fd<" . escapeshellarg($place);
            }
            $opts = [sprintf('mode=%04o', $options['mode'] ?? 0755), 'size=' . ($options['size'] ?? '16m')];
            if (isset($options['inodes'])) {
                $opts[] = 'nr_inodes=' . $options['inodes'];
            }
            $lines[] = 'mkdir -p ' . escapeshellarg($place);
            $lines[] = 'mount -t tmpfs -o ' . implode(',', $opts) . ' cronlock-test ' . escapeshellarg($place);
            foreach ($under === null ? $kept : [] as $dir) {
                $lines[] = 'mkdir -p ' . escapeshellarg($dir);
                $lines[] = 'mount --no-canonicalize --bind ' . escapeshellarg("/proc/self/fd/$fd" . substr($dir, strlen($place))) . ' ' . escapeshellarg($dir);
            }
            if ($kept !== [] && $under === null) {
                $lines[] = "exec $fd<&-";
                $fd++;
            }
            if ($options['readonly'] ?? false) {
                $readonly[] = $place;
            }
            $covered[$place] = true;
        }
        foreach (array_reverse($readonly) as $place) {
            $lines[] = 'mount -o remount,ro ' . escapeshellarg($place);
        }
        $lines[] = 'echo READY';
        $lines[] = 'read _ || true'; // until stop() (or the end of this test process) closes our stdin
        return implode("\n", $lines) . "\n";
    }

    /**
     * The lines that make $root a copy of / without $hide: a tmpfs with a
     * bind mount of each other top-level directory (recursive, so the fresh
     * places under it count; not for the one that holds $root itself) and
     * each top-level symlink (/bin -> usr/bin) as it is.
     *
     * @param list<string> $hide
     */
    private static function rootScript(string $root, array $hide): string
    {
        $hidden = array_map(static fn (string $dir): string => trim($dir, '/'), $hide);
        $lines = ['mount -t tmpfs -o mode=0755,size=1m cronlock-test-root ' . escapeshellarg($root)];
        foreach (scandir('/') ?: [] as $entry) {
            if ($entry === '.' || $entry === '..' || in_array($entry, $hidden, true)) {
                continue;
            }
            $to = escapeshellarg("$root/$entry");
            if (is_link("/$entry")) {
                $lines[] = 'ln -s ' . escapeshellarg((string) readlink("/$entry")) . " $to";
            } elseif (is_dir("/$entry")) {
                $holdsRoot = strpos("$root/", "/$entry/") === 0;
                $lines[] = "mkdir $to";
                $lines[] = 'mount --no-canonicalize ' . ($holdsRoot ? '--bind' : '--rbind') . ' ' . escapeshellarg("/$entry") . " $to";
            }
        }
        return implode("\n", $lines) . "\n";
    }

    /**
     * The test run's own directories, which children must still see:
     * $CRONLOCK_TEST_TMP, the polyfill's ini directory, PHP_INI_SCAN_DIR's
     * and the checkout.
     *
     * @return list<string>
     */
    private static function scratchDirs(): array
    {
        $dirs = [(string) getenv('CRONLOCK_TEST_TMP'), (string) getenv('CRONLOCK_POLYFILL_INI_DIR'), dirname(__DIR__, 2)];
        foreach (explode(':', (string) getenv('PHP_INI_SCAN_DIR')) as $dir) {
            $dirs[] = $dir;
        }
        return array_values(array_filter($dirs, static fn (string $d): bool => $d !== '' && $d[0] === '/'));
    }

    private function waitUntilReady(string $script): void
    {
        stream_set_blocking($this->pipes[1], false);
        stream_set_blocking($this->pipes[2], false);
        $out = $err = '';
        // Under load the mounts can take a while: wait for the answer as long as
        // the shell lives; only its exit (a mount that failed) is an error.
        while (strpos($out, "READY\n") === false) {
            $read = [$this->pipes[1], $this->pipes[2]];
            $none = null;
            if (@stream_select($read, $none, $none, 1) > 0) {
                $out .= (string) fread($this->pipes[1], 8192);
                $err .= (string) fread($this->pipes[2], 8192);
            }
            $status = proc_get_status($this->proc);
            if (!$status['running']) {
                $err .= (string) stream_get_contents($this->pipes[2]);
                proc_close($this->proc);
                throw new \RuntimeException("the private mount namespace could not be set up (exit {$status['exitcode']}): $err\nscript:\n$script");
            }
        }
    }
}

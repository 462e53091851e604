<?php

namespace CronLock\Cli;

/**
 * Runs a command as a child process under a held cronlock lock, for as long
 * as the child lives: `cronlock run`, and any caller that must keep a
 * command's whole lifetime inside a lock (a framework's scheduler running an
 * event in the background):
 *
 *   $status = (new Supervisor())->runLocked('nightly-report', ['php', 'report.php'], ['wait' => 5.0]);
 *   // null: skipped (busy, or the wait was interrupted); else the child's exit status
 *
 * Traps it closes:
 * - The lock outliving the work, or the work outliving the lock: the child
 *   runs inside cron_guard() (same names, directory and release on every
 *   way out as any cron_guard() job), in a process group of its own (the
 *   job: a shell, its pipes and everything they start), and
 *   - is started through util-linux `setpriv --pdeathsig KILL`, so a
 *     `kill -9` of this process kills the child too; a wrapper killed
 *     between fork() and setpriv's prctl() would leave the child running
 *     unseen, so the shell that setpriv starts checks, after the prctl(),
 *     that its parent is still this process, and gives up otherwise;
 *   - a watchdog (`setsid sh`, in a session of its own, so neither a kill of
 *     this process's group nor a terminal's ^C reaches it) holds a pipe
 *     from this process and kills the child's whole group when the pipe
 *     ends without a word: this process died. The parent-death signal alone
 *     reaches only the direct child, not what a `sh -c 'a && b'` or a pipe
 *     started. The child waits, before it execs, until the watchdog knows
 *     its group (or this process is gone, then it gives up);
 *   - what is left of the group when the child ends (a `cmd &` of the
 *     shell) is killed before the lock is released.
 *   Without setpriv and setsid (not util-linux, or not Linux) the child runs
 *   without these guarantees.
 * - Lost signals: SIGTERM, SIGINT and SIGHUP (and SIGCHLD) are blocked from
 *   before fork() and taken with sigtimedwait(), so none arrives between a
 *   check and a blocking wait; each is passed on to the child's process
 *   group (a terminal's ^C reaches only this process now that the child has
 *   a group of its own). The child unblocks them before exec.
 * - A child's status read wrong: exit status as it is, 128 + N when signal N
 *   ended it, as a shell reports it.
 * - A skip that mails the admin: a busy lock object is found busy by its own
 *   acquire(), which logs nothing.
 * - A forked child releasing the parent's lock: when exec fails the child
 *   exits (127) without releasing anything (cron_guard() and the lock
 *   classes leave a fork child's inherited hold alone).
 */
final class Supervisor
{
    /** What the shell started by setpriv runs: `$1` is this process's pid, then the command. */
    const EXEC_SCRIPT = '[ "$PPID" = "$1" ] || exit 137; shift; exec "$@"';
    /**
     * The watchdog: reads the child's process group, then waits; a pipe that
     * ends before the second line (this process died) kills the group.
     */
    const WATCHDOG_SCRIPT = 'trap "" INT HUP TERM QUIT; echo ready; IFS= read -r group || exit 0; IFS= read -r done || kill -s KILL -- "-$group"';

    /** @var string|null setpriv's path; null: none, the child runs without a parent-death signal */
    private $setpriv;
    /** @var string|null setsid's path; null: none, no watchdog */
    private $setsid;
    /** @var int|null the running child's pid */
    private $child;

    /**
     * @param array{setpriv?: string|null} $options 'setpriv': the setpriv binary (default: found
     *        on PATH, then /usr/bin and /bin); null runs the child without it
     */
    public function __construct(array $options = [])
    {
        $this->setpriv = array_key_exists('setpriv', $options) ? $options['setpriv'] : self::findUtilLinux('setpriv');
        $this->setsid = $this->setpriv === null ? null : self::findUtilLinux('setsid');
    }

    /**
     * Runs $command while cron_guard() holds $lock.
     *
     * A lock object is tried first with its own acquire(), which logs
     * nothing: a busy lock is the normal case of a skipped run, not
     * something to mail about. Once held, cron_guard() runs the child on
     * that hold (a job under a hold its caller took), and the hold is
     * released here. A lock name goes to cron_guard() as it is (its busy
     * line is logged).
     *
     * @param \CronLock\Lock|string|null $lock what cron_guard() takes: a lock object or a lock name
     * @param string[] $command the program and its arguments (looked up on PATH)
     * @param array<string, mixed> $guardOptions cron_guard()'s options ('wait', 'on_busy', …)
     * @return int|null the child's exit status (128 + N for signal N); null when the run was
     *         skipped (busy, or a signal ended the wait)
     * @throws \CronLock\LockException from the lock or cron_guard() (the lock cannot be used)
     * @throws \RuntimeException when the child cannot be started
     */
    public function runLocked($lock, array $command, array $guardOptions = [])
    {
        $job = function () use ($command) {
            return $this->run($command);
        };
        if (!$lock instanceof \CronLock\Lock || $lock->isHeld()) {
            $status = cron_guard($job, $lock, $guardOptions);
            return $status === null ? null : (int) $status;
        }
        if (!$lock->acquire(isset($guardOptions['wait']) ? (float) $guardOptions['wait'] : 0.0)) {
            return null;
        }
        unset($guardOptions['wait']);
        try {
            $status = cron_guard($job, $lock, $guardOptions);
        } finally {
            if ($lock->isHeld()) {
                $lock->release();
            }
        }
        return $status === null ? null : (int) $status;
    }

    /**
     * Runs $command as a child, passing SIGTERM, SIGINT and SIGHUP on, until it ends.
     *
     * @param string[] $command
     * @return int its exit status, 128 + N when signal N ended it
     * @throws \RuntimeException without pcntl, or when fork() fails
     */
    public function run(array $command): int
    {
        if ($command === []) {
            throw new \InvalidArgumentException('no command to run');
        }
        $missing = self::missingFunction();
        if ($missing !== null) {
            throw new \RuntimeException("running a command under a lock needs PHP's pcntl and posix extensions ($missing() is missing)");
        }
        $forwarded = [SIGTERM, SIGINT, SIGHUP];
        $mask = array_merge($forwarded, [SIGCHLD]);
        $before = [];
        pcntl_sigprocmask(SIG_BLOCK, $mask, $before);
        $watchdog = null;
        try {
            $watchdog = $this->startWatchdog();
            // The child's go-ahead: a word once the watchdog knows its group, EOF if this process died first.
            $go = stream_socket_pair(STREAM_PF_UNIX, STREAM_SOCK_STREAM, 0);
            if ($go === false) {
                throw new \RuntimeException('cannot start the command: socketpair() failed');
            }
            $parent = getmypid();
            $pid = pcntl_fork();
            if ($pid === -1) {
                throw new \RuntimeException('cannot start the command: fork() failed: ' . pcntl_strerror(pcntl_get_last_error()));
            }
            if ($pid === 0) {
                fclose($go[0]);
                posix_setpgid(0, 0);
                $ready = fread($go[1], 1);
                fclose($go[1]);
                if ($ready !== 'g') {
                    exit(137); // this process died before the watchdog knew the group
                }
                $this->execChild($command, $parent, $before);
            }
            fclose($go[1]);
            $this->child = $pid;
            @posix_setpgid($pid, $pid); // both sides set it, so it is set before either goes on
            if ($watchdog !== null) {
                fwrite($watchdog[1], "$pid\n");
            }
            fwrite($go[0], 'g');
            fclose($go[0]);
            $status = $this->waitFor($pid, $mask, $forwarded);
            // What the job left in its group would run on without the lock.
            @posix_kill(-$pid, SIGKILL);
            return $status;
        } finally {
            $this->child = null;
            if ($watchdog !== null) {
                @fwrite($watchdog[1], "done\n");
                fclose($watchdog[1]);
                proc_close($watchdog[0]);
            }
            pcntl_sigprocmask(SIG_SETMASK, $before);
        }
    }

    /**
     * The watchdog process and the pipe to it (its end close-on-exec, so
     * no child keeps it open), or null without setsid.
     *
     * @return array{resource, resource}|null
     */
    private function startWatchdog()
    {
        if ($this->setsid === null) {
            return null;
        }
        $null = ['file', '/dev/null', 'w'];
        // A string, not an argv (PHP 7.4+): the shell PHP starts execs setsid, which execs the watchdog.
        $command = 'exec ' . implode(' ', array_map('escapeshellarg', [$this->setsid, '/bin/sh', '-c', self::WATCHDOG_SCRIPT, 'cronlock-watchdog']));
        $process = proc_open($command, [0 => ['pipe', 'r'], 1 => ['pipe', 'w'], 2 => $null], $pipes);
        if (!is_resource($process)) {
            throw new \RuntimeException('cannot start the command: the watchdog (setsid sh) did not start');
        }
        // Its "ready" comes once it runs in a session of its own: until then a kill of this
        // process's group would take it too, and the command's children would outlive us (a
        // busy fresh machine found one so).
        $ready = fgets($pipes[1]);
        fclose($pipes[1]);
        if ($ready !== "ready\n") {
            proc_close($process);
            throw new \RuntimeException('cannot start the command: the watchdog (setsid sh) did not start');
        }
        return [$process, $pipes[0]];
    }

    /** The pid of the child while run() waits for it (for a caller's own signal handling), else null. */
    public function childPid()
    {
        return $this->child;
    }

    /**
     * In the forked child: unblock, exec. Never returns.
     *
     * @param string[] $command
     * @param int[] $mask the signal mask to restore
     */
    private function execChild(array $command, int $parent, array $mask)
    {
        pcntl_sigprocmask(SIG_SETMASK, $mask);
        if ($this->setpriv !== null) {
            $path = $this->setpriv;
            $args = array_merge(['--pdeathsig', 'KILL', '--', '/bin/sh', '-c', self::EXEC_SCRIPT, 'cronlock-run', (string) $parent], $command);
        } else {
            $path = '/bin/sh';
            $args = array_merge(['-c', 'exec "$@"', 'cronlock-run'], $command);
        }
        @pcntl_exec($path, $args);
        fwrite(STDERR, sprintf("cronlock run: cannot execute %s: %s\n", $path, pcntl_strerror(pcntl_get_last_error())));
        exit(127); // leaves the parent's lock alone: a fork child never releases it
    }

    /**
     * @param int[] $mask blocked: the forwarded signals and SIGCHLD
     * @param int[] $forwarded
     */
    private function waitFor(int $pid, array $mask, array $forwarded): int
    {
        while (true) {
            $info = [];
            // Wakes for a signal, or after 1 s to look again (SIGCHLDs merge).
            $signal = @pcntl_sigtimedwait($mask, $info, 1);
            if (is_int($signal) && in_array($signal, $forwarded, true)) {
                posix_kill(-$pid, $signal);
                continue;
            }
            $status = 0;
            $reaped = pcntl_waitpid($pid, $status, WNOHANG);
            if ($reaped === $pid) {
                if (pcntl_wifsignaled($status)) {
                    return 128 + pcntl_wtermsig($status);
                }
                return pcntl_wexitstatus($status);
            }
            if ($reaped === -1) {
                throw new \RuntimeException("lost track of the command (pid $pid): waitpid() failed: " . pcntl_strerror(pcntl_get_last_error()));
            }
        }
    }

    /** @return string|null the first function run() needs that this PHP lacks */
    public static function missingFunction()
    {
        foreach (['pcntl_fork', 'pcntl_exec', 'pcntl_sigprocmask', 'pcntl_sigtimedwait', 'pcntl_waitpid', 'posix_kill'] as $function) {
            if (!function_exists($function)) {
                return $function;
            }
        }
        return null;
    }

    /** @return string|null the util-linux program $name, found on PATH, then in /usr/bin and /bin */
    private static function findUtilLinux(string $name)
    {
        if (PHP_OS !== 'Linux') {
            return null;
        }
        $dirs = array_merge(explode(':', (string) getenv('PATH')), ['/usr/bin', '/bin']);
        foreach ($dirs as $dir) {
            if ($dir !== '' && $dir[0] === '/' && is_file("$dir/$name") && is_executable("$dir/$name")) {
                return "$dir/$name";
            }
        }
        return null;
    }
}

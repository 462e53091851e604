<?php

namespace CronLock\Polyfill;

/**
 * Terminating signals while this process holds Redis keys (decision D16), as the
 * extension's lock::signals does them, with pcntl: while a hold is held, each
 * of SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGALRM, SIGUSR1, SIGUSR2 and SIGXCPU
 * whose handler is SIG_DFL gets ours (restart_syscalls off, so a blocking
 * call ends at once; pcntl_async_signals() on, so it runs at once). Ours gives
 * this process's keys back (token-checked, on new connections, each connect
 * and reply awaited at most 0.5 s, 2 s in all), puts SIG_DFL back and sends
 * the signal again, so the process dies of it (128+N) and nothing of the
 * script runs. When the last hold ends, SIG_DFL and pcntl_async_signals()
 * are put back, except where the script installed a handler of its own
 * meanwhile (its handler, or SIG_IGN, keeps priority, as before; and async
 * signals, which it found on, stay on).
 *
 * A pcntl_fork() child that gets the signal just dies of it: the keys are
 * its parent's. Without posix_kill() the signal is sent again with kill(1);
 * where that cannot run either, the process exits with status 128+N (its
 * shutdown functions then run). Without pcntl nothing can be done: the key
 * expires by its TTL (a lease: at most 30 s).
 *
 * @internal
 */
final class Signals
{
    /** The signals, by name (the constants exist only with pcntl). */
    const TERMINATING = ['SIGHUP', 'SIGINT', 'SIGQUIT', 'SIGTERM', 'SIGALRM', 'SIGUSR1', 'SIGUSR2', 'SIGXCPU'];

    /** What giving the keys back may take in all, and each connect or reply. */
    const RELEASE_BUDGET = 2.0;
    const RELEASE_TIMEOUT = 0.5;

    /**
     * The holds of this process (and, in a fork child, its parent's, which are never touched).
     *
     * @var array<string, array{pid: int, dsn: RedisDsn, key: string, token: string, windowEnd: int, connectTimeout: float}>
     */
    private static $holds = [];
    /** @var array<int, \Closure> our handler, by the signal it is installed for */
    private static $installed = [];
    /** @var bool|null pcntl_async_signals() before we turned it on; null: we did not */
    private static $asyncBefore;

    public static function available(): bool
    {
        return function_exists('pcntl_signal') && function_exists('pcntl_signal_get_handler')
            && function_exists('pcntl_async_signals') && defined('SIGTERM');
    }

    /**
     * Hold $id of this process is $key with $token (once-per: kept to $windowEnd, Unix ms;
     * 0: none) on $dsn. Called again when its window changes.
     */
    public static function holding(string $id, RedisDsn $dsn, string $key, string $token, int $windowEnd, float $connectTimeout)
    {
        if (!self::available()) {
            return;
        }
        $pid = Process::pid();
        foreach (self::$holds as $other => $hold) {
            if ($hold['pid'] !== $pid) {
                unset(self::$holds[$other]); // a fork child's copy of its parent's
            }
        }
        if (self::$holds === []) {
            self::arm();
        }
        self::$holds[$id] = ['pid' => $pid, 'dsn' => $dsn, 'key' => $key, 'token' => $token, 'windowEnd' => $windowEnd, 'connectTimeout' => $connectTimeout];
    }

    public static function released(string $id)
    {
        if (!isset(self::$holds[$id]) || self::$holds[$id]['pid'] !== Process::pid()) {
            return;
        }
        unset(self::$holds[$id]);
        if (self::$holds === []) {
            self::disarm();
        }
    }

    private static function arm()
    {
        foreach (self::TERMINATING as $name) {
            $signo = constant($name);
            if (isset(self::$installed[$signo]) || pcntl_signal_get_handler($signo) !== SIG_DFL) {
                continue;
            }
            $handler = static function ($signo) {
                self::handle((int) $signo);
            };
            if (pcntl_signal($signo, $handler, false)) {
                self::$installed[$signo] = $handler;
            }
        }
        if (self::$installed !== [] && self::$asyncBefore === null) {
            self::$asyncBefore = pcntl_async_signals(true);
        }
    }

    private static function disarm()
    {
        $untouched = true;
        foreach (self::$installed as $signo => $handler) {
            // A handler the script installed since keeps priority.
            if (pcntl_signal_get_handler($signo) === $handler) {
                pcntl_signal($signo, SIG_DFL);
            } else {
                $untouched = false;
            }
        }
        self::$installed = [];
        // A script that installed a handler of its own meanwhile may rely on the async
        // signals it found on: they stay.
        if (self::$asyncBefore !== null && $untouched) {
            pcntl_async_signals(self::$asyncBefore);
        }
        self::$asyncBefore = null;
    }

    private static function handle(int $signo)
    {
        $pid = Process::pid();
        $deadline = Process::now() + self::RELEASE_BUDGET;
        foreach (self::$holds as $hold) {
            $left = $deadline - Process::now();
            if ($hold['pid'] !== $pid || $left <= 0) {
                continue;
            }
            $timeout = min(self::RELEASE_TIMEOUT, $left);
            try {
                // A new connection: the lock's own may be in the middle of a command.
                $client = RedisClient::open($hold['dsn'], min($hold['connectTimeout'], $timeout), $timeout);
                $channel = $hold['key'] . ':released';
                if ($hold['windowEnd'] !== 0) {
                    $client->script(Scripts::get(Scripts::END_WINDOW), [$hold['key']], [$hold['token'], $hold['windowEnd'], $channel]);
                } else {
                    $client->script(Scripts::get(Scripts::RELEASE), [$hold['key']], [$hold['token'], $channel]);
                }
                $client->close();
            } catch (\Throwable $e) {
                // the key expires by its TTL
            }
        }
        self::dieOf($signo, $pid);
    }

    /** Ends the process by $signo, as SIG_DFL would. */
    private static function dieOf(int $signo, int $pid)
    {
        pcntl_signal($signo, SIG_DFL);
        $sent = false;
        if (function_exists('posix_kill')) {
            $sent = posix_kill($pid, $signo);
        } elseif (function_exists('exec')) {
            $out = [];
            $status = 1;
            @exec('kill -' . $signo . ' ' . $pid . ' 2>/dev/null', $out, $status);
            $sent = $status === 0;
        }
        if ($sent && function_exists('pcntl_sigprocmask')) {
            // pcntl runs handlers with every signal blocked: let it in now.
            pcntl_sigprocmask(SIG_UNBLOCK, [$signo]);
        }
        exit(128 + $signo);
    }
}

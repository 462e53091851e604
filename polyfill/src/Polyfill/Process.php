<?php

namespace CronLock\Polyfill;

/**
 * What the extension asks the OS for, in userland: pid, host, euid, and a
 * pause that a signal handler cuts short.
 *
 * @internal
 */
final class Process
{
    /** @var string|null */
    private static $hostname;
    /** @var array{0: int, 1: int}|null pid and the euid found in that process */
    private static $euid;

    /**
     * Seconds on a clock no time change steps (hrtime(), PHP 7.3+; else the wall clock), for
     * waits, deadlines and TTL bookkeeping, as the extension's Instant: a clock set back by
     * NTP or by hand must not stretch a 3 s wait to 23 s. System-wide, so the auto-renew
     * helper process reads the same clock.
     */
    public static function now(): float
    {
        static $monotonic = null;
        if ($monotonic === null) {
            // PHP on WebAssembly counts hrtime() from each process's start: not one clock
            $monotonic = function_exists('hrtime') && !(function_exists('php_uname') && php_uname('s') === 'Emscripten');
        }
        return $monotonic && function_exists('hrtime') ? hrtime(true) / 1e9 : microtime(true);
    }

    public static function pid(): int
    {
        return (int) getmypid();
    }

    public static function hostname(): string
    {
        if (self::$hostname === null) {
            $name = function_exists('gethostname') ? gethostname() : false;
            self::$hostname = is_string($name) && $name !== '' ? $name : php_uname('n');
        }
        return self::$hostname;
    }

    /** Effective uid; without posix, the owner of a file we just created. */
    public static function euid(): int
    {
        if (self::$euid !== null && self::$euid[0] === self::pid()) {
            return self::$euid[1];
        }
        self::$euid = [self::pid(), self::probeEuid()];
        return self::$euid[1];
    }

    private static function probeEuid(): int
    {
        if (function_exists('posix_geteuid')) {
            return posix_geteuid();
        }
        $probe = @tempnam(sys_get_temp_dir(), 'cronlock-uid');
        if ($probe === false) {
            return (int) getmyuid();
        }
        $uid = (int) fileowner($probe);
        @unlink($probe);
        return $uid;
    }

    /** @var int handlers of this process that ran during watches, counted */
    private static $signalsSeen = 0;
    /** @var int the count when the current watch began */
    private static $watchStart = 0;

    /**
     * Runs $wait (a waiting loop) with every pcntl handler wrapped, so that
     * a handler that runs at any moment of the wait, not only during a
     * pause, is seen (signalSeen()); the handlers are restored afterwards.
     *
     * @return mixed what $wait returns
     */
    public static function watchingSignals(callable $wait)
    {
        if (!function_exists('pcntl_signal_get_handler')) {
            return $wait();
        }
        $saved = [];
        for ($signo = 1; $signo < 32; $signo++) {
            $handler = @pcntl_signal_get_handler($signo);
            if (is_callable($handler)) {
                $saved[$signo] = $handler;
                pcntl_signal($signo, static function ($signo, $info = null) use ($handler) {
                    self::$signalsSeen++;
                    $handler($signo, $info);
                });
            }
        }
        $before = self::$signalsSeen;
        $outer = self::$watchStart;
        self::$watchStart = $before;
        try {
            return $wait();
        } finally {
            foreach ($saved as $signo => $handler) {
                pcntl_signal($signo, $handler);
            }
            self::$signalsSeen = $before;
            self::$watchStart = $outer;
        }
    }

    /**
     * Sleeps up to $seconds; returns true when a signal cut the sleep short,
     * or a handler ran since the watch began (see watchingSignals()).
     * Pending pcntl handlers run before it returns (decision D9), also without
     * pcntl_async_signals(true).
     */
    public static function nap(float $seconds): bool
    {
        $seconds = max(0.0, $seconds);
        $interrupted = false;
        // Without pcntl no handler can cut the pause short: plain usleep()
        // (PHP on WebAssembly, whose time_nanosleep() is less robust).
        if (function_exists('time_nanosleep') && function_exists('pcntl_signal_dispatch')) {
            $s = (int) floor($seconds);
            $r = @time_nanosleep($s, (int) (($seconds - $s) * 1e9));
            $interrupted = is_array($r);
        } else {
            usleep((int) ($seconds * 1e6));
        }
        if (function_exists('pcntl_signal_dispatch')) {
            pcntl_signal_dispatch();
        }
        return $interrupted || self::$signalsSeen !== self::$watchStart;
    }

    /** Runs pending pcntl handlers; true when a handler ran since the watch began (see watchingSignals()). */
    public static function signalled(): bool
    {
        if (function_exists('pcntl_signal_dispatch')) {
            pcntl_signal_dispatch();
        }
        return self::$signalsSeen !== self::$watchStart;
    }

    public static function alive(int $pid): bool
    {
        if ($pid <= 0) {
            return false;
        }
        if (function_exists('posix_kill')) {
            return posix_kill($pid, 0) || posix_get_last_error() === 1; // EPERM: alive, not ours
        }
        return is_dir("/proc/$pid");
    }
}

<?php

namespace CronLock\Cli;

/**
 * What this host says about a process (Linux /proc, else posix_kill()):
 * whether it is alive (a zombie is not), when it started; and this host's
 * name and effective uid, as cronlock writes and uses them.
 */
final class Processes
{
    /** Linux's USER_HZ, the unit of /proc/<pid>/stat's start time (100 on every Linux architecture). */
    const TICKS_PER_SECOND = 100;

    /** @var int|null */
    private static $bootTime;

    /** @return bool|null null: cannot tell (no /proc and no posix) */
    public static function alive(int $pid)
    {
        if ($pid <= 0) {
            return false;
        }
        $stat = @file_get_contents("/proc/$pid/stat");
        if (is_string($stat) && strpos($stat, ')') !== false) {
            $state = substr($stat, strrpos($stat, ')') + 2, 1);
            return $state !== 'Z' && $state !== 'X';
        }
        if (is_dir('/proc/self')) {
            return false;
        }
        if (function_exists('posix_kill')) {
            return posix_kill($pid, 0) || posix_get_last_error() === 1; // EPERM: alive, another user's
        }
        return null;
    }

    /** @return int|null Unix time the process started (Linux), null when unknown */
    public static function startTime(int $pid)
    {
        $stat = @file_get_contents("/proc/$pid/stat");
        if (!is_string($stat) || strpos($stat, ')') === false || self::bootTime() === null) {
            return null;
        }
        // fields after "(comm)": state is field 3, starttime field 22
        $fields = explode(' ', substr($stat, strrpos($stat, ')') + 2));
        if (!isset($fields[19]) || !preg_match('/\A[0-9]+\z/', $fields[19])) {
            return null;
        }
        return self::bootTime() + intdiv((int) $fields[19], self::TICKS_PER_SECOND);
    }

    public static function hostname(): string
    {
        $name = function_exists('gethostname') ? gethostname() : false;
        return is_string($name) && $name !== '' ? $name : php_uname('n');
    }

    /** The host name as cronlock's File record writes it (printable ASCII, 64 bytes at most). */
    public static function recordHostname(): string
    {
        return substr((string) preg_replace('/[^\x21-\x7e]/', '', self::hostname()), 0, 64);
    }

    public static function euid(): int
    {
        if (function_exists('posix_geteuid')) {
            return posix_geteuid();
        }
        // "Uid:	real	effective	saved	fs"
        $status = @file_get_contents('/proc/self/status');
        if (is_string($status) && preg_match('/^Uid:\s+[0-9]+\s+([0-9]+)/m', $status, $m)) {
            return (int) $m[1];
        }
        return (int) getmyuid();
    }

    /** @return int|null */
    private static function bootTime()
    {
        if (self::$bootTime === null) {
            $stat = @file_get_contents('/proc/stat');
            if (is_string($stat) && preg_match('/^btime\s+([0-9]+)/m', $stat, $m)) {
                self::$bootTime = (int) $m[1];
            }
        }
        return self::$bootTime;
    }
}

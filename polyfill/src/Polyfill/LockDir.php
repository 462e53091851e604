<?php

namespace CronLock\Polyfill;

use CronLock\LockException;

/**
 * The directory of cron_guard()'s named and script locks (decision D10).
 *
 * The extension reads ini cronlock.lock_dir; PHP cannot register an ini
 * setting from userland, so the polyfill reads, in this order: the
 * environment variable CRONLOCK_LOCK_DIR (set it with putenv() at run time),
 * then cronlock.lock_dir from php.ini or `php -d` (get_cfg_var()).
 * Empty or unset: a per-user directory, as in the extension.
 *
 * @internal
 */
final class LockDir
{
    /** @return array{0: string, 1: int} the directory, and the mode of new lock files in it */
    public static function resolve(): array
    {
        $setting = getenv('CRONLOCK_LOCK_DIR');
        if ($setting === false) {
            $setting = get_cfg_var('cronlock.lock_dir');
        }
        $setting = is_string($setting) ? $setting : '';
        if ($setting !== '') {
            // one directory for every run, as the extension requires
            if (strpos($setting, "\0") !== false) {
                throw new LockException(sprintf("cronlock.lock_dir '%s' contains a NUL byte; set it to an absolute directory path", Args::cut(str_replace("\0", '\u{0}', $setting))));
            }
            if ($setting[0] !== '/') {
                throw new LockException(sprintf("cronlock.lock_dir '%s' is a relative path, which would count from each run's working directory; set it to an absolute directory path", Args::cut($setting)));
            }
            $dir = rtrim($setting, '/');
            $dir = $dir === '' ? '/' : $dir;
            $st = @stat($dir);
            // Anyone could swap our lock file for theirs in such a directory.
            if ($st !== false && ($st['mode'] & 0002) !== 0 && ($st['mode'] & 01000) === 0) {
                throw new LockException(sprintf(
                    'lock directory %s is world-writable without the sticky bit; chmod +t it or set cronlock.lock_dir to a safer directory',
                    Args::cut($dir)
                ));
            }
            return [$dir, 0644]; // shared on purpose by whoever set it
        }
        $euid = Process::euid();
        if ($euid === 0) {
            $dir = '/run/cronlock';
        } else {
            $base = is_dir('/run/lock') && is_writable('/run/lock') ? '/run/lock' : rtrim(sys_get_temp_dir(), '/');
            $dir = "$base/cronlock-$euid";
        }
        // the extension's sentences (src/lock/dirs.rs)
        $fail = static function (string $why) use ($dir): LockException {
            return new LockException("lock directory $dir $why; remove it (cronlock recreates it) or set cronlock.lock_dir");
        };
        if (!is_dir($dir) && !@mkdir($dir, 0700) && !is_dir($dir)) {
            throw $fail('cannot be created: ' . FileSystem::lastReason());
        }
        clearstatcache(true, $dir);
        $st = @lstat($dir);
        if ($st === false || ($st['mode'] & 0170000) !== 0040000) {
            throw $fail('is not a directory'); // a symlink too: lstat()
        }
        if ($st['uid'] !== $euid) {
            throw $fail(sprintf("is owned by uid %d, not by this process's uid %d", $st['uid'], $euid));
        }
        if (($st['mode'] & 0022) !== 0) {
            throw $fail(sprintf('is writable by group or others (mode %04o)', $st['mode'] & 07777));
        }
        return [$dir, 0600];
    }
}

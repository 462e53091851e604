<?php

namespace CronLock\Polyfill;

use CronLock\LockException;

/**
 * The directory of cron_guard()'s named and script locks (decisions D10
 * and D13: a directory of the user's own, whatever the environment says),
 * as the extension's src/lock/dirs.rs chooses and checks it, with its
 * sentences.
 *
 * The extension reads ini cronlock.lock_dir; PHP cannot register an ini
 * setting from userland, so the polyfill reads, in this order: the
 * environment variable CRONLOCK_LOCK_DIR (set it with putenv() at run time),
 * then cronlock.lock_dir from php.ini or `php -d` (get_cfg_var()).
 * Empty or unset: the user's default directory, the same for every process
 * of the user whatever TMPDIR, sys_temp_dir or the working directory say:
 * /run/cronlock for root, else /run/lock/cronlock-<euid> when this user may
 * create entries in /run/lock, else /tmp/cronlock-<euid>.
 *
 * @internal
 */
final class LockDir
{
    /** What every refusal of a directory offers besides fixing it. */
    const SET_ANOTHER = 'set CRONLOCK_LOCK_DIR or cronlock.lock_dir to an absolute directory of your own';

    /** @return array{0: string, 1: int} the directory, and the mode of new lock files in it */
    public static function resolve(): array
    {
        $setting = self::setting();
        if ($setting !== '') {
            $dir = self::explicitDir($setting);
            self::checkExplicitDir($dir);
            return [$dir, 0644]; // shared on purpose by whoever set it
        }
        $dir = self::defaultDir();
        if (!is_dir($dir)) {
            list($made, $reason) = FileSystem::withReason(function () use ($dir) {
                return mkdir($dir, 0700);
            });
            if ($made) {
                @chmod($dir, 0700); // exactly 0700, whatever the umask
            } elseif (@lstat($dir) === false) { // else something is there already (EEXIST): checked below
                throw self::cannotCreate($dir, $reason === null ? 'unknown error' : $reason);
            }
        }
        self::checkPrivateDir($dir);
        return [$dir, 0600];
    }

    /** The default directory of this user (see the class comment). */
    public static function defaultDir(): string
    {
        $euid = Process::euid();
        if ($euid === 0) {
            return '/run/cronlock';
        }
        if (is_dir('/run/lock') && is_writable('/run/lock') && is_executable('/run/lock')) {
            return "/run/lock/cronlock-$euid";
        }
        return "/tmp/cronlock-$euid";
    }

    private static function setting(): string
    {
        $setting = getenv('CRONLOCK_LOCK_DIR');
        if ($setting === false) {
            $setting = get_cfg_var('cronlock.lock_dir');
        }
        return is_string($setting) ? $setting : '';
    }

    /** One directory for every run, as the extension requires. */
    private static function explicitDir(string $setting): string
    {
        // the setting in force, as the extension names it: the variable counts ahead of the ini
        $name = getenv('CRONLOCK_LOCK_DIR') !== false ? '$CRONLOCK_LOCK_DIR' : 'cronlock.lock_dir';
        if (strpos($setting, "\0") !== false) {
            throw new LockException(sprintf("%s '%s' contains a NUL byte; set it to an absolute directory path", $name, Args::cut(str_replace("\0", '\u{0}', $setting))));
        }
        if ($setting[0] !== '/') {
            throw new LockException(sprintf("%s '%s' is a relative path, which would count from each run's working directory; set it to an absolute directory path", $name, Args::cut($setting)));
        }
        $dir = rtrim($setting, '/');
        return $dir === '' ? '/' : $dir;
    }

    private static function refusal(string $dir, string $what, string $advice): LockException
    {
        return new LockException('lock directory ' . Args::cut($dir) . " $what; $advice");
    }

    /** Why mkdir() of the default directory failed, with the advice for that cause. */
    private static function cannotCreate(string $dir, string $reason): LockException
    {
        $parent = Args::cut(dirname($dir));
        if ($reason === FileSystem::osError('ENOENT')) {
            return self::refusal($dir, "cannot be created: its parent directory $parent does not exist", "create $parent or " . self::SET_ANOTHER);
        }
        if ($reason === FileSystem::osError('ENOSPC') || $reason === FileSystem::osError('EDQUOT')) {
            return self::refusal($dir, "cannot be created: $reason", "free space or inodes on the file system of $parent, or " . self::SET_ANOTHER);
        }
        if (in_array($reason, [FileSystem::osError('EACCES'), FileSystem::osError('EPERM'), FileSystem::osError('EROFS')], true)) {
            return self::refusal($dir, "cannot be created: $reason", "this user may not create entries in $parent, so " . self::SET_ANOTHER);
        }
        return self::refusal($dir, "cannot be created: $reason", self::SET_ANOTHER);
    }

    /** A real directory (lstat: a symlink is not) of ours alone. */
    private static function checkPrivateDir(string $dir)
    {
        $euid = Process::euid();
        clearstatcache(true, $dir);
        $st = @lstat($dir);
        if ($st === false) {
            // PHP's lstat() names no reason; the likely one is a parent we may not search
            $reason = is_executable(dirname($dir)) ? 'unknown error' : FileSystem::osError('EACCES');
            throw self::refusal($dir, "cannot be examined: $reason", self::SET_ANOTHER);
        }
        if (($st['mode'] & 0170000) !== 0040000) {
            throw self::refusal($dir, 'is not a directory', 'remove it (cronlock recreates it) or ' . self::SET_ANOTHER);
        }
        if ($st['uid'] !== $euid) {
            throw self::refusal($dir, sprintf("is owned by uid %d, not by this process's uid %d", $st['uid'], $euid), 'have its owner or root remove it (cronlock recreates it), or ' . self::SET_ANOTHER);
        }
        if (($st['mode'] & 0022) !== 0) {
            throw self::refusal($dir, sprintf('is writable by group or others (mode %04o)', $st['mode'] & 07777), 'chmod 700 it or ' . self::SET_ANOTHER);
        }
    }

    /**
     * An explicit directory (followed if a symlink) must exist and must not be
     * world-writable without the sticky bit: anyone could swap our lock file
     * for theirs there. What else stops its use (a parent we may not search)
     * is named by opening the lock file.
     */
    private static function checkExplicitDir(string $dir)
    {
        clearstatcache();
        $st = @stat($dir);
        if ($st === false) {
            if (self::missing($dir)) {
                throw self::refusal($dir, 'does not exist', 'create it, or set CRONLOCK_LOCK_DIR or cronlock.lock_dir to an existing absolute directory');
            }
            return;
        }
        if (($st['mode'] & 0170000) !== 0040000) {
            throw self::refusal($dir, 'is not a directory', 'set CRONLOCK_LOCK_DIR or cronlock.lock_dir to an existing absolute directory');
        }
        if (($st['mode'] & 0002) !== 0 && ($st['mode'] & 01000) === 0) {
            throw self::refusal($dir, 'is world-writable without the sticky bit', 'chmod +t it or set CRONLOCK_LOCK_DIR or cronlock.lock_dir to a safer directory');
        }
    }

    /**
     * Whether stat() of $dir failed because it is not there (ENOENT), not
     * because a parent may not be searched or is a file: PHP's stat() gives
     * no reason, so ask the nearest ancestor that stat() sees.
     */
    private static function missing(string $dir): bool
    {
        $up = $dir;
        do {
            $up = dirname($up);
            $st = @stat($up);
        } while ($st === false && $up !== '/' && $up !== '.');
        return $st !== false && ($st['mode'] & 0170000) === 0040000 && is_executable($up);
    }
}

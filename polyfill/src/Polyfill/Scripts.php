<?php

namespace CronLock\Polyfill;

/**
 * The Lua scripts of CronLock\Redis: the files in polyfill/resources/redis/,
 * which the extension embeds too (src/lock/redis/scripts.rs), so both run the
 * same script (one SHA1 for EVALSHA) on one key and exclude each other. Read
 * once per process, on first use; used by the lock and by its renewal helper.
 *
 * @internal
 */
final class Scripts
{
    /** Takes the key, or confirms and extends a hold of ours. */
    const ACQUIRE = 'acquire';
    /** The acquire of a once-per-window run. */
    const ACQUIRE_IN_WINDOW = 'acquire_in_window';
    /** PEXPIRE if the key is still ours, never below its once-per window's end. */
    const RENEW = 'renew';
    /** DEL and PUBLISH if the key is still ours. */
    const RELEASE = 'release';
    /** The end of a once-per hold: left to expire at the window's end, or deleted. */
    const END_WINDOW = 'end_window';
    /** A window claim (SET NX PX of <key>:claim:<window>), or with 0 ms its give-back. */
    const CLAIM = 'claim';

    /** @var array<string, string> */
    private static $loaded = [];

    /** The directory of the .lua files. */
    public static function dir(): string
    {
        return dirname(__DIR__, 2) . '/resources/redis';
    }

    /**
     * The text of script $name (one of the constants).
     *
     * @throws \CronLock\LockException when the file cannot be read (a broken install)
     */
    public static function get(string $name): string
    {
        if (!isset(self::$loaded[$name])) {
            $file = self::dir() . "/$name.lua";
            $lua = @file_get_contents($file);
            if (!is_string($lua) || $lua === '') {
                throw new \CronLock\LockException("cannot read cronlock's Lua script $file: " . FileSystem::lastReason() . '; reinstall cronlock/polyfill');
            }
            self::$loaded[$name] = $lua;
        }
        return self::$loaded[$name];
    }
}

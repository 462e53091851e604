<?php

namespace CronLock\Polyfill;

/**
 * Locks held by this process, by what they lock (File: dev+ino; Redis:
 * address, db and key), so a second object on the same lock in this process
 * is refused at once instead of waiting for itself (decision D3); and what
 * the last acquire() of each object ran into, for cron_guard()'s busy line.
 *
 * @internal
 */
final class Registry
{
    /** @var array<string, array{pid: int, owner: string, shared: bool, until: float}> */
    private static $held = [];
    /** @var array<string, string> spl_object_hash => 'self' | 'signal' */
    private static $lastRefusal = [];
    /**
     * Redis tokens held in this process => [owner, pid]: a key found holding one of them is
     * that object's lock, however its DSN names the server (a unix socket and a port, a host
     * name and an address), which comparing DSNs cannot tell.
     *
     * @var array<string, array{0: string, 1: int}>
     */
    private static $tokens = [];

    public static function holdToken(string $token, string $owner)
    {
        self::$tokens[$token] = [$owner, Process::pid()];
    }

    public static function dropToken(string $token)
    {
        unset(self::$tokens[$token]);
    }

    /** Whether $value (a Redis key's value) is the token of another lock object of this process. */
    public static function tokenHeldByOther(string $value, string $owner): bool
    {
        return isset(self::$tokens[$value]) && self::$tokens[$value][0] !== $owner && self::$tokens[$value][1] === Process::pid();
    }

    /** @return string|null owner (an spl_object_hash) holding $id in this process, not $owner */
    public static function heldByOther(string $id, string $owner, bool $shared)
    {
        $entry = isset(self::$held[$id]) ? self::$held[$id] : null;
        if ($entry === null || $entry['pid'] !== Process::pid() || $entry['owner'] === $owner
            || Process::now() >= $entry['until']) {
            return null;
        }
        return ($shared && $entry['shared']) ? null : $entry['owner'];
    }

    /** @param float $until when the hold ends by itself (a Redis TTL), INF if never */
    public static function hold(string $id, string $owner, bool $shared, float $until = INF)
    {
        self::$held[$id] = ['pid' => Process::pid(), 'owner' => $owner, 'shared' => $shared, 'until' => $until];
    }

    public static function drop(string $id, string $owner)
    {
        if (isset(self::$held[$id]) && self::$held[$id]['owner'] === $owner) {
            unset(self::$held[$id]);
        }
    }

    /** @param string|null $why 'self' (held through another object here), 'signal', or null */
    public static function noteRefusal(string $owner, $why)
    {
        if ($why === null) {
            unset(self::$lastRefusal[$owner]);
        } else {
            self::$lastRefusal[$owner] = $why;
        }
    }

    /** @return string|null */
    public static function takeRefusal(string $owner)
    {
        $why = isset(self::$lastRefusal[$owner]) ? self::$lastRefusal[$owner] : null;
        unset(self::$lastRefusal[$owner]);
        return $why;
    }

    public static function deadlock(string $what, string $class): \CronLock\LockException
    {
        return new \CronLock\LockException(sprintf(
            '%s is already held by this process (pid %d) through another %s object; waiting for it would deadlock',
            $what,
            Process::pid(),
            $class
        ));
    }
}

<?php

namespace CronLock\Laravel;

use CronLock\Database;
use CronLock\File;
use CronLock\Lock;
use CronLock\Redis;
use Illuminate\Console\Scheduling\Event;
use InvalidArgumentException;

/**
 * The application's cronlock configuration (config/cronlock.php) made into
 * locks: the one place that knows the name of an event's lock, which class
 * holds it, and how to ask who holds it without taking it.
 *
 * Traps it closes:
 * - Two processes of one event must lock the same thing: the name is derived
 *   from what every process that builds the schedule computes alike
 *   (Laravel's mutex name of the event as the user wrote it, see lockName()),
 *   never from a process's own state.
 * - The DSN and the password are read from the configuration by the process
 *   that locks; nothing here ever puts them into a command line.
 * - Asking "is it held?" never takes the lock: a probe that acquires and
 *   releases can make a real acquire fail at that instant (and bumps Redis
 *   fencing counters), see holder().
 * - A tick claimed by onOneServer() is a claim, not a lock: it outlives the
 *   process that made it and expires on its own (claim()).
 */
final class Locks
{
    /**
     * How long a tick's claim lasts (config 'claim_seconds' null): Laravel's
     * own hour (CacheSchedulingMutex), so hosts whose clocks differ by up to
     * that still name and claim the same tick.
     */
    private const CLAIM_SECONDS = 3600.0;

    /** @var array<string, mixed> */
    private $config;
    /** @var string */
    private $defaultDirectory;

    /**
     * @param array<string, mixed> $config config('cronlock')
     * @param string $defaultDirectory where lock files go when the config names no directory
     */
    public function __construct(array $config, string $defaultDirectory)
    {
        $this->config = $config;
        $this->defaultDirectory = $defaultDirectory;
        if (!in_array($this->backend(), ['file', 'redis', 'database'], true)) {
            throw new InvalidArgumentException(sprintf("config('cronlock.backend') must be file, redis or database, not '%s'", $this->backend()));
        }
        if ($this->backend() !== 'file' && (string) ($config['dsn'] ?? '') === '') {
            throw new InvalidArgumentException(sprintf("config('cronlock.dsn') is empty: the %s backend needs the DSN of its server (CRONLOCK_DSN)", $this->backend()));
        }
    }

    public function backend(): string
    {
        return (string) ($this->config['backend'] ?? 'file');
    }

    /**
     * The lock name of an event as it stands: Laravel's mutex name without
     * its "framework/" directory, "schedule-" and the SHA-1 of the cron
     * expression and the command (of the description, for a callback
     * event). ScheduleRewriter takes it before it rewrites a command, so the
     * name stays that of the command the user wrote.
     */
    public static function lockName(Event $event): string
    {
        return basename(str_replace('\\', '/', $event->mutexName()));
    }

    /** A new, not yet acquired lock on $name. */
    public function make(string $name): Lock
    {
        switch ($this->backend()) {
            case 'redis':
                // A TTL renewed while the holder lives: what a kill -9 costs. null:
                // cronlock's lease (30 s, renewed every 10 s while the process lives).
                $ttl = $this->config['ttl'] ?? null;
                return $ttl === null ? new Redis($this->config['dsn'], $this->prefix() . $name)
                    : new Redis($this->config['dsn'], $this->prefix() . $name, (float) $ttl, ['auto_renew' => true]);
            case 'database':
                return new Database($this->config['dsn'], $this->prefix() . $name, array_filter([
                    'user' => $this->config['username'] ?? null,
                    'password' => $this->config['password'] ?? null,
                    'claims_table' => $this->config['claims_table'] ?? null,
                ], 'is_string'));
            default:
                return new File($this->directory() . '/' . $name . '.lock');
        }
    }

    /**
     * Who holds the lock on $name right now, asked without taking it: the
     * lock's own holder() for File ("pid 4711 on web1 since …", "pid 4711",
     * "an unknown process": the kernel's list of locks), Redis ("token
     * d4f7…330e:26956@web1": the key's value, one read-only GET) and
     * Database (the server's words, "MySQL connection 17 from
     * cron@10.0.0.5:51234"); null when it is free. Where the kernel cannot
     * be asked (no /proc, other Unixes) a File lock names the holder its
     * file records if that process lives (holderPid()), so a null never
     * proves a File lock free; whoever then runs the event acquires it for
     * real.
     */
    public function holder(string $name): ?string
    {
        $lock = $this->make($name);
        if ($lock instanceof File) {
            try {
                return $lock->holder();
            } catch (\CronLock\LockException $e) {
                $pid = $lock->holderPid();
                return $pid === null ? null : "pid $pid";
            }
        }
        if ($lock instanceof Redis) {
            $value = $lock->holder();
            return $value === null ? null : "token $value";
        }
        return $lock->holder();
    }


    /**
     * Claims the tick $window of the lock $name, exactly once: among every
     * host on the server (redis, database: the server's claim), or among
     * this host's processes (file: FileClaims).
     *
     * @throws \CronLock\LockException when the backend cannot claim (a missing claims table:
     *         its message has the CREATE TABLE)
     */
    public function claim(string $name, string $window): bool
    {
        if ($this->backend() === 'file') {
            return FileClaims::claim($this->directory(), $name, $window, $this->claimSeconds());
        }
        return $this->make($name)->claim($window, $this->claimSeconds());
    }

    /**
     * Whether a claim of the tick $window stands, asked without claiming
     * (Laravel 8.83's scheduler never asks; SchedulingMutex::exists()): the
     * claim file, the claim's Redis key (`<key>:claim:<window>`,
     * docs/redis.md) or the claims table's row (its key as docs/database.md
     * gives it).
     */
    public function claimed(string $name, string $window): bool
    {
        switch ($this->backend()) {
            case 'file':
                return FileClaims::claimed($this->directory(), $name, $window, $this->claimSeconds());
            case 'redis':
                return (new Redis($this->config['dsn'], $this->prefix() . $name . ':claim:' . $window))->holder() !== null;
            default:
                $pdo = new \PDO($this->config['dsn'], $this->config['username'] ?? null, $this->config['password'] ?? null, [\PDO::ATTR_ERRMODE => \PDO::ERRMODE_EXCEPTION]);
                $table = (string) ($this->config['claims_table'] ?? 'cronlock_claims');
                $sql = $pdo->getAttribute(\PDO::ATTR_DRIVER_NAME) === 'pgsql'
                    ? "SELECT 1 FROM $table WHERE name = left(md5(?), 16) || ':' || ? AND expires_at > now()"
                    : "SELECT 1 FROM $table WHERE name = CONCAT(LEFT(MD5(?), 16), ':', ?) AND expires_at > NOW(6)";
                $statement = $pdo->prepare($sql);
                $statement->execute([$this->prefix() . $name, $window]);
                return $statement->fetchColumn() !== false;
        }
    }

    /** Where this backend keeps $name, for messages: a path, a key or a lock name (never the DSN). */
    public function describe(string $name): string
    {
        switch ($this->backend()) {
            case 'redis':
                return sprintf("Redis key '%s'", $this->prefix() . $name);
            case 'database':
                return sprintf("database lock '%s'", $this->prefix() . $name);
            default:
                return $this->directory() . '/' . $name . '.lock';
        }
    }

    private function claimSeconds(): float
    {
        return (float) ($this->config['claim_seconds'] ?? self::CLAIM_SECONDS);
    }

    private function prefix(): string
    {
        return (string) ($this->config['prefix'] ?? '');
    }

    private function directory(): string
    {
        $dir = (string) ($this->config['directory'] ?? '');
        if ($dir === '') {
            $dir = $this->defaultDirectory;
        }
        if (!is_dir($dir) && !@mkdir($dir, 0755, true) && !is_dir($dir)) {
            throw new \CronLock\LockException("cannot create the lock directory $dir: " . (error_get_last()['message'] ?? 'unknown error'));
        }
        return $dir;
    }
}

<?php

namespace CronLock\Cli;

/**
 * One lock as `cronlock status` reports it, whatever the backend; the
 * fields of its JSON form (docs/operations.md, "JSON"). A field a backend
 * cannot know is null.
 */
final class LockRow
{
    /** @var string 'file', 'redis', 'mysql' or 'pgsql' */
    public $backend;
    /** @var string the directory, or the server as the DSN names it (without password) */
    public $source;
    /** @var string lock name: the file name without .lock, the Redis key, the database lock name */
    public $name;
    /** @var string|null the lock file's path */
    public $path;
    /** @var string 'held' or 'free' */
    public $state = 'free';
    /** @var bool|null File: held by shared (reader) locks */
    public $shared;
    /** @var int|null */
    public $pid;
    /** @var string|null */
    public $host;
    /** @var bool|null whether $pid lives on this host; null: another host's, or cannot tell */
    public $pidAlive;
    /** @var int|null Unix time */
    public $since;
    /** @var string|null where $since comes from: 'record', 'server' (exact); 'process start', 'lock statement', 'session start', 'last statement' (see StatusReport::SINCE_NOTES) */
    public $sinceSource;
    /** @var int|null how many runs wait; null: cannot tell */
    public $waiters;
    /** @var float|null Redis: seconds until the key expires (-1: no expiry) */
    public $ttl;
    /** @var int|null Redis: the fencing counter */
    public $fence;
    /** @var string|null Database: the holding session ("MySQL connection 4711", "PostgreSQL backend 1234") */
    public $connection;
    /** @var string|null Database: who that session is (user@client address, application name) */
    public $client;
    /** @var array{state: string, pid: int|null, host: string|null, since: int|null}|null File: the record as written ('held', 'free'); null: none */
    public $record;
    /** @var bool held longer than --stale-after */
    public $stuck = false;

    /** Seconds held, when held and known. */
    public function heldFor(int $now)
    {
        return $this->state === 'held' && $this->since !== null ? max(0, $now - $this->since) : null;
    }

    /** @return array<string, mixed> */
    public function toArray(int $now): array
    {
        $record = $this->record;
        if ($record !== null) {
            $record['since'] = $record['since'] === null ? null : Record::formatTime($record['since']);
            $record['host'] = $record['host'] === null ? null : Text::utf8($record['host']);
        }
        return [
            'backend' => $this->backend,
            'source' => $this->source === null ? null : Text::utf8($this->source),
            'name' => $this->name === null ? null : Text::utf8($this->name),
            'path' => $this->path === null ? null : Text::utf8($this->path),
            'state' => $this->state,
            'stuck' => $this->stuck,
            'shared' => $this->shared,
            'pid' => $this->pid,
            'host' => $this->host === null ? null : Text::utf8($this->host),
            'pid_alive' => $this->pidAlive,
            'since' => $this->since === null ? null : Record::formatTime($this->since),
            'since_source' => $this->sinceSource,
            'held_for' => $this->heldFor($now),
            'waiters' => $this->waiters,
            'ttl' => $this->ttl,
            'fence' => $this->fence,
            'connection' => $this->connection === null ? null : Text::utf8($this->connection),
            'client' => $this->client === null ? null : Text::utf8($this->client),
            'record' => $record,
        ];
    }
}

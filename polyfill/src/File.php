<?php

namespace CronLock;

use CronLock\Polyfill\Args;
use CronLock\Polyfill\FileSystem;
use CronLock\Polyfill\Process;
use CronLock\Polyfill\Registry;

/**
 * An flock(2) lock on a local file, through PHP's flock(): it excludes the
 * extension's CronLock\File, util-linux flock(1) and PHP's own flock() on the
 * same file. What userland cannot do like the extension is listed in the
 * README ("cronlock/polyfill: what differs").
 */
final class File implements Lock, \Serializable
{
    use \CronLock\Polyfill\RefusesSerialization;

    /** Size of the holder record, as the extension writes it. */
    const RECORD_LEN = 128;
    /** Longest pause between two tries of a wait (there is no flock() with a timeout). */
    const MAX_POLL = 0.002;

    /** @var string|null */
    private $path;
    /** @var int */
    private $mode = 0644;
    /** @var bool */
    private $shared = false;
    /** @var bool */
    private $allowNetworkFs = false;
    /** @var resource|null */
    private $handle;
    /** @var array{dev: int, ino: int, size: int, writable: bool}|null */
    private $id;
    /** @var int pid that opened $handle */
    private $openedBy = 0;
    /** @var int|null pid that holds the lock through this object */
    private $heldBy;

    /**
     * @param string $path the lock file; a relative path is resolved against the
     *        current directory once, here (decision D11).
     * @param array{mode?: int, shared?: bool, allow_network_fs?: bool} $options
     * @throws \ValueError for an empty path, a NUL byte, a bad mode or an unknown option.
     * @throws \TypeError for an option of the wrong type.
     * @throws LockException when the file cannot be opened or used.
     */
    public function __construct(string $path, array $options = [])
    {
        if ($this->path !== null) {
            throw new \Error('Cannot call CronLock\File::__construct() twice');
        }
        if ($path === '') {
            throw Args::value('$path', 'must not be empty');
        }
        if (strpos($path, "\0") !== false) {
            throw Args::value('$path', 'must not contain NUL bytes');
        }
        Args::options($options, ['mode', 'shared', 'allow_network_fs']);
        $mode = Args::int($options, 'mode');
        if ($mode !== null && ($mode < 0 || $mode > 07777)) {
            throw Args::value("\$options['mode']", 'must be between 0 and 0o7777');
        }
        $shared = Args::bool($options, 'shared', false);
        $allowNetworkFs = Args::bool($options, 'allow_network_fs', false);
        if ($path[0] !== '/') {
            $cwd = getcwd();
            if ($cwd === false) {
                throw new LockException('cannot resolve the relative lock file path ' . Args::cut($path) . ': the current directory is unknown');
            }
            $path = rtrim($cwd, '/') . '/' . $path;
        }
        $this->mode = $mode === null ? 0644 : $mode;
        $this->shared = $shared;
        $this->allowNetworkFs = $allowNetworkFs;
        $this->open($path);
        $this->path = $path;
    }

    public function acquire(float $timeout = 0.0): bool
    {
        Args::timeout($timeout);
        $me = Process::pid();
        $owner = spl_object_hash($this);
        Registry::noteRefusal($owner, null);
        if ($this->heldBy === $me) {
            // Check-and-extend (decision D1): still ours only while the path names our file.
            return $this->stillHeld();
        }
        $this->heldBy = null;
        if ($this->openedBy !== $me) {
            $this->open($this->path); // a fork child: its own open file description
        }
        if ($timeout == 0) {
            return $this->tryToLock($timeout, $me, $owner);
        }
        return Process::watchingSignals(function () use ($timeout, $me, $owner) {
            return $this->tryToLock($timeout, $me, $owner);
        });
    }

    /** The tries of one acquire(): flock(LOCK_NB), then short pauses until the deadline. */
    private function tryToLock(float $timeout, int $me, string $owner): bool
    {
        $deadline = $timeout > 0 && is_finite($timeout) ? Process::now() + $timeout : null;
        $forever = $timeout < 0 || is_infinite($timeout);
        $pause = 0.00005;
        while (true) {
            if (Registry::heldByOther($this->lockId(), $owner, $this->shared) !== null) {
                if ($timeout != 0) {
                    throw Registry::deadlock('lock file ' . Args::cut($this->path), 'CronLock\File');
                }
                Registry::noteRefusal($owner, 'self');
                return false;
            }
            $wouldBlock = 0;
            $locked = @flock($this->handle, ($this->shared ? LOCK_SH : LOCK_EX) | LOCK_NB, $wouldBlock);
            if ($locked) {
                if ($this->pathNamesOurFile()) {
                    $this->heldBy = $me;
                    Registry::hold($this->lockId(), $owner, $this->shared);
                    $unwritten = $this->writeRecord();
                    if ($unwritten !== null) {
                        $this->warnUnwritten($unwritten);
                    }
                    return true;
                }
                // Unlinked or replaced while we waited: that inode excludes
                // nobody any more. Lock the file the path names now.
                flock($this->handle, LOCK_UN);
                $this->open($this->path);
                continue;
            }
            // PHP's flock() reports no reason when it fails: anything but
            // success counts as contention (EWOULDBLOCK, EINTR; PHP on
            // WebAssembly does not even set $wouldBlock).
            if (!$forever && ($deadline === null || Process::now() >= $deadline)) {
                return false;
            }
            $nap = $deadline === null ? $pause : min($pause, max(0.0, $deadline - Process::now()));
            if (Process::nap($nap)) {
                Registry::noteRefusal($owner, 'signal');
                return false;
            }
            $pause = min($pause * 2, self::MAX_POLL);
        }
    }

    /** flock() has no expiry: true while held and the path still names the locked file (D4). */
    public function renew(?float $ttl = null): bool
    {
        return $this->isHeld() && $this->stillHeld();
    }

    /** @throws LockException */
    public function release(): bool
    {
        if ($this->heldBy === null || $this->heldBy !== Process::pid()) {
            return false;
        }
        $this->heldBy = null;
        Registry::drop($this->lockId(), spl_object_hash($this));
        if (!@flock($this->handle, LOCK_UN)) {
            throw $this->osError('cannot unlock');
        }
        return true;
    }

    /** Local and cheap, no system call: what this object believes (D4); renew() checks the path. */
    public function isHeld(): bool
    {
        return $this->heldBy !== null && $this->heldBy === Process::pid();
    }

    /**
     * The pid of the process holding the lock now (decision D12): from
     * /proc/locks, exact device and inode, alive, with a descriptor open on
     * this very file; the recorded pid when it is one of those. null when
     * free or unknown (no /proc).
     *
     * @throws LockException when the file cannot be read.
     */
    public function holderPid(): ?int
    {
        $recorded = $this->recordedPid();
        $id = FileSystem::lstatId($this->path);
        if ($id === null || $id['link']) {
            $id = $this->id;
        }
        $holders = FileSystem::flockHolders($id['dev'], $id['ino']);
        if ($holders === null) {
            return null;
        }
        if ($recorded !== null && in_array($recorded, $holders, true)) {
            $holders = array_merge([$recorded], $holders);
        }
        foreach ($holders as $pid) {
            if ($pid === Process::pid() && $this->isHeld()) {
                return $pid;
            }
            if (Process::alive($pid) && FileSystem::hasOpen($pid, $id['dev'], $id['ino'])) {
                return $pid;
            }
        }
        return null;
    }

    public function path(): string
    {
        return (string) $this->path;
    }

    public function __destruct()
    {
        if ($this->isHeld()) {
            try {
                $this->release();
            } catch (\Throwable $e) {
                // nowhere to report it; closing drops the lock anyway
            }
        }
    }

    public function __clone()
    {
        // The refused copy is destroyed at once: it must not unlock the original's hold.
        $this->heldBy = null;
        $this->handle = null;
        throw new \Error('Trying to clone an uncloneable object of class CronLock\File');
    }

    private function lockId(): string
    {
        return 'file:' . $this->id['dev'] . ':' . $this->id['ino'];
    }

    /** D1: true if the path still names the locked file, else the stale hold is let go. */
    private function stillHeld(): bool
    {
        if ($this->pathNamesOurFile()) {
            return true;
        }
        $this->heldBy = null;
        Registry::drop($this->lockId(), spl_object_hash($this));
        @flock($this->handle, LOCK_UN);
        return false;
    }

    private function pathNamesOurFile(): bool
    {
        clearstatcache(true, $this->path);
        $now = FileSystem::lstatId($this->path);
        return $now !== null && !$now['link'] && $now['dev'] === $this->id['dev'] && $now['ino'] === $this->id['ino'];
    }

    private function open(string $path)
    {
        $opened = FileSystem::openLockFile($path, $this->mode);
        if (!$this->allowNetworkFs) {
            $fs = FileSystem::unreliableFs($path, $opened['id']['dev']);
            if ($fs !== null) {
                fclose($opened['handle']);
                throw new LockException(sprintf(
                    "lock file %s is on a %s filesystem, where flock() is unreliable; use a local path or pass 'allow_network_fs' => true",
                    Args::cut($path),
                    $fs
                ));
            }
        }
        if (is_resource($this->handle)) {
            fclose($this->handle);
        }
        $this->handle = $opened['handle'];
        $this->id = $opened['id'];
        $this->openedBy = Process::pid();
    }

    /**
     * Best effort, as in the extension: a full disk must not turn a held lock
     * into an error. Written only into a file that, now, is empty or holds
     * exactly one holder line: whatever was written into it since (in place,
     * by anyone) is never overwritten.
     */
    private function writeRecord(): ?string
    {
        if ($this->shared || !$this->id['writable'] || !$this->holdsOnlyARecordOrNothing()) {
            return null;
        }
        fseek($this->handle, 0);
        $record = self::record(Process::pid(), Process::hostname(), time());
        // PHP's notice is the only place that names the OS error
        list($written, $reason) = FileSystem::withReason(function () use ($record) {
            return fwrite($this->handle, $record) === strlen($record) && fflush($this->handle);
        });
        return $written ? null : ($reason === null ? 'unknown error' : $reason);
    }

    /**
     * The extension's E_WARNING (userland can raise E_USER_WARNING only) for
     * a holder line that could not be written; the lock is kept. An error
     * handler that turns it into an exception gets the hold given back, as
     * its caller never learns it was taken.
     */
    private function warnUnwritten(string $reason)
    {
        try {
            trigger_error('cronlock: lock file ' . Args::cut($this->path) . " is held, but its holder line could not be written: $reason", E_USER_WARNING);
        } catch (\Throwable $e) {
            $this->release();
            throw $e;
        }
    }

    private function holdsOnlyARecordOrNothing(): bool
    {
        clearstatcache(true, $this->path);
        $st = fstat($this->handle);
        if ($st === false) {
            return false;
        }
        if ($st['size'] === 0) {
            // nothing to read too: procfs and sysfs files report size 0 and are not ours to write into
            if (fseek($this->handle, 0) !== 0) {
                return false;
            }
            $first = fread($this->handle, 1);
            return $first === '' || $first === false;
        }
        if ($st['size'] !== self::RECORD_LEN || fseek($this->handle, 0) !== 0) {
            return false;
        }
        $record = fread($this->handle, self::RECORD_LEN);
        return is_string($record) && self::parseRecord($record) !== null;
    }

    /**
     * The pid of a holder record, null unless $record has exactly the shape
     * record() writes (as the extension's parse_record checks it): anything
     * else, however close, is someone's data, never ours to overwrite or to
     * believe. A pid beyond 4294967295 (the extension reads a u32) is none either.
     */
    private static function parseRecord(string $record): ?int
    {
        if (strlen($record) !== self::RECORD_LEN || !preg_match(
            '/\Acronlock pid=([0-9]+) host=[\x21-\x7e]{0,64} since=[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z *\n\z/',
            $record,
            $m
        )) {
            return null;
        }
        $digits = ltrim($m[1], '0');
        if (strlen($digits) > 10 || (strlen($digits) === 10 && strcmp($digits, '4294967295') > 0)) {
            return null;
        }
        return (int) $digits;
    }

    /** `cronlock pid=4242 host=web1 since=2026-11-30T14:50:00Z`, space-padded to 128 bytes with a final newline. */
    public static function record(int $pid, string $host, int $since): string
    {
        $host = substr((string) preg_replace('/[^\x21-\x7e]/', '', $host), 0, 64);
        $text = substr(sprintf('cronlock pid=%d host=%s since=%s', $pid, $host, gmdate('Y-m-d\TH:i:s\Z', $since)), 0, self::RECORD_LEN - 1);
        return str_pad($text, self::RECORD_LEN - 1, ' ') . "\n";
    }

    /**
     * The holder the lock file's record names, for cron_guard()'s busy line.
     *
     * @return array{0: int, 1: string, 2: int}|null pid, host, since (Unix seconds)
     */
    private function recordedHolder(): ?array
    {
        if (fseek($this->handle, 0) !== 0) {
            return null;
        }
        $head = fread($this->handle, self::RECORD_LEN);
        if (!is_string($head) || !self::parseRecord($head)
            || !preg_match('/ host=(\S*) since=(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)Z/', $head, $m)) {
            return null;
        }
        return [self::parseRecord($head), $m[1], gmmktime((int) $m[5], (int) $m[6], (int) $m[7], (int) $m[3], (int) $m[4], (int) $m[2])];
    }

    private function recordedPid(): ?int
    {
        if (fseek($this->handle, 0) !== 0) {
            throw $this->osError('cannot read');
        }
        $head = fread($this->handle, self::RECORD_LEN);
        if ($head === false) {
            throw $this->osError('cannot read');
        }
        $pid = self::parseRecord($head);
        return $pid === 0 ? null : $pid;
    }

    private function osError(string $what): LockException
    {
        return new LockException(sprintf('%s lock file %s: %s', $what, Args::cut((string) $this->path), FileSystem::lastReason((string) $this->path)));
    }
}

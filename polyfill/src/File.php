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
 * docs/polyfill.md (its differences from the extension).
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
    /** @var string|null the holder record this hold wrote: what release() turns into a free record */
    private $written;

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

    /**
     * The tries of one acquire(): flock(LOCK_NB), then, for a wait forever
     * that no PHP signal handler could interrupt, a blocking flock() (the
     * kernel lists the waiter, as it lists `flock -w`, and hands it the lock
     * at once); else short pauses until the deadline, letting handlers run
     * (D9): PHP has no flock() with a timeout, nor a way to wake a blocked
     * one every 100 ms.
     */
    private function tryToLock(float $timeout, int $me, string $owner): bool
    {
        $deadline = $timeout > 0 && is_finite($timeout) ? Process::now() + $timeout : null;
        $forever = $timeout < 0 || is_infinite($timeout);
        $pause = 0.00005;
        $tried = false;
        while (true) {
            if (Registry::heldByOther($this->lockId(), $owner, $this->shared) !== null) {
                if ($timeout != 0) {
                    throw Registry::deadlock('lock file ' . Args::cut($this->path), 'CronLock\File');
                }
                Registry::noteRefusal($owner, 'self');
                return false;
            }
            $how = $this->shared ? LOCK_SH : LOCK_EX;
            $wouldBlock = 0;
            if ($tried && $forever && self::mayBlock()) {
                $locked = @flock($this->handle, $how);
            } else {
                $locked = @flock($this->handle, $how | LOCK_NB, $wouldBlock);
            }
            $tried = true;
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
        $this->writeFreeRecord();
        if (!@flock($this->handle, LOCK_UN)) {
            throw $this->osError('cannot unlock');
        }
        return true;
    }

    /**
     * Whether a wait may block in flock(): nothing could need to run before
     * it ends, as no PHP signal handler is installed (pcntl, or none at
     * all). Not on WebAssembly, whose one process would block for good.
     */
    private static function mayBlock(): bool
    {
        if (function_exists('php_uname') && php_uname('s') === 'Emscripten') {
            return false;
        }
        if (!function_exists('pcntl_signal_get_handler')) {
            return true;
        }
        for ($signo = 1; $signo < 32; $signo++) {
            if (is_callable(@pcntl_signal_get_handler($signo))) {
                return false;
            }
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
        $record = self::parseRecord($this->head());
        $held = $this->nameableHolders($this->currentId());
        if ($held === null) {
            return null;
        }
        if ($record !== null && $record['pid'] !== null && in_array($record['pid'], $held[1], true)) {
            return $record['pid'];
        }
        return $held[1] === [] ? null : $held[1][0];
    }

    /**
     * Who holds the lock now, as the kernel lists it (null: nobody), named by
     * the file's record when the kernel lists the pid it records, as the
     * extension says it: "pid 41327 on web1 since 2026-11-30T14:50:00Z",
     * "pid 41327", "an unknown process". Never locks, never writes.
     *
     * @throws LockException when the kernel cannot be asked (no /proc/locks), or the file cannot be read.
     */
    public function holder(): ?string
    {
        $id = $this->currentId();
        $head = $this->head();
        $held = $this->nameableHolders($id);
        if ($held === null) {
            $reason = PHP_OS === 'Linux' ? FileSystem::lastReason() : "this system's kernel lists no flock(2) holders (only Linux has /proc/locks)";
            throw new LockException(sprintf("cannot tell who holds lock file %s: the kernel's list of locks cannot be read (/proc/locks: %s)", Args::cut((string) $this->path), $reason));
        }
        list($listed, $named) = $held;
        if (!$listed) {
            return null;
        }
        // our handle reads our file; a file put at the path since is named by the kernel alone
        $record = $id['dev'] === $this->id['dev'] && $id['ino'] === $this->id['ino'] ? self::parseRecord($head) : null;
        if ($record !== null && $record['pid'] !== null && in_array($record['pid'], $named, true)) {
            return sprintf('pid %d on %s since %s', $record['pid'], $record['host'], $record['since']);
        }
        return $named === [] ? 'an unknown process' : 'pid ' . $named[0];
    }

    /** @return array{dev: int, ino: int} the file the path names now, else (missing, a symlink) ours */
    private function currentId(): array
    {
        clearstatcache(true, (string) $this->path);
        $id = FileSystem::lstatId((string) $this->path);
        return $id === null || $id['link'] ? $this->id : $id;
    }

    /**
     * Whether the kernel lists a holder of the file $id, and the listed
     * pids that can be named (D12: alive, with this very file open); null
     * when the kernel cannot be asked.
     *
     * @param array{dev: int, ino: int} $id
     * @return array{0: bool, 1: int[]}|null
     */
    private function nameableHolders(array $id): ?array
    {
        $holders = FileSystem::flockHolders($id['dev'], $id['ino']);
        if ($holders === null) {
            return null;
        }
        $named = [];
        foreach ($holders as $pid) {
            if (($pid === Process::pid() && $this->isHeld()) || (Process::alive($pid) && FileSystem::hasOpen($pid, $id['dev'], $id['ino']))) {
                $named[] = $pid;
            }
        }
        return [$holders !== [], $named];
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
        $this->written = null;
        if ($this->shared || !$this->id['writable']) {
            return null;
        }
        $head = $this->head(false);
        if ($head === null || ($head !== '' && self::parseRecord($head) === null)) {
            return null;
        }
        $record = self::record(Process::pid(), Process::hostname(), time());
        list($written, $reason) = $this->writeAtStart($record);
        if ($written) {
            $this->written = $record;
            return null;
        }
        return $reason === null ? 'unknown error' : $reason;
    }

    /**
     * Turns this hold's record into `cronlock free since=…`, while the lock
     * is still ours, if the file holds exactly what this hold wrote (a job
     * may have written its own data into it meanwhile). Best effort, as the
     * holder record: the kernel's list (what holder() reads) is the truth.
     */
    private function writeFreeRecord()
    {
        $ours = $this->written;
        $this->written = null;
        if ($ours !== null && $this->head(false) === $ours) {
            $this->writeAtStart(self::freeRecord(time()));
        }
    }

    /**
     * Writes $record at offset 0; PHP's notice is the only place that names
     * the OS error.
     *
     * @return array{0: bool, 1: string|null}
     */
    private function writeAtStart(string $record): array
    {
        return FileSystem::withReason(function () use ($record) {
            return fseek($this->handle, 0) === 0 && fwrite($this->handle, $record) === strlen($record) && fflush($this->handle);
        });
    }

    /**
     * The file's first bytes, as one read of one byte more than a record
     * sees them (the extension's check): '' for an empty file (a procfs file
     * that says size 0 reads as its content), a record only when exactly
     * one. null (or, with $throw, a LockException) when it cannot be read.
     *
     * @throws LockException
     */
    private function head(bool $throw = true): ?string
    {
        $head = fseek($this->handle, 0) === 0 ? fread($this->handle, self::RECORD_LEN + 1) : false;
        if ($head === false) {
            if ($throw) {
                throw $this->osError('cannot read');
            }
            return null;
        }
        return $head;
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

    /**
     * A record as the extension's parse_record reads it, null unless $record
     * has exactly one of the shapes record() and freeRecord() write: anything
     * else, however close, is someone's data, never ours to overwrite or to
     * believe. 'pid' is null for a free record and for pid 0; a pid beyond
     * 4294967295 (the extension reads a u32) makes no record.
     *
     * @return array{pid: int|null, host: string|null, since: string}|null
     */
    private static function parseRecord(string $record): ?array
    {
        if (strlen($record) !== self::RECORD_LEN) {
            return null;
        }
        $date = '([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z)';
        if (preg_match('/\Acronlock free since=' . $date . ' *\n\z/', $record, $m)) {
            return ['pid' => null, 'host' => null, 'since' => $m[1]];
        }
        if (!preg_match('/\Acronlock pid=([0-9]+) host=([\x21-\x7e]{0,64}) since=' . $date . ' *\n\z/', $record, $m)) {
            return null;
        }
        $digits = ltrim($m[1], '0');
        if (strlen($digits) > 10 || (strlen($digits) === 10 && strcmp($digits, '4294967295') > 0)) {
            return null;
        }
        return ['pid' => $digits === '' ? null : (int) $digits, 'host' => $m[2], 'since' => $m[3]];
    }

    /** `cronlock pid=4242 host=web1 since=2026-11-30T14:50:00Z`, space-padded to 128 bytes with a final newline. */
    public static function record(int $pid, string $host, int $since): string
    {
        $host = substr((string) preg_replace('/[^\x21-\x7e]/', '', $host), 0, 64);
        return self::padRecord(sprintf('cronlock pid=%d host=%s since=%s', $pid, $host, gmdate('Y-m-d\TH:i:s\Z', $since)));
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
        $record = is_string($head) ? self::parseRecord($head) : null;
        if ($record === null || $record['pid'] === null
            || !preg_match('/\A(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)Z\z/', $record['since'], $m)) {
            return null;
        }
        return [$record['pid'], $record['host'], gmmktime((int) $m[4], (int) $m[5], (int) $m[6], (int) $m[2], (int) $m[3], (int) $m[1])];
    }

    /** `cronlock free since=2026-11-30T14:52:07Z`, padded as record(). */
    public static function freeRecord(int $since): string
    {
        return self::padRecord('cronlock free since=' . gmdate('Y-m-d\TH:i:s\Z', $since));
    }

    private static function padRecord(string $text): string
    {
        return str_pad(substr($text, 0, self::RECORD_LEN - 1), self::RECORD_LEN - 1, ' ') . "\n";
    }

    private function osError(string $what): LockException
    {
        return new LockException(sprintf('%s lock file %s: %s', $what, Args::cut((string) $this->path), FileSystem::lastReason((string) $this->path)));
    }
}

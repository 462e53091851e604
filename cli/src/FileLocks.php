<?php

namespace CronLock\Cli;

/**
 * `cronlock status` for File locks: the `*.lock` files of a directory, or
 * named files. Held or free and the number of waiters come from the kernel
 * (KernelLocks), never from a probe that takes the lock (a probe would be
 * a holder for a moment: a run starting then would be skipped). Holder pid,
 * host and since come from the file's record when the kernel lists that pid
 * as a holder; a record whose pid holds nothing is history (the lock was
 * released, or the holder died), so the row says free. A holder that wrote
 * no record (flock(1), PHP's flock()) is named by the kernel's pid, since
 * its process start.
 */
final class FileLocks
{
    /** @var KernelLocks */
    private $kernel;
    /** @var string */
    private $hostname;

    public function __construct(KernelLocks $kernel)
    {
        $this->kernel = $kernel;
        $this->hostname = Processes::recordHostname();
    }

    /**
     * @param string[] $errors what could not be read, appended
     * @return LockRow[]|null null when the directory does not exist
     */
    public function directory(string $dir, array &$errors)
    {
        if (!is_dir($dir)) {
            return null;
        }
        $entries = @scandir($dir);
        if ($entries === false) {
            $errors[] = 'cannot list ' . Text::oneLine($dir) . ': ' . self::lastError();
            return [];
        }
        $rows = [];
        foreach ($entries as $entry) {
            if (substr($entry, -5) !== '.lock' || $entry[0] === '.' || !is_file("$dir/$entry") || is_link("$dir/$entry")) {
                continue;
            }
            $row = $this->file("$dir/$entry", $dir, $errors);
            if ($row !== null) {
                $rows[] = $row;
            }
        }
        return $rows;
    }

    /**
     * @param string[] $errors
     * @return LockRow|null null when it cannot be read (the reason in $errors)
     */
    public function file(string $path, string $source, array &$errors)
    {
        $read = self::readRecord($path);
        if (is_string($read)) {
            $errors[] = Text::oneLine($path) . ": $read";
            return null;
        }
        list($st, $record) = $read;
        $row = new LockRow();
        $row->backend = 'file';
        $row->source = $source;
        $row->path = $path;
        $base = basename($path);
        $row->name = substr($base, -5) === '.lock' && $base !== '.lock' ? substr($base, 0, -5) : $base;
        $row->waiters = $this->kernel->waiters($st['dev'], $st['ino']);
        if ($record !== null) {
            $row->record = ['state' => $record->held ? 'held' : 'free', 'pid' => $record->pid, 'host' => $record->host, 'since' => $record->since];
        }
        $holders = $this->kernel->holders($st['dev'], $st['ino']);
        if ($holders === []) {
            if ($record !== null && !$record->held) {
                $row->since = $record->since;
                $row->sinceSource = 'record';
            }
            return $row;
        }
        $row->state = 'held';
        $row->shared = $holders[0]['shared'];
        $pids = array_column($holders, 'pid');
        if ($record !== null && $record->held && in_array($record->pid, $pids, true)) {
            $row->pid = $record->pid;
            $row->host = $record->host;
            $row->since = $record->since;
            $row->sinceSource = 'record';
        } else {
            $row->pid = $pids[0];
            $row->host = $this->hostname;
            $row->since = $row->pid === null ? null : Processes::startTime($row->pid);
            $row->sinceSource = $row->since === null ? null : 'process start';
        }
        if ($row->pid !== null && $row->host === $this->hostname) {
            $row->pidAlive = Processes::alive($row->pid);
        }
        return $row;
    }

    /**
     * The file's identity and record, read without following a symlink,
     * blocking on a FIFO or taking a lock.
     *
     * @return array{0: array, 1: Record|null}|string the reason when it cannot be read
     */
    public static function readRecord(string $path)
    {
        clearstatcache(true, $path);
        $before = @lstat($path);
        if ($before === false) {
            // PHP's lstat() warning names no reason
            $dir = dirname($path);
            return is_dir($dir) && !is_executable($dir) ? 'cannot stat: Permission denied' : 'cannot stat: No such file or directory';
        }
        if (($before['mode'] & 0170000) !== 0100000) {
            return 'not a regular file';
        }
        $handle = @fopen($path, 'rbn');
        if ($handle === false) {
            return 'cannot open: ' . self::lastError();
        }
        $st = fstat($handle);
        if ($st === false || $st['dev'] !== $before['dev'] || $st['ino'] !== $before['ino']) {
            fclose($handle);
            return 'replaced while it was read';
        }
        $bytes = $st['size'] === Record::LENGTH ? (string) fread($handle, Record::LENGTH + 1) : '';
        fclose($handle);
        return [$st, Record::parse($bytes)];
    }

    public static function lastError(): string
    {
        $e = error_get_last();
        if ($e === null) {
            return 'unknown error';
        }
        $at = strrpos($e['message'], ': ');
        return $at === false ? $e['message'] : substr($e['message'], $at + 2);
    }
}

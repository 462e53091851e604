<?php

namespace CronLock\Cli;

/**
 * `cronlock gc --older-than DURATION [--dry-run] [--verbose] [DIR…]`:
 * removes the lock files (`*.lock`) of DIR (default: this user's lock
 * directory) that nobody holds or waits for and nobody used for DURATION.
 *
 * Removing a lock file is only safe against users that, after locking,
 * check that the path still names the file they locked, and start over
 * otherwise (both cronlock implementations do). So each removal is made
 * while gc holds the file's lock itself, as one such user would:
 * 1. skip what the kernel lists as held or waited for, or was used within
 *    DURATION (the file's mtime or its record's since, the later);
 * 2. flock(LOCK_EX | LOCK_NB) the file: busy means in use, keep it;
 * 3. holding it, look again: no waiter in /proc/locks, content empty or a
 *    cronlock record (anything else is someone's data: never removed),
 *    still unused for DURATION, the path still names this file;
 * 4. unlink() while holding the lock, then let go.
 * A cronlock user that opened the file before the unlink gets its lock
 * after gc lets go, sees the path no longer names it, and locks the new
 * file there. A user that does not check (util-linux flock(1), PHP's
 * flock()) and opened the file before the unlink locks the removed file
 * while others lock the new one: gc cannot protect those (docs/operations.md).
 * --dry-run takes no lock: it says what step 1 would let through.
 */
final class GcCommand
{
    const SPEC = ['older-than' => Arguments::VALUE, 'dry-run' => Arguments::FLAG, 'verbose' => Arguments::FLAG];

    /** @param string[] $argv */
    public static function main(array $argv): int
    {
        $args = Arguments::parse($argv, self::SPEC);
        if (!$args->has('older-than')) {
            throw new UsageError('cronlock gc needs --older-than DURATION (30d, 12h, 0s)');
        }
        $olderThan = Duration::parse((string) $args->value('older-than'), '--older-than');
        $dirs = $args->positional();
        if ($dirs === []) {
            $dirs = [LockDirectory::current()->path];
        }
        $gc = new self($olderThan, $args->flag('dry-run'), $args->flag('verbose'));
        $status = ExitStatus::OK;
        foreach ($dirs as $dir) {
            if (!$gc->directory($dir)) {
                $status = ExitStatus::INCOMPLETE;
            }
        }
        return $status;
    }

    /** @var float */
    private $olderThan;
    /** @var bool */
    private $dryRun;
    /** @var bool */
    private $verbose;

    private function __construct(float $olderThan, bool $dryRun, bool $verbose)
    {
        $this->olderThan = $olderThan;
        $this->dryRun = $dryRun;
        $this->verbose = $verbose;
    }

    /** @return bool false when something could not be read or removed */
    private function directory(string $dir): bool
    {
        $shown = Text::oneLine($dir);
        if (!is_dir($dir)) {
            fwrite(STDOUT, "gc $shown: does not exist, nothing to remove\n");
            return true;
        }
        $entries = @scandir($dir);
        if ($entries === false) {
            fwrite(STDERR, "cronlock gc: cannot list $shown: " . FileLocks::lastError() . "\n");
            return false;
        }
        $kept = [];
        $removed = 0;
        $failed = 0;
        foreach ($entries as $entry) {
            $path = "$dir/$entry";
            if (substr($entry, -5) !== '.lock' || $entry[0] === '.' || is_link($path) || !is_file($path)) {
                continue;
            }
            $why = $this->collect($path);
            if ($why === null) {
                $removed++;
                continue;
            }
            if (strncmp($why, 'error: ', 7) === 0) {
                fwrite(STDERR, 'cronlock gc: ' . Text::oneLine($path) . ': ' . substr($why, 7) . "\n");
                $failed++;
                continue;
            }
            $reason = preg_replace('/ \(.*\z/', '', $why);
            $kept[$reason] = (isset($kept[$reason]) ? $kept[$reason] : 0) + 1;
            if ($this->verbose) {
                fwrite(STDOUT, 'kept ' . Text::oneLine($path) . ": $why\n");
            }
        }
        $parts = [];
        foreach ($kept as $reason => $count) {
            $parts[] = "$count $reason";
        }
        fwrite(STDOUT, sprintf("gc %s: %s %d, kept %d%s%s\n", $shown, $this->dryRun ? 'would remove' : 'removed', $removed,
            array_sum($kept), $parts === [] ? '' : ' (' . implode(', ', $parts) . ')',
            $failed === 0 ? '' : ", failed $failed (named on stderr)"));
        return $failed === 0;
    }

    /**
     * Removes $path if nobody holds, waits for or used it for --older-than.
     *
     * @return string|null null: removed (or would be); else why it is kept, or "error: …"
     */
    private function collect(string $path)
    {
        $why = $this->whyKeep($path, false);
        if ($why !== null || $this->dryRun) {
            if ($why === null) {
                fwrite(STDOUT, 'would remove ' . Text::oneLine($path) . "\n");
            }
            return $why;
        }
        $handle = @fopen($path, 'rbne');
        if ($handle === false) {
            return 'error: cannot open: ' . FileLocks::lastError();
        }
        try {
            $st = fstat($handle);
            $now = @lstat($path);
            if ($st === false || $now === false || $st['dev'] !== $now['dev'] || $st['ino'] !== $now['ino'] || ($st['mode'] & 0170000) !== 0100000) {
                return 'replaced meanwhile';
            }
            if (!flock($handle, LOCK_EX | LOCK_NB)) {
                return 'held';
            }
            $why = $this->whyKeep($path, true, $st);
            if ($why !== null) {
                return $why;
            }
            if (!@unlink($path)) {
                return 'error: cannot remove: ' . FileLocks::lastError();
            }
            fwrite(STDOUT, 'removed ' . Text::oneLine($path) . "\n");
            return null;
        } finally {
            fclose($handle); // lets go of the lock, after the unlink
        }
    }

    /**
     * Why $path must stay, as far as the kernel, its content and its age say.
     *
     * @param bool $locked whether we hold its lock (then our own hold is not someone's)
     * @param array|null $lockedSt the stat of the file we hold
     * @return string|null null: it may go
     */
    private function whyKeep(string $path, bool $locked, $lockedSt = null)
    {
        $read = FileLocks::readRecord($path);
        if (is_string($read)) {
            return strncmp($read, 'cannot', 6) === 0 ? "error: $read" : $read;
        }
        list($st, $record) = $read;
        if ($lockedSt !== null && ($st['dev'] !== $lockedSt['dev'] || $st['ino'] !== $lockedSt['ino'])) {
            return 'replaced meanwhile';
        }
        $kernel = KernelLocks::read();
        if (!$kernel->readable()) {
            return 'error: cannot read /proc/locks, so nobody can tell whether it is in use';
        }
        $holders = $kernel->holders($st['dev'], $st['ino']);
        if (!$locked && $holders !== []) {
            return 'held';
        }
        if ($kernel->waiters($st['dev'], $st['ino']) > 0) {
            return 'waited for';
        }
        if ($st['size'] !== 0 && $record === null) {
            return 'not a cronlock lock file (its content is neither empty nor a cronlock record)';
        }
        $used = max($st['mtime'], $record === null ? 0 : $record->since);
        $idle = time() - $used;
        if ($idle < $this->olderThan) {
            return sprintf('used within %s (%s ago)', Duration::format($this->olderThan), Duration::format((float) $idle));
        }
        return null;
    }
}

<?php

namespace CronLock\Cli;

/**
 * The flock(2) locks of this host as the kernel lists them in /proc/locks,
 * read once, without taking any lock (decision D23):
 *
 *   1: FLOCK  ADVISORY  WRITE 24684 fe:00:10010629 0 EOF       a holder
 *   1: -> FLOCK  ADVISORY  READ 24688 fe:00:10010629 0 EOF     a blocked waiter
 *
 * Only FLOCK entries count (POSIX and OFD locks are other locks), for
 * exactly one device and inode (device as "major:minor" in hex, as the
 * kernel prints st_dev). A waiter shows only while it blocks in flock():
 * one that polls with LOCK_NB, as cronlock's own waits do today, is in no
 * list. The pid is the process that took the lock; 0 or -1 (another pid
 * namespace) is shown as unknown.
 */
final class KernelLocks
{
    /** @var array<string, array{holders: array<int, array{pid: int|null, shared: bool}>, waiters: int}> */
    private $byFile = [];
    /** @var bool */
    private $readable;

    /**
     * The kernel prints /proc/locks a page per read, and a lock taken or
     * freed anywhere on the host between two pages shifts the list: an
     * entry at a page boundary (a holder with its waiters) is printed twice
     * or not at all. So each read counts a pid once per file and kind, and
     * two reads are merged: every holder either lists, the larger number of
     * waiters.
     */
    public static function read(string $path = '/proc/locks'): self
    {
        $self = new self();
        $first = @file_get_contents($path);
        $self->readable = is_string($first);
        $second = $self->readable ? @file_get_contents($path) : false;
        $reads = [self::parse((string) $first), self::parse(is_string($second) ? $second : '')];
        foreach ($reads as $read) {
            foreach ($read as $key => $file) {
                if (!isset($self->byFile[$key])) {
                    $self->byFile[$key] = ['holders' => [], 'waiters' => 0];
                }
                $self->byFile[$key]['holders'] += $file['holders'];
                $self->byFile[$key]['waiters'] = max($self->byFile[$key]['waiters'], count($file['waiters']));
            }
        }
        foreach ($self->byFile as $key => $file) {
            $self->byFile[$key]['holders'] = array_values($file['holders']);
        }
        return $self;
    }

    /**
     * One read's locks by file: holders and waiters keyed by pid (those the
     * kernel cannot name, pid 0 or -1, by their order in the file).
     *
     * @return array<string, array{holders: array<string, array{pid: int|null, shared: bool}>, waiters: array<string, true>}>
     */
    private static function parse(string $text): array
    {
        $byFile = [];
        foreach (explode("\n", $text) as $line) {
            if (!preg_match('/\A\s*[0-9]+:\s+(->\s+)?FLOCK\s+\S+\s+(READ|WRITE)\s+(-?[0-9]+)\s+([0-9a-f]+:[0-9a-f]+:[0-9]+)\s/', $line, $m)) {
                continue;
            }
            if (!isset($byFile[$m[4]])) {
                $byFile[$m[4]] = ['holders' => [], 'waiters' => []];
            }
            $pid = (int) $m[3];
            $kind = $m[1] !== '' ? 'waiters' : 'holders';
            $id = $pid > 0 ? "pid $pid" : 'unnamed ' . count($byFile[$m[4]][$kind]);
            if ($kind === 'waiters') {
                $byFile[$m[4]]['waiters'][$id] = true;
            } else {
                $byFile[$m[4]]['holders'][$id . ' ' . $m[2]] = ['pid' => $pid > 0 ? $pid : null, 'shared' => $m[2] === 'READ'];
            }
        }
        return $byFile;
    }

    /** Whether /proc/locks could be read (Linux with /proc). */
    public function readable(): bool
    {
        return $this->readable;
    }

    /** @return array<int, array{pid: int|null, shared: bool}> the holders of the file with this stat() device and inode */
    public function holders(int $dev, int $ino): array
    {
        $key = self::key($dev, $ino);
        return isset($this->byFile[$key]) ? $this->byFile[$key]['holders'] : [];
    }

    /** How many processes block in flock() waiting for this file. */
    public function waiters(int $dev, int $ino): int
    {
        $key = self::key($dev, $ino);
        return isset($this->byFile[$key]) ? $this->byFile[$key]['waiters'] : 0;
    }

    /** st_dev and st_ino as /proc/locks names them (Linux's major/minor split of dev_t). */
    public static function key(int $dev, int $ino): string
    {
        $major = (($dev >> 8) & 0xfff) | (($dev >> 32) & ~0xfff);
        $minor = ($dev & 0xff) | (($dev >> 12) & ~0xff);
        return sprintf('%02x:%02x:%d', $major, $minor, $ino);
    }
}

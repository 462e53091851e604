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

    public static function read(string $path = '/proc/locks'): self
    {
        $self = new self();
        $text = @file_get_contents($path);
        $self->readable = is_string($text);
        foreach (explode("\n", (string) $text) as $line) {
            if (!preg_match('/\A\s*[0-9]+:\s+(->\s+)?FLOCK\s+\S+\s+(READ|WRITE)\s+(-?[0-9]+)\s+([0-9a-f]+:[0-9a-f]+:[0-9]+)\s/', $line, $m)) {
                continue;
            }
            if (!isset($self->byFile[$m[4]])) {
                $self->byFile[$m[4]] = ['holders' => [], 'waiters' => 0];
            }
            if ($m[1] !== '') {
                $self->byFile[$m[4]]['waiters']++;
            } else {
                $pid = (int) $m[3];
                $self->byFile[$m[4]]['holders'][] = ['pid' => $pid > 0 ? $pid : null, 'shared' => $m[2] === 'READ'];
            }
        }
        return $self;
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

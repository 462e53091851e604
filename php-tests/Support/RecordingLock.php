<?php

declare(strict_types=1);

namespace CronLock\Tests\Support;

use CronLock\Lock;

/**
 * A userland CronLock\Lock that records what cron_guard() does with it.
 * (Not a mock: a real implementation of the interface, as users write them.)
 * acquire() on a held lock confirms it and counts nothing, as decision D1 says.
 */
final class RecordingLock implements Lock
{
    /** @var list<string> */
    public array $calls = [];
    private bool $held = false;
    private bool $available;

    public function __construct(bool $available = true)
    {
        $this->available = $available;
    }

    public function acquire(float $timeout = 0.0): bool
    {
        $this->calls[] = 'acquire(' . var_export($timeout, true) . ')';
        if ($this->held) {
            return true;
        }
        $this->held = $this->available;
        return $this->held;
    }

    public function renew(?float $ttl = null): bool
    {
        $this->calls[] = 'renew';
        return $this->held;
    }

    public function release(): bool
    {
        $this->calls[] = 'release';
        $was = $this->held;
        $this->held = false;
        return $was;
    }

    public function isHeld(): bool
    {
        return $this->held;
    }
}

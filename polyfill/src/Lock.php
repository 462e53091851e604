<?php

namespace CronLock;

/**
 * A lock that cron_guard() and your code can take and give up (the same
 * interface as the extension's; see stubs/cronlock.stub.php).
 */
interface Lock
{
    /**
     * @param float $timeout 0: try once; > 0: wait up to that many seconds; < 0: until acquired.
     * @return bool true: we hold it now; false: someone else holds it, or a signal cut the wait short.
     * @throws LockException when the lock cannot be used at all.
     * @throws \ValueError when $timeout is NaN.
     */
    public function acquire(float $timeout = 0.0): bool;

    /** @return bool false when the lock is no longer ours. */
    public function renew(?float $ttl = null): bool;

    /** @return bool true: we held it and released it; false: we did not hold it. */
    public function release(): bool;

    /** @return bool whether this object believes it holds the lock (no syscall, no round trip). */
    public function isHeld(): bool;
}

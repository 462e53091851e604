<?php

namespace CronLock\Symfony\Store;

use CronLock\File;
use Symfony\Component\Lock\BlockingSharedLockStoreInterface;
use Symfony\Component\Lock\BlockingStoreInterface;
use Symfony\Component\Lock\Exception\InvalidArgumentException;
use Symfony\Component\Lock\Exception\LockConflictedException;
use Symfony\Component\Lock\Key;

/**
 * A symfony/lock store over CronLock\File: flock(2) locks on files in one
 * directory, exclusive or shared, blocking or not, that never expire and are
 * freed by the kernel the instant their process dies. One file per
 * resource: "<resource, made file-safe, 50 characters>.<12 hex of its
 * SHA-256>.lock".
 *
 * Traps it closes (beyond CronLock\File's own):
 * - Shared to exclusive (and back) on one Key: flock(2) converts a lock by
 *   dropping it and taking the other kind, so another process may get in
 *   between; here too. A conversion that fails (someone got in) takes the
 *   previous kind back when it can, so the Key keeps what it had, and throws
 *   LockConflictedException; if even that fails, the Key holds nothing.
 * - exists() asks whether the path still names the locked file
 *   (CronLock\File::renew()): a lock file deleted or replaced under a
 *   holder is reported lost, not held.
 * - A Key held here cannot be serialized: the lock is this process's.
 */
final class FileStore implements BlockingStoreInterface, BlockingSharedLockStoreInterface
{
    use HeldKeys;

    /** @var string */
    private $directory;
    /** @var array<string, mixed> */
    private $options;

    /**
     * @param string $directory where the lock files are (made if missing, 0755)
     * @param array{mode?: int, allow_network_fs?: bool} $options CronLock\File's options
     */
    public function __construct(string $directory, array $options = [])
    {
        if (isset($options['shared'])) {
            throw new InvalidArgumentException("FileStore takes no 'shared' option: acquireRead() takes a shared lock");
        }
        if (!is_dir($directory) && !@mkdir($directory, 0755, true) && !is_dir($directory)) {
            throw new InvalidArgumentException(sprintf('The lock directory "%s" does not exist and cannot be created.', $directory));
        }
        $this->directory = rtrim($directory, '/');
        $this->options = $options;
    }

    public function save(Key $key)
    {
        $this->lock($key, false, false);
    }

    public function saveRead(Key $key)
    {
        $this->lock($key, true, false);
    }

    public function waitAndSave(Key $key)
    {
        $this->lock($key, false, true);
    }

    public function waitAndSaveRead(Key $key)
    {
        $this->lock($key, true, true);
    }

    public function putOffExpiration(Key $key, float $ttl)
    {
        // flock(2) does not expire; but a Key that lost its file is not held any more.
        if (!$this->exists($key)) {
            throw new LockConflictedException(sprintf('The "%s" lock is not held any more.', $key));
        }
    }

    public function delete(Key $key)
    {
        $this->forget($key);
    }

    public function exists(Key $key)
    {
        $state = $this->state($key);
        if ($state === null) {
            return false;
        }
        if ($state['lock']->renew()) {
            return true;
        }
        $key->removeState(self::class);
        return false;
    }

    /** The lock file of a resource. */
    public function path(Key $key): string
    {
        $resource = (string) $key;
        return sprintf('%s/%s.%s.lock', $this->directory, substr(preg_replace('/[^A-Za-z0-9._-]+/', '-', $resource), 0, 50), substr(hash('sha256', $resource), 0, 12));
    }

    private function lock(Key $key, bool $shared, bool $blocking): void
    {
        $state = $this->state($key);
        if ($state !== null) {
            if ($state['shared'] === $shared && $state['lock']->acquire(0)) {
                return; // held as asked, and still ours
            }
            $this->forget($key); // converting, or lost: let go first, as flock(2) does
        }
        $lock = new File($this->path($key), ['shared' => $shared] + $this->options);
        if ($lock->acquire($blocking ? -1.0 : 0.0)) {
            $this->remember($key, $lock, ['shared' => $shared]);
            return;
        }
        if ($state !== null && $state['shared'] !== $shared) {
            $previous = new File($this->path($key), ['shared' => $state['shared']] + $this->options);
            if ($previous->acquire(0)) {
                $this->remember($key, $previous, ['shared' => $state['shared']]);
            }
        }
        throw new LockConflictedException(sprintf('The "%s" lock is held by someone else.', $key));
    }
}

<?php

namespace CronLock\Symfony\Console;

use Symfony\Component\Console\Exception\LogicException;
use Symfony\Component\Lock\LockFactory;
use Symfony\Component\Lock\LockInterface;
use Symfony\Component\Lock\PersistingStoreInterface;

/**
 * Symfony Console's LockableTrait (lock(), release()) with the store given:
 * a cronlock store (FileStore on one host; RedisStore, DatabaseStore across
 * hosts), or any symfony/lock store. Console's own trait always takes a
 * SemaphoreStore or a FlockStore in the temp directory.
 *
 *   final class SyncCommand extends Command
 *   {
 *       use LockableTrait;
 *       public function __construct(PersistingStoreInterface $store) { parent::__construct(); $this->setLockStore($store); }
 *       protected function execute(InputInterface $input, OutputInterface $output): int
 *       {
 *           if (!$this->lock()) { $output->writeln('The command is already running.'); return Command::SUCCESS; }
 *           …
 *       }
 *   }
 *
 * The lock is taken without a TTL (Lock's $ttl null): it lives as long as
 * the store keeps it (File: the process; Database: its session; Redis: the
 * store's initial TTL, or as long as the process with 'auto_renew').
 */
trait LockableTrait
{
    /** @var LockInterface|null */
    private $lock;
    /** @var PersistingStoreInterface|null */
    private $lockStore;

    public function setLockStore(PersistingStoreInterface $store): void
    {
        $this->lockStore = $store;
    }

    /**
     * Locks a command: true when it got the lock, false when another holds it.
     *
     * @param string|null $name the lock's resource (default: the command's name)
     * @param bool $blocking wait until the lock is free
     * @param PersistingStoreInterface|null $store default: the one setLockStore() gave
     */
    private function lock(?string $name = null, bool $blocking = false, ?PersistingStoreInterface $store = null): bool
    {
        if ($this->lock !== null) {
            throw new LogicException('A lock is already in place.');
        }
        $store = $store ?? $this->lockStore;
        if ($store === null) {
            throw new LogicException(sprintf('%s::lock() needs a store: call setLockStore() first or pass one (e.g. new %s($directory)).', static::class, \CronLock\Symfony\Store\FileStore::class));
        }
        $this->lock = (new LockFactory($store))->createLock($name ?: $this->getName(), null);
        if (!$this->lock->acquire($blocking)) {
            $this->lock = null;
            return false;
        }
        return true;
    }

    /** Releases the command's lock, if it holds one. */
    private function release(): void
    {
        if ($this->lock !== null) {
            $this->lock->release();
            $this->lock = null;
        }
    }
}

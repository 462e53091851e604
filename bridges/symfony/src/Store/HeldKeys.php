<?php

namespace CronLock\Symfony\Store;

use CronLock\Lock;
use Symfony\Component\Lock\Key;

/**
 * Where a store keeps the cronlock lock object that holds a Key: in the
 * Key's state, under the store's class. A cronlock lock belongs to the
 * process (and the object) that took it, so the Key is marked
 * unserializable: it cannot be carried to another request or process, where
 * the lock would not be held.
 */
trait HeldKeys
{
    /** @return array<string, mixed>|null ['lock' => Lock, …] while this Key holds */
    private function state(Key $key): ?array
    {
        return $key->hasState(static::class) ? $key->getState(static::class) : null;
    }

    /** @param array<string, mixed> $extra */
    private function remember(Key $key, Lock $lock, array $extra = []): void
    {
        $key->setState(static::class, ['lock' => $lock] + $extra);
        $key->markUnserializable();
    }

    /** Forget the Key's hold and give the lock up (a lost hold releases nothing). */
    private function forget(Key $key): void
    {
        $state = $this->state($key);
        if ($state === null) {
            return;
        }
        $key->removeState(static::class);
        $state['lock']->release();
    }
}

<?php

namespace CronLock\Polyfill;

use CronLock\LockException;

/**
 * serialize() and unserialize() of a lock or a Guard throw the extension's
 * LockException: a lock belongs to the process that holds it. Every hook
 * PHP 7.1-8.5 may call, including \Serializable's (PHP 7.1-7.3, and the C:
 * format of unserialize()).
 *
 * @internal
 */
trait RefusesSerialization
{
    public function __sleep()
    {
        throw $this->notSerializable();
    }

    public function __wakeup()
    {
        throw $this->notSerializable();
    }

    public function __serialize(): array
    {
        throw $this->notSerializable();
    }

    public function __unserialize(array $data)
    {
        throw $this->notSerializable();
    }

    public function serialize()
    {
        throw $this->notSerializable();
    }

    /** @param string $data */
    public function unserialize($data)
    {
        throw $this->notSerializable();
    }

    private function notSerializable(): LockException
    {
        return new LockException('a ' . get_class($this) . ' cannot be serialized: a lock belongs to the process that holds it');
    }
}

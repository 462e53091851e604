<?php

declare(strict_types=1);

namespace CronLock\Tests;

/** CronLock\Database beyond the contract, on a private PostgreSQL server. */
final class DatabasePgsqlLockTest extends DatabaseLockTestCase
{
    protected static function databaseKind(): string
    {
        return 'pgsql';
    }
}

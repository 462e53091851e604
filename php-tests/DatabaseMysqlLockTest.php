<?php

declare(strict_types=1);

namespace CronLock\Tests;

/** CronLock\Database beyond the contract, on a private MariaDB server. */
final class DatabaseMysqlLockTest extends DatabaseLockTestCase
{
    protected static function databaseKind(): string
    {
        return 'mysql';
    }
}

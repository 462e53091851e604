<?php

declare(strict_types=1);

namespace CronLock\Tests;

/**
 * CronLock\Database beyond the contract, on a private MariaDB server.
 *
 * @group extension-only
 * cronlock/polyfill has no Database lock (it needs the extension).
 */
final class DatabaseMysqlLockTest extends DatabaseLockTestCase
{
    protected static function databaseKind(): string
    {
        return 'mysql';
    }
}

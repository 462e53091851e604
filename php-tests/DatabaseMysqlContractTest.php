<?php

declare(strict_types=1);

namespace CronLock\Tests;

/**
 * The CronLock\Lock contract for CronLock\Database on a private MariaDB server.
 *
 * @group extension-only
 * cronlock/polyfill has no Database lock (it needs the extension).
 */
final class DatabaseMysqlContractTest extends DatabaseContractTestCase
{
    protected static function databaseKind(): string
    {
        return 'mysql';
    }
}

<?php

declare(strict_types=1);

namespace CronLock\Tests;

/**
 * CronLock\Database::claim() on a private MariaDB server.
 *
 * @group extension-only
 * cronlock/polyfill has no Database lock (it needs the extension).
 */
final class DatabaseMysqlClaimsTest extends DatabaseClaimsTestCase
{
    protected static function databaseKind(): string
    {
        return 'mysql';
    }
}

<?php

declare(strict_types=1);

namespace CronLock\Tests;

/**
 * CronLock\Database::claim() on a private PostgreSQL server.
 *
 * @group extension-only
 * cronlock/polyfill has no Database lock (it needs the extension).
 */
final class DatabasePgsqlClaimsTest extends DatabaseClaimsTestCase
{
    protected static function databaseKind(): string
    {
        return 'pgsql';
    }
}

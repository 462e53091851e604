<?php

declare(strict_types=1);

namespace CronLock\Tests;

/**
 * What a private PostgreSQL server (with pg_stat_statements) sees of
 * CronLock\Database lock cycles.
 *
 * @group extension-only
 * cronlock/polyfill has no Database lock (it needs the extension).
 */
final class DatabasePgsqlStatementsTest extends DatabaseStatementsTestCase
{
    protected static function databaseKind(): string
    {
        return 'pgsql';
    }
}

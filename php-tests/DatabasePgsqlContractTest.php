<?php

declare(strict_types=1);

namespace CronLock\Tests;

/** The CronLock\Lock contract for CronLock\Database on a private PostgreSQL server. */
final class DatabasePgsqlContractTest extends DatabaseContractTestCase
{
    protected static function databaseKind(): string
    {
        return 'pgsql';
    }
}

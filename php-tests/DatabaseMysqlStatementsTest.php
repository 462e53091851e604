<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\Database;

/**
 * What a private MariaDB server sees of CronLock\Database lock cycles.
 *
 * @group extension-only
 * cronlock/polyfill has no Database lock (it needs the extension).
 */
final class DatabaseMysqlStatementsTest extends DatabaseStatementsTestCase
{
    protected static function databaseKind(): string
    {
        return 'mysql';
    }

    /** max_prepared_stmt_count = 0: every server-side prepare is refused; the lock goes on emulated. */
    public function testAServerThatRefusesPreparedStatementsStillLocks(): void
    {
        $admin = self::$server->adminPdo();
        $admin->exec('SET GLOBAL max_prepared_stmt_count = 0');
        try {
            $name = 'statements-refused-' . getmypid();
            $lock = self::dsnLock($name);
            for ($i = 0; $i < 5; $i++) {
                self::assertTrue($lock->acquire(0), "cycle $i");
                self::assertFalse(self::dsnLock($name)->acquire(0));
                self::assertTrue($lock->release(), "cycle $i");
            }
        } finally {
            $admin->exec('SET GLOBAL max_prepared_stmt_count = DEFAULT');
        }
    }

    /** An unbuffered PDO given is free for the user's next query after every lock call. */
    public function testAnUnbufferedPdoGivenStaysUsable(): void
    {
        $pdo = self::$server->pdo();
        $pdo->setAttribute(\PDO::MYSQL_ATTR_USE_BUFFERED_QUERY, false);
        $lock = new Database($pdo, 'statements-unbuffered-' . getmypid());
        for ($i = 0; $i < 3; $i++) {
            self::assertTrue($lock->acquire(0));
            self::assertTrue($lock->renew());
            self::assertSame('1', (string) $pdo->query('SELECT 1')->fetchColumn());
            self::assertTrue($lock->release());
            self::assertSame('2', (string) $pdo->query('SELECT 2')->fetchColumn());
        }
    }
}

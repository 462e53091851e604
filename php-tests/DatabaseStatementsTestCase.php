<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\Database;
use CronLock\Tests\Support\DatabaseTestHelpers;
use PHPUnit\Framework\TestCase;

/**
 * What the server sees of a CronLock\Database lock cycle, counted by the
 * server itself (MySQL's status counters, PostgreSQL's pg_stat_statements):
 * two statements per acquire(0) + release() on the lock's own connection,
 * prepared on the server once they repeat; nothing prepared on the user's
 * PDO's server; and the lock still works when the server refuses prepared
 * statements. Counts, never times (docs/benchmarks.md has the times).
 */
abstract class DatabaseStatementsTestCase extends TestCase
{
    use DatabaseTestHelpers;

    protected static function serverArguments(): array
    {
        return static::databaseKind() === 'pgsql' && self::pgStatStatements()
            ? ['-c', 'shared_preload_libraries=pg_stat_statements'] : [];
    }

    /** Whether PostgreSQL's pg_stat_statements is installed (Debian: in postgresql-NN). */
    private static function pgStatStatements(): bool
    {
        return (bool) glob('/usr/lib/postgresql/*/lib/pg_stat_statements.so');
    }

    protected function setUp(): void
    {
        $missing = \CronLock\Tests\Support\DatabaseServer::available(static::databaseKind());
        if ($missing !== null) {
            self::markTestSkipped($missing);
        }
        parent::setUp();
        if (static::databaseKind() === 'pgsql' && !self::pgStatStatements()) {
            self::markTestSkipped('pg_stat_statements is not installed (apt-get install postgresql)');
        }
        if (static::databaseKind() === 'pgsql') {
            self::$server->adminPdo()->exec('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
        }
    }

    private static function name(string $what): string
    {
        return "statements-$what-" . getmypid() . '-' . bin2hex(random_bytes(3));
    }

    /** Statements the server ran for the user 'cron' so far (the administrator's own are not counted). */
    private static function statementsOfCron(\PDO $admin): int
    {
        if (static::databaseKind() === 'mysql') {
            // Questions counts every client's statements, this SHOW too
            // (countCycles() takes it off).
            return (int) $admin->query("SHOW GLOBAL STATUS LIKE 'Questions'")->fetch(\PDO::FETCH_NUM)[1];
        }
        return (int) $admin->query("SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE userid = (SELECT oid FROM pg_roles WHERE rolname = 'cron')")->fetchColumn();
    }

    /** @return array{0: int, 1: int} statements for 50 cycles after 3 cycles of warm-up, and the server-side prepares in those 50 */
    private static function countCycles(Database $lock): array
    {
        for ($i = 0; $i < 3; $i++) {
            self::assertTrue($lock->acquire(0));
            self::assertTrue($lock->release());
        }
        // What counting itself adds (MySQL: the administrator's SHOW).
        $admin = self::$server->adminPdo();
        $idle = -self::statementsOfCron($admin) + self::statementsOfCron($admin);
        $prepared = self::preparedOnServer($admin);
        $before = self::statementsOfCron($admin);
        for ($i = 0; $i < 50; $i++) {
            self::assertTrue($lock->acquire(0));
            self::assertTrue($lock->release());
        }
        $statements = self::statementsOfCron($admin) - $before - $idle;
        return [$statements, self::preparedOnServer($admin) - $prepared];
    }

    /** Statements prepared on the server so far (MySQL Com_stmt_prepare; PostgreSQL: none counted, 0). */
    private static function preparedOnServer(\PDO $admin): int
    {
        if (static::databaseKind() !== 'mysql') {
            return 0;
        }
        return (int) $admin->query("SHOW GLOBAL STATUS LIKE 'Com_stmt_prepare'")->fetch(\PDO::FETCH_NUM)[1];
    }

    public function testALockCycleIsTwoStatementsOnTheServerPreparedOnce(): void
    {
        [$statements, $prepared] = self::countCycles(self::dsnLock(self::name('dsn')));
        self::assertSame(100, $statements, 'acquire(0) + release(): one statement each');
        self::assertSame(0, $prepared, 'prepared on the server at their second run, not again');
        [$statements] = self::countCycles(new Database(self::$server->pdo(), self::name('pdo')));
        self::assertSame(100, $statements, 'the same on the PDO given');
    }

    public function testThePdoGivenGetsNoStatementOnItsServer(): void
    {
        $pdo = self::$server->pdo();
        $lock = new Database($pdo, self::name('given'));
        for ($i = 0; $i < 5; $i++) {
            self::assertTrue($lock->acquire(0));
            self::assertTrue($lock->release());
        }
        // Asked through an emulated statement, which leaves nothing either.
        $ask = $pdo->prepare(static::databaseKind() === 'mysql'
            ? "SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = 'COM_STMT_PREPARE'"
            : 'SELECT count(*) FROM pg_prepared_statements', [\PDO::ATTR_EMULATE_PREPARES => true]);
        $ask->execute();
        $held = (int) $ask->fetchColumn();
        self::assertSame(0, $held, 'emulated statements only: nothing kept on the server for the user\'s session');
    }

    /** A DSN lock's statements after their second run are the server's: the session shows them. */
    public function testADsnLocksRepeatedStatementsArePreparedOnTheServer(): void
    {
        $name = self::name('native');
        $lock = self::dsnLock($name);
        for ($i = 0; $i < 3; $i++) {
            self::assertTrue($lock->acquire(0));
            self::assertTrue($lock->release());
        }
        if (static::databaseKind() === 'mysql') {
            $count = (int) self::$server->adminPdo()->query("SHOW GLOBAL STATUS LIKE 'Prepared_stmt_count'")->fetch(\PDO::FETCH_NUM)[1];
            self::assertGreaterThanOrEqual(2, $count, 'GET_LOCK and RELEASE_LOCK prepared');
        } else {
            $count = (int) self::$server->adminPdo()->query("SELECT count(*) FROM pg_stat_statements WHERE query LIKE 'SELECT pg_try_advisory_lock(\$1::bigint)%'")->fetchColumn();
            self::assertGreaterThanOrEqual(1, $count);
        }
        unset($lock);
        $other = self::dsnLock($name);
        self::assertTrue($other->acquire(0), 'destroying the lock (its statements deallocated) freed it');
    }
}

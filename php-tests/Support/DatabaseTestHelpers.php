<?php

declare(strict_types=1);

namespace CronLock\Tests\Support;

use CronLock\Database;

/**
 * A private database server (Support\DatabaseServer) for a whole test
 * class, of the kind the class names with databaseKind() ('mysql' or
 * 'pgsql'), and the PHP that builds a CronLock\Database on it. A class whose
 * server software is missing is skipped with the package to install.
 */
trait DatabaseTestHelpers
{
    protected static ?DatabaseServer $server = null;

    abstract protected static function databaseKind(): string;

    /** @return list<string> more arguments of the class's server (DatabaseServer::start()) */
    protected static function serverArguments(): array
    {
        return [];
    }

    public static function setUpBeforeClass(): void
    {
        parent::setUpBeforeClass();
        if (DatabaseServer::available(static::databaseKind()) === null) {
            self::$server = DatabaseServer::start(static::databaseKind(), static::serverArguments());
        }
    }

    public static function tearDownAfterClass(): void
    {
        if (self::$server !== null) {
            self::$server->stop();
        }
        self::$server = null;
        parent::tearDownAfterClass();
    }

    protected function setUp(): void
    {
        $missing = DatabaseServer::available(static::databaseKind());
        if ($missing !== null) {
            self::markTestSkipped($missing);
        }
        parent::setUp();
    }

    /** @return array{user: string, password: string} */
    protected static function credentials(): array
    {
        return ['user' => self::$server->user(), 'password' => self::$server->password()];
    }

    protected static function dsnLock(string $name): Database
    {
        return new Database(self::$server->dsn(), $name, self::credentials());
    }

    /** PHP for a child: `new \CronLock\Database(<dsn>, $name, [user, password])`. */
    private static function dsnLockCode(string $name): string
    {
        return sprintf('new \CronLock\Database(%s, %s, %s)', var_export(self::$server->dsn(), true), var_export($name, true), var_export(self::credentials(), true));
    }

    /** PHP for a child: `new \PDO(...)` on the test server as 'cron'. */
    private static function pdoCode(): string
    {
        return sprintf('new \PDO(%s, %s, %s, [\PDO::ATTR_ERRMODE => \PDO::ERRMODE_EXCEPTION])', var_export(self::$server->dsn(), true), var_export(self::$server->user(), true), var_export(self::$server->password(), true));
    }

    /** PHP for a child: `new \PDO(...)` as 'cron' over the server's Unix socket (MySQL's host=localhost). */
    private static function socketPdoCode(): string
    {
        $dir = self::$server->socketDir();
        $dsn = static::databaseKind() === 'mysql'
            ? "mysql:unix_socket=$dir/mysqld.sock;dbname=cron"
            : "pgsql:host=$dir;port=" . self::$server->port() . ';dbname=cron';
        return sprintf('new \PDO(%s, %s, %s, [\PDO::ATTR_ERRMODE => \PDO::ERRMODE_EXCEPTION])', var_export($dsn, true), var_export(self::$server->user(), true), var_export(self::$server->password(), true));
    }

    /** The SQL a DBA types to try the lock of $name by hand (1/0 or t/f). */
    private static function tryLockSql(string $name): string
    {
        $quoted = "'" . str_replace("'", "''", $name) . "'";
        if (static::databaseKind() === 'mysql') {
            $plain = strlen($name) <= 64 && strncmp($name, 'cronlock:', 9) !== 0 && preg_match('/^[\x20-\x40\x5b-\x7e]+$/', $name);
            $lockName = $plain ? $quoted : "CONCAT('cronlock:', SHA1($quoted))";
            return "SELECT GET_LOCK($lockName, 0)";
        }
        return "SELECT pg_try_advisory_lock(('x' || left(md5($quoted), 16))::bit(64)::bigint)";
    }

    /** The session id (connection id / backend pid) that holds $name now, asked as the administrator. */
    private static function holderSession(string $name): ?int
    {
        $probe = self::dsnLock($name);
        $holder = $probe->holder();
        if ($holder === null) {
            return null;
        }
        preg_match('/(?:connection|pid) (\d+)/', $holder, $m);
        return (int) $m[1];
    }

    /**
     * Ends a session on the server: KILL / pg_terminate_backend(), and
     * waits until it is gone. MySQL's KILL only marks the session: on a busy
     * host it may still answer the next statement (seen in CI: a RELEASE_LOCK
     * that succeeded after KILL had returned).
     */
    private static function killSession(int $id): void
    {
        $admin = self::$server->adminPdo();
        if (static::databaseKind() === 'mysql') {
            $admin->exec("KILL $id");
            $alive = "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = $id";
        } else {
            $admin->query("SELECT pg_terminate_backend($id, 5000)");
            $alive = "SELECT COUNT(*) FROM pg_stat_activity WHERE pid = $id";
        }
        $deadline = microtime(true) + 30.0;
        while ((int) $admin->query($alive)->fetchColumn() > 0) {
            self::assertLessThan($deadline, microtime(true), "session $id still there 30 s after it was killed");
            usleep(10000);
        }
    }
}

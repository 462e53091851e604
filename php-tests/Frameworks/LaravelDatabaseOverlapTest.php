<?php

declare(strict_types=1);

namespace CronLock\Tests\Frameworks;

use CronLock\Tests\Support\DatabaseServer;

/**
 * LaravelOverlapTestCase on the database backend, a MariaDB server of the
 * test's own. The server frees a killed holder's GET_LOCK() when it sees
 * the connection close, which it does on its own time: the tick that runs
 * the job again is measured, and bounded, not required to be the next one.
 *
 * @group extension-only
 * cronlock/polyfill has no CronLock\Database (README: it throws "needs the cronlock extension").
 */
final class LaravelDatabaseOverlapTest extends LaravelOverlapTestCase
{
    private static ?DatabaseServer $db = null;

    public static function setUpBeforeClass(): void
    {
        parent::setUpBeforeClass();
        if (DatabaseServer::available('mysql') === null) {
            self::$db = DatabaseServer::start('mysql');
        }
    }

    public static function tearDownAfterClass(): void
    {
        if (self::$db !== null) {
            self::$db->stop();
        }
        self::$db = null;
        parent::tearDownAfterClass();
    }

    protected function setUp(): void
    {
        if (($missing = DatabaseServer::available('mysql')) !== null) {
            self::markTestSkipped($missing);
        }
        parent::setUp();
    }

    protected function cronlockConfig(): array
    {
        return [
            'backend' => 'database',
            'dsn' => self::$db->dsn(),
            'username' => self::$db->user(),
            'password' => self::$db->password(),
            'prefix' => 'test-' . bin2hex(random_bytes(4)) . ':',
        ];
    }

    protected function recoversOnTheNextTick(): bool
    {
        return false;
    }
}

<?php

declare(strict_types=1);

namespace CronLock\Tests\Frameworks;

use CronLock\Tests\Support\DatabaseServer;

/**
 * onOneServer() on the database backend: the two hosts share a MariaDB
 * server of the test's own, whose claims table (created as
 * docs/frameworks.md says) is what decides each tick (Database::claim());
 * each application keeps its own file cache.
 *
 * @group extension-only
 * cronlock/polyfill has no CronLock\Database (README: it throws "needs the cronlock extension").
 */
final class LaravelDatabaseOnOneServerTest extends LaravelOnOneServerTestCase
{
    public function testEachTickRunsOnExactlyOneHost(): void
    {
        $this->assertEachTickRunsOnExactlyOneHost();
    }

    private static ?DatabaseServer $db = null;

    public static function setUpBeforeClass(): void
    {
        parent::setUpBeforeClass();
        if (DatabaseServer::available('mysql') === null) {
            self::$db = DatabaseServer::start('mysql');
            self::$db->pdo()->exec('CREATE TABLE cronlock_claims (name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY, '
                . 'expires_at DATETIME(6) NOT NULL, holder VARCHAR(255) NOT NULL, INDEX (expires_at))');
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

    protected function cronlockConfig(string $base): array
    {
        return [
            'backend' => 'database',
            'dsn' => self::$db->dsn(),
            'username' => self::$db->user(),
            'password' => self::$db->password(),
            'prefix' => 'test-' . bin2hex(random_bytes(4)) . ':',
        ];
    }

    protected function claimsExpiredBefore(float $t, array $config): int
    {
        $statement = self::$db->pdo()->prepare('SELECT COUNT(*) FROM cronlock_claims WHERE expires_at <= FROM_UNIXTIME(?)');
        $statement->execute([sprintf('%.6f', $t)]);
        return (int) $statement->fetchColumn();
    }

    protected function recoversOnTheNextTick(): bool
    {
        return false; // the server frees the killed winner's GET_LOCK() when it sees the connection close
    }
}

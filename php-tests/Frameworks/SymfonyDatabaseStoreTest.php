<?php

declare(strict_types=1);

namespace CronLock\Tests\Frameworks;

use CronLock\Symfony\Store\DatabaseStore;
use CronLock\Tests\Support\DatabaseServer;
use Symfony\Component\Lock\Exception\LockConflictedException;
use Symfony\Component\Lock\Key;
use Symfony\Component\Lock\LockFactory;
use Symfony\Component\Lock\PersistingStoreInterface;

/**
 * CronLock\Symfony\Store\DatabaseStore on a MariaDB server of the test's
 * own: SymfonyStoreTestCase, and exists() / refresh() asking the server
 * whether the session still holds the lock.
 *
 * @group extension-only
 * cronlock/polyfill has no CronLock\Database (README: it throws "needs the cronlock extension").
 */
final class SymfonyDatabaseStoreTest extends SymfonyStoreTestCase
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

    protected function getStore(): PersistingStoreInterface
    {
        return new DatabaseStore(self::$db->dsn(), ['user' => self::$db->user(), 'password' => self::$db->password(), 'prefix' => 'sf:']);
    }

    protected function storeCode(): string
    {
        return sprintf('$store = new CronLock\Symfony\Store\DatabaseStore(%s, %s);', var_export(self::$db->dsn(), true),
            var_export(['user' => self::$db->user(), 'password' => self::$db->password(), 'prefix' => 'sf:'], true));
    }

    protected function heldAfterKill(): float
    {
        return 0.0;
    }

    public function testExistsAndRefreshAskTheServer(): void
    {
        $lock = (new LockFactory($this->getStore()))->createLock(self::resource(), 30.0);
        self::assertTrue($lock->acquire());
        $admin = self::$db->adminPdo();
        $session = null;
        foreach ($admin->query("SELECT ID, INFO FROM information_schema.PROCESSLIST WHERE USER = 'cron'")->fetchAll() as $row) {
            $session = (int) $row['ID'];
        }
        self::assertNotNull($session);
        $admin->exec("KILL $session"); // a DBA, a failover, a server restart
        self::assertFalse($lock->isAcquired());
        $this->expectException(LockConflictedException::class);
        $lock->refresh();
    }

    public function testTheLockIsTheServersNamedLock(): void
    {
        $store = $this->getStore();
        $key = new Key('nightly-export');
        $store->save($key);
        self::assertSame('0', trim(self::$db->client("SELECT GET_LOCK('sf:nightly-export', 0)")), 'a DBA\'s GET_LOCK() sees it held');
        $store->delete($key);
        self::assertSame('1', trim(self::$db->client("SELECT GET_LOCK('sf:nightly-export', 0)")));
    }
}

<?php

declare(strict_types=1);

namespace CronLock\Tests\Frameworks;

use CronLock\Tests\Support\FileTestHelpers;
use CronLock\Tests\Support\Proc;
use PHPUnit\Framework\TestCase;
use Symfony\Component\Lock\BlockingStoreInterface;
use Symfony\Component\Lock\Exception\LockConflictedException;
use Symfony\Component\Lock\Exception\UnserializableKeyException;
use Symfony\Component\Lock\Key;
use Symfony\Component\Lock\LockFactory;
use Symfony\Component\Lock\PersistingStoreInterface;

/**
 * What Symfony Lock's own store test cases check (AbstractStoreTestCase and
 * BlockingStoreTestTrait; the shared and expiring ones are in the
 * subclasses that need them), written anew from their documented behaviour
 * for the cronlock stores of bridges/symfony, with Debian's symfony/lock 5.4
 * and real processes, plus what a cronlock store adds: a holder killed with
 * kill -9 frees the resource.
 */
abstract class SymfonyStoreTestCase extends TestCase
{
    use FileTestHelpers;

    abstract protected function getStore(): PersistingStoreInterface;

    /** PHP for a child: `$store = …;` building the same store as getStore(). */
    abstract protected function storeCode(): string;

    /** How long a resource stays held after its holder's kill -9 (0: freed as it dies). */
    abstract protected function heldAfterKill(): float;

    public static function setUpBeforeClass(): void
    {
        parent::setUpBeforeClass();
        SymfonyApp::load();
    }

    protected function setUp(): void
    {
        if (($missing = SymfonyApp::available()) !== null) {
            self::markTestSkipped($missing);
        }
        parent::setUp();
    }

    protected function tearDown(): void
    {
        $this->reapCommands();
        $this->removeTempDirs();
        parent::tearDown();
    }

    protected static function resource(): string
    {
        return 'resource-' . bin2hex(random_bytes(6));
    }

    public function testSaveMakesItExistAndDeleteUndoesIt(): void
    {
        $store = $this->getStore();
        $key = new Key(self::resource());
        self::assertFalse($store->exists($key));
        $store->save($key);
        self::assertTrue($store->exists($key));
        $store->delete($key);
        self::assertFalse($store->exists($key));
    }

    public function testDifferentResourcesDoNotMeet(): void
    {
        $store = $this->getStore();
        $one = new Key(self::resource());
        $two = new Key(self::resource());
        $store->save($one);
        self::assertTrue($store->exists($one));
        self::assertFalse($store->exists($two));
        $store->save($two);
        self::assertTrue($store->exists($two));
        $store->delete($one);
        self::assertFalse($store->exists($one));
        self::assertTrue($store->exists($two));
        $store->delete($two);
        self::assertFalse($store->exists($two));
    }

    public function testTwoKeysOfOneResourceExcludeEachOther(): void
    {
        $store = $this->getStore();
        $resource = self::resource();
        $one = new Key($resource);
        $two = new Key($resource);
        $store->save($one);
        self::assertTrue($store->exists($one));
        self::assertFalse($store->exists($two));
        try {
            $store->save($two);
            self::fail('a second key of a held resource was saved');
        } catch (LockConflictedException $e) {
            // held by the first key
        }
        $store->delete($one);
        $store->save($two);
        self::assertTrue($store->exists($two));
        self::assertFalse($store->exists($one));
        $store->delete($two);
    }

    public function testSavingAHeldKeyAgainKeepsIt(): void
    {
        $store = $this->getStore();
        $key = new Key(self::resource());
        $store->save($key);
        $store->save($key);
        self::assertTrue($store->exists($key));
        $store->delete($key);
        self::assertFalse($store->exists($key));
    }

    public function testDeletingThroughAnotherKeyLeavesTheHolder(): void
    {
        $store = $this->getStore();
        $resource = self::resource();
        $holder = new Key($resource);
        $store->save($holder);
        $store->delete(new Key($resource));
        self::assertTrue($store->exists($holder));
        $store->delete($holder);
    }

    public function testAHeldKeyCannotBeSerialized(): void
    {
        $store = $this->getStore();
        $key = new Key(self::resource());
        $store->save($key);
        $this->expectException(UnserializableKeyException::class);
        try {
            serialize($key);
        } finally {
            $store->delete($key);
        }
    }

    public function testThroughLockFactory(): void
    {
        $factory = new LockFactory($this->getStore());
        $resource = self::resource();
        $lock = $factory->createLock($resource, 30.0);
        self::assertTrue($lock->acquire());
        self::assertTrue($lock->isAcquired());
        $other = $factory->createLock($resource, 30.0);
        self::assertFalse($other->acquire());
        $lock->refresh();
        self::assertTrue($lock->isAcquired());
        $lock->release();
        self::assertFalse($lock->isAcquired());
        self::assertTrue($other->acquire());
        $other->release();
    }

    public function testAnotherProcessIsExcludedAndAWaitEndsAtItsRelease(): void
    {
        $store = $this->getStore();
        $resource = self::resource();
        $release = $this->makeTempDir('symfony-release') . '/now';
        $holder = Proc::start(SymfonyApp::childPrelude() . $this->storeCode() . '
            $key = new Symfony\Component\Lock\Key($argv[1]);
            $store->save($key);
            echo "held\n";
            while (!file_exists($argv[2])) { usleep(5000); }
            usleep(200000);
            printf("releasing at %.6f\n", microtime(true));
            $store->delete($key);
            usleep(500000);', [$resource, $release]);
        $holder->waitForLine('held', 20.0);
        $key = new Key($resource);
        try {
            $store->save($key);
            self::fail('the resource another process holds was saved');
        } catch (LockConflictedException $e) {
            self::assertFalse($store->exists($key), 'held by the child');
        }
        if (!$store instanceof BlockingStoreInterface) {
            return;
        }
        touch($release);
        $store->waitAndSave($key);
        $acquired = microtime(true);
        $line = $holder->waitForLine('releasing at', 10.0);
        self::assertGreaterThanOrEqual((float) substr($line, 13), $acquired, 'the wait ended when the holder released');
        self::assertTrue($store->exists($key));
        $store->delete($key);
        self::assertSame(0, $holder->wait());
    }

    public function testAHolderKilledWithKill9FreesTheResource(): void
    {
        $store = $this->getStore();
        $resource = self::resource();
        $holder = Proc::start(SymfonyApp::childPrelude() . $this->storeCode() . '
            $key = new Symfony\Component\Lock\Key($argv[1]);
            $store->save($key);
            echo "held\n";
            sleep(60);', [$resource]);
        $holder->waitForLine('held', 20.0);
        $key = new Key($resource);
        $killed = microtime(true);
        $holder->kill();
        $deadline = $killed + $this->heldAfterKill() + 20.0;
        while (true) {
            try {
                $store->save($key);
                break;
            } catch (LockConflictedException $e) {
                self::assertLessThan($deadline, microtime(true), 'the resource was freed after the kill');
                usleep(20_000);
            }
        }
        self::assertTrue($store->exists($key));
        self::note(sprintf('%s: saved %.3f s after kill -9 of the holder', (new \ReflectionClass($this))->getShortName(), microtime(true) - $killed));
        $store->delete($key);
    }
}

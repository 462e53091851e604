<?php

declare(strict_types=1);

namespace CronLock\Tests\Frameworks;

use CronLock\Symfony\Store\FileStore;
use CronLock\Tests\Support\Proc;
use Symfony\Component\Lock\Exception\LockConflictedException;
use Symfony\Component\Lock\Key;
use Symfony\Component\Lock\LockFactory;
use Symfony\Component\Lock\PersistingStoreInterface;

/**
 * CronLock\Symfony\Store\FileStore: SymfonyStoreTestCase, and what Symfony
 * Lock's SharedLockStoreTestTrait and BlockingSharedLockStoreInterface
 * promise (readers coexist, a writer excludes them, promotion and demotion
 * on one key, a blocking read waits for a writer).
 */
final class SymfonyFileStoreTest extends SymfonyStoreTestCase
{
    private ?string $dir = null;

    protected function getStore(): PersistingStoreInterface
    {
        $this->dir ??= $this->makeTempDir('symfony-file');
        return new FileStore($this->dir);
    }

    protected function storeCode(): string
    {
        $this->getStore();
        return sprintf('$store = new CronLock\Symfony\Store\FileStore(%s);', var_export($this->dir, true));
    }

    protected function heldAfterKill(): float
    {
        return 0.0;
    }

    protected function tearDown(): void
    {
        $this->dir = null;
        parent::tearDown();
    }

    public function testReadersShareAndAWriterWaitsForAllOfThem(): void
    {
        $store = $this->getStore();
        $resource = self::resource();
        [$r1, $r2, $w] = [new Key($resource), new Key($resource), new Key($resource)];
        $store->saveRead($r1);
        self::assertTrue($store->exists($r1));
        self::assertFalse($store->exists($r2));
        $store->saveRead($r2);
        self::assertTrue($store->exists($r2));
        self::assertConflict(fn () => $store->save($w));
        $store->delete($r1);
        self::assertConflict(fn () => $store->save($w));
        $store->delete($r2);
        $store->save($w);
        self::assertTrue($store->exists($w));
        self::assertFalse($store->exists($r1));
        $store->delete($w);
    }

    public function testAWriterExcludesReaders(): void
    {
        $store = $this->getStore();
        $resource = self::resource();
        [$w, $r] = [new Key($resource), new Key($resource)];
        $store->save($w);
        self::assertConflict(fn () => $store->saveRead($r));
        $store->delete($w);
        $store->saveRead($r);
        self::assertTrue($store->exists($r));
        $store->delete($r);
    }

    public function testAReaderCannotBecomeTheWriterWhileAnotherReads(): void
    {
        $store = $this->getStore();
        $resource = self::resource();
        [$one, $two] = [new Key($resource), new Key($resource)];
        $store->saveRead($one);
        $store->saveRead($two);
        self::assertConflict(fn () => $store->save($one));
        self::assertTrue($store->exists($one), 'the failed promotion took the shared lock back');
        self::assertTrue($store->exists($two));
        $store->delete($two);
        $store->save($one);
        self::assertConflict(fn () => $store->saveRead($two));
        $store->delete($one);
    }

    public function testAPromotedReaderExcludesReaders(): void
    {
        $store = $this->getStore();
        $resource = self::resource();
        [$one, $two] = [new Key($resource), new Key($resource)];
        $store->saveRead($one);
        $store->save($one);
        self::assertConflict(fn () => $store->saveRead($two));
        self::assertTrue($store->exists($one));
        self::assertFalse($store->exists($two));
        $store->delete($one);
    }

    public function testADemotedWriterLetsReadersIn(): void
    {
        $store = $this->getStore();
        $resource = self::resource();
        [$one, $two] = [new Key($resource), new Key($resource)];
        $store->save($one);
        $store->saveRead($one);
        $store->saveRead($two);
        self::assertTrue($store->exists($one));
        self::assertTrue($store->exists($two));
        $store->delete($one);
        $store->delete($two);
    }

    public function testABlockingReadWaitsForTheWriterInAnotherProcess(): void
    {
        $store = $this->getStore();
        $resource = self::resource();
        $release = $this->makeTempDir('symfony-release') . '/now';
        $writer = Proc::start(SymfonyApp::childPrelude() . $this->storeCode() . '
            $key = new Symfony\Component\Lock\Key($argv[1]);
            $store->save($key);
            echo "held\n";
            while (!file_exists($argv[2])) { usleep(5000); }
            usleep(200000);
            printf("releasing at %.6f\n", microtime(true));
            $store->delete($key);
            usleep(500000);', [$resource, $release]);
        $writer->waitForLine('held', 20.0);
        $lock = (new LockFactory($store))->createLock($resource, null);
        self::assertFalse($lock->acquireRead(false));
        touch($release);
        self::assertTrue($lock->acquireRead(true));
        $acquired = microtime(true);
        $line = $writer->waitForLine('releasing at', 10.0);
        self::assertGreaterThanOrEqual((float) substr($line, 13), $acquired, 'the read waited for the writer');
        $lock->release();
        self::assertSame(0, $writer->wait());
    }

    public function testTheLockFileIsACronlockFileOtherToolsSee(): void
    {
        $store = $this->getStore();
        $key = new Key('reports/nightly export');
        $path = $store->path($key);
        self::assertMatchesRegularExpression('~/reports-nightly-export\.[0-9a-f]{12}\.lock$~', $path);
        $store->save($key);
        self::assertFalse($this->isFree($path), 'a CronLock\File (cron_guard(), cronlock run --file) on the path sees it held');
        $store->delete($key);
        self::assertTrue($this->isFree($path));
    }

    private static function assertConflict(callable $save): void
    {
        try {
            $save();
            self::fail('saved a key of a resource that is held');
        } catch (LockConflictedException $e) {
            self::assertTrue(true);
        }
    }
}

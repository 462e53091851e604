<?php

declare(strict_types=1);

namespace CronLock\Tests\Frameworks;

use CronLock\Tests\Support\DatabaseServer;
use CronLock\Tests\Support\FileTestHelpers;
use CronLock\Tests\Support\RedisServer;
use PHPUnit\Framework\TestCase;

/**
 * A Symfony console command locked with cronlock/symfony's LockableTrait
 * (bridges/symfony/tests/app), run as cron runs it, on each store: a second
 * run while one is going says so and does not run the job; after a kill -9
 * of the whole run the next one runs at once (File, Database) or within the
 * Redis key's TTL (3 s, renewed while the command lives); --wait waits for
 * the running one. The journal (Fixture\Job) shows 0 overlaps in each.
 */
final class SymfonyConsoleTest extends TestCase
{
    use FileTestHelpers;

    private const BUSY = 'The command is already running in another process.';

    /** The servers, started by the first test that needs one and shared by the class (each test has its own journal). */
    private static ?RedisServer $redis = null;
    private static ?DatabaseServer $db = null;

    public static function tearDownAfterClass(): void
    {
        self::$redis = null;
        if (self::$db !== null) {
            self::$db->stop();
            self::$db = null;
        }
        parent::tearDownAfterClass();
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

    /** @return array<string, array{string}> */
    public static function stores(): array
    {
        return ['file' => ['file'], 'redis' => ['redis'], 'database' => ['database']];
    }

    /** @dataProvider stores */
    public function testASecondRunWhileOneIsGoingDoesNotRunTheJob(string $store): void
    {
        $env = $this->storeEnv($store);
        $journal = new Journal($this->makeTempDir('symfony-console') . '/journal.log');
        // 5 s: the second console must start and try the lock within them, also on a
        // loaded machine (2 s were too few there: the first had ended, the second ran)
        $first = $this->console($journal, 5.0, $env);
        $journal->waitForStarts(1, 30.0, $first);
        $second = $this->console($journal, 2.0, $env)->succeed();
        self::assertStringContainsString(self::BUSY, $second->stdout());
        $first->succeed();
        self::assertStringNotContainsString(self::BUSY, $this->console($journal, 0.0, $env)->succeed()->stdout());
        self::assertCount(2, $journal->starts());
        self::assertSame(0, $journal->overlaps());
    }

    /** @dataProvider stores */
    public function testAfterKill9TheNextRunRuns(string $store): void
    {
        $env = $this->storeEnv($store);
        $journal = new Journal($this->makeTempDir('symfony-console') . '/journal.log');
        $first = $this->console($journal, 120.0, $env);
        $journal->waitForStarts(1, 30.0, $first);
        $first->killGroup();
        $killed = microtime(true);
        $tries = 0;
        while (count($journal->starts()) === 1) {
            self::assertLessThan(30.0, microtime(true) - $killed, 'a run after the kill ran the job');
            $this->console($journal, 0.0, $env)->succeed();
            $tries++;
        }
        self::assertSame(0, $journal->overlaps());
        if ($store === 'file') {
            self::assertSame(1, $tries, 'the kernel freed the lock as the run died');
        }
        self::note(sprintf('symfony console, %s store, kill -9 of the run: the job ran again %.2f s later, at run %d', $store, $journal->starts()[1]['t'] - $killed, $tries));
    }

    /** @dataProvider stores */
    public function testWaitRunsTheJobAfterTheRunningOne(string $store): void
    {
        $env = $this->storeEnv($store);
        $journal = new Journal($this->makeTempDir('symfony-console') . '/journal.log');
        $first = $this->console($journal, 2.0, $env);
        $journal->waitForStarts(1, 30.0, $first);
        $second = $this->console($journal, 0.0, $env, ['--wait']);
        $first->succeed();
        $second->succeed();
        $starts = $journal->starts();
        self::assertCount(2, $starts);
        self::assertGreaterThanOrEqual($journal->ends()[0]['t'], $starts[1]['t'], 'the second began after the first ended');
        self::assertSame(0, $journal->overlaps());
    }

    /** @return array<string, string> */
    private function storeEnv(string $store): array
    {
        switch ($store) {
            case 'redis':
                self::$redis ??= RedisServer::start();
                return ['FIXTURE_STORE' => 'redis', 'FIXTURE_DSN' => self::$redis->dsn()];
            case 'database':
                if (!extension_loaded('cronlock')) {
                    self::markTestSkipped('cronlock/polyfill has no CronLock\Database (README: it throws "needs the cronlock extension")');
                }
                if (($missing = DatabaseServer::available('mysql')) !== null) {
                    self::markTestSkipped($missing);
                }
                self::$db ??= DatabaseServer::start('mysql');
                return ['FIXTURE_STORE' => 'database', 'FIXTURE_DSN' => self::$db->dsn(), 'FIXTURE_DB_USER' => self::$db->user(), 'FIXTURE_DB_PASSWORD' => self::$db->password()];
            default:
                return ['FIXTURE_STORE' => 'file', 'FIXTURE_DIR' => $this->makeTempDir('symfony-locks')];
        }
    }

    /** @param list<string> $options */
    private function console(Journal $journal, float $seconds, array $env, array $options = []): AppProcess
    {
        $app = dirname(__DIR__, 2) . '/bridges/symfony/tests/app';
        return new AppProcess($app, array_merge(['bin/console', 'app:sync', $journal->path(), (string) $seconds], $options), $env);
    }
}

<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\Database;
use CronLock\LockException;
use CronLock\Tests\Support\DatabaseTestHelpers;
use CronLock\Tests\Support\FileTestHelpers;
use CronLock\Tests\Support\Proc;
use PHPUnit\Framework\TestCase;

/**
 * CronLock\Database::claim() (what Laravel's onOneServer() needs) on a
 * private server of the subclass's kind: each window claimed exactly once by
 * racing processes, an expired claim taken again, nothing left behind once
 * the next claim sweeps, and the missing table's message, whose CREATE TABLE
 * is what the tests run to make the table.
 */
abstract class DatabaseClaimsTestCase extends TestCase
{
    use DatabaseTestHelpers;
    use FileTestHelpers;

    private const TABLE = 'cronlock_claims';

    private string $dir;

    protected function setUp(): void
    {
        $missing = \CronLock\Tests\Support\DatabaseServer::available(static::databaseKind());
        if ($missing !== null) {
            self::markTestSkipped($missing);
        }
        parent::setUp();
        $this->dir = $this->makeTempDir('claims');
        self::createTable(self::TABLE);
    }

    protected function tearDown(): void
    {
        $this->removeTempDirs();
        parent::tearDown();
    }

    private static function name(string $what): string
    {
        return "claims-$what-" . getmypid() . '-' . bin2hex(random_bytes(3));
    }

    /** Creates $table (if missing) with the CREATE TABLE the missing-table message prints. */
    private static function createTable(string $table): void
    {
        try {
            (new Database(self::$server->dsn(), 'probe', self::credentials() + ['claims_table' => $table]))->claim('probe', 0.001);
        } catch (LockException $e) {
            self::assertSame(1, preg_match('/: (CREATE TABLE .*)$/', $e->getMessage(), $m), $e->getMessage());
            $pdo = self::$server->pdo();
            foreach (explode('; ', $m[1]) as $sql) {
                $pdo->exec($sql);
            }
        }
    }

    /** @return array<string, array{name: string, holder: string, live: bool}> the claims table's rows, by key */
    private static function rows(): array
    {
        $now = static::databaseKind() === 'mysql' ? 'UTC_TIMESTAMP(6)' : 'now()';
        $rows = [];
        foreach (self::$server->pdo()->query("SELECT name, holder, expires_at > $now FROM " . self::TABLE, \PDO::FETCH_NUM) as [$name, $holder, $live]) {
            $rows[$name] = ['name' => $name, 'holder' => $holder, 'live' => (bool) $live];
        }
        return $rows;
    }

    /** The key of $window claimed by the lock $name, as docs/database.md says a DBA computes it. */
    private static function key(string $name, string $window): string
    {
        return substr(md5($name), 0, 16) . ':' . $window;
    }

    public function testTheMissingTableMessagePrintsTheCreateTableThatMakesIt(): void
    {
        $table = 'claims_' . bin2hex(random_bytes(4));
        $lock = new Database(self::$server->dsn(), self::name('missing'), self::credentials() + ['claims_table' => $table]);
        try {
            $lock->claim('w', 60);
            self::fail('a missing table must be an error');
        } catch (LockException $e) {
            self::assertStringContainsString("the claims table $table does not exist", $e->getMessage());
            self::assertStringContainsString("CREATE TABLE $table (", $e->getMessage());
        }
        self::createTable($table);
        self::assertTrue($lock->claim('w', 60), 'the printed CREATE TABLE makes a table claims work on');
        self::assertFalse($lock->claim('w', 60));
    }

    /**
     * Two processes (one on a DSN lock, one on its own PDO; MySQL's counts
     * found rows) race through the same 20 windows: each window is claimed
     * exactly once.
     */
    public function testTwoProcessesRacingFor20WindowsClaimEachExactlyOnce(): void
    {
        $name = self::name('race');
        $pdo = static::databaseKind() === 'mysql'
            ? sprintf('new \PDO(%s, %s, %s, [\PDO::ATTR_ERRMODE => \PDO::ERRMODE_EXCEPTION, \PDO::MYSQL_ATTR_FOUND_ROWS => true])',
                var_export(self::$server->dsn(), true), var_export(self::$server->user(), true), var_export(self::$server->password(), true))
            : self::pdoCode();
        $racer = <<<'PHP'
            echo "READY\n";
            while (!file_exists($argv[1])) { usleep(1000); }
            for ($i = 0; $i < 20; $i++) {
                printf("w%d=%d\n", $i, $l->claim("tick $i", 60) ? 1 : 0);
            }
            echo "DONE\n";
            PHP;
        $a = Proc::start('$l = ' . self::dsnLockCode($name) . ";\n" . $racer, [$this->dir . '/go']);
        $b = Proc::start("\$l = new \\CronLock\\Database($pdo, " . var_export($name, true) . ");\n" . $racer, [$this->dir . '/go']);
        $a->waitForLine('READY', 15.0, 'stdout');
        $b->waitForLine('READY', 15.0, 'stdout');
        touch($this->dir . '/go');
        $a->waitForLine('DONE', 30.0, 'stdout');
        $b->waitForLine('DONE', 30.0, 'stdout');
        self::assertSame(0, $a->wait());
        self::assertSame(0, $b->wait());
        preg_match_all('/^w(\d+)=([01])$/m', $a->stdout(), $ma, PREG_SET_ORDER);
        preg_match_all('/^w(\d+)=([01])$/m', $b->stdout(), $mb, PREG_SET_ORDER);
        self::assertCount(20, $ma, $a->stdout() . $a->stderr());
        self::assertCount(20, $mb, $b->stdout() . $b->stderr());
        $won = array_fill(0, 20, 0);
        foreach (array_merge($ma, $mb) as [, $window, $claimed]) {
            $won[(int) $window] += (int) $claimed;
        }
        self::assertSame(array_fill(0, 20, 1), $won, 'exactly one true per window');
        $rows = self::rows();
        for ($i = 0; $i < 20; $i++) {
            self::assertArrayHasKey(self::key($name, "tick $i"), $rows, 'one row per window, keyed as documented');
        }
    }

    public function testAnExpiredClaimCanBeTakenAgain(): void
    {
        $name = self::name('expired');
        $first = self::dsnLock($name);
        $second = new Database(self::$server->pdo(), $name);
        self::assertTrue($first->claim('2026-12-01 10:05', 0.3));
        self::assertFalse($second->claim('2026-12-01 10:05', 0.3), 'still claimed');
        // The server's clock decides; ask again until it says expired.
        $deadline = microtime(true) + 15.0;
        do {
            usleep(50_000);
            $taken = $second->claim('2026-12-01 10:05', 60);
        } while (!$taken && microtime(true) < $deadline);
        self::assertTrue($taken, 'an expired claim is taken again');
        self::assertFalse($first->claim('2026-12-01 10:05', 60), 'and is then the new holder\'s');
        $row = self::rows()[self::key($name, '2026-12-01 10:05')];
        self::assertStringStartsWith('cronlock pid ' . getmypid() . ' on ', $row['holder']);
    }

    public function testNothingIsLeftAfterExpiryOnceTheNextClaimSweeps(): void
    {
        $name = self::name('sweep');
        $lock = self::dsnLock($name);
        for ($i = 0; $i < 5; $i++) {
            self::assertTrue($lock->claim("short $i", 0.2));
        }
        $mine = fn (): array => array_filter(self::rows(), fn (array $row): bool => str_starts_with($row['name'], substr(md5($name), 0, 16) . ':'));
        self::assertCount(5, $mine());
        $deadline = microtime(true) + 15.0;
        while (array_filter($mine(), fn (array $row): bool => $row['live']) && microtime(true) < $deadline) {
            usleep(50_000);
        }
        self::assertTrue($lock->claim('next', 60));
        self::assertSame([self::key($name, 'next')], array_keys($mine()), 'the expired claims are gone, the new one is there');
    }

    public function testTheWindowsOfTwoLocksNeverCollide(): void
    {
        $base = self::name('keys');
        self::assertTrue(self::dsnLock($base)->claim('b:c', 60));
        self::assertTrue(self::dsnLock("$base:b")->claim('c', 60), "'$base' + 'b:c' is not '$base:b' + 'c'");
        self::assertTrue(self::dsnLock(strtoupper($base))->claim('b:c', 60), 'names are compared byte for byte');
    }

    public function testAClaimInsideATransactionOfThePdoGivenIsRefused(): void
    {
        $pdo = self::$server->pdo();
        $lock = new Database($pdo, self::name('transaction'));
        $pdo->beginTransaction();
        try {
            $lock->claim('w', 60);
            self::fail('a claim inside the user\'s transaction must be refused');
        } catch (LockException $e) {
            self::assertStringContainsString('the PDO given is inside a transaction', $e->getMessage());
        } finally {
            $pdo->rollBack();
        }
        self::assertTrue($lock->claim('w', 60), 'outside it the claim works');
        if (static::databaseKind() === 'mysql') {
            $pdo->setAttribute(\PDO::ATTR_AUTOCOMMIT, false);
            try {
                $lock->claim('w2', 60);
                self::fail('autocommit off opens a transaction with every statement');
            } catch (LockException $e) {
                self::assertStringContainsString('autocommit off', $e->getMessage());
            }
        }
    }

    public function testADsnLocksConnectionLostWhileIdleIsOpenedAnewForTheNextClaim(): void
    {
        $name = self::name('reconnect');
        $lock = self::dsnLock($name);
        self::assertTrue($lock->claim('before', 60));
        $admin = self::$server->adminPdo();
        if (static::databaseKind() === 'mysql') {
            foreach ($admin->query("SELECT ID FROM information_schema.PROCESSLIST WHERE USER = 'cron'")->fetchAll(\PDO::FETCH_COLUMN) as $id) {
                $admin->exec("KILL $id");
            }
        } else {
            $admin->query("SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE usename = 'cron'");
        }
        self::assertTrue($lock->claim('after', 60), 'the claim reconnects once and is asked again');
        self::assertFalse($lock->claim('after', 60));
    }

    public function testBadArguments(): void
    {
        $lock = self::dsnLock(self::name('arguments'));
        $refused = function (callable $call, string $what): void {
            try {
                $call();
                self::fail("$what must be refused");
            } catch (\ValueError $e) {
                self::assertStringContainsString($what, $e->getMessage());
            }
        };
        $refused(fn () => $lock->claim('', 1), '$window');
        $refused(fn () => $lock->claim("a\0b", 1), '$window');
        $refused(fn () => $lock->claim(str_repeat('x', 201), 1), '$window');
        $refused(fn () => $lock->claim("\xff", 1), '$window');
        foreach ([0.0, -1.0, NAN, INF, 31_536_001.0] as $seconds) {
            $refused(fn () => $lock->claim('w', $seconds), '$seconds');
        }
        self::assertTrue($lock->claim(str_repeat('x', 200), 1), '200 bytes is fine');
        foreach (['claims; DROP TABLE x', 'a.b.c', '1claims', ''] as $table) {
            $refused(fn () => new Database(self::$server->dsn(), 'x', ['claims_table' => $table]), "claims_table");
        }
    }
}

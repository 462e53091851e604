<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\ConnectionException;
use CronLock\Database;
use CronLock\LockException;
use CronLock\Tests\Support\DatabaseTestHelpers;
use CronLock\Tests\Support\ErrorLogHelpers;
use CronLock\Tests\Support\FileTestHelpers;
use CronLock\Tests\Support\Proc;
use PHPUnit\Framework\TestCase;

/**
 * What CronLock\Database promises beyond the shared contract, on a private
 * server of the subclass's kind: the name mapping a DBA reproduces in SQL,
 * interop with the plain mysql/psql client, lost sessions (KILL,
 * pg_terminate_backend(), server restart), heavy contention, fork children
 * with the user's PDO, the busy line, and messages without the password.
 */
abstract class DatabaseLockTestCase extends TestCase
{
    use DatabaseTestHelpers;
    use ErrorLogHelpers;
    use FileTestHelpers;

    private string $dir;

    protected function setUp(): void
    {
        $missing = \CronLock\Tests\Support\DatabaseServer::available(static::databaseKind());
        if ($missing !== null) {
            self::markTestSkipped($missing);
        }
        parent::setUp();
        $this->dir = $this->makeTempDir('database');
    }

    protected function tearDown(): void
    {
        $this->restoreErrorLog();
        $this->reapCommands();
        $this->removeTempDirs();
        parent::tearDown();
    }

    private static function name(string $what): string
    {
        return "db-$what-" . getmypid() . '-' . bin2hex(random_bytes(3));
    }

    public function testNameIsKeptAndAPdoOrADsnWorks(): void
    {
        $name = self::name('pdo');
        $lock = new Database(self::$server->pdo(), $name);
        self::assertSame($name, $lock->name());
        self::assertTrue($lock->acquire(0));
        self::assertFalse(self::dsnLock($name)->acquire(0), 'a DSN lock of the same name is excluded');
        self::assertTrue($lock->release());
        self::assertTrue(self::dsnLock($name)->acquire(0));
    }

    public function testTwoLongNamesSharingAPrefixDoNotCollide(): void
    {
        $prefix = str_repeat('p', 80) . getmypid();
        $a = self::dsnLock($prefix . '-a');
        $b = self::dsnLock($prefix . '-b');
        self::assertTrue($a->acquire(0));
        self::assertTrue($b->acquire(0), 'names longer than 64 characters are never cut to a shared prefix');
        // The server sees exactly the documented mapping: a DBA's plain SQL
        // on each name is refused while cronlock holds them.
        self::assertSame(self::busyAnswer(), self::$server->client(self::tryLockSql($prefix . '-a')));
        self::assertSame(self::busyAnswer(), self::$server->client(self::tryLockSql($prefix . '-b')));
        self::assertTrue($a->release());
        self::assertTrue($b->release());
        self::assertSame(self::freeAnswer(), self::$server->client(self::tryLockSql($prefix . '-a')));
    }

    public function testNamesAreComparedByteForByte(): void
    {
        $base = self::name('case');
        $lower = self::dsnLock($base . '-sync');
        $upper = self::dsnLock($base . '-SYNC');
        $spaced = self::dsnLock($base . '-sync ');
        self::assertTrue($lower->acquire(0));
        self::assertTrue($upper->acquire(0), 'case matters');
        self::assertTrue($spaced->acquire(0), 'a trailing space matters');
        try {
            new Database(self::$server->dsn(), "a\0b", self::credentials());
            self::fail('a NUL byte must be refused');
        } catch (\ValueError $e) {
            self::assertStringContainsString('$name', $e->getMessage());
        }
        try {
            new Database(self::$server->dsn(), '', self::credentials());
            self::fail('an empty name must be refused');
        } catch (\ValueError $e) {
            self::assertStringContainsString('$name', $e->getMessage());
        }
    }

    /** @return iterable<string, array{string}> */
    public static function namesForDbas(): iterable
    {
        yield 'plain' => ['nightly-report'];
        yield 'upper case and spaces' => ['Nightly Report'];
        yield 'longer than 64' => [str_repeat('sync-orders-', 8)];
        yield 'non-ASCII UTF-8' => ['Отчёт über-'];
    }

    /** @dataProvider namesForDbas */
    public function testAPlainClientHoldingTheLockByHandExcludesCronlockAndTheOtherWayRound(string $base): void
    {
        $name = $base . getmypid();
        [$cmd, $env] = self::$server->clientCommand();
        if (static::databaseKind() === 'mysql') {
            $cmd[] = '--unbuffered';
        }
        $client = proc_open($cmd, [0 => ['pipe', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes, null, $env);
        try {
            fwrite($pipes[0], self::tryLockSql($name) . ";\n");
            fflush($pipes[0]);
            stream_set_timeout($pipes[1], 20);
            self::assertSame(self::freeAnswer(), trim((string) fgets($pipes[1])), 'the client takes the lock by hand');

            $lock = self::dsnLock($name);
            self::assertFalse($lock->acquire(0), 'cronlock is excluded by the client');
            self::assertFalse($lock->acquire(0.3), 'and so is its wait (other statements, the same name)');
            $holder = $lock->holder();
            self::assertNotNull($holder);
            self::assertMatchesRegularExpression(static::databaseKind() === 'mysql' ? '/^MySQL connection \d+ from cron@127\.0\.0\.1:\d+$/' : '/^PostgreSQL backend pid \d+ \(psql\) from 127\.0\.0\.1$/', $holder);
        } finally {
            fclose($pipes[0]);
            fclose($pipes[1]);
            fclose($pipes[2]);
            proc_close($client);
        }
        self::waitUntil(fn () => $lock->acquire(0), 'the lock is free once the client has gone', 5.0);
        self::assertSame(self::busyAnswer(), self::$server->client(self::tryLockSql($name)), 'the client is excluded by cronlock');
        self::assertTrue($lock->release());
    }

    /** @return iterable<string, array{bool}> */
    public static function connections(): iterable
    {
        yield 'DSN: own connection' => [true];
        yield 'the PDO given' => [false];
    }

    /** @dataProvider connections */
    public function testKillingTheHoldersSessionMakesRenewFalseAndLetsTheNextRunIn(bool $dsn): void
    {
        $name = self::name('kill');
        $lock = $dsn ? self::dsnLock($name) : new Database(self::$server->pdo(), $name);
        self::assertTrue($lock->acquire(0));
        self::assertTrue($lock->renew());
        $session = self::holderSession($name);
        self::assertNotNull($session);

        self::killSession($session);
        self::waitUntil(fn () => self::holderSession($name) === null, 'the killed session lets go', 10.0);
        self::assertTrue($lock->isHeld(), 'isHeld() is local: it cannot know yet');
        self::assertFalse($lock->renew(), 'renew() asks the server: the session is gone');
        self::assertFalse($lock->isHeld());
        self::assertFalse($lock->release(), 'nothing left to release');

        $next = Proc::run('$l = ' . self::dsnLockCode($name) . '; echo $l->acquire(0) ? "GOT" : "BUSY";');
        self::assertSame('GOT', $next->stdout(), $next->stderr());
        if ($dsn) {
            self::assertTrue($lock->acquire(0), 'a DSN lock opens a new connection');
            self::assertTrue($lock->renew());
            self::assertTrue($lock->release());
        } else {
            try {
                $lock->acquire(0);
                self::fail("a user's dead PDO cannot be reopened: ConnectionException");
            } catch (ConnectionException $e) {
                self::assertStringContainsString($name, $e->getMessage());
                self::assertStringNotContainsString(self::$server->password(), $e->getMessage());
            }
        }
    }

    public function testAcquireOnAHeldLockWhoseSessionWasKilledIsFalseNotANewHold(): void
    {
        $name = self::name('reacquire');
        $lock = self::dsnLock($name);
        self::assertTrue($lock->acquire(0));
        self::assertTrue($lock->acquire(0), 'still ours: check-and-extend');
        self::killSession(self::holderSession($name));
        self::waitUntil(fn () => self::holderSession($name) === null, 'the killed session lets go', 10.0);
        self::assertFalse($lock->acquire(0), 'the old session is gone: never true for it');
        self::assertFalse($lock->isHeld());
        self::assertTrue($lock->acquire(0), 'the next acquire() takes it on a new connection');
        self::assertTrue($lock->release());
    }

    /** @return iterable<string, array{bool}> */
    public static function transports(): iterable
    {
        yield 'TCP' => [false];
        yield "the server's Unix socket" => [true];
    }

    /** @dataProvider transports */
    public function testAProgramTheHolderStartedDoesNotKeepTheUsersSessionAfterTheHolderIsKilled(bool $unixSocket): void
    {
        $name = self::name('exec');
        $code = '$pdo = ' . ($unixSocket ? self::socketPdoCode() : self::pdoCode()) . '; $lock = new \CronLock\Database($pdo, ' . var_export($name, true) . ");\n" . <<<'PHP'
            if (!$lock->acquire(0)) { echo "BUSY\n"; exit(2); }
            $sp = proc_open(['sleep', '30'], [0 => ['file', '/dev/null', 'r'], 1 => ['file', '/dev/null', 'w'], 2 => ['file', '/dev/null', 'w']], $pp);
            echo "SLEEP ", proc_get_status($sp)['pid'], "\n";
            while (true) { usleep(100000); }
            PHP;
        $holder = Proc::start($code);
        $sleep = (int) substr($holder->waitForLine('SLEEP', 15.0, 'stdout'), 6);
        try {
            self::assertFalse(self::dsnLock($name)->acquire(0), 'precondition: held');
            self::assertSame(137, $holder->kill());
            self::assertTrue(self::processAlive($sleep), "precondition: the holder's child outlives it");
            $probe = self::dsnLock($name);
            self::waitUntil(fn () => $probe->acquire(0), 'the session ends with the holder, whatever it started', 5.0);
        } finally {
            self::killPid($sleep);
        }
    }

    public function testServerRestartWhileHeld(): void
    {
        $name = self::name('restart');
        $lock = self::dsnLock($name);
        self::assertTrue($lock->acquire(0));
        self::$server->restart();
        self::assertFalse($lock->renew(), 'the session died with the server');
        self::assertFalse($lock->isHeld());
        self::assertTrue($lock->acquire(0), 'reconnects on the next acquire()');
        self::assertTrue($lock->renew());
        self::assertTrue($lock->release());
    }

    public function testEightProcessesTimes500LockedIncrementsKeepTheCounterExact(): void
    {
        $name = self::name('contention');
        $counter = $this->dir . '/counter';
        $go = $this->dir . '/go';
        file_put_contents($counter, '0');
        $code = '$lock = ' . self::dsnLockCode($name) . ";\n" . <<<'PHP'
            [$counter, $go] = [$argv[1], $argv[2]];
            echo "READY\n";
            while (!file_exists($go)) { usleep(500); }
            for ($i = 0; $i < 500; $i++) {
                if (!$lock->acquire(-1)) { echo "ACQUIRE FAILED\n"; exit(3); }
                $n = (int) file_get_contents($counter);
                file_put_contents($counter, (string) ($n + 1));
                if (!$lock->release()) { echo "RELEASE FAILED\n"; exit(4); }
            }
            echo "DONE\n";
            PHP;
        $procs = Proc::startMany(8, $code, [$counter, $go], 'READY');
        $t0 = microtime(true);
        touch($go);
        foreach ($procs as $p) {
            self::assertSame(0, $p->wait(180.0), $p->stdout() . $p->stderr());
        }
        self::note(sprintf('8 processes x 500 locked increments: %.2f s', microtime(true) - $t0));
        self::assertSame('4000', file_get_contents($counter));
    }

    /** @return iterable<string, array{string}> */
    public static function forkEndings(): iterable
    {
        yield 'child releases, unsets and is killed' => ['release'];
        yield 'child unsets the lock and is killed' => ['unset'];
    }

    /**
     * With the user's PDO the promise is release() and destruction in the
     * child (the child's own PDO closes the shared connection when it ends
     * normally: PDO's business, see the README); the child is killed so
     * that PDO's destructor does not run.
     *
     * @dataProvider forkEndings
     */
    public function testForkChildWithTheUsersPdoNeverFreesTheParentsLock(string $ending): void
    {
        $name = self::name('fork');
        $child = $ending === 'release'
            ? 'printf("CHILD release=%s\n", var_export($lock->release(), true)); unset($lock);'
            : 'unset($lock); gc_collect_cycles(); echo "CHILD unset\n";';
        $code = '$pdo = ' . self::pdoCode() . '; $lock = new \CronLock\Database($pdo, ' . var_export($name, true) . ");\n" . <<<PHP
            if (!\$lock->acquire(0)) { echo "BUSY\\n"; exit(2); }
            \$pid = pcntl_fork();
            if (\$pid === 0) { $child posix_kill(getmypid(), SIGKILL); }
            pcntl_waitpid(\$pid, \$status);
            printf("REAPED held=%s renew=%s\\n", var_export(\$lock->isHeld(), true), var_export(\$lock->renew(), true));
            while (!file_exists(\$argv[1])) { usleep(1000); }
            printf("PARENT release=%s\\n", var_export(\$lock->release(), true));
            PHP;
        $stop = $this->dir . '/stop';
        $p = Proc::start($code, [$stop]);
        self::assertSame('REAPED held=true renew=true', $p->waitForLine('REAPED', 15.0, 'stdout'), $p->stdout() . $p->stderr());
        if ($ending === 'release') {
            self::assertStringContainsString('CHILD release=false', $p->stdout());
        }
        self::assertFalse(self::dsnLock($name)->acquire(0), "the parent's lock survived the child");
        touch($stop);
        self::assertSame(0, $p->wait(), $p->stdout() . $p->stderr());
        self::assertStringContainsString('PARENT release=true', $p->stdout());
    }

    public function testForkChildOfADsnLockCanTakeItsOwnConnectionWithoutEndingTheParents(): void
    {
        $name = self::name('forkdsn');
        $other = $name . '-child';
        $code = '$lock = ' . self::dsnLockCode($name) . '; $mine = ' . self::dsnLockCode($other) . ";\n" . <<<'PHP'
            if (!$lock->acquire(0) || !$mine->acquire(0)) { echo "BUSY\n"; exit(2); }
            $pid = pcntl_fork();
            if ($pid === 0) {
                // the child's objects reconnect for themselves; exiting
                // normally runs every destructor
                printf("CHILD acquire=%s renew=%s\n", var_export($lock->acquire(0), true), var_export($mine->renew(), true));
                exit(0);
            }
            pcntl_waitpid($pid, $status);
            printf("REAPED held=%s renew=%s mine=%s\n", var_export($lock->isHeld(), true), var_export($lock->renew(), true), var_export($mine->renew(), true));
            PHP;
        $p = Proc::run($code);
        self::assertStringContainsString('CHILD acquire=false renew=false', $p->stdout(), $p->stderr());
        self::assertStringContainsString('REAPED held=true renew=true mine=true', $p->stdout(), $p->stderr());
    }

    /**
     * A killed session (KILL / pg_terminate_backend()) while the job runs:
     * reported once when renew() notices and once at the end (issue 19).
     */
    public function testCronGuardReportsASessionKilledDuringTheJob(): void
    {
        $name = self::name('killed');
        $lock = self::dsnLock($name);
        $log = $this->logToFile($this->dir);
        $seen = cron_guard(function (\CronLock\Guard $guard) use ($name) {
            self::killSession(self::holderSession($name));
            return [$guard->renew(), $guard->lost()];
        }, $lock, ['log' => 'none']);
        self::assertFalse($seen[0]);
        self::assertMatchesRegularExpression('/^at \d\d:\d\d:\d\dZ: the server no longer holds it for this session \(the session ended or was killed\)$/', (string) $seen[1]);
        $lines = self::logLines($log);
        self::assertCount(2, $lines, implode("\n", $lines));
        self::assertMatchesRegularExpression("/ cron_guard: lock '" . preg_quote($name, '/') . "' \\(.*\\) was lost \\(at \\S+: the server no longer holds it for this session .*\\) while its job runs; another run may start$/", $lines[0]);
        self::assertStringEndsWith('; another run may have started', $lines[1]);
        // never renewed: release()'s own answer at the end says it
        $lock = self::dsnLock($name);
        $log = $this->logToFile($this->dir);
        cron_guard(function () use ($name) {
            self::killSession(self::holderSession($name));
        }, $lock, ['log' => 'none']);
        $lines = self::logLines($log);
        self::assertCount(1, $lines, implode("\n", $lines));
        self::assertStringContainsString('was lost during the run (at ', $lines[0]);
    }

    public function testTheBusyLineOfCronGuardNamesTheHoldingSession(): void
    {
        $name = self::name('busy');
        $holder = self::dsnLock($name);
        $code = '$l = ' . self::dsnLockCode($name) . '; echo $l->acquire(0) ? "HELD\n" : "BUSY\n"; while (!file_exists($argv[1])) { usleep(1000); }';
        $p = Proc::start($code, [$this->dir . '/stop']);
        $p->waitForLine('HELD', 15.0, 'stdout');
        $log = $this->logToFile($this->dir);
        self::assertNull(cron_guard(fn () => 'ran', $holder));
        $lines = self::logLines($log);
        self::assertCount(1, $lines);
        $who = static::databaseKind() === 'mysql' ? 'MySQL connection \d+ from cron@127\.0\.0\.1:\d+' : 'PostgreSQL backend pid \d+ \(cronlock pid ' . $p->pid() . ' on [^)]+\) from 127\.0\.0\.1';
        self::assertMatchesRegularExpression("/^\\[[^]]+\\] cron_guard: lock '" . preg_quote($name, '/') . "' \\(.*\\) is held by $who; waited \\d+\\.\\d s; skipping this run$/", $lines[0]);
        touch($this->dir . '/stop');
        self::assertSame(0, $p->wait());
    }

    public function testAWaitLetsAPendingSignalHandlerRunWithinAbout100Ms(): void
    {
        $name = self::name('signal');
        $holder = self::dsnLock($name);
        self::assertTrue($holder->acquire(0));
        $code = '$l = ' . self::dsnLockCode($name) . ";\n" . <<<'PHP'
            pcntl_async_signals(true);
            pcntl_signal(SIGALRM, function () { global $t; printf("HANDLER %.3f\n", microtime(true) - $t); }, false);
            echo "READY\n";
            $t = microtime(true);
            pcntl_alarm(1);
            $got = $l->acquire(-1);
            printf("RETURNED %s %.3f\n", var_export($got, true), microtime(true) - $t);
            PHP;
        $p = Proc::start($code);
        $p->waitForLine('RETURNED', 20.0, 'stdout');
        self::assertMatchesRegularExpression('/HANDLER (\d+\.\d+)/', $p->stdout());
        preg_match('/RETURNED false (\d+\.\d+)/', $p->stdout(), $m);
        self::assertNotEmpty($m, $p->stdout() . $p->stderr());
        self::assertLessThan(5.0, (float) $m[1], 'the forever wait gave way to the handler (generous bound)');
        self::assertTrue($holder->release());
    }

    /**
     * A DSN lock waiting on a server that stops answering (frozen, or a
     * network black hole: the connection stays open, nothing comes back)
     * gives up with ConnectionException once the statement's answer is
     * overdue by 10 s, and reconnects on its next acquire().
     */
    public function testAWaitOnAServerThatStopsAnsweringEndsWithConnectionException(): void
    {
        $name = self::name('frozen');
        $holder = self::dsnLock($name);
        self::assertTrue($holder->acquire(0));
        $code = '$l = ' . self::dsnLockCode($name) . ";\n" . <<<'PHP'
            var_dump($l->acquire(0)); // connected
            echo "READY\n";
            while (!file_exists($argv[1])) { usleep(10000); }
            $t = microtime(true);
            try {
                $l->acquire(1.0);
                echo "RETURNED without an exception\n";
            } catch (\Throwable $e) {
                printf("RETURNED %s: %s\n", get_class($e), $e->getMessage());
            }
            printf("AFTER %.3f\n", microtime(true) - $t);
            while (!file_exists($argv[2])) { usleep(10000); }
            printf("AGAIN %s\n", var_export($l->acquire(0), true));
            PHP;
        $p = Proc::start($code, [$this->dir . '/go', $this->dir . '/again']);
        $p->waitForLine('READY', 15.0, 'stdout');
        self::$server->freeze();
        try {
            touch($this->dir . '/go');
            $line = $p->waitForLine('RETURNED', 30.0, 'stdout');
        } finally {
            self::$server->thaw();
        }
        self::assertStringContainsString('CronLock\ConnectionException: cannot acquire lock', $line);
        self::assertStringContainsString('the server did not answer within 10 s', $line);
        preg_match('/AFTER (\d+\.\d+)/', $p->waitForLine('AFTER', 5.0, 'stdout'), $m);
        self::assertLessThan(25.0, (float) $m[1], 'timeout + 10 s, with a generous margin');
        touch($this->dir . '/again');
        self::assertSame('AGAIN false', $p->waitForLine('AGAIN', 15.0, 'stdout'), 'a new connection, and the holder still holds it');
        self::assertSame(0, $p->wait());
        self::assertTrue($holder->release());
    }

    /** D9 on a frozen server: a pending signal handler still ends a forever wait. */
    public function testASignalHandlerEndsAWaitOnAServerThatStopsAnswering(): void
    {
        $name = self::name('frozen-signal');
        $holder = self::dsnLock($name);
        self::assertTrue($holder->acquire(0));
        $code = '$l = ' . self::dsnLockCode($name) . ";\n" . <<<'PHP'
            pcntl_async_signals(true);
            pcntl_signal(SIGUSR1, function () { echo "HANDLER\n"; });
            var_dump($l->acquire(0)); // connected
            echo "READY\n";
            while (!file_exists($argv[1])) { usleep(10000); }
            printf("RETURNED %s\n", var_export($l->acquire(-1), true));
            PHP;
        $p = Proc::start($code, [$this->dir . '/go']);
        $p->waitForLine('READY', 15.0, 'stdout');
        self::$server->freeze();
        try {
            touch($this->dir . '/go');
            usleep(300_000);
            $p->signal(SIGUSR1);
            // well under the 10 s after which the statement is cut anyway
            $line = $p->waitForLine('RETURNED', 7.0, 'stdout');
        } finally {
            self::$server->thaw();
        }
        self::assertSame('RETURNED false', $line);
        self::assertStringContainsString('HANDLER', $p->stdout());
        self::assertSame(0, $p->wait());
        self::assertTrue($holder->release());
    }

    /**
     * The server's idle limit (MySQL wait_timeout, PostgreSQL
     * idle_session_timeout, here 2 s) must not end a DSN lock's own session
     * while the job runs and lets it idle: no second run may get in.
     */
    public function testTheServersIdleTimeoutDoesNotEndADsnLocksSession(): void
    {
        $admin = self::$server->adminPdo();
        $user = self::$server->user();
        $set = static::databaseKind() === 'mysql'
            ? ['SET GLOBAL wait_timeout = 2', 'SET GLOBAL wait_timeout = 28800']
            : ["ALTER ROLE \"$user\" SET idle_session_timeout = '2s'", "ALTER ROLE \"$user\" RESET idle_session_timeout"];
        $admin->exec($set[0]);
        try {
            $name = self::name('idle');
            $holder = self::dsnLock($name);
            self::assertTrue($holder->acquire(0));
            sleep(4);
            $other = Proc::run('$l = ' . self::dsnLockCode($name) . '; echo $l->acquire(0) ? "GOT IT\n" : "BUSY\n";');
            self::assertSame("BUSY\n", $other->stdout(), $other->stderr());
            self::assertTrue($holder->renew(), 'the idle session still holds the lock');
            self::assertTrue($holder->release());
        } finally {
            $admin->exec($set[1]);
        }
    }

    /** D7: a wait cut short by a signal is not logged as "held by ...". */
    public function testCronGuardLogsAnInterruptedWaitAsInterruptedNotAsBusy(): void
    {
        $name = self::name('guard-signal');
        $holder = self::dsnLock($name);
        self::assertTrue($holder->acquire(0));
        $log = $this->dir . '/signal.log';
        $code = '$l = ' . self::dsnLockCode($name) . ";\n" . sprintf(<<<'PHP'
            ini_set('error_log', %s);
            pcntl_async_signals(true);
            pcntl_signal(SIGALRM, function () { echo "HANDLER\n"; });
            pcntl_alarm(1);
            $r = cron_guard(function () { echo "JOB RAN\n"; }, $l, ['wait' => 30, 'on_busy' => 3]);
            echo "RETURNED ", var_export($r, true), "\n";
            PHP, var_export($log, true));
        $p = Proc::start($code);
        self::assertSame(0, $p->wait(20.0), $p->stdout() . $p->stderr());
        self::assertSame("HANDLER\nRETURNED NULL\n", $p->stdout());
        $lines = self::logLines($log);
        self::assertCount(1, $lines);
        self::assertMatchesRegularExpression("/^\\[[^]]+\\] cron_guard: waiting for lock '" . preg_quote($name, '/') . "' \\(.*\\) was interrupted by a signal; waited \\d+\\.\\d s; skipping this run$/", $lines[0]);
        self::assertTrue($holder->release());
    }

    /** @return iterable<string, array{string}> */
    public static function jobEndings(): iterable
    {
        yield 'the job throws' => ['throw new \\RuntimeException("job failed");'];
        yield 'the job calls exit()' => ['exit(7);'];
        yield 'the job dies of a fatal error' => ['trigger_error("fatal", E_USER_ERROR);'];
    }

    /**
     * cron_guard() releases on the user's PDO with the job's exception (or
     * exit) pending, when PDO refuses to be called unless it is set aside.
     *
     * @dataProvider jobEndings
     */
    public function testCronGuardReleasesOnTheUsersPdoWhateverWayTheJobEnds(string $ending): void
    {
        $name = self::name('guard');
        $code = '$pdo = ' . self::pdoCode() . '; $lock = new \CronLock\Database($pdo, ' . var_export($name, true) . ");\n"
            . 'register_shutdown_function(function () use ($pdo, $lock) { printf("SHUTDOWN held=%s server=%s\n", var_export($lock->isHeld(), true), var_export($lock->holder(), true)); });' . "\n"
            . 'cron_guard(function () { echo "JOB\n"; ' . $ending . ' }, $lock);';
        $p = Proc::run($code);
        self::assertStringContainsString('JOB', $p->stdout(), $p->stderr());
        self::assertStringContainsString('SHUTDOWN held=false server=NULL', $p->stdout(), 'released before shutdown functions: ' . $p->stderr());
    }

    /**
     * A user's PDO and what leaves it unable to run the lock's statement, as a job
     * does: PostgreSQL in an aborted transaction, MySQL with an unbuffered
     * result set still open.
     *
     * @return array{0: \PDO, 1: \Closure(): void, 2: \Closure(): void, 3: string} the PDO, what breaks it, the repair, the advice expected
     */
    private static function pdoThatCannotRunAStatement(): array
    {
        if (static::databaseKind() === 'mysql') {
            $pdo = new \PDO(self::$server->dsn(), self::$server->user(), self::$server->password(), [\PDO::ATTR_ERRMODE => \PDO::ERRMODE_EXCEPTION, \PDO::MYSQL_ATTR_USE_BUFFERED_QUERY => false]);
            $open = null;
            $break = static function () use ($pdo, &$open): void {
                $open = $pdo->query('SELECT 1 UNION SELECT 2 UNION SELECT 3');
                $open->fetch();
            };
            $repair = static function () use (&$open): void {
                $open->closeCursor();
                $open = null;
            };
            return [$pdo, $break, $repair, 'closeCursor()'];
        }
        $pdo = self::$server->pdo();
        $break = static function () use ($pdo): void {
            $pdo->beginTransaction();
            try {
                $pdo->query('SELECT 1/0');
            } catch (\PDOException) {
                // the job handles its own error and rolls back later
            }
        };
        $repair = static fn () => $pdo->rollBack();
        return [$pdo, $break, $repair, 'roll back the transaction'];
    }

    /** @return iterable<string, array{string}> */
    public static function retries(): iterable
    {
        yield 'release() again' => ['release'];
        yield 'the destructor' => ['unset'];
        yield 'cron_guard() throws, then release()' => ['guard'];
    }

    /**
     * A release() the user's PDO refuses leaves the server's lock held, so
     * the object must say held too, say what to do, and free it on the
     * next try.
     *
     * @dataProvider retries
     */
    public function testAReleaseTheUsersPdoRefusesKeepsTheLockHeldUntilARetryFreesIt(string $retry): void
    {
        $name = self::name('refused');
        [$pdo, $break, $repair, $advice] = self::pdoThatCannotRunAStatement();
        $lock = new Database($pdo, $name);
        if ($retry === 'guard') {
            $log = $this->logToFile($this->dir);
            try {
                cron_guard(static function () use ($break): void {
                    $break();
                }, $lock);
                self::fail('cron_guard() throws the failed release (D8)');
            } catch (LockException $e) {
                $message = $e->getMessage();
            }
        } else {
            self::assertTrue($lock->acquire(0));
            $break();
            try {
                $lock->release();
                self::fail('a release the server refused must throw');
            } catch (LockException $e) {
                $message = $e->getMessage();
            }
        }
        self::assertTrue($lock->isHeld(), 'the server still holds it: the object must not say free');
        self::assertSame(self::busyAnswer(), self::$server->client(self::tryLockSql($name)), 'held on the server');
        self::assertStringContainsString($name, $message);
        self::assertStringContainsString('still held', $message);
        self::assertStringContainsString($advice, $message);
        self::assertStringContainsString('then call release() again', $message);
        if ($retry === 'guard') {
            $lines = self::logLines($log);
            self::assertCount(1, $lines);
            self::assertStringContainsString("cron_guard: releasing lock '$name'", $lines[0]);
            self::assertStringContainsString("failed: $message", $lines[0]);
        }

        $repair();
        if ($retry === 'unset') {
            unset($lock);
        } else {
            self::assertTrue($lock->release(), 'the retry frees it');
            self::assertFalse($lock->isHeld());
        }
        self::assertSame(self::freeAnswer(), self::$server->client(self::tryLockSql($name)), 'free on the server while the PDO lives on');
        self::assertSame('1', (string) $pdo->query('SELECT 1')->fetchColumn(), 'the PDO was left usable');
    }

    public function testATimedOutWaitInsideTheUsersTransactionLeavesTheTransactionUsable(): void
    {
        $name = self::name('tx');
        $holder = self::dsnLock($name);
        self::assertTrue($holder->acquire(0));
        $other = Proc::run('$l = ' . self::dsnLockCode($name) . '; echo "unused";');
        self::assertSame(0, $other->exitCode());
        // the waiter is another process: this thread's registry would refuse the wait
        $code = '$pdo = ' . self::pdoCode() . ";\n" . <<<PHP
            \$pdo->beginTransaction();
            \$pdo->query('SELECT 1');
            if (\$pdo->getAttribute(\PDO::ATTR_DRIVER_NAME) === 'pgsql') {
                \$pdo->exec("SET LOCAL lock_timeout = '50ms'");
            }
            \$lock = new \\CronLock\\Database(\$pdo, {$this->export($name)});
            printf("GOT=%s\n", var_export(\$lock->acquire(0.35), true));
            printf("TX=%s\n", var_export(\$pdo->inTransaction(), true));
            printf("SELECT=%s\n", \$pdo->query('SELECT 2')->fetchColumn());
            printf("COMMIT=%s\n", var_export(\$pdo->commit(), true));
            printf("ERRMODE=%d\n", \$pdo->getAttribute(\PDO::ATTR_ERRMODE));
            if (\$pdo->getAttribute(\PDO::ATTR_DRIVER_NAME) === 'pgsql') {
                // the user's SET LOCAL ended with the transaction
                printf("LOCK_TIMEOUT=%s\n", \$pdo->query("SELECT current_setting('lock_timeout')")->fetchColumn());
            }
            PHP;
        $p = Proc::run($code);
        $expected = "GOT=false\nTX=true\nSELECT=2\nCOMMIT=true\nERRMODE=" . \PDO::ERRMODE_EXCEPTION;
        if (static::databaseKind() === 'pgsql') {
            $expected .= "\nLOCK_TIMEOUT=0";
        }
        self::assertSame($expected, trim($p->stdout()), $p->stderr());
        self::assertTrue($holder->release());
    }

    private function export(string $value): string
    {
        return var_export($value, true);
    }

    public function testMessagesNeverContainThePassword(): void
    {
        $lock = new Database(self::$server->dsn(), self::name('pw'), ['user' => 'cron', 'password' => 'Wrong-' . self::$server->password()]);
        try {
            $lock->acquire(0);
            self::fail('a refused login must throw');
        } catch (ConnectionException $e) {
            self::assertStringNotContainsString(self::$server->password(), $e->getMessage());
            self::assertStringNotContainsString(self::$server->password(), $e->getTraceAsString());
            self::assertStringContainsString('cron', $e->getMessage(), $e->getMessage());
        }
        $refused = new Database(str_replace('port=' . self::$server->port(), 'port=1', self::$server->dsn()), 'x', self::credentials());
        $this->expectException(ConnectionException::class);
        $refused->acquire(0);
    }

    /** Issue 17 item 3: a name with a line break is escaped, as File and Redis messages escape it. */
    public function testANameWithALineBreakStaysOneLineInEveryMessage(): void
    {
        $name = "nightly\nreport\e" . getmypid();
        $shown = "'nightly\\nreport\\u{1b}" . getmypid() . "'";
        $messages = [];
        $refused = new Database(str_replace('port=' . self::$server->port(), 'port=1', self::$server->dsn()), $name, self::credentials());
        try {
            $refused->acquire(0);
            self::fail('a closed port must throw');
        } catch (ConnectionException $e) {
            $messages[] = $e->getMessage();
        }
        $holder = self::dsnLock($name);
        self::assertTrue($holder->acquire(0));
        try {
            self::dsnLock($name)->acquire(-1);
            self::fail('waiting for this process itself must throw');
        } catch (LockException $e) {
            $messages[] = $e->getMessage();
        }
        self::assertTrue($holder->release());
        foreach ($messages as $message) {
            self::assertStringNotContainsString("\n", $message);
            self::assertStringNotContainsString("\e", $message);
            self::assertStringContainsString($shown, $message);
        }
    }

    /**
     * Issue 17 item 6: a connect that fails for want of descriptors (ulimit -n
     * exhausted) says so in the OS's words, as a File lock (and Redis) does,
     * not mysqlnd's "Unknown error while connecting".
     */
    public function testAConnectWithoutDescriptorsLeftSaysTooManyOpenFiles(): void
    {
        $code = sprintf('$lock = %s; $file = %s;', self::dsnLockCode(self::name('emfile')), var_export($this->dir . '/emfile.lock', true))
            . ' posix_setrlimit(POSIX_RLIMIT_NOFILE, 64, posix_getrlimit()["hard openfiles"]);'
            . ' $fds = []; while (($f = @fopen("/dev/null", "r")) !== false) { $fds[] = $f; }'
            . ' try { $lock->acquire(0); echo "ACQUIRED\n"; } catch (\Throwable $e) { echo get_class($e), ": ", $e->getMessage(), "\n"; }'
            . ' try { new \CronLock\File($file); echo "OPENED\n"; } catch (\Throwable $e) { echo get_class($e), ": ", $e->getMessage(), "\n"; }'
            . ' $fds = []; echo $lock->acquire(0) ? "THEN ACQUIRED\n" : "THEN BUSY\n";';
        $p = Proc::run($code);
        $lines = explode("\n", trim($p->stdout()));
        self::assertCount(3, $lines, $p->stdout() . $p->stderr());
        self::assertStringStartsWith('CronLock\ConnectionException: cannot reach lock ', $lines[0]);
        self::assertStringEndsWith(': Too many open files', $lines[0]);
        self::assertStringNotContainsString('Unknown error', $lines[0]);
        self::assertStringEndsWith(': Too many open files', $lines[1], 'a File lock says the same');
        self::assertSame('THEN ACQUIRED', $lines[2], 'with descriptors back, the lock connects');
    }

    public function testBadArgumentsAndUnusableDrivers(): void
    {
        try {
            new Database('sqlite:/tmp/x.db', 'x');
            self::fail('sqlite is not a lock server');
        } catch (LockException $e) {
            self::assertStringContainsString("'sqlite'", $e->getMessage());
        }
        try {
            new Database(new \ArrayObject(), 'x');
            self::fail('only a PDO or a DSN');
        } catch (\TypeError $e) {
            self::assertStringContainsString('CronLock\Database::__construct(): Argument #1 ($connection) must be of type PDO|string, ArrayObject given', $e->getMessage());
        }
        try {
            new Database(self::$server->pdo(), 'x', ['password' => 'p']);
            self::fail('user/password with a PDO mean nothing');
        } catch (\ValueError $e) {
            self::assertStringContainsString("\$options['password']", $e->getMessage());
        }
        try {
            new Database(self::$server->dsn(), 'x', ['pasword' => 'p']);
            self::fail('unknown option');
        } catch (\ValueError $e) {
            self::assertStringContainsString('pasword', $e->getMessage());
        }
        try {
            new Database(self::$server->dsn(), 'x', ['pdo_options' => [\PDO::ATTR_PERSISTENT => true]]);
            self::fail('a persistent own connection would outlive the lock');
        } catch (\ValueError $e) {
            self::assertStringContainsString('PDO::ATTR_PERSISTENT', $e->getMessage());
        }
        $lock = self::dsnLock('x');
        try {
            $lock->__construct(self::$server->dsn(), 'y');
            self::fail('__construct twice');
        } catch (\Error $e) {
            self::assertSame('Cannot call CronLock\Database::__construct() twice', $e->getMessage());
            self::assertSame('x', $lock->name());
        }
        $unserialize = Proc::run('try { unserialize(\'O:17:"CronLock\\\\Database":0:{}\'); } catch (\Throwable $e) { echo get_class($e), ": ", $e->getMessage(); }');
        self::assertSame('CronLock\LockException: a CronLock\Database cannot be serialized: a lock belongs to the process that holds it', $unserialize->stdout(), $unserialize->stderr());
        $this->expectException(LockException::class);
        serialize($lock);
    }

    private static function busyAnswer(): string
    {
        return static::databaseKind() === 'mysql' ? '0' : 'f';
    }

    private static function freeAnswer(): string
    {
        return static::databaseKind() === 'mysql' ? '1' : 't';
    }
}

<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\ConnectionException;
use CronLock\Guard;
use CronLock\Redis;
use CronLock\Tests\Support\ErrorLogHelpers;
use CronLock\Tests\Support\FileTestHelpers;
use CronLock\Tests\Support\Proc;
use CronLock\Tests\Support\RedisServer;
use CronLock\Tests\Support\RedisTestHelpers;
use PHPUnit\Framework\TestCase;

/** cron_guard() with a CronLock\Redis lock, against a redis-server of our own (self::$server). */
final class CronGuardRedisTest extends TestCase
{
    use ErrorLogHelpers;
    use FileTestHelpers;
    use RedisTestHelpers;

    private string $controlDir;

    protected function setUp(): void
    {
        parent::setUp();
        $this->controlDir = $this->makeTempDir('guard-redis');
    }

    protected function tearDown(): void
    {
        $this->restoreErrorLog();
        $this->reapCommands();
        $this->removeTempDirs();
        parent::tearDown();
    }

    // ----------------------------------------------------------------- helpers

    private static function key(): string
    {
        return 'guard-test:' . getmypid() . ':' . bin2hex(random_bytes(4));
    }

    /**
     * A child holding $key with a plain acquire(0) (TTL 30 s); prints "HELD"
     * and releases when the signal file appears or after $releaseAfter s.
     *
     * @return array{0: Proc, 1: string}
     */
    private function startHolder(string $key, float $releaseAfter = -1.0): array
    {
        $signal = "{$this->controlDir}/release-" . bin2hex(random_bytes(3));
        $p = Proc::start('$lock = ' . self::lockCode(self::$server->dsn(), $key, 30.0) . ";\n" . <<<'PHP'
            if (!$lock->acquire(0)) { echo "BUSY\n"; exit(2); }
            echo "HELD ", $lock->token(), "\n";
            [, $signal, $after] = $argv;
            $t0 = microtime(true);
            while (!file_exists($signal) && ((float) $after < 0 || microtime(true) - $t0 < (float) $after)) { usleep(500); }
            echo "RELEASED ", var_export($lock->release(), true), "\n";
            PHP, [$signal, sprintf('%.3F', $releaseAfter)]);
        $p->waitForLine('HELD', 15.0, 'stdout');
        return [$p, $signal];
    }

    private function stopHolder(Proc $p, string $signal): void
    {
        touch($signal);
        $line = $p->waitForLine('RELEASED', 10.0, 'stdout');
        if ($line !== 'RELEASED true') {
            $p->wait(10.0); // for its whole stderr
        }
        self::assertSame('RELEASED true', $line, 'holder stderr: ' . $p->stderr());
        self::assertSame(0, $p->wait(10.0), $p->stderr());
    }

    // ------------------------------------------------------------------ runs

    public function testTheJobRunsWhileTheKeyHoldsTheTokenAndTheKeyIsGoneAfter(): void
    {
        $key = self::key();
        $lock = new Redis(self::$server->dsn(), $key, 10.0);
        $seen = null;
        $result = cron_guard(function (Guard $guard) use ($lock, $key, &$seen) {
            $probe = new Redis(self::$server->dsn(), $key, 10.0);
            $seen = [
                'same lock' => $guard->lock() === $lock,
                'token set' => $lock->token() !== null,
                'key holds the token' => self::raw('GET', $key) === $lock->token(),
                'key has a TTL' => self::raw('PTTL', $key) > 9000,
                'others refused' => !$probe->acquire(0),
            ];
            return 'job result';
        }, $lock);

        self::assertSame('job result', $result);
        self::assertSame(
            ['same lock' => true, 'token set' => true, 'key holds the token' => true, 'key has a TTL' => true, 'others refused' => true],
            $seen,
        );
        self::assertFalse($lock->isHeld());
        self::assertSame(0, self::raw('EXISTS', $key), 'the key is gone after the job');
    }

    public function testAnAutoRenewingLockOutlivesItsTtlDuringTheJob(): void
    {
        $key = self::key();
        $lock = new Redis(self::$server->dsn(), $key, 0.4, ['auto_renew' => true]);
        $result = cron_guard(function () use ($lock, $key) {
            usleep(1_000_000); // 2.5 TTLs
            return [self::raw('GET', $key) === $lock->token(), $lock->isHeld()];
        }, $lock);
        self::assertSame([true, true], $result);
        self::assertSame(0, self::raw('EXISTS', $key));
        usleep(300_000);
        self::assertSame(0, self::raw('EXISTS', $key), 'no renewal after the job');
    }

    // ------------------------------------------------------------------ busy

    public function testBusyReturnsNullAndLogsOneLineNamingTheKeyAndTheHolder(): void
    {
        $key = self::key();
        [$holder, $signal] = $this->startHolder($key);
        $token = self::raw('GET', $key);
        $log = $this->logToFile($this->controlDir);
        $ran = false;

        $result = cron_guard(function () use (&$ran) {
            $ran = true;
            return 'ran';
        }, new Redis(self::$server->dsn(), $key, 10.0));

        self::assertNull($result, 'busy: null');
        self::assertFalse($ran, 'busy: the job is not called');
        $lines = self::logLines($log);
        self::assertCount(1, $lines, 'one error_log() line: ' . implode("\n", $lines));
        self::note('busy line: ' . $lines[0]);
        self::assertStringContainsString("redis key '$key'", $lines[0], 'names the key');
        self::assertStringContainsString('pid ' . $holder->pid() . ' on ' . gethostname(), $lines[0], 'names the holder pid and host');
        self::assertSame($token, self::raw('GET', $key), "the holder's key is untouched");
        $this->stopHolder($holder, $signal);
        self::assertSame(0, self::raw('EXISTS', $key));
    }

    public function testBusyWithAKeyOfAnotherClientSaysThePidIsUnknown(): void
    {
        $key = self::key();
        self::assertSame('OK', self::raw('SET', $key, 'not-a-cronlock-token', 'PX', '10000'));
        $log = $this->logToFile($this->controlDir);
        self::assertNull(cron_guard(static fn () => 'ran', new Redis(self::$server->dsn(), $key, 10.0)));
        $lines = self::logLines($log);
        self::assertCount(1, $lines, implode("\n", $lines));
        self::assertStringContainsString("redis key '$key'", $lines[0]);
        self::assertSame('not-a-cronlock-token', self::raw('GET', $key));
        self::raw('DEL', $key);
    }

    /**
     * A holder's value that is not UTF-8 (a Latin-1 host name, another
     * client's bytes) is a holder like any other: busy, shown escaped, on_busy
     * applied, a wait keeps waiting; never a ConnectionException.
     */
    public function testAHolderValueThatIsNotUtf8IsBusy(): void
    {
        $key = self::key();
        self::assertSame('OK', self::raw('SET', $key, "0a7fb9219a6310084abb123781473a0e:4242@web\xe9", 'PX', '20000'));
        $lock = new Redis(self::$server->dsn(), $key, 10.0);
        self::assertFalse($lock->acquire(0));
        $t0 = microtime(true);
        self::assertFalse($lock->acquire(0.3), 'a wait keeps waiting');
        self::assertGreaterThanOrEqual(0.25, microtime(true) - $t0);
        $log = $this->logToFile($this->controlDir);
        self::assertNull(cron_guard(static fn () => 'ran', $lock, ['wait' => 0.2]));
        $lines = self::logLines($log);
        self::assertCount(1, $lines, implode("\n", $lines));
        self::assertStringContainsString("redis key '$key' at ", $lines[0]);
        // 'wait' => 0.2: at least that long; more on a loaded machine
        self::assertMatchesRegularExpression('/ is held by pid 4242 on web\\\\xe9; waited (0\.[2-9]|[1-9]\d*\.\d) s; skipping this run/', $lines[0]);
        $p = Proc::run('$lock = ' . self::lockCode(self::$server->dsn(), $key, 10.0) . ";\n" . <<<'PHP'
            cron_guard(function () { echo "JOB RAN\n"; }, $lock, ['on_busy' => 75]);
            PHP);
        self::assertSame(75, $p->exitCode(), $p->stdout() . $p->stderr());
        self::assertSame('', $p->stdout());
        self::raw('DEL', $key);
    }

    public function testOnBusyExitsWithThatStatus(): void
    {
        $key = self::key();
        [$holder, $signal] = $this->startHolder($key);
        $p = Proc::run('$lock = ' . self::lockCode(self::$server->dsn(), $key, 10.0) . ";\n" . <<<'PHP'
            cron_guard(function () { echo "JOB RAN\n"; }, $lock, ['on_busy' => 75]);
            echo "AFTER\n";
            PHP);
        self::assertSame(75, $p->exitCode(), $p->stdout() . $p->stderr());
        self::assertSame('', $p->stdout());
        self::assertStringContainsString("redis key '$key'", $p->stderr(), 'the busy line (CLI error_log goes to stderr)');
        $this->stopHolder($holder, $signal);
    }

    public function testWaitGetsTheLockWhenTheHolderReleasesInTime(): void
    {
        $key = self::key();
        [$holder] = $this->startHolder($key, 0.3);
        $t0 = microtime(true);
        $result = cron_guard(static fn () => 'got it', new Redis(self::$server->dsn(), $key, 10.0), ['wait' => 5.0]);
        $waited = microtime(true) - $t0;
        self::assertSame('got it', $result);
        self::assertLessThan(4.0, $waited, 'did not need the whole wait');
        self::assertSame('RELEASED true', $holder->waitForLine('RELEASED', 10.0, 'stdout'));
        self::assertSame(0, $holder->wait());
    }

    public function testAnUnreachableServerThrowsConnectionExceptionAndSkipsTheJob(): void
    {
        $dead = RedisServer::start();
        $dsn = $dead->dsn();
        $dead->stop();
        $ran = false;
        $t0 = microtime(true);
        try {
            cron_guard(function () use (&$ran) {
                $ran = true;
            }, new Redis($dsn, self::key(), 10.0));
            self::fail('expected ConnectionException');
        } catch (ConnectionException $e) {
            self::assertLessThan(3.0, microtime(true) - $t0);
        }
        self::assertFalse($ran);
    }

    // ---------------------------------------------------------------- renew

    public function testGuardRenewRaisesTheTtlAndIsFalseOnceTheKeyWasTakenOver(): void
    {
        $key = self::key();
        $lock = new Redis(self::$server->dsn(), $key, 10.0);
        $seen = cron_guard(function (Guard $guard) use ($key) {
            $seen = [];
            self::raw('PEXPIRE', $key, '1000');
            $seen['pttl lowered'] = self::raw('PTTL', $key) <= 1000;
            $seen['renew'] = $guard->renew();
            $seen['pttl raised'] = self::raw('PTTL', $key) > 9000;
            // someone deletes it and another client takes it
            self::raw('DEL', $key);
            self::raw('SET', $key, 'other', 'PX', '10000');
            $seen['renew after takeover'] = $guard->renew();
            $seen['held'] = $guard->lock()->isHeld();
            return $seen;
        }, $lock);
        self::assertSame(
            ['pttl lowered' => true, 'renew' => true, 'pttl raised' => true, 'renew after takeover' => false, 'held' => false],
            $seen,
        );
        self::assertSame('other', self::raw('GET', $key), "the job's end does not delete the new holder's key");
        self::assertLessThanOrEqual(10000, self::raw('PTTL', $key), 'nor extend it');
        self::raw('DEL', $key);

        // Deleted only: lost as well.
        $seen = cron_guard(function (Guard $guard) use ($key) {
            self::raw('DEL', $key);
            return $guard->renew();
        }, new Redis(self::$server->dsn(), $key, 10.0));
        self::assertFalse($seen, 'renew() is false once the key was deleted');
        self::assertSame(0, self::raw('EXISTS', $key), 'renew does not re-create a deleted key');
    }

    // -------------------------------------------------- every way out releases

    /** @return iterable<string, array{string, int, string, bool}> body, exit status, needle, auto_renew */
    public static function waysOut(): iterable
    {
        yield 'return' => ['return 42;', 0, 'RETURNED 42', false];
        yield 'exception' => ['throw new \DomainException("boom from job");', 255, 'Uncaught DomainException: boom from job', false];
        yield 'exit(3)' => ['exit(3);', 3, '', false];
        yield 'E_USER_ERROR' => ['trigger_error("fatal from job", E_USER_ERROR);', 255, 'fatal from job', false];
        yield 'exit(3), auto_renew' => ['exit(3);', 3, '', true];
        yield 'E_USER_ERROR, auto_renew' => ['trigger_error("fatal from job", E_USER_ERROR);', 255, 'fatal from job', true];
    }

    /** @dataProvider waysOut */
    public function testTheKeyIsGoneBeforeShutdownFunctionsRun(string $body, int $status, string $needle, bool $autoRenew): void
    {
        $key = self::key();
        $code = self::rawClientCode() . '$lock = ' . self::lockCode(self::$server->dsn(), $key, 30.0, ['auto_renew' => $autoRenew]) . ";\n"
            . sprintf(<<<'PHP'
                ini_set('display_errors', 'stderr');
                $key = %s;
                register_shutdown_function(function () use ($raw, $key) {
                    echo "SHUTDOWN: EXISTS=", $raw('EXISTS', $key), "\n";
                });
                $r = cron_guard(function () use ($lock, $raw, $key) {
                    echo "JOB ", $raw('GET', $key) === $lock->token() ? "HOLDS THE KEY" : "KEY NOT OURS", "\n";
                    %s
                }, $lock);
                echo "RETURNED ", var_export($r, true), "\n";
                PHP, var_export($key, true), $body);
        $p = Proc::run($code, [], [], 30.0);
        $all = $p->stdout() . $p->stderr();

        self::assertStringContainsString('JOB HOLDS THE KEY', $p->stdout(), $all);
        self::assertSame($status, $p->exitCode(), $all);
        if ($needle !== '') {
            self::assertStringContainsString($needle, $all);
        }
        self::assertStringContainsString('SHUTDOWN: EXISTS=0', $p->stdout(), 'the key must be gone when shutdown functions run: ' . $all);
        self::assertSame(0, self::raw('EXISTS', $key));
    }
}

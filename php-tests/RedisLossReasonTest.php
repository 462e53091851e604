<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\Tests\Support\Proc;
use CronLock\Tests\Support\RedisServer;
use CronLock\Tests\Support\RedisTestHelpers;
use PHPUnit\Framework\TestCase;

/**
 * cron_guard()'s lost line for a Redis hold says when and why it was lost,
 * as the renewal thread (helper) or the call that found it saw it: the key
 * is gone, holds another token, its TTL ran out before a renewal, or ran
 * out while the server could not be reached. Real processes, a real
 * redis-server; Guard::lost() gives the words.
 */
final class RedisLossReasonTest extends TestCase
{
    use RedisTestHelpers;

    private static function key(): string
    {
        return 'loss:' . getmypid() . ':' . bin2hex(random_bytes(4));
    }

    /** Runs $job (PHP, with $raw and $guard) under cron_guard(); its stdout: what lost() said at the end. */
    private static function guarded(string $dsn, string $key, float $ttl, array $options, string $job): Proc
    {
        $code = self::rawClientCode() . sprintf(<<<'PHP'
            $lock = %s;
            $seen = null;
            cron_guard(function (CronLock\Guard $guard) use ($raw, &$seen) {
                %s
                $seen = $guard;
            }, $lock, ['log' => 'none']);
            echo $seen->lost(), "\n";
            PHP, self::lockCode($dsn, $key, $ttl, $options), $job);
        $p = Proc::run($code);
        self::assertSame(0, $p->exitCode(), $p->stdout() . $p->stderr());
        return $p;
    }

    private static function assertLossLine(string $why, Proc $p): void
    {
        self::assertMatchesRegularExpression('/^at \d\d:\d\d:\d\dZ: ' . preg_quote($why, '/') . '\n$/', $p->stdout(), $p->stderr());
    }

    public function testADeletedKeyFoundByRenewIsGone(): void
    {
        $key = self::key();
        $p = self::guarded(self::$server->tcpDsn(), $key, 30.0, [], sprintf('$raw("DEL", %s); $guard->renew();', var_export($key, true)));
        self::assertLossLine('the key is gone', $p);
    }

    public function testATakenKeyFoundAtTheEndHoldsAnotherToken(): void
    {
        $key = self::key();
        $p = self::guarded(self::$server->tcpDsn(), $key, 30.0, [], sprintf('$raw("SET", %s, "someone-else");', var_export($key, true)));
        self::assertLossLine('the key holds another token', $p);
        self::raw('DEL', $key);
    }

    public function testATakenKeyFoundByTheRenewalThreadHoldsAnotherToken(): void
    {
        $key = self::key();
        // auto_renew every 0.2 s: the renewal thread (helper) finds it
        $p = self::guarded(self::$server->tcpDsn(), $key, 0.6, ['auto_renew' => true], sprintf(<<<'PHP'
            $raw("SET", %s, "someone-else");
            $until = microtime(true) + 5;
            while ($guard->lost() === null && microtime(true) < $until) { usleep(20000); }
            PHP, var_export($key, true)));
        self::assertLossLine('the key holds another token', $p);
        self::raw('DEL', $key);
    }

    public function testAHoldNotRenewedRunsOutAtItsTtl(): void
    {
        $key = self::key();
        $p = self::guarded(self::$server->tcpDsn(), $key, 0.3, [], 'usleep(600000);');
        self::assertLossLine('its TTL ran out before a renewal', $p);
    }

    public function testAServerThatCannotBeReachedLetsTheTtlRunOut(): void
    {
        $server = RedisServer::start();
        try {
            $code = sprintf(<<<'PHP'
                $lock = new CronLock\Redis(%s, 'unreachable', 0.6, ['auto_renew' => true, 'connect_timeout' => 0.2, 'read_timeout' => 0.2]);
                $seen = null;
                cron_guard(function (CronLock\Guard $guard) use (&$seen) {
                    echo "HELD\n";
                    $until = microtime(true) + 10;
                    while (!file_exists(%s) && microtime(true) < $until) { usleep(20000); }
                    $until = microtime(true) + 5;
                    while ($guard->lost() === null && microtime(true) < $until) { usleep(20000); }
                    $seen = $guard;
                }, $lock, ['log' => 'none']);
                echo $seen->lost(), "\n";
                PHP, var_export($server->tcpDsn(), true), var_export($go = sys_get_temp_dir() . '/loss-go-' . bin2hex(random_bytes(4)), true));
            $p = Proc::start($code);
            $p->waitForLine('HELD', 10.0, 'stdout');
            $server->stop();
            touch($go);
            $p->wait(20.0);
            @unlink($go);
            self::assertSame(0, $p->exitCode(), $p->stdout() . $p->stderr());
            self::assertMatchesRegularExpression('/^HELD\nat \d\d:\d\d:\d\dZ: its TTL ran out while the server could not be reached\n$/', $p->stdout(), $p->stderr());
        } finally {
            $server->stop();
        }
    }
}

<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\Tests\Support\FileTestHelpers;
use CronLock\Tests\Support\WebAssembly;
use PHPUnit\Framework\TestCase;

/**
 * cronlock/polyfill on a bare PHP (`php -n`: no ctype, no pcntl, no posix,
 * no conf.d): it needs nothing its composer.json does not ask for. A held
 * lock is busy, holderPid() names the holder, and cron_guard() logs the
 * busy line instead of dying of an undefined function.
 */
final class PolyfillBarePhpTest extends TestCase
{
    use FileTestHelpers;

    public function testTheBusyPathsWorkWithoutOptionalExtensions(): void
    {
        WebAssembly::skip('no /proc/locks (php-wasm has its own /proc), so holderPid() is null and the busy line says "pid unknown"');
        $dir = $this->makeTempDir('bare');
        try {
            $bootstrap = dirname(__DIR__) . '/polyfill/bootstrap.php';
            $code = sprintf(<<<'PHP'
                require %s;
                $path = %s;
                $holder = new CronLock\File($path);
                echo $holder->acquire(0) ? "HELD\n" : "NOT HELD\n";
                $other = new CronLock\File($path);
                echo "HOLDER ", var_export($other->holderPid() === getmypid(), true), "\n";
                ini_set('error_log', %s);
                var_dump(cron_guard(function () { echo "RAN\n"; }, $other));
                PHP, var_export($bootstrap, true), var_export("$dir/bare.lock", true), var_export("$dir/log", true));
            [$status, $out, $err] = $this->runCommand([PHP_BINARY, '-n', '-r', $code]);
            self::assertSame(0, $status, $out . $err);
            self::assertSame("HELD\nHOLDER true\nNULL\n", $out, $err);
            self::assertStringContainsString('is held by this process (pid', (string) file_get_contents("$dir/log"));
        } finally {
            $this->removeTempDirs();
        }
    }
}

<?php

declare(strict_types=1);

namespace CronLock\Tests\Support;

use PHPUnit\Framework\Assert;

/**
 * PHP compiled to WebAssembly (npm's @php-wasm, run by scripts/php-wasm.mjs:
 * scripts/test runs the polyfill's suite on PHP 8.0 so). Its processes are
 * real host processes, but what PHP asks of the kernel is emulated, and some
 * of it is missing: no pcntl and no posix, proc_terminate() sends nothing,
 * proc_get_status() never says "signaled" (php-wasm.mjs turns a signal into
 * the shell's 128 + number exit status), fstat() invents device and inode
 * numbers. A test that needs one of those calls skip() with what is missing,
 * so the skip line says exactly why; kill() is how every test helper sends a
 * signal, here and on a native PHP.
 */
final class WebAssembly
{
    /** Whether this PHP runs on WebAssembly (php-wasm's uname is "Emscripten ... wasm32"). */
    public static function active(): bool
    {
        return php_uname('s') === 'Emscripten';
    }

    /** Skip the current test on WebAssembly PHP: "PHP on WebAssembly: $missing". */
    public static function skip(string $missing): void
    {
        if (self::active()) {
            Assert::markTestSkipped("PHP on WebAssembly: $missing");
        }
    }

    /**
     * Send signal $signal (a number: without pcntl there are no SIG*
     * constants) to $pid: posix_kill() where it exists, else kill(1), which
     * is how WebAssembly PHP reaches the kernel. Whether it was sent.
     */
    public static function kill(int $pid, int $signal): bool
    {
        if (function_exists('posix_kill')) {
            return posix_kill($pid, $signal);
        }
        $spec = [0 => ['file', '/dev/null', 'r'], 1 => ['file', '/dev/null', 'w'], 2 => ['file', '/dev/null', 'w']];
        $proc = proc_open(['kill', "-$signal", (string) $pid], $spec, $pipes);
        return $proc !== false && proc_close($proc) === 0;
    }

    /**
     * The contents of a host file, false when unreadable. On WebAssembly
     * /proc is php-wasm's own (only /proc/self/fd), so /proc files are read
     * through cat(1) there.
     *
     * @return string|false
     */
    public static function hostFile(string $path)
    {
        if (!self::active() || strncmp($path, '/proc/', 6) !== 0) {
            return @file_get_contents($path);
        }
        $spec = [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => ['file', '/dev/null', 'w']];
        $proc = proc_open(['cat', $path], $spec, $pipes);
        if ($proc === false) {
            return false;
        }
        $text = stream_get_contents($pipes[1]);
        fclose($pipes[1]);
        return proc_close($proc) === 0 ? (string) $text : false;
    }
}

<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\Polyfill\Scripts;
use PHPUnit\Framework\TestCase;

/**
 * cronlock/polyfill runs byte for byte the extension's Lua scripts, so both
 * exclude each other on one key and agree on every reply (and EVALSHA finds
 * one script, not two): each script of src/lock/redis/scripts.rs has its
 * copy in CronLock\Polyfill\Scripts, identical, and no other file of the
 * polyfill carries Lua of its own. Reads files only: runs with either
 * implementation loaded.
 */
final class PolyfillScriptsTest extends TestCase
{
    /** @return array<string, string> the extension's scripts by constant name */
    private static function extensionScripts(): array
    {
        $rust = (string) file_get_contents(dirname(__DIR__) . '/src/lock/redis/scripts.rs');
        preg_match_all('/^pub\(super\) const (\w+_LUA): &str = r"(.*?)";$/ms', $rust, $m, PREG_SET_ORDER);
        $scripts = [];
        foreach ($m as [, $name, $body]) {
            $scripts[$name] = $body;
        }
        return $scripts;
    }

    public function testThePolyfillsScriptsAreTheExtensionsByteForByte(): void
    {
        $file = dirname(__DIR__) . '/polyfill/src/Polyfill/Scripts.php';
        self::assertFileExists($file);
        if (!class_exists(Scripts::class, false)) {
            require_once $file; // with the extension loaded, the polyfill is not
        }
        $extension = self::extensionScripts();
        self::assertGreaterThanOrEqual(5, count($extension), 'found the scripts in scripts.rs');
        $polyfill = (new \ReflectionClass(Scripts::class))->getConstants();
        self::assertSame(array_keys($extension), array_keys($polyfill), 'the same scripts, no more, no fewer');
        foreach ($extension as $name => $lua) {
            self::assertSame($lua, $polyfill[$name], "$name differs from src/lock/redis/scripts.rs");
        }
    }

    public function testNoOtherPolyfillFileCarriesLuaOfItsOwn(): void
    {
        $src = dirname(__DIR__) . '/polyfill/src';
        $files = new \RecursiveIteratorIterator(new \RecursiveDirectoryIterator($src, \FilesystemIterator::SKIP_DOTS));
        $checked = 0;
        foreach ($files as $file) {
            if ($file->getExtension() !== 'php' || $file->getFilename() === 'Scripts.php') {
                continue;
            }
            $checked++;
            self::assertStringNotContainsString('redis.call', (string) file_get_contents($file->getPathname()),
                $file->getPathname() . ' has a script of its own: use CronLock\Polyfill\Scripts');
        }
        self::assertGreaterThan(10, $checked);
    }
}

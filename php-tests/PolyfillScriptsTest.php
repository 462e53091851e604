<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\Tests\Support\FileTestHelpers;
use CronLock\Tests\Support\Proc;
use CronLock\Tests\Support\RedisServer;
use CronLock\Tests\Support\RedisTestHelpers;
use PHPUnit\Framework\TestCase;

/**
 * The extension and cronlock/polyfill run the same Lua scripts, so both
 * exclude each other on one key and agree on every reply (and EVALSHA finds
 * one script, not two): they are the files in polyfill/resources/redis/,
 * which src/lock/redis/scripts.rs embeds and CronLock\Polyfill\Scripts reads.
 * Checked on a real server: after a child of each implementation ran every
 * operation, the server's script cache holds exactly the SHA1s of those
 * files.
 */
final class PolyfillScriptsTest extends TestCase
{
    use FileTestHelpers;
    use RedisTestHelpers;

    protected function tearDown(): void
    {
        $this->reapCommands();
        $this->removeTempDirs();
        parent::tearDown();
    }

    /** @return array<string, string> script name => text, from polyfill/resources/redis/ */
    private static function files(): array
    {
        $scripts = [];
        foreach (glob(dirname(__DIR__) . '/polyfill/resources/redis/*.lua') as $file) {
            $scripts[basename($file, '.lua')] = (string) file_get_contents($file);
        }
        ksort($scripts);
        return $scripts;
    }

    public function testEachImplementationNamesEveryFileAndCarriesNoLuaOfItsOwn(): void
    {
        $files = array_keys(self::files());
        self::assertCount(6, $files); // acquire, acquire_in_window, claim, end_window, release, renew
        preg_match_all('/script!\("(\w+)"\)/', (string) file_get_contents(dirname(__DIR__) . '/src/lock/redis/scripts.rs'), $m);
        $rust = $m[1];
        sort($rust);
        self::assertSame($files, $rust, 'src/lock/redis/scripts.rs embeds every file, no more');
        $polyfill = array_values((new \ReflectionClass(self::scriptsClass()))->getConstants());
        sort($polyfill);
        self::assertSame($files, $polyfill, 'CronLock\Polyfill\Scripts names every file, no more');

        $checked = 0;
        foreach (['polyfill/src' => 'php', 'src' => 'rs'] as $dir => $ext) {
            $all = new \RecursiveIteratorIterator(new \RecursiveDirectoryIterator(dirname(__DIR__) . "/$dir", \FilesystemIterator::SKIP_DOTS));
            foreach ($all as $file) {
                if ($file->getExtension() !== $ext) {
                    continue;
                }
                $checked++;
                self::assertStringNotContainsString('redis.call', (string) file_get_contents($file->getPathname()),
                    $file->getPathname() . ' has Lua of its own: put it in polyfill/resources/redis/');
            }
        }
        self::assertGreaterThan(20, $checked);
    }

    /** The class, loaded from its file when the extension is loaded and the polyfill is not. */
    private static function scriptsClass(): string
    {
        $class = 'CronLock\Polyfill\Scripts';
        if (!class_exists($class)) {
            require_once dirname(__DIR__) . '/polyfill/src/Polyfill/Scripts.php';
        }
        return $class;
    }

    /**
     * Needs the built extension ($CRONLOCK_EXT) to start a child with it.
     *
     * @group extension-only
     */
    public function testTheExtensionRunsExactlyTheseFiles(): void
    {
        $ext = (string) getenv('CRONLOCK_EXT');
        if ($ext === '' || !is_file($ext)) {
            self::markTestSkipped('needs the built extension in $CRONLOCK_EXT (scripts/test sets it for the extension run)');
        }
        $dir = $this->makeTempDir('ini-ext');
        file_put_contents("$dir/cronlock.ini", "extension=$ext\n");
        $this->assertTheServerCachedExactlyTheFiles(['PHP_INI_SCAN_DIR' => ":$dir", 'CRONLOCK_EXT' => $ext], 'extension');
    }

    public function testThePolyfillRunsExactlyTheseFiles(): void
    {
        RedisServer::requirePolyfillClient();
        $dir = $this->makeTempDir('ini-poly');
        // The suite's own prepend file where the suite runs on the polyfill: it also loads
        // predis where the PHP has no phpredis (php-tests/bootstrap.php).
        $prepend = (string) getenv('CRONLOCK_POLYFILL') ?: dirname(__DIR__) . '/polyfill/bootstrap.php';
        file_put_contents("$dir/cronlock-polyfill.ini", "auto_prepend_file=$prepend\n");
        $this->assertTheServerCachedExactlyTheFiles(['PHP_INI_SCAN_DIR' => ":$dir", 'CRONLOCK_EXT' => false], 'polyfill');
    }

    /**
     * A child of one implementation acquires, renews, releases and claims, and runs a once-per guard
     * (the window's acquire and end): every script once. The server's cache then holds the
     * files' SHA1s and nothing else.
     *
     * @param array<string, string|false> $env
     */
    private function assertTheServerCachedExactlyTheFiles(array $env, string $implementation): void
    {
        self::raw('SCRIPT', 'FLUSH');
        $key = 'scripts:' . getmypid() . ':' . bin2hex(random_bytes(3));
        $code = '$lock = ' . self::lockCode(self::$server->dsn(), $key, 30.0) . ";\n" . <<<'PHP'
            $polyfill = !extension_loaded('cronlock');
            if (!$lock->acquire(0) || !$lock->renew() || !$lock->release() || !$lock->claim('w', 5.0)) { exit(2); }
            cron_guard(static function () {}, $lock, ['once_per' => 3600]);
            echo $polyfill ? "polyfill\n" : "extension\n";
            PHP;
        $p = Proc::run($code, [], $env);
        self::assertSame(0, $p->exitCode(), $p->stdout() . $p->stderr());
        self::assertSame("$implementation\n", $p->stdout());
        foreach (self::files() as $name => $lua) {
            self::assertSame([1], self::raw('SCRIPT', 'EXISTS', sha1($lua)), "$implementation ran $name.lua as it is");
        }
        preg_match('/^number_of_cached_scripts:(\d+)/m', (string) self::raw('INFO', 'memory'), $m);
        self::assertSame((string) count(self::files()), $m[1] ?? null, "$implementation ran no other script");
    }
}

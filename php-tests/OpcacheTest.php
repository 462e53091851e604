<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\Tests\Support\FileTestHelpers;
use PHPUnit\Framework\TestCase;

/**
 * cronlock under opcache, as production runs it (opcache.enable_cli=1 on
 * the CLI; php-fpm has opcache on by default). opcache moves the interned
 * strings of every internal function's arginfo into shared memory at startup
 * and releases the originals, so a class name cronlock wrote into its own
 * arginfo must survive that: a freed one made PHP abort at shutdown
 * ("malloc(): unaligned tcache chunk detected") in about half the runs.
 * Each run is a child `php -n` with opcache loaded and cronlock used.
 *
 * @group extension-only
 * The arginfo cronlock patches at startup exists only in the extension.
 */
final class OpcacheTest extends TestCase
{
    use FileTestHelpers;

    private const RUNS = 25;

    private string $dir;

    protected function setUp(): void
    {
        $this->dir = $this->makeTempDir('cronlock-opcache');
        [$code, $out] = $this->runCommand([...self::php(), '-r', 'echo (int) (function_exists("opcache_get_status") && opcache_get_status(false) !== false);']);
        if ($code !== 0 || $out !== '1') {
            self::markTestSkipped('opcache is not installed (apt-get install php' . PHP_MAJOR_VERSION . '.' . PHP_MINOR_VERSION . '-opcache)');
        }
    }

    protected function tearDown(): void
    {
        $this->reapCommands();
        $this->removeTempDirs();
        parent::tearDown();
    }

    /** @return list<string> php -n with opcache on for the CLI and cronlock loaded */
    private static function php(): array
    {
        return [PHP_BINARY, '-n', '-d', 'zend_extension=opcache', '-d', 'opcache.enable_cli=1',
            '-d', 'extension=' . self::extensionPath(), '-d', 'display_errors=stderr'];
    }

    /** A script that uses the classes and arginfo cronlock patched at startup. */
    private function script(): string
    {
        $file = "$this->dir/job.php";
        file_put_contents($file, '<?php
            $lock = new CronLock\File($argv[1] . "/job.lock");
            $ran = cron_guard(fn (CronLock\Guard $g) => $g->lock()->isHeld(), $lock);
            $params = (new ReflectionFunction("cron_guard"))->getParameters();
            echo $ran ? "ran" : "busy", " ", $params[1]->getType(), "\n";
        ');
        return $file;
    }

    public function testEveryRunWithOpcacheExitsCleanly(): void
    {
        $script = $this->script();
        $failed = [];
        for ($i = 0; $i < self::RUNS; $i++) {
            [$code, $out, $err] = $this->runCommand([...self::php(), $script, $this->dir]);
            if ($code !== 0 || trim($out) !== 'ran CronLock\Lock|string|null') {
                $failed[] = "run $i: exit $code, out " . trim($out) . ', err ' . trim(substr($err, 0, 200));
            }
        }
        self::assertSame([], $failed, self::RUNS . ' runs of php with opcache.enable_cli=1 and cronlock');
    }

    public function testValgrindFindsNoInvalidAccessWithOpcache(): void
    {
        if (trim((string) shell_exec('command -v valgrind 2>/dev/null')) === '') {
            self::markTestSkipped('valgrind is not installed (apt-get install valgrind)');
        }
        [$code, $out, $err] = $this->runCommand(
            ['valgrind', '-q', '--error-exitcode=99', ...self::php(), $this->script(), $this->dir],
            300.0,
            [...getenv(), 'USE_ZEND_ALLOC' => '0'],
        );
        self::assertSame(0, $code, "valgrind: $err");
        self::assertSame('ran CronLock\Lock|string|null', trim($out));
    }
}

<?php

declare(strict_types=1);

namespace CronLock\Tests\Frameworks;

use CronLock\Tests\Support\FileTestHelpers;
use PHPUnit\Framework\TestCase;

/**
 * bridges/laravel and bridges/symfony as Composer packages: composer
 * validate --strict (offline, as scripts/test validates the others), every
 * class they autoload is where its PSR-4 prefix says, and their sources
 * stay within the syntax of the oldest PHP they allow (polyfill/tests/
 * syntax71.php: Laravel 8 needs 7.3, symfony/lock 5.4 7.2.5).
 */
final class BridgePackagesTest extends TestCase
{
    use FileTestHelpers;

    /** @return array<string, array{string}> */
    public static function packages(): array
    {
        return ['cronlock/laravel' => ['laravel'], 'cronlock/symfony' => ['symfony']];
    }

    /** @dataProvider packages */
    public function testComposerValidateStrict(string $bridge): void
    {
        if (!is_executable('/usr/bin/composer') && trim((string) shell_exec('command -v composer')) === '') {
            self::markTestSkipped('composer is not installed (apt-get install composer)');
        }
        [$code, $out, $err] = $this->runCommand(['env', 'COMPOSER_DISABLE_NETWORK=1', 'COMPOSER_ALLOW_SUPERUSER=1', 'COMPOSER_NO_INTERACTION=1',
            'composer', 'validate', '--strict', '--no-check-lock', self::root() . "/bridges/$bridge/composer.json"], 60.0);
        self::assertSame(0, $code, $out . $err);
    }

    /** @dataProvider packages */
    public function testEveryClassIsWherePsr4SaysAndProvidersExist(string $bridge): void
    {
        $dir = self::root() . "/bridges/$bridge";
        $manifest = json_decode((string) file_get_contents("$dir/composer.json"), true, 512, JSON_THROW_ON_ERROR);
        $psr4 = $manifest['autoload']['psr-4'];
        self::assertCount(1, $psr4);
        $prefix = (string) array_key_first($psr4);
        $files = new \RecursiveIteratorIterator(new \RecursiveDirectoryIterator("$dir/" . $psr4[$prefix], \FilesystemIterator::SKIP_DOTS));
        $classes = [];
        foreach ($files as $file) {
            $relative = substr($file->getPathname(), strlen("$dir/" . $psr4[$prefix]), -4);
            $expected = $prefix . str_replace('/', '\\', $relative);
            $source = (string) file_get_contents($file->getPathname());
            preg_match('/^namespace ([^;]+);/m', $source, $ns);
            preg_match('/^(?:final |abstract )?(?:class|trait|interface) (\w+)/m', $source, $name);
            self::assertSame($expected, $ns[1] . '\\' . $name[1], $file->getPathname());
            $classes[] = $expected;
        }
        foreach ($manifest['extra']['laravel']['providers'] ?? [] as $provider) {
            self::assertContains($provider, $classes, 'extra.laravel.providers names a class of the package');
        }
    }

    public function testSourcesAreWithinTheOldestAllowedSyntax(): void
    {
        $files = array_merge(glob(self::root() . '/bridges/*/src/*.php'), glob(self::root() . '/bridges/*/src/*/*.php'), glob(self::root() . '/bridges/*/config/*.php'));
        [$code, $out, $err] = $this->runCommand(array_merge([PHP_BINARY, self::root() . '/polyfill/tests/syntax71.php'], $files), 60.0);
        self::assertSame(0, $code, $out . $err);
        self::assertStringContainsString(count($files) . ' files OK', $out);
    }

    private static function root(): string
    {
        return dirname(__DIR__, 2);
    }
}

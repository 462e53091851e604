<?php

declare(strict_types=1);

namespace CronLock\Tests;

use PHPUnit\Framework\TestCase;

/**
 * stubs/cronlock.stub.php is what IDEs and static analysis believe: it must
 * say exactly what the loaded extension declares.
 *
 * @group extension-only
 * Needs the extension: compares the stub with the loaded extension.
 */
final class StubTest extends TestCase
{
    private const TOOL = __DIR__ . '/tools/signatures.php';
    private const STUB = __DIR__ . '/../stubs/cronlock.stub.php';

    /** @return array<string, mixed> */
    private static function signatures(string $command): array
    {
        exec($command . ' 2>&1', $lines, $status);
        self::assertSame(0, $status, implode("\n", $lines));
        $decoded = json_decode(implode("\n", $lines), true, 512, JSON_THROW_ON_ERROR);
        self::assertIsArray($decoded);
        return $decoded;
    }

    public function testStubDeclaresExactlyWhatTheExtensionDeclares(): void
    {
        // The stub is loaded without the extension (php -n), which would
        // otherwise refuse to redeclare its classes.
        $stub = self::signatures(sprintf('%s -n %s %s', escapeshellarg(PHP_BINARY), escapeshellarg(self::TOOL), escapeshellarg(self::STUB)));
        $loaded = self::signatures(sprintf('%s %s', escapeshellarg(PHP_BINARY), escapeshellarg(self::TOOL)));

        self::assertNotEmpty($loaded['classes'], 'the extension is loaded in the child');
        self::assertSame(
            json_encode($loaded, JSON_PRETTY_PRINT),
            json_encode($stub, JSON_PRETTY_PRINT),
            'stubs/cronlock.stub.php and the loaded extension disagree'
        );
    }

    public function testStubDocumentsEveryDeclarationAndIniSetting(): void
    {
        $source = (string) file_get_contents(self::STUB);
        foreach (['interface Lock', 'class File', 'class Redis', 'class Database', 'class Guard', 'class LockException', 'class ConnectionException', 'function cron_guard'] as $declaration) {
            self::assertMatchesRegularExpression('~\*/\s*(final\s+)?' . preg_quote($declaration, '~') . '\b~', $source, "$declaration has a docblock");
        }
        foreach (ini_get_all('cronlock') as $setting => $_) {
            self::assertStringContainsString($setting, $source, "ini setting $setting is documented");
        }
        self::assertStringContainsString('@throws', $source);
        self::assertStringContainsString('```php', $source, 'an example');
    }

    public function testDocsApiIsTheStubsCurrentText(): void
    {
        exec(escapeshellarg(PHP_BINARY) . ' ' . escapeshellarg(__DIR__ . '/../scripts/api-doc') . ' --print', $lines, $status);
        self::assertSame(0, $status);
        self::assertSame(
            implode("\n", $lines),
            rtrim((string) file_get_contents(__DIR__ . '/../docs/api.md'), "\n"),
            'docs/api.md is written from the stub: run scripts/api-doc'
        );
    }
}

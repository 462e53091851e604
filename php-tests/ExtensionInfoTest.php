<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\ConnectionException;
use CronLock\File;
use CronLock\Guard;
use CronLock\Lock;
use CronLock\LockException;
use CronLock\Tests\Support\FileTestHelpers;
use PHPUnit\Framework\TestCase;

/** `php --ri cronlock` and the classes the extension registers. */
final class ExtensionInfoTest extends TestCase
{
    use FileTestHelpers;

    protected function tearDown(): void
    {
        $this->reapCommands();
        parent::tearDown();
    }

    private static function cargoVersion(): string
    {
        $toml = (string) file_get_contents(dirname(__DIR__) . '/Cargo.toml');
        // the first `version = "..."` after [package]
        self::assertMatchesRegularExpression('/^\[package\][^\[]*?^version\s*=\s*"([^"]+)"/ms', $toml);
        preg_match('/^\[package\][^\[]*?^version\s*=\s*"([^"]+)"/ms', $toml, $m);
        return $m[1];
    }

    /**
     * @group extension-only
     * Needs the extension: php --ri cronlock.
     */
    public function testPhpRiShowsTheCargoVersionAndTheIniSetting(): void
    {
        [$code, $out, $err] = $this->runCommand([...self::phpCommand(), '-d', 'cronlock.lock_dir=/srv/locks', '--ri', 'cronlock']);
        self::assertSame(0, $code, $err);
        $version = self::cargoVersion();
        self::assertMatchesRegularExpression('/^version => ' . preg_quote($version, '/') . '$/m', $out);
        self::assertMatchesRegularExpression('#^cronlock\.lock_dir => /srv/locks => #m', $out, 'the ini row with its local value');
        self::assertSame($version, phpversion('cronlock'), 'phpversion() agrees');
    }

    public function testLockExceptionIsARuntimeExceptionConstructibleFromPhp(): void
    {
        $class = new \ReflectionClass(LockException::class);
        self::assertSame(\RuntimeException::class, $class->getParentClass()->getName());
        self::assertFalse($class->isFinal(), 'users may extend it');

        $previous = new \Exception('cause');
        $e = new LockException('cannot lock', 17, $previous);
        self::assertInstanceOf(\RuntimeException::class, $e);
        self::assertSame('cannot lock', $e->getMessage());
        self::assertSame(17, $e->getCode());
        self::assertSame($previous, $e->getPrevious());

        try {
            throw new LockException('thrown');
        } catch (\RuntimeException $caught) {
            self::assertSame('thrown', $caught->getMessage());
        }
    }

    public function testConnectionExceptionExtendsLockException(): void
    {
        $class = new \ReflectionClass(ConnectionException::class);
        self::assertSame(LockException::class, $class->getParentClass()->getName());
        $e = new ConnectionException('down', 2);
        self::assertInstanceOf(LockException::class, $e);
        self::assertSame(2, $e->getCode());
    }

    public function testFileIsAFinalLock(): void
    {
        self::assertTrue((new \ReflectionClass(Lock::class))->isInterface());
        $file = new \ReflectionClass(File::class);
        self::assertTrue($file->isFinal());
        self::assertTrue($file->implementsInterface(Lock::class));
        self::assertTrue((new \ReflectionClass(Guard::class))->isFinal());
    }

    public function testLockInterfaceSignaturesMatchTheContract(): void
    {
        $expect = [
            'acquire' => ['float $timeout = 0.0', 'bool'],
            'renew' => ['?float $ttl = NULL', 'bool'],
            'release' => ['', 'bool'],
            'isHeld' => ['', 'bool'],
        ];
        $actual = [];
        foreach ((new \ReflectionClass(Lock::class))->getMethods() as $m) {
            $params = array_map(static function (\ReflectionParameter $p): string {
                $s = $p->getType() . ' $' . $p->getName();
                return $p->isDefaultValueAvailable() ? $s . ' = ' . var_export($p->getDefaultValue(), true) : $s;
            }, $m->getParameters());
            $actual[$m->getName()] = [implode(', ', $params), (string) $m->getReturnType()];
        }
        ksort($expect);
        ksort($actual);
        self::assertSame($expect, $actual);
    }

    public function testGuardCannotBeMadeFromPhp(): void
    {
        // as PHP's own engine-made classes refuse it (HashContext, Closure)
        $this->expectException(\Error::class);
        $this->expectExceptionMessage('Cannot directly construct CronLock\Guard, call cron_guard() instead');
        new Guard(); // only cron_guard() hands one out
    }
}

<?php

declare(strict_types=0);

namespace CronLock\Tests;

use CronLock\Tests\Support\FileTestHelpers;
use PHPUnit\Framework\TestCase;

/**
 * `array $options` and the union-typed parameters (Redis `array|string
 * $dsn`, Database `PDO|string $connection`, cron_guard()'s
 * `CronLock\Lock|string|null $lock`) follow PHP's rules for internal
 * functions, as `array_map()` and `implode()` do: null is no array, in any
 * mode; weak mode (this file) coerces an int, float, bool or Stringable to
 * the string of a union with string, and a null to a non-nullable one is
 * deprecated, then ""; every refusal is the engine's TypeError
 * "f(): Argument #N ($x) must be of type T, X given". cronlock/polyfill's
 * userland signatures give the same messages (a PHP-made TypeError adds
 * ", called in …"; its deprecation is E_USER_DEPRECATED). Strict mode, which
 * only the extension can see, runs in a child PHP.
 */
final class ArgumentTypesTest extends TestCase
{
    use FileTestHelpers;

    private string $dir;
    /** @var list<string> */
    private array $deprecations = [];

    protected function setUp(): void
    {
        $this->dir = $this->makeTempDir('cronlock-argtypes');
        ini_set('cronlock.lock_dir', $this->dir);
        set_error_handler(function (int $level, string $message): bool {
            if ($level === E_DEPRECATED || $level === E_USER_DEPRECATED) {
                $this->deprecations[] = $message;
                return true;
            }
            return false;
        });
    }

    protected function tearDown(): void
    {
        restore_error_handler();
        ini_restore('cronlock.lock_dir');
        $this->reapCommands();
        $this->removeTempDirs();
        parent::tearDown();
    }

    private static function typeError(callable $call): string
    {
        try {
            $call();
        } catch (\TypeError $e) {
            return $e->getMessage();
        }
        self::fail('no TypeError');
    }

    /** @return iterable<string, array{callable, string}> */
    public static function nonArrayOptions(): iterable
    {
        foreach (['null' => null, 'string' => 'abc', 'int' => 5, 'stdClass' => new \stdClass()] as $type => $value) {
            yield "cron_guard, $type" => [fn (string $dir) => cron_guard(fn () => 1, 'x', $value),
                "cron_guard(): Argument #3 (\$options) must be of type array, $type given"];
            yield "File, $type" => [fn (string $dir) => new \CronLock\File("$dir/f.lock", $value),
                "CronLock\\File::__construct(): Argument #2 (\$options) must be of type array, $type given"];
            yield "Redis, $type" => [fn (string $dir) => new \CronLock\Redis('redis://127.0.0.1:1', 'k', 1.0, $value),
                "CronLock\\Redis::__construct(): Argument #4 (\$options) must be of type array, $type given"];
        }
    }

    /** @dataProvider nonArrayOptions */
    public function testOptionsThatAreNoArrayAreTheEnginesTypeError(callable $call, string $expected): void
    {
        self::assertStringStartsWith($expected, self::typeError(fn () => $call($this->dir)));
    }

    public function testDatabaseOptionsThatAreNoArrayAreTheEnginesTypeError(): void
    {
        self::requireExtension();
        foreach (['null' => null, 'string' => 'abc'] as $type => $value) {
            self::assertSame(
                "CronLock\\Database::__construct(): Argument #3 (\$options) must be of type array, $type given",
                self::typeError(fn () => new \CronLock\Database('mysql:host=127.0.0.1', 'n', $value))
            );
        }
    }

    public function testCronGuardCoercesAScalarOrStringableLockToItsName(): void
    {
        $name = fn (\CronLock\Guard $g) => basename($g->lock()->path());
        self::assertSame('42.lock', cron_guard($name, 42));
        self::assertSame('nightly.lock', cron_guard($name, new StringableName('nightly')));
        self::assertSame('1.5.lock', cron_guard($name, 1.5));
        self::assertSame([], $this->deprecations);
    }

    public function testCronGuardRefusesALockOfAnotherType(): void
    {
        foreach (['array' => [], 'stdClass' => new \stdClass()] as $type => $value) {
            self::assertSame(
                "cron_guard(): Argument #2 (\$lock) must be of type CronLock\\Lock|string|null, $type given",
                self::typeError(fn () => cron_guard(fn () => 1, $value))
            );
        }
    }

    public function testRedisCoercesADsnToAStringAndDeprecatesNull(): void
    {
        // coerced, then refused as a DSN: the ValueError of a bad string
        foreach ([6379, new StringableName('nightly'), null] as $dsn) {
            try {
                new \CronLock\Redis($dsn, 'k');
                self::fail('not a DSN');
            } catch (\ValueError $e) {
                self::assertStringStartsWith('$dsn must look like redis://', $e->getMessage());
            }
        }
        self::assertSame(
            ['CronLock\Redis::__construct(): Passing null to parameter #1 ($dsn) of type array|string is deprecated'],
            $this->deprecations
        );
        self::assertSame(
            'CronLock\Redis::__construct(): Argument #1 ($dsn) must be of type array|string, stdClass given',
            self::typeError(fn () => new \CronLock\Redis(new \stdClass(), 'k'))
        );
    }

    public function testDatabaseCoercesAConnectionToADsnAndDeprecatesNull(): void
    {
        self::requireExtension();
        foreach ([42, new StringableName('nightly'), null] as $connection) {
            try {
                new \CronLock\Database($connection, 'n');
                self::fail('not a DSN');
            } catch (\ValueError $e) {
                self::assertStringStartsWith('$connection must be a PDO or a PDO DSN', $e->getMessage());
            }
        }
        self::assertSame(
            ['CronLock\Database::__construct(): Passing null to parameter #1 ($connection) of type PDO|string is deprecated'],
            $this->deprecations
        );
        self::assertSame(
            'CronLock\Database::__construct(): Argument #1 ($connection) must be of type PDO|string, stdClass given',
            self::typeError(fn () => new \CronLock\Database(new \stdClass(), 'n'))
        );
    }

    public function testUnserializeOfSomethingElseThanAnArrayIsATypeError(): void
    {
        $lock = new \CronLock\File("$this->dir/u.lock");
        self::assertStringStartsWith(
            'CronLock\File::__unserialize(): Argument #1 ($data) must be of type array, string given',
            self::typeError(fn () => $lock->__unserialize('x'))
        );
    }

    public function testStrictTypesRefusesEveryCoercion(): void
    {
        self::requireExtension();
        $script = "$this->dir/strict.php";
        file_put_contents($script, '<?php declare(strict_types=1);
            class Name { function __toString(): string { return "nightly"; } }
            ini_set("cronlock.lock_dir", $argv[1]);
            $calls = [
                fn () => cron_guard(fn () => 1, 42),
                fn () => cron_guard(fn () => 1, new Name()),
                fn () => cron_guard(fn () => 1, "x", null),
                fn () => new CronLock\Redis(6379, "k"),
                fn () => new CronLock\Redis(null, "k"),
                fn () => new CronLock\Database(new Name(), "n"),
            ];
            foreach ($calls as $call) {
                try { $call(); echo "accepted\n"; } catch (TypeError $e) { echo $e->getMessage(), "\n"; }
            }
        ');
        [$code, $out, $err] = $this->runCommand([...self::phpCommand(), $script, $this->dir]);
        self::assertSame(0, $code, $out . $err);
        self::assertSame(
            'cron_guard(): Argument #2 ($lock) must be of type CronLock\Lock|string|null, int given' . "\n"
            . 'cron_guard(): Argument #2 ($lock) must be of type CronLock\Lock|string|null, Name given' . "\n"
            . 'cron_guard(): Argument #3 ($options) must be of type array, null given' . "\n"
            . 'CronLock\Redis::__construct(): Argument #1 ($dsn) must be of type array|string, int given' . "\n"
            . 'CronLock\Redis::__construct(): Argument #1 ($dsn) must be of type array|string, null given' . "\n"
            . 'CronLock\Database::__construct(): Argument #1 ($connection) must be of type PDO|string, Name given' . "\n",
            $out
        );
    }

    private static function requireExtension(): void
    {
        if (!extension_loaded('cronlock')) {
            self::markTestSkipped('the extension only: cronlock/polyfill has no CronLock\Database and cannot see strict_types');
        }
    }
}

final class StringableName
{
    public function __construct(private string $name)
    {
    }

    public function __toString(): string
    {
        return $this->name;
    }
}

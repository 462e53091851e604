<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\Tests\Support\FileTestHelpers;
use PHPUnit\Framework\TestCase;

/**
 * cronlock behaves like any internal extension of the PHP it runs on:
 * arguments parsed by PHP's rules for internal functions (weak mode and
 * strict_types), #[\SensitiveParameter] on secrets, php --ri naming the PHP
 * it was built for. Each scenario runs in a child PHP, most with PHP's
 * compiled-in defaults (php -n), as container images run it.
 *
 * @group extension-only
 * Checks how the extension parses its arguments and what `php --ri` shows; cronlock/polyfill's
 * signatures are userland ones, checked at run time on PHP 7.
 */
final class PhpRulesTest extends TestCase
{
    use FileTestHelpers;

    private string $dir;

    protected function setUp(): void
    {
        $this->dir = $this->makeTempDir('cronlock-rules');
    }

    protected function tearDown(): void
    {
        $this->reapCommands();
        $this->removeTempDirs();
        parent::tearDown();
    }

    /** The loaded cronlock.so, found wherever the suite's runner loaded it from. */
    private static function extensionPath(): string
    {
        $ext = (string) getenv('CRONLOCK_EXT');
        if ($ext === '') {
            foreach (explode(',', (string) php_ini_scanned_files()) as $ini) {
                $text = (string) @file_get_contents(trim($ini));
                if (preg_match('/^\s*extension\s*=\s*"?([^"\s]*cronlock[^"\s]*)"?/m', $text, $m)) {
                    $ext = $m[1];
                }
            }
        }
        if ($ext === '') {
            $command = self::phpCommand();
            $ext = substr((string) end($command), strlen('extension='));
        }
        self::assertFileExists($ext, 'the cronlock.so this suite runs with');
        return $ext;
    }

    /**
     * Runs $code in `php -n` (PHP's compiled-in defaults) with cronlock.
     *
     * @return array{int, string, string} exit code, stdout, stderr
     */
    private function runDefaults(string $code, array $ini = []): array
    {
        $cmd = [PHP_BINARY, '-n', '-d', 'extension=' . self::extensionPath(), '-d', 'display_errors=stderr'];
        foreach ($ini as $name => $value) {
            array_push($cmd, '-d', "$name=$value");
        }
        $file = $this->dir . '/script-' . bin2hex(random_bytes(4)) . '.php';
        file_put_contents($file, $code);
        return $this->runCommand([...$cmd, $file]);
    }

    // ------------------------------------------------------------ secrets

    public function testAnUncaughtExceptionFromTheRedisConstructorNeverShowsThePassword(): void
    {
        if (PHP_VERSION_ID < 80200) {
            self::markTestSkipped('#[\SensitiveParameter] exists from PHP 8.2');
        }
        // '' is refused: the constructor throws with the DSN in its frame
        [$code, $out, $err] = $this->runDefaults('<?php
            new CronLock\Redis("redis://:Hunter2-Secret@127.0.0.1:1/0", "");
        ');
        self::assertSame(255, $code, $out . $err);
        self::assertStringContainsString('Uncaught ValueError', $err);
        self::assertStringContainsString('CronLock\Redis->__construct(Object(SensitiveParameterValue), \'\')', $err);
        self::assertStringNotContainsString('Hunt', $err, 'no prefix of the password in the trace');

        $attributes = (new \ReflectionMethod(\CronLock\Redis::class, '__construct'))->getParameters()[0]->getAttributes();
        self::assertSame(['SensitiveParameter'], array_map(fn ($a) => $a->getName(), $attributes));
    }

    public function testTheRedisDsnAndOptionsAreTheOnlySensitiveParameters(): void
    {
        $sensitive = [];
        foreach (['CronLock\File', 'CronLock\Redis', 'CronLock\Guard'] as $class) {
            foreach ((new \ReflectionClass($class))->getMethods() as $method) {
                foreach ($method->getParameters() as $param) {
                    if ($param->getAttributes() !== []) {
                        $sensitive[] = "$class::{$method->getName()}(\${$param->getName()})";
                    }
                }
            }
        }
        // $options may hold 'sentinel_password'.
        $expected = ['CronLock\Redis::__construct($dsn)', 'CronLock\Redis::__construct($options)'];
        self::assertSame(PHP_VERSION_ID >= 80200 ? $expected : [], $sensitive);
    }

    // ------------------------------------------------------------ php --ri

    public function testPhpRiNamesThePhpItWasBuiltFor(): void
    {
        [$code, $out, $err] = $this->runCommand([PHP_BINARY, '-n', '-d', 'extension=' . self::extensionPath(), '--ri', 'cronlock']);
        self::assertSame(0, $code, $err);
        [, $info] = $this->runCommand([PHP_BINARY, '-n', '-i']);
        self::assertSame(1, preg_match('/^PHP API => (\d+)$/m', $info, $m), 'php -i shows the PHP API');
        $api = $m[1];
        $zts = PHP_ZTS ? 'ZTS' : 'NTS';
        self::assertMatchesRegularExpression(
            '/^built for => PHP ' . preg_quote(PHP_VERSION, '/') . ', PHP API ' . $api . ', ' . $zts . '$/m',
            $out,
            "php --ri must name PHP $api ($zts)"
        );
    }

    // ------------------------------------------------------------ weak mode

    public function testWeakModeCoercesScalarArgumentsAsInternalFunctionsDo(): void
    {
        $lock = $this->dir . '/weak.lock';
        [$code, $out, $err] = $this->runDefaults('<?php
            $lock = new CronLock\File(' . var_export($lock, true) . ');
            echo json_encode([
                "numeric string" => $lock->acquire("1.5"),
                "release" => $lock->release(),
                "int" => $lock->acquire(0),
                "release 2" => $lock->release(),
                "bool" => $lock->acquire(false),
                "release 3" => $lock->release(),
                "leading space" => $lock->acquire(" 0"),
                "release 4" => $lock->release(),
                "renew ttl string" => $lock->renew("10"),
            ]), "\n";
            foreach (["abc", [], new stdClass()] as $bad) {
                try {
                    $lock->acquire($bad);
                    echo "accepted\n";
                } catch (TypeError $e) {
                    echo get_class($e), ": ", $e->getMessage(), "\n";
                }
            }
            // an int path is the string "42" in weak mode, as for fopen()
            chdir(' . var_export($this->dir, true) . ');
            echo (new CronLock\File(42))->path() === realpath(".") . "/42" || (new CronLock\File(42))->path() === "42" ? "int path ok\n" : "int path wrong\n";
            echo json_encode(cron_guard(fn () => "ran", 42, ["wait" => 0])), "\n";
        ', ['cronlock.lock_dir' => $this->dir]);
        self::assertSame(0, $code, $out . $err);
        self::assertSame('', $err, 'no warning, no deprecation for valid numeric input');
        $lines = explode("\n", trim($out));
        self::assertSame([
            'numeric string' => true,
            'release' => true,
            'int' => true,
            'release 2' => true,
            'bool' => true,
            'release 3' => true,
            'leading space' => true,
            'release 4' => true,
            'renew ttl string' => false,
        ], json_decode($lines[0], true));
        self::assertSame([
            'TypeError: CronLock\File::acquire(): Argument #1 ($timeout) must be of type float, string given',
            'TypeError: CronLock\File::acquire(): Argument #1 ($timeout) must be of type float, array given',
            'TypeError: CronLock\File::acquire(): Argument #1 ($timeout) must be of type float, stdClass given',
            'int path ok',
            '"ran"',
        ], array_slice($lines, 1));
        self::assertFileExists($this->dir . '/42.lock', 'cron_guard($job, 42) is the named lock "42"');
    }

    public function testWeakModeNullToANonNullableParameterIsTheVersionsDeprecation(): void
    {
        [$code, $out, $err] = $this->runDefaults('<?php
            $lock = new CronLock\File(' . var_export($this->dir . '/null.lock', true) . ');
            var_dump($lock->acquire(null));
            var_dump($lock->renew(null));
        ', ['error_reporting' => (string) E_ALL]);
        self::assertSame(0, $code, $out . $err);
        self::assertSame("bool(true)\nbool(true)\n", $out);
        self::assertStringContainsString(
            'Deprecated: CronLock\File::acquire(): Passing null to parameter #1 ($timeout) of type float is deprecated',
            $err
        );
        self::assertSame(1, substr_count($err, 'Deprecated:'), '?float $ttl takes null silently: ' . $err);
    }

    public function testWeakModeStringsFromIntsForRedisArguments(): void
    {
        [$code, $out, $err] = $this->runDefaults('<?php
            $lock = new CronLock\Redis("redis://127.0.0.1:1", 12345, "2.5");
            echo $lock->key(), "\n";
            try {
                new CronLock\Redis("redis://127.0.0.1:1", "k", "soon");
            } catch (TypeError $e) {
                echo $e->getMessage(), "\n";
            }
        ');
        self::assertSame(0, $code, $out . $err);
        self::assertSame(
            "12345\nCronLock\\Redis::__construct(): Argument #3 (\$ttl) must be of type ?float, string given\n",
            $out
        );
    }

    // ------------------------------------------------------------ strict_types

    public function testStrictTypesRefusesWhatWeakModeCoerces(): void
    {
        [$code, $out, $err] = $this->runDefaults('<?php
            declare(strict_types=1);
            $lock = new CronLock\File(' . var_export($this->dir . '/strict.lock', true) . ');
            $calls = [
                "acquire numeric string" => fn () => $lock->acquire("1.5"),
                "acquire null" => fn () => $lock->acquire(null),
                "renew string" => fn () => $lock->renew("10"),
                "int path" => fn () => new CronLock\File(42),
                "redis int key" => fn () => new CronLock\Redis("redis://127.0.0.1:1", 12345),
                "redis string ttl" => fn () => new CronLock\Redis("redis://127.0.0.1:1", "k", "2.5"),
                "cron_guard int lock" => fn () => cron_guard(fn () => 1, 42),
            ];
            foreach ($calls as $what => $call) {
                try {
                    $call();
                    echo "$what: accepted\n";
                } catch (TypeError $e) {
                    echo "$what: ", $e->getMessage(), "\n";
                }
            }
            // int to float is allowed even in strict mode
            var_dump($lock->acquire(0), $lock->release());
        ', ['cronlock.lock_dir' => $this->dir]);
        self::assertSame(0, $code, $out . $err);
        self::assertSame(
            'acquire numeric string: CronLock\File::acquire(): Argument #1 ($timeout) must be of type float, string given' . "\n"
            . 'acquire null: CronLock\File::acquire(): Argument #1 ($timeout) must be of type float, null given' . "\n"
            . 'renew string: CronLock\File::renew(): Argument #1 ($ttl) must be of type ?float, string given' . "\n"
            . 'int path: CronLock\File::__construct(): Argument #1 ($path) must be of type string, int given' . "\n"
            . 'redis int key: CronLock\Redis::__construct(): Argument #2 ($key) must be of type string, int given' . "\n"
            . 'redis string ttl: CronLock\Redis::__construct(): Argument #3 ($ttl) must be of type ?float, string given' . "\n"
            . 'cron_guard int lock: cron_guard(): Argument #2 ($lock) must be of type CronLock\Lock|string|null, int given' . "\n"
            . "bool(true)\nbool(true)\n",
            $out
        );
    }

    public function testAJobThatIsNotCallableIsTheEnginesTypeError(): void
    {
        foreach (['', 'declare(strict_types=1);'] as $mode) {
            [$code, $out, $err] = $this->runDefaults('<?php ' . $mode . '
                foreach (["no_such_function", 5, ["NoSuchClass", "run"]] as $job) {
                    try {
                        cron_guard($job, "job");
                        echo "accepted\n";
                    } catch (TypeError $e) {
                        echo $e->getMessage(), "\n";
                    }
                }
            ', ['cronlock.lock_dir' => $this->dir]);
            self::assertSame(0, $code, $out . $err);
            self::assertSame(
                'cron_guard(): Argument #1 ($job) must be a valid callback, function "no_such_function" not found or invalid function name' . "\n"
                . 'cron_guard(): Argument #1 ($job) must be a valid callback, no array or string given' . "\n"
                . 'cron_guard(): Argument #1 ($job) must be a valid callback, class "NoSuchClass" not found' . "\n",
                $out,
                $mode ?: 'weak mode'
            );
        }
    }

    public function testOptionValuesStayStrictInBothModes(): void
    {
        foreach (['', 'declare(strict_types=1);'] as $mode) {
            [$code, $out, $err] = $this->runDefaults('<?php ' . $mode . '
                try {
                    new CronLock\File(' . var_export($this->dir . '/opt.lock', true) . ', ["mode" => "0600"]);
                    echo "accepted\n";
                } catch (TypeError $e) {
                    echo $e->getMessage(), "\n";
                }
            ');
            self::assertSame(0, $code, $out . $err);
            self::assertSame("\$options['mode'] must be of type ?int, string given\n", $out, $mode ?: 'weak mode');
        }
    }

    // ------------------------------------------------------------ ini settings

    /**
     * Every cronlock.* setting works like any PHP ini: ini_set() changes it,
     * ini_restore() puts back the value the process started with, and the
     * code that reads it sees that value.
     */
    public function testIniRestorePutsEveryCronlockSettingBack(): void
    {
        mkdir($this->dir . '/started', 0700);
        mkdir($this->dir . '/changed', 0700);
        [$code, $out, $err] = $this->runDefaults('<?php
            $names = array_keys(ini_get_all("cronlock"));
            echo json_encode($names), "\n";
            foreach ($names as $name) {
                $started = ini_get($name);
                ini_set($name, ' . var_export($this->dir . '/changed', true) . ');
                $changed = ini_get($name);
                ini_restore($name);
                printf("%s %s %s\n", $name, var_export($changed !== $started, true), var_export(ini_get($name) === $started, true));
            }
            ini_set("cronlock.lock_dir", ' . var_export($this->dir . '/changed', true) . ');
            ini_restore("cronlock.lock_dir");
            echo cron_guard(fn () => "ran", "restored"), "\n";
        ', ['cronlock.lock_dir' => $this->dir . '/started']);
        self::assertSame(0, $code, $out . $err);
        self::assertSame("[\"cronlock.lock_dir\",\"cronlock.log\",\"cronlock.record\",\"cronlock.record_format\"]\n"
            . "cronlock.lock_dir true true\ncronlock.log true true\ncronlock.record true true\ncronlock.record_format true true\nran\n", $out, $err);
        self::assertFileExists($this->dir . '/started/restored.lock', 'cron_guard() uses the restored directory');
        self::assertFileDoesNotExist($this->dir . '/changed/restored.lock');
    }
}

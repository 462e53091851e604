<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\ConnectionException;
use CronLock\Redis;
use CronLock\Tests\Support\FileTestHelpers;
use CronLock\Tests\Support\RedisServer;
use CronLock\Tests\Support\RedisTestHelpers;
use CronLock\Tests\Support\RedisTopology;
use CronLock\Tests\Support\WebAssembly;
use PHPUnit\Framework\TestCase;

/**
 * Every option the stub documents (the `array{...}` shapes of its `@param
 * ... $options` tags, for each class and cron_guard()) works in both
 * implementations: the extension accepts each with a valid value, and so
 * does cronlock/polyfill, or it refuses it with its "needs the cronlock
 * extension" LockException (as for Redlock lists), which the README's list
 * of polyfill differences names. The keys are read from the stub, so an
 * option added there but not to an implementation fails here. The
 * extension's list of known keys must be the stub's too (decision D25).
 *
 * And what the polyfill now does with 'replicas' (WAIT after the acquire
 * script, the key given back when too few replicas acknowledged it), against
 * a master with one replica of our own.
 */
final class DocumentedOptionsTest extends TestCase
{
    use FileTestHelpers;
    use RedisTestHelpers;

    /** The polyfill's words for what only the extension has ("a list of DSNs (Redlock) needs …", "redis-sentinel:// DSNs need …"). */
    private const NEEDS_EXTENSION = '/\bneeds? the cronlock extension\b/';

    protected function tearDown(): void
    {
        $this->reapCommands();
        $this->removeTempDirs();
        parent::tearDown();
    }

    /**
     * The documented option keys of each class constructor and function that
     * takes $options, with the type the shape gives each, from the stub.
     *
     * @return array<string, array<string, string>> 'CronLock\File' or 'cron_guard' => key => type
     */
    private static function documentedOptions(): array
    {
        $tokens = token_get_all((string) file_get_contents(dirname(__DIR__) . '/stubs/cronlock.stub.php'));
        $found = [];
        $doc = null;
        $class = null;
        $classDepth = null;
        $depth = 0;
        foreach ($tokens as $i => $t) {
            if ($t === '{' || (is_array($t) && in_array($t[0], [T_CURLY_OPEN, T_DOLLAR_OPEN_CURLY_BRACES], true))) {
                $depth++;
            } elseif ($t === '}') {
                $depth--;
                if ($classDepth !== null && $depth === $classDepth) {
                    [$class, $classDepth] = [null, null];
                }
            } elseif (is_array($t) && $t[0] === T_DOC_COMMENT) {
                $doc = $t[1];
            } elseif (is_array($t) && $t[0] === T_CLASS) {
                for ($j = $i + 1; is_array($tokens[$j]) && $tokens[$j][0] !== T_STRING; $j++) {
                }
                [$class, $classDepth] = ['CronLock\\' . $tokens[$j][1], $depth];
            } elseif (is_array($t) && $t[0] === T_FUNCTION) {
                for ($j = $i + 1; is_array($tokens[$j]) && $tokens[$j][0] !== T_STRING; $j++) {
                }
                $function = $tokens[$j][1];
                if ($doc !== null && preg_match('/@param\s+array\{(.*?)\}\s+\$options/s', $doc, $m)) {
                    $target = $class === null ? $function : ($function === '__construct' ? $class : "$class::$function");
                    // "key?: type" at the top level of the shape (types may hold "<int, mixed>")
                    preg_match_all('/(?:^|,)\s*([a-z_]+)\??:\s*((?:[^,<]|<[^>]*>)+)/', $m[1], $keys, PREG_SET_ORDER);
                    foreach ($keys as [, $key, $type]) {
                        $found[$target][$key] = trim($type);
                    }
                }
                $doc = null;
            }
        }
        return $found;
    }

    /** PHP source of a valid value of $type for $key (a value the extension must accept). */
    private static function validValue(string $target, string $key, string $type): string
    {
        $chosen = [
            'CronLock\File' => ['mode' => '0644'],
            'CronLock\Redis' => ['replicas' => '0'], // the documented default (issue 17)
            'cron_guard' => ['on_busy' => '3', 'once_per' => '60.0', 'on_stale' => '3', 'on_lost' => "'throw'",
                'log' => "'none'", 'record' => "'runs'", 'record_format' => "'json'", 'logger' => 'function () {}'],
        ];
        if (isset($chosen[$target][$key])) {
            return $chosen[$target][$key];
        }
        $byType = ['bool' => 'true', 'float' => '2.5', 'int' => '1', 'int|null' => '3', 'string' => "'cron'",
            'string|null' => "'cron'", 'array<int, mixed>' => '[\PDO::ATTR_TIMEOUT => 1]'];
        self::assertArrayHasKey($type, $byType, "no valid value known for type '$type' of $target's '$key': add one here");
        return $byType[$type];
    }

    /** PHP that calls $target with $options (PHP source), in the directory $dir, with our Redis at $dsn. */
    private static function call(string $target, string $key, string $options, string $dir, string $dsn, string $sentinelDsn): string
    {
        $e = static fn (string $s): string => var_export($s, true);
        switch ($target) {
            case 'CronLock\File':
                return 'new CronLock\File(' . $e("$dir/options.lock") . ", $options)";
            case 'CronLock\Redis':
                // the sentinels' credentials apply to a Sentinel DSN only (else a \ValueError)
                return 'new CronLock\Redis(' . $e(strpos($key, 'sentinel_') === 0 ? $sentinelDsn : $dsn) . ", 'options', 60.0, $options)";
            case 'CronLock\Database':
                return "new CronLock\\Database('mysql:host=127.0.0.1;port=1', 'options', $options)"; // connects at acquire()
            case 'cron_guard':
                // once_per needs a lock with a TTL to leave behind: Redis
                $lock = $key === 'once_per' ? 'new CronLock\Redis(' . $e($dsn) . ", 'options:once-per-' . getmypid(), 5.0)" : "'options'";
                return "cron_guard(function () { return 'ran'; }, $lock, $options)";
        }
        self::fail("no call known for $target: add one here");
    }

    /**
     * Runs every case in one child of $impl; returns each case's outcome:
     * "accepted", "ValueError: …" and so on.
     *
     * @param array<string, string> $cases name => PHP expression
     * @return array<string, string>
     */
    private function outcomes(string $impl, array $cases, string $dir): array
    {
        $script = "$dir/options-$impl.php";
        $code = "<?php\nputenv('CRONLOCK_LOCK_DIR=$dir'); ini_set('cronlock.lock_dir', '$dir');\n\$cases = [\n";
        foreach ($cases as $name => $expression) {
            $code .= var_export($name, true) . " => function () { return $expression; },\n";
        }
        $code .= <<<'PHP'
            ];
            foreach ($cases as $name => $case) {
                try {
                    $case();
                    $said = 'accepted';
                } catch (\Throwable $e) {
                    $said = get_class($e) . ': ' . $e->getMessage();
                }
                echo json_encode([$name, $said]), "\n";
            }
            PHP;
        file_put_contents($script, $code);
        $env = array_filter(getenv(), static fn (string $k): bool => !in_array($k, ['PHP_INI_SCAN_DIR', 'CRONLOCK_LOCK_DIR'], true), ARRAY_FILTER_USE_KEY);
        // the polyfill run's own prepend file, where it has one: it loads predis when the run uses it
        $polyfill = (string) getenv('CRONLOCK_POLYFILL') ?: dirname(__DIR__) . '/polyfill/bootstrap.php';
        $php = $impl === 'extension'
            ? [PHP_BINARY, '-d', 'extension=' . self::extensionPath()]
            : [PHP_BINARY, '-d', "auto_prepend_file=$polyfill"];
        [$code, $out, $err] = $this->runCommand([...$php, $script], 30.0, $env);
        self::assertSame(0, $code, "$impl: $out $err");
        $said = [];
        foreach (explode("\n", trim($out)) as $line) {
            [$name, $outcome] = json_decode($line, true);
            $said[$name] = $outcome;
        }
        return $said;
    }

    /** @return list<string> the implementations at hand: the polyfill, and the extension when built for this PHP */
    private static function implementations(): array
    {
        $extension = PHP_VERSION_ID >= 80100 && !WebAssembly::active() && is_file(self::extensionPath());
        return $extension ? ['extension', 'polyfill'] : ['polyfill'];
    }

    public function testTheStubDocumentsOptionsForEachClassAndCronGuard(): void
    {
        self::assertSame(['CronLock\File', 'CronLock\Redis', 'CronLock\Database', 'cron_guard'], array_keys(self::documentedOptions()));
        self::assertSame(['auto_renew', 'connect_timeout', 'read_timeout', 'replicas', 'sentinel_password', 'sentinel_user'],
            array_keys(self::documentedOptions()['CronLock\Redis']));
    }

    public function testEveryDocumentedOptionIsAcceptedOrRefusedAsNeedingTheExtension(): void
    {
        $dir = $this->makeTempDir('options');
        $sentinelDsn = 'redis-sentinel://127.0.0.1:' . self::$server->port() . '/mymaster'; // not asked until acquire()
        $cases = [];
        foreach (self::documentedOptions() as $target => $keys) {
            foreach ($keys as $key => $type) {
                // an option that is valid only with another one gets that one too
                $with = $target === 'CronLock\Redis' && $key === 'sentinel_user' ? ", 'sentinel_password' => 'cron'" : '';
                $options = '[' . var_export($key, true) . ' => ' . self::validValue($target, $key, $type) . "$with]";
                $cases["$target '$key'"] = self::call($target, $key, $options, $dir, self::$server->dsn(), $sentinelDsn);
            }
            $cases["$target, an unknown key"] = self::call($target, '', "['no_such_option' => 1]", $dir, self::$server->dsn(), $sentinelDsn);
        }
        $unchecked = null;
        foreach (self::implementations() as $impl) {
            $said = $this->outcomes($impl, $cases, $dir);
            foreach (self::documentedOptions() as $target => $keys) {
                foreach (array_keys($keys) as $key) {
                    $outcome = $said["$target '$key'"] ?? 'no answer';
                    if ($impl === 'polyfill' && $key === 'once_per' && ($missing = RedisServer::polyfillClientMissing()) !== null) {
                        $unchecked = "the polyfill's cron_guard 'once_per' (on a CronLock\\Redis) is not checked: $missing";
                        continue;
                    }
                    if ($impl === 'extension' || $outcome === 'accepted') {
                        self::assertSame('accepted', $outcome, "$impl: $target with '$key'");
                    } else {
                        self::assertStringStartsWith('CronLock\LockException: ', $outcome, "polyfill: $target with '$key'");
                        self::assertMatchesRegularExpression(self::NEEDS_EXTENSION, $outcome, "polyfill: $target with '$key' is refused, but not as needing the extension");
                    }
                }
                $unknown = $said["$target, an unknown key"] ?? 'no answer';
                if ($impl === 'polyfill' && preg_match(self::NEEDS_EXTENSION, $unknown) === 1) {
                    continue; // CronLock\Database: the whole class needs the extension
                }
                self::assertSame("ValueError: \$options has an unknown key 'no_such_option' (known: " . implode(', ', array_keys($keys)) . ')',
                    $unknown, "$impl knows exactly the keys the stub documents for $target");
            }
        }
        if ($unchecked !== null) {
            self::markTestSkipped($unchecked);
        }
    }

    // ----------------------------------------------------------- 'replicas'

    /**
     * 'replicas' => 1 on a master with one replica: acquire() is true once
     * the replica acknowledged the key; 'replicas' => 2 there: the key is
     * given back and ConnectionException thrown, by acquire(0) at once and by
     * a wait once its deadline passed (it rode the failure out till then).
     */
    public function testReplicasCountsAnAcquireOnceThatManyReplicasAcknowledgedIt(): void
    {
        $topology = RedisTopology::sentinel(1);
        try {
            $master = $topology->servers[0];
            $key = 'options:replicas:' . getmypid();
            // generous read_timeout (the WAIT gets 4/5): about the contract, not the replica's speed
            $lock = new Redis($master->dsn(), $key, 30.0, ['replicas' => 1, 'read_timeout' => 5.0]);
            self::assertTrue($lock->acquire(0));
            self::assertSame($lock->token(), $master->command('GET', $key));
            self::assertTrue($lock->release());

            // the WAIT runs its whole 2 s; the socket waits 2.5 s for its reply, room enough under load
            $greedy = new Redis($master->dsn(), $key, 30.0, ['replicas' => 2, 'read_timeout' => 2.5]);
            $given = "redis key '$key' at 127.0.0.1:{$master->port()} was taken, but only 1 of the 2 replicas asked for acknowledged it within 2000 ms; it was given back";
            foreach ([0.0, 1.0] as $timeout) {
                try {
                    $greedy->acquire($timeout);
                    self::fail("acquire($timeout) with too few replicas must throw");
                } catch (ConnectionException $e) {
                    self::assertSame($given, $e->getMessage(), "acquire($timeout)");
                }
                self::assertFalse($greedy->isHeld());
                self::assertNull($master->command('GET', $key), 'the key was given back');
            }
        } finally {
            $topology->stop();
        }
    }

    public function testReplicasIsANumberFrom0To1000(): void
    {
        foreach ([-1, 1001] as $bad) {
            try {
                new Redis(self::$server->dsn(), 'k', 5.0, ['replicas' => $bad]);
                self::fail("'replicas' => $bad was accepted");
            } catch (\ValueError $e) {
                self::assertSame("\$options['replicas'] must be a number of replicas from 0 to 1000", $e->getMessage());
            }
        }
    }

    /** Without a Sentinel DSN the sentinels' credentials are a \ValueError in both (the polyfill has no Sentinel DSNs). */
    public function testSentinelCredentialsWithoutASentinelDsnAreAValueError(): void
    {
        $cases = [
            "\$options['sentinel_password'] applies to a redis-sentinel:// or rediss-sentinel:// DSN only" => ['sentinel_password' => 'pw'],
            "\$options['sentinel_user'] needs 'sentinel_password' too (AUTH takes a user and a password)" => ['sentinel_user' => 'u'],
            "\$options['sentinel_password'] must not be empty (leave it out when the sentinels need no password)" => ['sentinel_password' => ''],
            "\$options['sentinel_user'] must not be empty (leave it out for the default user)" => ['sentinel_password' => 'pw', 'sentinel_user' => ''],
        ];
        foreach ($cases as $message => $options) {
            try {
                new Redis(self::$server->dsn(), 'k', 5.0, $options);
                self::fail('accepted: ' . json_encode($options));
            } catch (\ValueError $e) {
                self::assertSame($message, $e->getMessage());
                self::assertStringNotContainsString('pw', $e->getMessage(), 'never the value');
            }
        }
    }
}

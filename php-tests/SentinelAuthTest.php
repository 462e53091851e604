<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\ConnectionException;
use CronLock\Redis;
use CronLock\Tests\Support\RedisServer;
use CronLock\Tests\Support\RedisTopology;
use PHPUnit\Framework\TestCase;

/**
 * Sentinels that require authentication (requirepass on the default user,
 * or an ACL user): the DSN's credentials are the master's, and
 * 'sentinel_password' / 'sentinel_user' are the sentinels'. The passwords
 * never show in a message or a trace.
 *
 * @group extension-only
 * cronlock/polyfill talks to one Redis server only (no Sentinel).
 */
final class SentinelAuthTest extends TestCase
{
    private const DEFAULT_PASSWORD = 'Sentinel-Secret-2';
    private const WATCHER = 'watcher';
    private const WATCHER_PASSWORD = 'Watcher-Secret-1';

    private static ?RedisTopology $topology = null;

    public static function setUpBeforeClass(): void
    {
        RedisServer::requireVersion('6.2', 'ACL on sentinels');
        self::$topology = RedisTopology::sentinel(0);
        foreach (self::$topology->sentinels as $sentinel) {
            $sentinel->command('ACL', 'SETUSER', self::WATCHER, 'on', '>' . self::WATCHER_PASSWORD, '+@all');
            // Last: this very connection stays authenticated as default.
            $sentinel->command('ACL', 'SETUSER', 'default', 'resetpass', '>' . self::DEFAULT_PASSWORD);
        }
    }

    public static function tearDownAfterClass(): void
    {
        self::$topology?->stop();
        self::$topology = null;
    }

    private function lock(array $options = [], float $ttl = 5.0): Redis
    {
        return new Redis(self::$topology->dsn(), 'auth-' . bin2hex(random_bytes(4)), $ttl, $options);
    }

    public function testSentinelsThatRequireAPasswordAreAskedWithSentinelPassword(): void
    {
        try {
            $this->lock()->acquire(0);
            self::fail('sentinels that require a password refuse a client without one');
        } catch (ConnectionException $e) {
            self::assertStringContainsString('no sentinel named', $e->getMessage());
            self::assertStringContainsString("it requires a password: give the sentinels' password as \$options['sentinel_password']", $e->getMessage());
        }
        // The DSN's password is the master's: the sentinels' refusal must not blame the DSN.
        $withPassword = str_replace('redis-sentinel://', 'redis-sentinel://:' . self::DEFAULT_PASSWORD . '@', self::$topology->dsn());
        try {
            (new Redis($withPassword, 'auth-dsn', 5.0))->acquire(0);
            self::fail('the DSN password is not sent to the sentinels');
        } catch (ConnectionException $e) {
            self::assertStringContainsString("\$options['sentinel_password']", $e->getMessage());
            self::assertStringNotContainsString('the DSN has none', $e->getMessage());
            self::assertStringNotContainsString(self::DEFAULT_PASSWORD, $e->getMessage());
        }

        $lock = $this->lock(['sentinel_password' => self::DEFAULT_PASSWORD]);
        self::assertTrue($lock->acquire(0));
        self::assertSame($lock->token(), self::$topology->servers[0]->command('GET', $lock->key()));
        self::assertTrue($lock->renew());
        self::assertTrue($lock->release());
    }

    public function testAnAclUserAuthenticatesWithSentinelUser(): void
    {
        $lock = $this->lock(['sentinel_user' => self::WATCHER, 'sentinel_password' => self::WATCHER_PASSWORD]);
        self::assertTrue($lock->acquire(1.0));
        self::assertTrue($lock->release());

        $wrong = $this->lock(['sentinel_user' => self::WATCHER, 'sentinel_password' => self::DEFAULT_PASSWORD . '-wrong']);
        try {
            $wrong->acquire(0);
            self::fail('a wrong sentinel password is refused');
        } catch (ConnectionException $e) {
            self::assertStringContainsString("wrong \$options['sentinel_user'] or \$options['sentinel_password']", $e->getMessage());
            self::assertStringNotContainsString(self::DEFAULT_PASSWORD, $e->getMessage());
            self::assertStringNotContainsString('Sentinel-Secret', (string) $e);
        }
    }

    public function testTheAutoRenewThreadAuthenticatesToTheSentinelsToo(): void
    {
        $lock = $this->lock(['sentinel_password' => self::DEFAULT_PASSWORD, 'auto_renew' => true], 1.0);
        self::assertTrue($lock->acquire(0));
        // Three TTLs: without the sentinels the renewal thread cannot find
        // the master, and the key expires.
        usleep(3_000_000);
        self::assertTrue($lock->isHeld());
        self::assertSame($lock->token(), self::$topology->servers[0]->command('GET', $lock->key()));
        self::assertTrue($lock->release());
    }

    public function testTheMasterNameIsPercentDecodedAndBadSeedsAreSaidOnce(): void
    {
        $sentinels = substr(self::$topology->dsn(), 0, -strlen('/mymaster'));
        try {
            (new Redis("$sentinels/no%20such%20master", 'k', 1.0, ['sentinel_password' => self::DEFAULT_PASSWORD]))->acquire(0);
            self::fail('no sentinel knows that master');
        } catch (ConnectionException $e) {
            self::assertStringContainsString("master 'no such master' (sentinels ", $e->getMessage());
            self::assertStringContainsString('knows no master of that name', $e->getMessage());
        }
        foreach (['redis-cluster://127.0.0.1:7000,', 'redis-cluster://127.0.0.1:7000,,127.0.0.1:7001', 'redis-cluster://127.0.0.1:x'] as $dsn) {
            try {
                new Redis($dsn, 'k', 1.0);
                self::fail("$dsn: accepted");
            } catch (\ValueError $e) {
                self::assertSame(1, substr_count($e->getMessage(), '$dsn'), "$dsn: " . $e->getMessage());
            }
        }
        try {
            new Redis("$sentinels/my#master", 'k', 1.0);
            self::fail("'#' in the master name: accepted");
        } catch (\ValueError $e) {
            self::assertStringContainsString('#fragment', $e->getMessage());
        }
    }

    public function testTheSentinelOptionsAreCheckedAndNeverShownInATrace(): void
    {
        $cases = [
            'a plain DSN' => ['redis://127.0.0.1:1', ['sentinel_password' => 'Hunter3-Secret'], "\$options['sentinel_password'] applies to a redis-sentinel://"],
            'a user without password' => [self::$topology->dsn(), ['sentinel_user' => 'watcher'], "\$options['sentinel_user'] needs 'sentinel_password' too"],
            'an empty password' => [self::$topology->dsn(), ['sentinel_password' => ''], "\$options['sentinel_password'] must not be empty"],
        ];
        $previous = ini_set('zend.exception_ignore_args', '0');
        try {
            foreach ($cases as $case => [$dsn, $options, $message]) {
                try {
                    new Redis($dsn, 'k', 1.0, $options);
                    self::fail("$case: accepted");
                } catch (\ValueError $e) {
                    self::assertStringContainsString($message, $e->getMessage(), $case);
                    self::assertStringNotContainsString('Hunter3', $e->getMessage(), $case);
                    if (PHP_VERSION_ID >= 80200) {
                        $args = $e->getTrace()[0]['args'] ?? [];
                        self::assertCount(4, $args, $case);
                        self::assertInstanceOf(\SensitiveParameterValue::class, $args[3], "$case: \$options is hidden in traces");
                    }
                }
            }
        } finally {
            ini_set('zend.exception_ignore_args', (string) $previous);
        }
        $this->expectException(\TypeError::class);
        new Redis(self::$topology->dsn(), 'k', 1.0, ['sentinel_password' => 42]);
    }
}

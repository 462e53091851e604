<?php

declare(strict_types=1);

namespace CronLock\Tests\Support;

/**
 * A private redis-server (Support\RedisServer) for a whole test class: it is
 * started before the class's first test and stopped after its last, and is
 * self::$server in between. Plus what the Redis tests do with it: raw()
 * commands, and the PHP that builds a CronLock\Redis or talks to the server
 * in a child process.
 *
 * The server is started with classServerOptions(), which a class may
 * override (e.g. to listen on a unix socket too).
 */
trait RedisTestHelpers
{
    private static ?RedisServer $server = null;

    /** @return array<string, mixed> RedisServer::start() options for self::$server */
    protected static function classServerOptions(): array
    {
        return [];
    }

    public static function setUpBeforeClass(): void
    {
        parent::setUpBeforeClass();
        self::$server = RedisServer::start(static::classServerOptions());
    }

    public static function tearDownAfterClass(): void
    {
        if (self::$server !== null) {
            self::$server->stop();
        }
        self::$server = null;
        parent::tearDownAfterClass();
    }

    /** A command to self::$server over a plain RESP connection, independent of cronlock. */
    /** @return mixed */
    private static function raw(string ...$args)
    {
        return self::$server->command(...$args);
    }

    /**
     * PHP for a child: the expression `new \CronLock\Redis(...)` with these arguments.
     *
     * @param array<string, mixed> $options
     */
    private static function lockCode(string $dsn, string $key, float $ttl, array $options = []): string
    {
        return sprintf('new \CronLock\Redis(%s, %s, %s, %s)', var_export($dsn, true), var_export($key, true), var_export($ttl, true), var_export($options, true));
    }

    /** PHP for a child: $raw('CMD', ...) talks RESP to self::$server, for checks independent of cronlock. */
    private static function rawClientCode(): string
    {
        return sprintf(<<<'PHP'
            $raw = function (string ...$args) {
                static $conn = null;
                $conn ??= stream_socket_client('tcp://127.0.0.1:%d', $errno, $errstr, 5.0);
                stream_set_timeout($conn, 5);
                $out = '*' . count($args) . "\r\n";
                foreach ($args as $a) { $out .= '$' . strlen($a) . "\r\n$a\r\n"; }
                fwrite($conn, $out);
                $line = fgets($conn);
                if ($line[0] === '$') {
                    $len = (int) substr($line, 1);
                    return $len < 0 ? null : substr(fread($conn, $len + 2), 0, $len);
                }
                return rtrim(substr($line, 1));
            };
            PHP, self::$server->port()) . "\n";
    }
}

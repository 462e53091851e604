<?php

namespace CronLock\Cli\Redis;

use CronLock\Cli\Missing;
use CronLock\Cli\UsageError;

/**
 * One connection to one Redis node, read-only use: commands in, RESP
 * replies out (string, int, array, null). Through phpredis when loaded,
 * else predis when its classes load, else a small RESP client of our own
 * over PHP streams (so the extension's users need neither); `--redis-client`
 * picks one. Error replies throw ReplyError, a failed connection or read
 * \RuntimeException with the address and the reason (never the password).
 */
abstract class Connection
{
    const CONNECT_TIMEOUT = 2.0;
    const READ_TIMEOUT = 5.0;

    /** @var string host:port or the socket path, for messages */
    protected $address;
    /** @var bool a sentinel, asked without the DSN's login (it is the master's) */
    protected $sentinel = false;

    /**
     * @param array{0: string, 1: int} $node
     * @param string $client 'auto', 'phpredis', 'predis' or 'builtin'
     * @param bool $sentinel $node is one of a Sentinel DSN's sentinels
     * @throws \RuntimeException when the node cannot be reached or refuses our login
     */
    public static function open(Dsn $dsn, array $node, string $client = 'auto', bool $sentinel = false): self
    {
        if ($client === 'auto') {
            $client = extension_loaded('redis') && class_exists('Redis', false) ? 'phpredis' : (class_exists('Predis\Client') ? 'predis' : 'builtin');
        }
        switch ($client) {
            case 'phpredis':
                if (!extension_loaded('redis')) {
                    throw new Missing('--redis-client phpredis: the redis extension is not loaded');
                }
                $connection = new PhpRedisConnection();
                break;
            case 'predis':
                if (!class_exists('Predis\Client')) {
                    throw new Missing('--redis-client predis: predis/predis cannot be loaded');
                }
                $connection = new PredisConnection();
                break;
            case 'builtin':
                $connection = new RespConnection();
                break;
            default:
                throw new UsageError("--redis-client takes auto, phpredis, predis or builtin, not '$client'");
        }
        $connection->address = $dsn->transport === 'unix' ? $node[0] : Dsn::address($node);
        $connection->sentinel = $sentinel;
        $connection->connect($dsn, $node);
        return $connection;
    }

    /** Which client serves: phpredis, predis or builtin. */
    abstract public function client(): string;

    /**
     * @param array{0: string, 1: int} $node
     * @throws \RuntimeException
     */
    abstract protected function connect(Dsn $dsn, array $node);

    /**
     * @param array<int, string|int> $args
     * @return mixed the reply
     * @throws ReplyError for an error reply
     * @throws \RuntimeException when the connection fails
     */
    abstract public function command(array $args);

    abstract public function close();

    public function address(): string
    {
        return $this->address;
    }

    /** The TLS options of a rediss… DSN: system CAs and $SSL_CERT_FILE / $SSL_CERT_DIR, or none with #insecure. */
    protected static function tlsContext(Dsn $dsn): array
    {
        $ssl = ['verify_peer' => !$dsn->insecure, 'verify_peer_name' => !$dsn->insecure];
        foreach (['cafile' => 'SSL_CERT_FILE', 'capath' => 'SSL_CERT_DIR'] as $option => $variable) {
            $value = getenv($variable);
            if (is_string($value) && $value !== '') {
                $ssl[$option] = $value;
            }
        }
        return $ssl;
    }

    /** AUTH and SELECT as the DSN asks, on a connection that runs commands. */
    protected function login(Dsn $dsn)
    {
        if ($dsn->password !== null) {
            $this->command($dsn->user !== null ? ['AUTH', $dsn->user, $dsn->password] : ['AUTH', $dsn->password]);
        }
        if ($dsn->db !== 0) {
            $this->command(['SELECT', $dsn->db]);
        }
    }
}

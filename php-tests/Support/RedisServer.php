<?php

declare(strict_types=1);

namespace CronLock\Tests\Support;

/**
 * A private, throw-away redis-server for one test (or one test class),
 * started and stopped by tests/redis-harness (see RedisHarness).
 *
 *   $redis = RedisServer::start();                          // plain TCP
 *   $redis = RedisServer::start(['requirepass' => 'pw']);   // AUTH pw
 *   $redis = RedisServer::start(['acl_user' => ['name' => 'app', 'password' => 'pw']]);
 *   $redis = RedisServer::start(['unix' => true]);          // unix socket (+ TCP)
 *   $redis = RedisServer::start(['tls' => true]);           // TLS only, see caFile()
 *
 *   new CronLock\Redis($redis->dsn(), 'job', 10.0);
 *   $redis->command('GET', 'job');                           // raw RESP client
 *   $redis->kill(); $redis->restart(); $redis->stop();
 *
 * Nothing is persisted (--save '' --appendonly no). Every server lives in its
 * own temp dir (under $CRONLOCK_TEST_TMP when set, which scripts/test uses to
 * reap servers left by a crashed run) and is stopped by its destructor or, at
 * the latest, by a shutdown function. A process made by pcntl_fork() never
 * stops or talks over the parent's connection: only the process that started
 * a server manages it. The nodes of a RedisTopology are RedisServer objects
 * too; the topology, not the node, owns their directory.
 */
final class RedisServer
{
    /** @var array<int, \WeakReference<self>> */
    private static array $live = [];
    private static bool $shutdownRegistered = false;

    /** @var resource|null */
    private $conn = null;
    private ?int $connPid = null;
    private int $ownerPid;
    private array $opts;
    private string $dir;
    private string $name;
    private string $nodeDir;
    private int $port;
    private ?int $pid;
    private bool $ownsDir;

    /**
     * @param array<string, mixed> $opts
     * @param string $dir the harness's directory (the topology's)
     * @param bool $ownsDir whether this object stops the whole directory
     */
    private function __construct(array $opts, string $dir, string $name, string $nodeDir, int $port, ?int $pid, bool $ownsDir)
    {
        $this->opts = $opts;
        $this->dir = $dir;
        $this->name = $name;
        $this->nodeDir = $nodeDir;
        $this->port = $port;
        $this->pid = $pid;
        $this->ownsDir = $ownsDir;
        $this->ownerPid = getmypid();
    }

    /**
     * @param array{requirepass?: string, acl_user?: array{name: string, password: string},
     *              unix?: bool, tls?: bool, args?: list<string>} $opts
     *        'args': extra redis-server arguments, e.g. ['--maxclients', '10'].
     */
    /**
     * Skips the running test unless redis-server is version $min or later;
     * $needs names what the test uses from it (e.g. "PEXPIRETIME"). Ubuntu
     * 22.04 ships Redis 6.0 (scripts/compat 8.1).
     */
    public static function requireVersion(string $min, string $needs): void
    {
        $version = self::version();
        if (version_compare($version, $min, '<')) {
            \PHPUnit\Framework\Assert::markTestSkipped("needs Redis $min or later for $needs; redis-server is $version");
        }
    }

    /**
     * Why a cronlock/polyfill child of this run can make no CronLock\Redis, or null: the
     * polyfill needs phpredis or predis (a compat root's PHP may have neither), and a child
     * loads predis only through the suite's prepend file (CRONLOCK_TEST_PREDIS).
     */
    public static function polyfillClientMissing(): ?string
    {
        if (extension_loaded('redis') || (string) getenv('CRONLOCK_TEST_PREDIS') !== '') {
            return null;
        }
        return 'cronlock/polyfill makes a CronLock\Redis only with phpredis or predis, and this PHP has neither (apt-get install php-redis)';
    }

    /** Skips the test that calls it when polyfillClientMissing() says why. */
    public static function requirePolyfillClient(): void
    {
        $missing = self::polyfillClientMissing();
        if ($missing !== null) {
            \PHPUnit\Framework\Assert::markTestSkipped($missing);
        }
    }

    /** redis-server's version, e.g. "7.0.15". */
    public static function version(): string
    {
        static $version = null;
        if ($version === null) {
            preg_match('/v=(\d+\.\d+\.\d+)/', (string) shell_exec('redis-server --version'), $m);
            $version = $m[1] ?? '0.0.0';
        }
        return $version;
    }

    public static function start(array $opts = []): self
    {
        $known = ['requirepass', 'acl_user', 'unix', 'tls', 'args'];
        if ($unknown = array_diff(array_keys($opts), $known)) {
            throw new \InvalidArgumentException('unknown RedisServer option(s): ' . implode(', ', $unknown));
        }
        $harness = [];
        if (!empty($opts['tls'])) {
            $harness[] = '--tls';
        }
        if (!empty($opts['unix'])) {
            $harness[] = '--unix';
        }
        if (isset($opts['requirepass'])) {
            $harness[] = '--requirepass=' . $opts['requirepass'];
        }
        if (isset($opts['acl_user'])) {
            $harness[] = '--user=' . $opts['acl_user']['name'] . ':' . $opts['acl_user']['password'];
        }
        $lines = RedisHarness::run('start', 'single', RedisHarness::newDir('redis'), ...$harness, ...['--', ...($opts['args'] ?? [])]);
        return self::fromHarness($opts, (string) RedisHarness::fact($lines, 'dir'), RedisHarness::nodes($lines)[0], true);
    }

    /**
     * A node that tests/redis-harness started (RedisTopology's).
     *
     * @internal
     * @param array<string, mixed> $opts
     * @param array{name: string, port: int, pid: int, dir: string} $node
     */
    public static function fromHarness(array $opts, string $dir, array $node, bool $ownsDir): self
    {
        self::registerShutdown();
        $server = new self($opts, $dir, $node['name'], $node['dir'], $node['port'], $node['pid'] ?: null, $ownsDir);
        if ($ownsDir) {
            self::$live[spl_object_id($server)] = \WeakReference::create($server);
        }
        return $server;
    }

    // ---------------------------------------------------------------- facts

    public function port(): int
    {
        return $this->port;
    }

    public function pid(): ?int
    {
        return $this->pid;
    }

    public function host(): string
    {
        return '127.0.0.1';
    }

    public function isTls(): bool
    {
        return !empty($this->opts['tls']);
    }

    public function socketPath(): ?string
    {
        return empty($this->opts['unix']) ? null : $this->nodeDir . '/redis.sock';
    }

    /** CA certificate that signed the server certificate (TLS servers only). */
    public function caFile(): ?string
    {
        return $this->isTls() ? $this->dir . '/ca.crt' : null;
    }

    public function logFile(): string
    {
        return $this->nodeDir . '/redis.log';
    }

    /** Whether the process is alive (not a zombie) and still the one in our node dir. */
    public function isRunning(): bool
    {
        if ($this->pid === null) {
            return false;
        }
        $stat = @file_get_contents("/proc/{$this->pid}/stat");
        if ($stat === false || in_array(substr($stat, strrpos($stat, ')') + 2, 1), ['Z', 'X'], true)) {
            return false;
        }
        return @readlink("/proc/{$this->pid}/cwd") === $this->nodeDir;
    }

    /**
     * The DSN cronlock should use: redis://[user:pass@]127.0.0.1:PORT[/db],
     * rediss://… for TLS, unix:///…/redis.sock for unix-socket servers.
     */
    public function dsn(?int $db = null): string
    {
        if ($path = $this->socketPath()) {
            return 'unix://' . $path;
        }
        return $this->tcpDsn($db);
    }

    /** TCP (or TLS) DSN even for a server that also listens on a unix socket. */
    public function tcpDsn(?int $db = null): string
    {
        $scheme = $this->isTls() ? 'rediss' : 'redis';
        $cred = '';
        if (isset($this->opts['acl_user'])) {
            $cred = rawurlencode($this->opts['acl_user']['name']) . ':'
                . rawurlencode($this->opts['acl_user']['password']) . '@';
        } elseif (isset($this->opts['requirepass'])) {
            $cred = ':' . rawurlencode($this->opts['requirepass']) . '@';
        }
        return "$scheme://$cred{$this->host()}:{$this->port}" . ($db === null ? '' : "/$db");
    }

    // ----------------------------------------------------------- lifecycle

    /**
     * SIGTERM, then SIGKILL after 5 s; waits until the process is gone. A
     * server of its own directory is removed with it (no restart after that).
     */
    public function stop(): void
    {
        if (getmypid() !== $this->ownerPid) {
            return;
        }
        $this->disconnect();
        clearstatcache();
        if ($this->ownsDir) {
            if (is_dir($this->dir)) {
                RedisHarness::run('stop', $this->dir);
            }
            unset(self::$live[spl_object_id($this)]);
        } elseif ($this->pid !== null && is_dir($this->dir)) {
            RedisHarness::run('stop', $this->dir, $this->name);
        }
        $this->pid = null;
    }

    /** SIGKILL, like a crash: no shutdown, the temp dir stays for restart(). */
    public function kill(): void
    {
        if (getmypid() !== $this->ownerPid) {
            return;
        }
        $this->disconnect();
        RedisHarness::run('kill', $this->dir, $this->name);
        $this->pid = null;
    }

    /** Start again on the same port (empty: nothing was persisted). */
    public function restart(): void
    {
        $this->disconnect();
        $this->pid = RedisHarness::nodes(RedisHarness::run('restart', $this->dir, $this->name))[0]['pid'];
    }

    /** SIGSTOP (true) or SIGCONT (false): a server that stops answering anyone. */
    public function pause(bool $paused = true): void
    {
        RedisHarness::run($paused ? 'pause' : 'resume', $this->dir, $this->name);
    }

    public function __destruct()
    {
        if ($this->ownsDir) {
            $this->stop();
        }
    }

    // --------------------------------------------------------- RESP client

    /**
     * Send one command, return the decoded reply: string|int|null|array.
     * Simple-string replies come back as strings ("OK", "PONG"); an error
     * reply throws \RuntimeException("Redis error: …").
     */
    /** @return mixed */
    public function command(string ...$args)
    {
        $conn = $this->connection();
        $out = '*' . count($args) . "\r\n";
        foreach ($args as $arg) {
            $out .= '$' . strlen($arg) . "\r\n" . $arg . "\r\n";
        }
        for ($off = 0; $off < strlen($out); $off += $n) {
            $n = @fwrite($conn, substr($out, $off));
            if ($n === false || $n === 0) {
                $this->disconnect();
                throw new \RuntimeException("write to redis on port {$this->port} failed");
            }
        }
        try {
            return $this->readReply($conn);
        } catch (\UnexpectedValueException $e) {
            $this->disconnect();
            throw new \RuntimeException($e->getMessage(), 0, $e);
        }
    }

    /** @return resource */
    private function connection()
    {
        if ($this->conn !== null && $this->connPid === getmypid() && !feof($this->conn)) {
            return $this->conn;
        }
        $this->conn = null;
        if ($this->isTls()) {
            $ctx = stream_context_create(['ssl' => [
                'cafile' => $this->caFile(),
                'peer_name' => $this->host(),
                'verify_peer' => true,
                'verify_peer_name' => true,
            ]]);
            $url = "tls://{$this->host()}:{$this->port}";
        } else {
            $ctx = stream_context_create();
            $url = "tcp://{$this->host()}:{$this->port}";
        }
        // Generous: this is the test's own client, on a loaded machine; a
        // server that does not answer is a failure either way.
        $conn = @stream_socket_client($url, $errno, $errstr, 10.0, STREAM_CLIENT_CONNECT, $ctx);
        if ($conn === false) {
            throw new \RuntimeException("cannot connect to redis at $url: $errstr");
        }
        stream_set_timeout($conn, 10);
        $this->conn = $conn;
        $this->connPid = getmypid();
        if (isset($this->opts['requirepass'])) {
            $this->command('AUTH', $this->opts['requirepass']);
        }
        return $conn;
    }

    private function disconnect(): void
    {
        if ($this->conn !== null && $this->connPid === getmypid()) {
            @fclose($this->conn);
        }
        $this->conn = null;
    }

    /** @param resource $conn */
    /** @return mixed */
    private function readReply($conn)
    {
        $line = fgets($conn);
        if ($line === false || substr($line, -2) !== "\r\n") {
            throw new \UnexpectedValueException("no reply from redis on port {$this->port} (timeout or closed)");
        }
        $type = $line[0];
        $body = substr($line, 1, -2);
        switch ($type) {
            case '+':
                return $body;
            case '-':
                throw new \RuntimeException("Redis error: $body");
            case ':':
                return (int) $body;
            case '$':
                $len = (int) $body;
                if ($len < 0) {
                    return null;
                }
                $data = '';
                while (strlen($data) < $len + 2) {
                    $chunk = fread($conn, $len + 2 - strlen($data));
                    if ($chunk === false || $chunk === '') {
                        throw new \UnexpectedValueException('short bulk reply from redis');
                    }
                    $data .= $chunk;
                }
                return substr($data, 0, $len);
            case '*':
                $n = (int) $body;
                if ($n < 0) {
                    return null;
                }
                $items = [];
                for ($i = 0; $i < $n; $i++) {
                    try {
                        $items[] = $this->readReply($conn);
                    } catch (\RuntimeException $e) {
                        if ($e instanceof \UnexpectedValueException) {
                            throw $e;
                        }
                        $items[] = $e; // error inside an array (EXEC): keep reading
                    }
                }
                return $items;
            default:
                throw new \UnexpectedValueException('unexpected redis reply: ' . rtrim($line));
        }
    }

    // ------------------------------------------------------------ internals

    public static function makeTempDir(string $prefix): string
    {
        $base = getenv('CRONLOCK_TEST_TMP') ?: sys_get_temp_dir();
        $dir = rtrim($base, '/') . "/$prefix-" . bin2hex(random_bytes(4));
        if (!mkdir($dir, 0700, true)) {
            throw new \RuntimeException("cannot create $dir");
        }
        return $dir;
    }

    private static function registerShutdown(): void
    {
        if (self::$shutdownRegistered) {
            return;
        }
        self::$shutdownRegistered = true;
        register_shutdown_function(static function (): void {
            foreach (self::$live as $ref) {
                if ($live = $ref->get()) {
                    $live->__destruct();
                }
            }
            self::$live = [];
        });
    }
}

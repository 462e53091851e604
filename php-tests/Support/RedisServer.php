<?php

declare(strict_types=1);

namespace CronLock\Tests\Support;

/**
 * A private, throw-away redis-server for one test (or one test class).
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
 * a server manages it.
 */
final class RedisServer
{
    /** @var array<int, \WeakReference<self>> */
    private static array $live = [];
    private static bool $shutdownRegistered = false;
    private static ?string $certDir = null;
    private static ?int $certOwner = null;

    /** @var resource|null proc_open() handle */
    private $proc = null;
    private ?int $pid = null;
    /** @var resource|null */
    private $conn = null;
    private ?int $connPid = null;
    private readonly int $ownerPid;

    /** @param array<string, mixed> $opts */
    private function __construct(
        private readonly array $opts,
        private readonly string $dir,
        private int $port,
    ) {
        $this->ownerPid = getmypid();
    }

    /**
     * @param array{requirepass?: string, acl_user?: array{name: string, password: string},
     *              unix?: bool, tls?: bool, args?: list<string>} $opts
     *        'args': extra redis-server arguments, e.g. ['--maxclients', '10'];
     *        'sentinel_of': a port: a sentinel watching 127.0.0.1:port as 'mymaster'
     *        (quorum 2, down after 1 s), see RedisTopology::sentinel().
     */
    /**
     * Skips the running test unless redis-server is version $min or later;
     * $needs names what the test uses from it (e.g. "PEXPIRETIME"). Ubuntu
     * 22.04 ships Redis 6.0 (scripts/compat 8.1).
     */
    public static function requireVersion(string $min, string $needs): void
    {
        static $version = null;
        if ($version === null) {
            preg_match('/v=(\d+\.\d+\.\d+)/', (string) shell_exec('redis-server --version'), $m);
            $version = $m[1] ?? '0.0.0';
        }
        if (version_compare($version, $min, '<')) {
            \PHPUnit\Framework\Assert::markTestSkipped("needs Redis $min or later for $needs; redis-server is $version");
        }
    }

    public static function start(array $opts = []): self
    {
        $known = ['requirepass', 'acl_user', 'unix', 'tls', 'args', 'sentinel_of'];
        if ($unknown = array_diff(array_keys($opts), $known)) {
            throw new \InvalidArgumentException('unknown RedisServer option(s): ' . implode(', ', $unknown));
        }
        self::registerShutdown();

        $lastError = '';
        for ($attempt = 1; $attempt <= 5; $attempt++) {
            $server = new self($opts, self::makeTempDir('redis'), self::freePort());
            try {
                $server->spawn();
                return $server;
            } catch (\RuntimeException $e) {
                // Most likely someone took the free port between probe and bind.
                $lastError = $e->getMessage();
                $server->stop();
                self::removeDir($server->dir);
            }
        }
        throw new \RuntimeException("could not start redis-server after 5 attempts: $lastError");
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
        return empty($this->opts['unix']) ? null : $this->dir . '/redis.sock';
    }

    /** CA certificate that signed the server certificate (TLS servers only). */
    public function caFile(): ?string
    {
        return $this->isTls() ? self::certDir() . '/ca.crt' : null;
    }

    public function logFile(): string
    {
        return $this->dir . '/redis.log';
    }

    public function isRunning(): bool
    {
        if ($this->proc === null) {
            return false;
        }
        return proc_get_status($this->proc)['running'];
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

    /** SIGTERM, then SIGKILL after 5 s; waits until the process is gone. */
    public function stop(): void
    {
        $this->terminate(15, 5.0);
    }

    /** SIGKILL, like a crash: no shutdown, the temp dir stays for restart(). */
    public function kill(): void
    {
        $this->terminate(9, 0.0);
    }

    /** Start again on the same port (empty: nothing was persisted). */
    public function restart(): void
    {
        $this->stop();
        $this->spawn();
    }

    public function __destruct()
    {
        if (getmypid() !== $this->ownerPid) {
            return; // a fork()ed child: the server belongs to the parent
        }
        $this->stop();
        self::removeDir($this->dir);
        unset(self::$live[spl_object_id($this)]);
    }

    // --------------------------------------------------------- RESP client

    /**
     * Send one command, return the decoded reply: string|int|null|array.
     * Simple-string replies come back as strings ("OK", "PONG"); an error
     * reply throws \RuntimeException("Redis error: …").
     */
    public function command(string ...$args): mixed
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
        $conn = @stream_socket_client($url, $errno, $errstr, 2.0, STREAM_CLIENT_CONNECT, $ctx);
        if ($conn === false) {
            throw new \RuntimeException("cannot connect to redis at $url: $errstr");
        }
        stream_set_timeout($conn, 5);
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
    private function readReply($conn): mixed
    {
        $line = fgets($conn);
        if ($line === false || !str_ends_with($line, "\r\n")) {
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

    /** @return list<string> */
    private function args(): array
    {
        if (isset($this->opts['sentinel_of'])) {
            // A sentinel rewrites its config file: one of its own.
            $conf = $this->dir . '/sentinel.conf';
            if (!is_file($conf)) {
                file_put_contents($conf, sprintf(
                    "sentinel monitor mymaster 127.0.0.1 %d 2\n"
                    . "sentinel down-after-milliseconds mymaster 1000\n"
                    . "sentinel failover-timeout mymaster 5000\n",
                    $this->opts['sentinel_of'],
                ));
            }
            return [
                'redis-server', $conf, '--sentinel',
                '--bind', '127.0.0.1',
                '--port', (string) $this->port,
                '--daemonize', 'no',
                '--dir', $this->dir,
                '--logfile', $this->logFile(),
            ];
        }
        $args = [
            'redis-server',
            '--bind', '127.0.0.1',
            '--save', '',
            '--appendonly', 'no',
            '--daemonize', 'no',
            '--dir', $this->dir,
            '--logfile', $this->logFile(),
            '--pidfile', $this->dir . '/redis.pid',
        ];
        if ($this->isTls()) {
            $certs = self::certDir();
            array_push(
                $args,
                '--port', '0',
                '--tls-port', (string) $this->port,
                '--tls-cert-file', "$certs/server.crt",
                '--tls-key-file', "$certs/server.key",
                '--tls-ca-cert-file', "$certs/ca.crt",
                '--tls-auth-clients', 'no',
            );
        } else {
            array_push($args, '--port', (string) $this->port);
        }
        if ($path = $this->socketPath()) {
            array_push($args, '--unixsocket', $path, '--unixsocketperm', '700');
        }
        if (isset($this->opts['requirepass'])) {
            array_push($args, '--requirepass', $this->opts['requirepass']);
        }
        if (isset($this->opts['acl_user'])) {
            ['name' => $name, 'password' => $pw] = $this->opts['acl_user'];
            array_push($args, '--user', $name, 'on', ">$pw", '~*', '&*', '+@all');
        }
        return [...$args, ...($this->opts['args'] ?? [])];
    }

    private function spawn(): void
    {
        $this->disconnect();
        $null = ['file', '/dev/null', 'r'];
        $out = ['file', $this->dir . '/stdout.log', 'a'];
        $proc = proc_open($this->args(), [0 => $null, 1 => $out, 2 => $out], $pipes, $this->dir);
        if ($proc === false) {
            throw new \RuntimeException('proc_open(redis-server) failed');
        }
        $this->proc = $proc;
        $this->pid = proc_get_status($proc)['pid'];
        self::$live[spl_object_id($this)] = \WeakReference::create($this);

        $deadline = microtime(true) + 10.0;
        while (true) {
            if (!$this->isRunning()) {
                throw new \RuntimeException("redis-server exited at start:\n" . $this->logTail());
            }
            try {
                if ($this->command('PING') === 'PONG') {
                    return;
                }
            } catch (\RuntimeException) {
                // not listening yet
            }
            if (microtime(true) > $deadline) {
                throw new \RuntimeException("redis-server did not answer PING within 10 s:\n" . $this->logTail());
            }
            usleep(20_000);
        }
    }

    private function terminate(int $signal, float $grace): void
    {
        if (getmypid() !== $this->ownerPid) {
            return;
        }
        $this->disconnect();
        if ($this->proc === null) {
            return;
        }
        if ($this->isRunning()) {
            proc_terminate($this->proc, $signal);
            $deadline = microtime(true) + $grace;
            while ($this->isRunning() && microtime(true) < $deadline) {
                usleep(10_000);
            }
            if ($this->isRunning()) {
                proc_terminate($this->proc, 9);
            }
        }
        proc_close($this->proc); // reaps the child (waits for SIGKILL to land)
        $this->proc = null;
        $this->pid = null;
    }

    private function logTail(): string
    {
        $log = '';
        foreach (['redis.log', 'stdout.log'] as $f) {
            if (is_file("$this->dir/$f")) {
                $log .= implode("\n", array_slice(file("$this->dir/$f", FILE_IGNORE_NEW_LINES) ?: [], -20)) . "\n";
            }
        }
        return $log;
    }

    private static function freePort(): int
    {
        $sock = stream_socket_server('tcp://127.0.0.1:0', $errno, $errstr);
        if ($sock === false) {
            throw new \RuntimeException("no free port: $errstr");
        }
        $name = stream_socket_get_name($sock, false);
        fclose($sock);
        return (int) substr($name, strrpos($name, ':') + 1);
    }

    /** CA + server certificate for 127.0.0.1/localhost, made once per process. */
    private static function certDir(): string
    {
        if (self::$certDir !== null && self::$certOwner === getmypid()) {
            return self::$certDir;
        }
        $dir = self::makeTempDir('tls');
        file_put_contents("$dir/server.ext", implode("\n", [
            'basicConstraints = critical, CA:FALSE',
            'keyUsage = critical, digitalSignature, keyEncipherment',
            'extendedKeyUsage = serverAuth',
            'subjectAltName = IP:127.0.0.1, DNS:localhost',
        ]) . "\n");
        $ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
        self::run(['openssl', 'req', '-x509', ...$ec, '-days', '2',
            '-keyout', "$dir/ca.key", '-out', "$dir/ca.crt", '-subj', '/CN=cronlock test CA',
            '-addext', 'basicConstraints=critical,CA:TRUE',
            '-addext', 'keyUsage=critical,keyCertSign,cRLSign']);
        self::run(['openssl', 'req', ...$ec, '-keyout', "$dir/server.key",
            '-out', "$dir/server.csr", '-subj', '/CN=127.0.0.1']);
        self::run(['openssl', 'x509', '-req', '-in', "$dir/server.csr", '-days', '2',
            '-CA', "$dir/ca.crt", '-CAkey', "$dir/ca.key", '-set_serial', (string) random_int(1, PHP_INT_MAX),
            '-extfile', "$dir/server.ext", '-out', "$dir/server.crt"]);
        self::$certDir = $dir;
        self::$certOwner = getmypid();
        register_shutdown_function(static function () use ($dir): void {
            if (self::$certOwner === getmypid()) {
                self::removeDir($dir);
            }
        });
        return $dir;
    }

    /** @param list<string> $cmd */
    private static function run(array $cmd): void
    {
        $proc = proc_open($cmd, [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
        if ($proc === false) {
            throw new \RuntimeException("cannot run $cmd[0]");
        }
        $output = stream_get_contents($pipes[1]) . stream_get_contents($pipes[2]);
        fclose($pipes[1]);
        fclose($pipes[2]);
        if (($rc = proc_close($proc)) !== 0) {
            throw new \RuntimeException(implode(' ', $cmd) . " failed ($rc):\n$output");
        }
    }

    public static function makeTempDir(string $prefix): string
    {
        $base = getenv('CRONLOCK_TEST_TMP') ?: sys_get_temp_dir();
        $dir = rtrim($base, '/') . "/$prefix-" . bin2hex(random_bytes(4));
        if (!mkdir($dir, 0700, true)) {
            throw new \RuntimeException("cannot create $dir");
        }
        return $dir;
    }

    private static function removeDir(string $dir): void
    {
        if (!is_dir($dir)) {
            return;
        }
        foreach (scandir($dir) ?: [] as $f) {
            if ($f !== '.' && $f !== '..') {
                @unlink("$dir/$f");
            }
        }
        @rmdir($dir);
    }

    private static function registerShutdown(): void
    {
        if (self::$shutdownRegistered) {
            return;
        }
        self::$shutdownRegistered = true;
        register_shutdown_function(static function (): void {
            foreach (self::$live as $ref) {
                $ref->get()?->__destruct();
            }
            self::$live = [];
        });
    }
}

<?php

declare(strict_types=1);

namespace CronLock\Tests\Support;

/**
 * A private, throw-away MariaDB or PostgreSQL server for a test class.
 *
 *   $db = DatabaseServer::start('mysql');   // mariadbd on a free 127.0.0.1 port
 *   $db = DatabaseServer::start('pgsql');   // postgres 15 on a free 127.0.0.1 port
 *   $db = DatabaseServer::start('mysql', ['--performance-schema=ON']);   // more server arguments
 *   $db->dsn(); $db->user(); $db->password(); $db->pdo();
 *   $db->client('SELECT 1');                // plain mysql / psql, by hand
 *   $db->restart(); $db->stop();
 *   $db->freeze(); $db->thaw();             // SIGSTOP / SIGCONT, backends too
 *
 * Each server lives in its own temp dir (under $CRONLOCK_TEST_TMP when set),
 * listens only on 127.0.0.1 and a socket in that dir, and is stopped by pid
 * (destructor or shutdown function). PostgreSQL's initdb and postgres run
 * as the user 'postgres' when we are root (they refuse root). Only the
 * process that started a server stops it (not a pcntl_fork() child).
 *
 * Both servers have a user 'cron' with password PASSWORD (MariaDB also
 * root without password over the socket; PostgreSQL 'postgres' trusts the
 * socket); TCP logins need the password.
 */
final class DatabaseServer
{
    public const PASSWORD = 'cron-s3cret-pw';
    /**
     * Seconds a server may take to accept connections, and a restart to get
     * its port back: generous, for a loaded 2-core machine (a fresh MariaDB
     * data dir takes seconds there). Only a broken server reaches them.
     */
    private const START_TIMEOUT = 120.0;
    /** Servers started on a new port when the first one was taken between pick and bind. */
    private const START_ATTEMPTS = 5;

    /** @var array<int, \WeakReference<self>> */
    private static array $live = [];
    private static bool $shutdownRegistered = false;

    /** @var resource|null */
    private $proc = null;
    private ?int $pid = null;
    private int $ownerPid;
    private string $kind;
    private string $dir;
    private int $port;
    /** @var list<string> */
    private array $serverArgs = [];

    private function __construct(string $kind, string $dir, int $port)
    {
        $this->kind = $kind;
        $this->dir = $dir;
        $this->port = $port;
        $this->ownerPid = getmypid();
    }

    public static function available(string $kind): ?string
    {
        if ($kind === 'mysql') {
            if (!extension_loaded('pdo_mysql')) {
                return 'pdo_mysql is not loaded (apt-get install php-mysql)';
            }
            foreach (['mariadbd', 'mariadb-install-db', 'mysql'] as $tool) {
                if (self::which($tool) === null) {
                    return "$tool not found (apt-get install mariadb-server mariadb-client)";
                }
            }
            return null;
        }
        if (!extension_loaded('pdo_pgsql')) {
            return 'pdo_pgsql is not loaded (apt-get install php-pgsql)';
        }
        if (self::pgBin() === null) {
            return 'PostgreSQL server binaries not found (apt-get install postgresql)';
        }
        return null;
    }

    /** @param list<string> $serverArgs more arguments of mariadbd or postgres (after ours, so they win) */
    public static function start(string $kind, array $serverArgs = []): self
    {
        if (!in_array($kind, ['mysql', 'pgsql'], true)) {
            throw new \InvalidArgumentException("unknown database kind $kind");
        }
        self::registerShutdown();
        $last = '';
        for ($attempt = 1; $attempt <= self::START_ATTEMPTS; $attempt++) {
            $server = new self($kind, self::makeTempDir($kind), self::freePort());
            $server->serverArgs = $serverArgs;
            try {
                $server->init();
                $server->spawn();
                $server->setUp();
                self::$live[spl_object_id($server)] = \WeakReference::create($server);
                return $server;
            } catch (\RuntimeException $e) {
                $last = $e->getMessage();
                $server->stop();
            }
        }
        throw new \RuntimeException("could not start $kind after " . self::START_ATTEMPTS . " attempts: $last");
    }

    public function kind(): string
    {
        return $this->kind;
    }

    public function port(): int
    {
        return $this->port;
    }

    public function pid(): ?int
    {
        return $this->pid;
    }

    public function socketDir(): string
    {
        return $this->dir . '/run';
    }

    public function user(): string
    {
        return 'cron';
    }

    public function password(): string
    {
        return self::PASSWORD;
    }

    public function dsn(): string
    {
        return $this->kind === 'mysql'
            ? "mysql:host=127.0.0.1;port={$this->port};dbname=cron"
            : "pgsql:host=127.0.0.1;port={$this->port};dbname=cron";
    }

    /** A new PDO as 'cron' over TCP, exceptions on. */
    public function pdo(): \PDO
    {
        return new \PDO($this->dsn(), $this->user(), $this->password(), [\PDO::ATTR_ERRMODE => \PDO::ERRMODE_EXCEPTION]);
    }

    /** A new PDO as the administrator (root / postgres), for KILL and pg_terminate_backend(). */
    public function adminPdo(string $database = 'cron'): \PDO
    {
        return $this->kind === 'mysql'
            ? new \PDO("mysql:unix_socket={$this->socketDir()}/mysqld.sock", 'root', '', [\PDO::ATTR_ERRMODE => \PDO::ERRMODE_EXCEPTION])
            : new \PDO("pgsql:host={$this->socketDir()};port={$this->port};dbname=$database", 'postgres', null, [\PDO::ATTR_ERRMODE => \PDO::ERRMODE_EXCEPTION]);
    }

    /**
     * The plain command-line client as 'cron' over TCP, reading $sql on
     * stdin: the argv for proc_open (the password goes in the environment).
     *
     * @return array{0: list<string>, 1: array<string, string>}
     */
    public function clientCommand(): array
    {
        if ($this->kind === 'mysql') {
            return [['mysql', '--no-defaults', '-h127.0.0.1', "-P{$this->port}", '-ucron', '-N', '-B', 'cron'],
                ['MYSQL_PWD' => self::PASSWORD, 'PATH' => (string) getenv('PATH')]];
        }
        return [['psql', '-X', '-q', '-t', '-A', '-v', 'ON_ERROR_STOP=1', '-h', '127.0.0.1', '-p', (string) $this->port, '-U', 'cron', 'cron'],
            ['PGPASSWORD' => self::PASSWORD, 'PATH' => (string) getenv('PATH')]];
    }

    /** Runs $sql through the plain client and returns its output. */
    public function client(string $sql): string
    {
        [$cmd, $env] = $this->clientCommand();
        $p = proc_open($cmd, [0 => ['pipe', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes, null, $env);
        fwrite($pipes[0], $sql);
        fclose($pipes[0]);
        $out = stream_get_contents($pipes[1]);
        $err = stream_get_contents($pipes[2]);
        $rc = proc_close($p);
        if ($rc !== 0) {
            throw new \RuntimeException("client failed ($rc): $err");
        }
        return trim((string) $out);
    }

    public function isRunning(): bool
    {
        return $this->pid !== null && posix_kill($this->pid, 0);
    }

    /**
     * SIGSTOP the server and every process it started (PostgreSQL's
     * backends), as a frozen server or a network black hole looks to a
     * client: connections stay open and nothing answers. Always thaw().
     */
    public function freeze(): void
    {
        foreach ($this->family() as $pid) {
            posix_kill($pid, SIGSTOP);
        }
    }

    public function thaw(): void
    {
        foreach ($this->family() as $pid) {
            posix_kill($pid, SIGCONT);
        }
    }

    /** @return list<int> the server's pid and its children's */
    private function family(): array
    {
        if ($this->pid === null) {
            return [];
        }
        $pids = [$this->pid];
        foreach (glob('/proc/[0-9]*/stat') ?: [] as $stat) {
            // "pid (comm) state ppid ...": comm may contain spaces; a process
            // that ends while it is read gives '' (or false)
            $text = (string) @file_get_contents($stat);
            $end = strrpos($text, ')');
            $fields = $end === false ? [] : explode(' ', substr($text, $end + 2));
            if (isset($fields[1]) && (int) $fields[1] === $this->pid) {
                $pids[] = (int) basename(dirname($stat));
            }
        }
        return $pids;
    }

    /**
     * Stop (fast shutdown) and start again on the same port and data. The
     * port may be busy for a moment (another process was given it as its
     * own ephemeral port meanwhile): then it is tried again until
     * START_TIMEOUT.
     */
    public function restart(): void
    {
        $this->shutdown();
        $deadline = microtime(true) + self::START_TIMEOUT;
        while (true) {
            try {
                $this->spawn();
                return;
            } catch (\RuntimeException $e) {
                $this->shutdown();
                if (microtime(true) > $deadline) {
                    throw $e;
                }
                usleep(500_000);
            }
        }
    }

    public function stop(): void
    {
        if ($this->ownerPid !== getmypid()) {
            return;
        }
        $this->shutdown();
        self::removeDir($this->dir);
        unset(self::$live[spl_object_id($this)]);
    }

    public function __destruct()
    {
        $this->stop();
    }

    // ------------------------------------------------------------- internals

    private function shutdown(): void
    {
        if ($this->pid !== null) {
            // SIGTERM: MariaDB shuts down; PostgreSQL "smart" waits for
            // clients, so SIGINT ("fast") for it.
            posix_kill($this->pid, $this->kind === 'pgsql' ? SIGINT : SIGTERM);
            $deadline = microtime(true) + 30;
            while (posix_kill($this->pid, 0) && microtime(true) < $deadline) {
                if (is_resource($this->proc) && !proc_get_status($this->proc)['running']) {
                    break;
                }
                usleep(20_000);
            }
            if (posix_kill($this->pid, 0)) {
                posix_kill($this->pid, SIGKILL);
            }
        }
        if (is_resource($this->proc)) {
            proc_close($this->proc);
        }
        $this->proc = null;
        $this->pid = null;
    }

    private function init(): void
    {
        mkdir($this->dir . '/run', 0777, true);
        if ($this->kind === 'mysql') {
            // A temporary directory of its own, for the bootstrap and the
            // server: at start-up MariaDB deletes every #sql* file in its
            // tmpdir, so a server started with the shared /tmp deletes the
            // temporary tables of every other test server (those behind
            // information_schema queries), and one of them died of signal
            // 11 in the middle of `cronlock status` in the fresh root.
            mkdir($this->dir . '/tmp', 0700);
            $this->run(['mariadb-install-db', '--no-defaults', '--datadir=' . $this->dir . '/data', '--tmpdir=' . $this->dir . '/tmp',
                '--auth-root-authentication-method=normal', '--skip-test-db', '--user=' . self::me()]);
            return;
        }
        $this->chownToPostgres($this->dir);
        $this->chownToPostgres($this->dir . '/run');
        file_put_contents($this->dir . '/pw', "postgres\n");
        $this->chownToPostgres($this->dir . '/pw');
        $this->run(array_merge($this->asPostgres(), [self::pgBin() . '/initdb', '-D', $this->dir . '/data',
            '-U', 'postgres', '--auth-local=trust', '--auth-host=scram-sha-256', '--pwfile=' . $this->dir . '/pw',
            '-E', 'UTF8', '--no-sync', '--locale=C']));
    }

    private function spawn(): void
    {
        if ($this->kind === 'mysql') {
            $cmd = [self::which('mariadbd') ?? 'mariadbd', '--no-defaults', '--user=' . self::me(), '--datadir=' . $this->dir . '/data',
                '--socket=' . $this->dir . '/run/mysqld.sock', '--tmpdir=' . $this->dir . '/tmp', '--port=' . $this->port, '--bind-address=127.0.0.1',
                '--skip-name-resolve', '--pid-file=' . $this->dir . '/run/mysqld.pid', '--log-error=' . $this->dir . '/error.log',
                '--innodb-buffer-pool-size=16M', '--skip-log-bin', '--max-connections=200', '--innodb-log-file-size=8M',
                '--performance-schema=OFF'];
        } else {
            $cmd = array_merge($this->asPostgres(), [self::pgBin() . '/postgres', '-D', $this->dir . '/data',
                '-p', (string) $this->port, '-k', $this->dir . '/run', '-c', 'listen_addresses=127.0.0.1',
                '-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off',
                '-c', 'max_connections=200', '-c', 'shared_buffers=16MB', '-c', 'logging_collector=off']);
        }
        $cmd = array_merge($cmd, $this->serverArgs);
        $log = fopen($this->dir . '/server.log', 'a');
        $proc = proc_open($cmd, [0 => ['file', '/dev/null', 'r'], 1 => $log, 2 => $log], $pipes);
        fclose($log);
        if (!is_resource($proc)) {
            throw new \RuntimeException('cannot start ' . $cmd[0]);
        }
        $this->proc = $proc;
        $this->pid = proc_get_status($proc)['pid'];
        $deadline = microtime(true) + self::START_TIMEOUT;
        while (microtime(true) < $deadline) {
            if (!proc_get_status($proc)['running']) {
                throw new \RuntimeException("{$this->kind} server exited: " . @file_get_contents($this->dir . '/server.log') . @file_get_contents($this->dir . '/error.log'));
            }
            if ($this->ready()) {
                return;
            }
            usleep(50_000);
        }
        throw new \RuntimeException("{$this->kind} server did not come up in " . self::START_TIMEOUT . ' s');
    }

    private function ready(): bool
    {
        try {
            $this->adminPdo($this->kind === 'pgsql' ? 'postgres' : '')->query('SELECT 1');
            return true;
        } catch (\PDOException $e) {
            return false;
        }
    }

    private function setUp(): void
    {
        $pw = self::PASSWORD;
        $admin = $this->adminPdo($this->kind === 'pgsql' ? 'postgres' : '');
        if ($this->kind === 'mysql') {
            $admin->exec("CREATE DATABASE cron");
            $admin->exec("CREATE USER 'cron'@'%' IDENTIFIED BY '$pw'");
            $admin->exec("GRANT ALL ON cron.* TO 'cron'@'%'");
            return;
        }
        $admin->exec("CREATE ROLE cron LOGIN PASSWORD '$pw'");
        $admin->exec('CREATE DATABASE cron OWNER cron');
    }

    /** @param list<string> $cmd */
    private function run(array $cmd): void
    {
        $p = proc_open($cmd, [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
        $out = stream_get_contents($pipes[1]) . stream_get_contents($pipes[2]);
        if (($rc = proc_close($p)) !== 0) {
            throw new \RuntimeException($cmd[0] . " failed ($rc): $out");
        }
    }

    /** @return list<string> prefix running a command as 'postgres' when we are root */
    private function asPostgres(): array
    {
        if (posix_geteuid() !== 0) {
            return [];
        }
        return ['setpriv', '--reuid=postgres', '--regid=postgres', '--clear-groups', '--'];
    }

    private function chownToPostgres(string $path): void
    {
        if (posix_geteuid() === 0) {
            chown($path, 'postgres');
            chgrp($path, 'postgres');
        }
    }

    private static function me(): string
    {
        return posix_getpwuid(posix_geteuid())['name'];
    }

    private static function pgBin(): ?string
    {
        $dirs = glob('/usr/lib/postgresql/*/bin') ?: [];
        rsort($dirs, SORT_NATURAL);
        foreach ($dirs as $dir) {
            if (is_executable("$dir/postgres") && is_executable("$dir/initdb")) {
                return $dir;
            }
        }
        return null;
    }

    private static function which(string $tool): ?string
    {
        foreach (explode(':', (string) getenv('PATH') . ':/usr/sbin:/usr/bin') as $dir) {
            if ($dir !== '' && is_executable("$dir/$tool")) {
                return "$dir/$tool";
            }
        }
        return null;
    }

    private static function freePort(): int
    {
        $s = stream_socket_server('tcp://127.0.0.1:0', $errno, $errstr);
        if ($s === false) {
            throw new \RuntimeException("no free port: $errstr");
        }
        $port = (int) substr(strrchr(stream_socket_get_name($s, false), ':'), 1);
        fclose($s);
        return $port;
    }

    private static function makeTempDir(string $kind): string
    {
        $base = getenv('CRONLOCK_TEST_TMP') ?: sys_get_temp_dir();
        // As root, postgres runs as the user 'postgres', who must be able to
        // reach its directory through a private (0700) scratch dir.
        if ($kind === 'pgsql' && posix_geteuid() === 0 && (fileperms($base) & 0001) === 0) {
            chmod($base, (fileperms($base) & 07777) | 0011);
        }
        $dir = $base . '/cronlock-' . $kind . '-' . getmypid() . '-' . bin2hex(random_bytes(4));
        mkdir($dir, 0755, true);
        chmod($dir, 0755);
        return $dir;
    }

    private static function removeDir(string $dir): void
    {
        if (!is_dir($dir)) {
            return;
        }
        exec('rm -rf ' . escapeshellarg($dir));
    }

    private static function registerShutdown(): void
    {
        if (self::$shutdownRegistered) {
            return;
        }
        self::$shutdownRegistered = true;
        $owner = getmypid();
        register_shutdown_function(static function () use ($owner): void {
            if (getmypid() !== $owner) {
                return;
            }
            foreach (self::$live as $ref) {
                if ($live = $ref->get()) {
                    $live->stop();
                }
            }
        });
    }
}

<?php
/**
 * cronlock benchmark driver: one row, one round, one fresh process.
 * bench/run starts it; it is not meant to be called by hand, but can be:
 *
 *   php [-d extension=…/libcronlock.so] bench/bench.php cycle   ROW SECONDS
 *   php [-d extension=…/libcronlock.so] bench/bench.php count   ROW CYCLES   (for strace -c: no timing)
 *   php [-d extension=…/libcronlock.so] bench/bench.php handoff ROW SAMPLES
 *   php [-d extension=…/libcronlock.so] bench/bench.php wait    ROW SECONDS
 *
 * Environment: BENCH_EXT4_DIR, BENCH_TMPFS_DIR (lock file directories),
 * BENCH_REDIS_PORT (a redis-server on 127.0.0.1 started by bench/run),
 * BENCH_MYSQL_DSN, BENCH_PGSQL_DSN, BENCH_DB_USER, BENCH_DB_PASSWORD (MariaDB
 * and PostgreSQL servers on 127.0.0.1 started by bench/run through
 * bench/dbservers.php),
 * BENCH_ROUND (copied into the output, for per-round ratios).
 *
 * Prints one JSON line. A row that cannot run here prints {"na": "why"}.
 * No assertions on time: this only measures.
 */

declare(strict_types=1);

const SF_AUTOLOAD = '/usr/share/php/Symfony/Component/Lock/autoload.php';
const MALKUSCH_AUTOLOAD = '/usr/share/php/Malkusch/Lock/autoload.php';
const PREDIS_AUTOLOAD = '/usr/share/php/Predis/autoload.php';

/** Compare-and-delete, as every Redis lock how-to writes it. */
const LUA_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

final class NotAvailable extends Exception {}

function env(string $name): string
{
    $v = getenv($name);
    if ($v === false || $v === '') {
        throw new NotAvailable("$name not set");
    }
    return $v;
}

function ext4_file(string $name): string { return env('BENCH_EXT4_DIR') . "/$name.lock"; }
function tmpfs_file(string $name): string { return env('BENCH_TMPFS_DIR') . "/$name.lock"; }

function need_cronlock(string $class = 'CronLock\File'): void
{
    if (!extension_loaded('cronlock')) {
        throw new NotAvailable('cronlock extension not loaded');
    }
    if (!class_exists($class)) {
        throw new NotAvailable("$class not available");
    }
}

/** Loads a peer's Debian autoloader; without its package the row says n/a, naming the package. */
function need_peer(string $autoload, string $package): void
{
    if (!is_file($autoload)) {
        throw new NotAvailable("$package is not installed (apt-get install $package)");
    }
    require_once $autoload;
}

function phpredis(): Redis
{
    if (!class_exists('Redis')) {
        throw new NotAvailable('phpredis not loaded');
    }
    $r = new Redis();
    $r->connect('127.0.0.1', (int) env('BENCH_REDIS_PORT'));
    return $r;
}

function phpredis_on(int $port): Redis
{
    if (!class_exists('Redis')) {
        throw new NotAvailable('phpredis not loaded');
    }
    $r = new Redis();
    $r->connect('127.0.0.1', $port);
    return $r;
}

/** A plain TCP stream to a Redis server, for RESP written by hand. */
function raw_redis(int $port)
{
    $s = stream_socket_client("tcp://127.0.0.1:$port", $errno, $error, 2.0);
    if ($s === false) {
        throw new NotAvailable("Redis on port $port: $error");
    }
    stream_set_timeout($s, 2);
    return $s;
}

/** @return list<string> */
function ports(string $name): array
{
    return explode(',', env($name));
}

function cronlock_cycle(CronLock\Redis $lock): Closure
{
    return function () use ($lock): void {
        $lock->acquire();
        $lock->fencingToken();
        $lock->release();
    };
}

function predis(): Predis\Client
{
    need_peer(PREDIS_AUTOLOAD, 'php-predis');
    return new Predis\Client(['host' => '127.0.0.1', 'port' => (int) env('BENCH_REDIS_PORT')]);
}

function redis_dsn(): string
{
    return 'redis://127.0.0.1:' . env('BENCH_REDIS_PORT');
}

function db_pdo(string $kind): PDO
{
    $driver = $kind === 'mysql' ? 'pdo_mysql' : 'pdo_pgsql';
    if (!extension_loaded($driver)) {
        throw new NotAvailable("$driver not loaded");
    }
    return new PDO(db_dsn($kind), env('BENCH_DB_USER'), env('BENCH_DB_PASSWORD'), [PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION]);
}

function db_dsn(string $kind): string
{
    return env($kind === 'mysql' ? 'BENCH_MYSQL_DSN' : 'BENCH_PGSQL_DSN');
}

/** @return array<string, Closure(): Closure> the rows of one database kind */
function database_rows(string $kind): array
{
    [$lock, $unlock] = $kind === 'mysql'
        ? ['SELECT GET_LOCK(?, 0)', 'SELECT RELEASE_LOCK(?)']
        : ["SELECT pg_try_advisory_lock(('x' || left(md5(?), 16))::bit(64)::bigint)",
           "SELECT pg_advisory_unlock(('x' || left(md5(?), 16))::bit(64)::bigint)"];
    return [
        "$kind.floor" => function () use ($kind): Closure {
            $pdo = db_pdo($kind);
            // One round trip each: pdo_mysql emulates prepares, pdo_pgsql's
            // exec() is a plain PQexec (its query() would prepare first).
            return $kind === 'mysql'
                ? function () use ($pdo): void {
                    $pdo->query('SELECT 1')->fetchColumn();
                    $pdo->query('SELECT 1')->fetchColumn();
                }
                : function () use ($pdo): void {
                    $pdo->exec('SELECT 1');
                    $pdo->exec('SELECT 1');
                };
        },
        "$kind.pdo" => function () use ($kind, $lock, $unlock): Closure {
            $pdo = db_pdo($kind);
            $take = $pdo->prepare($lock);
            $give = $pdo->prepare($unlock);
            return function () use ($take, $give, $kind): void {
                $take->execute(["bench:$kind-pdo"]);
                $take->fetchColumn();
                $give->execute(["bench:$kind-pdo"]);
                $give->fetchColumn();
            };
        },
        "$kind.cronlock" => function () use ($kind): Closure {
            need_cronlock('CronLock\Database');
            db_pdo($kind);
            $lock = new CronLock\Database(db_dsn($kind), "bench:$kind-cronlock", ['user' => env('BENCH_DB_USER'), 'password' => env('BENCH_DB_PASSWORD')]);
            return function () use ($lock): void {
                $lock->acquire(0);
                $lock->release();
            };
        },
        "$kind.cronlock.pdo" => function () use ($kind): Closure {
            need_cronlock('CronLock\Database');
            $lock = new CronLock\Database(db_pdo($kind), "bench:$kind-cronlock-pdo");
            return function () use ($lock): void {
                $lock->acquire(0);
                $lock->release();
            };
        },
    ];
}

function token(): string
{
    return bin2hex(random_bytes(16));
}

/* ---------------------------------------------------------------------------
 * Cycle rows: each returns a closure doing ONE acquire+release cycle.
 * Setup (connections, autoloaders, factories) happens once, outside the timing.
 * ------------------------------------------------------------------------- */

/** @return array<string, callable(): Closure> */
function cycle_rows(): array
{
    return database_rows('mysql') + database_rows('pgsql') + [
        // File group ---------------------------------------------------------
        'file.floor' => function (): Closure {
            $h = fopen(ext4_file('floor'), 'c');
            return function () use ($h): void {
                flock($h, LOCK_EX | LOCK_NB);
                flock($h, LOCK_UN);
            };
        },
        'file.userland.ext4' => fn (): Closure => userland_file(ext4_file('userland')),
        'file.userland.tmpfs' => fn (): Closure => userland_file(tmpfs_file('userland')),
        'file.symfony' => function (): Closure {
            need_peer(SF_AUTOLOAD, 'php-symfony-lock');
            $factory = new Symfony\Component\Lock\LockFactory(
                new Symfony\Component\Lock\Store\FlockStore(env('BENCH_EXT4_DIR'))
            );
            return function () use ($factory): void {
                $lock = $factory->createLock('bench');
                $lock->acquire();
                $lock->release();
            };
        },
        'file.malkusch' => function (): Closure {
            need_peer(MALKUSCH_AUTOLOAD, 'php-malkusch-lock');
            $path = ext4_file('malkusch');
            return function () use ($path): void {
                $h = fopen($path, 'c');
                (new malkusch\lock\mutex\FlockMutex($h))->synchronized(static function (): void {});
                fclose($h);
            };
        },
        'file.cronlock.new' => function (): Closure {
            need_cronlock();
            $path = ext4_file('cronlock-new');
            return function () use ($path): void {
                $lock = new CronLock\File($path);
                $lock->acquire();
                $lock->release();
            };
        },
        'file.cronlock.new.tmpfs' => function (): Closure {
            need_cronlock();
            $path = tmpfs_file('cronlock-new');
            return function () use ($path): void {
                $lock = new CronLock\File($path);
                $lock->acquire();
                $lock->release();
            };
        },
        'file.cronlock.reused' => function (): Closure {
            need_cronlock();
            $lock = new CronLock\File(ext4_file('cronlock-reused'));
            return function () use ($lock): void {
                $lock->acquire();
                $lock->release();
            };
        },

        // Redis group --------------------------------------------------------
        'redis.floor' => function (): Closure {
            $r = phpredis();
            return function () use ($r): void {
                $r->ping();
                $r->ping();
            };
        },
        'redis.phpredis' => function (): Closure {
            $r = phpredis();
            return function () use ($r): void {
                $tok = token();
                $r->set('bench:phpredis', $tok, ['nx', 'ex' => 30]);
                $r->eval(LUA_RELEASE, ['bench:phpredis', $tok], 1);
            };
        },
        'redis.predis' => function (): Closure {
            $c = predis();
            $c->ping();
            return function () use ($c): void {
                $tok = token();
                $c->set('bench:predis', $tok, 'EX', 30, 'NX');
                $c->eval(LUA_RELEASE, 1, 'bench:predis', $tok);
            };
        },
        'redis.symfony' => function (): Closure {
            need_peer(SF_AUTOLOAD, 'php-symfony-lock');
            $factory = new Symfony\Component\Lock\LockFactory(
                new Symfony\Component\Lock\Store\RedisStore(phpredis())
            );
            return function () use ($factory): void {
                $lock = $factory->createLock('bench:symfony', 30);
                $lock->acquire();
                $lock->release();
            };
        },
        'redis.cronlock' => function (): Closure {
            need_cronlock('CronLock\Redis');
            $lock = new CronLock\Redis(redis_dsn(), 'bench:cronlock', 30.0);
            return function () use ($lock): void {
                $lock->acquire();
                $lock->fencingToken();
                $lock->release();
            };
        },
        // Redlock, Sentinel, Cluster: each against its own floor -------------
        'redlock.floor' => function (): Closure {
            // The masters asked at once, as cronlock asks them: each round
            // trip writes a PING to every master, then reads every PONG, so
            // a cycle costs one master's two round trips plus whatever the
            // slowest master adds. Raw RESP on plain sockets: no client
            // library can do it faster.
            $masters = array_map(static fn ($port) => raw_redis((int) $port), ports('BENCH_REDLOCK_PORTS'));
            return function () use ($masters): void {
                foreach ([1, 2] as $_) {
                    foreach ($masters as $s) {
                        fwrite($s, "PING\r\n");
                    }
                    foreach ($masters as $s) {
                        if (fgets($s) !== "+PONG\r\n") {
                            throw new RuntimeException('no PONG from a Redlock master');
                        }
                    }
                }
            };
        },
        'redlock.serial' => function (): Closure {
            $masters = array_map(static fn ($port) => phpredis_on((int) $port), ports('BENCH_REDLOCK_PORTS'));
            return function () use ($masters): void {
                foreach ([1, 2] as $_) {
                    foreach ($masters as $r) {
                        $r->ping();
                    }
                }
            };
        },
        'redlock.cronlock' => function (): Closure {
            need_cronlock('CronLock\Redis');
            $dsns = array_map(static fn ($port) => "redis://127.0.0.1:$port", ports('BENCH_REDLOCK_PORTS'));
            return cronlock_cycle(new CronLock\Redis($dsns, 'bench:cronlock', 30.0));
        },
        'sentinel.floor' => function (): Closure {
            // cronlock asks a sentinel on connect, after a failed or refused
            // call and on -READONLY only: a cycle talks to the master alone.
            $master = phpredis_on((int) env('BENCH_SENTINEL_MASTER_PORT'));
            return function () use ($master): void {
                $master->ping();
                $master->ping();
            };
        },
        'sentinel.asking' => function (): Closure {
            $sentinel = phpredis_on((int) ports('BENCH_SENTINEL_PORTS')[0]);
            $master = phpredis_on((int) env('BENCH_SENTINEL_MASTER_PORT'));
            return function () use ($sentinel, $master): void {
                foreach ([1, 2] as $_) {
                    $sentinel->ping();
                    $master->ping();
                }
            };
        },
        'sentinel.cronlock' => function (): Closure {
            need_cronlock('CronLock\Redis');
            return cronlock_cycle(new CronLock\Redis(env('BENCH_SENTINEL_DSN'), 'bench:cronlock', 30.0));
        },
        'cluster.floor' => function (): Closure {
            $owner = phpredis_on((int) env('BENCH_CLUSTER_OWNER_PORT'));
            return function () use ($owner): void {
                $owner->ping();
                $owner->ping();
            };
        },
        'cluster.cronlock' => function (): Closure {
            need_cronlock('CronLock\Redis');
            return cronlock_cycle(new CronLock\Redis(env('BENCH_CLUSTER_DSN'), 'bench:cronlock', 30.0));
        },
    ];
}

function userland_file(string $path): Closure
{
    // The pattern found in countless cron scripts.
    return function () use ($path): void {
        $h = fopen($path, 'c');
        if (flock($h, LOCK_EX | LOCK_NB)) {
            ftruncate($h, 0);
            fwrite($h, (string) getmypid());
            flock($h, LOCK_UN);
        }
        fclose($h);
    };
}

/**
 * For a database row: a closure that says how many statements the server
 * has run for the benchmark's login so far, by the server's own counters
 * (MariaDB: Questions, less the one SHOW that asks; PostgreSQL:
 * pg_stat_statements, which bench/dbservers.php loads; Redis: see
 * redis_command_counter()). Null otherwise.
 */
function statement_counter(string $row): ?Closure
{
    $kind = explode('.', $row)[0];
    if ($kind === 'redis') {
        return redis_command_counter();
    }
    if (!in_array($kind, ['mysql', 'pgsql'], true)) {
        return null;
    }
    try {
        $observer = db_pdo($kind);
        if ($kind === 'mysql') {
            return fn (): int => (int) $observer->query("SHOW GLOBAL STATUS LIKE 'Questions'")->fetch(PDO::FETCH_NUM)[1] - 1;
        }
        $observer->query('SELECT 1 FROM pg_stat_statements LIMIT 1');
        $me = $observer->query('SELECT pg_backend_pid()')->fetchColumn();
        // The observer's own statements run under the same login: left out
        // by their text.
        return fn (): int => (int) $observer->query("SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE userid = (SELECT usesysid FROM pg_stat_activity WHERE pid = $me) AND query NOT LIKE '%pg_stat_statements%'")->fetchColumn();
    } catch (PDOException $e) {
        return null; // counters not available: the row just has no count
    }
}

/**
 * For a Redis row: the server's INFO commandstats as [command => calls],
 * commands run inside scripts included (Redis counts them too), the
 * observer's own INFO left out.
 */
function redis_command_counter(): Closure
{
    $observer = phpredis();
    return static function () use ($observer): array {
        $calls = [];
        foreach ($observer->info('commandstats') as $name => $stats) {
            $command = strtolower(substr($name, strlen('cmdstat_')));
            if ($command !== 'info' && preg_match('/(?:^|,)calls=(\d+)/', $stats, $m)) {
                $calls[$command] = (int) $m[1];
            }
        }
        return $calls;
    };
}

function run_cycle(string $row, float $seconds): array
{
    $rows = cycle_rows();
    if (!isset($rows[$row])) {
        throw new InvalidArgumentException("unknown row $row");
    }
    $cycle = $rows[$row]();
    $counter = statement_counter($row);

    // Warm-up: a quarter of the budget (at least 20 cycles); it also sizes N.
    $warm = 0;
    $start = hrtime(true);
    do {
        $cycle();
        $warm++;
        $elapsed = hrtime(true) - $start;
    } while ($warm < 20 || $elapsed < $seconds * 0.25e9);
    $n = max(20, (int) ($seconds * 1e9 / ($elapsed / $warm)));

    $start = hrtime(true);
    for ($i = 0; $i < $n; $i++) {
        $cycle();
    }
    $ns = hrtime(true) - $start;
    $out = ['n' => $n, 'ns_per_cycle' => $ns / $n];

    // Statements per cycle, counted by the server, after the timing.
    if ($counter !== null) {
        $before = $counter();
        if (is_array($before)) {
            for ($i = 0; $i < 1000; $i++) {
                $cycle();
            }
            $after = $counter();
            $per = [];
            foreach ($after as $command => $calls) {
                if (($d = $calls - ($before[$command] ?? 0)) > 0) {
                    $per[$command] = $d / 1000;
                }
            }
            arsort($per);
            $out['commands_per_cycle'] = $per;
        } else {
            $idle = -$counter() + $counter();
            $before = $counter();
            for ($i = 0; $i < 200; $i++) {
                $cycle();
            }
            $out['statements_per_cycle'] = ($counter() - $before - $idle) / 200;
        }
    }
    return $out;
}

/** CYCLES cycles of a row, untimed: bench/syscalls.php counts their system calls. */
function run_count(string $row, int $cycles): array
{
    $rows = cycle_rows();
    if (!isset($rows[$row])) {
        throw new InvalidArgumentException("unknown row $row");
    }
    $cycle = $rows[$row]();
    for ($i = 0; $i < $cycles; $i++) {
        $cycle();
    }
    return ['n' => $cycles];
}

/* ---------------------------------------------------------------------------
 * Wait rows: what a waiter costs while the lock stays held. A forked holder
 * takes the lock; this process waits SECONDS (a timed wait that gives up,
 * or a blocking one that the holder ends by letting go after SECONDS) and
 * reports its own CPU time and context switches over the wait (getrusage).
 * ------------------------------------------------------------------------- */

/**
 * Per row: 'make' gives wait(seconds) for a lock file; 'timed': the wait gives
 * up at its timeout (the holder outlasts it), else the holder lets go then.
 *
 * @return array<string, array{timed: bool, make: callable(string): callable(float): bool}>
 */
function wait_rows(): array
{
    $cronlock = fn (bool $timed): array => ['timed' => $timed, 'make' => function (string $path) use ($timed): callable {
        need_cronlock();
        $lock = new CronLock\File($path);
        return fn (float $seconds): bool => $lock->acquire($timed ? $seconds : -1.0);
    }];
    return [
        // PHP's blocking flock(): what `flock -w` costs, the floor of waiting
        'wait.file.php.block' => ['timed' => false, 'make' => fn (string $path): callable => function (float $seconds) use ($path): bool {
            $h = fopen($path, 'c');
            return flock($h, LOCK_EX);
        }],
        'wait.file.cronlock.timed' => $cronlock(true),
        'wait.file.cronlock.forever' => $cronlock(false),
    ];
}

function run_wait(string $row, float $seconds): array
{
    $rows = wait_rows();
    if (!isset($rows[$row])) {
        throw new InvalidArgumentException("unknown row $row");
    }
    $path = ext4_file('wait-' . getmypid());
    $wait = $rows[$row]['make']($path);
    $holds = $rows[$row]['timed'] ? $seconds + 5.0 : $seconds;
    [$toHolder, $toWaiter] = stream_socket_pair(STREAM_PF_UNIX, STREAM_SOCK_STREAM, STREAM_IPPROTO_IP);
    $pid = pcntl_fork();
    if ($pid === 0) {                        // holder: holds for $seconds, or until told
        fclose($toHolder);
        $h = fopen($path, 'c');
        flock($h, LOCK_EX);
        fwrite($toWaiter, 'h');
        $r = [$toWaiter];
        $w = $e = null;
        stream_select($r, $w, $e, (int) $holds, (int) (fmod($holds, 1.0) * 1e6));
        flock($h, LOCK_UN);
        exit(0);
    }
    fclose($toWaiter);
    fread($toHolder, 1);                     // the holder holds it now
    $before = getrusage();
    $t0 = hrtime(true);
    $got = $wait($seconds);
    $ns = hrtime(true) - $t0;
    $after = getrusage();
    @fwrite($toHolder, 'q');                 // a holder that outlasts a timed wait lets go now
    pcntl_waitpid($pid, $status);
    @unlink($path);
    $cpu = fn (array $r): float => $r['ru_utime.tv_sec'] + $r['ru_utime.tv_usec'] / 1e6 + $r['ru_stime.tv_sec'] + $r['ru_stime.tv_usec'] / 1e6;
    return [
        'got' => $got,
        'wait_s' => $ns / 1e9,
        'cpu_s' => $cpu($after) - $cpu($before),
        'voluntary' => $after['ru_nvcsw'] - $before['ru_nvcsw'],
        'involuntary' => $after['ru_nivcsw'] - $before['ru_nivcsw'],
    ];
}

/* ---------------------------------------------------------------------------
 * Hand-off rows: holder releases -> waiter holds, two processes.
 * Each returns [try, wait, release] closures, built after fork (own fds and
 * connections per process), and the spread of the random hold time, which
 * must cover the waiter's poll period so the release lands at a random
 * phase of it.
 * ------------------------------------------------------------------------- */

const POLL_US = 100_000;  // the 100 ms poll of the userland waiters

/** @return array<string, array{spread_ms: int, make: callable(): array}> */
function handoff_rows(): array
{
    $userlandFile = function (bool $blocking): array {
        $h = fopen(ext4_file('handoff-userland'), 'c');
        $take = function () use ($h): bool {
            if (!flock($h, LOCK_EX | LOCK_NB)) {
                return false;
            }
            ftruncate($h, 0);
            fwrite($h, (string) getmypid());
            return true;
        };
        $wait = $blocking
            ? function () use ($h): void {
                flock($h, LOCK_EX);
                ftruncate($h, 0);
                fwrite($h, (string) getmypid());
            }
            : function () use ($take): void {
                while (!$take()) {
                    usleep(POLL_US);
                }
            };
        return [$take, $wait, fn () => flock($h, LOCK_UN)];
    };
    $cronlockFile = function (float $timeout): array {
        need_cronlock();
        $lock = new CronLock\File(ext4_file('handoff-cronlock'));
        return [
            fn () => $lock->acquire(),
            function () use ($lock, $timeout): void {
                if (!$lock->acquire($timeout)) {
                    throw new RuntimeException('waiter timed out');
                }
            },
            fn () => $lock->release(),
        ];
    };
    return [
        'handoff.file.userland.block' => ['spread_ms' => 25, 'make' => fn () => $userlandFile(true)],
        'handoff.file.userland.poll' => ['spread_ms' => 100, 'make' => fn () => $userlandFile(false)],
        'handoff.file.cronlock.timed' => ['spread_ms' => 25, 'make' => fn () => $cronlockFile(30.0)],
        'handoff.file.cronlock.forever' => ['spread_ms' => 25, 'make' => fn () => $cronlockFile(-1.0)],
        'handoff.redis.userland.poll' => ['spread_ms' => 100, 'make' => function (): array {
            $r = phpredis();
            $tok = token();
            $take = fn (): bool => (bool) $r->set('bench:handoff-userland', $tok, ['nx', 'ex' => 30]);
            return [
                $take,
                function () use ($take): void {
                    while (!$take()) {
                        usleep(POLL_US);
                    }
                },
                fn () => $r->eval(LUA_RELEASE, ['bench:handoff-userland', $tok], 1),
            ];
        }],
        'handoff.redis.cronlock' => ['spread_ms' => 50, 'make' => function (): array {
            need_cronlock('CronLock\Redis');
            $lock = new CronLock\Redis(redis_dsn(), 'bench:handoff-cronlock', 30.0);
            return [
                fn () => $lock->acquire(),
                function () use ($lock): void {
                    if (!$lock->acquire(30.0)) {
                        throw new RuntimeException('waiter timed out');
                    }
                },
                fn () => $lock->release(),
            ];
        }],
    ];
}

function run_handoff(string $row, int $samples): array
{
    $rows = handoff_rows();
    if (!isset($rows[$row])) {
        throw new InvalidArgumentException("unknown row $row");
    }
    ['spread_ms' => $spread, 'make' => $make] = $rows[$row];
    if (str_contains($row, '.cronlock')) {
        need_cronlock(str_contains($row, '.redis.') ? 'CronLock\Redis' : 'CronLock\File');
    }

    [$toWaiter, $toHolder] = stream_socket_pair(STREAM_PF_UNIX, STREAM_SOCK_STREAM, STREAM_IPPROTO_IP);
    $pid = pcntl_fork();
    if ($pid === 0) {                        // waiter
        fclose($toWaiter);
        [, $wait, $release] = $make();
        while (fread($toHolder, 1) === 'w') {
            $wait();
            $t1 = hrtime(true);              // the waiter holds the lock now
            $release();
            fwrite($toHolder, "$t1\n");
        }
        exit(0);
    }
    fclose($toHolder);
    [$try, , $release] = $make();
    $lat = [];
    for ($i = 0; $i < $samples; $i++) {
        while (!$try()) {                    // the waiter released already; retry is rare
            usleep(100);
        }
        fwrite($toWaiter, 'w');              // waiter starts waiting
        usleep(5000 + random_int(0, $spread * 1000));
        $t0 = hrtime(true);                  // the holder releases now
        $release();
        $line = fgets($toWaiter);
        if ($line === false) {
            throw new RuntimeException('waiter died');
        }
        $lat[] = (int) $line - $t0;
    }
    fwrite($toWaiter, 'q');
    pcntl_waitpid($pid, $status);
    return ['samples_ns' => $lat];
}

/* ------------------------------------------------------------------------- */

function main(array $argv): int
{
    [, $mode, $row, $arg] = $argv + [null, null, null, null];
    $out = ['mode' => $mode, 'row' => $row, 'ext' => extension_loaded('cronlock'),
        'round' => (int) getenv('BENCH_ROUND')];
    try {
        $out += match ($mode) {
            'cycle' => run_cycle($row, (float) $arg),
            'count' => run_count($row, (int) $arg),
            'handoff' => run_handoff($row, (int) $arg),
            'wait' => run_wait($row, (float) $arg),
            default => throw new InvalidArgumentException("usage: bench.php cycle|count|handoff|wait ROW ARG"),
        };
    } catch (NotAvailable $e) {
        $out['na'] = $e->getMessage();
    }
    echo json_encode($out), "\n";
    return 0;
}

exit(main($argv));

<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\Tests\Support\FileTestHelpers;
use CronLock\Tests\Support\Proc;
use CronLock\Tests\Support\RedisServer;
use CronLock\Tests\Support\RedisTestHelpers;
use CronLock\Tests\Support\WebAssembly;
use PHPUnit\Framework\TestCase;

/**
 * Redis holders that die cleanly (issue 17, item 2), with real processes and
 * a redis-server of our own, on the extension and on cronlock/polyfill: a
 * terminating signal releases the key and ends the process by that signal,
 * a script's own handler keeps priority, a fork child's signal leaves the
 * parent's key alone, kill -9 leaves a key that lives at most the lease,
 * the busy line says when its holder is not running on this host, and any
 * number of lease locks share one renewal thread (helper process) and one
 * renewal connection per server. The server's values are checked, never
 * how long something took.
 */
final class RedisSignalsTest extends TestCase
{
    use FileTestHelpers;
    use RedisTestHelpers;

    private string $dir;

    protected function setUp(): void
    {
        parent::setUp();
        if (WebAssembly::active()) {
            WebAssembly::skip('signals (no pcntl)');
        }
        if (!function_exists('pcntl_signal') || !function_exists('posix_kill')) {
            self::markTestSkipped('needs pcntl and posix, as every Debian PHP CLI has them');
        }
        $this->dir = $this->makeTempDir('redis-signals');
    }

    protected function tearDown(): void
    {
        $this->reapCommands();
        $this->removeTempDirs();
        parent::tearDown();
    }

    private static function key(): string
    {
        return 'signals:' . getmypid() . ':' . bin2hex(random_bytes(4));
    }

    /**
     * PHP that every child runs first: the default disposition for each terminating signal,
     * as cron gives a job (the test runner may run with some ignored: a background job of a
     * non-interactive shell ignores SIGINT and SIGQUIT), and no core dumps (SIGQUIT, SIGXCPU).
     */
    private const PRELUDE = <<<'PHP'
        foreach ([SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGALRM, SIGUSR1, SIGUSR2, SIGXCPU] as $signo) {
            pcntl_signal($signo, SIG_DFL);
        }
        posix_setrlimit(POSIX_RLIMIT_CORE, 0, 0);
        $lib = extension_loaded('cronlock') ? 'extension' : 'polyfill';
        PHP;

    /** PHP for `new CronLock\Redis(...)` in one of the modes: 'lease' (no $ttl), 'auto_renew' or 'ttl'. */
    private static function lockIn(string $mode, string $key): string
    {
        $dsn = self::$server->dsn();
        switch ($mode) {
            case 'lease':
                return sprintf('new \CronLock\Redis(%s, %s)', var_export($dsn, true), var_export($key, true));
            case 'auto_renew':
                return self::lockCode($dsn, $key, 30.0, ['auto_renew' => true]);
            default:
                return self::lockCode($dsn, $key, 60.0);
        }
    }

    /** A cron_guard() job that prints "HELD <token>" and sleeps; "DONE" if it ever wakes up. */
    private static function job(string $mode, string $key): string
    {
        return self::PRELUDE . "\n\$lock = " . self::lockIn($mode, $key) . ";\n" . <<<'PHP'
            cron_guard(function () use ($lock) {
                echo "HELD ", $lock->token(), "\n";
                sleep(60);
                echo "DONE\n";
            }, $lock);
            echo "AFTER\n";
            PHP;
    }

    private function keyExists(string $key): bool
    {
        return self::raw('EXISTS', $key) === 1;
    }

    public function testTimeoutEndsAGuardedJobWith124AndLeavesNoKey(): void
    {
        $key = self::key();
        // timeout(1) sends SIGTERM when its time is up; 3 s leave time for PHP to start.
        $p = Proc::startWrapped(['timeout', '3'], self::job('lease', $key));
        $p->waitForLine('HELD', 10.0, 'stdout');
        self::assertTrue($this->keyExists($key));
        self::assertSame(124, $p->wait(), $p->stdout() . $p->stderr());
        self::assertStringNotContainsString('DONE', $p->stdout());
        self::assertStringNotContainsString('AFTER', $p->stdout(), 'no PHP code ran after the signal');
        self::assertFalse($this->keyExists($key), 'the key was released');
    }

    /**
     * Linux's numbers, not pcntl's constants: the provider runs before any test
     * can skip, also where pcntl is missing (PHP on WebAssembly).
     */
    private const SIGNALS = ['SIGHUP' => 1, 'SIGINT' => 2, 'SIGQUIT' => 3, 'SIGUSR1' => 10, 'SIGUSR2' => 12,
        'SIGALRM' => 14, 'SIGTERM' => 15, 'SIGXCPU' => 24];

    /** @return iterable<string, array{0: int, 1: string}> */
    public static function signals(): iterable
    {
        foreach (['lease', 'auto_renew', 'ttl'] as $mode) {
            foreach (['SIGTERM', 'SIGHUP', 'SIGINT'] as $name) {
                yield "$name, $mode" => [self::SIGNALS[$name], $mode];
            }
        }
        foreach (['SIGQUIT', 'SIGALRM', 'SIGUSR1', 'SIGUSR2', 'SIGXCPU'] as $name) {
            yield "$name, lease" => [self::SIGNALS[$name], 'lease'];
        }
    }

    /** @dataProvider signals */
    public function testATerminatingSignalReleasesTheKeyAndEndsTheProcessByIt(int $signo, string $mode): void
    {
        $key = self::key();
        $code = self::job($mode, $key) . "\n" . 'register_shutdown_function(function () { echo "SHUTDOWN\n"; });';
        $p = Proc::start($code);
        $p->waitForLine('HELD', 10.0, 'stdout');
        self::assertTrue($this->keyExists($key));
        $p->signal($signo);
        self::assertSame(128 + $signo, $p->wait(), $p->stdout() . $p->stderr());
        self::assertSame($signo, $p->termSignal());
        self::assertStringNotContainsString('AFTER', $p->stdout(), 'no PHP code ran after the signal');
        self::assertFalse($this->keyExists($key), 'the key was released');
    }

    /** @return iterable<string, array{0: bool}> */
    public static function handlerPlacement(): iterable
    {
        yield 'installed before the hold' => [true];
        yield 'installed during the hold' => [false];
    }

    /**
     * A script's own handler runs and decides: the key stays held until its job returns, and
     * after the hold its handler is still the one that runs (ours is never put back over it).
     *
     * @dataProvider handlerPlacement
     */
    public function testAScriptsOwnHandlerStillRunsAndDecides(bool $before): void
    {
        $key = self::key();
        $go = "{$this->dir}/go";
        $install = <<<'PHP'
            pcntl_async_signals(true);
            pcntl_signal(SIGTERM, function () use (&$stops) { $stops++; echo "HANDLER $stops\n"; });
            PHP;
        $code = self::PRELUDE . "\n\$stops = 0;\n" . ($before ? $install : '') . "\n\$lock = " . self::lockIn('lease', $key) . ";\n"
            . sprintf(<<<'PHP'
                cron_guard(function () use ($lock, &$stops) {
                    %s
                    echo "HELD\n";
                    while ($stops === 0) { usleep(10000); }
                    while (!file_exists(%s)) { usleep(10000); }
                }, $lock);
                echo "RELEASED\n";
                while ($stops < 2) { usleep(10000); }
                echo "AFTER\n";
                PHP, $before ? '' : $install, var_export($go, true));
        $p = Proc::start($code);
        $p->waitForLine('HELD', 10.0, 'stdout');
        $p->signal(SIGTERM);
        $p->waitForLine('HANDLER 1', 10.0, 'stdout');
        self::assertTrue($p->isRunning());
        self::assertTrue($this->keyExists($key), 'the handler decides: the key is still held');
        touch($go);
        $p->waitForLine('RELEASED', 10.0, 'stdout');
        self::assertFalse($this->keyExists($key));
        $p->signal(SIGTERM);
        self::assertSame(0, $p->wait(), $p->stdout() . $p->stderr());
        self::assertStringContainsString("HANDLER 2\nAFTER\n", $p->stdout());
    }

    public function testAnIgnoredSignalStaysIgnored(): void
    {
        $key = self::key();
        $go = "{$this->dir}/go";
        $code = self::PRELUDE . "\npcntl_signal(SIGTERM, SIG_IGN);\n\$lock = " . self::lockIn('lease', $key) . ";\n"
            . sprintf(<<<'PHP'
                cron_guard(function () {
                    echo "HELD\n";
                    while (!file_exists(%1$s)) { usleep(10000); }
                    echo "STILL HERE\n";
                    while (!file_exists(%1$s . '.end')) { usleep(10000); }
                }, $lock);
                PHP, var_export($go, true));
        $p = Proc::start($code);
        $p->waitForLine('HELD', 10.0, 'stdout');
        $p->signal(SIGTERM);
        touch($go);
        $p->waitForLine('STILL HERE', 10.0, 'stdout');
        self::assertTrue($this->keyExists($key));
        touch("$go.end");
        self::assertSame(0, $p->wait(), $p->stdout() . $p->stderr());
        self::assertFalse($this->keyExists($key));
    }

    /**
     * SIG_IGN the process got from its parent (nohup for SIGHUP, a supervisor for SIGTERM) is
     * the script's choice as much as its own pcntl_signal(): with the extension the job goes on
     * and the key stays. PHP code cannot see an inherited SIG_IGN (PHP's own handler replaces
     * it at start-up and keeps it in a table pcntl does not read), so the polyfill treats the
     * signal as a default one: it releases the key and ends the process by the signal, never
     * leaving the job running without its lock (docs/polyfill.md).
     */
    public function testASignalIgnoredFromTheParentStaysIgnored(): void
    {
        $key = self::key();
        $go = "{$this->dir}/go";
        // Not self::PRELUDE: it puts SIG_DFL back, which is what this test must not do.
        $code = "\$lock = " . self::lockIn('lease', $key) . ";\n"
            . sprintf(<<<'PHP'
                cron_guard(function () {
                    echo "HELD\n";
                    while (!file_exists(%1$s)) { usleep(10000); }
                    echo "STILL HERE\n";
                }, $lock);
                echo "AFTER\n";
                PHP, var_export($go, true));
        $p = Proc::startWrapped(['bash', '-c', 'trap "" HUP TERM; exec "$@"', 'ignoring'], $code);
        $p->waitForLine('HELD', 10.0, 'stdout');
        $p->signal(self::SIGNALS['SIGHUP']);
        if (!extension_loaded('cronlock')) {
            self::assertSame(128 + self::SIGNALS['SIGHUP'], $p->wait(), $p->stdout() . $p->stderr());
            self::assertStringNotContainsString('STILL HERE', $p->stdout());
            self::assertFalse($this->keyExists($key), 'the key was released');
            return;
        }
        $p->signal(self::SIGNALS['SIGTERM']);
        usleep(300000);
        self::assertTrue($this->keyExists($key), 'the key stays held: ' . $p->stdout() . $p->stderr());
        touch($go);
        self::assertSame(0, $p->wait(), $p->stdout() . $p->stderr());
        self::assertStringContainsString("STILL HERE\nAFTER\n", $p->stdout());
        self::assertFalse($this->keyExists($key));
    }

    public function testAForkChildsSigtermLeavesTheParentsKeyAlone(): void
    {
        $key = self::key();
        $go = "{$this->dir}/go";
        $code = self::PRELUDE . "\n\$lock = " . self::lockIn('lease', $key) . ";\n" . sprintf(<<<'PHP'
            cron_guard(function () use ($lock) {
                echo "HELD ", $lock->token(), "\n";
                $child = pcntl_fork();
                if ($child === 0) {
                    echo "CHILD ", getmypid(), "\n";
                    sleep(60);
                    exit(0);
                }
                pcntl_waitpid($child, $status);
                echo "CHILD ENDED ", pcntl_wifsignaled($status) ? pcntl_wtermsig($status) : -1, "\n";
                while (!file_exists(%s)) { usleep(10000); }
            }, $lock);
            echo "RELEASED\n";
            PHP, var_export($go, true));
        $p = Proc::start($code);
        $token = substr($p->waitForLine('HELD', 10.0, 'stdout'), 5);
        $child = (int) substr($p->waitForLine('CHILD ', 10.0, 'stdout'), 6);
        self::assertTrue(posix_kill($child, SIGTERM));
        $p->waitForLine('CHILD ENDED', 10.0, 'stdout');
        self::assertStringContainsString('CHILD ENDED ' . SIGTERM, $p->stdout(), 'the child died of its signal');
        self::assertSame($token, self::raw('GET', $key), "the parent's key is untouched");
        touch($go);
        self::assertSame(0, $p->wait(), $p->stdout() . $p->stderr());
        self::assertStringContainsString('RELEASED', $p->stdout());
        self::assertFalse($this->keyExists($key));
    }

    /** @return iterable<string, array{0: string, 1: int}> */
    public static function kill9Bounds(): iterable
    {
        yield 'lease' => ['lease', 30000];
        yield 'auto_renew, $ttl 30 s' => ['auto_renew', 30000];
    }

    /** @dataProvider kill9Bounds */
    public function testKill9LeavesAKeyThatLivesAtMostTheLease(string $mode, int $boundMs): void
    {
        $key = self::key();
        $p = Proc::start(self::job($mode, $key));
        $p->waitForLine('HELD', 10.0, 'stdout');
        self::assertSame(128 + SIGKILL, $p->kill());
        $pttl = self::raw('PTTL', $key);
        self::assertGreaterThan(0, $pttl, 'a killed holder cannot release: the key waits for its TTL');
        self::assertLessThanOrEqual($boundMs, $pttl);
    }

    public function testTheBusyLineSaysTheHolderIsNotRunningOnThisHost(): void
    {
        $key = self::key();
        $holder = Proc::start(self::job('lease', $key));
        $holder->waitForLine('HELD', 10.0, 'stdout');
        $pid = $holder->pid();
        $holder->kill();
        $before = self::raw('PTTL', $key);
        $probe = Proc::run(self::PRELUDE . "\nini_set('error_log', '');\n"
            . 'var_dump(cron_guard(function () { echo "RAN\n"; }, ' . self::lockIn('lease', $key) . '));');
        $after = self::raw('PTTL', $key);
        self::assertSame(0, $probe->exitCode(), $probe->stdout() . $probe->stderr());
        self::assertSame("NULL\n", $probe->stdout());
        $pattern = sprintf("/^cron_guard: lock redis key '%s' at 127\\.0\\.0\\.1:%d is held by pid %d on %s "
            . "\\(not running on this host; the key expires in (\\d+) s\\); waited \\d+\\.\\d s; skipping this run$/m",
            preg_quote($key, '/'), self::$server->port(), $pid, preg_quote((string) gethostname(), '/'));
        self::assertMatchesRegularExpression($pattern, $probe->stderr());
        preg_match($pattern, $probe->stderr(), $m);
        // Rounded up to whole seconds, between what the server said before and after.
        self::assertGreaterThanOrEqual(intdiv($after + 999, 1000), (int) $m[1]);
        self::assertLessThanOrEqual(intdiv($before + 999, 1000), (int) $m[1]);
        self::assertSame(1, self::raw('EXISTS', $key), 'never deleted on that guess');
    }

    public function testALiveHolderOnThisHostIsNamedAsBefore(): void
    {
        $key = self::key();
        $holder = Proc::start(self::job('lease', $key));
        $holder->waitForLine('HELD', 10.0, 'stdout');
        $probe = Proc::run(self::PRELUDE . "\nini_set('error_log', '');\n"
            . 'var_dump(cron_guard(function () { echo "RAN\n"; }, ' . self::lockIn('lease', $key) . '));');
        // how long the busy acquire took is the machine's load, not the line's words
        self::assertSame(sprintf("cron_guard: lock redis key '%s' at 127.0.0.1:%d is held by pid %d on %s; waited 0.0 s; skipping this run\n",
            $key, self::$server->port(), $holder->pid(), gethostname()),
            preg_replace('/; waited \d+\.\d s;/', '; waited 0.0 s;', $probe->stderr()));
    }

    public function testAutoRenewFalseWithoutATtlIsRefused(): void
    {
        $p = Proc::run(<<<'PHP'
            try {
                new CronLock\Redis('redis://127.0.0.1:1', 'k', null, ['auto_renew' => false]);
            } catch (ValueError $e) {
                echo get_class($e), ': ', $e->getMessage(), "\n";
            }
            $lease = new CronLock\Redis('redis://127.0.0.1:1', 'k', null, ['auto_renew' => true]);
            echo "accepted\n";
            PHP);
        self::assertSame("ValueError: \$options['auto_renew'] must not be false without a \$ttl: the key is then held on a 30 s "
            . "lease that only renewal keeps; give a \$ttl to hold it without renewal\naccepted\n", $p->stdout(), $p->stderr());
    }

    public function testRenewWithoutArgumentExtendsALeaseToTheLease(): void
    {
        $key = self::key();
        $p = Proc::run(self::PRELUDE . "\n\$lock = " . self::lockIn('lease', $key) . ";\n" . self::rawClientCode() . <<<'PHP'
            $lock->acquire(0) or exit(2);
            $raw('PEXPIRE', $lock->key(), '5000');
            $lock->renew() or exit(3);
            echo $raw('PTTL', $lock->key()), "\n";
            PHP);
        self::assertSame(0, $p->exitCode(), $p->stdout() . $p->stderr());
        $pttl = (int) $p->stdout();
        self::assertGreaterThan(5000, $pttl);
        self::assertLessThanOrEqual(30000, $pttl);
    }

    /**
     * 300 lease locks on two servers in one process: one renewal thread (the polyfill: one
     * helper process), one connection per server that the locks share and one renewal
     * connection per server, however many locks. Counted
     * once the first renewal has gone out (10 s after the acquires).
     */
    public function testThreeHundredLeaseLocksShareOneRenewalThreadAndOneConnectionPerServer(): void
    {
        $other = RedisServer::start();
        try {
            $servers = [self::$server, $other];
            $clients = array_map(static fn (RedisServer $s) => count(self::clients($s)), $servers);
            $go = "{$this->dir}/go";
            $code = self::PRELUDE . sprintf(<<<'PHP'
                $tasks = fn () => count(glob('/proc/self/task/*'));
                $before = $tasks();
                $locks = [];
                foreach (%s as $i => $dsn) {
                    for ($n = 0; $n < 150; $n++) {
                        $lock = new CronLock\Redis($dsn, "many:$i:$n:" . getmypid());
                        $lock->acquire(0) or exit(2);
                        $locks[] = $lock;
                    }
                }
                echo "THREADS ", $tasks() - $before, "\n";
                echo "HELD\n";
                while (!file_exists(%s)) { usleep(20000); }
                PHP, var_export([self::$server->dsn(), $other->dsn()], true), var_export($go, true));
            $p = Proc::start($code);
            $threads = (int) substr($p->waitForLine('THREADS', 60.0, 'stdout'), 8);
            $p->waitForLine('HELD', 10.0, 'stdout');
            $renewals = array_map(static fn (RedisServer $s) => self::evalshaCalls($s), $servers);
            $extension = extension_loaded('cronlock'); // so is the child
            self::assertSame($extension ? 1 : 0, $threads, 'one renewal thread for all the locks (none on the polyfill)');
            if (!$extension) {
                self::assertCount(1, self::helpersOf($p->pid()), 'one renewal helper process for all the locks');
            }
            // Every lock renewed once: then the renewal connections are open.
            foreach ($servers as $i => $server) {
                $deadline = microtime(true) + 40;
                while (self::evalshaCalls($server) < $renewals[$i] + 150 && microtime(true) < $deadline) {
                    usleep(200000);
                }
                self::assertGreaterThanOrEqual($renewals[$i] + 150, self::evalshaCalls($server), 'every lock renewed');
                self::assertSame($clients[$i] + 1 + 1, count(self::clients($server)), "the 150 locks' one shared connection and one renewal connection on server $i");
            }
            touch($go);
            self::assertSame(0, $p->wait(), $p->stdout() . $p->stderr());
        } finally {
            $other->stop();
        }
    }

    /** @return list<string> the CLIENT LIST lines of $server, but our own connection's */
    private static function clients(RedisServer $server): array
    {
        $lines = array_filter(explode("\n", trim((string) $server->command('CLIENT', 'LIST'))));
        return array_values(array_filter($lines, static fn (string $line) => strpos($line, 'cmd=client|list') === false));
    }

    private static function evalshaCalls(RedisServer $server): int
    {
        preg_match('/^cmdstat_evalsha:calls=(\d+)/m', (string) $server->command('INFO', 'commandstats'), $m);
        return (int) ($m[1] ?? 0);
    }

    /** @return list<int> the pids of the renewal helpers whose parent is $pid */
    private static function helpersOf(int $pid): array
    {
        $found = [];
        foreach (glob('/proc/[0-9]*/stat') ?: [] as $stat) {
            $text = (string) @file_get_contents($stat);
            $paren = strrpos($text, ')');
            if ($paren === false || (int) explode(' ', substr($text, $paren + 2))[1] !== $pid) {
                continue;
            }
            $child = (int) basename(dirname($stat));
            if (strpos((string) @file_get_contents("/proc/$child/cmdline"), 'renew-helper.php') !== false) {
                $found[] = $child;
            }
        }
        return $found;
    }
}

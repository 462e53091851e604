<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\Tests\Support\FileTestHelpers;
use CronLock\Tests\Support\Proc;
use CronLock\Tests\Support\RedisTestHelpers;
use PHPUnit\Framework\TestCase;

/**
 * The extension and cronlock/polyfill exclude each other: processes of both
 * contend for one File path and one Redis key, and the counter they
 * increment under the lock must come out exact. Needs the built extension
 * ($CRONLOCK_EXT, exported by scripts/test) next to the polyfill, so it runs
 * in the extension's run and is skipped in the polyfill's.
 */
final class CrossImplementationTest extends TestCase
{
    use FileTestHelpers;
    use RedisTestHelpers;

    /** @var array{extension: array<string, string|false>, polyfill: array<string, string|false>} */
    private array $envs;

    protected function setUp(): void
    {
        parent::setUp();
        $ext = (string) getenv('CRONLOCK_EXT');
        if ($ext === '' || !is_file($ext)) {
            self::markTestSkipped('needs the built extension in $CRONLOCK_EXT (scripts/test sets it for the extension run)');
        }
        $extDir = $this->makeTempDir('ini-ext');
        file_put_contents("$extDir/cronlock.ini", "extension=$ext\n");
        $polyDir = $this->makeTempDir('ini-poly');
        file_put_contents("$polyDir/cronlock-polyfill.ini", 'auto_prepend_file=' . dirname(__DIR__) . "/polyfill/bootstrap.php\n");
        // ':' first keeps PHP's own conf.d (pcntl, posix, redis).
        $this->envs = [
            'extension' => ['PHP_INI_SCAN_DIR' => ":$extDir", 'CRONLOCK_EXT' => $ext],
            'polyfill' => ['PHP_INI_SCAN_DIR' => ":$polyDir", 'CRONLOCK_EXT' => false],
        ];
    }

    protected function tearDown(): void
    {
        $this->reapCommands();
        $this->removeTempDirs();
        parent::tearDown();
    }

    /** @return list<Proc> 4 children of each implementation, each printing READY, then WHO=<implementation> */
    private function contenders(string $lockCode, string $counter, string $go): array
    {
        $code = '$lock = ' . $lockCode . ";\n" . <<<'PHP'
            [$counter, $go] = [$argv[1], $argv[2]];
            echo "READY\n";
            while (!file_exists($go)) { usleep(500); }
            for ($i = 0; $i < 50; $i++) {
                if (!$lock->acquire(-1)) { echo "ACQUIRE FAILED\n"; exit(3); }
                $n = (int) file_get_contents($counter);
                usleep(200); // widen the window a missing exclusion would lose updates in
                file_put_contents($counter, (string) ($n + 1));
                if (!$lock->release()) { echo "RELEASE FAILED\n"; exit(4); }
            }
            echo "WHO=", extension_loaded('cronlock') ? 'extension' : 'polyfill', "\n";
            PHP;
        $procs = [];
        foreach (['extension', 'polyfill', 'extension', 'polyfill', 'extension', 'polyfill', 'extension', 'polyfill'] as $impl) {
            $procs[] = Proc::start($code, [$counter, $go], $this->envs[$impl]);
        }
        foreach ($procs as $p) {
            $p->waitForLine('READY', 15.0, 'stdout');
        }
        return $procs;
    }

    private function assertExactCount(array $procs, string $counter, string $go): void
    {
        touch($go);
        $who = [];
        foreach ($procs as $p) {
            self::assertSame(0, $p->wait(90.0), $p->stdout() . $p->stderr());
            $who[] = trim(substr($p->waitForLine('WHO=', 1.0, 'stdout'), 4));
        }
        sort($who);
        self::assertSame(['extension', 'extension', 'extension', 'extension', 'polyfill', 'polyfill', 'polyfill', 'polyfill'], $who);
        self::assertSame('400', file_get_contents($counter), 'every increment happened under the one lock');
    }

    public function testExtensionAndPolyfillProcessesShareOneFileLockExactly(): void
    {
        $dir = $this->makeTempDir('cross-file');
        $lockCode = 'new \CronLock\File(' . var_export("$dir/job.lock", true) . ')';
        file_put_contents("$dir/counter", '0');
        $this->assertExactCount($this->contenders($lockCode, "$dir/counter", "$dir/go"), "$dir/counter", "$dir/go");
    }

    public function testExtensionAndPolyfillProcessesShareOneRedisKeyExactly(): void
    {
        $dir = $this->makeTempDir('cross-redis');
        $key = 'cross-' . bin2hex(random_bytes(4));
        file_put_contents("$dir/counter", '0');
        $procs = $this->contenders(self::lockCode(self::$server->dsn(), $key, 5.0), "$dir/counter", "$dir/go");
        $this->assertExactCount($procs, "$dir/counter", "$dir/go");
        self::assertSame('400', (string) self::raw('GET', "$key:fence"), 'both INCR the one fencing counter');
    }

    /** @return iterable<string, array{string, string}> holder implementation, waiter implementation */
    public static function pairs(): iterable
    {
        yield 'extension holds, polyfill waits' => ['extension', 'polyfill'];
        yield 'polyfill holds, extension waits' => ['polyfill', 'extension'];
    }

    /** @dataProvider pairs */
    public function testEachSeesTheOthersHoldAndHolderRecord(string $holderImpl, string $waiterImpl): void
    {
        $dir = $this->makeTempDir('cross-busy');
        $path = "$dir/job.lock";
        $key = 'cross-busy-' . bin2hex(random_bytes(4));
        $holder = Proc::start(sprintf(<<<'PHP'
            $f = new \CronLock\File(%s);
            $r = new \CronLock\Redis(%s, %s, 30.0);
            if (!$f->acquire(0) || !$r->acquire(0)) { echo "BUSY\n"; exit(2); }
            echo "HELD ", getmypid(), "\n";
            while (!file_exists($argv[1])) { usleep(1000); }
            echo "RELEASED ", var_export($f->release() && $r->release(), true), "\n";
            PHP, var_export($path, true), var_export(self::$server->dsn(), true), var_export($key, true)), ["$dir/stop"], $this->envs[$holderImpl]);
        $pid = (int) substr($holder->waitForLine('HELD', 15.0, 'stdout'), 5);

        $probe = sprintf(<<<'PHP'
            $f = new \CronLock\File(%s);
            $r = new \CronLock\Redis(%s, %s, 30.0);
            $holder = $f->holderPid(); // before we take it ourselves
            printf("file=%%s redis=%%s holder=%%s\n", var_export($f->acquire(0.2), true), var_export($r->acquire(0.2), true), var_export($holder, true));
            PHP, var_export($path, true), var_export(self::$server->dsn(), true), var_export($key, true));
        $busy = Proc::run($probe, [], $this->envs[$waiterImpl]);
        self::assertSame("file=false redis=false holder=$pid\n", $busy->stdout(), $busy->stderr());
        self::assertStringStartsWith("cronlock pid=$pid host=", (string) file_get_contents($path), 'the same 128-byte holder record');
        self::assertSame(128, filesize($path));

        touch("$dir/stop");
        self::assertStringContainsString('RELEASED true', $holder->waitForLine('RELEASED', 10.0, 'stdout'));
        self::assertSame(0, $holder->wait());
        $free = Proc::run($probe, [], $this->envs[$waiterImpl]);
        self::assertSame("file=true redis=true holder=NULL\n", $free->stdout(), $free->stderr());
    }
}

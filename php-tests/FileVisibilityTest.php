<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\File;
use CronLock\LockException;
use CronLock\Tests\Support\FileTestHelpers;
use CronLock\Tests\Support\Proc;
use CronLock\Tests\Support\WebAssembly;
use PHPUnit\Framework\TestCase;

/**
 * What an operator sees of a File lock with the classic tools, on both
 * implementations: `cat` of the file (the holder's record while held, a
 * free record once released), holder(), the descriptors fuser and lsof
 * list, the waiters /proc/locks and lslocks list, and what a wait costs
 * (counted in context switches, never timed).
 */
final class FileVisibilityTest extends TestCase
{
    use FileTestHelpers;

    private const FLOCK = '/usr/bin/flock';
    private const DATE = '\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ';

    private string $dir;

    protected function setUp(): void
    {
        parent::setUp();
        $this->dir = $this->makeTempDir('file-visibility');
    }

    protected function tearDown(): void
    {
        $this->reapCommands();
        $this->removeTempDirs();
        parent::tearDown();
    }

    /** A PHP child holding $path through CronLock\File until $stop exists; prints HELD, then RELEASED. */
    private function startHolder(string $path, string $stop): Proc
    {
        $p = Proc::start(sprintf(<<<'PHP'
            $lock = new \CronLock\File(%s);
            if (!$lock->acquire(0)) { echo "BUSY\n"; exit(2); }
            echo "HELD\n";
            while (!file_exists(%s)) { usleep(1000); }
            $lock->release();
            echo "RELEASED\n";
            while (true) { sleep(1); } // alive, the object too: only the kernel says free
            PHP, var_export($path, true), var_export($stop, true)));
        $p->waitForLine('HELD', 15.0, 'stdout');
        return $p;
    }

    /** Lines of /proc/locks for the file at $path: [holders, blocked waiters]. */
    private static function kernelLocks(string $path): array
    {
        clearstatcache(true, $path);
        $st = stat($path);
        $dev = $st['dev'];
        $key = sprintf(' %02x:%02x:%d ', (($dev >> 8) & 0xfff) | (($dev >> 32) & ~0xfff), ($dev & 0xff) | (($dev >> 12) & ~0xff), $st['ino']);
        $holders = $waiters = 0;
        foreach (explode("\n", (string) file_get_contents('/proc/locks')) as $line) {
            if (strpos($line, ' FLOCK ') !== false && strpos($line, $key) !== false) {
                strpos($line, '-> FLOCK') !== false ? $waiters++ : $holders++;
            }
        }
        return [$holders, $waiters];
    }

    /** How many descriptors of process $pid are open on $path's file (what fuser and lsof find). */
    private static function descriptorsOn(string $path, int $pid): int
    {
        clearstatcache(true); // and the realpath cache: under ZTS PHP resolves /proc/self/fd/N through it, to a file closed since
        $want = stat($path);
        $n = 0;
        foreach (scandir("/proc/$pid/fd") ?: [] as $fd) {
            $st = @stat("/proc/$pid/fd/$fd");
            if ($fd !== '.' && $fd !== '..' && $st !== false && $st['dev'] === $want['dev'] && $st['ino'] === $want['ino']) {
                $n++;
            }
        }
        return $n;
    }

    // ------------------------------------------------------------ the record

    public function testTheFileNamesItsHolderWhileHeldAndSaysFreeOnceReleased(): void
    {
        $path = "{$this->dir}/job.lock";
        $stop = "{$this->dir}/stop";
        $holder = $this->startHolder($path, $stop);
        $host = substr((string) preg_replace('/[^!-~]/', '', (string) gethostname()), 0, 64);
        $held = (string) file_get_contents($path);
        self::assertMatchesRegularExpression('/\Acronlock pid=' . $holder->pid() . ' host=' . preg_quote($host, '/') . ' since=' . self::DATE . ' *\n\z/', $held);
        $before = time();
        touch($stop);
        $holder->waitForLine('RELEASED', 10.0, 'stdout');
        $free = (string) file_get_contents($path);
        self::assertSame(128, strlen($free), 'in place, the same size');
        self::assertMatchesRegularExpression('/\Acronlock free since=(' . self::DATE . ') {87}\n\z/', $free, '`cat` names no process once released');
        preg_match('/since=(\S+)/', $free, $m);
        self::assertGreaterThanOrEqual($before - 1, (new \DateTimeImmutable($m[1]))->getTimestamp());
        self::assertTrue($this->isFree($path));
        $holder->kill();

        // kill -9 leaves the holder's record: only the kernel knows it is free
        unlink($stop);
        $killed = $this->startHolder($path, $stop);
        $killed->kill();
        self::assertStringStartsWith("cronlock pid={$killed->pid()} ", (string) file_get_contents($path));
        self::assertTrue($this->isFree($path));
        if (!WebAssembly::active()) {
            self::assertNull((new File($path))->holder(), 'the kernel lists no holder');
        }
    }

    // ------------------------------------------------------------ holder()

    public function testHolderNamesTheRecordedHolderABarePidOrAnUnknownProcess(): void
    {
        WebAssembly::skip('no /proc/locks (php-wasm has its own /proc): holder() throws');
        if (!is_executable(self::FLOCK)) {
            self::markTestSkipped('util-linux flock(1) is not installed at ' . self::FLOCK);
        }
        $path = "{$this->dir}/who.lock";
        $observer = new File($path);
        self::assertNull($observer->holder(), 'never held');

        $stop = "{$this->dir}/stop";
        $holder = $this->startHolder($path, $stop);
        preg_match('/ host=(\S+) since=(\S+)/', (string) file_get_contents($path), $m);
        self::assertSame("pid {$holder->pid()} on {$m[1]} since {$m[2]}", $observer->holder(), 'the record, as the kernel lists its pid');
        self::assertSame($holder->pid(), $observer->holderPid(), 'holderPid() names the same process');
        touch($stop);
        $holder->waitForLine('RELEASED', 10.0, 'stdout');
        self::assertNull($observer->holder(), 'released, the releasing object still alive');
        $holder->kill();

        // flock(1) writes no record (the free record stays): the kernel's pid
        $ready = "{$this->dir}/flock-ready";
        $done = "{$this->dir}/flock-done";
        $h = $this->startCommand([self::FLOCK, '-x', '-n', $path, '-c',
            sprintf('touch %s; s=%s; while [ ! -e "$s" ] && [ -d "${s%%/*}" ]; do sleep 0.02; done', escapeshellarg($ready), escapeshellarg($done))]);
        self::waitUntil(fn () => file_exists($ready) || $this->commandExitCode($h) !== null, 'flock(1) to take the lock');
        self::assertSame('pid ' . $this->commandPid($h), $observer->holder());
        self::assertSame($this->commandPid($h), $observer->holderPid());
        touch($done);
        self::assertSame(0, $this->finishCommand($h)[0]);

        // the locker died and a shell's child kept its descriptor: held, by no nameable process
        $locked = "{$this->dir}/locked";
        $h = $this->startCommand(['sh', '-c', sprintf('exec 9>>%s; %s -n 9 || exit 1; : > %s; exec sleep 30', escapeshellarg($path), self::FLOCK, escapeshellarg($locked))]);
        self::waitUntil(fn () => file_exists($locked) || $this->commandExitCode($h) !== null, 'the orphaned lock');
        self::assertSame('an unknown process', $observer->holder());
        self::assertNull($observer->holderPid());
        $this->killCommand($h);

        // this process, through another object
        $mine = new File($path);
        self::assertTrue($mine->acquire(0));
        preg_match('/ host=(\S+) since=(\S+)/', (string) file_get_contents($path), $m);
        self::assertSame('pid ' . getmypid() . " on {$m[1]} since {$m[2]}", $observer->holder());
        self::assertSame($observer->holder(), $mine->holder());
        self::assertTrue($mine->release());
        self::assertNull($mine->holder());
    }

    public function testHolderNeverLocksNorWrites(): void
    {
        WebAssembly::skip('no /proc/locks (php-wasm has its own /proc): holder() throws');
        $path = "{$this->dir}/quiet.lock";
        $lock = new File($path);
        self::assertTrue($lock->acquire(0));
        $lock->release();
        clearstatcache(true); // and the realpath cache: under ZTS PHP resolves /proc/self/fd/N through it, to a file closed since
        $content = file_get_contents($path);
        $mtime = filemtime($path);
        $observer = new File($path);
        for ($i = 0; $i < 50; $i++) {
            self::assertNull($observer->holder());
        }
        self::assertSame([0, 0], self::kernelLocks($path), 'holder() took no lock');
        clearstatcache(true); // and the realpath cache: under ZTS PHP resolves /proc/self/fd/N through it, to a file closed since
        self::assertSame($content, file_get_contents($path));
        self::assertSame($mtime, filemtime($path));
        self::assertFalse($observer->isHeld());
    }

    /** Linux without /proc mounted: holder() throws, in the same words for both implementations. */
    public function testHolderOnAHostWithoutProcLocksSaysSo(): void
    {
        WebAssembly::skip('no proc_open() of a shell');
        if (posix_geteuid() !== 0 || !is_executable('/usr/bin/unshare')) {
            self::markTestSkipped('needs root and unshare(1) to hide /proc in a private mount namespace');
        }
        $path = "{$this->dir}/noproc.lock";
        $script = "{$this->dir}/holder.php";
        file_put_contents($script, sprintf('<?php try { (new CronLock\File(%s))->holder(); echo "NO THROW\n"; } catch (CronLock\LockException $e) { echo $e->getMessage(), "\n"; }', var_export($path, true)));
        $php = implode(' ', array_map('escapeshellarg', self::phpCommand()));
        [$code, $out, $err] = $this->runCommand(['unshare', '--mount', '--propagation', 'private', 'sh', '-c',
            'mount -t tmpfs -o size=1m cronlock-noproc /proc && exec ' . $php . ' ' . escapeshellarg($script)]);
        self::assertSame(0, $code, $err);
        self::assertSame("cannot tell who holds lock file $path: the kernel's list of locks cannot be read (/proc/locks: No such file or directory)\n", $out, $err);
    }

    // ------------------------------------------------------------ descriptors

    public function testOnlyALiveLockObjectKeepsItsFileOpen(): void
    {
        WebAssembly::skip('php-wasm has its own /proc');
        $path = "{$this->dir}/fd.lock";
        $lock = new File($path);
        self::assertTrue($lock->acquire(0));
        self::assertTrue($lock->release());
        self::assertSame(1, self::descriptorsOn($path, getmypid()), 'a live object keeps its (unlocked) descriptor');
        unset($lock);
        self::assertSame(0, self::descriptorsOn($path, getmypid()), 'a destroyed one keeps nothing: fuser and lsof list nobody');

        for ($i = 0; $i < 20; $i++) {
            $lock = new File($path);
            self::assertTrue($lock->acquire(0));
            unset($lock);
        }
        self::assertSame(0, self::descriptorsOn($path, getmypid()), 'no cache of dropped objects');

        putenv("CRONLOCK_LOCK_DIR={$this->dir}");
        ini_set('cronlock.lock_dir', $this->dir);
        try {
            $inside = cron_guard(fn () => self::descriptorsOn("{$this->dir}/named.lock", getmypid()), 'named');
        } finally {
            putenv('CRONLOCK_LOCK_DIR');
            ini_restore('cronlock.lock_dir');
        }
        self::assertSame(1, $inside);
        self::assertSame(0, self::descriptorsOn("{$this->dir}/named.lock", getmypid()), 'cron_guard() with a name keeps nothing open once it returns');
    }

    public function testFuserListsOnlyProcessesThatHoldWaitOrKeepALiveObject(): void
    {
        WebAssembly::skip('no proc_open() of fuser');
        if (!is_executable('/usr/bin/fuser')) {
            self::markTestSkipped('fuser (psmisc) is not installed');
        }
        $path = "{$this->dir}/fuser.lock";
        $stop = "{$this->dir}/stop";
        $worker = Proc::start(sprintf(<<<'PHP'
            for ($i = 0; $i < 5; $i++) {
                $lock = new \CronLock\File(%s);
                $lock->acquire(0);
                unset($lock);
                cron_guard(function () {}, 'job');
            }
            echo "IDLE\n";
            while (!file_exists(%s)) { usleep(1000); }
            PHP, var_export($path, true), var_export($stop, true)), [], ['CRONLOCK_LOCK_DIR' => $this->dir]);
        $worker->waitForLine('IDLE', 15.0, 'stdout');
        [, $out, $err] = $this->runCommand(['/usr/bin/fuser', $path, "{$this->dir}/job.lock"]);
        self::assertStringNotContainsString((string) $worker->pid(), $out . $err, 'an idle worker that used the locks is not listed');

        $holder = $this->startHolder($path, $stop);
        [, $out] = $this->runCommand(['/usr/bin/fuser', $path]);
        self::assertSame([(string) $holder->pid()], preg_split('/\s+/', trim($out)), 'only the holder');
        touch($stop);
        $holder->kill();
        $worker->kill();
    }

    /** Many lock objects and guards under a low descriptor limit: none is left open, none fails. */
    public function testLocksUnderALowDescriptorLimit(): void
    {
        WebAssembly::skip('no proc_open() of a shell');
        $script = "{$this->dir}/many.php";
        file_put_contents($script, sprintf(<<<'PHP'
            <?php
            for ($i = 0; $i < 300; $i++) {
                $lock = new \CronLock\File(%s . "/file-$i.lock");
                if (!$lock->acquire(0)) { echo "BUSY $i\n"; exit(1); }
                if ($i %% 2) { $lock->release(); }
                unset($lock);
                if (cron_guard(fn () => 'ran', "guard-$i") !== 'ran') { echo "GUARD $i\n"; exit(1); }
            }
            echo "OK\n";
            PHP, var_export($this->dir, true)));
        $php = implode(' ', array_map('escapeshellarg', self::phpCommand()));
        [$code, $out, $err] = $this->runCommand(['sh', '-c', 'ulimit -n 24 && exec ' . $php . ' ' . escapeshellarg($script)], 60.0, ['CRONLOCK_LOCK_DIR' => $this->dir] + getenv());
        self::assertSame([0, "OK\n"], [$code, $out], $err);
    }

    // ------------------------------------------------------------ waiters

    /** @return iterable<string, array{float}> */
    public static function waits(): iterable
    {
        yield 'wait forever' => [-1.0];
        yield 'timed wait' => [30.0];
    }

    /**
     * A waiter blocks in flock(2): the kernel lists it, as it lists `flock -w`
     * (so lslocks and `cronlock status` see it), and hands it the lock when the
     * holder lets go. cronlock/polyfill blocks so only in a wait forever with no
     * pcntl handler installed (PHP has no flock() with a timeout): its timed
     * wait polls, unseen.
     *
     * @dataProvider waits
     */
    public function testAWaiterIsListedByTheKernel(float $timeout): void
    {
        WebAssembly::skip('php-wasm has its own /proc');
        $path = "{$this->dir}/wait.lock";
        $stop = "{$this->dir}/stop";
        $holder = $this->startHolder($path, $stop);
        $waiter = Proc::start(sprintf(<<<'PHP'
            $lock = new \CronLock\File(%s);
            echo "WAITING\n";
            echo "GOT ", var_export($lock->acquire(%s), true), "\n";
            PHP, var_export($path, true), var_export($timeout, true)));
        $waiter->waitForLine('WAITING', 15.0, 'stdout');
        $blocks = extension_loaded('cronlock') || $timeout < 0;
        if ($blocks) {
            self::waitUntil(fn () => self::kernelLocks($path) === [1, 1], 'the waiter in /proc/locks');
        } else {
            usleep(300_000);
            self::assertSame([1, 0], self::kernelLocks($path), 'cronlock/polyfill polls a timed wait: the kernel does not list it');
        }
        touch($stop);
        self::assertSame('GOT true', trim($waiter->waitForLine('GOT', 10.0, 'stdout')));
        $holder->kill();
    }

    /**
     * A wait costs about ten wake-ups a second whatever its timeout (counted in
     * the waiter's context switches, not timed): a poll every millisecond would
     * switch a thousand times a second.
     *
     * @dataProvider waits
     */
    public function testAWaitWakesAboutTenTimesASecond(float $timeout): void
    {
        WebAssembly::skip('php-wasm has its own /proc');
        if (!extension_loaded('cronlock') && $timeout > 0) {
            self::markTestSkipped('cronlock/polyfill polls a timed wait (PHP has no flock() with a timeout): docs/polyfill.md');
        }
        $path = "{$this->dir}/cost.lock";
        $stop = "{$this->dir}/stop";
        $holder = $this->startHolder($path, $stop);
        $waiter = Proc::start(sprintf(<<<'PHP'
            $switches = function () {
                preg_match('/^voluntary_ctxt_switches:\s+(\d+)/m', file_get_contents('/proc/self/status'), $m);
                return (int) $m[1];
            };
            $lock = new \CronLock\File(%s);
            $before = $switches();
            echo "WAITING\n";
            $got = $lock->acquire(%s);
            printf("GOT %%s after %%d switches\n", var_export($got, true), $switches() - $before);
            PHP, var_export($path, true), var_export($timeout, true)));
        $waiter->waitForLine('WAITING', 15.0, 'stdout');
        self::waitUntil(fn () => self::kernelLocks($path)[1] === 1, 'the waiter to block');
        usleep(2_000_000);
        touch($stop);
        $line = trim($waiter->waitForLine('GOT', 10.0, 'stdout'));
        self::assertSame(1, preg_match('/\AGOT true after (\d+) switches\z/', $line, $m), $line);
        self::note("a wait of about 2 s: {$m[1]} context switches");
        self::assertLessThan(150, (int) $m[1], 'about 10 wake-ups a second, not a poll every millisecond');
        $holder->kill();
    }

    /**
     * D9 for a timed wait that blocks in flock(2): a pcntl handler (restart_syscalls
     * left true, as usual) runs during the wait, which returns false at once.
     */
    public function testASignalHandlerRunsDuringATimedWait(): void
    {
        if (!function_exists('pcntl_signal')) {
            self::markTestSkipped('needs ext-pcntl');
        }
        $path = "{$this->dir}/signal.lock";
        $stop = "{$this->dir}/stop";
        $holder = $this->startHolder($path, $stop);
        $w = Proc::start(sprintf(<<<'PHP'
            pcntl_async_signals(true);
            pcntl_signal(SIGUSR1, function () { echo "HANDLER\n"; });
            $lock = new \CronLock\File(%s);
            echo "WAITING\n";
            $got = $lock->acquire(60.0);
            echo "RETURNED ", var_export($got, true), "\n";
            PHP, var_export($path, true)));
        $w->waitForLine('WAITING', 15.0, 'stdout');
        usleep(300_000);
        $w->signal(SIGUSR1);
        $w->waitForLine('RETURNED', 10.0, 'stdout');
        self::assertSame(0, $w->wait(10.0), $w->stderr());
        self::assertSame("WAITING\nHANDLER\nRETURNED false\n", $w->stdout(), 'the handler ran in the wait, which returned false long before its 60 s');
        touch($stop);
        $holder->kill();
    }
}

<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\File;
use CronLock\LockException;
use CronLock\Tests\Support\FileTestHelpers;
use CronLock\Tests\Support\MountNamespace;
use CronLock\Tests\Support\Proc;
use CronLock\Tests\Support\WebAssembly;
use PHPUnit\Framework\TestCase;

/**
 * CronLock\File where outside testing found double holds, hangs, data loss
 * and wrong answers: acquire() on a held lock, two objects on one file in
 * one thread, __construct() again, serialize, the holder line over user
 * data, relative paths, holderPid() on tmpfs and with orphaned descriptors,
 * lock files owned by other users, and waits a signal must cut short.
 * Real files, real processes, a second user (runuser) where it matters.
 */
final class FileLockSafetyTest extends TestCase
{
    use FileTestHelpers;

    private const FLOCK = '/usr/bin/flock';

    private string $dir;
    /** @var list<string> */
    private array $mounts = [];

    protected function setUp(): void
    {
        parent::setUp();
        $this->dir = $this->makeTempDir('file-safety');
    }

    protected function tearDown(): void
    {
        $this->reapCommands();
        foreach ($this->mounts as $mount) {
            $this->runCommand(['umount', '-l', $mount]);
        }
        $this->removeTempDirs();
        parent::tearDown();
    }

    /** A PHP child holding $path (CronLock\File) until killed. */
    private static function startHolder(string $path): Proc
    {
        $p = Proc::start(sprintf(<<<'PHP'
            $lock = new \CronLock\File(%s);
            echo $lock->acquire(0) ? "HELD\n" : "BUSY\n";
            sleep(60);
            PHP, var_export($path, true)));
        $p->waitForLine('HELD', 15.0, 'stdout');
        return $p;
    }

    // ------------------------------------------------ acquire() on a held lock

    public function testAcquireOnAHeldLockConfirmsWithoutCounting(): void
    {
        $path = "{$this->dir}/count.lock";
        $lock = new File($path);
        self::assertTrue($lock->acquire(0));
        self::assertTrue($lock->acquire(-1), 'held and still named by the path: true at once');
        self::assertTrue($lock->renew());
        self::assertTrue($lock->release(), 'one release() ...');
        self::assertFalse($lock->isHeld());
        self::assertSame(0, $this->runCommand([self::FLOCK, '-n', $path, 'true'])[0], '... frees it for everyone');
    }

    // ---------------------------------------- two objects, one file, one thread

    public function testASecondObjectOnAFileThisThreadHoldsIsBusyAtOnceAndAWaitThrows(): void
    {
        WebAssembly::skip('no link() ("Too many links")');
        $path = "{$this->dir}/self.lock";
        touch($path);
        link($path, "{$this->dir}/hardlink.lock"); // same device and inode
        // In a child: on a build without this protection the waits hang.
        $p = Proc::run(sprintf(<<<'PHP'
            $first = new \CronLock\File(%s);
            var_dump($first->acquire(0));
            foreach ([%s, %s] as $path) {
                $second = new \CronLock\File($path);
                var_dump($second->acquire(0));
                foreach ([-1, 5.0] as $timeout) {
                    $t0 = microtime(true);
                    try {
                        $second->acquire($timeout);
                        echo "NO EXCEPTION\n";
                    } catch (\CronLock\LockException $e) {
                        printf("%%s after %%.1f s\n", $e->getMessage(), microtime(true) - $t0);
                    }
                }
            }
            $first->release();
            var_dump($second->acquire(-1));
            PHP, var_export($path, true), var_export($path, true), var_export("{$this->dir}/hardlink.lock", true)), [], [], 20.0);
        $out = $p->stdout();
        self::assertSame(0, $p->exitCode(), $out . $p->stderr());
        self::assertSame(4, substr_count($out, 'bool('), $out);
        self::assertStringStartsWith("bool(true)\nbool(false)\n", $out);
        self::assertStringEndsWith("bool(true)\n", $out);
        self::assertStringNotContainsString('NO EXCEPTION', $out);
        self::assertSame(4, preg_match_all(
            '#^lock file \S+\.lock is already held by this process \(pid \d+\) through another CronLock\\\\File object; waiting for it would deadlock after 0\.\d s$#m',
            $out
        ), $out);
    }

    // ------------------------------------------------------------ __construct

    public function testConstructingAgainThrowsAndChangesNothing(): void
    {
        $path = "{$this->dir}/first.lock";
        $lock = new File($path);
        self::assertTrue($lock->acquire(0));
        try {
            $lock->__construct("{$this->dir}/second.lock");
            self::fail('a second __construct() must throw');
        } catch (\Error $e) {
            self::assertSame('Cannot call CronLock\File::__construct() twice', $e->getMessage());
        }
        self::assertSame($path, $lock->path());
        self::assertTrue($lock->isHeld());
        self::assertSame(1, $this->runCommand([self::FLOCK, '-n', $path, 'true'])[0], 'still held');
        self::assertFileDoesNotExist("{$this->dir}/second.lock");
        self::assertTrue($lock->release());
    }

    public function testSerializingOrUnserializingThrowsLockExceptionAndCloneIsRefused(): void
    {
        $lock = new File("{$this->dir}/s.lock");
        $guard = null;
        cron_guard(function (\CronLock\Guard $g) use (&$guard) {
            $guard = $g;
        }, $lock);
        foreach (['CronLock\File' => $lock, 'CronLock\Guard' => $guard] as $class => $object) {
            try {
                serialize($object);
                self::fail("serialize($class) must throw");
            } catch (LockException $e) {
                self::assertSame("a $class cannot be serialized: a lock belongs to the process that holds it", $e->getMessage());
            }
            try {
                unserialize(sprintf('O:%d:"%s":0:{}', strlen($class), $class));
                self::fail("unserialize($class) must throw");
            } catch (LockException $e) {
                self::assertStringContainsString("a $class cannot be serialized", $e->getMessage());
            }
        }
        self::assertTrue($lock->acquire(0));
        try {
            $copy = clone $lock;
            self::fail('clone must throw');
        } catch (\Error $e) {
            self::assertSame('Trying to clone an uncloneable object of class CronLock\File', $e->getMessage());
        }
        self::assertTrue($lock->isHeld());
        self::assertSame(1, $this->runCommand([self::FLOCK, '-n', $lock->path(), 'true'])[0], 'the refused copy released nothing');
        self::assertTrue($lock->release());
    }

    // ---------------------------------------------- the holder line, user data

    /** @return iterable<string, array{string}> */
    public static function rewriteModes(): iterable
    {
        yield 'same object' => ['same'];
        yield 'new object' => ['new'];
        yield 'cron_guard twice' => ['guard'];
        yield 'written by another process' => ['process'];
    }

    /** @dataProvider rewriteModes */
    public function testTheHolderLineNeverOverwritesDataWrittenInPlace(string $mode): void
    {
        $dir = $this->dir;
        $path = "$dir/data.lock";
        $data = str_repeat("user data, line by line\n", 20);
        $rewrite = function () use ($path, $data, $mode): void {
            if ($mode === 'process') {
                $p = Proc::run(sprintf('$f = fopen(%s, "r+"); fwrite($f, %s); fclose($f);', var_export($path, true), var_export($data, true)));
                self::assertSame(0, $p->exitCode(), $p->stderr());
                return;
            }
            $f = fopen($path, 'r+'); // same inode, rewritten in place
            fwrite($f, $data);
            fclose($f);
        };
        if ($mode === 'guard') {
            ini_set('cronlock.lock_dir', $dir);
            putenv("CRONLOCK_LOCK_DIR=$dir"); // cronlock/polyfill's stand-in for the ini
            try {
                $seen = cron_guard(static fn () => (string) file_get_contents($path), 'data');
                self::assertStringStartsWith('cronlock pid=', $seen);
                self::assertStringStartsWith('cronlock free since=', (string) file_get_contents($path), 'released: the line says free');
                $rewrite();
                cron_guard(static fn () => null, 'data');
            } finally {
                ini_restore('cronlock.lock_dir');
                putenv('CRONLOCK_LOCK_DIR');
            }
        } else {
            $lock = new File($path);
            self::assertTrue($lock->acquire(0));
            self::assertStringStartsWith('cronlock pid=', (string) file_get_contents($path), 'an empty file gets the line');
            self::assertTrue($lock->release());
            self::assertStringStartsWith('cronlock free since=', (string) file_get_contents($path), 'released: the line says free');
            if ($mode !== 'same') {
                unset($lock);
                $lock = new File($path);
            }
            $rewrite();
            self::assertTrue($lock->acquire(0));
            self::assertTrue($lock->release());
        }
        self::assertSame($data, file_get_contents($path));
    }

    // ---------------------------------------------------------- relative paths

    public function testARelativePathIsResolvedOnceAtConstruction(): void
    {
        $here = $this->makeTempDir('rel-here');
        $elsewhere = $this->makeTempDir('rel-elsewhere');
        $cwd = getcwd();
        try {
            chdir($here);
            $lock = new File('rel.lock');
            chdir($elsewhere);
            self::assertTrue($lock->acquire(0));
            self::assertSame("$here/rel.lock", $lock->path());
            self::assertFileDoesNotExist("$elsewhere/rel.lock");
            self::assertSame(1, $this->runCommand([self::FLOCK, '-n', "$here/rel.lock", 'true'])[0]);
            self::assertTrue($lock->release());
        } finally {
            chdir($cwd);
        }
    }

    // ------------------------------------------------------------- holderPid()

    public function testHolderPidNeverNamesTheHolderOfAnotherFileWithTheSameInodeNumber(): void
    {
        WebAssembly::skip('no /proc/locks (php-wasm has its own /proc), so holderPid() is null');
        if (posix_geteuid() !== 0) {
            self::markTestSkipped('needs root to mount two tmpfs');
        }
        $files = [];
        foreach (['a', 'b'] as $name) {
            $mount = $this->makeTempDir("tmpfs-$name");
            [$code, , $err] = $this->runCommand(['mount', '-t', 'tmpfs', '-o', 'size=1m', 'cronlock-test', $mount]);
            if ($code !== 0) {
                self::markTestSkipped("cannot mount a tmpfs here: $err");
            }
            $this->mounts[] = $mount;
            touch("$mount/x.lock");
            $files[] = "$mount/x.lock";
        }
        [$free, $other] = $files;
        self::assertSame(fileinode($free), fileinode($other), 'fresh tmpfs mounts number their first files alike');
        self::assertNotSame(stat($free)['dev'], stat($other)['dev']);

        $holder = self::startHolder($other);
        $lock = new File($free);
        self::assertNull($lock->holderPid(), 'the file is free: nobody holds it');
        self::assertTrue($lock->acquire(0));
        self::assertSame(getmypid(), $lock->holderPid());
        $lock->release();
        $holder->kill();
    }

    public function testHolderPidIsNullWhenTheLockerDiedAndAChildKeptTheDescriptor(): void
    {
        WebAssembly::skip('no /proc/locks (php-wasm has its own /proc), so holderPid() is null');
        $path = "{$this->dir}/orphan.lock";
        // flock(1) takes the lock on descriptor 9 of the shell and exits; the
        // shell (then sleep) keeps the descriptor, so the lock stays held by a
        // process that is not the one /proc/locks names.
        $locked = "{$this->dir}/locked";
        $h = $this->startCommand(['sh', '-c', sprintf(
            'exec 9>>%s; %s -n 9 || exit 1; : > %s; exec sleep 30',
            escapeshellarg($path),
            self::FLOCK,
            escapeshellarg($locked)
        )]);
        self::waitUntil(fn () => file_exists($locked) || $this->commandExitCode($h) !== null, 'the orphaned lock');
        self::assertNull($this->commandExitCode($h), 'the shell could not take the lock');
        $lock = new File($path);
        self::assertFalse($lock->acquire(0), 'held through the inherited descriptor');
        $locks = (string) file_get_contents('/proc/locks');
        self::assertNull($lock->holderPid(), "the locker is dead; never a dead or reused pid:\n$locks");
        $this->killCommand($h);
        self::assertTrue($lock->acquire(0));
        $lock->release();
    }

    // ----------------------------------------- lock files of other users (D10)

    public function testALockFileOwnedByAnotherUserInAWorldWritableDirectoryIsRefused(): void
    {
        self::requireRootAndRunuser();
        $shared = $this->makeTempDir('world', sys_get_temp_dir()); // nobody must reach it
        chmod($shared, 01777);
        $path = "$shared/pre-created.lock";
        [$code, , $err] = $this->runCommand([...self::asUser('nobody'), 'sh', '-c', 'umask 0; : > ' . escapeshellarg($path)]);
        self::assertSame(0, $code, $err);
        try {
            new File($path);
            self::fail('a lock file that another user can hold forever must be refused');
        } catch (LockException $e) {
            self::assertStringContainsString("lock file $path is owned by uid 65534, who could hold it forever", $e->getMessage());
        }
        chmod($shared, 0755);
        clearstatcache();
        $lock = new File($path); // in a directory only root can write to, trusted
        self::assertTrue($lock->acquire(0));
        $lock->release();
    }

    public function testAConstructorAfterADroppedLockChecksThePathAsAFreshOneDoes(): void
    {
        $path = "$this->dir/reused.lock";
        $lock = new File($path);
        self::assertTrue($lock->acquire(0));
        $lock->release();
        unset($lock);
        unlink($path);
        $lock = new File($path);
        clearstatcache();
        self::assertFileExists($path, 'the constructor creates the file');
        unset($lock);

        unlink($path);
        rmdir($this->dir);
        try {
            new File($path);
            self::fail('a lock file in a removed directory must throw');
        } catch (LockException $e) {
            self::assertStringStartsWith("cannot open lock file $path", $e->getMessage());
        } finally {
            mkdir($this->dir);
        }
    }

    public function testAFileRecreatedByAnotherUserIsRefusedAfterADroppedLock(): void
    {
        self::requireRootAndRunuser();
        $shared = $this->makeTempDir('world', sys_get_temp_dir());
        chmod($shared, 01777);
        $path = "$shared/recreated.lock";
        $lock = new File($path);
        self::assertTrue($lock->acquire(0));
        $lock->release();
        unset($lock);
        unlink($path);
        [$code, , $err] = $this->runCommand([...self::asUser('nobody'), 'sh', '-c', 'umask 0; : > ' . escapeshellarg($path)]);
        self::assertSame(0, $code, $err);
        try {
            new File($path);
            self::fail('a lock file that another user can hold forever must be refused');
        } catch (LockException $e) {
            self::assertStringContainsString("lock file $path is owned by uid 65534, who could hold it forever", $e->getMessage());
        }
    }

    // ------------------------------------------- a holder line that cannot be written

    /**
     * On a full file system the lock is taken (flock needs no space) but its
     * holder line cannot be written: the lock is kept, and an E_WARNING
     * (cronlock/polyfill: E_USER_WARNING, all userland may raise) names the
     * file and the OS error, for CronLock\File and cron_guard() alike. An
     * error handler that turns the warning into an exception gets the hold
     * given back: its caller never learns the lock was taken. Children run
     * in a private mount namespace where the test's directory is a tiny tmpfs,
     * filled up.
     */
    public function testAHolderLineThatCannotBeWrittenWarnsAndKeepsTheLock(): void
    {
        $full = $this->makeTempDir('full');
        $ns = MountNamespace::start([$full => ['size' => '64k', 'mode' => 0700]]);
        [$code, , $err] = $this->runCommand($ns->command(['sh', '-c', 'dd if=/dev/zero of="$0/fill" bs=4k 2>/dev/null; test -s "$0/fill"', $full]));
        self::assertSame(0, $code, "filling the tmpfs: $err");
        $script = $this->makeTempDir('full-script') . '/child.php';
        file_put_contents($script, '<?php' . "\n" . <<<'PHP'
            $dir = $argv[1];
            $others = function (string $path): string {
                exec('/usr/bin/flock -n ' . escapeshellarg($path) . ' true', $out, $code);
                return $code === 0 ? 'free' : 'held';
            };
            set_error_handler(function (int $type, string $message): bool {
                if ((error_reporting() & $type) === 0) {
                    return false; // @-silenced
                }
                echo "WARNING $type: $message\n";
                return true;
            });
            $lock = new \CronLock\File("$dir/job.lock");
            $got = $lock->acquire(0);
            clearstatcache();
            echo 'File: ', json_encode([$got, $lock->isHeld(), filesize("$dir/job.lock"), $others("$dir/job.lock")]), "\n";
            putenv("CRONLOCK_LOCK_DIR=$dir");
            ini_set('cronlock.lock_dir', $dir);
            $ran = cron_guard(function () use ($dir, $others) { return $others("$dir/guarded.lock"); }, 'guarded');
            echo 'cron_guard: ', json_encode($ran), "\n";
            set_error_handler(function (int $type, string $message): bool {
                if ((error_reporting() & $type) === 0) {
                    return false; // @-silenced
                }
                throw new \ErrorException($message, 0, $type);
            });
            $thrown = new \CronLock\File("$dir/thrown.lock");
            try {
                $thrown->acquire(0);
                echo "File: no exception\n";
            } catch (\ErrorException $e) {
                echo 'File threw: ', json_encode([$thrown->isHeld(), $others("$dir/thrown.lock")]), "\n";
            }
            try {
                cron_guard(function () { echo "JOB RAN\n"; }, 'thrown-guard');
                echo "cron_guard: no exception\n";
            } catch (\ErrorException $e) {
                echo 'cron_guard threw: ', $others("$dir/thrown-guard.lock"), "\n";
            }
            PHP);
        [$code, $out, $err] = $this->runCommand($ns->command([...self::phpCommand(), $script, $full]));
        self::assertSame(0, $code, $out . $err);
        $type = extension_loaded('cronlock') ? E_WARNING : E_USER_WARNING;
        $warning = function (string $file) use ($type, $full): string {
            return "WARNING $type: cronlock: lock file $full/$file is held, but its holder line could not be written: No space left on device\n";
        };
        self::assertSame($warning('job.lock') . "File: [true,true,0,\"held\"]\n"
            . $warning('guarded.lock') . "cron_guard: \"held\"\n"
            . "File threw: [false,\"free\"]\n"
            . "cron_guard threw: free\n", $out, $err);
    }

    /**
     * procfs files report size 0 but are not empty: locking one (root may
     * open it read-write) writes no holder line into it, so there is nothing
     * to warn about either (found by the torture suite's fuzz section).
     */
    public function testAProcFileOfSize0GetsNoHolderLine(): void
    {
        WebAssembly::skip('no host /proc (php-wasm has its own)');
        $warnings = [];
        set_error_handler(function (int $type, string $message) use (&$warnings): bool {
            if ((error_reporting() & $type) !== 0) {
                $warnings[] = $message;
            }
            return true;
        });
        try {
            $lock = new File('/proc/self/status');
            self::assertTrue($lock->acquire(0));
            self::assertTrue($lock->release());
        } finally {
            restore_error_handler();
        }
        self::assertSame([], $warnings);
    }

    /** @return iterable<string, array{string}> 128-byte files that look like a record but are not one */
    public static function nearRecords(): iterable
    {
        $pad = fn (string $text): string => str_pad($text, 127) . "\n";
        $good = 'cronlock pid=1 host=web1 since=2026-11-30T14:50:00Z';
        yield 'notes' => [$pad('cronlock pid=1 -- my notes: customer 42 owes 100 EUR, do not lose')];
        yield 'only prefix' => [str_pad('cronlock ', 127, 'Z') . "\n"];
        yield 'pid=abc' => [$pad('cronlock pid=abc host=web1 since=2026-11-30T14:50:00Z')];
        yield 'since=x' => [$pad('cronlock pid=1 host=x since=x')];
        yield 'stray X' => [substr_replace($pad($good), 'X', 100, 1)];
        yield 'stray NUL' => [substr_replace($pad($good), "\0", 100, 1)];
        yield 'CRLF' => [str_pad($good, 126) . "\r\n"];
    }

    /**
     * @dataProvider nearRecords
     */
    public function testOnlyAnExactHolderRecordIsOverwritten(string $content): void
    {
        self::assertSame(128, strlen($content));
        $path = "$this->dir/near.lock";
        file_put_contents($path, $content);
        $lock = new File($path);
        self::assertTrue($lock->acquire(0));
        $lock->release();
        self::assertSame($content, file_get_contents($path), 'user data is never written over');
    }

    // ------------------------------------------------------- waits and signals

    public function testASignalHandlerRunsDuringAWaitForeverAndTheWaitReturnsFalse(): void
    {
        if (!function_exists('pcntl_signal')) {
            self::markTestSkipped('needs ext-pcntl');
        }
        $path = "{$this->dir}/wait.lock";
        $holder = self::startHolder($path);
        $w = Proc::start(sprintf(<<<'PHP'
            pcntl_async_signals(true); // restart_syscalls stays true, as usual
            pcntl_signal(SIGTERM, function () { echo "HANDLER ", microtime(true), "\n"; });
            $lock = new \CronLock\File(%s);
            echo "WAITING\n";
            $got = $lock->acquire(-1);
            echo "RETURNED ", var_export($got, true), "\n";
            PHP, var_export($path, true)));
        $w->waitForLine('WAITING', 15.0, 'stdout');
        usleep(300_000); // in the wait, past its first fast polls
        $sent = microtime(true);
        $w->signal(SIGTERM);
        $line = $w->waitForLine('HANDLER', 10.0, 'stdout');
        $w->waitForLine('RETURNED', 10.0, 'stdout');
        self::assertSame(0, $w->wait(10.0), $w->stderr());
        self::assertStringContainsString('RETURNED false', $w->stdout());
        self::assertLessThan(5.0, (float) substr(trim($line), 8) - $sent, 'the handler runs during the wait, not when the lock is free');
        $holder->kill();
    }

    /**
     * A file name is bytes, not text: a path, a relative path resolved
     * against a working directory, and cronlock.lock_dir that are not UTF-8
     * name the very file they say (path() returns those bytes).
     */
    /**
     * Another user of a shared lock directory swaps a symlink or a FIFO in and out at the
     * lock path while we open it: the symlink's target is never created (root could be
     * made to create any file) and a FIFO never blocks the open; each try locks the
     * regular file, or is refused with LockException.
     */
    public function testASymlinkOrFifoSwappedInWhileOpeningIsNeverFollowedNorWaitedOn(): void
    {
        if (!function_exists('posix_mkfifo')) {
            self::markTestSkipped('needs posix_mkfifo()');
        }
        $path = "$this->dir/swapped.lock";
        $target = "$this->dir/created-through-the-symlink";
        $stop = "$this->dir/stop";
        $swapper = Proc::start(<<<'PHP'
            [, $path, $target, $stop] = $argv;
            echo "SWAPPING\n";
            while (!file_exists($stop)) {
                @symlink($target, $path);
                @unlink($path);
                @posix_mkfifo($path, 0600);
                @unlink($path);
                @touch($path);
                @unlink($path);
            }
            PHP, [$path, $target, $stop]);
        $swapper->waitForLine('SWAPPING', 15.0, 'stdout');
        $opener = Proc::start(<<<'PHP'
            [, $path] = $argv;
            $locked = $refused = 0;
            for ($i = 0; $i < 10000; $i++) {
                try {
                    $lock = new \CronLock\File($path);
                    if ($lock->acquire(0)) { $locked++; $lock->release(); }
                } catch (\CronLock\LockException $e) {
                    $refused++;
                }
                unset($lock);
            }
            echo "DONE $locked $refused\n";
            PHP, [$path]);
        try {
            $done = $opener->waitForLine('DONE', 120.0, 'stdout');
        } finally {
            touch($stop);
            $swapper->wait();
        }
        self::note("swapped path: $done (locked, refused)");
        self::assertSame(0, $opener->wait(), $opener->stdout() . $opener->stderr());
        self::assertFileDoesNotExist($target, "a symlink's target is never created");
    }

    public function testPathsThatAreNotUtf8AreKeptByteForByte(): void
    {
        $dir = "{$this->dir}/\xffdir";
        self::assertTrue(mkdir($dir, 0700));
        $lock = new File("$dir/\xe9t\xe9.lock");
        self::assertSame("$dir/\xe9t\xe9.lock", $lock->path());
        self::assertTrue($lock->acquire(0));
        self::assertFileExists("$dir/\xe9t\xe9.lock");
        self::assertTrue($lock->release());

        WebAssembly::skip('getcwd() in a directory whose name is not UTF-8 comes back mangled (its file system keeps paths as JavaScript strings)');
        $cwd = getcwd();
        chdir($dir);
        try {
            self::assertSame("$dir/rel.lock", (new File('rel.lock'))->path());
        } finally {
            chdir($cwd);
        }

    }

    /**
     * @group extension-only
     * cronlock/polyfill cannot register the cronlock.lock_dir ini setting (it reads CRONLOCK_LOCK_DIR).
     */
    public function testALockDirThatIsNotUtf8IsKeptByteForByte(): void
    {
        $dir = "{$this->dir}/\xffdir";
        self::assertTrue(mkdir($dir, 0700));
        $old = ini_set('cronlock.lock_dir', $dir);
        try {
            self::assertSame('ran', cron_guard(static fn () => 'ran', 'named'));
            self::assertFileExists("$dir/named.lock");
        } finally {
            ini_set('cronlock.lock_dir', (string) $old);
        }
    }
}

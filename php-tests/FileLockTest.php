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
 * What CronLock\File promises beyond the Lock contract, checked with real
 * files and real processes (util-linux flock(1), PHP's flock(), children):
 * interop, how the file is opened and created, the holder record,
 * holderPid(), replaced files, descriptors and bad arguments.
 */
final class FileLockTest extends TestCase
{
    use FileTestHelpers;

    private const FLOCK = '/usr/bin/flock';
    private const RECORD_RE = '/^cronlock pid=(\d+) host=(\S+) since=(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) *\n$/';

    private string $dir;
    private int $savedUmask;

    protected function setUp(): void
    {
        parent::setUp();
        $this->savedUmask = umask();
        $this->dir = $this->makeTempDir('file-lock');
    }

    protected function tearDown(): void
    {
        umask($this->savedUmask);
        $this->reapCommands();
        $this->removeTempDirs();
        parent::tearDown();
    }

    private function requireFlock(): void
    {
        if (!is_executable(self::FLOCK)) {
            self::markTestSkipped('util-linux flock(1) is not installed at ' . self::FLOCK . ' (apt-get install util-linux)');
        }
    }

    /**
     * Start flock(1) holding $path ($mode: -x or -s) until $stop exists;
     * returns the handle once it holds the lock.
     */
    private function startFlockHolder(string $path, string $mode = '-x'): array
    {
        $ready = $this->dir . '/flock-ready-' . bin2hex(random_bytes(3));
        $stop = $this->dir . '/flock-stop-' . bin2hex(random_bytes(3));
        $h = $this->startCommand([self::FLOCK, $mode, '-n', $path, '-c',
            sprintf('touch %s; s=%s; while [ ! -e "$s" ] && [ -d "${s%%/*}" ]; do sleep 0.02; done', escapeshellarg($ready), escapeshellarg($stop))]);
        self::waitUntil(fn () => file_exists($ready) || $this->commandExitCode($h) !== null, 'flock(1) to take the lock');
        self::assertNull($this->commandExitCode($h), 'flock(1) could not take the lock');
        return [$h, $stop];
    }

    /** A PHP child holding $path through CronLock\File until $stop exists. */
    private function startHolderProc(string $path, string $stop, array $options = []): Proc
    {
        $p = Proc::start(sprintf(<<<'PHP'
            $lock = new \CronLock\File(%s, %s);
            if (!$lock->acquire(0)) { echo "BUSY\n"; exit(2); }
            echo "HELD\n";
            while (!file_exists(%s)) { usleep(1000); }
            $lock->release();
            echo "RELEASED\n";
            PHP, var_export($path, true), var_export($options, true), var_export($stop, true)));
        $p->waitForLine('HELD', 15.0, 'stdout');
        return $p;
    }

    // ------------------------------------------------------------- interop

    public function testFlockCommandHoldingTheFileExcludesUs(): void
    {
        WebAssembly::skip('no /proc/locks (php-wasm has its own /proc), so holderPid() is null');
        $this->requireFlock();
        $path = "{$this->dir}/interop.lock";
        [$h, $stop] = $this->startFlockHolder($path);

        $lock = new File($path);
        self::assertFalse($lock->acquire(0), 'flock(1) holds the file: acquire(0) must fail');
        self::assertFalse($lock->acquire(0.1), 'and a timed wait too');
        // flock(1) writes no record: holderPid() is the pid the kernel reports,
        // the flock process itself (it takes the lock before forking the command).
        self::assertSame($this->commandPid($h), $lock->holderPid(), 'holderPid() of a flock(1) holder');
        self::assertSame(0, filesize($path), 'a refused acquire writes nothing');

        touch($stop);
        self::assertSame(0, $this->finishCommand($h)[0]);
        self::assertTrue($lock->acquire(0), 'free once flock(1) is done');
        self::assertSame(getmypid(), $lock->holderPid());
        self::assertTrue($lock->release());
    }

    public function testOurLockExcludesTheFlockCommand(): void
    {
        $this->requireFlock();
        $path = "{$this->dir}/interop.lock";
        $lock = new File($path);
        self::assertTrue($lock->acquire(0));

        self::assertSame(1, $this->runCommand([self::FLOCK, '-n', $path, 'true'])[0], 'flock -n (exclusive) while we hold');
        self::assertSame(1, $this->runCommand([self::FLOCK, '-s', '-n', $path, 'true'])[0], 'flock -s -n (shared) while we hold');
        [$code] = $this->runCommand([self::FLOCK, '-E', '7', '-w', '0.2', $path, 'true']);
        self::assertSame(7, $code, 'flock -w 0.2 times out while we hold');

        self::assertTrue($lock->release());
        self::assertSame(0, $this->runCommand([self::FLOCK, '-n', $path, 'true'])[0], 'flock -n after our release');
    }

    public function testInteropWithPhpFlockInAnotherProcess(): void
    {
        WebAssembly::skip('no /proc/locks (php-wasm has its own /proc), so holderPid() is null');
        $path = "{$this->dir}/php-flock.lock";
        $stop = "{$this->dir}/stop";
        $p = Proc::start(sprintf(<<<'PHP'
            $fp = fopen(%s, 'c');
            if (!flock($fp, LOCK_EX | LOCK_NB)) { echo "BUSY\n"; exit(2); }
            echo "HELD\n";
            while (!file_exists(%s)) { usleep(1000); }
            flock($fp, LOCK_UN);
            echo "UNLOCKED\n";
            while (file_exists(%s)) { usleep(1000); }
            PHP, var_export($path, true), var_export($stop, true), var_export($stop, true)));
        $p->waitForLine('HELD', 15.0, 'stdout');

        $lock = new File($path);
        self::assertFalse($lock->acquire(0), "PHP's flock() in another process holds it");
        self::assertSame($p->pid(), $lock->holderPid());

        touch($stop);
        $p->waitForLine('UNLOCKED', 10.0, 'stdout');
        self::assertTrue($lock->acquire(0), "free after PHP's flock(LOCK_UN), although that process still has the file open");
        unlink($stop);
        self::assertSame(0, $p->wait());

        // and the other way round, with PHP's flock() in this process
        $fp = fopen($path, 'c');
        self::assertFalse(flock($fp, LOCK_EX | LOCK_NB, $wouldBlock), 'PHP flock() while cronlock holds');
        self::assertSame(1, $wouldBlock);
        self::assertFalse(flock($fp, LOCK_SH | LOCK_NB), 'not even shared');
        self::assertTrue($lock->release());
        self::assertTrue(flock($fp, LOCK_EX | LOCK_NB), 'PHP flock() after release');
        flock($fp, LOCK_UN);
        fclose($fp);
    }

    // ------------------------------------------------------- the file itself

    /** @return iterable<string, array{int, ?int, int}> umask, mode option, expected permissions */
    public static function modes(): iterable
    {
        yield 'default mode, umask 0' => [0, null, 0644];
        yield 'mode 0600, umask 0' => [0, 0600, 0600];
        yield 'mode 0640, umask 0' => [0, 0640, 0640];
        yield 'mode 0666, umask 0' => [0, 0666, 0666];
        yield 'mode 0666, umask 022 applies' => [022, 0666, 0644];
        yield 'mode 0660, umask 027 applies' => [027, 0660, 0640];
        yield 'default mode, umask 077 applies' => [077, null, 0600];
    }

    /** @dataProvider modes */
    public function testFileIsCreatedWithTheModeOption(int $umask, ?int $mode, int $expected): void
    {
        $path = "{$this->dir}/mode.lock";
        umask($umask);
        $lock = $mode === null ? new File($path) : new File($path, ['mode' => $mode]);
        umask($this->savedUmask);
        clearstatcache();

        self::assertFileExists($path, 'the constructor creates a missing file');
        self::assertSame(sprintf('%04o', $expected), sprintf('%04o', fileperms($path) & 07777));
        self::assertSame(0, filesize($path), 'nothing is written before the lock is held');
        self::assertTrue($lock->acquire(0));
        self::assertTrue($lock->release());
    }

    public function testAnExistingFileKeepsItsMode(): void
    {
        $path = "{$this->dir}/existing.lock";
        touch($path);
        chmod($path, 0600);
        $lock = new File($path, ['mode' => 0666]);
        self::assertTrue($lock->acquire(0));
        self::assertTrue($lock->release());
        clearstatcache();
        self::assertSame('0600', sprintf('%04o', fileperms($path) & 07777));
    }

    public function testAForeignFileIsNeverModified(): void
    {
        WebAssembly::skip('no /proc/locks (php-wasm has its own /proc), so holderPid() is null');
        // e.g. a job that locks its own script: a copy of a PHP file
        $path = "{$this->dir}/sync_orders.php";
        copy(__FILE__, $path);
        $before = file_get_contents($path);

        $lock = new File($path);
        self::assertTrue($lock->acquire(0));
        self::assertSame(getmypid(), $lock->holderPid(), 'holderPid() works without a record');
        $other = Proc::run(sprintf('$l = new \CronLock\File(%s); var_dump($l->acquire(0));', var_export($path, true)));
        self::assertStringContainsString('bool(false)', $other->stdout(), $other->stderr());
        self::assertTrue($lock->release());
        $again = Proc::run(sprintf('$l = new \CronLock\File(%s); var_dump($l->acquire(0)); $l->release();', var_export($path, true)));
        self::assertStringContainsString('bool(true)', $again->stdout(), $again->stderr());
        unset($lock);
        clearstatcache();

        self::assertSame($before, file_get_contents($path), 'the locked file keeps its bytes');
    }

    public function testA128ByteFileWithOtherContentIsNotOverwritten(): void
    {
        $path = "{$this->dir}/data.lock";
        $content = str_pad('not a cronlock record', 127, '.') . "\n";
        file_put_contents($path, $content);
        $lock = new File($path);
        self::assertTrue($lock->acquire(0));
        self::assertTrue($lock->release());
        self::assertSame($content, file_get_contents($path));
    }

    public function testTheFileIsNeverUnlinked(): void
    {
        $path = "{$this->dir}/keep.lock";
        $lock = new File($path);
        $inode = fileinode($path);
        self::assertTrue($lock->acquire(0));
        self::assertTrue($lock->release());
        self::assertFileExists($path, 'after release');
        self::assertTrue($lock->acquire(0));
        unset($lock); // destructor while held
        clearstatcache();
        self::assertFileExists($path, 'after destruction');
        self::assertSame($inode, fileinode($path), 'the same file, not a recreated one');
        self::assertTrue($this->isFree($path), 'destruction released it');

        $p = Proc::run(sprintf('$l = new \CronLock\File(%s); $l->acquire(0); echo "EXITING\n";', var_export($path, true)));
        self::assertStringContainsString('EXITING', $p->stdout());
        clearstatcache();
        self::assertSame($inode, fileinode($path), 'after a holder process exited');
        self::assertTrue($this->isFree($path));
    }

    public function testASymlinkIsRefusedAndItsTargetIsNotTouched(): void
    {
        $missing = "{$this->dir}/missing-target";
        $link = "{$this->dir}/dangling.lock";
        symlink($missing, $link);
        try {
            new File($link);
            self::fail('a symlink must be refused');
        } catch (LockException $e) {
            self::assertStringContainsString($link, $e->getMessage());
        }
        self::assertFileDoesNotExist($missing, 'the target of a dangling symlink is not created');

        $target = "{$this->dir}/precious.txt";
        file_put_contents($target, "precious\n");
        $link2 = "{$this->dir}/link.lock";
        symlink($target, $link2);
        try {
            $l = new File($link2);
            $l->acquire(0);
            self::fail('a symlink to a regular file must be refused too');
        } catch (LockException $e) {
            self::assertStringContainsString($link2, $e->getMessage());
            self::assertStringContainsStringIgnoringCase('symbolic link', $e->getMessage(), 'the OS reason (ELOOP)');
        }
        self::assertSame("precious\n", file_get_contents($target));
        self::assertTrue(is_link($link2), 'the symlink itself is left alone');
    }

    public function testADirectoryIsRefused(): void
    {
        $path = "{$this->dir}/a-dir";
        mkdir($path);
        try {
            new File($path);
            self::fail('a directory must be refused');
        } catch (LockException $e) {
            self::assertStringContainsString($path, $e->getMessage());
            self::assertStringContainsStringIgnoringCase('directory', $e->getMessage());
        }
    }

    public function testDevNullIsRefused(): void
    {
        // in a child: a refused file can leave this process's later fork()s
        // broken (see testARefusedFileDoesNotBreakLaterForkChildren)
        $p = Proc::run(<<<'PHP'
            try { new \CronLock\File('/dev/null'); echo "NO EXCEPTION\n"; }
            catch (\Throwable $e) { echo get_class($e), ': ', $e->getMessage(), "\n"; }
            PHP, [], [], 15.0);
        $out = $p->stdout();
        self::assertStringStartsWith('CronLock\LockException: ', $out, $p->stderr());
        self::assertStringContainsString('/dev/null', $out);
        self::assertStringContainsStringIgnoringCase('character device', $out);
        self::assertSame('char', filetype('/dev/null'));
    }

    /** @return iterable<string, array{string}> */
    public static function refusedSpecialFiles(): iterable
    {
        yield '/dev/null' => ['/dev/null'];
        yield 'FIFO' => ['fifo'];
    }

    /**
     * A File whose constructor throws must not leave its descriptor number
     * registered for the fork handler: that number is reused by the next
     * open(), and every fork child (pcntl_fork, proc_open, exec) would get
     * that unrelated descriptor replaced by /dev/null.
     *
     * @dataProvider refusedSpecialFiles
     */
    public function testARefusedFileDoesNotBreakLaterForkChildren(string $special): void
    {
        WebAssembly::skip('no pcntl_fork()');
        $target = $special;
        if ($special === 'fifo') {
            $target = "{$this->dir}/a-fifo";
            self::assertTrue(posix_mkfifo($target, 0600));
        }
        $data = "{$this->dir}/data.txt";
        $p = Proc::run(sprintf(<<<'PHP'
            try { new \CronLock\File(%s); echo "NO EXCEPTION\n"; } catch (\CronLock\LockException $e) { echo "REFUSED\n"; }
            $fp = fopen(%s, 'w'); // most likely gets the descriptor number just closed
            $pid = pcntl_fork();
            if ($pid === 0) { $n = @fwrite($fp, "written by the fork child\n"); fflush($fp); exit($n ? 0 : 1); }
            pcntl_waitpid($pid, $status);
            echo "CHILD STATUS ", pcntl_wexitstatus($status), "\n";
            PHP, var_export($target, true), var_export($data, true)), [], [], 15.0);

        self::assertStringContainsString('REFUSED', $p->stdout(), $p->stderr());
        self::assertStringContainsString('CHILD STATUS 0', $p->stdout(), 'the fork child could not write to a file its parent opened: ' . $p->stdout() . $p->stderr());
        self::assertSame("written by the fork child\n", file_get_contents($data));
    }

    public function testAFifoIsRefusedWithoutHanging(): void
    {
        WebAssembly::skip('no posix_mkfifo()');
        $fifo = "{$this->dir}/a-fifo";
        self::assertTrue(posix_mkfifo($fifo, 0600));
        // in a child: opening a FIFO without O_NONBLOCK would hang forever
        $p = Proc::run(sprintf(<<<'PHP'
            try { new \CronLock\File(%s); echo "NO EXCEPTION\n"; }
            catch (\Throwable $e) { echo get_class($e), ': ', $e->getMessage(), "\n"; }
            PHP, var_export($fifo, true)), [], [], 15.0);
        $out = $p->stdout();
        self::assertStringStartsWith('CronLock\LockException: ', $out, $p->stderr());
        self::assertStringContainsString($fifo, $out);
        self::assertStringContainsString('FIFO', $out);
        self::assertSame('fifo', filetype($fifo));
    }

    public function testAMissingDirectoryGivesLockExceptionWithTheOsReason(): void
    {
        $path = "{$this->dir}/no/such/dir/x.lock";
        try {
            new File($path);
            self::fail('expected LockException');
        } catch (LockException $e) {
            self::assertStringContainsString($path, $e->getMessage());
            self::assertStringContainsString('No such file or directory', $e->getMessage());
        }
    }

    // ---------------------------------------------------------------- shared

    public function testSharedHoldersCoexistAndExcludeAnExclusiveOne(): void
    {
        $path = "{$this->dir}/shared.lock";
        $stop = "{$this->dir}/stop";
        $reader = $this->startHolderProc($path, $stop, ['shared' => true]);

        $mine = new File($path, ['shared' => true]);
        self::assertTrue($mine->acquire(0), 'a second shared holder (this process) coexists with the child');
        self::assertTrue($mine->isHeld());
        $writer = new File($path);
        self::assertFalse($writer->acquire(0), 'exclusive refused while shared holders hold');
        try {
            $writer->acquire(0.1);
            self::fail('a wait for a lock this thread holds (shared) through another object cannot end');
        } catch (LockException $e) {
            self::assertStringContainsString('waiting for it would deadlock', $e->getMessage());
        }
        if (is_executable(self::FLOCK)) {
            self::assertSame(0, $this->runCommand([self::FLOCK, '-s', '-n', $path, 'true'])[0], 'flock -s coexists');
            self::assertSame(1, $this->runCommand([self::FLOCK, '-x', '-n', $path, 'true'])[0], 'flock -x refused');
        }
        self::assertSame(0, filesize($path), 'shared holders write no record');

        self::assertTrue($mine->release());
        self::assertFalse($writer->acquire(0), 'the child still holds its shared lock');
        touch($stop);
        $reader->waitForLine('RELEASED', 10.0, 'stdout');
        self::assertSame(0, $reader->wait());
        self::assertTrue($writer->acquire(0), 'exclusive once every shared holder is gone');
        self::assertFalse($mine->acquire(0), 'shared refused while an exclusive holder holds');
        self::assertTrue($writer->release());
    }

    // ------------------------------------------------------------- holderPid

    public function testHolderPidIsTheHoldingProcessOrNull(): void
    {
        WebAssembly::skip('no /proc/locks (php-wasm has its own /proc), so holderPid() is null');
        $path = "{$this->dir}/pid.lock";
        $observer = new File($path);
        self::assertNull($observer->holderPid(), 'free, never held');

        $stop = "{$this->dir}/stop";
        $child = $this->startHolderProc($path, $stop);
        self::assertSame($child->pid(), $observer->holderPid(), 'held by a child process');
        self::assertNotSame(getmypid(), $child->pid());
        self::assertFalse($observer->isHeld());
        touch($stop);
        $child->waitForLine('RELEASED', 10.0, 'stdout');
        self::assertNull($observer->holderPid(), 'released');
        self::assertStringStartsWith('cronlock free since=', (string) file_get_contents($path), 'released: the record says free');
        self::assertSame(0, $child->wait());

        unlink($stop);
        $killed = $this->startHolderProc($path, $stop);
        self::assertSame($killed->pid(), $observer->holderPid());
        $killed->kill();
        self::assertStringContainsString("pid={$killed->pid()} ", (string) file_get_contents($path), 'precondition: kill -9 leaves its record');
        self::assertNull($observer->holderPid(), 'holder killed: free, although its record remains');

        $mine = new File($path);
        self::assertTrue($mine->acquire(0));
        self::assertSame(getmypid(), $observer->holderPid(), 'held by another object of this process');
        self::assertSame(getmypid(), $mine->holderPid());
        self::assertTrue($mine->release());
        self::assertNull($mine->holderPid());
    }

    public function testHolderPidNeverDisturbsAConcurrentAcquirer(): void
    {
        WebAssembly::skip('no /proc/locks (php-wasm has its own /proc), so holderPid() is null');
        $path = "{$this->dir}/probe.lock";
        $go = "{$this->dir}/go";
        $stop = "{$this->dir}/stop";
        // Counts, not a time: each side makes at least 500 calls while the other
        // runs, however slow a loaded machine makes either of them.
        $p = Proc::start(sprintf(<<<'PHP'
            $lock = new \CronLock\File(%s);
            echo "READY\n";
            while (!file_exists(%s)) { usleep(200); }
            $tries = 0; $fails = 0;
            while ($tries < 500 || !file_exists(%s)) {
                $tries++;
                if ($lock->acquire(0)) { $lock->release(); } else { $fails++; }
            }
            echo "TRIES $tries FAILS $fails\n";
            PHP, var_export($path, true), var_export($go, true), var_export($stop, true)));
        $p->waitForLine('READY', 15.0, 'stdout');

        $observer = new File($path);
        touch($go);
        $calls = 0;
        $seen = [];
        $t0 = microtime(true);
        $stopped = false;
        while ($p->isRunning()) {
            $pid = $observer->holderPid();
            $seen[var_export($pid, true)] = true;
            if (++$calls >= 500 && !$stopped && microtime(true) - $t0 >= 0.6) {
                $stopped = touch($stop);
            }
        }
        self::assertSame(0, $p->exitCode(), $p->stderr());
        self::assertMatchesRegularExpression('/^TRIES (\d+) FAILS (\d+)$/m', $p->stdout());
        preg_match('/^TRIES (\d+) FAILS (\d+)$/m', $p->stdout(), $m);
        self::note("holderPid() called $calls times while the other process made {$m[1]} acquire(0) tries");
        self::assertSame('0', $m[2], 'acquire(0) of a free lock failed while holderPid() was being called: holderPid() took the lock');
        self::assertSame([], array_diff(array_keys($seen), ['NULL', (string) $p->pid()]), 'holderPid() saw only "free" or the acquirer');
    }

    // ---------------------------------------------------------------- record

    public function testThePidRecordIsWrittenOnlyOnceTheLockIsHeld(): void
    {
        $path = "{$this->dir}/record.lock";
        $lock = new File($path);
        clearstatcache();
        self::assertSame(0, filesize($path), 'nothing before acquire');

        $before = time();
        self::assertTrue($lock->acquire(0));
        $record = file_get_contents($path);
        self::assertSame(128, strlen($record), 'record padded to 128 bytes');
        self::assertMatchesRegularExpression(self::RECORD_RE, $record);
        preg_match(self::RECORD_RE, $record, $m);
        self::assertSame((string) getmypid(), $m[1]);
        $host = preg_replace('/[^!-~]/', '', (string) gethostname());
        self::assertSame(substr($host, 0, 64), $m[2]);
        $since = (new \DateTimeImmutable($m[3]))->getTimestamp();
        self::assertGreaterThanOrEqual($before - 2, $since);
        self::assertLessThanOrEqual(time() + 2, $since);

        // a refused acquirer (another process) writes nothing
        $p = Proc::run(sprintf('$l = new \CronLock\File(%s); var_dump($l->acquire(0.2));', var_export($path, true)));
        self::assertStringContainsString('bool(false)', $p->stdout(), $p->stderr());
        self::assertSame($record, file_get_contents($path), 'a waiter that did not get the lock must not write its pid');
        self::assertTrue($lock->release());
        $free = (string) file_get_contents($path);
        self::assertSame(128, strlen($free), 'release rewrites in place, never truncates');
        self::assertMatchesRegularExpression('/\Acronlock free since=(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) {87}\n\z/', $free);
        preg_match('/since=(\S+)/', $free, $m);
        self::assertGreaterThanOrEqual($since, (new \DateTimeImmutable($m[1]))->getTimestamp(), 'free since the release');
    }

    public function testTheRecordStays128BytesAcrossHolders(): void
    {
        $path = "{$this->dir}/cycles.lock";
        $lock = new File($path);
        $inode = fileinode($path);
        for ($i = 0; $i < 3; $i++) {
            self::assertTrue($lock->acquire(0));
            clearstatcache();
            self::assertSame(128, filesize($path));
            self::assertStringStartsWith('cronlock pid=' . getmypid() . ' ', file_get_contents($path));
            self::assertTrue($lock->release());

            $p = Proc::run(sprintf(<<<'PHP'
                $l = new \CronLock\File(%s);
                var_dump($l->acquire(0));
                echo file_get_contents(%s);
                $l->release();
                PHP, var_export($path, true), var_export($path, true)));
            self::assertStringContainsString('bool(true)', $p->stdout(), $p->stderr());
            self::assertStringContainsString("cronlock pid={$p->pid()} ", $p->stdout(), 'the child recorded its own pid');
            clearstatcache();
            self::assertSame(128, filesize($path));
            self::assertSame($inode, fileinode($path), 'written in place, never replaced');
        }
    }

    // ---------------------------------------------------- replaced lock file

    public function testAnUnlinkedAndRecreatedFileNeverLetsTwoHolders(): void
    {
        WebAssembly::skip('no /proc/locks (php-wasm has its own /proc), so holderPid() is null');
        $path = "{$this->dir}/replaced.lock";
        $a = new File($path);
        self::assertTrue($a->acquire(0));
        unlink($path); // e.g. a tmp cleaner

        // Another run creates a new file at the path and takes it. flock(2)
        // cannot prevent that: A's lock is on an inode no path names. What
        // is covered is that A finds out as soon as it asks.
        $b = Proc::start(sprintf(<<<'PHP'
            $lock = new \CronLock\File(%s);
            echo $lock->acquire(0) ? "HELD\n" : "BUSY\n";
            sleep(60);
            PHP, var_export($path, true)));
        $b->waitForLine('HELD', 15.0, 'stdout');
        self::assertTrue($a->isHeld(), 'isHeld() is local: what A believes, no syscall');
        self::assertFalse($a->renew(), 'renew() asks the path: A no longer holds the file it names');
        self::assertFalse($a->isHeld(), 'and A knows it now');
        self::assertFalse($a->release(), 'nothing left to release');
        self::assertFalse($a->acquire(0), 'B holds the file the path names');
        self::assertSame($b->pid(), $a->holderPid());
        $b->kill();

        self::assertTrue($a->acquire(0), 'A gets the new file once B is gone');
        unlink($path);
        touch($path);
        self::assertFalse($a->acquire(0), 'acquire() on a held lock checks the path too (replaced)');
        self::assertFalse($a->isHeld());
        self::assertTrue($a->acquire(0), 'and then takes the file the path names');
        $c = new File($path);
        self::assertFalse($c->acquire(0), 'it is really the file the path names');
        self::assertSame(getmypid(), $c->holderPid());
        self::assertTrue($a->release());
    }

    public function testAWaiterOnAReplacedFileKeepsWaitingForTheNewHolder(): void
    {
        WebAssembly::skip('stat() does not see a file another process replaced (its file system caches nodes by name and numbers inodes itself)');
        $path = "{$this->dir}/replaced.lock";
        $a = new File($path);
        self::assertTrue($a->acquire(0));

        // W opens the file now (the old inode) and waits for it
        $w = Proc::start(sprintf(<<<'PHP'
            $lock = new \CronLock\File(%s);
            echo "OPENED\n";
            $got = $lock->acquire(20.0);
            printf("ACQUIRED %%s %%.6f\n", var_export($got, true), microtime(true));
            if ($got) { $lock->release(); }
            PHP, var_export($path, true)));
        $w->waitForLine('OPENED', 15.0, 'stdout');
        usleep(100_000); // let W enter acquire() (it waits on the old inode either way)

        unlink($path);
        $b = new File($path);
        self::assertTrue($b->acquire(0));
        self::assertTrue($a->release()); // the old inode is free now

        usleep(300_000);
        self::assertStringNotContainsString('ACQUIRED', $w->stdout(), 'W holds the unlinked inode while B holds the file: two holders');
        self::assertTrue($w->isRunning());
        self::assertSame(getmypid(), $b->holderPid());

        $releasedAt = microtime(true);
        self::assertTrue($b->release());
        $line = $w->waitForLine('ACQUIRED', 15.0, 'stdout');
        self::assertMatchesRegularExpression('/^ACQUIRED true [0-9.]+$/', $line);
        self::assertGreaterThan($releasedAt - 0.005, (float) explode(' ', $line)[2], 'W got the lock only after B released');
        self::assertSame(0, $w->wait());
    }

    // ----------------------------------------------------------- descriptors

    public function testAProcOpenChildHasNoDescriptorOnTheLockFile(): void
    {
        WebAssembly::skip('no host /proc (php-wasm has its own): /proc/<pid>/fd');
        $path = "{$this->dir}/cloexec.lock";
        $lock = new File($path);
        self::assertTrue($lock->acquire(0));
        $real = realpath($path);
        $links = static fn (int $pid): array => array_map(
            static fn (string $fd) => (string) @readlink($fd),
            glob("/proc/$pid/fd/*") ?: []
        );
        self::assertContains($real, $links(getmypid()), 'precondition: this process has the lock file open');

        $h = $this->startCommand(['sleep', '5']);
        $pid = $this->commandPid($h);
        // wait for the exec: before it, the forked child still has every descriptor
        self::waitUntil(static fn () => substr((string) @readlink("/proc/$pid/exe"), -6) === '/sleep', 'sleep to be exec()ed');
        $childLinks = $links($pid);
        self::assertNotEmpty($childLinks, 'precondition: /proc/<pid>/fd is readable');
        self::assertNotContains($real, $childLinks, 'the exec()ed child inherited the lock file descriptor');
        $this->killCommand($h);
        self::assertTrue($lock->release());
    }

    /**
     * @group extension-only
     * Userland cannot detach a fork child's copy of the descriptor (docs/polyfill.md).
     */
    public function testAForkChildDoesNotKeepTheLockAliveAfterTheParentIsKilled(): void
    {
        $path = "{$this->dir}/fork.lock";
        $p = Proc::start(sprintf(<<<'PHP'
            $lock = new \CronLock\File(%s);
            if (!$lock->acquire(0)) { echo "BUSY\n"; exit(2); }
            $pid = pcntl_fork();
            if ($pid === 0) { fclose(STDOUT); fclose(STDERR); while (true) { usleep(10000); } }
            echo "CHILD $pid\n";
            while (true) { usleep(10000); }
            PHP, var_export($path, true)));
        $grandchild = (int) substr($p->waitForLine('CHILD', 15.0, 'stdout'), 6);
        try {
            self::assertGreaterThan(1, $grandchild);
            self::assertFalse($this->isFree($path), 'precondition: the parent holds it');
            self::assertSame(137, $p->kill());
            self::assertTrue(self::processAlive($grandchild), 'precondition: the fork child outlives the parent');
            self::assertTrue($this->isFree($path), "the fork child's copy of the descriptor kept the lock after kill -9 of the parent");
        } finally {
            self::killPid($grandchild);
        }
    }

    public function testDestructionReleases(): void
    {
        $path = "{$this->dir}/destruct.lock";
        $lock = new File($path);
        self::assertTrue($lock->acquire(0));
        self::assertFalse($this->isFree($path));
        $lock = null;
        self::assertTrue($this->isFree($path), 'destroying the holding object releases');
    }

    // --------------------------------------------------------------- options

    public function testAllowNetworkFsAcceptsBools(): void
    {
        foreach ([true, false] as $allow) {
            $lock = new File("{$this->dir}/net.lock", ['allow_network_fs' => $allow]);
            self::assertTrue($lock->acquire(0));
            self::assertTrue($lock->release());
        }
    }

    public function testANetworkFilesystemIsRefusedUnlessAllowed(): void
    {
        WebAssembly::skip('no host /proc (php-wasm has its own): /proc/mounts, /proc/self/mountinfo');
        $dir = null;
        foreach (file('/proc/mounts', FILE_IGNORE_NEW_LINES) ?: [] as $line) {
            [, $mountPoint, $type] = explode(' ', $line) + [null, null, null];
            if (preg_match('/^(nfs4?|cifs|smb3?|9p|ceph|afs|lustre|gfs2|ocfs2)$/', (string) $type)
                && is_dir($mountPoint) && is_writable($mountPoint)) {
                $dir = $mountPoint;
                break;
            }
        }
        if ($dir === null) {
            self::markTestSkipped('no writable NFS/CIFS/9p/... mount on this machine, so the statfs check cannot be exercised');
        }
        $path = "$dir/cronlock-test-" . getmypid() . '.lock';
        try {
            try {
                new File($path);
                self::fail('a network filesystem must be refused by default');
            } catch (LockException $e) {
                self::assertStringContainsString($path, $e->getMessage());
            }
            $lock = new File($path, ['allow_network_fs' => true]);
            self::assertSame($path, $lock->path());
        } finally {
            @unlink($path);
        }
    }

    /** @return iterable<string, array{array<string, mixed>, string}> */
    public static function wrongTypes(): iterable
    {
        yield 'allow_network_fs int' => [['allow_network_fs' => 1], "\$options['allow_network_fs']"];
        yield 'allow_network_fs string' => [['allow_network_fs' => 'yes'], "\$options['allow_network_fs']"];
        yield 'shared int' => [['shared' => 1], "\$options['shared']"];
        yield 'shared string' => [['shared' => 'true'], "\$options['shared']"];
        yield 'mode string' => [['mode' => '0644'], "\$options['mode']"];
        yield 'mode float' => [['mode' => 420.0], "\$options['mode']"];
    }

    /** @dataProvider wrongTypes */
    public function testWrongOptionTypesThrowTypeErrorNamingTheOption(array $options, string $named): void
    {
        $path = "{$this->dir}/typed.lock";
        try {
            new File($path, $options);
            self::fail('expected TypeError');
        } catch (\TypeError $e) {
            self::assertStringContainsString($named, $e->getMessage());
        }
    }

    public function testUnknownOptionThrowsValueErrorNamingIt(): void
    {
        foreach ([['bogus' => true], ['mode' => 0644, 'timeout' => 1.0], [0 => true]] as $options) {
            $key = (string) array_key_last($options);
            try {
                new File("{$this->dir}/unknown.lock", $options);
                self::fail("unknown option '$key' must throw");
            } catch (\ValueError $e) {
                self::assertStringContainsString('$options', $e->getMessage());
                self::assertStringContainsString("'$key'", $e->getMessage());
            }
        }
        self::assertFileDoesNotExist("{$this->dir}/unknown.lock", 'bad arguments create nothing');
    }

    /** @return iterable<string, array{string}> */
    public static function badPaths(): iterable
    {
        yield 'empty' => [''];
        yield 'NUL byte' => ["/tmp/a\0b.lock"];
    }

    /** @dataProvider badPaths */
    public function testBadPathThrowsValueErrorNamingPath(string $path): void
    {
        try {
            new File($path);
            self::fail('expected ValueError');
        } catch (\ValueError $e) {
            self::assertStringContainsString('$path', $e->getMessage());
        }
    }

    /** @return iterable<string, array{int}> */
    public static function badModes(): iterable
    {
        yield '0o10000' => [010000];
        yield '-1' => [-1];
        yield 'PHP_INT_MAX' => [PHP_INT_MAX];
        yield 'PHP_INT_MIN' => [PHP_INT_MIN];
    }

    /** @dataProvider badModes */
    public function testModeOutOfRangeThrowsValueError(int $mode): void
    {
        $path = "{$this->dir}/bad-mode.lock";
        try {
            new File($path, ['mode' => $mode]);
            self::fail('expected ValueError');
        } catch (\ValueError $e) {
            self::assertStringContainsString("\$options['mode']", $e->getMessage());
        }
        self::assertFileDoesNotExist($path);
    }

    public function testPathReturnsTheGivenPath(): void
    {
        $path = "{$this->dir}/./given.lock";
        self::assertSame($path, (new File($path))->path());
    }

    /**
     * A lock path of about 1 KB under a missing directory: the reason is the OS's, the path
     * cut to 200 characters (PHP 7 cuts its own warnings at 1024 bytes, reason and all).
     */
    public function testALongPathUnderAMissingDirectorySaysWhy(): void
    {
        $path = "{$this->dir}/missing/" . str_repeat('d', 200) . '/' . str_repeat('e', 200) . '/'
            . str_repeat('f', 200) . '/' . str_repeat('g', 200) . '/x.lock';
        try {
            (new File($path))->acquire(0);
            self::fail('a lock file under a missing directory was opened');
        } catch (LockException $e) {
            self::assertStringEndsWith(': No such file or directory', $e->getMessage());
            self::assertLessThan(300, strlen($e->getMessage()), $e->getMessage());
        }
    }
}

<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\LockException;
use CronLock\Tests\Support\FileTestHelpers;
use PHPUnit\Framework\TestCase;

/**
 * An explicit cronlock.lock_dir must name one directory for every run: an
 * absolute path without NUL bytes. A relative one would count from each
 * run's working directory (cron starts jobs in $HOME, a run by hand in the
 * project), so two overlapping runs of one job would lock two files and
 * both go ahead; a NUL byte used to cut the path short, to another
 * directory. cron_guard() refuses both with a LockException naming the
 * setting, before any lock file is made. (cronlock/polyfill reads the
 * setting from CRONLOCK_LOCK_DIR too, and refuses the same.)
 */
final class LockDirSettingTest extends TestCase
{
    use FileTestHelpers;

    private string $dir;

    protected function setUp(): void
    {
        $this->dir = $this->makeTempDir('cronlock-lockdir');
    }

    protected function tearDown(): void
    {
        putenv('CRONLOCK_LOCK_DIR');
        ini_restore('cronlock.lock_dir');
        $this->reapCommands();
        $this->removeTempDirs();
        parent::tearDown();
    }

    private static function setLockDir(string $dir): void
    {
        ini_set('cronlock.lock_dir', $dir);
        if (!extension_loaded('cronlock')) {
            putenv("CRONLOCK_LOCK_DIR=$dir");
        }
    }

    public function testARelativeLockDirIsRefused(): void
    {
        mkdir("$this->dir/var/lock", 0700, true);
        $cwd = getcwd();
        chdir($this->dir);
        try {
            self::setLockDir('var/lock');
            $ran = false;
            try {
                cron_guard(function () use (&$ran) {
                    $ran = true;
                }, 'sync');
                self::fail('a relative cronlock.lock_dir was used');
            } catch (LockException $e) {
                // the setting it came from: the ini here, the variable for the polyfill (setLockDir)
                self::assertSame(
                    (extension_loaded('cronlock') ? 'cronlock.lock_dir' : '$CRONLOCK_LOCK_DIR')
                        . " 'var/lock' is a relative path, which would count from each run's working directory; set it to an absolute directory path",
                    $e->getMessage()
                );
            }
            self::assertFalse($ran);
            self::assertFileDoesNotExist("$this->dir/var/lock/sync.lock");
        } finally {
            chdir((string) $cwd);
        }
    }

    public function testTwoRunsFromTwoDirectoriesWithARelativeLockDirAreBothRefused(): void
    {
        $job = "$this->dir/job.php";
        file_put_contents($job, '<?php
            try {
                cron_guard(fn () => print("running\n"), "sync");
            } catch (CronLock\LockException $e) {
                echo get_class($e), ": ", $e->getMessage(), "\n";
            }');
        foreach (['a', 'b'] as $where) {
            mkdir("$this->dir/$where/var/lock", 0700, true);
            $cwd = getcwd();
            chdir("$this->dir/$where"); // the child's working directory
            try {
                [$code, $out, $err] = $this->runCommand(
                    [...self::phpCommand(), '-d', 'cronlock.lock_dir=var/lock', $job],
                    20.0,
                    [...getenv(), 'CRONLOCK_LOCK_DIR' => 'var/lock']
                );
            } finally {
                chdir((string) $cwd);
            }
            self::assertSame(0, $code, $err);
            // both are set: the variable counts, and the message names it
            self::assertStringStartsWith("CronLock\\LockException: \$CRONLOCK_LOCK_DIR 'var/lock' is a relative path", $out, "run in $where");
        }
    }

    public function testALockDirWithANulByteIsRefused(): void
    {
        if (!extension_loaded('cronlock')) {
            self::markTestSkipped('the extension only: neither putenv() nor php.ini can hold a NUL byte for cronlock/polyfill');
        }
        self::setLockDir("$this->dir\0/elsewhere");
        try {
            cron_guard(fn () => 'ran', 'x');
            self::fail('a lock_dir with a NUL byte was used');
        } catch (LockException $e) {
            self::assertSame(
                "cronlock.lock_dir '$this->dir\\u{0}/elsewhere' contains a NUL byte; set it to an absolute directory path",
                $e->getMessage()
            );
        }
        self::assertFileDoesNotExist("$this->dir/x.lock");
    }

    /**
     * php --ri is the extension's.
     *
     * @group extension-only
     */
    public function testPhpRiSaysARelativeLockDirIsRefused(): void
    {
        [$code, $out, $err] = $this->runCommand([PHP_BINARY, '-n', '-d', 'extension=' . self::extensionPath(),
            '-d', 'cronlock.lock_dir=var/lock', '--ri', 'cronlock']);
        self::assertSame(0, $code, $err);
        self::assertStringContainsString("named locks directory => none: cronlock.lock_dir 'var/lock' is a relative path", $out);
    }

    /**
     * A trailing newline (from a config generator, a here-doc) names another,
     * missing directory; the refusal must stay one log line.
     */
    public function testALockDirWithALineBreakIsNamedOnOneLine(): void
    {
        self::setLockDir("$this->dir/locks\n");
        try {
            cron_guard(fn () => 'ran', 'x');
            self::fail('a lock_dir naming a missing directory was used');
        } catch (LockException $e) {
            self::assertSame("lock directory $this->dir/locks\\n does not exist; create it, or set CRONLOCK_LOCK_DIR or "
                . 'cronlock.lock_dir to an existing absolute directory', $e->getMessage());
            self::assertStringNotContainsString("\n", $e->getMessage());
        }
    }

    /**
     * php --ri is the extension's: it names a world-writable directory without
     * the sticky bit as refused, as cron_guard() then refuses it.
     *
     * @group extension-only
     */
    public function testPhpRiSaysAWorldWritableLockDirWithoutTheStickyBitIsRefused(): void
    {
        chmod($this->dir, 0777);
        [$code, $out, $err] = $this->runCommand([PHP_BINARY, '-n', '-d', 'extension=' . self::extensionPath(),
            '-d', "cronlock.lock_dir=$this->dir", '--ri', 'cronlock']);
        self::assertSame(0, $code, $err);
        self::assertStringContainsString("named locks directory => none: lock directory $this->dir is world-writable without the sticky bit", $out);
        chmod($this->dir, 01777);
        [$code, $out, $err] = $this->runCommand([PHP_BINARY, '-n', '-d', 'extension=' . self::extensionPath(),
            '-d', "cronlock.lock_dir=$this->dir", '--ri', 'cronlock']);
        self::assertSame(0, $code, $err);
        self::assertStringContainsString("named locks directory => $this->dir\n", $out);
    }

    /**
     * The polyfill reads CRONLOCK_LOCK_DIR (userland cannot register an ini
     * setting); the extension reads it ahead of cronlock.lock_dir too, so a host
     * moving from one to the other locks the same file.
     */
    public function testTheEnvironmentVariableNamesTheDirectoryAheadOfTheIniSetting(): void
    {
        mkdir("$this->dir/env", 0700);
        mkdir("$this->dir/ini", 0700);
        putenv("CRONLOCK_LOCK_DIR=$this->dir/env");
        ini_set('cronlock.lock_dir', "$this->dir/ini");
        $dir = $this->dir;
        self::assertSame('env', cron_guard(function () use ($dir) {
            return file_exists("$dir/env/x.lock") ? 'env' : (file_exists("$dir/ini/x.lock") ? 'ini' : 'neither');
        }, 'x'));
        putenv('CRONLOCK_LOCK_DIR');
        if (extension_loaded('cronlock')) {
            self::assertSame('ini', cron_guard(function () use ($dir) {
                return file_exists("$dir/ini/y.lock") ? 'ini' : 'elsewhere';
            }, 'y'), 'unset, cronlock.lock_dir counts');
        }
    }
}

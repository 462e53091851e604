<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\Tests\Support\FileTestHelpers;
use CronLock\Tests\Support\MountNamespace;
use PHPUnit\Framework\TestCase;

/**
 * The default directory of named and script locks (decision D10): one fixed
 * absolute place per user, the same for every process of that user on the
 * host whatever TMPDIR, sys_temp_dir or the working directory say, and a
 * directory of the user's own. `/run/cronlock` for root; else
 * `/run/lock/cronlock-<euid>` when the user may create entries in /run/lock;
 * else `/tmp/cronlock-<euid>`.
 *
 * Every child runs in a private mount namespace (Support\MountNamespace)
 * with a fresh tmpfs over /run, /run/lock and /tmp: /run/lock read-only and
 * root's, as RHEL and Fedora ship it, unless a test says otherwise. So each
 * test starts from the same state on every machine, whatever an earlier run
 * left in the real /run/lock or /tmp, and leaves nothing there. The second
 * user is `nobody` (uid 65534), through runuser(1).
 */
final class DefaultLockDirTest extends TestCase
{
    use FileTestHelpers;

    /** Both runs of one job: the first waits in its job until the test lets it end. */
    private const JOB = <<<'PHP'
        $end = (string) getenv('CRONLOCK_TEST_JOB_END');
        $ran = cron_guard(function ($g) use ($end) {
            echo 'RAN ', $g->lock()->path(), "\n";
            for ($i = 0; $end !== '' && !file_exists($end) && $i < 12000; $i++) {
                usleep(10000);
            }
            return true;
        }, 'nightly');
        echo $ran === null ? "SKIPPED\n" : "DONE\n";
        PHP;

    protected function setUp(): void
    {
        parent::setUp();
        MountNamespace::skipUnlessAvailable();
        self::requireRootAndRunuser();
    }

    protected function tearDown(): void
    {
        $this->reapCommands();
        $this->removeTempDirs();
        parent::tearDown();
    }

    /** Which cronlock this run tests: the extension when loaded, else the polyfill. */
    private static function impl(): string
    {
        return extension_loaded('cronlock') ? 'extension' : 'polyfill';
    }

    /**
     * A fresh /run and /tmp; /run/lock read-only and root's 0755 unless $openRunLock
     * (then 1777, as Debian ships it). Made in it: /tmp/user/65534 (a login shell's
     * TMPDIR, as pam_tmpdir makes it), and /tmp/a and /tmp/b with a tmp/ each, of nobody's.
     */
    private function freshNamespace(bool $openRunLock = false): MountNamespace
    {
        $ns = MountNamespace::start([
            '/run' => ['mode' => 0755],
            '/run/lock' => $openRunLock ? ['mode' => 01777] : ['mode' => 0755, 'readonly' => true],
            '/tmp' => ['mode' => 01777],
        ]);
        [$code, , $err] = $this->runCommand($ns->command(['sh', '-c',
            'install -d -m 711 /tmp/user && install -d -o nobody -m 700 /tmp/user/65534 /tmp/a /tmp/a/tmp /tmp/b /tmp/b/tmp']));
        self::assertSame(0, $code, $err);
        return $ns;
    }

    /** Skip unless $user may run PHP_BINARY with $impl's cronlock (see requireRunnableAs()). */
    private function requirePhpRunnableAs(string $user, string $impl): void
    {
        $this->requireRunnableAs($user, $impl === 'extension' ? self::extensionPath() : dirname(__DIR__) . '/polyfill/bootstrap.php');
    }

    /**
     * Starts the job as nobody with $first's settings, waits until it runs,
     * then (at least 0.5 s later) runs it again with $second's, then lets
     * the first end.
     *
     * @param array{impl: string, env?: array<string, string|false>, ini?: array<string, string>, cwd?: string} $first
     * @param array{impl: string, env?: array<string, string|false>, ini?: array<string, string>, cwd?: string} $second
     * @return array{0: array{0: int, 1: string, 2: string}, 1: array{0: int, 1: string, 2: string}}
     */
    private function runTwice(MountNamespace $ns, array $first, array $second): array
    {
        foreach ([$first, $second] as $run) {
            $this->requirePhpRunnableAs('nobody', $run['impl']);
        }
        $end = '/tmp/end-' . bin2hex(random_bytes(4));
        $command = function (array $run, array $env) use ($ns): array {
            return $ns->php($run['impl'], self::extensionPath(), 'nobody', ['-r', self::JOB],
                $env + ($run['env'] ?? []), $run['ini'] ?? [], $run['cwd'] ?? '/');
        };
        $a = $this->startCommand($command($first, ['CRONLOCK_TEST_JOB_END' => $end]));
        self::waitUntil(function () use ($a): bool {
            // the whole line: echo writes 'RAN ' and the path one write(2) each
            return preg_match('/^RAN .*\n/m', $this->commandOutput($a)) === 1 || $this->commandExitCode($a) !== null;
        }, 'the first run to be in its job', 60.0);
        usleep(500_000);
        $b = $this->runCommand($command($second, ['CRONLOCK_TEST_JOB_END' => false]), 60.0);
        $this->runCommand($ns->command(['touch', $end]));
        return [$this->finishCommand($a, 60.0), $b];
    }

    /**
     * @param array{0: array{0: int, 1: string, 2: string}, 1: array{0: int, 1: string, 2: string}} $runs
     */
    private static function assertRanOnceIn(string $dir, array $runs): void
    {
        [[$codeA, $outA, $errA], [$codeB, $outB, $errB]] = $runs;
        self::assertSame([0, "SKIPPED\n"], [$codeB, $outB], "the second run ran while the first held the lock (twice at once): $errB");
        self::assertSame([0, "RAN $dir/nightly.lock\nDONE\n"], [$codeA, $outA], "the first run: $errA");
        self::assertMatchesRegularExpression('#cron_guard: lock nightly \(' . preg_quote($dir, '#') . '/nightly\.lock\) is held by pid \d+ on \S+ since \S+ \(\d+ s\); waited \d+\.\d s; skipping this run#', $errB);
    }

    /** @return iterable<string, array{0: array<string, mixed>, 1: array<string, mixed>}> the two runs' settings (the implementation is this run's) */
    public static function environments(): iterable
    {
        yield "cron (TMPDIR unset) and a login shell (TMPDIR=/tmp/user/65534, as pam_tmpdir sets it)" => [
            ['env' => ['TMPDIR' => false]],
            ['env' => ['TMPDIR' => '/tmp/user/65534']],
        ];
        yield 'TMPDIR="" from two working directories' => [
            ['env' => ['TMPDIR' => ''], 'cwd' => '/tmp/a'],
            ['env' => ['TMPDIR' => ''], 'cwd' => '/tmp/b'],
        ];
        yield 'a relative TMPDIR from two working directories' => [
            ['env' => ['TMPDIR' => 'tmp'], 'cwd' => '/tmp/a'],
            ['env' => ['TMPDIR' => 'tmp'], 'cwd' => '/tmp/b'],
        ];
        yield 'sys_temp_dir set for one run only' => [
            ['env' => ['TMPDIR' => false]],
            ['env' => ['TMPDIR' => false], 'ini' => ['sys_temp_dir' => '/tmp/a/tmp']],
        ];
    }

    /**
     * @dataProvider environments
     * @param array<string, mixed> $first
     * @param array<string, mixed> $second
     */
    public function testTheSameJobNeverRunsTwiceAtOnceWhateverTheEnvironmentSays(array $first, array $second): void
    {
        $ns = $this->freshNamespace();
        $runs = $this->runTwice($ns, $first + ['impl' => self::impl()], $second + ['impl' => self::impl()]);
        self::assertRanOnceIn('/tmp/cronlock-65534', $runs);
    }

    /** @return iterable<string, array{0: array<string, mixed>, 1: array<string, mixed>}> */
    public static function extensionAndPolyfill(): iterable
    {
        yield 'extension, then polyfill, TMPDIR="" (the extension used the working directory, the polyfill /tmp)' => [
            ['impl' => 'extension', 'env' => ['TMPDIR' => ''], 'cwd' => '/tmp/a'],
            ['impl' => 'polyfill', 'env' => ['TMPDIR' => ''], 'cwd' => '/tmp/b'],
        ];
        yield 'polyfill, then extension, TMPDIR=""' => [
            ['impl' => 'polyfill', 'env' => ['TMPDIR' => ''], 'cwd' => '/tmp/b'],
            ['impl' => 'extension', 'env' => ['TMPDIR' => ''], 'cwd' => '/tmp/a'],
        ];
        yield 'extension, then polyfill, -d sys_temp_dir (the polyfill followed it, the extension did not)' => [
            ['impl' => 'extension', 'ini' => ['sys_temp_dir' => '/tmp/a/tmp']],
            ['impl' => 'polyfill', 'ini' => ['sys_temp_dir' => '/tmp/a/tmp']],
        ];
        yield 'polyfill, then extension, -d sys_temp_dir' => [
            ['impl' => 'polyfill', 'ini' => ['sys_temp_dir' => '/tmp/a/tmp']],
            ['impl' => 'extension', 'ini' => ['sys_temp_dir' => '/tmp/a/tmp']],
        ];
    }

    /**
     * A host moving between the extension and cronlock/polyfill (or running
     * both) locks one file. Needs the built extension next to the polyfill.
     *
     * @dataProvider extensionAndPolyfill
     * @param array<string, mixed> $first
     * @param array<string, mixed> $second
     */
    public function testTheExtensionAndThePolyfillLockTheSameFile(array $first, array $second): void
    {
        if (PHP_VERSION_ID < 80100) {
            self::markTestSkipped('the extension needs PHP 8.1 or later; this is PHP ' . PHP_VERSION . ' (the polyfill alone is tested here)');
        }
        if (!is_file(self::extensionPath())) {
            self::markTestSkipped('needs the built extension (' . self::extensionPath() . ') next to the polyfill');
        }
        $ns = $this->freshNamespace();
        self::assertRanOnceIn('/tmp/cronlock-65534', $this->runTwice($ns, $first, $second));
    }

    /** @return iterable<string, array{string, bool, string, array<string, string|false>, array<string, string>}> */
    public static function riCases(): iterable
    {
        foreach (['TMPDIR unset' => ['TMPDIR' => false], 'TMPDIR=""' => ['TMPDIR' => ''], 'TMPDIR=tmp' => ['TMPDIR' => 'tmp'],
            'TMPDIR=/tmp/user/65534' => ['TMPDIR' => '/tmp/user/65534']] as $name => $env) {
            yield "nobody, /run/lock read-only, $name" => ['nobody', false, '/tmp/cronlock-65534', $env, []];
        }
        yield 'nobody, /run/lock read-only, -d sys_temp_dir' => ['nobody', false, '/tmp/cronlock-65534', [], ['sys_temp_dir' => '/tmp/a/tmp']];
        yield 'nobody, /run/lock writable, TMPDIR=""' => ['nobody', true, '/run/lock/cronlock-65534', ['TMPDIR' => ''], []];
        yield 'root, TMPDIR=""' => ['root', false, '/run/cronlock', ['TMPDIR' => ''], []];
    }

    /**
     * @group extension-only
     * Reads `php --ri cronlock`, which only the extension has.
     * @dataProvider riCases
     * @param array<string, string|false> $env
     * @param array<string, string> $ini
     */
    public function testPhpRiNamesTheAbsoluteDirectory(string $user, bool $openRunLock, string $expected, array $env, array $ini): void
    {
        $this->requirePhpRunnableAs($user, 'extension');
        $ns = $this->freshNamespace($openRunLock);
        [$code, $out, $err] = $this->runCommand($ns->php('extension', self::extensionPath(), $user, ['--ri', 'cronlock'], $env, $ini, '/tmp/a'));
        self::assertSame(0, $code, $err);
        self::assertMatchesRegularExpression('#^named locks directory => ' . preg_quote($expected, '#') . '$#m', $out);
    }

    /** @return iterable<string, array{string, bool, string}> user, /run/lock writable, the directory */
    public static function users(): iterable
    {
        yield 'root' => ['root', false, '/run/cronlock'];
        yield 'nobody, /run/lock writable' => ['nobody', true, '/run/lock/cronlock-65534'];
        yield 'nobody, /run/lock read-only' => ['nobody', false, '/tmp/cronlock-65534'];
    }

    /**
     * The directory is made 0700 and the lock files in it 0600, so another
     * user (daemon for nobody, nobody for root) can neither open (and so
     * hold) a lock file there nor pre-create one.
     *
     * @dataProvider users
     */
    public function testTheDefaultDirectoryIsMadeForItsUserAlone(string $user, bool $openRunLock, string $dir): void
    {
        $this->requirePhpRunnableAs($user, self::impl());
        $other = $user === 'root' ? 'nobody' : 'daemon';
        $ns = $this->freshNamespace($openRunLock);
        $end = '/tmp/end-' . bin2hex(random_bytes(4));
        $h = $this->startCommand($ns->php(self::impl(), self::extensionPath(), $user, ['-r', self::JOB], ['CRONLOCK_TEST_JOB_END' => $end]));
        self::waitUntil(function () use ($h): bool {
            // the whole line: echo writes 'RAN ' and the path one write(2) each
            return preg_match('/^RAN .*\n/m', $this->commandOutput($h)) === 1 || $this->commandExitCode($h) !== null;
        }, 'the job to run', 60.0);
        self::assertSame("RAN $dir/nightly.lock\n", $this->commandOutput($h));
        [$code, $out, $err] = $this->runCommand($ns->command(['stat', '-c', '%u %a', $dir, "$dir/nightly.lock"]));
        self::assertSame(0, $code, $err);
        $uid = $user === 'root' ? 0 : 65534;
        self::assertSame("$uid 700\n$uid 600\n", $out, 'only its user may open or create lock files there');
        [$code, , $err] = $this->runCommand($ns->command([...self::asUser($other), '/usr/bin/flock', '-n', "$dir/nightly.lock", 'true']));
        self::assertNotSame(0, $code, "$other must not be able to open the lock file: $err");
        [$code] = $this->runCommand($ns->command([...self::asUser($other), 'sh', '-c', "umask 0; : > $dir/other.lock"]));
        self::assertNotSame(0, $code, "$other cannot pre-create a lock file there");
        $this->runCommand($ns->command(['touch', $end]));
        [$code, $out, $err] = $this->finishCommand($h, 60.0);
        self::assertSame([0, "RAN $dir/nightly.lock\nDONE\n"], [$code, $out], $err);
    }

    /** @return iterable<string, array{bool, string}> /run/lock writable, nobody's directory */
    public static function preCreated(): iterable
    {
        yield '/tmp/cronlock-65534 (/run/lock read-only)' => [false, '/tmp/cronlock-65534'];
        yield '/run/lock/cronlock-65534' => [true, '/run/lock/cronlock-65534'];
    }

    /**
     * daemon (uid 1) made nobody's directory before nobody first used it: it
     * could open nobody's lock files, and hold them. cron_guard() refuses
     * it, the job does not run, and the message says what to do.
     *
     * @dataProvider preCreated
     */
    public function testADirectoryPreCreatedByAnotherUserIsRefused(bool $openRunLock, string $dir): void
    {
        $this->requirePhpRunnableAs('nobody', self::impl());
        $ns = $this->freshNamespace($openRunLock);
        [$code, , $err] = $this->runCommand($ns->command([...self::asUser('daemon'), 'sh', '-c', "umask 0; mkdir $dir"]));
        self::assertSame(0, $code, $err);
        [$code, $out, $err] = $this->runCommand($ns->php(self::impl(), self::extensionPath(), 'nobody', ['-r', <<<'PHP'
            try { cron_guard(function () { echo "JOB RAN\n"; }, 'job'); }
            catch (\CronLock\LockException $e) { echo get_class($e), ': ', $e->getMessage(), "\n"; }
            PHP]));
        self::assertSame(0, $code, $err);
        $refusal = "lock directory $dir is owned by uid 1, not by this process's uid 65534; "
            . 'have its owner or root remove it (cronlock recreates it), or set CRONLOCK_LOCK_DIR or cronlock.lock_dir '
            . 'to an absolute directory of your own';
        self::assertSame("CronLock\\LockException: $refusal\n", $out);
        if (self::impl() === 'extension') { // php --ri is the extension's: it names the refusal too
            [$code, $out, $err] = $this->runCommand($ns->php('extension', self::extensionPath(), 'nobody', ['--ri', 'cronlock']));
            self::assertSame(0, $code, $err);
            self::assertStringContainsString("named locks directory => none: $refusal\n", $out);
        }
    }
}

<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\Tests\Support\CliTestHelpers;
use CronLock\Tests\Support\FileTestHelpers;
use CronLock\Tests\Support\PublicCopy;
use PHPUnit\Framework\TestCase;

/**
 * `cronlock status` for File locks, against real holders and waiters:
 * cron_guard() in the extension and in cronlock/polyfill, util-linux
 * flock(1), PHP's flock(); held, free, stuck and waiting, in text and JSON,
 * and with neither the extension nor the polyfill loaded.
 */
final class CliStatusFileTest extends TestCase
{
    use CliTestHelpers;
    use FileTestHelpers;

    private const FLOCK = '/usr/bin/flock';

    private string $lockDir;
    private string $dir;

    protected function setUp(): void
    {
        parent::setUp();
        $this->lockDir = $this->makeTempDir('cli-status-locks');
        $this->dir = $this->makeTempDir('cli-status');
        putenv("CRONLOCK_LOCK_DIR={$this->lockDir}");
    }

    protected function tearDown(): void
    {
        touch("{$this->dir}/stop");
        putenv('CRONLOCK_LOCK_DIR');
        $this->reapCommands();
        $this->removeTempDirs();
        parent::tearDown();
    }

    /** A cron_guard() job of $impl holding the named lock $name until tearDown; returns its pid. */
    private function guardHolder(string $impl, string $name): int
    {
        $ready = "{$this->dir}/ready-$name";
        $h = $this->startPhp($impl, 'cron_guard(function () use ($argv) { touch($argv[1]);
            while (!file_exists($argv[2])) { usleep(10000); } }, $argv[3]);', [$ready, "{$this->dir}/stop", $name]);
        self::waitUntil(fn () => file_exists($ready) || $this->commandExitCode($h) !== null, "$impl to hold $name");
        self::assertNull($this->commandExitCode($h), "$impl holds $name");
        return $this->commandPid($h);
    }

    /** flock(1) holding $path until tearDown; returns its pid. */
    private function flockHolder(string $path): int
    {
        $ready = "{$this->dir}/ready-" . basename($path);
        $h = $this->startCommand([self::FLOCK, '-n', $path, '-c', sprintf('touch %s; s=%s; while [ ! -e "$s" ] && [ -d "${s%%/*}" ]; do sleep 0.02; done',
            escapeshellarg($ready), escapeshellarg("{$this->dir}/stop"))]);
        self::waitUntil(fn () => file_exists($ready) || $this->commandExitCode($h) !== null, 'flock(1) to hold ' . $path);
        return $this->commandPid($h);
    }

    /**
     * PHP's own flock() holding $path, with $record written at the start
     * (sprintf'd with its pid) unless null; returns its pid.
     */
    private function phpFlockHolder(string $path, ?string $record = null): int
    {
        $ready = "{$this->dir}/ready-" . basename($path);
        $h = $this->startPhp('bare', '$f = fopen($argv[1], "c+"); flock($f, LOCK_EX);
            if ($argv[4] !== "") { $r = sprintf($argv[4], getmypid()); fwrite($f, str_pad($r, 127) . "\n"); }
            touch($argv[2]); while (!file_exists($argv[3])) { usleep(10000); }',
            [$path, $ready, "{$this->dir}/stop", $record ?? '']);
        self::waitUntil(fn () => file_exists($ready) || $this->commandExitCode($h) !== null, 'PHP flock() to hold ' . $path);
        return $this->commandPid($h);
    }

    /** $count processes blocking in flock(1) -w for $path, until tearDown. */
    private function flockWaiters(string $path, int $count): void
    {
        for ($i = 0; $i < $count; $i++) {
            $this->startCommand([self::FLOCK, '-w', '60', $path, 'true']);
        }
        self::waitUntil(fn () => self::kernelWaiters($path) === $count, "$count waiters in /proc/locks for $path");
    }

    private static function kernelWaiters(string $path): int
    {
        $st = stat($path);
        $want = sprintf('%02x:%02x:%d', ($st['dev'] >> 8) & 0xfff, ($st['dev'] & 0xff) | (($st['dev'] >> 12) & ~0xff), $st['ino']);
        return preg_match_all('/-> FLOCK\s+\S+\s+\S+\s+\d+\s+' . preg_quote($want, '/') . '\s/', (string) file_get_contents('/proc/locks'));
    }

    private static function json(string $out): array
    {
        $doc = json_decode($out, true, 512, JSON_THROW_ON_ERROR);
        self::assertSame('cronlock-status/1', $doc['schema']);
        $byName = [];
        foreach ($doc['locks'] as $lock) {
            $byName[$lock['name']] = $lock;
        }
        $doc['locks'] = $byName;
        return $doc;
    }

    public function testHeldFreeAndWaitingLocksOfEveryKindOfHolder(): void
    {
        $impls = self::extensionBuilt() ? ['extension', 'polyfill'] : ['polyfill'];
        $pids = [];
        foreach ($impls as $impl) {
            $pids[$impl] = $this->guardHolder($impl, "by-$impl");
        }
        $pids['flock'] = $this->flockHolder("{$this->lockDir}/by-flock.lock");
        $this->flockWaiters("{$this->lockDir}/by-flock.lock", 2);
        $pids['php'] = $this->phpFlockHolder("{$this->lockDir}/by-php-flock.lock");
        $this->flockWaiters("{$this->lockDir}/by-php-flock.lock", 1);
        // released: the holder rewrote its record as free, since the release
        [$code, , $err] = $this->cronlock(['run', '--lock', 'released', '--', 'true']);
        self::assertSame(0, $code, $err);
        $released = (string) file_get_contents("{$this->lockDir}/released.lock");
        self::assertSame(1, preg_match('/^cronlock free since=(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) +\n$/', $released, $m), $released);
        $releasedSince = $m[1];
        // a free record written elsewhere (by another host's run, say)
        file_put_contents("{$this->lockDir}/free-record.lock", str_pad('cronlock free since=2026-11-30T14:52:07Z', 127) . "\n");
        touch("{$this->lockDir}/empty.lock");
        file_put_contents("{$this->lockDir}/notes.txt", 'not a lock file');
        symlink("{$this->lockDir}/empty.lock", "{$this->lockDir}/link.lock");

        [$code, $out, $err] = $this->cronlock(['status']);
        self::assertSame(0, $code, $err);
        self::assertSame('', $err);
        $rows = self::statusTable($out, "{$this->lockDir} (CRONLOCK_LOCK_DIR)");
        $names = array_merge(array_map(fn ($i) => "by-$i", $impls), ['by-flock', 'by-php-flock', 'empty', 'free-record', 'released']);
        sort($names);
        self::assertSame($names, array_keys($rows), "*.lock files only, no symlink, sorted:\n$out");
        foreach ($impls as $impl) {
            $row = $rows["by-$impl"];
            self::assertSame(['held', (string) $pids[$impl], gethostname(), 'yes', '0'], [$row['STATE'], $row['PID'], $row['HOST'], $row['ALIVE'], $row['WAITING']], "$impl holder:\n$out");
            self::assertMatchesRegularExpression('/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/', $row['SINCE'], 'since from the record, no footnote mark');
            self::assertMatchesRegularExpression('/^\d+ s$/', $row['HELD FOR']);
        }
        self::assertSame(['held', (string) $pids['flock'], 'yes', '2'], [$rows['by-flock']['STATE'], $rows['by-flock']['PID'], $rows['by-flock']['ALIVE'], $rows['by-flock']['WAITING']],
            "flock(1) wrote no record: the kernel's pid, two blocked waiters:\n$out");
        self::assertStringEndsWith('Z*', $rows['by-flock']['SINCE'], 'since: the process start, footnoted');
        self::assertStringContainsString("* since: the holder process's start", $out);
        self::assertSame(['held', (string) $pids['php'], '1'], [$rows['by-php-flock']['STATE'], $rows['by-php-flock']['PID'], $rows['by-php-flock']['WAITING']]);
        self::assertSame(['free', '-', '-', $releasedSince, '-', '-', '0'], array_values(array_slice($rows['released'], 1)), "a finished run's record says free since its release\n$out");
        self::assertSame(['free', '-', '-', '2026-11-30T14:52:07Z', '-', '-', '0'], array_values(array_slice($rows['free-record'], 1)), 'free since the record says');
        self::assertSame('free', $rows['empty']['STATE']);

        [$code, $out, $err] = $this->cronlock(['status', '--json']);
        self::assertSame(0, $code, $err);
        $doc = self::json($out);
        self::assertSame(gethostname(), $doc['host']);
        self::assertSame([['backend' => 'file', 'title' => "{$this->lockDir} (CRONLOCK_LOCK_DIR)", 'exists' => true, 'read' => true, 'note' => null]], $doc['sources']);
        self::assertSame([], $doc['errors']);
        self::assertSame(0, $doc['stuck']);
        foreach ($impls as $impl) {
            $lock = $doc['locks']["by-$impl"];
            self::assertSame(['file', $this->lockDir, "{$this->lockDir}/by-$impl.lock", 'held', false, false, $pids[$impl], gethostname(), true, 'record', 0],
                [$lock['backend'], $lock['source'], $lock['path'], $lock['state'], $lock['stuck'], $lock['shared'], $lock['pid'], $lock['host'], $lock['pid_alive'], $lock['since_source'], $lock['waiters']]);
            self::assertSame(['state' => 'held', 'pid' => $pids[$impl], 'host' => gethostname(), 'since' => $lock['since']], $lock['record']);
            self::assertIsInt($lock['held_for']);
        }
        self::assertSame([2, 'process start', null], [$doc['locks']['by-flock']['waiters'], $doc['locks']['by-flock']['since_source'], $doc['locks']['by-flock']['record']]);
        $free = $doc['locks']['released'];
        self::assertSame(['free', null, null, null, null], [$free['state'], $free['pid'], $free['host'], $free['pid_alive'], $free['held_for']]);
        self::assertSame(['state' => 'free', 'pid' => null, 'host' => null, 'since' => $releasedSince], $free['record'], 'the record as written, in JSON');
        self::assertSame(['state' => 'free', 'pid' => null, 'host' => null, 'since' => '2026-11-30T14:52:07Z'], $doc['locks']['free-record']['record']);
        self::assertNull($doc['locks']['empty']['record']);
        foreach (['ttl', 'fence', 'connection', 'client'] as $field) {
            self::assertNull($doc['locks']['by-flock'][$field], "$field: not a File lock's");
        }
    }

    public function testAHolderHeldLongerThanStaleAfterIsStuckAndTheExitStatusSaysSo(): void
    {
        $since = gmdate('Y-m-d\TH:i:s\Z', time() - 3 * 3600 - 120);
        $pid = $this->phpFlockHolder("{$this->lockDir}/nightly.lock", 'cronlock pid=%d host=' . gethostname() . " since=$since");
        $this->guardHolder('suite', 'fresh');

        [$code, $out] = $this->cronlock(['status']);
        self::assertSame(0, $code, 'without --stale-after nothing is stuck');
        self::assertSame('3 h 2 min', self::statusTable($out, "{$this->lockDir} (CRONLOCK_LOCK_DIR)")['nightly']['HELD FOR']);

        [$code, $out] = $this->cronlock(['status', '--stale-after', '1h']);
        self::assertSame(1, $code, "a stuck holder: exit 1\n$out");
        $rows = self::statusTable($out, "{$this->lockDir} (CRONLOCK_LOCK_DIR)");
        self::assertSame(['stuck', (string) $pid, $since], [$rows['nightly']['STATE'], $rows['nightly']['PID'], $rows['nightly']['SINCE']]);
        self::assertSame('held', $rows['fresh']['STATE']);
        self::assertStringEndsWith("\nstuck: 1 held longer than 1 h: nightly\n", $out);

        [$code, $out] = $this->cronlock(['status', '--stale-after', '1h', '--json']);
        self::assertSame(1, $code);
        $doc = self::json($out);
        self::assertSame([3600.0, 1, true, false], [$doc['stale_after'], $doc['stuck'], $doc['locks']['nightly']['stuck'], $doc['locks']['fresh']['stuck']]);
        self::assertGreaterThanOrEqual(3 * 3600 + 120, $doc['locks']['nightly']['held_for']);

        [$code] = $this->cronlock(['status', '--stale-after', '4h']);
        self::assertSame(0, $code, 'held for less than 4 h');
    }

    public function testAHolderThatDiedWhileItsChildKeepsTheFileHeldIsShownHeldByADeadPid(): void
    {
        $path = "{$this->lockDir}/orphaned.lock";
        $started = "{$this->dir}/bg";
        // flock(1) takes the lock, its shell leaves a sleep behind with the descriptor, both exit
        [$code] = $this->runCommand([self::FLOCK, $path, 'sh', '-c', sprintf('(touch %s; exec sleep 30) & exit 0', escapeshellarg($started))]);
        self::assertSame(0, $code);
        self::waitUntil(fn () => file_exists($started), 'the background sleep');
        [$code, $out] = $this->cronlock(['status', '--json', $path]);
        self::assertSame(0, $code);
        $lock = self::json($out)['locks']['orphaned'];
        self::assertSame(['held', false], [$lock['state'], $lock['pid_alive']], 'the kernel still lists the lock, under the pid of flock(1), which is gone');
        // the sleep was reparented, not ours to wait for: found by its descriptor on the file
        foreach (glob('/proc/[0-9]*/fd/*') ?: [] as $fd) {
            $pid = (int) explode('/', $fd)[2];
            if ($pid !== getmypid() && @readlink($fd) === $path) {
                self::killPid($pid);
            }
        }
        self::assertFalse(self::kernelHolds($path));
    }

    public function testStatusReadsLockFilesWithNeitherTheExtensionNorThePolyfill(): void
    {
        $pid = $this->guardHolder('suite', 'job');
        $this->flockWaiters("{$this->lockDir}/job.lock", 1);
        [$code, $out, $err] = $this->cronlock(['status'], 'bare');
        self::assertSame(0, $code, $err);
        $row = self::statusTable($out, "{$this->lockDir} (CRONLOCK_LOCK_DIR)")['job'];
        self::assertSame(['held', (string) $pid, 'yes', '1'], [$row['STATE'], $row['PID'], $row['ALIVE'], $row['WAITING']], "php -n:\n$out");
        [$code, $out] = $this->cronlock(['status', '--json', "{$this->lockDir}/job.lock"], 'bare');
        if ($this->runCommand([PHP_BINARY, '-n', '-r', 'exit(function_exists("json_encode") ? 0 : 1);'])[0] !== 0) {
            self::assertSame(69, $code, "--json without PHP's json extension (a module before PHP 8) says so");
            return;
        }
        self::assertSame(0, $code);
        self::assertSame($pid, self::json($out)['locks']['job']['pid']);
    }

    public function testTheLockDirSettingIsReadWhenTheVariableIsUnset(): void
    {
        $pid = $this->guardHolder('suite', 'by-ini');
        foreach (['bare', 'polyfill'] + (self::extensionBuilt() ? [2 => 'extension'] : []) as $impl) {
            [$code, $out, $err] = $this->cronlock(['status'], $impl, ['CRONLOCK_LOCK_DIR' => false], ['-d', "cronlock.lock_dir={$this->lockDir}"]);
            self::assertSame(0, $code, $err);
            self::assertSame((string) $pid, self::statusTable($out, "{$this->lockDir} (cronlock.lock_dir)")['by-ini']['PID'], "$impl:\n$out");
        }
    }

    public function testWhatCannotBeReadIsSaidAndExitsTwo(): void
    {
        $this->guardHolder('suite', 'readable');
        $missing = "{$this->dir}/no-such.lock";
        [$code, $out, $err] = $this->cronlock(['status', $this->lockDir, $missing]);
        self::assertSame(2, $code);
        self::assertSame('held', self::statusTable($out, $this->lockDir)['readable']['STATE'], 'what can be read is printed');
        self::assertSame("cronlock status: $missing: cannot stat: No such file or directory\n", $err);
        [$code, $out] = $this->cronlock(['status', '--json', $missing]);
        self::assertSame(2, $code);
        self::assertSame(["$missing: cannot stat: No such file or directory"], self::json($out)['errors']);
    }

    public function testADirectoryThatDoesNotExistYetIsNoError(): void
    {
        $dir = "{$this->dir}/never-used";
        [$code, $out, $err] = $this->cronlock(['status'], 'suite', ['CRONLOCK_LOCK_DIR' => $dir]);
        self::assertSame(0, $code, $err);
        self::assertSame("$dir (CRONLOCK_LOCK_DIR)\n  (does not exist: no lock was taken here yet)\n", $out);
    }

    /** @return iterable<string, array{0: string|null, 1: bool, 2: string, 3: string}> */
    public static function defaultDirectories(): iterable
    {
        yield 'root' => [null, false, '/run/cronlock', 'default lock directory of root'];
        yield 'nobody, /run/lock writable' => ['nobody', false, '/run/lock/cronlock-65534', 'default lock directory of uid 65534'];
        yield 'nobody, /run/lock read-only' => ['nobody', true, '/tmp/cronlock-65534', 'default lock directory of uid 65534'];
    }

    /**
     * The default directory of a user, in a private mount namespace with a
     * fresh tmpfs on /run (and /tmp), so the host's own directories are
     * neither read nor touched: `cronlock run --lock job` holds it there
     * while its command, `cronlock status`, lists it.
     *
     * @dataProvider defaultDirectories
     */
    public function testTheDefaultDirectoryOfEachUserIsListed(?string $user, bool $runLockReadOnly, string $dir, string $origin): void
    {
        if (posix_geteuid() !== 0 || !is_executable('/usr/bin/unshare') || !is_executable('/usr/sbin/runuser')) {
            self::markTestSkipped('needs root, unshare(1) and runuser(1) for a private mount namespace');
        }
        if ($this->runCommand(['unshare', '--mount', '--propagation', 'private', '--', 'true'])[0] !== 0) {
            self::markTestSkipped('unshare(1) cannot make a private mount namespace here (a chroot whose / is no mount point)');
        }
        $impl = self::extensionBuilt() ? 'extension' : 'polyfill';
        [$php] = self::phpFor($impl);
        $bin = self::cronlockBin();
        if ($user !== null) {
            // a PHP the user cannot run (scripts/compat zts builds one under /root/.cache)
            $this->requireRunnableAs($user, $impl === 'extension' ? self::extensionPath() : dirname(__DIR__) . '/polyfill/bootstrap.php');
        }
        // copies the user can read where the checkout is closed to it (/root/cronlock),
        // and that the fresh /tmp below does not hide (a clone under /tmp)
        $bin = PublicCopy::of($bin);
        $php = array_map(static function (string $arg): string {
            return preg_replace_callback('/^(extension|auto_prepend_file)=(.*)$/', static function (array $m): string {
                return $m[1] . '=' . PublicCopy::of($m[2]);
            }, $arg) ?? $arg;
        }, $php);
        $cronlock = implode(' ', array_map('escapeshellarg', array_merge($php, [$bin])));
        $script = implode(' && ', array_filter([
            'mount -t tmpfs -o mode=0755 cronlock-test /run',
            'mkdir -m 1777 /run/lock',
            $runLockReadOnly ? 'mount -t tmpfs -o ro,mode=1777 cronlock-test /run/lock' : null,
            'mount -t tmpfs -o mode=1777 cronlock-test /tmp',
            'exec ' . ($user === null ? '' : "runuser -u $user -- ") . "env -u CRONLOCK_LOCK_DIR -u TMPDIR -u PHP_INI_SCAN_DIR sh -c "
                . escapeshellarg("$cronlock run --lock job -- $cronlock status --json && $cronlock run --lock second -- true && stat -c 'mode %a' $dir/second.lock"),
        ]));
        [$code, $out, $err] = $this->runCommand(['unshare', '--mount', '--propagation', 'private', '--', 'sh', '-c', $script]);
        self::assertSame(0, $code, $err);
        self::assertStringEndsWith("}\nmode 600\n", $out, "a lock file of the user's default directory is created 0600, as cron_guard() creates it");
        $doc = self::json(substr($out, 0, strrpos($out, 'mode')));
        self::assertSame([['backend' => 'file', 'title' => "$dir ($origin)", 'exists' => true, 'read' => true, 'note' => null]], $doc['sources'], $out);
        self::assertSame(['held', "$dir/job.lock"], [$doc['locks']['job']['state'], $doc['locks']['job']['path']]);
    }

    public function testBadArgumentsExit64(): void
    {
        foreach ([[['status', '--stale-after', 'long'], '--stale-after takes a duration'], [['status', '--prefix', 'x'], '--prefix goes with --redis'],
            [['status', '--bogus'], 'unknown option --bogus']] as [$args, $message]) {
            [$code, , $err] = $this->cronlock($args);
            self::assertSame(64, $code);
            self::assertStringContainsString($message, $err);
        }
    }
}

<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\Tests\Support\CliTestHelpers;
use CronLock\Tests\Support\FileTestHelpers;
use PHPUnit\Framework\TestCase;

/**
 * `cronlock run`: a command held under a lock for its whole life, as real
 * processes: the lock is held while the command runs and free after, a busy
 * lock skips it (0, or --on-busy), the command's status comes back (128 + N
 * for signal N), SIGTERM/SIGINT/SIGHUP reach it, and a `kill -9` of the
 * wrapper (alone, or with its whole process group) takes the command with
 * it, and everything the command started (Supervisor's watchdog).
 */
final class CliRunTest extends TestCase
{
    use CliTestHelpers;
    use FileTestHelpers;

    private const FLOCK = '/usr/bin/flock';

    private string $lockDir;
    private string $dir;

    protected function setUp(): void
    {
        parent::setUp();
        $this->lockDir = $this->makeTempDir('cli-run-locks');
        $this->dir = $this->makeTempDir('cli-run');
        putenv("CRONLOCK_LOCK_DIR={$this->lockDir}");
    }

    protected function tearDown(): void
    {
        putenv('CRONLOCK_LOCK_DIR');
        $this->reapCommands();
        $this->removeTempDirs();
        parent::tearDown();
    }

    /** A command that touches $started, then waits for $stop (or 30 s), then exits $status. */
    private function waitingCommand(string $started, string $stop, int $status = 0): array
    {
        return ['sh', '-c', sprintf('touch %s; i=0; while [ ! -e %s ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done; exit %d',
            escapeshellarg($started), escapeshellarg($stop), $status)];
    }

    public function testTheLockIsHeldWhileTheCommandRunsAndFreeAfter(): void
    {
        $lock = "{$this->lockDir}/report.lock";
        $started = "{$this->dir}/started";
        $stop = "{$this->dir}/stop";
        $h = $this->startCronlock(array_merge(['run', '--lock', 'report', '--'], $this->waitingCommand($started, $stop, 3)));
        self::waitUntil(fn () => file_exists($started) || $this->commandExitCode($h) !== null, 'the command to start');
        self::assertNull($this->commandExitCode($h), 'the command runs');
        self::assertTrue(self::kernelHolds($lock), 'the kernel lists a holder of the lock file while the command runs');
        self::assertSame(1, $this->runCommand([self::FLOCK, '-n', $lock, 'true'])[0], 'flock -n finds it busy');
        self::assertMatchesRegularExpression('/^cronlock pid=' . $this->commandPid($h) . ' /', (string) file_get_contents($lock),
            'the record names the wrapper, which holds the lock');
        touch($stop);
        [$code, $out, $err] = $this->finishCommand($h);
        self::assertSame(3, $code, "the command's status: $err");
        self::assertSame('', $out . $err);
        self::assertFalse(self::kernelHolds($lock), 'free once the command ended');
    }

    public function testABusyLockSkipsTheCommandQuietlyWithStatusZeroOrOnBusy(): void
    {
        $lock = "{$this->lockDir}/busy.lock";
        $ready = "{$this->dir}/flock-ready";
        $stop = "{$this->dir}/flock-stop";
        $holder = $this->startCommand([self::FLOCK, '-n', $lock, '-c', sprintf('touch %s; s=%s; while [ ! -e "$s" ] && [ -d "${s%%/*}" ]; do sleep 0.02; done',
            escapeshellarg($ready), escapeshellarg($stop))]);
        self::waitUntil(fn () => file_exists($ready), 'flock(1) to hold the lock');
        $ran = "{$this->dir}/ran";
        [$code, $out, $err] = $this->cronlock(['run', '--lock', 'busy', '--', 'touch', $ran]);
        self::assertSame(0, $code, 'busy: exit 0, as flock -n would be asked with -E 0');
        self::assertSame('', $out . $err, 'nothing on stdout or stderr: a skip is no news for cron to mail');
        self::assertFileDoesNotExist($ran, 'the command did not run');
        [$code, $out, $err] = $this->cronlock(['run', '--on-busy', '9', '--file', $lock, '--', 'touch', $ran]);
        self::assertSame(9, $code, '--on-busy 9');
        self::assertSame('', $out . $err);
        self::assertFileDoesNotExist($ran);
        [$code, $out, $err] = $this->cronlock(['run', '--lock', 'busy', '--wait', '0.3', '--', 'touch', $ran]);
        self::assertSame([0, ''], [$code, $out . $err], 'a wait that ends busy is as quiet');
        self::assertFileDoesNotExist($ran);
        touch($stop);
        $this->finishCommand($holder);
        [$code, , $err] = $this->cronlock(['run', '--file', $lock, '--', 'touch', $ran]);
        self::assertSame(0, $code, $err);
        self::assertFileExists($ran, 'runs once the lock is free');
    }

    public function testWaitTakesTheLockWhenTheHolderLetsGo(): void
    {
        $started = "{$this->dir}/first";
        $stop = "{$this->dir}/stop";
        $first = $this->startCronlock(array_merge(['run', '--lock', 'w', '--'], $this->waitingCommand($started, $stop)));
        self::waitUntil(fn () => file_exists($started), 'the first run to start');
        $ran = "{$this->dir}/second";
        $second = $this->startCronlock(['run', '--lock', 'w', '--wait', '20', '--', 'touch', $ran]);
        usleep(300_000);
        self::assertFileDoesNotExist($ran, 'the second run waits');
        self::assertNull($this->commandExitCode($second));
        touch($stop);
        self::assertSame(0, $this->finishCommand($first)[0]);
        [$code, , $err] = $this->finishCommand($second);
        self::assertSame(0, $code, $err);
        self::assertFileExists($ran, 'the second run ran after the first');
    }

    /** @return iterable<string, array{0: int, 1: string}> */
    public static function forwardedSignals(): iterable
    {
        yield 'SIGTERM' => [SIGTERM, 'TERM'];
        yield 'SIGINT' => [SIGINT, 'INT'];
        yield 'SIGHUP' => [SIGHUP, 'HUP'];
    }

    /** @dataProvider forwardedSignals */
    public function testASignalToTheWrapperReachesTheCommand(int $signal, string $name): void
    {
        $started = "{$this->dir}/started";
        $got = "{$this->dir}/got";
        // The trap runs once the foreground `sleep` ends: sleep in short steps.
        $script = sprintf('trap "echo %s > %s; exit 42" %s; touch %s; i=0; while [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done; exit 1',
            $name, escapeshellarg($got), $name, escapeshellarg($started));
        $h = $this->startCronlock(['run', '--lock', 'sig', '--', 'sh', '-c', $script]);
        self::waitUntil(fn () => file_exists($started) || $this->commandExitCode($h) !== null, 'the command to start');
        posix_kill($this->commandPid($h), $signal);
        [$code, , $err] = $this->finishCommand($h);
        self::assertSame(42, $code, "the wrapper exits with the command's status after its trap ran: $err");
        self::assertSame("$name\n", (string) @file_get_contents($got), "the command got SIG$name");
        self::assertFalse(self::kernelHolds("{$this->lockDir}/sig.lock"), 'free after');
    }

    public function testACommandKilledByASignalGives128PlusItsNumber(): void
    {
        [$code] = $this->cronlock(['run', '--lock', 'k', '--', 'sh', '-c', 'kill -TERM $$']);
        self::assertSame(128 + SIGTERM, $code);
        [$code] = $this->cronlock(['run', '--lock', 'k', '--', 'sh', '-c', 'kill -KILL $$']);
        self::assertSame(128 + SIGKILL, $code);
        $started = "{$this->dir}/started";
        $h = $this->startCronlock(array_merge(['run', '--lock', 'k', '--'], $this->waitingCommand($started, "{$this->dir}/never")));
        self::waitUntil(fn () => file_exists($started), 'the command to start');
        posix_kill($this->commandPid($h), SIGTERM); // sh's `sleep` loop has no trap: it dies of it
        self::assertSame(128 + SIGTERM, $this->finishCommand($h)[0], 'a forwarded SIGTERM that ends the command: 143');
    }

    public function testExitStatusesOfTheCommandComeBackUnchanged(): void
    {
        foreach ([0, 1, 2, 77, 255] as $status) {
            [$code] = $this->cronlock(['run', '--lock', 'st', '--', 'sh', '-c', "exit $status"]);
            self::assertSame($status, $code, "exit $status");
        }
        [$code, , $err] = $this->cronlock(['run', '--lock', 'st', '--', "{$this->dir}/no-such-program"]);
        self::assertSame(127, $code, 'a command that cannot be executed: 127, as a shell says');
        self::assertStringContainsString('no-such-program', $err);
    }

    public function testKill9OfTheWrapperKillsTheCommandAndFreesTheLock(): void
    {
        $started = "{$this->dir}/started";
        $lock = "{$this->lockDir}/orphan.lock";
        $h = $this->startCronlock(array_merge(['run', '--lock', 'orphan', '--'], $this->waitingCommand($started, "{$this->dir}/never")));
        self::waitUntil(fn () => file_exists($started), 'the command to start');
        $children = $this->commandChildren($this->commandPid($h));
        self::assertCount(1, $children, 'one child besides the watchdog: the command');
        $child = $children[0];
        self::assertTrue(self::processAlive($child));
        $this->killCommand($h);
        self::waitUntil(fn () => !self::processAlive($child), 'the command to die with its wrapper', 10.0);
        self::assertFalse(self::kernelHolds($lock), 'nobody holds the lock');
        [$code, , $err] = $this->cronlock(['run', '--lock', 'orphan', '--', 'true']);
        self::assertSame(0, $code, "the next run takes it: $err");
    }

    /** @return iterable<string, array{bool}> */
    public static function wrapperKills(): iterable
    {
        yield 'kill -9 of the wrapper alone' => [false];
        yield 'kill -9 of the wrapper\'s process group' => [true];
    }

    /**
     * A shell command's own children (`sleep &`, the left side of a pipe)
     * die with the wrapper: the parent-death signal reaches only the shell,
     * the watchdog kills the command's whole process group.
     *
     * @dataProvider wrapperKills
     */
    public function testKill9OfTheWrapperEndsEverythingAShellCommandStarted(bool $wholeGroup): void
    {
        $pids = "{$this->dir}/pids";
        $lock = "{$this->lockDir}/tree.lock";
        $script = sprintf('sleep 60 & echo $! >> %1$s; sleep 60 | cat & echo $! >> %1$s; wait', escapeshellarg($pids));
        [$cmd, $env] = $this->cronlockCommand(['run', '--lock', 'tree', '--', 'sh', '-c', $script]);
        $h = $this->startCommand($wholeGroup ? array_merge(['setsid'], $cmd) : $cmd, $env);
        self::waitUntil(fn () => count(self::pidsIn($pids)) === 2, 'the shell to start its children');
        $descendants = self::pidsIn($pids);
        foreach ($descendants as $pid) {
            self::assertTrue(self::processAlive($pid));
        }
        if ($wholeGroup) {
            posix_kill(-$this->commandPid($h), SIGKILL); // setsid made the wrapper a group leader: `timeout -s KILL`, a cgroup kill
        } else {
            $this->killCommand($h);
        }
        foreach ($descendants as $pid) {
            self::waitUntil(fn () => !self::processAlive($pid), "the shell's child $pid to die with the wrapper", 10.0);
        }
        self::waitUntil(fn () => !self::kernelHolds($lock), 'the lock to be free', 10.0);
    }

    public function testWhatACommandLeavesBehindEndsBeforeTheLockIsReleased(): void
    {
        $pids = "{$this->dir}/pids";
        [$code, , $err] = $this->cronlock(['run', '--lock', 'left', '--', 'sh', '-c', sprintf('sleep 60 & echo $! > %s; exit 3', escapeshellarg($pids))]);
        self::assertSame(3, $code, $err);
        [$left] = self::pidsIn($pids);
        self::waitUntil(fn () => !self::processAlive($left), 'the `sleep &` the command left to be gone', 10.0);
    }

    public function testASignalToTheWrapperReachesTheCommandsWholeGroup(): void
    {
        $got = "{$this->dir}/got";
        $pids = "{$this->dir}/pids";
        $inner = sprintf('trap "echo inner >> %s; exit 0" TERM; echo $$ >> %s; i=0; while [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done', escapeshellarg($got), escapeshellarg($pids));
        $h = $this->startCronlock(['run', '--lock', 'grp', '--', 'sh', '-c', sprintf('trap wait TERM; sh -c %s & wait', escapeshellarg($inner))]);
        self::waitUntil(fn () => count(self::pidsIn($pids)) === 1, 'the inner shell to start');
        posix_kill($this->commandPid($h), SIGTERM);
        $this->finishCommand($h);
        self::assertSame("inner\n", (string) @file_get_contents($got), 'the shell\'s own child got SIGTERM too');
    }

    /** @return int[] the pids written one a line to $file */
    private static function pidsIn(string $file): array
    {
        return array_map('intval', array_filter(explode("\n", (string) @file_get_contents($file)), 'strlen'));
    }

    /** @return int[] the children of $pid except Supervisor's watchdog */
    private function commandChildren(int $pid): array
    {
        return array_values(array_filter(self::childrenOf($pid), function (int $child): bool {
            return strpos((string) @file_get_contents("/proc/$child/cmdline"), 'cronlock-watchdog') === false;
        }));
    }

    public function testTheCommandsOwnOptionsAreNotReadAsOurs(): void
    {
        $out = "{$this->dir}/out";
        [$code, , $err] = $this->cronlock(['run', '--lock', 'opts', 'sh', '-c', 'echo "$@" > "$0"', $out, '--wait', '--lock', '--']);
        self::assertSame(0, $code, $err);
        self::assertSame("--wait --lock --\n", file_get_contents($out), 'everything from the first word of the command on is the command');
    }

    public function testBadCommandLinesAreRefusedWith64(): void
    {
        foreach ([
            [['run', '--', 'true'], 'exactly one lock'],
            [['run', '--lock', 'a', '--file', '/tmp/x', '--', 'true'], 'exactly one lock'],
            [['run', '--lock', 'a'], 'needs a command'],
            [['run', '--lock', 'a', '--on-busy', '300', '--', 'true'], '--on-busy'],
            [['run', '--lock', 'a', '--wait', 'soon', '--', 'true'], '--wait'],
            [['run', '--redis-env', 'CRONLOCK_TEST_UNSET_VARIABLE', '--key', 'k', '--', 'true'], 'is not set'],
            [['frobnicate'], 'unknown command'],
            // what the lock classes refuse as a \ValueError is the command line's fault too
            [['run', '--lock', 'bad/name', '--', 'true'], '$lock must be a lock name'],
            [['run', '--redis', 'http://127.0.0.1:1', '--key', 'k', '--', 'true'], 'redis://'],
        ] as [$args, $message]) {
            [$code, , $err] = $this->cronlock($args, 'suite', ['CRONLOCK_TEST_UNSET_VARIABLE' => false]);
            self::assertSame(64, $code, implode(' ', $args) . ": $err");
            self::assertStringContainsString($message, $err);
        }
    }

    public function testBothImplementationsExcludeEachOther(): void
    {
        if (!self::extensionBuilt()) {
            self::markTestSkipped('no build of the extension at ' . self::extensionPath());
        }
        $started = "{$this->dir}/started";
        $stop = "{$this->dir}/stop";
        $ran = "{$this->dir}/ran";
        foreach ([['extension', 'polyfill'], ['polyfill', 'extension']] as [$holder, $other]) {
            @unlink($started);
            @unlink($stop);
            $h = $this->startCronlock(array_merge(['run', '--lock', 'mixed', '--'], $this->waitingCommand($started, $stop)), $holder);
            self::waitUntil(fn () => file_exists($started) || $this->commandExitCode($h) !== null, "the $holder run to start");
            [$code] = $this->cronlock(['run', '--lock', 'mixed', '--on-busy', '5', '--', 'touch', $ran], $other);
            self::assertSame(5, $code, "$other is busy while $holder runs");
            touch($stop);
            self::assertSame(0, $this->finishCommand($h)[0]);
        }
        self::assertFileDoesNotExist($ran);
    }
}

<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\Tests\Support\CliTestHelpers;
use CronLock\Tests\Support\FileTestHelpers;
use PHPUnit\Framework\TestCase;

/**
 * `cronlock gc`: removes only lock files nobody holds, waits for or used
 * for --older-than, and only cronlock's (empty or a record); safe against
 * cronlock users contending for the files meanwhile (exact counter, no
 * overlap in the journal); and what it cannot protect, shown.
 */
final class CliGcTest extends TestCase
{
    use CliTestHelpers;
    use FileTestHelpers;

    private const FLOCK = '/usr/bin/flock';

    private string $lockDir;
    private string $dir;

    protected function setUp(): void
    {
        parent::setUp();
        $this->lockDir = $this->makeTempDir('cli-gc-locks');
        $this->dir = $this->makeTempDir('cli-gc');
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

    private function old(string $name, string $content): string
    {
        $path = "{$this->lockDir}/$name";
        file_put_contents($path, $content);
        touch($path, time() - 40 * 86400);
        return $path;
    }

    private static function record(string $text): string
    {
        return str_pad($text, 127) . "\n";
    }

    public function testOnlyFreeUnusedCronlockFilesAreRemoved(): void
    {
        $long = gmdate('Y-m-d\TH:i:s\Z', time() - 40 * 86400);
        $recent = gmdate('Y-m-d\TH:i:s\Z', time() - 3600);
        $gone = [
            $this->old('empty.lock', ''),
            $this->old('held-record.lock', self::record("cronlock pid=4242 host=web1 since=$long")),
            $this->old('free-record.lock', self::record("cronlock free since=$long")),
        ];
        $kept = [
            $this->old('data.lock', "4242\n"),
            $this->old('almost.lock', self::record("cronlock pid=4242 host=web1 since=$long") . ' '),
            $this->old('notes.txt', ''),
            $this->old('recent-record.lock', self::record("cronlock pid=4242 host=web1 since=$recent")),
            $this->old('by-flock.lock', ''),
        ];
        touch($kept[] = "{$this->lockDir}/touched.lock");
        $elsewhere = $this->makeTempDir('cli-gc-elsewhere');
        file_put_contents("$elsewhere/target.lock", '');
        touch("$elsewhere/target.lock", time() - 40 * 86400);
        symlink("$elsewhere/target.lock", $kept[] = "{$this->lockDir}/link.lock");
        $ready = "{$this->dir}/flock-ready";
        $this->startCommand([self::FLOCK, '-n', "{$this->lockDir}/by-flock.lock", '-c',
            sprintf('touch %s; s=%s; while [ ! -e "$s" ] && [ -d "${s%%/*}" ]; do sleep 0.02; done', escapeshellarg($ready), escapeshellarg("{$this->dir}/stop"))]);
        self::waitUntil(fn () => file_exists($ready), 'flock(1) to hold by-flock.lock');
        $h = $this->startPhp('suite', 'cron_guard(function () use ($argv) { touch($argv[1]); while (!file_exists($argv[2])) { usleep(10000); } }, "by-guard");',
            ["{$this->dir}/guard-ready", "{$this->dir}/stop"]);
        self::waitUntil(fn () => file_exists("{$this->dir}/guard-ready") || $this->commandExitCode($h) !== null, 'cron_guard() to hold by-guard');
        touch($kept[] = "{$this->lockDir}/by-guard.lock", time() - 40 * 86400);

        [$code, $out, $err] = $this->cronlock(['gc', '--older-than', '30d', '--dry-run']);
        self::assertSame(0, $code, $err);
        $expected = array_map(fn ($p) => "would remove $p", $gone);
        sort($expected);
        self::assertSame(array_merge($expected, ["gc {$this->lockDir}: would remove 3, kept 6 (2 not a cronlock lock file, 2 held, 2 used within 30 d)"]),
            explode("\n", rtrim($out)), 'sorted by name; notes.txt and the symlink are not lock files');
        foreach (array_merge($gone, $kept) as $path) {
            self::assertTrue(is_link($path) || file_exists($path), "--dry-run removes nothing: $path");
        }

        [$code, $out, $err] = $this->cronlock(['gc', '--older-than', '30d', '--verbose']);
        self::assertSame(0, $code, $err);
        self::assertStringContainsString("kept {$this->lockDir}/data.lock: not a cronlock lock file (its content is neither empty nor a cronlock record)\n", $out);
        self::assertStringContainsString("kept {$this->lockDir}/by-flock.lock: held\n", $out);
        self::assertStringContainsString("kept {$this->lockDir}/recent-record.lock: used within 30 d (1 h ago)\n", $out);
        self::assertStringEndsWith("gc {$this->lockDir}: removed 3, kept 6 (2 not a cronlock lock file, 2 held, 2 used within 30 d)\n", $out);
        foreach ($gone as $path) {
            self::assertFileDoesNotExist($path);
            self::assertStringContainsString("removed $path\n", $out);
        }
        foreach ($kept as $path) {
            self::assertTrue(is_link($path) || file_exists($path), "kept: $path");
        }
        self::assertFileExists("$elsewhere/target.lock", 'a symlink is never followed');
        self::assertSame("4242\n", file_get_contents("{$this->lockDir}/data.lock"));
    }

    public function testTheDefaultDirectoryAndOneThatDoesNotExist(): void
    {
        $this->old('old.lock', '');
        [$code, $out] = $this->cronlock(['gc', '--older-than', '1d']);
        self::assertSame([0, "removed {$this->lockDir}/old.lock\ngc {$this->lockDir}: removed 1, kept 0\n"], [$code, $out]);
        [$code, $out] = $this->cronlock(['gc', '--older-than', '1d', "{$this->dir}/none"]);
        self::assertSame([0, "gc {$this->dir}/none: does not exist, nothing to remove\n"], [$code, $out]);
        [$code, , $err] = $this->cronlock(['gc']);
        self::assertSame(64, $code);
        self::assertStringContainsString('needs --older-than', $err);
    }

    /**
     * A file gc cannot remove (here: the directory is a read-only bind
     * mount, in a private mount namespace, so root cannot remove either) is
     * named on stderr and counted in the summary, and the exit status is 2.
     */
    public function testFilesThatCannotBeRemovedAreCountedAndTheExitStatusIs2(): void
    {
        if (posix_geteuid() !== 0 || trim((string) shell_exec('command -v unshare 2>/dev/null')) === '') {
            self::markTestSkipped('needs root and unshare(1) for a read-only bind mount in a private mount namespace');
        }
        $this->old('a.lock', '');
        $this->old('b.lock', '');
        [$cmd, $env] = $this->cronlockCommand(['gc', '--older-than', '1d']);
        $dir = escapeshellarg($this->lockDir);
        $script = "mount --bind $dir $dir && mount -o remount,bind,ro $dir && exec "
            . implode(' ', array_map('escapeshellarg', $cmd));
        [$code, $out, $err] = $this->runCommand(['unshare', '--mount', '--propagation', 'private', 'sh', '-c', $script], 30.0, $env);
        self::assertSame(2, $code, $out . $err);
        self::assertSame("gc {$this->lockDir}: removed 0, kept 0, failed 2 (named on stderr)\n", $out);
        self::assertStringContainsString("cronlock gc: {$this->lockDir}/a.lock: cannot remove", $err);
        self::assertStringContainsString("cronlock gc: {$this->lockDir}/b.lock: cannot remove", $err);
        self::assertFileExists("{$this->lockDir}/a.lock", 'outside the namespace nothing changed');
    }

    /**
     * Workers of both implementations increment per-lock counters under
     * cron_guard() with 'wait' => -1 on three lock files while gc removes
     * them with --older-than 0s over and over: every run counted once, no
     * two runs of one lock overlap (journal of start and end times on one
     * monotonic clock), and gc did remove files.
     */
    public function testGcUnderContentionKeepsExclusion(): void
    {
        $names = ['gc-a', 'gc-b', 'gc-c'];
        $journal = $this->makeTempDir('cli-gc-journal');
        $counters = $this->makeTempDir('cli-gc-counters');
        $impls = self::extensionBuilt() ? ['extension', 'polyfill', 'extension', 'polyfill'] : ['suite', 'suite', 'suite', 'suite'];
        $iterations = 150;
        $code = <<<'PHP'
            [, $names, $journal, $counters, $iterations, $ready, $go] = $argv;
            $names = explode(',', $names);
            mt_srand(getmypid());
            touch($ready);
            while (!file_exists($go)) { usleep(1000); }
            for ($i = 0; $i < (int) $iterations; $i++) {
                $name = $names[mt_rand(0, count($names) - 1)];
                $ran = cron_guard(function () use ($name, $journal, $counters) {
                    file_put_contents("$journal/$name", 'start ' . hrtime(true) . ' ' . getmypid() . "\n", FILE_APPEND);
                    $n = (int) @file_get_contents("$counters/$name");
                    usleep(mt_rand(0, 2000));
                    file_put_contents("$counters/$name", (string) ($n + 1));
                    file_put_contents("$journal/$name", 'end ' . hrtime(true) . ' ' . getmypid() . "\n", FILE_APPEND);
                    return true;
                }, $name, ['wait' => -1]);
                if ($ran !== true) { fwrite(STDERR, "run $i of $name did not run\n"); exit(3); }
                usleep(mt_rand(0, 3000));
            }
            PHP;
        $go = "{$this->dir}/go";
        $workers = [];
        foreach ($impls as $w => $impl) {
            $workers[] = $this->startPhp($impl, $code, [implode(',', $names), $journal, $counters, (string) $iterations, "{$this->dir}/ready-$w", $go]);
        }
        self::waitUntil(fn () => count(glob("{$this->dir}/ready-*")) === count($impls), 'the workers to start', 20.0);
        touch($go);
        $removed = 0;
        $gcRuns = 0;
        do {
            $running = array_filter($workers, fn ($h) => $this->commandExitCode($h) === null);
            [$status, $out, $err] = $this->cronlock(['gc', '--older-than', '0s']);
            self::assertSame(0, $status, $err);
            $removed += substr_count($out, "\nremoved ") + (strncmp($out, 'removed ', 8) === 0 ? 1 : 0);
            $gcRuns++;
        } while ($running !== []);
        foreach ($workers as $h) {
            [$status, , $err] = $this->finishCommand($h);
            self::assertSame(0, $status, "worker: $err");
        }
        $total = 0;
        foreach ($names as $name) {
            $count = (int) @file_get_contents("$counters/$name");
            $total += $count;
            $events = file_exists("$journal/$name") ? file("$journal/$name", FILE_IGNORE_NEW_LINES) : [];
            self::assertCount(2 * $count, $events, "$name: a start and an end per counted run");
            $parsed = array_map(fn ($line) => explode(' ', $line), $events);
            usort($parsed, fn ($a, $b) => (int) $a[1] <=> (int) $b[1]);
            foreach ($parsed as $i => [$kind, , $pid]) {
                self::assertSame($i % 2 === 0 ? 'start' : 'end', $kind, "$name: runs alternate start/end, no overlap (event $i)");
                if ($kind === 'end') {
                    self::assertSame($parsed[$i - 1][2], $pid, "$name: each run ends before another starts");
                }
            }
        }
        self::assertSame(count($impls) * $iterations, $total, 'every run counted exactly once');
        self::note("gc under contention: $gcRuns gc runs removed $removed lock files while " . count($impls) . " workers made $total runs; 0 overlaps");
        self::assertGreaterThan(0, $removed, 'gc removed lock files while they were contended');
    }

    /**
     * gc's "a cronlock lock file" is the lock's own rule: it removes a file
     * exactly when cronlock, taking the lock, would overwrite its content
     * with a record (empty, or a record of the shape both implementations
     * write), and keeps every content cronlock leaves alone.
     */
    public function testGcRemovesExactlyTheFilesCronlockWouldOverwrite(): void
    {
        $record = fn (string $text) => str_pad($text, 127) . "\n";
        $since = '2026-11-30T14:50:00Z';
        $contents = [
            'empty' => '',
            'record' => $record("cronlock pid=4242 host=web1 since=$since"),
            'zeros' => $record("cronlock pid=00000000004242 host=web1 since=$since"),
            'no-host' => $record("cronlock pid=4242 host= since=$since"),
            'host-64' => $record('cronlock pid=1 host=' . str_repeat('h', 64) . " since=$since"),
            'host-65' => $record('cronlock pid=1 host=' . str_repeat('h', 65) . " since=$since"),
            'month-13' => $record('cronlock pid=1 host=web1 since=2020-13-40T25:61:61Z'),
            'pid-u32' => $record("cronlock pid=4294967295 host=web1 since=$since"),
            'pid-beyond' => $record("cronlock pid=4294967296 host=web1 since=$since"),
            'no-newline' => str_pad("cronlock pid=4242 host=web1 since=$since", 128),
            'short' => str_pad("cronlock pid=4242 host=web1 since=$since", 126) . "\n",
            'long' => str_pad("cronlock pid=4242 host=web1 since=$since", 128) . "\n",
            'tab' => str_pad("cronlock pid=4242 host=web1 since=$since\t", 127) . "\n",
            'lower-z' => $record('cronlock pid=4242 host=web1 since=2026-11-30T14:50:00z'),
            'pid-text' => $record("cronlock pid=abc host=web1 since=$since"),
            'data' => "4242\n",
            'space-host' => $record("cronlock pid=4242 host=web 1 since=$since"),
        ];
        $overwrite = $this->makeTempDir('cli-gc-overwrite');
        $code = 'foreach (array_slice($argv, 1) as $path) { $before = file_get_contents($path); $l = new \CronLock\File($path);
            if (!$l->acquire(0)) { exit(2); } $l->release(); echo basename($path, ".lock"), " ", file_get_contents($path) === $before ? "kept" : "overwritten", "\n"; }';
        foreach (self::extensionBuilt() ? ['extension', 'polyfill'] : ['suite'] as $impl) {
            $paths = [];
            foreach ($contents as $name => $content) {
                file_put_contents($paths[] = "$overwrite/$name.lock", $content);
                $this->old("$name.lock", $content);
            }
            [$status, $out, $err] = $this->finishCommand($this->startPhp($impl, $code, $paths));
            self::assertSame(0, $status, $err);
            $cronlock = [];
            foreach (explode("\n", trim($out)) as $line) {
                [$name, $what] = explode(' ', $line);
                $cronlock[$name] = $what === 'overwritten' || $contents[$name] === '';
            }
            [$status, , $err] = $this->cronlock(['gc', '--older-than', '1d']);
            self::assertSame(0, $status, $err);
            foreach ($contents as $name => $content) {
                self::assertSame($cronlock[$name], !file_exists("{$this->lockDir}/$name.lock"),
                    "$name: gc removes it exactly when $impl's CronLock\\File would overwrite it");
            }
            self::assertTrue($cronlock['record'] && $cronlock['host-64'] && !$cronlock['host-65'] && !$cronlock['pid-beyond'] && !$cronlock['data'],
                'the cases mean what they say: ' . json_encode($cronlock));
        }
    }

    /**
     * What gc cannot protect, as docs/operations.md says: a plain flock()
     * user (no check of the path after locking) that opened the file before
     * gc removed it locks the removed file, while a cronlock user locks the
     * new one at the same time.
     */
    public function testAPlainFlockUserThatOpenedTheFileBeforeTheRemovalIsNotProtected(): void
    {
        $path = $this->old('plain.lock', '');
        $h = $this->startPhp('bare', '$f = fopen($argv[1], "r"); touch($argv[2]);
            while (!file_exists($argv[3])) { usleep(5000); }
            echo flock($f, LOCK_EX | LOCK_NB) ? "locked the removed file\n" : "busy\n";
            touch($argv[4]); while (!file_exists($argv[5])) { usleep(5000); }',
            [$path, "{$this->dir}/opened", "{$this->dir}/now-lock", "{$this->dir}/plain-locked", "{$this->dir}/stop"]);
        self::waitUntil(fn () => file_exists("{$this->dir}/opened"), 'the plain flock() user to open the file');
        [$code, $out] = $this->cronlock(['gc', '--older-than', '1d']);
        self::assertSame(0, $code);
        self::assertStringContainsString("removed $path", $out);
        touch("{$this->dir}/now-lock");
        self::waitUntil(fn () => file_exists("{$this->dir}/plain-locked"), 'the plain user to lock');
        $ran = "{$this->dir}/ran";
        [$code, , $err] = $this->cronlock(['run', '--file', $path, '--', 'touch', $ran]);
        self::assertSame(0, $code, $err);
        self::assertFileExists($ran, 'cronlock locked the new file while the plain user holds the removed one: both ran');
        touch("{$this->dir}/stop");
        [, $plain] = $this->finishCommand($h);
        self::assertSame("locked the removed file\n", $plain);
    }
}

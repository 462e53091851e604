<?php

declare(strict_types=1);

namespace CronLock\Tests\Support;

/**
 * For the tests of the operator command cli/bin/cronlock: runs it as a
 * real process with the implementation under test (the PHP this suite
 * gives its children: the extension, or cronlock/polyfill through the
 * suite's prepend file), or explicitly with the extension, with
 * cronlock/polyfill (no extension), or with neither (a copy of cli/
 * without the polyfill beside it, under `php -n`).
 *
 * Needs FileTestHelpers in the same class (startCommand() and friends).
 */
trait CliTestHelpers
{
    protected static function cronlockBin(): string
    {
        return dirname(__DIR__, 2) . '/cli/bin/cronlock';
    }

    /**
     * The php argv and environment of $impl: 'suite' (as this suite runs its
     * children), 'extension', 'polyfill' (the system's ini files, no
     * extension, cronlock/polyfill prepended) or 'bare' (php -n, nothing).
     *
     * @param array<string, string|false> $env merged over this process's
     * @return array{0: list<string>, 1: array<string, string>}
     */
    protected static function phpFor(string $impl, array $env = []): array
    {
        $full = getenv();
        switch ($impl) {
            case 'suite':
                $cmd = self::phpCommand();
                break;
            case 'extension':
                unset($full['PHP_INI_SCAN_DIR']);
                $cmd = [PHP_BINARY, '-d', 'extension=' . self::extensionPath()];
                break;
            case 'polyfill':
                unset($full['PHP_INI_SCAN_DIR']);
                $cmd = [PHP_BINARY, '-d', 'auto_prepend_file=' . dirname(__DIR__, 2) . '/polyfill/bootstrap.php'];
                break;
            case 'bare':
                unset($full['PHP_INI_SCAN_DIR']);
                $cmd = [PHP_BINARY, '-n'];
                break;
            default:
                throw new \InvalidArgumentException("unknown implementation $impl");
        }
        foreach ($env as $name => $value) {
            if ($value === false) {
                unset($full[$name]);
            } else {
                $full[$name] = $value;
            }
        }
        return [$cmd, $full];
    }

    /**
     * The argv and environment of `cronlock ARGS` run by $impl's php (see
     * phpFor(); 'bare' runs a copy of cli/ without the polyfill beside it).
     *
     * @param list<string> $args
     * @param array<string, string|false> $env
     * @param list<string> $phpArgs more php options (-d …)
     * @return array{0: list<string>, 1: array<string, string>}
     */
    protected function cronlockCommand(array $args, string $impl = 'suite', array $env = [], array $phpArgs = []): array
    {
        [$cmd, $full] = self::phpFor($impl, $env);
        $bin = self::cronlockBin();
        if ($impl === 'polyfill') {
            // the command loads ../polyfill itself when the extension is absent
            $cmd = [PHP_BINARY];
        }
        if ($impl === 'bare') {
            $copy = $this->makeTempDir('cli-copy');
            self::copyTree(dirname($bin, 2), "$copy/cli");
            $bin = "$copy/cli/bin/cronlock";
        }
        return [array_merge($cmd, $phpArgs, [$bin], $args), $full];
    }

    /**
     * Start PHP $code (no opening tag) with $impl's php; returns a FileTestHelpers handle.
     *
     * @param list<string> $args
     */
    protected function startPhp(string $impl, string $code, array $args = []): int
    {
        $dir = $this->makeTempDir('cli-php');
        file_put_contents("$dir/child.php", "<?php\n$code\n");
        [$cmd, $env] = self::phpFor($impl);
        return $this->startCommand(array_merge($cmd, ["$dir/child.php"], $args), $env);
    }

    /**
     * Run `cronlock ARGS` to its end; [exit status, stdout, stderr].
     *
     * @param list<string> $args
     * @param array<string, string|false> $env
     * @param list<string> $phpArgs
     * @return array{0: int, 1: string, 2: string}
     */
    protected function cronlock(array $args, string $impl = 'suite', array $env = [], array $phpArgs = [], float $timeout = 30.0): array
    {
        [$cmd, $fullEnv] = $this->cronlockCommand($args, $impl, $env, $phpArgs);
        return $this->runCommand($cmd, $timeout, $fullEnv);
    }

    /**
     * Start `cronlock ARGS`; returns a FileTestHelpers handle.
     *
     * @param list<string> $args
     * @param array<string, string|false> $env
     */
    protected function startCronlock(array $args, string $impl = 'suite', array $env = []): int
    {
        [$cmd, $fullEnv] = $this->cronlockCommand($args, $impl, $env);
        return $this->startCommand($cmd, $fullEnv);
    }

    /** Whether the extension can be loaded into a child (a build exists). */
    protected static function extensionBuilt(): bool
    {
        return is_file(self::extensionPath());
    }

    /** The pids whose parent is $pid (from /proc). @return list<int> */
    protected static function childrenOf(int $pid): array
    {
        $children = [];
        foreach (glob('/proc/[0-9]*/stat') ?: [] as $stat) {
            // a process that ends while it is read gives '' (or false)
            $text = (string) @file_get_contents($stat);
            $end = strrpos($text, ')');
            $fields = $end === false ? [] : explode(' ', substr($text, $end + 2));
            if (isset($fields[1]) && (int) $fields[1] === $pid) {
                $children[] = (int) basename(dirname($stat));
            }
        }
        return $children;
    }

    /**
     * Whether the kernel lists an flock() holder of $path (/proc/locks, exact
     * device and inode), without taking the lock.
     */
    protected static function kernelHolds(string $path): bool
    {
        clearstatcache(true, $path);
        $st = @stat($path);
        if ($st === false) {
            return false;
        }
        $want = sprintf('%02x:%02x:%d', ($st['dev'] >> 8) & 0xfff, ($st['dev'] & 0xff) | (($st['dev'] >> 12) & ~0xff), $st['ino']);
        foreach (explode("\n", (string) file_get_contents('/proc/locks')) as $line) {
            $f = preg_split('/\s+/', trim($line));
            if (count($f) >= 6 && $f[1] === 'FLOCK' && $f[5] === $want) {
                return true;
            }
        }
        return false;
    }

    /**
     * The rows of `cronlock status`'s table under the heading $title, keyed by
     * their first column; each row maps the header's column names to cells.
     *
     * @return array<string, array<string, string>>
     */
    protected static function statusTable(string $out, string $title): array
    {
        $lines = explode("\n", $out);
        $at = array_search($title, $lines, true);
        if ($at === false) {
            throw new \RuntimeException("no heading '$title' in:\n$out");
        }
        // a note line may come first ("  through phpredis")
        for ($h = $at + 1; isset($lines[$h]) && !preg_match('/\A  (NAME|KEY)  /', $lines[$h]); $h++) {
            if (strncmp($lines[$h], '  ', 2) !== 0) {
                return [];
            }
        }
        if (!isset($lines[$h])) {
            return [];
        }
        preg_match_all('/\S+(?: \S+)*/', $lines[$h], $m, PREG_OFFSET_CAPTURE);
        $rows = [];
        for ($i = $h + 1; isset($lines[$i]) && strncmp($lines[$i], '  ', 2) === 0 && $lines[$i][2] !== '*'; $i++) {
            $row = [];
            foreach ($m[0] as $n => [$name, $offset]) {
                $next = $m[0][$n + 1][1] ?? null;
                $row[$name] = trim($next === null ? (string) substr($lines[$i], $offset) : (string) substr($lines[$i], $offset, $next - $offset));
            }
            $rows[reset($row)] = $row;
        }
        return $rows;
    }

    private static function copyTree(string $from, string $to): void
    {
        mkdir($to, 0755, true);
        foreach (scandir($from) ?: [] as $entry) {
            if ($entry === '.' || $entry === '..') {
                continue;
            }
            if (is_dir("$from/$entry")) {
                self::copyTree("$from/$entry", "$to/$entry");
            } else {
                copy("$from/$entry", "$to/$entry");
                chmod("$to/$entry", fileperms("$from/$entry") & 0777);
            }
        }
    }
}

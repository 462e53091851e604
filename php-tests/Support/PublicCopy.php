<?php

declare(strict_types=1);

namespace CronLock\Tests\Support;

/**
 * A path of this checkout that another user (nobody, daemon) can read and that a test's own
 * tmpfs does not hide, for the tests that run PHP as that user or in a private mount namespace:
 * the path itself when every directory above it lets others through and it lies outside the
 * places tests cover (/tmp, /run, /dev/shm), else a copy in a world-readable directory of this
 * test process. A fresh machine's checkout is often /root/cronlock, which no other user may
 * enter (the fresh-root run found those tests skipping there: a skip that depends on where the
 * checkout lives hides exactly the tests of issue 17); a CI clone is often under /tmp, which
 * those tests cover or hide (a clean clone in /tmp failed them: "Unable to load
 * /tmp/…/libcronlock.so").
 *
 * What is copied: the whole top folder of the checkout the path is in (polyfill/ or cli/, and
 * polyfill/ with cli/, which loads it from beside itself), or the file alone (the built
 * extension in target/). The copies live in /var/tmp (some tests put a tmpfs of their own over
 * /tmp) and are removed when the process that made them ends.
 */
final class PublicCopy
{
    /** Where tests mount a fresh tmpfs of their own, or hide the directory altogether. */
    private const COVERED = ['/tmp/', '/run/', '/dev/shm/'];

    /** @var string|null the copies' directory, made on first use */
    private static $dir;

    public static function of(string $path): string
    {
        if (self::othersReach($path) && !self::covered($path)) {
            return $path;
        }
        $root = dirname(__DIR__, 2);
        if (strncmp($path, "$root/", strlen($root) + 1) !== 0) {
            return $path; // not ours to copy: requireRunnableAs() says what is missing
        }
        $relative = substr($path, strlen($root) + 1);
        $top = explode('/', $relative)[0];
        $dir = self::dir();
        if (in_array($top, ['polyfill', 'cli'], true)) {
            foreach (array_unique([$top, 'polyfill']) as $folder) {
                if (!file_exists("$dir/$folder")) {
                    self::run(['cp', '-R', "$root/$folder", "$dir/$folder"]);
                    self::run(['chmod', '-R', 'a+rX', "$dir/$folder"]);
                }
            }
        } elseif (!file_exists("$dir/$relative")) {
            @mkdir(dirname("$dir/$relative"), 0755, true);
            self::run(['cp', $path, "$dir/$relative"]);
            chmod("$dir/$relative", 0644);
            self::run(['chmod', '-R', 'a+rX', "$dir/$top"]);
        }
        return "$dir/$relative";
    }

    /** Whether others may enter every directory down to $path and read it. */
    private static function othersReach(string $path): bool
    {
        if (!file_exists($path) || (fileperms($path) & 0004) === 0) {
            return false;
        }
        for ($d = dirname($path); $d !== '/' && $d !== '.'; $d = dirname($d)) {
            if ((fileperms($d) & 0001) === 0) {
                return false;
            }
        }
        return true;
    }

    /** Whether $path lies where a test may put a tmpfs of its own (MountNamespace). */
    private static function covered(string $path): bool
    {
        foreach (self::COVERED as $place) {
            if (strncmp($path, $place, strlen($place)) === 0) {
                return true;
            }
        }
        return false;
    }

    private static function dir(): string
    {
        if (self::$dir === null) {
            $dir = '/var/tmp/cronlock-test-public.' . getmypid() . '.' . bin2hex(random_bytes(4));
            mkdir($dir, 0755);
            chmod($dir, 0755);
            $owner = getmypid();
            register_shutdown_function(static function () use ($dir, $owner): void {
                if (getmypid() === $owner) {
                    exec('rm -rf ' . escapeshellarg($dir));
                }
            });
            self::$dir = $dir;
        }
        return self::$dir;
    }

    /** @param list<string> $argv */
    private static function run(array $argv): void
    {
        exec(implode(' ', array_map('escapeshellarg', $argv)) . ' 2>&1', $out, $code);
        if ($code !== 0) {
            throw new \RuntimeException(implode(' ', $argv) . ' failed: ' . implode("\n", $out));
        }
    }
}

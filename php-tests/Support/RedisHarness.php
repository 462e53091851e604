<?php

declare(strict_types=1);

namespace CronLock\Tests\Support;

/**
 * Runs tests/redis-harness, the one harness that starts and stops every
 * Redis server of the test suites (see the comment at its top), and reads
 * the facts it prints.
 */
final class RedisHarness
{
    public const PATH = __DIR__ . '/../../tests/redis-harness';

    /**
     * A directory name for `start` (which makes it), under $CRONLOCK_TEST_TMP
     * when set (scripts/test reaps what a crashed run left there).
     */
    public static function newDir(string $prefix): string
    {
        $base = getenv('CRONLOCK_TEST_TMP') ?: sys_get_temp_dir();
        return rtrim($base, '/') . "/$prefix-" . bin2hex(random_bytes(6));
    }

    /** @return list<string> the lines it printed; \RuntimeException with its stderr on failure */
    public static function run(string ...$args): array
    {
        $proc = proc_open([self::PATH, ...$args], [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
        if ($proc === false) {
            throw new \RuntimeException('cannot run ' . self::PATH);
        }
        $out = (string) stream_get_contents($pipes[1]);
        $err = (string) stream_get_contents($pipes[2]);
        fclose($pipes[1]);
        fclose($pipes[2]);
        if (($rc = proc_close($proc)) !== 0) {
            throw new \RuntimeException('redis-harness ' . implode(' ', $args) . " failed ($rc): " . trim($err));
        }
        return $out === '' ? [] : explode("\n", rtrim($out, "\n"));
    }

    /**
     * The node lines of $lines.
     *
     * @param list<string> $lines
     * @return list<array{name: string, role: string, port: int, pid: int, dir: string}>
     */
    public static function nodes(array $lines): array
    {
        $nodes = [];
        foreach ($lines as $line) {
            $w = explode(' ', $line);
            if ($w[0] === 'node' && count($w) === 6) {
                $nodes[] = ['name' => $w[1], 'role' => $w[2], 'port' => (int) $w[3], 'pid' => (int) $w[4], 'dir' => $w[5]];
            }
        }
        return $nodes;
    }

    /** The value of the first "$key …" line of $lines. */
    public static function fact(array $lines, string $key): ?string
    {
        foreach ($lines as $line) {
            if (strncmp($line, "$key ", strlen("$key ")) === 0) {
                return substr($line, strlen($key) + 1);
            }
        }
        return null;
    }
}

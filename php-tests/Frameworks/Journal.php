<?php

declare(strict_types=1);

namespace CronLock\Tests\Frameworks;

/**
 * The journal the test job writes (Fixture\Job): one line per start and per end.
 * A start with alone=0 is an overlap (the job saw another run alive).
 */
final class Journal
{
    private string $path;

    public function __construct(string $path)
    {
        $this->path = $path;
    }

    public function path(): string
    {
        return $this->path;
    }

    /** @return list<array{label: string, pid: int, ppid: int, t: float, alone: bool}> */
    public function starts(): array
    {
        return $this->lines('start');
    }

    /** @return list<array{label: string, pid: int, t: float}> */
    public function ends(): array
    {
        return $this->lines('end');
    }

    /** Starts that saw another run of the job alive. */
    public function overlaps(): int
    {
        return count(array_filter($this->starts(), static fn (array $s) => !$s['alone']));
    }

    /**
     * Wait until the journal has $count starts; returns the last one. Throws
     * after $timeout, with the journal.
     *
     * @return array{label: string, pid: int, ppid: int, t: float, alone: bool}
     */
    public function waitForStarts(int $count, float $timeout = 30.0, ?AppProcess $watch = null): array
    {
        $deadline = microtime(true) + $timeout;
        while (count($starts = $this->starts()) < $count) {
            if (microtime(true) > $deadline) {
                throw new \RuntimeException("the journal has " . count($starts) . " starts, not $count, after {$timeout} s:\n"
                    . $this->dump() . ($watch !== null ? $watch->describe() : ''));
            }
            usleep(10_000);
        }
        return $starts[$count - 1];
    }

    /** Wait until the journal has $count ends. */
    public function waitForEnds(int $count, float $timeout = 30.0): void
    {
        $deadline = microtime(true) + $timeout;
        while (count($this->ends()) < $count) {
            if (microtime(true) > $deadline) {
                throw new \RuntimeException("the journal has " . count($this->ends()) . " ends, not $count, after {$timeout} s:\n" . $this->dump());
            }
            usleep(10_000);
        }
    }

    public function dump(): string
    {
        return is_file($this->path) ? (string) file_get_contents($this->path) : "(no journal)\n";
    }

    /** @return list<array<string, mixed>> */
    private function lines(string $kind): array
    {
        $rows = [];
        foreach (explode("\n", is_file($this->path) ? (string) file_get_contents($this->path) : '') as $line) {
            $parts = explode(' ', $line);
            if ($parts[0] !== $kind) {
                continue;
            }
            $row = ['label' => $parts[1]];
            foreach (array_slice($parts, 2) as $kv) {
                [$k, $v] = explode('=', $kv, 2);
                $row[$k] = $k === 't' ? (float) $v : ($k === 'alone' ? $v === '1' : (int) $v);
            }
            $rows[] = $row;
        }
        return $rows;
    }
}

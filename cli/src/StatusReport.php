<?php

namespace CronLock\Cli;

/**
 * What `cronlock status` found, printed as a table per source or as one
 * JSON document (schema "cronlock-status/1", docs/operations.md). Held
 * longer than --stale-after marks a row stuck; the exit status says whether
 * anything is stuck (1) or could not be read (2).
 */
final class StatusReport
{
    const SCHEMA = 'cronlock-status/1';

    /** What each backend's table shows, in this order. */
    const COLUMNS = [
        'file' => ['NAME', 'STATE', 'PID', 'HOST', 'SINCE', 'HELD FOR', 'ALIVE', 'WAITING'],
        'redis' => ['KEY', 'STATE', 'PID', 'HOST', 'ALIVE', 'SINCE', 'HELD FOR', 'TTL', 'FENCE', 'WAITING'],
        'database' => ['NAME', 'STATE', 'CONNECTION', 'CLIENT', 'SINCE', 'HELD FOR', 'WAITING'],
    ];
    /** Footnotes for a SINCE that is not the lock's own record. */
    const SINCE_NOTES = [
        'process start' => "the holder process's start (no lock record names it): it took the lock then or later",
        'lock statement' => 'the end of the statement that took the lock',
        'session start' => "the holding session's start: it took the lock then or later",
        'last statement' => "the end of the holding session's last statement: it holds the lock since then or longer",
    ];

    /** @var array<int, array{backend: string, title: string, rows: LockRow[]|null|false, note: string|null}> */
    private $sources = [];
    /** @var string[] */
    private $errors = [];
    /** @var float|null */
    private $staleAfter;
    /** @var int */
    private $now;

    public function __construct($staleAfter, int $now)
    {
        $this->staleAfter = $staleAfter;
        $this->now = $now;
    }

    /**
     * @param LockRow[]|null|false $rows null: the source does not exist (nothing to list); false: it could not be read
     * @param string $backend 'file', 'redis' or 'database' (its table's columns)
     */
    public function add(string $backend, string $title, $rows, $note = null)
    {
        foreach (is_array($rows) ? $rows : [] as $row) {
            $held = $row->heldFor($this->now);
            $row->stuck = $this->staleAfter !== null && $held !== null && $held > $this->staleAfter;
        }
        $this->sources[] = ['backend' => $backend, 'title' => $title, 'rows' => $rows, 'note' => $note];
    }

    public function error(string $message)
    {
        $this->errors[] = $message;
    }

    /** @return string[] */
    public function errors(): array
    {
        return $this->errors;
    }

    /** @return LockRow[] */
    public function stuck(): array
    {
        $stuck = [];
        foreach ($this->sources as $source) {
            foreach (is_array($source['rows']) ? $source['rows'] : [] as $row) {
                if ($row->stuck) {
                    $stuck[] = $row;
                }
            }
        }
        return $stuck;
    }

    public function exitStatus(): int
    {
        if ($this->errors !== []) {
            return ExitStatus::INCOMPLETE;
        }
        return $this->stuck() === [] ? ExitStatus::OK : ExitStatus::STUCK;
    }

    public function json(): string
    {
        $locks = [];
        $sources = [];
        foreach ($this->sources as $source) {
            $sources[] = ['backend' => $source['backend'], 'title' => Text::utf8($source['title']), 'exists' => $source['rows'] !== null,
                'read' => $source['rows'] !== false, 'note' => $source['note'] === null ? null : Text::utf8($source['note'])];
            foreach (is_array($source['rows']) ? $source['rows'] : [] as $row) {
                $locks[] = $row->toArray($this->now);
            }
        }
        $document = [
            'schema' => self::SCHEMA,
            'host' => Processes::hostname(),
            'time' => Record::formatTime($this->now),
            'stale_after' => $this->staleAfter,
            'stuck' => count($this->stuck()),
            'sources' => $sources,
            'locks' => $locks,
            'errors' => array_map([Text::class, 'utf8'], $this->errors),
        ];
        if (!function_exists('json_encode')) {
            throw new Missing('--json needs PHP\'s json extension');
        }
        return json_encode($document, JSON_PRETTY_PRINT | JSON_UNESCAPED_SLASHES | JSON_PRESERVE_ZERO_FRACTION) . "\n";
    }

    public function text(): string
    {
        $out = '';
        foreach ($this->sources as $i => $source) {
            $out .= ($i > 0 ? "\n" : '') . Text::oneLine($source['title']) . "\n";
            if ($source['note'] !== null) {
                $out .= '  ' . Text::oneLine($source['note']) . "\n";
            }
            if ($source['rows'] === false) {
                continue; // the note says why
            }
            if ($source['rows'] === null || $source['rows'] === []) {
                $out .= $source['rows'] === null ? "  (does not exist: no lock was taken here yet)\n" : "  (no locks)\n";
                continue;
            }
            $out .= $this->table($source['backend'], $source['rows']);
        }
        $stuck = $this->stuck();
        if ($stuck !== []) {
            $names = array_map(function (LockRow $row) {
                return Text::oneLine($row->name);
            }, $stuck);
            $out .= sprintf("\nstuck: %d held longer than %s: %s\n", count($stuck), Duration::format((float) $this->staleAfter), implode(', ', $names));
        }
        return $out;
    }

    /** @param LockRow[] $rows */
    private function table(string $backend, array $rows): string
    {
        $columns = self::COLUMNS[$backend];
        $lines = [$columns];
        $notes = [];
        foreach ($rows as $row) {
            $line = [];
            foreach ($columns as $column) {
                $line[] = $this->cell($column, $row, $notes);
            }
            $lines[] = $line;
        }
        $widths = [];
        foreach ($lines as $line) {
            foreach ($line as $c => $cell) {
                $len = function_exists('mb_strlen') ? mb_strlen($cell, 'UTF-8') : strlen($cell);
                $widths[$c] = max(isset($widths[$c]) ? $widths[$c] : 0, $len);
            }
        }
        $out = '';
        foreach ($lines as $line) {
            $cells = [];
            foreach ($line as $c => $cell) {
                $len = function_exists('mb_strlen') ? mb_strlen($cell, 'UTF-8') : strlen($cell);
                $cells[] = $cell . str_repeat(' ', $widths[$c] - $len);
            }
            $out .= '  ' . rtrim(implode('  ', $cells)) . "\n";
        }
        foreach (array_keys($notes) as $n => $source) {
            $out .= '  ' . str_repeat('*', $n + 1) . ' since: ' . self::SINCE_NOTES[$source] . "\n";
        }
        return $out;
    }

    /** @param array<string, true> $notes footnotes used so far, in order */
    private function cell(string $column, LockRow $row, array &$notes): string
    {
        switch ($column) {
            case 'NAME':
            case 'KEY':
                return Text::oneLine(Text::cut($row->name, 60));
            case 'STATE':
                if ($row->stuck) {
                    return 'stuck';
                }
                return $row->state === 'held' && $row->shared ? 'held (shared)' : $row->state;
            case 'PID':
                return $row->pid === null ? '-' : (string) $row->pid;
            case 'HOST':
                return $row->host === null ? '-' : Text::oneLine($row->host);
            case 'ALIVE':
                if ($row->pid === null) {
                    return '-';
                }
                return $row->pidAlive === null ? '?' : ($row->pidAlive ? 'yes' : 'no');
            case 'SINCE':
                if ($row->since === null) {
                    return '-';
                }
                $mark = '';
                if (isset(self::SINCE_NOTES[$row->sinceSource])) {
                    $notes[$row->sinceSource] = true;
                    $mark = str_repeat('*', array_search($row->sinceSource, array_keys($notes), true) + 1);
                }
                return Record::formatTime($row->since) . $mark;
            case 'HELD FOR':
                $held = $row->heldFor($this->now);
                return $held === null ? '-' : Duration::format($held);
            case 'WAITING':
                return $row->waiters === null ? '?' : (string) $row->waiters;
            case 'TTL':
                if ($row->ttl === null) {
                    return '-';
                }
                return $row->ttl < 0 ? 'none' : Duration::format($row->ttl);
            case 'FENCE':
                return $row->fence === null ? '-' : (string) $row->fence;
            case 'CONNECTION':
                return $row->connection === null ? '-' : Text::oneLine($row->connection);
            case 'CLIENT':
                return $row->client === null ? '-' : Text::oneLine(Text::cut($row->client, 60));
        }
        return '';
    }
}

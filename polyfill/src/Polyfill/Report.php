<?php

namespace CronLock\Polyfill;

/**
 * Where cron_guard()'s lines go, with their durations, clock times and
 * record (the sentences are CronGuard.php's and Run.php's), as the
 * extension's src/php/report.rs and src/lock/report.rs send and write them:
 * 'log' ($CRONLOCK_LOG, cronlock.log: syslog by default) for skips and
 * records, PHP's error log for failures (a lost hold, a failing release; decision D19), the 'logger' for
 * every line. syslog() without openlog(): the ident and facility stay the
 * user's (their own openlog(); else the binary's name as it was run and
 * user: syslog.ident counts only for error_log = syslog). A log file
 * gets one write per line, opened for appending. A logger that throws
 * changes nothing about the run: its exception is logged.
 *
 * @internal
 */
final class Report
{
    const LEVELS = ['error' => LOG_ERR, 'warning' => LOG_WARNING, 'notice' => LOG_NOTICE, 'info' => LOG_INFO];

    /** @var string syslog | error_log | stderr | none | an absolute path */
    private $destination;
    /** @var string off | skips | runs */
    private $record;
    /** @var bool */
    private $json;
    /** @var callable|object|null */
    private $logger;

    /** @param array<string, mixed> $options */
    public function __construct(array $options)
    {
        list($log, $name) = self::setting($options, 'log', 'CRONLOCK_LOG', 'cronlock.log');
        if (!in_array($log, ['', 'syslog', 'error_log', 'stderr', 'none'], true) && ($log[0] ?? '') !== '/') {
            throw Args::value($name, "must be 'syslog', 'error_log', 'stderr', 'none' or an absolute file path, '" . Args::cut($log) . "' given");
        }
        $this->destination = $log === '' ? 'syslog' : $log;
        list($record, $name) = self::setting($options, 'record', 'CRONLOCK_RECORD', 'cronlock.record');
        if (!in_array($record, ['', 'off', 'skips', 'runs'], true)) {
            throw Args::value($name, "must be 'off', 'skips' or 'runs', '" . Args::cut($record) . "' given");
        }
        $this->record = $record === '' ? 'off' : $record;
        list($format, $name) = self::setting($options, 'record_format', 'CRONLOCK_RECORD_FORMAT', 'cronlock.record_format');
        if (!in_array($format, ['', 'text', 'json'], true)) {
            throw Args::value($name, "must be 'text' or 'json', '" . Args::cut($format) . "' given");
        }
        $this->json = $format === 'json';
        $logger = isset($options['logger']) ? $options['logger'] : null;
        if ($logger !== null && !is_callable($logger) && !(is_object($logger) && method_exists($logger, 'log'))) {
            throw Args::type("\$options['logger']", 'must be a callable or an object with a log($level, $message, array $context) method (PSR-3), ' . Args::typeName($logger) . ' given');
        }
        $this->logger = $logger;
    }

    /**
     * The option, else $ENV (unless empty), else the ini setting (php.ini or -d); with its name.
     *
     * @param array<string, mixed> $options
     * @return array{0: string, 1: string}
     */
    private static function setting(array $options, string $key, string $env, string $ini): array
    {
        $value = Args::string($options, $key);
        if ($value !== null) {
            return [$value, "\$options['$key']"];
        }
        $value = getenv($env);
        if (is_string($value) && $value !== '') {
            return [$value, "\$$env"];
        }
        $value = get_cfg_var($ini);
        return [is_string($value) ? $value : '', $ini];
    }

    /** A skip or a stuck holder: to the destination and the logger. */
    public function note(string $level, string $event, string $line, array $fields)
    {
        $this->send($level, $line, true);
        $this->tellLogger($level, $event, $line, $fields);
    }

    /** A failure (a lost hold, a failing release): PHP's error log always, syslog or the log file when that is the destination, the logger. */
    public function failure(string $event, string $line, array $fields)
    {
        error_log(Args::escapeControls($line, true));
        if ($this->destination === 'syslog' || $this->destination[0] === '/') {
            $this->send('error', $line, true);
        }
        $this->tellLogger('error', $event, $line, $fields);
    }

    /** The run's record, when 'record' asks for it. */
    public function record(array $fields)
    {
        $skip = strncmp($fields['outcome'], 'skipped: ', 9) === 0;
        if ($this->record === 'off' || ($this->record === 'skips' && !$skip)) {
            return;
        }
        $line = $this->json ? self::json($fields) : self::text($fields);
        $this->send('info', $line, !$this->json);
        $this->tellLogger('info', 'record', $line, $fields);
    }

    /**
     * @param array{lock: string, outcome: string, waited_ms: int, held_ms: int, holder: ?string} $fields
     */
    public static function text(array $fields): string
    {
        return sprintf(
            'cron_guard: record lock=%s outcome=%s waited_ms=%d held_ms=%d holder=%s',
            self::logfmt($fields['lock']),
            self::logfmt($fields['outcome']),
            $fields['waited_ms'],
            $fields['held_ms'],
            $fields['holder'] === null ? '-' : self::logfmt($fields['holder'])
        );
    }

    /**
     * @param array{lock: string, outcome: string, waited_ms: int, held_ms: int, holder: ?string} $fields
     */
    public static function json(array $fields): string
    {
        return sprintf(
            '{"time":%s,"lock":%s,"outcome":%s,"waited_ms":%d,"held_ms":%d,"holder":%s}',
            self::jsonString(gmdate('Y-m-d\TH:i:s\Z')),
            self::jsonString($fields['lock']),
            self::jsonString($fields['outcome']),
            $fields['waited_ms'],
            $fields['held_ms'],
            $fields['holder'] === null ? 'null' : self::jsonString($fields['holder'])
        );
    }

    private static function logfmt(string $value): string
    {
        $value = Args::escapeControls($value, true);
        if ($value !== '' && strpbrk($value, ' "=\\') === false) {
            return $value;
        }
        return '"' . str_replace(['\\', '"'], ['\\\\', '\\"'], $value) . '"';
    }

    private static function jsonString(string $value): string
    {
        return '"' . str_replace(['\\', '"'], ['\\\\', '\\"'], Args::escapeControls($value, true)) . '"';
    }

    /** Two units at most, whole numbers: `0 s`, `45 s`, `12 min 5 s`, `3 h 12 min`, `41 d 2 h`. */
    public static function duration(float $seconds): string
    {
        $s = (int) floor(max(0.0, $seconds));
        $steps = [['d', 86400], ['h', 3600], ['min', 60], ['s', 1]];
        foreach ($steps as $i => $step) {
            if ($s >= $step[1] || $step[1] === 1) {
                $text = intdiv($s, $step[1]) . ' ' . $step[0];
                if (isset($steps[$i + 1])) {
                    $rest = intdiv($s % $step[1], $steps[$i + 1][1]);
                    if ($rest > 0) {
                        $text .= " $rest {$steps[$i + 1][0]}";
                    }
                }
                return $text;
            }
        }
        return '0 s';
    }

    /** A limit the user set (stale_after): duration(), but tenths under a minute with a fraction (`0.5 s`). */
    public static function limit(float $seconds): string
    {
        return $seconds < 60 && fmod($seconds, 1.0) != 0.0 ? self::tenths($seconds) : self::duration($seconds);
    }

    /** `2.0 s`. */
    public static function tenths(float $seconds): string
    {
        return sprintf('%.1f s', $seconds);
    }

    /** `14:50:00Z` today (UTC), else `2026-11-30T14:50:00Z`. */
    public static function clock(int $at): string
    {
        $full = gmdate('Y-m-d\TH:i:s\Z', $at);
        return intdiv($at, 86400) === intdiv(time(), 86400) ? substr($full, 11) : $full;
    }

    private function send(string $level, string $line, bool $stamp)
    {
        $line = Args::escapeControls($line, true);
        switch ($this->destination) {
            case 'none':
                return;
            case 'error_log':
                error_log($line);
                return;
            case 'syslog':
                if (function_exists('syslog')) {
                    syslog(self::LEVELS[$level], $line);
                } else {
                    error_log($line); // a PHP without syslog (WebAssembly)
                }
                return;
            case 'stderr':
                $stderr = @fopen('php://stderr', 'ab');
                if ($stderr !== false) {
                    fwrite($stderr, "$line\n");
                    fclose($stderr);
                }
                return;
        }
        $text = ($stamp ? gmdate('Y-m-d\TH:i:s\Z') . ' ' : '') . "$line\n";
        if (@file_put_contents($this->destination, $text, FILE_APPEND) !== strlen($text)) {
            $error = error_get_last();
            $reason = $error === null ? 'unknown error' : substr((string) strrchr($error['message'], ':'), 2);
            error_log(Args::escapeControls('cron_guard: cannot write to log file ' . Args::cut($this->destination) . ": $reason; the line was: $line", true));
        }
    }

    private function tellLogger(string $level, string $event, string $line, array $fields)
    {
        if ($this->logger === null) {
            return;
        }
        $context = ['event' => $event, 'time' => gmdate('Y-m-d\TH:i:s\Z')] + $fields;
        foreach (['lock', 'holder'] as $key) {
            if (is_string($context[$key])) {
                $context[$key] = Args::escapeControls($context[$key], true);
            }
        }
        $line = Args::escapeControls($line, true);
        try {
            if (is_callable($this->logger)) {
                ($this->logger)($level, $line, $context);
            } else {
                $this->logger->log($level, $line, $context);
            }
        } catch (\Throwable $e) {
            error_log(Args::escapeControls('cron_guard: the logger failed: ' . get_class($e) . ': ' . $e->getMessage(), true));
        }
    }
}

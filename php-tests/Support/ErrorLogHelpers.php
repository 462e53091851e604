<?php

declare(strict_types=1);

namespace CronLock\Tests\Support;

/**
 * For tests that read what this process writes with error_log() (the busy
 * line of cron_guard()): point the error_log ini setting at a fresh file and
 * read its lines back. A test class that uses this calls restoreErrorLog()
 * from tearDown.
 */
trait ErrorLogHelpers
{
    /** error_log as it was before the first logToFile() of the test; null: untouched */
    private ?string $savedErrorLog = null;

    /** Send this process's error_log() lines to a new file in $dir; returns its path. */
    protected function logToFile(string $dir): string
    {
        $this->savedErrorLog ??= (string) ini_get('error_log');
        $log = "$dir/error-" . bin2hex(random_bytes(4)) . '.log';
        ini_set('error_log', $log);
        return $log;
    }

    /** For tearDown: error_log as it was before logToFile(). */
    protected function restoreErrorLog(): void
    {
        if ($this->savedErrorLog !== null) {
            ini_set('error_log', $this->savedErrorLog);
            $this->savedErrorLog = null;
        }
    }

    /**
     * The lines of a log written by logToFile() (none while the file does not exist).
     *
     * @return list<string>
     */
    protected static function logLines(string $log): array
    {
        return is_file($log) ? (file($log, FILE_IGNORE_NEW_LINES) ?: []) : [];
    }
}

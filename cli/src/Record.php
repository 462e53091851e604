<?php

namespace CronLock\Cli;

/**
 * The 128-byte record at the start of a lock file, as CronLock\File writes
 * it in both implementations: `cronlock pid=<pid> host=<host> since=<UTC>`
 * while held, and (after a planned change) `cronlock free since=<UTC>` once
 * released, space-padded with a final "\n". Anything else, however close, is
 * someone's data: not a record (exactly the shapes both implementations
 * accept before they overwrite a file). A record says what was written; whether the
 * file is held now only the kernel says (KernelLocks).
 */
final class Record
{
    const LENGTH = 128;
    const DATE = '([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})Z';

    /** @var bool true: `cronlock pid=…` (written by a holder); false: `cronlock free …` */
    public $held;
    /** @var int|null */
    public $pid;
    /** @var string|null */
    public $host;
    /** @var int Unix time */
    public $since;

    /** @return self|null null unless $bytes is exactly one record */
    public static function parse(string $bytes)
    {
        if (strlen($bytes) !== self::LENGTH) {
            return null;
        }
        $record = new self();
        if (preg_match('/\Acronlock pid=([0-9]+) host=([\x21-\x7e]{0,64}) since=' . self::DATE . ' *\n\z/', $bytes, $m)) {
            $digits = ltrim($m[1], '0');
            if (strlen($digits) > 10 || (strlen($digits) === 10 && strcmp($digits, '4294967295') > 0)) {
                return null; // the extension reads a u32
            }
            $record->held = true;
            $record->pid = (int) $digits;
            $record->host = $m[2];
            $date = array_slice($m, 3);
        } elseif (preg_match('/\Acronlock free since=' . self::DATE . ' *\n\z/', $bytes, $m)) {
            $record->held = false;
            $date = array_slice($m, 1);
        } else {
            return null;
        }
        // the shape is what makes it a record (as both implementations check it), not the calendar
        list($y, $mo, $d, $h, $mi, $s) = array_map('intval', $date);
        $record->since = gmmktime($h, $mi, $s, $mo, $d, $y);
        return $record;
    }

    public static function formatTime(int $unix): string
    {
        return gmdate('Y-m-d\TH:i:s\Z', $unix);
    }
}

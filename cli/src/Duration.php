<?php

namespace CronLock\Cli;

/**
 * Durations as operators type them (`30d`, `12h`, `90m`, `1h30m`, `45s`,
 * `0s`, a bare number of seconds) and as the command prints them, in the
 * words of cron_guard()'s busy line (`45 s`, `12 min 5 s`, `3 h 12 min`,
 * `41 d 2 h`).
 */
final class Duration
{
    const UNITS = ['d' => 86400, 'h' => 3600, 'm' => 60, 'min' => 60, 's' => 1];

    /**
     * @return float seconds, not negative
     * @throws UsageError naming $option for anything else
     */
    public static function parse(string $text, string $option): float
    {
        if (preg_match('/\A[0-9]+(\.[0-9]+)?\z/', $text)) {
            return (float) $text;
        }
        if (!preg_match('/\A(?:[0-9]+(?:\.[0-9]+)?(?:d|h|min|m|s))+\z/', $text)) {
            throw new UsageError("$option takes a duration such as 30d, 12h, 90m, 1h30m, 45s or a number of seconds, not '" . Text::oneLine($text) . "'");
        }
        preg_match_all('/([0-9]+(?:\.[0-9]+)?)(d|h|min|m|s)/', $text, $parts, PREG_SET_ORDER);
        $seconds = 0.0;
        foreach ($parts as $part) {
            $seconds += (float) $part[1] * self::UNITS[$part[2]];
        }
        return $seconds;
    }

    /** Two units at most, whole numbers: `0 s`, `45 s`, `12 min 5 s`, `3 h 12 min`, `41 d 2 h`. */
    public static function format(float $seconds): string
    {
        $s = (int) floor(max(0.0, $seconds));
        $steps = [['d', 86400], ['h', 3600], ['min', 60], ['s', 1]];
        foreach ($steps as $i => $step) {
            if ($s >= $step[1] || $step[1] === 1) {
                $text = intdiv($s, $step[1]) . ' ' . $step[0];
                if (isset($steps[$i + 1])) {
                    $next = $steps[$i + 1];
                    $rest = intdiv($s % $step[1], $next[1]);
                    if ($rest > 0) {
                        $text .= " $rest {$next[0]}";
                    }
                }
                return $text;
            }
        }
        return '0 s';
    }
}

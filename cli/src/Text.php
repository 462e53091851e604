<?php

namespace CronLock\Cli;

/**
 * What the command prints of what others wrote (names, paths, Redis values,
 * host names, messages): one line each, control characters escaped as in
 * cron_guard()'s lines (`\n`, `\t`, `\u{1b}`), bytes that are not UTF-8 as
 * `\xNN`.
 */
final class Text
{
    public static function oneLine(string $text): string
    {
        $out = '';
        $len = strlen($text);
        for ($i = 0; $i < $len;) {
            $c = ord($text[$i]);
            $n = $c < 0x80 ? 1 : ($c >= 0xc2 && $c <= 0xdf ? 2 : ($c >= 0xe0 && $c <= 0xef ? 3 : ($c >= 0xf0 && $c <= 0xf4 ? 4 : 0)));
            $char = $n > 0 ? substr($text, $i, $n) : '';
            if ($n === 0 || strlen($char) < $n || ($n > 1 && !preg_match('//u', $char))) {
                $out .= sprintf('\x%02x', $c);
                $i++;
                continue;
            }
            $i += $n;
            if ($n > 1) {
                $out .= $char;
            } elseif ($char === "\n") {
                $out .= '\n';
            } elseif ($char === "\r") {
                $out .= '\r';
            } elseif ($char === "\t") {
                $out .= '\t';
            } elseif ($c < 0x20 || $c === 0x7f) {
                $out .= sprintf('\u{%x}', $c);
            } else {
                $out .= $char;
            }
        }
        return $out;
    }

    /** $text as is when it is UTF-8 (for JSON), else escaped as oneLine() does. */
    public static function utf8(string $text): string
    {
        return preg_match('//u', $text) ? $text : self::oneLine($text);
    }

    /** $text cut to $max characters with `…`, as cron_guard() cuts names and paths (200). */
    public static function cut(string $text, int $max = 200): string
    {
        if (preg_match('//u', $text) && function_exists('mb_strlen')) {
            return mb_strlen($text, 'UTF-8') > $max ? mb_substr($text, 0, $max - 1, 'UTF-8') . '…' : $text;
        }
        return strlen($text) > $max ? substr($text, 0, $max - 1) . '…' : $text;
    }

    /**
     * A DSN or URL as it may be printed: the password replaced by `***`
     * (a URL's user info after ':', or all of it when it has no ':', as
     * the redis crate reads `redis://secret@host`; `pass=` and `password=`
     * parameters of a query or a PDO DSN).
     */
    public static function withoutPassword(string $dsn): string
    {
        if (preg_match('#\A([a-z][a-z0-9+.-]*://)(.*)\z#is', $dsn, $m)) {
            $rest = $m[2];
            $authority = substr($rest, 0, strcspn($rest, '/?#'));
            $at = strrpos($authority, '@');
            if ($at !== false) {
                $userinfo = substr($authority, 0, $at);
                $colon = strpos($userinfo, ':');
                $shown = $colon === false ? '***' : substr($userinfo, 0, $colon) . ':***';
                $dsn = $m[1] . $shown . substr($rest, $at);
            }
        }
        return (string) preg_replace('/(\A|[;?&])(pass|password)=[^;&]*/i', '$1$2=***', $dsn);
    }
}

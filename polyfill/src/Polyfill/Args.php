<?php

namespace CronLock\Polyfill;

/**
 * Argument checks with the extension's messages: "$arg reason", \ValueError
 * for a bad value (a class of our own on PHP 7), \TypeError for a wrong type.
 *
 * @internal
 */
final class Args
{
    /** Longest user-supplied name echoed in a message (decision D6). */
    const NAME_MAX = 200;

    public static function value(string $arg, string $reason): \Throwable
    {
        return new \ValueError("$arg $reason");
    }

    public static function type(string $arg, string $reason): \TypeError
    {
        return new \TypeError("$arg $reason");
    }

    /**
     * @param mixed $options
     * @param string[] $known
     * @return array<string, mixed>
     */
    public static function options($options, array $known, string $arg = '$options'): array
    {
        foreach ($options as $key => $value) {
            if (!in_array((string) $key, $known, true)) {
                throw self::value($arg, sprintf(
                    "has an unknown key '%s' (known: %s)",
                    addcslashes(self::cut((string) $key), "\0..\37\\'"),
                    implode(', ', $known)
                ));
            }
        }
        return $options;
    }

    /** @param array<string, mixed> $options */
    public static function bool(array $options, string $key, bool $default, string $arg = '$options'): bool
    {
        if (!array_key_exists($key, $options)) {
            return $default;
        }
        if (!is_bool($options[$key])) {
            throw self::type("{$arg}['$key']", 'must be of type bool, ' . self::typeName($options[$key]) . ' given');
        }
        return $options[$key];
    }

    /** @param array<string, mixed> $options */
    public static function int(array $options, string $key, string $arg = '$options'): ?int
    {
        $v = isset($options[$key]) ? $options[$key] : null;
        if ($v !== null && !is_int($v)) {
            throw self::type("{$arg}['$key']", 'must be of type ?int, ' . self::typeName($v) . ' given');
        }
        return $v;
    }

    /**
     * A UTF-8 string (a password cut down to "absent" would fail far from its cause), or null.
     *
     * @param array<string, mixed> $options
     */
    public static function string(array $options, string $key, string $arg = '$options'): ?string
    {
        $v = isset($options[$key]) ? $options[$key] : null;
        if ($v !== null && !is_string($v)) {
            throw self::type("{$arg}['$key']", 'must be of type ?string, ' . self::typeName($v) . ' given');
        }
        if ($v !== null && preg_match('//u', $v) !== 1) {
            throw self::value("{$arg}['$key']", 'must be valid UTF-8');
        }
        return $v;
    }

    /**
     * int or float seconds, as PHP's float parameters accept; NaN refused.
     *
     * @param array<string, mixed> $options
     */
    public static function seconds(array $options, string $key, string $arg = '$options'): ?float
    {
        $v = isset($options[$key]) ? $options[$key] : null;
        if ($v === null) {
            return null;
        }
        if (!is_int($v) && !is_float($v)) {
            throw self::type("{$arg}['$key']", 'must be of type ?float, ' . self::typeName($v) . ' given');
        }
        if (is_nan((float) $v)) {
            throw self::value("{$arg}['$key']", 'must be a number, NaN given');
        }
        return (float) $v;
    }

    public static function timeout(float $timeout): float
    {
        if (is_nan($timeout)) {
            throw self::value('$timeout', 'must be a number, NaN given');
        }
        return $timeout;
    }

    /** @param mixed $value */
    public static function typeName($value): string
    {
        if ($value === null) {
            return 'null';
        }
        if (is_object($value)) {
            return get_class($value);
        }
        $map = ['boolean' => 'bool', 'integer' => 'int', 'double' => 'float', 'string' => 'string', 'array' => 'array'];
        $t = gettype($value);
        return isset($map[$t]) ? $map[$t] : 'resource';
    }

    /**
     * A union-typed parameter that has string (array|string, Lock|string|null)
     * given something else, as PHP's weak mode treats it: an int, float, bool
     * or Stringable object becomes its string; null (when not allowed) is
     * deprecated on PHP 8.1+ and becomes ""; anything else is PHP's TypeError
     * "f(): Argument #N ($x) must be of type T, X given". Userland cannot see
     * the caller's strict_types, so this always coerces (the extension
     * refuses in strict mode).
     *
     * @param mixed $value
     */
    public static function weakString($value, string $function, int $num, string $param, string $type): string
    {
        if (is_int($value) || is_float($value) || is_bool($value)
            || (is_object($value) && method_exists($value, '__toString'))) {
            return (string) $value;
        }
        if ($value === null) {
            if (PHP_VERSION_ID >= 80100) {
                trigger_error("$function(): Passing null to parameter #$num (\$$param) of type $type is deprecated", E_USER_DEPRECATED);
            }
            return '';
        }
        throw new \TypeError("$function(): Argument #$num (\$$param) must be of type $type, " . self::typeName($value) . ' given');
    }

    /**
     * $text as Rust's str::escape_default() writes it, as the extension's messages show a
     * bad lock name: printable ASCII as it is, \t \r \n \' \" \\ escaped, every other
     * character as \u{hex}; bytes that are not UTF-8 count as U+FFFD each.
     */
    public static function escapeDefault(string $text): string
    {
        $named = ["\t" => '\\t', "\r" => '\\r', "\n" => '\\n', "'" => "\\'", '"' => '\\"', '\\' => '\\\\'];
        return (string) preg_replace_callback(
            '/[\x20-\x7e]|[\xc2-\xdf][\x80-\xbf]|\xe0[\xa0-\xbf][\x80-\xbf]|[\xe1-\xec\xee\xef][\x80-\xbf]{2}|\xed[\x80-\x9f][\x80-\xbf]'
            . '|\xf0[\x90-\xbf][\x80-\xbf]{2}|[\xf1-\xf3][\x80-\xbf]{3}|\xf4[\x80-\x8f][\x80-\xbf]{2}|[\x00-\xff]/',
            function (array $m) use ($named) {
                $c = $m[0];
                if (isset($named[$c])) {
                    return $named[$c];
                }
                $n = strlen($c);
                if ($n === 1 && ord($c) >= 0x20 && ord($c) <= 0x7e) {
                    return $c;
                }
                if ($n === 1) {
                    return ord($c) < 0x80 ? sprintf('\\u{%x}', ord($c)) : '\\u{fffd}';
                }
                $code = ord($c[0]) & (0xff >> ($n + 1));
                for ($i = 1; $i < $n; $i++) {
                    $code = ($code << 6) | (ord($c[$i]) & 0x3f);
                }
                return sprintf('\\u{%x}', $code);
            },
            $text
        );
    }

    /** Bytes that are not UTF-8 as \xNN, as the extension shows another holder's value (the busy line, CronLock\Redis::holder()). */
    public static function escapeNonUtf8(string $text): string
    {
        if (preg_match('//u', $text) === 1) {
            return $text;
        }
        return (string) preg_replace_callback(
            '/([\x00-\x7f]|[\xc2-\xdf][\x80-\xbf]|\xe0[\xa0-\xbf][\x80-\xbf]|[\xe1-\xec\xee\xef][\x80-\xbf]{2}'
            . '|\xed[\x80-\x9f][\x80-\xbf]|\xf0[\x90-\xbf][\x80-\xbf]{2}|[\xf1-\xf3][\x80-\xbf]{3}|\xf4[\x80-\x8f][\x80-\xbf]{2})|(.)/s',
            function ($m) {
                return isset($m[2]) ? sprintf('\\x%02x', ord($m[2])) : $m[1];
            },
            $text
        );
    }

    /**
     * A user-supplied name as messages show it, as the extension's: at most
     * 200 characters, then "…", and control characters escaped ("\n",
     * "\u{0}") so that a name or path with a line break stays one log line.
     */
    public static function cut(string $name): string
    {
        $cut = $name;
        if (preg_match('/^.{' . self::NAME_MAX . '}(?=.)/su', $name, $m) === 1) {
            $cut = $m[0] . '…';
        } elseif (strlen($name) > self::NAME_MAX && preg_match('//u', $name) !== 1) {
            // Not UTF-8: count bytes, and do not end inside a sequence.
            $cut = preg_replace('/[\xC0-\xFF][\x80-\xBF]*$/', '', substr($name, 0, self::NAME_MAX)) . '…';
        }
        return self::escapeControls($cut);
    }

    /**
     * Control characters as \n, \t, \r or \u{hex} (C0, DEL, C1), as the extension's
     * messages show them; with $lineSeparators also U+2028 and U+2029, as its busy lines do.
     */
    public static function escapeControls(string $text, bool $lineSeparators = false): string
    {
        $pattern = $lineSeparators ? '/[\x00-\x1F\x7F]|\xC2[\x80-\x9F]|\xE2\x80[\xA8\xA9]/' : '/[\x00-\x1F\x7F]|\xC2[\x80-\x9F]/';
        return (string) preg_replace_callback($pattern, function (array $c) {
            $named = ["\t" => '\\t', "\n" => '\\n', "\r" => '\\r'];
            if (isset($named[$c[0]])) {
                return $named[$c[0]];
            }
            $bytes = $c[0];
            $code = strlen($bytes) === 3 ? 0x2000 + ord($bytes[2]) - 0x80 : ord(substr($bytes, -1));
            return sprintf('\\u{%x}', $code);
        }, $text);
    }
}

<?php

namespace CronLock\Laravel;

/**
 * A scheduled command as an argv, when it is one plain command: words of
 * safe characters, '…' single-quoted strings and \' (what Laravel's
 * command()/exec() with parameters writes), nothing a shell would expand,
 * redirect, chain or glob. cronlock:run then executes it directly: one
 * process fewer, and the job is the process the Supervisor signals and
 * reaps (a shell's job dies with its holder too: the Supervisor ends the
 * command's whole process group).
 *
 * Anything else ("…", $, `, another \, ;, &, |, <, >, (, ), globs, ~, #, a newline)
 * is not split: null, and the command runs through `sh -c`.
 */
final class ShellWords
{
    /** @return list<string>|null */
    public static function split(string $command): ?array
    {
        $words = [];
        $length = strlen($command);
        $i = 0;
        while (true) {
            while ($i < $length && ($command[$i] === ' ' || $command[$i] === "\t")) {
                $i++;
            }
            if ($i >= $length) {
                break;
            }
            $word = '';
            while ($i < $length && $command[$i] !== ' ' && $command[$i] !== "\t") {
                if ($command[$i] === "'") {
                    $end = strpos($command, "'", $i + 1);
                    if ($end === false) {
                        return null;
                    }
                    $word .= substr($command, $i + 1, $end - $i - 1);
                    $i = $end + 1;
                    continue;
                }
                if ($command[$i] === '\\' && ($command[$i + 1] ?? '') === "'") {
                    $word .= "'"; // '\'' : how escapeArgument() writes a quote
                    $i += 2;
                    continue;
                }
                $plain = strspn($command, 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_@%+=:,./-', $i);
                if ($plain === 0) {
                    return null;
                }
                $word .= substr($command, $i, $plain);
                $i += $plain;
            }
            $words[] = $word;
        }
        if ($words === [] || strpos($words[0], '=') !== false) {
            return null; // empty, or VAR=value cmd: the shell's business
        }
        return $words;
    }
}

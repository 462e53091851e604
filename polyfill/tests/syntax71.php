<?php

// Guards cronlock/polyfill's promise of PHP 7.1 syntax where no PHP 7.1-7.3
// binary is at hand: run on a newer PHP, it refuses the tokens and functions
// those releases lack. `php -l` on PHP 7.4 and 8.0 (WebAssembly) runs too.
//
//   php syntax71.php FILE...

$tooNew = [
    'T_FN' => 'arrow functions (7.4)', 'T_COALESCE_EQUAL' => '??= (7.4)', 'T_MATCH' => 'match (8.0)',
    'T_NULLSAFE_OBJECT_OPERATOR' => '?-> (8.0)', 'T_READONLY' => 'readonly (8.1)', 'T_ENUM' => 'enum (8.1)',
];
$functions = ['str_contains', 'str_starts_with', 'str_ends_with', 'array_key_first', 'array_key_last',
    'is_countable', 'hrtime', 'get_debug_type', 'fdiv', 'spl_object_id', 'mb_str_split', 'array_is_list',
    'get_resource_id', 'preg_last_error_msg'];
$bad = 0;
foreach (array_slice($argv, 1) as $file) {
    $code = file_get_contents($file);
    $tokens = token_get_all($code, TOKEN_PARSE);
    $lines = explode("\n", $code);
    $prev = [];
    foreach ($tokens as $i => $t) {
        if (!is_array($t)) {
            if ($t === '|' && isset($prev[0]) && $prev[0][0] === T_STRING && ($tokens[$i + 1][0] ?? null) === T_STRING) {
                // "int|string $x": a union type (8.0)
                echo "$file:{$prev[0][2]}: union type\n";
                $bad++;
            }
            array_unshift($prev, [null, $t, 0]);
            continue;
        }
        [$id, $text, $line] = $t;
        if ($id === T_WHITESPACE || $id === T_COMMENT || $id === T_DOC_COMMENT) {
            continue;
        }
        $name = token_name($id);
        if (isset($tooNew[$name])) {
            echo "$file:$line: {$tooNew[$name]}\n";
            $bad++;
        }
        if ($id === T_ATTRIBUTE && trim($lines[$line - 1]) !== '#[\SensitiveParameter]') {
            echo "$file:$line: an attribute not alone on its line is code on PHP 7 (comment it out or give it its own line)\n";
            $bad++;
        }
        if ($id === T_LNUMBER && strpos($text, '_') !== false) {
            echo "$file:$line: numeric separator (7.4)\n";
            $bad++;
        }
        // allowed where the same line checks function_exists() for it
        if ($id === T_STRING && in_array(strtolower($text), $functions, true) && ($prev[0][1] ?? '') !== '->' && ($prev[0][1] ?? '') !== '::'
            && strpos($lines[$line - 1] ?? '', "function_exists('" . strtolower($text) . "')") === false) {
            echo "$file:$line: $text() needs a newer PHP than 7.1\n";
            $bad++;
        }
        if ($id === T_VARIABLE && isset($prev[0], $prev[1]) && in_array($prev[1][0], [T_PUBLIC, T_PROTECTED, T_PRIVATE, T_VAR, T_STATIC], true)
            && in_array($prev[0][0], [T_STRING, T_ARRAY, T_CALLABLE, T_NAME_QUALIFIED, T_NAME_FULLY_QUALIFIED], true)) {
            echo "$file:$line: typed property (7.4)\n";
            $bad++;
        }
        if ($id === T_STRING && in_array(strtolower($text), ['mixed', 'object'], true) && ($prev[0][1] ?? '') === ':') {
            echo "$file:$line: return type $text (7.2/8.0)\n";
            $bad++;
        }
        array_unshift($prev, $t);
    }
}
echo $bad === 0 ? 'PHP 7.1 syntax: ' . (count($argv) - 1) . " files OK\n" : "PHP 7.1 syntax: $bad problems\n";
exit($bad === 0 ? 0 : 1);

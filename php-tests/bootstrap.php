<?php

declare(strict_types=1);

// PHPUnit bootstrap for the cronlock suite. Run it through scripts/test, which
// builds the extension and exports PHP_INI_SCAN_DIR so that this process and
// every child (@runInSeparateProcess, Support\Proc) load it.

if (!extension_loaded('cronlock')) {
    // No extension: the same suite tests cronlock/polyfill (polyfill/), here
    // and, through an auto_prepend_file ini in PHP_INI_SCAN_DIR, in every
    // child PHP (Support\Proc, @runInSeparateProcess). Tests that only the
    // extension can pass are in the group "extension-only", with the reason;
    // run with --exclude-group extension-only (scripts/test does).
    // CRONLOCK_TEST_PREDIS=<predis' Autoloader.php>: CronLock\Redis through
    // predis (scripts/test runs the suite so, on a PHP without phpredis).
    $prepend = "<?php\n"
        . "if ((string) getenv('CRONLOCK_TEST_PREDIS') !== '' && !class_exists('Predis\\\\Client', false)) {\n"
        . "    require_once getenv('CRONLOCK_TEST_PREDIS');\n"
        . "    Predis\\Autoloader::register();\n"
        . "}\n"
        . 'require_once ' . var_export(dirname(__DIR__) . '/polyfill/bootstrap.php', true) . ";\n";
    if (getenv('CRONLOCK_POLYFILL_INI_DIR') === false) {
        $dir = sys_get_temp_dir() . '/cronlock-polyfill-ini.' . getmypid();
        @mkdir($dir, 0700);
        file_put_contents("$dir/prepend.php", $prepend);
        file_put_contents("$dir/cronlock-polyfill.ini", "auto_prepend_file=$dir/prepend.php\n");
        putenv('CRONLOCK_POLYFILL_INI_DIR=' . $dir);
        putenv('CRONLOCK_POLYFILL=' . "$dir/prepend.php");
        putenv('PHP_INI_SCAN_DIR=' . (string) getenv('PHP_INI_SCAN_DIR') . ':' . $dir);
        $owner = getmypid();
        register_shutdown_function(static function () use ($dir, $owner): void {
            if (getmypid() === $owner) {
                @unlink("$dir/cronlock-polyfill.ini");
                @unlink("$dir/prepend.php");
                @rmdir($dir);
            }
        });
        require_once "$dir/prepend.php";
        fwrite(STDERR, sprintf("cronlock extension not loaded: testing cronlock/polyfill on PHP %s with %s\n", PHP_VERSION,
            extension_loaded('redis') ? 'phpredis' : (class_exists('Predis\\Client') ? 'predis' : 'no Redis client')));
    }
}

// A skip goes to syslog by default (issue 19); the tests that read the busy line
// from the error log (this process's, or a child's stderr) keep reading it there
// through the setting that chooses it. CronGuardOperationsTest and RecipesTest
// unset it and test the default.
putenv('CRONLOCK_LOG=error_log');

// Test helpers: CronLock\Tests\Foo\Bar -> php-tests/Foo/Bar.php
spl_autoload_register(static function (string $class): void {
    $prefix = 'CronLock\\Tests\\';
    if (strncmp($class, $prefix, strlen($prefix)) === 0) {
        $file = __DIR__ . '/' . str_replace('\\', '/', substr($class, strlen($prefix))) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});

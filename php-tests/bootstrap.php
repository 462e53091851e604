<?php

declare(strict_types=1);

// PHPUnit bootstrap for the cronlock suite. Run it through scripts/test, which
// builds the extension and exports PHP_INI_SCAN_DIR so that this process and
// every child (@runInSeparateProcess, Support\Proc) load it.

if (!extension_loaded('cronlock')) {
    fwrite(STDERR, <<<'MSG'

        The cronlock extension is not loaded, so there is nothing to test.
        Run the suite through the project script, which builds and loads it:

            scripts/test

        or by hand:

            cargo build --release
            php -d extension=$PWD/target/release/libcronlock.so /usr/bin/phpunit -c php-tests/phpunit.xml.dist


        MSG);
    exit(1);
}

// Test helpers: CronLock\Tests\Foo\Bar -> php-tests/Foo/Bar.php
spl_autoload_register(static function (string $class): void {
    $prefix = 'CronLock\\Tests\\';
    if (str_starts_with($class, $prefix)) {
        $file = __DIR__ . '/' . str_replace('\\', '/', substr($class, strlen($prefix))) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});

<?php

// What Composer's autoloader does for cronlock/symfony (and cronlock/polyfill)
// in the tests, which load symfony/lock and symfony/console from Debian's
// packages: CronLock\Symfony\Foo\Bar -> src/Foo/Bar.php.

require_once dirname(__DIR__, 3) . '/polyfill/bootstrap.php';

spl_autoload_register(static function (string $class): void {
    $prefix = 'CronLock\\Symfony\\';
    if (strncmp($class, $prefix, strlen($prefix)) === 0) {
        $file = dirname(__DIR__) . '/src/' . str_replace('\\', '/', substr($class, strlen($prefix))) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});

<?php

// CronLock\Cli\Foo\Bar -> src/Foo/Bar.php, for use without Composer.

spl_autoload_register(static function ($class) {
    $prefix = 'CronLock\\Cli\\';
    if (strncmp($class, $prefix, strlen($prefix)) === 0) {
        $file = __DIR__ . '/' . str_replace('\\', '/', substr($class, strlen($prefix))) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});

<?php

// Loaded by ../bootstrap.php only when the extension is absent: registers a
// class loader for CronLock\* and defines cron_guard().

spl_autoload_register(static function ($class) {
    static $shared = [
        'CronLock\\Polyfill\\PhpRedisClient' => 'Polyfill/RedisClient.php',
        'CronLock\\Polyfill\\PredisClient' => 'Polyfill/RedisClient.php',
        'CronLock\\Polyfill\\RedisFailure' => 'Polyfill/RedisClient.php',
    ];
    if (isset($shared[$class])) {
        require_once __DIR__ . '/' . $shared[$class];
    } elseif (strncmp($class, 'CronLock\\', 9) === 0) {
        $file = __DIR__ . '/' . str_replace('\\', '/', substr($class, 9)) . '.php';
        if (is_file($file)) {
            require_once $file;
        }
    } elseif ($class === 'ValueError' && PHP_VERSION_ID < 80000) {
        // PHP 7 has no \ValueError: the same class as PHP 8's and
        // symfony/polyfill-php80's (appended last, so theirs wins if present).
        require __DIR__ . '/Polyfill/ValueError.php';
    }
});

require __DIR__ . '/functions.php';

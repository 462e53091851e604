<?php

// The servers are the test's own (php-tests/Support): FIXTURE_REDIS_PORT,
// FIXTURE_DB_* .
return [
    'default' => env('FIXTURE_DB_DRIVER', 'mysql'),
    'connections' => [
        'mysql' => [
            'driver' => 'mysql', 'host' => '127.0.0.1', 'port' => env('FIXTURE_DB_PORT', 3306),
            'database' => 'cron', 'username' => 'cron', 'password' => env('FIXTURE_DB_PASSWORD', ''),
            'charset' => 'utf8mb4', 'collation' => 'utf8mb4_unicode_ci', 'prefix' => '',
        ],
        'pgsql' => [
            'driver' => 'pgsql', 'host' => '127.0.0.1', 'port' => env('FIXTURE_DB_PORT', 5432),
            'database' => 'cron', 'username' => 'cron', 'password' => env('FIXTURE_DB_PASSWORD', ''),
            'charset' => 'utf8', 'prefix' => '', 'schema' => 'public',
        ],
    ],
    'redis' => [
        'client' => env('FIXTURE_REDIS_CLIENT', 'phpredis'),
        'options' => ['prefix' => 'fixture_database_'],
        'default' => ['host' => '127.0.0.1', 'port' => env('FIXTURE_REDIS_PORT', 6379), 'database' => 0],
        'cache' => ['host' => '127.0.0.1', 'port' => env('FIXTURE_REDIS_PORT', 6379), 'database' => 1],
    ],
];

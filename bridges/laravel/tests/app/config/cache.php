<?php

// FIXTURE_CACHE picks the store: file (Laravel's default), redis or database.
return [
    'default' => env('FIXTURE_CACHE', 'file'),
    'stores' => [
        'file' => ['driver' => 'file', 'path' => storage_path('framework/cache/data')],
        'redis' => ['driver' => 'redis', 'connection' => 'cache'],
        'database' => ['driver' => 'database', 'table' => 'cache', 'connection' => null],
    ],
    'prefix' => 'fixture_cache',
];

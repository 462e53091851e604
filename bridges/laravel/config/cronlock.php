<?php

use Illuminate\Support\Str;

// cronlock for Laravel's scheduler: what withoutOverlapping() locks with.
// Published by `php artisan vendor:publish --tag=cronlock-config`.
return [

    // file: lock files on this host (one server runs the schedule).
    // redis, database: one lock shared by every server that runs the
    // schedule against that Redis or database server.
    'backend' => env('CRONLOCK_BACKEND', 'file'),

    // file: the directory of the lock files; every server process that runs
    // the schedule (and the users of events with ->user()) must be able to
    // write to it. null: storage/framework/cronlock.
    'directory' => env('CRONLOCK_DIRECTORY'),

    // redis: a CronLock\Redis DSN, e.g. redis://:secret@10.0.0.5:6379/0
    //   (rediss://, unix://, redis-sentinel://, redis-cluster:// need the extension
    //   for the last two).
    // database: a PDO DSN, e.g. mysql:host=10.0.0.5 or pgsql:host=10.0.0.5;dbname=app
    //   (needs the cronlock extension; cronlock/polyfill has no database locks).
    // Read here, in the application's own processes: it never appears in a
    // command line.
    'dsn' => env('CRONLOCK_DSN'),

    // database: the login.
    'username' => env('CRONLOCK_DB_USERNAME'),
    'password' => env('CRONLOCK_DB_PASSWORD'),

    // redis: the key's time to live in seconds, renewed every third of it while the
    // job runs, so a holder killed with kill -9 blocks the next run for at most this long.
    // null: cronlock's lease, 30 s renewed every 10 s while the job runs.
    'ttl' => env('CRONLOCK_REDIS_TTL'),

    // onOneServer(): how long a tick's claim lasts, in seconds. Hosts whose clocks
    // differ by less than this agree on each tick (Laravel's own claim lasts an hour).
    // file: once per tick on this host (claim files beside the lock files, each
    // deleted by a later claim once expired); redis, database: once per tick across
    // every host on that server.
    'claim_seconds' => 3600.0,

    // database: the table of onOneServer()'s claims (null: cronlock_claims), which the
    // DBA creates once (docs/frameworks.md; the error of a missing one prints it):
    //   MySQL/MariaDB: CREATE TABLE cronlock_claims (name VARCHAR(255) CHARACTER SET utf8mb4
    //     COLLATE utf8mb4_bin NOT NULL PRIMARY KEY, expires_at DATETIME(6) NOT NULL,
    //     holder VARCHAR(255) NOT NULL, INDEX (expires_at));
    //   PostgreSQL: CREATE TABLE cronlock_claims (name varchar(255) COLLATE "C" PRIMARY KEY,
    //     expires_at timestamptz NOT NULL, holder varchar(255) NOT NULL);
    //     CREATE INDEX ON cronlock_claims (expires_at);
    // The login needs SELECT, INSERT, UPDATE, DELETE on it.
    'claims_table' => env('CRONLOCK_CLAIMS_TABLE'),

    // Prefix of every Redis key and database lock name, so that two applications
    // sharing a server (whose schedules often have the same commands) do not
    // exclude each other. Lock files are per application already.
    'prefix' => env('CRONLOCK_PREFIX', Str::slug(env('APP_NAME', 'laravel'), '_') . ':'),

];

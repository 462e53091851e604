<?php
/**
 * Starts a private MariaDB and PostgreSQL for bench/run (the test suite's
 * php-tests/Support/DatabaseServer.php: temp dirs, free loopback ports),
 * PostgreSQL with pg_stat_statements (the rows' statement counts),
 * writes their settings as shell assignments to $argv[1], and stops both
 * when $argv[2] appears. A server whose software is missing is left out
 * (its rows then show n/a).
 */

declare(strict_types=1);

require __DIR__ . '/../php-tests/Support/DatabaseServer.php';

use CronLock\Tests\Support\DatabaseServer;

[, $envFile, $stopFile] = $argv;
$servers = [];
$env = [];
foreach (['mysql' => 'BENCH_MYSQL_DSN', 'pgsql' => 'BENCH_PGSQL_DSN'] as $kind => $var) {
    if (($missing = DatabaseServer::available($kind)) !== null) {
        fwrite(STDERR, "[bench] no $kind server: $missing\n");
        continue;
    }
    // pg_stat_statements counts the statements of each row (bench.php).
    $counts = $kind === 'pgsql' && glob('/usr/lib/postgresql/*/lib/pg_stat_statements.so');
    $servers[$kind] = DatabaseServer::start($kind, $counts ? ['-c', 'shared_preload_libraries=pg_stat_statements'] : []);
    if ($counts) {
        $servers[$kind]->adminPdo()->exec('CREATE EXTENSION pg_stat_statements');
    }
    $env[] = "$var=" . escapeshellarg($servers[$kind]->dsn());
}
$env[] = 'BENCH_DB_USER=cron';
$env[] = 'BENCH_DB_PASSWORD=' . escapeshellarg(DatabaseServer::PASSWORD);
file_put_contents("$envFile.tmp", implode("\n", $env) . "\n");
rename("$envFile.tmp", $envFile);
while (!file_exists($stopFile)) {
    usleep(100_000);
}
foreach ($servers as $server) {
    $server->stop();
}

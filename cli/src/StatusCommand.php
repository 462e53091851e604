<?php

namespace CronLock\Cli;

/**
 * `cronlock status [PATH…] [--redis DSN…] [--database DSN…] [--stale-after D] [--json]`:
 * who holds which lock. Without PATH, --redis or --database: the File locks
 * of this user's lock directory (LockDirectory). PATH: a directory (its
 * `*.lock` files) or a lock file. Read-only: nothing is locked, created or
 * written, so running it never makes a job skip.
 */
final class StatusCommand
{
    const SPEC = [
        'redis' => Arguments::VALUES, 'redis-env' => Arguments::VALUES, 'prefix' => Arguments::VALUE, 'redis-client' => Arguments::VALUE,
        'database' => Arguments::VALUES, 'database-env' => Arguments::VALUES,
        'user' => Arguments::VALUE, 'password-env' => Arguments::VALUE, 'name' => Arguments::VALUES,
        'stale-after' => Arguments::VALUE, 'json' => Arguments::FLAG,
    ];

    /** @param string[] $argv */
    public static function main(array $argv): int
    {
        $args = Arguments::parse($argv, self::SPEC);
        $staleAfter = $args->has('stale-after') ? Duration::parse((string) $args->value('stale-after'), '--stale-after') : null;
        if ($args->flag('json') && !function_exists('json_encode')) {
            throw new Missing("--json needs PHP's json extension");
        }
        $redis = self::dsns($args, 'redis');
        $databases = self::dsns($args, 'database');
        foreach (['prefix', 'redis-client'] as $option) {
            if ($args->has($option) && $redis === []) {
                throw new UsageError("--$option goes with --redis");
            }
        }
        foreach (['user', 'password-env', 'name'] as $option) {
            if ($args->has($option) && $databases === []) {
                throw new UsageError("--$option goes with --database");
            }
        }
        $report = new StatusReport($staleAfter, time());
        $paths = $args->positional();
        if ($paths === [] && $redis === [] && $databases === []) {
            $dir = LockDirectory::current();
            self::files($report, [$dir->path], $dir->origin);
        } elseif ($paths !== []) {
            self::files($report, $paths, null);
        }
        foreach ($redis as $dsn) {
            RedisLocks::report($report, $dsn, (string) $args->value('prefix'), $args->has('redis-client') ? (string) $args->value('redis-client') : 'auto');
        }
        foreach ($databases as $dsn) {
            DatabaseLocks::report($report, $dsn, Secrets::credentials($args), $args->values('name'));
        }
        fwrite(STDOUT, $args->flag('json') ? $report->json() : $report->text());
        foreach ($report->errors() as $error) {
            fwrite(STDERR, 'cronlock status: ' . Text::oneLine($error) . "\n");
        }
        return $report->exitStatus();
    }

    /**
     * @param string[] $paths directories and files
     * @param string|null $origin why the one directory is listed (the default directory)
     */
    private static function files(StatusReport $report, array $paths, $origin)
    {
        $kernel = KernelLocks::read();
        if (!$kernel->readable()) {
            $report->error('cannot read /proc/locks, so nobody can tell held from free here (cronlock status needs Linux with /proc)');
        }
        $files = new FileLocks($kernel);
        foreach ($paths as $path) {
            $errors = [];
            if (is_dir($path)) {
                $rows = $files->directory($path, $errors);
                $title = $origin === null ? $path : "$path ($origin)";
            } elseif (!file_exists($path) && $origin !== null) {
                $rows = null;
                $title = "$path ($origin)";
            } else {
                $row = $files->file($path, dirname($path), $errors);
                $rows = $row === null ? [] : [$row];
                $title = $path;
            }
            $report->add('file', $title, $rows === [] && $errors !== [] && !is_dir($path) ? false : $rows);
            foreach ($errors as $error) {
                $report->error($error);
            }
        }
    }

    /** @return string[] the DSNs of --$kind and --$kind-env, in that order */
    private static function dsns(Arguments $args, string $kind): array
    {
        $dsns = $args->values($kind);
        foreach ($dsns as $dsn) {
            if (Text::withoutPassword($dsn) !== $dsn) {
                fwrite(STDERR, "cronlock: warning: --$kind names a password, which every user of this host can read in ps; use --$kind-env VARIABLE\n");
            }
        }
        foreach ($args->values("$kind-env") as $variable) {
            $value = getenv($variable);
            if (!is_string($value) || $value === '') {
                throw new UsageError("--$kind-env $variable: the environment variable $variable is not set");
            }
            $dsns[] = $value;
        }
        return $dsns;
    }
}

<?php

namespace CronLock\Cli;

/**
 * `cronlock run [LOCK] [--wait SECONDS] [--on-busy N] -- COMMAND [ARG…]`:
 * COMMAND runs while cronlock holds the lock (Supervisor, decision D28), like flock(1)
 * with cronlock's locks. LOCK is one of
 *   --lock NAME                          cron_guard()'s named lock (<lock dir>/NAME.lock)
 *   --file PATH                          CronLock\File
 *   --redis DSN | --redis-env VAR, --key KEY [--ttl SECONDS]
 *                                        CronLock\Redis, renewed while COMMAND runs
 *   --database DSN | --database-env VAR, --name NAME [--user USER] [--password-env VAR]
 *                                        CronLock\Database (the extension)
 * A DSN with a password belongs in an environment variable (--redis-env,
 * --database-env, --password-env): argv is world-readable in ps.
 */
final class RunCommand
{
    const SPEC = [
        'lock' => Arguments::VALUE, 'file' => Arguments::VALUE,
        'redis' => Arguments::VALUE, 'redis-env' => Arguments::VALUE, 'key' => Arguments::VALUE, 'ttl' => Arguments::VALUE,
        'database' => Arguments::VALUE, 'database-env' => Arguments::VALUE, 'name' => Arguments::VALUE,
        'user' => Arguments::VALUE, 'password-env' => Arguments::VALUE,
        'wait' => Arguments::VALUE, 'on-busy' => Arguments::VALUE,
    ];
    /** Redis TTL when --ttl is not given: renewed every 20 s while COMMAND runs, so a killed holder blocks for 60 s at most. */
    const DEFAULT_REDIS_TTL = 60.0;

    /** @param string[] $argv */
    public static function main(array $argv): int
    {
        $args = Arguments::parse($argv, self::SPEC, true);
        $command = $args->command();
        if ($command === null || $command === []) {
            throw new UsageError('cronlock run needs a command: cronlock run --lock NAME -- COMMAND [ARG…]');
        }
        $wait = self::wait($args->value('wait'));
        $onBusy = self::onBusy($args->value('on-busy'));
        if (!function_exists('cron_guard')) {
            throw new Missing('cronlock run needs the cronlock extension or cronlock/polyfill (composer require cronlock/polyfill)');
        }
        $missing = Supervisor::missingFunction();
        if ($missing !== null) {
            throw new Missing("cronlock run needs PHP's pcntl and posix extensions ($missing() is missing)");
        }
        $lock = self::lock($args);
        $status = (new Supervisor())->runLocked($lock, $command, ['wait' => $wait]);
        return $status === null ? $onBusy : $status;
    }

    /**
     * The lock the options name: a lock name (string) or a \CronLock\Lock.
     *
     * @return \CronLock\Lock|string
     */
    private static function lock(Arguments $args)
    {
        $given = array_values(array_filter(['lock', 'file', 'redis', 'redis-env', 'database', 'database-env'], [$args, 'has']));
        if (count($given) !== 1 && $given !== ['redis', 'redis-env'] && $given !== ['database', 'database-env']) {
            throw new UsageError('cronlock run needs exactly one lock: --lock NAME, --file PATH, --redis DSN --key KEY or --database DSN --name NAME');
        }
        switch ($given[0]) {
            case 'lock':
                // a File object where cron_guard() would use this very file, so a busy
                // lock is found by an acquire() that logs nothing (Supervisor)
                $name = (string) $args->value('lock');
                $file = LockDirectory::current()->namedLockFile($name);
                return $file === null ? $name : new \CronLock\File($file[0], ['mode' => $file[1]]);
            case 'file':
                return new \CronLock\File((string) $args->value('file'));
            case 'redis':
            case 'redis-env':
                $dsn = Secrets::dsn($args, 'redis');
                $key = $args->value('key');
                if ($key === null) {
                    throw new UsageError('--redis needs --key KEY');
                }
                $ttl = $args->value('ttl') === null ? self::DEFAULT_REDIS_TTL : Duration::parse((string) $args->value('ttl'), '--ttl');
                return new \CronLock\Redis($dsn, $key, $ttl, ['auto_renew' => true]);
            default:
                $dsn = Secrets::dsn($args, 'database');
                $name = $args->value('name');
                if ($name === null) {
                    throw new UsageError('--database needs --name NAME');
                }
                return new \CronLock\Database($dsn, $name, Secrets::credentials($args));
        }
    }

    private static function wait($value): float
    {
        if ($value === null) {
            return 0.0;
        }
        if ($value === 'forever' || $value === '-1') {
            return -1.0;
        }
        return Duration::parse($value, '--wait');
    }

    private static function onBusy($value): int
    {
        if ($value === null) {
            return 0;
        }
        if (!preg_match('/\A[0-9]{1,3}\z/', $value) || (int) $value > 255) {
            throw new UsageError("--on-busy takes an exit status from 0 to 255, not '" . Text::oneLine($value) . "'");
        }
        return (int) $value;
    }
}

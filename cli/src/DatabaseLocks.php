<?php

namespace CronLock\Cli;

use CronLock\Cli\Database\MysqlLocks;
use CronLock\Cli\Database\PgsqlLocks;

/**
 * `cronlock status --database DSN [--user U] [--password-env VAR] [--name NAME…]`:
 * the locks CronLock\Database holds on a MySQL/MariaDB or PostgreSQL server,
 * who holds them (session, client, since) and how many sessions wait. The
 * server knows the names it was given: MySQL's lock name (a cronlock name,
 * or `cronlock:<sha1>` for a name MySQL would fold or cut), PostgreSQL's
 * 64-bit key; `--name` maps such names and keys back to cronlock names.
 * Read-only: SELECTs of the server's own views.
 */
final class DatabaseLocks
{
    /**
     * Waiters are read twice, this far apart, and each session counted
     * once: a cronlock waiter waits in statements of at most 100 ms, and a
     * read that falls between two of them does not see it (measured: 4 of
     * 100 reads on MariaDB, 8 of 100 on PostgreSQL, with two waiters). A gap
     * shorter than this cannot hide a waiter from both reads.
     */
    const SECOND_READ_AFTER_US = 40000;

    /**
     * @param array{user?: string, password?: string} $credentials
     * @param string[] $names cronlock lock names to label hashed names and keys with
     */
    public static function report(StatusReport $report, string $dsn, array $credentials, array $names)
    {
        $driver = strtolower((string) strstr($dsn, ':', true));
        if (!in_array($driver, ['mysql', 'pgsql'], true)) {
            throw new UsageError("--database takes a PDO DSN of MySQL/MariaDB (mysql:host=…) or PostgreSQL (pgsql:host=…), not '" . Text::oneLine(Text::withoutPassword($dsn)) . "'");
        }
        if (!class_exists('PDO') || !in_array($driver, \PDO::getAvailableDrivers(), true)) {
            throw new Missing("--database $driver: PHP's pdo_$driver is not loaded (apt-get install php-" . ($driver === 'mysql' ? 'mysql' : 'pgsql') . ')');
        }
        $title = ($driver === 'mysql' ? 'MySQL/MariaDB' : 'PostgreSQL') . ' at ' . Text::withoutPassword($dsn);
        if ($driver === 'mysql') {
            // ATTR_TIMEOUT bounds only mysqlnd's TCP connect, which the kernel
            // completes for a frozen server too: its greeting and every reply
            // are read under this (86400 s by default), so a check would hang
            ini_set('mysqlnd.net_read_timeout', '5');
        }
        try {
            $pdo = new \PDO($dsn, isset($credentials['user']) ? $credentials['user'] : null, isset($credentials['password']) ? $credentials['password'] : null,
                [\PDO::ATTR_ERRMODE => \PDO::ERRMODE_EXCEPTION, \PDO::ATTR_TIMEOUT => 5]);
            list($rows, $note) = $driver === 'mysql' ? MysqlLocks::read($pdo, $names) : PgsqlLocks::read($pdo, $names);
        } catch (\PDOException $e) {
            $message = self::withoutSecrets($e->getMessage(), $credentials);
            $report->add('database', $title, false, "not read: $message");
            $report->error("$title: $message");
            return;
        }
        foreach ($rows as $row) {
            $row->backend = $driver;
            $row->source = $title;
        }
        usort($rows, function (LockRow $a, LockRow $b) {
            return strcmp($a->name, $b->name);
        });
        $report->add('database', $title, $rows, $note);
    }

    /** The server's name of a cronlock lock name, as CronLock\Database maps it on MySQL. */
    public static function mysqlName(string $name): string
    {
        if (strlen($name) <= 64 && preg_match('/\A[\x20-\x7e]*\z/', $name) && strtolower($name) === $name && strncmp($name, 'cronlock:', 9) !== 0) {
            return $name;
        }
        return 'cronlock:' . sha1($name);
    }

    /** The advisory lock key of a cronlock lock name on PostgreSQL: the first 64 bits of its MD5, signed. */
    public static function pgsqlKey(string $name): int
    {
        return unpack('J', hex2bin(substr(md5($name), 0, 16)))[1];
    }

    /** @param array{password?: string} $credentials */
    private static function withoutSecrets(string $message, array $credentials): string
    {
        if (isset($credentials['password']) && $credentials['password'] !== '') {
            $message = str_replace($credentials['password'], '***', $message);
        }
        return Text::withoutPassword($message);
    }
}

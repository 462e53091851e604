<?php

namespace CronLock\Cli\Database;

use CronLock\Cli\DatabaseLocks;
use CronLock\Cli\LockRow;
use CronLock\Cli\Processes;

/**
 * Advisory locks on one 64-bit key (CronLock\Database's, objsubid 1) in
 * the DSN's database, from pg_locks joined to pg_stat_activity: granted
 * ones are holders, the others waiters (two reads, each backend counted
 * once: DatabaseLocks::SECOND_READ_AFTER_US). cronlock's own connections name
 * their process (`application_name` "cronlock pid N on HOST"), so the pid
 * and host are shown, and whether it lives when it is this host's.
 * PostgreSQL records no time of an advisory lock: since is the end of the
 * statement that took it when that is still the session's last one, else
 * the session's start (it took the lock then or later).
 */
final class PgsqlLocks
{
    const QUERY = <<<'SQL'
SELECT ((l.classid::bigint << 32) | l.objid::bigint) AS key, l.granted, l.pid, a.usename, a.application_name,
       host(a.client_addr) AS client_addr, a.client_port, extract(epoch FROM a.backend_start)::bigint AS backend_start,
       a.state, extract(epoch FROM a.state_change)::bigint AS state_change, a.query
  FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.objsubid = 1
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
SQL;

    /**
     * @param string[] $names
     * @return array{0: LockRow[], 1: string}
     */
    public static function read(\PDO $pdo, array $names): array
    {
        $labels = [];
        foreach ($names as $name) {
            $labels[DatabaseLocks::pgsqlKey($name)] = $name;
        }
        $first = $pdo->query(self::QUERY)->fetchAll(\PDO::FETCH_ASSOC);
        usleep(DatabaseLocks::SECOND_READ_AFTER_US);
        $second = $pdo->query(self::QUERY)->fetchAll(\PDO::FETCH_ASSOC);
        $waiters = []; // key => [backend pid => true], from either read
        $granted = []; // key => [backend pid => true], from either read
        foreach (array_merge($first, $second) as $lock) {
            if (self::granted($lock['granted'])) {
                $granted[(int) $lock['key']][(int) $lock['pid']] = true;
            } else {
                $waiters[(int) $lock['key']][(int) $lock['pid']] = true;
            }
        }
        $byKey = [];
        $hostname = Processes::hostname();
        foreach (array_merge($second, $first) as $lock) {
            $key = (int) $lock['key'];
            if (!isset($byKey[$key])) {
                $byKey[$key] = new LockRow();
                $byKey[$key]->name = isset($labels[$key]) ? $labels[$key] : "key $key";
                // one that waited in the first read may hold it in the second
                $byKey[$key]->waiters = isset($waiters[$key]) ? count(array_diff_key($waiters[$key], isset($granted[$key]) ? $granted[$key] : [])) : 0;
            }
            $row = $byKey[$key];
            if (!self::granted($lock['granted']) || $row->state === 'held') {
                continue; // the holder: from the second read when it has one
            }
            $row->state = 'held';
            $row->connection = "PostgreSQL backend {$lock['pid']}";
            if ($lock['usename'] !== null) {
                $address = $lock['client_addr'] === null ? 'local socket' : $lock['client_addr'] . ':' . $lock['client_port'];
                $row->client = $lock['usename'] . '@' . $address . ($lock['application_name'] !== '' ? " ({$lock['application_name']})" : '');
            }
            if (preg_match('/\Acronlock pid ([0-9]+) on (.+)\z/s', (string) $lock['application_name'], $m)) {
                $row->pid = (int) $m[1];
                $row->host = $m[2];
                $row->pidAlive = $row->host === $hostname ? Processes::alive($row->pid) : null;
            }
            if ($lock['state'] === 'idle' && preg_match('/pg_(try_)?advisory_lock\(/i', (string) $lock['query'])) {
                $row->since = (int) $lock['state_change'];
                $row->sinceSource = 'lock statement';
            } elseif ($lock['backend_start'] !== null) {
                $row->since = (int) $lock['backend_start'];
                $row->sinceSource = 'session start';
            }
        }
        return [array_values($byKey), 'from pg_locks and pg_stat_activity'];
    }

    /** @param mixed $value PDO gives true/false, or 't'/'f' on older PHP */
    private static function granted($value): bool
    {
        return $value === true || $value === 't' || $value === 1 || $value === '1';
    }
}

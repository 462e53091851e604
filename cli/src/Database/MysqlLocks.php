<?php

namespace CronLock\Cli\Database;

use CronLock\Cli\DatabaseLocks;
use CronLock\Cli\LockRow;

/**
 * User locks (GET_LOCK) of a MySQL or MariaDB server, from the first view
 * that answers:
 * 1. MariaDB's information_schema.METADATA_LOCK_INFO (plugin
 *    metadata_lock_info): holders, and since (LOCK_TIME_MS);
 * 2. performance_schema.metadata_locks ('USER LEVEL LOCK', GRANTED and
 *    PENDING), when performance_schema is on with the mdl instrument
 *    (MySQL 8's default);
 * 3. otherwise the process list: sessions waiting in GET_LOCK ('User lock')
 *    name their lock, and IS_USED_LOCK() finds the holder of each such name
 *    and of each --name.
 * Waiters are sessions in state 'User lock' (or PENDING), in either of two
 * reads of the process list (DatabaseLocks::SECOND_READ_AFTER_US), each
 * session counted once. The process list
 * names a waiter's lock by the statement's text: a quoted name (hand-written
 * SQL) or a hex literal X'…' / 0x… (CronLock\Database's, issue 19); a
 * statement prepared on the server with the name as a parameter
 * (`GET_LOCK(?, 10)`) does not say which lock it waits for. The process list
 * shows other users' sessions only with the PROCESS privilege. Without a
 * lock time, since is the end of the holder's last statement (processlist
 * TIME): it holds the lock since then or longer.
 */
final class MysqlLocks
{
    /**
     * @param string[] $names
     * @return array{0: LockRow[], 1: string} the locks, and where they were read
     */
    public static function read(\PDO $pdo, array $names): array
    {
        $labels = [];
        foreach ($names as $name) {
            $labels[DatabaseLocks::mysqlName($name)] = $name;
        }
        $sessions = [];
        $pending = []; // lock name => waiters performance_schema lists
        $waiters = []; // lock name => [session id => true]
        foreach ([0, DatabaseLocks::SECOND_READ_AFTER_US] as $pause) {
            usleep($pause);
            foreach ($pdo->query('SELECT ID, USER, HOST, COMMAND, TIME, STATE, INFO FROM information_schema.PROCESSLIST')->fetchAll(\PDO::FETCH_ASSOC) as $p) {
                $sessions[(int) $p['ID']] = $p;
                $lock = $p['STATE'] === 'User lock' ? self::waitedName((string) $p['INFO']) : null;
                if ($lock !== null) {
                    $waiters[$lock][(int) $p['ID']] = true;
                }
            }
        }
        $holders = self::fromLockInfo($pdo);
        $source = 'information_schema.METADATA_LOCK_INFO';
        if ($holders === null) {
            $holders = self::fromPerformanceSchema($pdo, $pending);
            $source = 'performance_schema.metadata_locks';
        }
        if ($holders === null) {
            $holders = [];
            $source = 'the process list and IS_USED_LOCK(): a lock nobody waits for is listed only when named with --name (no lock view here: performance_schema with the mdl instrument, or MariaDB\'s metadata_lock_info plugin, lists every lock)';
            $used = $pdo->prepare('SELECT IS_USED_LOCK(?)');
            foreach (array_unique(array_merge(array_keys($waiters), array_keys($labels))) as $lock) {
                $used->execute([(string) $lock]);
                $id = $used->fetchColumn();
                if ($id !== null && $id !== false) {
                    $holders[(string) $lock] = ['id' => (int) $id, 'ms' => null];
                }
            }
        }
        $waiting = [];
        foreach ($waiters as $lock => $ids) {
            if (isset($holders[$lock])) {
                unset($ids[$holders[$lock]['id']]); // it waited in the first read and holds it now
            }
            if ($ids !== []) {
                $waiting[$lock] = count($ids);
            }
        }
        foreach ($pending as $lock => $count) {
            $waiting[$lock] = max($count, isset($waiting[$lock]) ? $waiting[$lock] : 0);
        }
        $rows = [];
        $now = time();
        foreach (array_unique(array_merge(array_keys($holders), array_keys($waiting))) as $lock) {
            $lock = (string) $lock;
            $row = new LockRow();
            $row->name = isset($labels[$lock]) ? $labels[$lock] : $lock;
            $row->waiters = isset($waiting[$lock]) ? $waiting[$lock] : 0;
            if (isset($holders[$lock])) {
                $id = $holders[$lock]['id'];
                $row->state = 'held';
                $row->connection = "MySQL connection $id";
                if (isset($sessions[$id])) {
                    $row->client = $sessions[$id]['USER'] . '@' . $sessions[$id]['HOST'];
                }
                if ($holders[$lock]['ms'] !== null) {
                    $row->since = $now - intdiv($holders[$lock]['ms'], 1000);
                    $row->sinceSource = 'server';
                } elseif (isset($sessions[$id])) {
                    $row->since = $now - (int) $sessions[$id]['TIME'];
                    $row->sinceSource = 'last statement';
                }
            }
            $rows[] = $row;
        }
        return [$rows, "from $source"];
    }

    /**
     * The lock name a GET_LOCK() statement's text waits for: a quoted string
     * (hand-written SQL, or an emulated prepare), or a hex literal X'…' /
     * 0x… (what CronLock\Database sends); null when the text does not say
     * (a parameter: `GET_LOCK(?, ?)` of a statement prepared on the server).
     *
     * @return string|null
     */
    private static function waitedName(string $info)
    {
        if (!preg_match("/GET_LOCK\\(\\s*(?:'((?:[^'\\\\]|\\\\.|'')*)'|x'((?:[0-9a-f]{2})*)'|0x((?:[0-9a-f]{2})+)\\b)/i", $info, $m)) {
            return null;
        }
        if (isset($m[3])) {
            return (string) hex2bin($m[3]);
        }
        if (isset($m[2])) {
            return (string) hex2bin($m[2]);
        }
        return str_replace(["''", "\\'", '\\\\'], ["'", "'", '\\'], $m[1]);
    }

    /** @return array<string, array{id: int, ms: int|null}>|null null: no such view here */
    private static function fromLockInfo(\PDO $pdo)
    {
        try {
            $found = $pdo->query("SELECT THREAD_ID, TABLE_SCHEMA, LOCK_TIME_MS FROM information_schema.METADATA_LOCK_INFO WHERE LOCK_TYPE = 'User lock'")->fetchAll(\PDO::FETCH_ASSOC);
        } catch (\PDOException $e) {
            return null; // no plugin (unknown table), or no LOCK_TIME_MS (older MariaDB)
        }
        $holders = [];
        foreach ($found as $lock) {
            $holders[(string) $lock['TABLE_SCHEMA']] = ['id' => (int) $lock['THREAD_ID'], 'ms' => (int) $lock['LOCK_TIME_MS']];
        }
        return $holders;
    }

    /**
     * @param array<string, int> $pending set to the waiters (PENDING) per lock, which the process list may miss
     * @return array<string, array{id: int, ms: int|null}>|null null: performance_schema off, or the mdl instrument off
     */
    private static function fromPerformanceSchema(\PDO $pdo, array &$pending)
    {
        try {
            if ((int) $pdo->query('SELECT @@performance_schema')->fetchColumn() !== 1
                || $pdo->query("SELECT ENABLED FROM performance_schema.setup_instruments WHERE NAME = 'wait/lock/metadata/sql/mdl'")->fetchColumn() !== 'YES') {
                return null;
            }
            $found = $pdo->query("SELECT m.OBJECT_NAME, m.LOCK_STATUS, t.PROCESSLIST_ID FROM performance_schema.metadata_locks m
                JOIN performance_schema.threads t ON t.THREAD_ID = m.OWNER_THREAD_ID WHERE m.OBJECT_TYPE = 'USER LEVEL LOCK'")->fetchAll(\PDO::FETCH_ASSOC);
        } catch (\PDOException $e) {
            return null; // not readable for this login
        }
        $holders = [];
        foreach ($found as $lock) {
            $name = (string) $lock['OBJECT_NAME'];
            if ($lock['LOCK_STATUS'] === 'GRANTED') {
                $holders[$name] = ['id' => (int) $lock['PROCESSLIST_ID'], 'ms' => null];
            } elseif ($lock['LOCK_STATUS'] === 'PENDING') {
                $pending[$name] = (isset($pending[$name]) ? $pending[$name] : 0) + 1;
            }
        }
        return $holders;
    }
}

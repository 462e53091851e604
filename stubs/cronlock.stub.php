<?php

/**
 * cronlock — stops cron jobs (and any other PHP CLI job) from running twice at once.
 *
 * Stub for IDEs and static analysis. The extension itself is written in Rust;
 * load it with `extension=cronlock.so`. `php --ri cronlock` shows its version
 * and settings.
 *
 * ini settings:
 * - `cronlock.lock_dir` (string, default empty, changeable anywhere):
 *   directory of the lock files that cron_guard() makes for named locks and
 *   for the null lock. Empty means the default directory of this user: a
 *   directory of the user's own, so that no other user can open (and so
 *   hold) or pre-create them, and one fixed absolute place, the same for
 *   every process of the user on the host (cron's, a login shell's,
 *   php-fpm's, the extension's and cronlock/polyfill's) whatever TMPDIR,
 *   sys_temp_dir or the working directory say: `/run/cronlock` for root;
 *   else `/run/lock/cronlock-<euid>` when /run/lock is a directory this user
 *   may create entries in; else `/tmp/cronlock-<euid>`. It is created 0700
 *   if missing, and refused with LockException unless it is a real directory
 *   (not a symlink) owned by this user that neither group nor others can
 *   write; the message names the cause and what to do about it, or to set
 *   CRONLOCK_LOCK_DIR or cronlock.lock_dir to an absolute directory of your
 *   own. Lock files in it are created 0600.
 *   Set explicitly, it is used as it is (files 0644, for locks shared between
 *   users on purpose), but it must be an existing directory, and a
 *   world-writable one without the sticky bit is refused, and so are a
 *   relative path (it would count from each run's working directory: cron's
 *   and a run by hand's would lock two different files) and a path with a
 *   NUL byte: cron_guard() then throws LockException naming the setting or
 *   the directory, and `php --ri cronlock` says why.
 *   The environment variable CRONLOCK_LOCK_DIR, when set, counts ahead of it
 *   (empty: the default directory), as for cronlock/polyfill.
 * - `cronlock.log` (string, default `syslog`, changeable anywhere): where
 *   cron_guard() sends its skip lines (busy, interrupted, stuck) and records,
 *   when its 'log' option is not given: `syslog` (PHP's syslog(), no openlog():
 *   ident `syslog.ident`, default `php`; facility `syslog.facility`, default
 *   user; notice for a skip, warning for a stuck holder, info for a record),
 *   `error_log` (PHP's error_log()), `stderr`, an absolute file path (appended,
 *   one write per line, each line after its UTC time, a JSON record alone), or
 *   `none`. A lost hold and a failing release always go to error_log() too.
 * - `cronlock.record` (string, default `off`): `off`, `skips` (one record line
 *   per skipped run) or `runs` (one per run).
 * - `cronlock.record_format` (string, default `text`): `text` or `json`.
 *   CRONLOCK_LOG, CRONLOCK_RECORD and CRONLOCK_RECORD_FORMAT, when set and not
 *   empty, count ahead of these settings; an option of cron_guard() ahead of both.
 *   A value not listed is refused with \ValueError naming where it came from.
 *
 * Arguments follow PHP's rules for internal functions. Without strict_types,
 * a numeric string, an int or a bool is coerced (`acquire("1.5")`,
 * `new CronLock\File(42)`, `cron_guard($job, 42)` for the lock named "42"),
 * a leading-numeric or non-numeric string follows the version's warning or
 * TypeError, and null for a non-nullable parameter is deprecated (PHP 8.1+)
 * and taken as 0.0 or "". The parameters whose union type has string
 * (Redis's string|array $dsn, Database's PDO|string $connection,
 * cron_guard()'s $lock) take an int, float, bool or Stringable object as its
 * string, as PHP does for string|array. An `array $options` is an array or
 * a TypeError, null included, in both modes. With declare(strict_types=1)
 * only int-to-float widens; anything else is a TypeError, with PHP's message
 * ("cron_guard(): Argument #3 ($options) must be of type array, null
 * given"). Values inside an $options array are
 * not parameters: each must have its documented type in both modes (an int
 * is accepted where a float is documented).
 *
 * @generate-class-entries
 */

namespace CronLock {

    /**
     * A lock that cron_guard() and your code can take and give up.
     * Contention is not an error: acquire() returns false. Failures throw LockException.
     * Implement it in PHP to give cron_guard() a lock of your own.
     */
    interface Lock
    {
        /**
         * Take the lock. On a lock this object already holds it is a check, not a
         * counter: true while the hold is still real (it extends a TTL), false when it
         * was lost (the hold is then dropped); one release() frees it however many
         * acquire() calls succeeded.
         *
         * @param float $timeout 0: try once; > 0: wait up to that many seconds;
         *                       < 0 (or INF): wait until acquired.
         * @return bool true: we hold it now; false: someone else holds it (for the
         *              whole wait), or a pending pcntl signal handler (with
         *              pcntl_async_signals(true)) ended the wait: cronlock's waits let
         *              it run within about 100 ms, whatever restart_syscalls says.
         *              max_execution_time counts CPU time on Linux and does not end a
         *              sleeping wait: bound it with $timeout.
         * @throws LockException when the lock cannot be used at all, or (File, Redis)
         *         when $timeout != 0 and this process already holds the lock through
         *         another object: that wait could never end.
         * @throws \ValueError when $timeout is NaN.
         */
        public function acquire(float $timeout = 0.0): bool;

        /**
         * Keep holding the lock, after asking the backend whether it is still ours
         * (File: does the path still name the locked file; Redis: token-checked PEXPIRE).
         *
         * @param float|null $ttl Redis: the new TTL in seconds (default: the lock's TTL). File: ignored.
         * @return bool false when the lock is no longer ours (expired, taken over, released,
         *              File: unlinked or replaced); the hold is then dropped.
         * @throws LockException
         */
        public function renew(?float $ttl = null): bool;

        /**
         * Give the lock up. Idempotent; never throws for "not held".
         *
         * @return bool true: we held it and released it; false: we did not hold it
         *              (never acquired, already released, or lost).
         * @throws LockException when the backend fails while releasing.
         */
        public function release(): bool;

        /**
         * Local and cheap (no syscall, no round trip): what this object believes.
         * renew() asks the backend.
         *
         * @return bool whether this object currently believes it holds the lock (in this process).
         */
        public function isHeld(): bool;
    }

    /**
     * An flock(2) lock on a local file. Interoperates with util-linux `flock(1)`
     * and PHP's own `flock()` on the same file.
     *
     * - The file is created if missing (mode $options['mode'], default 0644, minus umask),
     *   opened close-on-exec (programs the job starts never inherit the lock),
     *   never through a symlink, never truncated, never unlinked; it must be a regular file.
     * - A relative path is resolved once, against PHP's working directory at construction.
     * - The file tells who holds it. Once held, `cronlock pid=<pid> host=<hostname>
     *   since=<UTC time>` is written at the start of the file (128 bytes, in place), but only if
     *   at that moment the file is empty or holds exactly one record (128 bytes: that line or
     *   `cronlock free since=<UTC time>`, `since=YYYY-MM-DDTHH:MM:SSZ`, a host without spaces,
     *   space padding, one final "\n"; anything else, however close, is your data): locking
     *   your script or a data file never writes to it, also after it was rewritten in place.
     *   release() (and destruction) rewrites it as `cronlock free since=<UTC time>` while the
     *   lock is still held, if the file still holds exactly the record this hold wrote (data
     *   the job wrote into it stays). Shared locks and read-only files record nothing. A holder
     *   killed with kill -9 leaves its record behind: holder() and holderPid() ask the kernel.
     * - A released object keeps its file open (unlocked) while it lives, so its next acquire()
     *   costs no open and no checks: fuser and lsof list the process. A destroyed object keeps
     *   nothing open; nor does cron_guard() with a name or a script lock once it returns.
     * - flock(2) locks the file, not the path. If the path is unlinked or replaced while held,
     *   another run can lock the new file there: that is not prevented. The holder finds out:
     *   renew(), Guard::renew() and acquire() then return false and drop the hold. A waiter
     *   whose file is replaced while it waits gets the old file's lock first (when its holder
     *   lets go), notices, and then locks the file the path names now.
     * - Two File objects on one file (same device and inode) in one thread: while one holds
     *   it, the other's acquire(0) is false at once and acquire($timeout != 0) throws
     *   LockException ("... through another CronLock\File object; waiting for it would
     *   deadlock"). Shared holders coexist; other threads and processes wait as usual.
     * - A lock file in a world-writable directory owned by another user than us and root is
     *   refused with LockException (its owner could hold it forever).
     * - release() and destruction act only in the process that acquired: a pcntl_fork() child
     *   neither frees the parent's lock nor keeps it alive after the parent dies.
     * - A wait blocks in flock(2), as `flock -w` does: /proc/locks, lslocks and
     *   `cronlock status` list the waiter, and it gets the lock the moment the holder lets
     *   go. Linux wakes it at least every 100 ms (a timer signal of its own, a realtime signal
     *   no one else handles, installed only while a wait runs), so the deadline holds and
     *   pending pcntl signal handlers run within about 100 ms whatever restart_syscalls says;
     *   such a wait returns false. Where that cannot be had (other Unixes, every realtime
     *   signal taken) waits poll at most 1 ms apart (a wait forever backs off to 20 ms after
     *   2 s), unseen by lslocks.
     * - __construct() again throws \Error and changes nothing; clone throws \Error;
     *   serialize()/unserialize() throw LockException.
     *
     * Example:
     * ```php
     * $lock = new CronLock\File('/run/lock/sync-orders.lock');
     * if (!$lock->acquire()) {
     *     exit(0); // the previous run is still busy
     * }
     * try {
     *     sync_orders();
     * } finally {
     *     $lock->release();
     * }
     * ```
     */
    final class File implements Lock
    {
        /**
         * Opens (and creates if missing) the lock file. Does not take the lock.
         *
         * @param string $path the lock file.
         * @param array{mode?: int, shared?: bool, allow_network_fs?: bool} $options
         *        'mode': permission bits for a new file (0 to 0o7777, default 0644);
         *        'shared': take LOCK_SH (many readers) instead of LOCK_EX (default false);
         *        'allow_network_fs': accept NFS, SMB/CIFS, 9p, Ceph, AFS, Lustre, GFS2, OCFS2
         *        where flock() is unreliable (default false: throws LockException).
         * @throws \ValueError for an empty path, a NUL byte, a bad mode or an unknown option.
         * @throws \TypeError for an option of the wrong type.
         * @throws LockException when the file cannot be opened or used, with the path and the OS
         *         reason; when it is in a world-writable directory and owned by another user
         *         than us and root.
         * @throws \Error when called again on a constructed object.
         */
        public function __construct(string $path, array $options = []) {}

        /**
         * On a held lock: true at once while the path still names the locked file, else false
         * (the hold is dropped, the stale file unlocked). Otherwise $timeout 0 tries once, > 0
         * waits up to that many seconds, < 0 waits until acquired (see the class: a wait blocks
         * in flock(2)).
         *
         * Once the lock is taken, the holder line is written at the start of the file (if it
         * is empty or holds only such a line). When that write fails (a full file system) the
         * lock is kept all the same, and an E_WARNING says so: "cronlock: lock file <path> is
         * held, but its holder line could not be written: <OS error>" (cron_guard() raises it
         * too). An error handler that turns it into an exception gets the hold given back.
         *
         * @throws LockException when another File object of this thread holds the file and
         *         $timeout != 0, or flock() fails.
         * @throws \ValueError
         */
        public function acquire(float $timeout = 0.0): bool {}

        /**
         * flock() has no expiry: true while held and the path still names the locked file
         * (lstat against fstat); false otherwise, and a lost hold is dropped.
         *
         * @throws LockException when the path cannot be examined.
         */
        public function renew(?float $ttl = null): bool {}

        /**
         * Unlocks, after rewriting this hold's record as `cronlock free since=<UTC time>` (see
         * the class). False when this object did not hold the lock.
         *
         * @throws LockException
         */
        public function release(): bool {}

        public function isHeld(): bool {}

        /**
         * The pid of a process holding the lock now, whoever it is (another process,
         * flock(1), PHP's flock()); null when the lock is free or the holder is unknown. Never
         * takes the lock, so it cannot make a concurrent acquire() fail. Linux: a pid that
         * /proc/locks lists for exactly this device and inode, that is alive and has this very
         * file open (so never a dead locker whose child kept the descriptor, nor the holder of
         * another file with the same inode number); the pid recorded in the file is preferred
         * among those. Elsewhere the recorded pid if that process lives.
         *
         * @throws LockException when the file cannot be read.
         */
        public function holderPid(): ?int {}

        /**
         * Who holds the lock now, as the kernel lists it: null when it lists no lock on this
         * file (the file the path names now: exactly its device and inode in /proc/locks);
         * otherwise "pid 41327 on web1 since 2026-11-30T14:50:00Z" (the file's record, when the
         * kernel lists the pid it records), "pid 41327" (a holder without a record: flock(1),
         * PHP's flock(), a shared holder) or "an unknown process" (held, but by no process that
         * can be named: the locker died and a child kept its descriptor, another user's
         * process, another pid namespace). A pid is named exactly when holderPid() returns it.
         * Never locks and never writes, so it cannot make a concurrent acquire() fail.
         *
         * @return string|null null when the lock is free.
         * @throws LockException when the kernel cannot be asked ("cannot tell who holds lock
         *         file <path>: the kernel's list of locks cannot be read (/proc/locks: <reason>)"):
         *         no /proc mounted, and always on other Unixes (macOS, the BSDs), whose kernels
         *         list no flock(2) holders; or when the file cannot be read.
         */
        public function holder(): ?string {}

        /** The lock file's path; a relative one made absolute against PHP's working directory at construction. */
        public function path(): string {}

        /** @throws LockException always: a lock belongs to the process that holds it. */
        public function __serialize(): array {}

        /** @throws LockException always. */
        public function __unserialize(array $data): void {}
    }

    /**
     * A Redis lock that works across machines: `SET key token NX PX ttl`, token-checked
     * Lua renew and release, a fencing token; by default a 30 s lease that the process
     * renews while it lives.
     *
     * Example (the same crontab line on two servers, one Redis):
     * ```php
     * $lock = new CronLock\Redis('redis://:secret@redis.internal:6379/0', 'cron:sync-orders');
     * cron_guard(function (CronLock\Guard $guard) { sync_orders(); }, $lock);
     * ```
     *
     * What a held key outlives, by setting:
     * - No $ttl (the default): a 30 s lease, renewed every 10 s while this process lives (one
     *   renewal thread for all the locks of a process, one connection per server). After
     *   kill -9, the OOM killer, a host crash or a lost network the next run can take the key
     *   at most 30 s later. A stopped process (SIGSTOP, Ctrl-Z) renews nothing: its key
     *   expires 30 s later and isHeld() turns false.
     * - A $ttl: the key lives $ttl after the last acquire() or renew(); after kill -9 or a
     *   host crash the next run waits until then. With 'auto_renew' it is renewed every
     *   $ttl/3 while the process lives, and a killed holder blocks the next run for at most $ttl.
     * - SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGALRM, SIGUSR1, SIGUSR2 or SIGXCPU (`kill`,
     *   `timeout`, a systemd stop, Ctrl-C, `ulimit -t`) while a key is held and the script has
     *   no handler of its own for that signal: the keys the process holds are released
     *   (token-checked; a once-per hold is left to expire at its window's end; at most 2 s, each
     *   connect and reply at most 0.5 s), then the process dies of the signal, exit status
     *   128+N (`timeout` says 124): no PHP code runs, shutdown functions do not run. A key
     *   whose server does not answer in that time expires by its TTL. With a handler of the
     *   script's own (pcntl_signal(), or SIG_IGN), installed before or during the hold,
     *   nothing changes: the handler runs and decides; the key stays held until released.
     *   A SIG_IGN inherited from the parent (nohup) counts as the script's; cronlock/polyfill
     *   usually cannot see one and then treats that signal as a default one: the key is
     *   released and the process dies of it, never running on unlocked (docs/polyfill.md).
     *   A pcntl_fork() child's signal never releases its parent's keys.
     */
    final class Redis implements Lock
    {
        /**
         * Validates the arguments; connects on first use.
         *
         * @param string|list<string> $dsn 'redis://[[user]:password@]host[:port][/db]', 'rediss://…'
         *        (TLS; trusts the system CAs and $SSL_CERT_FILE; append '#insecure' to skip
         *        certificate checks), 'unix:///path/to/redis.sock[?db=N][&user=U&pass=P]'. The
         *        database may also be given as '?db=N' on redis:// and rediss:// (the same lock as
         *        '/N'; '/N' and '?db=M' that differ are a \ValueError). Refused with \ValueError
         *        rather than ignored: any other query parameter or one given twice, ':' with no
         *        port after it, a '#fragment' other than rediss://'s '#insecure'. A list of two or
         *        more such DSNs of independent masters is Redlock (no server twice: the same address
         *        however spelt, localhost, 127.0.0.1, ::1 and ::ffff:127.0.0.1 being one, with any
         *        database, is a \ValueError; two DSNs that reach one server otherwise, such as its
         *        socket and its port, are found by the masters' INFO run_id and make the first
         *        acquire() throw LockException; a list of one DSN is a \ValueError: one master is a
         *        string): the lock is held when a
         *        majority granted it within its validity time, TTL − elapsed − drift (drift = 1 % of
         *        the TTL + 2 ms); every operation goes to all masters at once; contention on a
         *        majority is false, fewer masters answering in time than a majority
         *        ConnectionException (never false: a key nobody holds is not contention; but
         *        false when an answering master holds another holder's key and too few answer
         *        to decide, as the silent ones may be that holder's majority); a
         *        failed attempt deletes the grants it got; a minority down or stopped does not stop
         *        the lock: no master is awaited longer than read_timeout (+ connect_timeout) nor
         *        past a share of the validity time (acquire: half of it; renew(), and auto_renew:
         *        half of what is left of the hold; release(): what is left of it, at least 50
         *        ms), so the hold stays
         *        while a majority confirms it, and a hold that ran out is not revived by a late
         *        confirmation (renew() false).
         *        'redis-sentinel://[[user]:password@]host[:port][,host[:port]…]/master[/db]'
         *        ('rediss-sentinel://' for TLS; default port 26379; the master name is
         *        percent-decoded, '%20' for a space; the DSN's user and password are
         *        the master's; sentinels are asked without AUTH unless $options 'sentinel_password'
         *        is given, and a sentinel that wants one says so naming that option): the sentinels
         *        (the first that answers) name the master (SENTINEL get-master-addr-by-name) on
         *        connect, after a failed or refused call, and when the master answers READONLY
         *        (then the call is sent once more to the master they name now); while the master
         *        answers on its connection, calls go there without a sentinel round trip. Every
         *        new connection checks ROLE, so the lock follows a failover; an old master cut
         *        off from the sentinels but still taking writes is used until a call to it fails.
         *        A key that did not reach the new master makes renew() false (never silently kept).
         *        'redis-cluster://[[user]:password@]host[:port][,host[:port]…]' (seed nodes;
         *        'rediss-cluster://' for TLS; no '?query', no '#fragment' but rediss-cluster://'s
         *        '#insecure'; a Sentinel DSN takes neither '?' nor any fragment but that one
         *        either): commands go to the node that owns the key's slot,
         *        MOVED and ASK are followed (resharding while held is survived; nodes that send a
         *        command back and forth are followed again after 20-100 ms pauses until the call's
         *        budget runs out, then ConnectionException "… kept redirecting it …", which a
         *        wait rides out), an unreachable
         *        node sends us back to the seeds; the whole call, whatever it walks, takes at most
         *        read_timeout + connect_timeout + read_timeout (the release at the end of the
         *        request too). The lock key is exactly $key; its fence counter
         *        and release channel are '$key:fence' / '$key:released' when $key has a hash tag,
         *        else '{$key}:fence' / '{$key}:released' (same slot); a $key with '}' but no hash
         *        tag throws \ValueError. Waiters hear releases through cluster-wide PUBLISH on
         *        the node they talk to, and poll every 50 ms besides.
         *        #[\SensitiveParameter] (PHP 8.2+): stack traces show Object(SensitiveParameterValue),
         *        never the DSN or the list.
         * @param string $key the Redis key holding the token: UTF-8 (other bytes are a \ValueError), no NUL byte.
         * @param float|null $ttl seconds the key lives without renewal, > 0; null (the default):
         *        a 30 s lease, renewed every 10 s while the process lives (see above).
         * @param array{auto_renew?: bool, connect_timeout?: float, read_timeout?: float, replicas?: int, sentinel_password?: string, sentinel_user?: string} $options
         *        'auto_renew': with a $ttl, the renewal thread renews every ttl/3 while held
         *        (default false); without one it is the lease's renewal (default true; false is
         *        a \ValueError: give a $ttl to hold the key without renewal);
         *        'connect_timeout', 'read_timeout': seconds, > 0 and ≤ 86400 (default 1.0);
         *        connect_timeout bounds the whole connect (TCP/TLS, AUTH, SELECT);
         *        'replicas' (0 to 1000, default 0; one master or Sentinel, not Redlock): acquire()
         *        returns true only once that many replicas acknowledged the key and its fencing
         *        number (WAIT, within 4/5 of read_timeout); otherwise the key is given back and
         *        ConnectionException is thrown (a wait retries until its deadline). With N ≥ 1 a
         *        failover to an acknowledging replica keeps the key and the fencing number never
         *        goes backwards; WAIT is not consensus: a failover to a replica that did not
         *        acknowledge (more replicas than N, or Sentinel picking a lagging one) can still
         *        lose the key, which renew() then reports. 0: a failover right after acquire
         *        can lose the key (renew() false) and hand out a fencing number again.
         *        'sentinel_password' (Sentinel DSNs only; non-empty UTF-8): every sentinel is sent
         *        AUTH with it (the sentinels' requirepass, or the password of 'sentinel_user'), the
         *        renewal thread's connections too; 'sentinel_user' (needs 'sentinel_password'): an
         *        ACL user on the sentinels. Neither is ever part of a message.
         *        #[\SensitiveParameter] (PHP 8.2+): traces show the whole array as
         *        Object(SensitiveParameterValue).
         * @throws \ValueError for an empty key, a NUL byte, ttl <= 0, 'auto_renew' false without
         *         a $ttl, a malformed DSN (for a list:
         *         named as $dsn[i]), a list of fewer than 2 DSNs or one naming a server twice (see
         *         $dsn), an unknown option,
         *         'sentinel_password' without a Sentinel DSN or empty, 'sentinel_user' without
         *         'sentinel_password' or empty, a string option that is not UTF-8.
         * @throws \TypeError for an option of the wrong type, a $dsn list entry that is not a string.
         * @throws \Error when called again on a constructed object (which then changes nothing).
         *         Cloning throws \Error too; serializing or unserializing throws LockException.
         */
        public function __construct(#[\SensitiveParameter] string|array $dsn, string $key, ?float $ttl = null, #[\SensitiveParameter] array $options = []) {}

        /**
         * One round trip: SET NX PX and the fencing INCR in one script.
         *
         * On a lock this object holds, asks the server (one token-checked round trip)
         * and extends the key's TTL to the lock's TTL: true while the key is still ours,
         * false when it is not (deleted, evicted, lost in a restart, taken by another);
         * the hold is then dropped and not retaken in that call. No counting: one
         * release() frees the lock however many acquire() calls were made.
         *
         * Another CronLock\Redis of this process (thread) holding the same key on the
         * same servers: $timeout 0 returns false at once; any other $timeout throws
         * LockException (waiting for it would deadlock). The same servers: the same
         * address and database, Redlock masters in any order, a Sentinel master name
         * or a Cluster through any sentinels or seeds, found before any round trip when
         * the DSNs agree (address and database; the sorted Redlock masters; master
         * name, database and sorted sentinels; sorted seeds), else on the first attempt,
         * when the key's value is the token the other object holds.
         *
         * A command whose connection broke (closed by the server's `timeout` or the
         * network, reset, no reply within read_timeout) is sent once more on a new
         * connection. While waiting ($timeout != 0), an unreachable, restarting or
         * paused server is retried until the deadline; the last failure is thrown only
         * when the deadline passes (with $timeout < 0: retried until it is back).
         *
         * An acquire that got no answer may still have set the key (a stalled server
         * runs the script when it resumes): this object remembers its token, its next
         * acquire() takes such a key as its own, and release(), destruction and the end
         * of the request delete it if it still holds that token (Redlock: on every
         * master; best effort, so they never hang: one try, its reply awaited at most
         * 1 s; if that fails, the key expires by its TTL).
         *
         * @throws ConnectionException when Redis cannot be reached, refuses us (auth,
         *         ACL, out of memory, read-only replica) or times out: the message names
         *         the address, the key (cut to 200 characters) and the reason.
         * @throws LockException when the key holds a non-string value, waiting on
         *         another object of this process as above, or (Redlock) two masters turn out
         *         to be one server (the same INFO run_id; the grants are given back).
         */
        public function acquire(float $timeout = 0.0): bool {}

        /**
         * Token-checked PEXPIRE: asks the server. false when the key is no longer ours.
         * Without $ttl the key is extended to the lock's TTL (the 30 s lease without a $ttl).
         * Sent once more on a new connection when the connection broke.
         *
         * Redlock: sent to every master; true when a majority extended it (the hold then
         * counts as valid for $ttl − drift), false when so many say the key is not ours that no
         * majority is left.
         *
         * @throws ConnectionException (the lock stays held, as far as we know, until its TTL;
         *         Redlock: too few masters answered to decide)
         */
        public function renew(?float $ttl = null): bool {}

        /**
         * Token-checked DEL; false (key untouched) when it is no longer ours, or gone. Sent
         * once more on a new connection when the connection broke; a key found gone on
         * that second try is false too (a server restarted without persistence lost it, and
         * another run may have taken it since: cron_guard() reports the hold lost), even
         * though a first try whose reply was lost may have deleted it.
         * After an acquire() that got no answer (see there): true when the key held
         * its token and was deleted.
         *
         * Redlock: sent to every master; true when held, whatever a minority answered.
         *
         * @throws ConnectionException when Redis still fails (Redlock: fewer than a majority
         *         answered); the lock is then not held and the key expires by its TTL.
         */
        public function release(): bool {}

        /** What this object believes, local and cheap (no round trip): renew() or acquire() ask the server. */
        public function isHeld(): bool {}

        /**
         * The key's value while this object holds it: 128 random bits as 32 hex digits, then
         * ':<pid>@<host>' of the holder (what the busy line shows), e.g.
         * 'd4f7…330e:26956@web1'. Compare the whole string at a resource you fence. Null when
         * not held.
         */
        public function token(): ?string {}

        /**
         * Strictly increasing per key with each successful acquire (`INCR <key>:fence`); null
         * when not held. The counter expires 7 days (or 100 TTLs, if longer) after its last
         * acquire, so no key of cronlock stays forever; a counter made anew (after that
         * expiry, a DEL, or a restart of a Redis without persistence) starts at the server's
         * clock (`TIME`) in microseconds, above any number the key's earlier counter handed
         * out. That holds unless the server's clock steps back past those numbers, or the
         * key averaged more than one acquire per microsecond over the counter's life; a
         * failover to a replica that missed the last increments can still repeat them (see
         * 'replicas').
         *
         * Redlock (a list of DSNs): always null. Kleppmann's critique of Redlock is that a lock
         * with a TTL cannot protect a resource by itself (a paused holder wakes up after its
         * TTL and writes anyway), that only a fencing number checked by the resource can, and
         * that Redlock has no way to make one. antirez's answer is that the random token can be
         * checked by the resource instead (compare-and-set) and that Redlock's timing
         * assumptions are reasonable. cronlock agrees with the first half of each: no number
         * made from independent masters' counters is strictly increasing under the failures
         * Redlock is meant to survive (a master restarting without its counter, a grant that
         * reaches only part of a majority), and a number that usually increases would be
         * trusted where it must not be. So Redlock mode offers token() for compare-and-set at
         * the resource, and no fencing number; use a single Redis (or a Database lock) when the
         * resource needs one.
         */
        public function fencingToken(): ?int {}

        public function key(): string {}

        /**
         * Who holds the key now, asked of the server (`GET <key>`: one read-only round trip,
         * no write, no fencing number, no expiry change): the key's value (a cronlock token
         * '<32 hex>:<pid>@<host>', or whatever bytes another client stored, bytes that are not
         * UTF-8 shown as '\xNN'), or null when there is no key. Compare it with token() to
         * know whether it is this object's hold.
         *
         * Redlock: the value a majority of the masters holds; null when a majority has no key.
         *
         * @throws ConnectionException when Redis cannot be reached (Redlock: too few masters
         *         answered, or those that did agree on no value of a majority).
         * @throws LockException when the key holds a value that is not a string.
         */
        public function holder(): ?string {}

        /**
         * Claims the window $window for $seconds, exactly once across hosts: true for the one
         * caller that claimed it, false for every other (Laravel's onOneServer()). The window is
         * the caller's own id of its scheduler tick (e.g. '2026-12-01T14:05'), never aligned to
         * any clock here: callers that tick alike claim alike. One round trip: `SET
         * <key>:claim:<window> <token> NX PX` in a script (no fencing number; nothing is left
         * after $seconds); a command sent again after a broken connection that finds its own
         * token counts as claimed. Independent of acquire(): a held lock is neither needed nor
         * changed.
         *
         * Redlock: true when a majority of the masters granted it; otherwise the grants are
         * given back (token-checked).
         *
         * @throws \ValueError for an empty $window, a NUL byte, a $window over 200 bytes or
         *         not UTF-8, $seconds <= 0, NaN or over 10 years.
         * @throws ConnectionException when Redis cannot be reached (Redlock: too few masters
         *         answered to decide).
         * @throws LockException when the claim key holds a value that is not a string.
         */
        public function claim(string $window, float $seconds): bool {}

        /** @throws LockException always: a lock belongs to the process that holds it. */
        public function __serialize(): array {}

        /** @throws LockException always: a lock belongs to the process that holds it. */
        public function __unserialize(array $data): void {}
    }

    /**
     * A named lock on the MySQL, MariaDB or PostgreSQL server a shop already runs:
     * MySQL/MariaDB `GET_LOCK()`, PostgreSQL session-level advisory locks. The lock
     * belongs to one connection (session); the server frees it when that session
     * ends, so a killed or crashed holder never blocks the next run. Hosts exclude
     * each other when they connect to the same server (PostgreSQL: the same database).
     * Needs MySQL 5.7+, MariaDB 10.0.2+ or PostgreSQL 9.1+, and PHP's pdo_mysql / pdo_pgsql.
     *
     * Name mapping (reproducible by a DBA; names are compared byte for byte):
     * - MySQL/MariaDB: a name of 1 to 64 bytes of printable ASCII without upper-case
     *   letters that does not start with `cronlock:` is the GET_LOCK name as is
     *   (`SELECT GET_LOCK('nightly-report', 0)`); any other name becomes
     *   `CONCAT('cronlock:', SHA1(name))`.
     * - PostgreSQL: the bigint key `('x' || left(md5(name), 16))::bit(64)::bigint`
     *   (`SELECT pg_try_advisory_lock(('x' || left(md5('nightly-report'), 16))::bit(64)::bigint)`).
     *
     * Two CronLock\Database objects of one thread on the same server and name never
     * wait on each other: while one holds it, the other's acquire(0) is false and a
     * waiting acquire() throws LockException. Locks cannot be serialized (LockException).
     *
     * Fork: a DSN lock's own connection is detached in a pcntl_fork() child (the child
     * can neither release nor end the parent's session; its objects open connections of
     * their own) and is close-on-exec (so is the PDO given, from its first acquire(), over
     * TCP or the server's Unix socket: a program the job starts never keeps the session alive). With the PDO given, release() and destruction of
     * the lock in the child send nothing, but the child's copy of that PDO closes the
     * shared connection when the child ends normally: give a cron job a DSN.
     */
    final class Database implements Lock
    {
        /**
         * Nothing is sent to the server here: a DSN lock connects at its first acquire().
         *
         * @param \PDO|string $connection a PDO (drivers mysql, pgsql) on which the lock
         *        lives, or a PDO DSN ('mysql:host=db;dbname=app', 'pgsql:host=db;dbname=app')
         *        for a connection of the lock's own, opened at the first acquire(), kept for
         *        the object's lifetime, and opened anew by the next acquire() after it was lost.
         * @param string $name any non-empty UTF-8 string without NUL bytes (see the mapping above).
         * @param array{user?: string|null, password?: string|null, pdo_options?: array<int, mixed>, claims_table?: string|null} $options
         *        with a DSN only: 'user' and 'password' for the login (never put into a
         *        message); 'pdo_options': PDO driver options for the connection (TLS:
         *        PDO::MYSQL_ATTR_SSL_CA, ...; PDO::ATTR_TIMEOUT for the connect timeout;
         *        PDO::ATTR_EMULATE_PREPARES => true keeps every statement emulated, for a
         *        proxy without server-side statements; not PDO::ATTR_PERSISTENT, which would
         *        let the lock outlive its object). With either: 'claims_table', the table of
         *        claim() (default 'cronlock_claims'; letters, digits and _, or schema.table).
         * @throws \ValueError for an empty name, a NUL byte, a malformed DSN, an unknown
         *         option, a persistent 'pdo_options', a 'claims_table' that is no plain table
         *         name, or 'user'/'password'/'pdo_options' with a PDO.
         * @throws \TypeError for a $connection that is neither a PDO nor a string.
         * @throws LockException for a PDO driver other than mysql and pgsql.
         * @throws \Error when called on an object that is constructed already.
         */
        public function __construct(#[\SensitiveParameter] \PDO|string $connection, string $name, #[\SensitiveParameter] array $options = []) {}

        /**
         * Take the lock, waiting on the server's own blocking wait (GET_LOCK with a timeout;
         * pg_advisory_lock under lock_timeout) in slices of at most 100 ms, so a pending PHP
         * signal handler runs within about 100 ms and ends the wait (false). On a lock this
         * object holds it asks the server whether this session still holds it: false (and
         * not held any more) when the session was lost; it never takes a new hold in that call.
         *
         * A connection of the lock's own (a DSN) is closed when a statement on it is still
         * unanswered 10 s after the server-side wait it asked for (a frozen server, a network
         * black hole; on Linux; elsewhere MySQL's 12 s read timeout bounds it), so a wait
         * ends within $timeout plus about 10 s, and a pending signal handler ends it at once;
         * the next acquire() opens a new connection. Opening that connection comes first and
         * is bounded apart: by PDO::ATTR_TIMEOUT in 'pdo_options' (PostgreSQL's default 30 s)
         * and, for MySQL, a 12 s read timeout; a signal handler runs only after it. A PDO
         * given is never cut.
         *
         * @param float $timeout 0: try once; > 0: wait up to that many seconds; < 0: wait until acquired.
         * @return bool true: held now; false: held by another session (or the wait was cut short).
         * @throws ConnectionException when the server cannot be reached, refuses the login,
         *         or the connection is lost while trying, or the server did not answer in time
         *         ("the server did not answer within 10 s, so the connection was closed").
         * @throws LockException when another CronLock\Database object of this thread holds
         *         it and $timeout != 0, or the server refuses (deadlock, permissions).
         */
        public function acquire(float $timeout = 0.0): bool {}

        /**
         * Asks the server whether this session still holds the lock (MySQL
         * `IS_USED_LOCK(name) = CONNECTION_ID()`, PostgreSQL `pg_locks` of this backend).
         *
         * @param float|null $ttl ignored: the lock lives as long as the session.
         * @return bool false when it is not held (never acquired, released, or the session was
         *         killed, the server restarted, or a DSN lock closed its connection to a server
         *         that did not answer for 10 s: then isHeld() turns false too).
         * @throws LockException|ConnectionException for a failure that says nothing about the session.
         */
        public function renew(?float $ttl = null): bool {}

        /**
         * @return bool true: we held it and released it; false: not held (never acquired,
         *         released already, lost with its session, or in a fork child, which sends nothing).
         * @throws LockException|ConnectionException when the server refuses. A connection of
         *         the lock's own is then closed, which frees the lock: not held afterwards. On
         *         the PDO given the server keeps the lock (a transaction the job left aborted,
         *         an unbuffered result set still open), so isHeld() stays true and the
         *         LockException says what to do first ("roll back the transaction
         *         ($pdo->rollBack()), then call release() again"); the next release(), the
         *         destructor and the request's end try again, and closing the PDO frees it.
         */
        public function release(): bool {}

        /** What this object believes, without a round trip (renew() asks the server). */
        public function isHeld(): bool {}

        /** The $name given to the constructor. */
        public function name(): string {}

        /**
         * Who holds the lock now, as the server tells: "MySQL connection 17 from
         * cron@10.0.0.5:51234" (host and user only with the PROCESS privilege for other
         * users' sessions), "PostgreSQL backend pid 4242 (cronlock pid 99 on web1) from
         * 10.0.0.5" (cronlock's own connections set application_name when the DSN sets none).
         *
         * @return string|null null when the lock is free.
         * @throws LockException|ConnectionException when the server cannot be asked.
         */
        public function holder(): ?string {}

        /**
         * Claim $window for $seconds, exactly once across every host and process using this
         * lock's name on this server: the one call that gets true runs the window, every
         * other call gets false until the claim expires (Laravel's onOneServer()). $window
         * is the caller's own name for the tick (from its own clock, e.g. '2026-12-01 10:05'),
         * never re-aligned to the server; how long the claim lasts is measured by the
         * server's clock. Needs no acquire() and holds no session: a claim is a row of the
         * claims table ('claims_table'), which a DBA creates once (the LockException for a
         * missing table prints the exact CREATE TABLE; docs/database.md):
         * MySQL/MariaDB `CREATE TABLE cronlock_claims (name VARCHAR(255) CHARACTER SET utf8mb4
         * COLLATE utf8mb4_bin NOT NULL PRIMARY KEY, expires_at DATETIME(6) NOT NULL, holder
         * VARCHAR(255) NOT NULL, INDEX (expires_at))`; PostgreSQL `CREATE TABLE cronlock_claims
         * (name varchar(255) COLLATE "C" PRIMARY KEY, expires_at timestamptz NOT NULL, holder
         * varchar(255) NOT NULL); CREATE INDEX ON cronlock_claims (expires_at)`.
         *
         * One statement takes the window (MySQL `INSERT … ON DUPLICATE KEY UPDATE`, PostgreSQL
         * `INSERT … ON CONFLICT … DO UPDATE … WHERE expires_at <= now() RETURNING`): a new row,
         * or one whose claim expired. Its key is `LEFT(MD5(name), 16) || ':' || window`, so the
         * windows of two locks never collide; holder is `cronlock pid N on HOST #token`. Each
         * claim then deletes at most 100 expired rows, so nothing stays behind once claims go
         * on (a failed deletion is a warning; the claim stands).
         *
         * @param string $window non-empty UTF-8, no NUL byte, at most 200 bytes.
         * @param float $seconds how long the claim lasts: more than 0, at most a year.
         * @return bool true: this call claimed the window; false: another call's claim of it
         *         has not expired.
         * @throws \ValueError for a window or length outside those bounds.
         * @throws LockException inside a transaction of the PDO given (or with its MySQL
         *         autocommit off: the claim would be seen by other hosts only at COMMIT), when
         *         the claims table is missing, or when the server refuses.
         * @throws ConnectionException when the server cannot be reached (a DSN lock's own
         *         connection that died while idle is opened anew and asked once more).
         */
        public function claim(string $window, float $seconds): bool {}

        /** @throws LockException always: a lock belongs to the process that holds it. */
        public function __serialize(): array {}

        /** @throws LockException always: a lock belongs to the process that holds it. */
        public function __unserialize(array $data): void {}
    }

    /** Base of every exception cronlock throws on its own account. */
    class LockException extends \RuntimeException {}

    /** The lock's backend could not be reached or refused us (network, auth, timeout). */
    class ConnectionException extends LockException {}

    /** Handed to the job by cron_guard(). */
    final class Guard
    {
        /**
         * Guards are made by cron_guard() only.
         * @throws \Error always: "Cannot directly construct CronLock\Guard, call cron_guard() instead"
         */
        public function __construct() {}

        /** The lock the job runs under. */
        public function lock(): Lock {}

        /** Seconds left before 'max_runtime' (never negative); null when no max_runtime is set. */
        public function remaining(): ?float {}

        /**
         * true once 'max_runtime' has passed: the job should stop at its next safe point.
         * Also asks the lock whether it still believes it holds (no round trip): a hold found
         * gone is reported (see cron_guard(), 'on_lost').
         *
         * @throws LockException when the hold was lost and 'on_lost' is 'throw'.
         */
        public function expired(): bool {}

        /**
         * When and why the hold was lost, as the lost line says it (`at 14:52:07Z: its lock
         * file was removed`); null while it is held as far as is known (the lock's isHeld(),
         * the last renew()).
         */
        public function lost(): ?string {}

        /**
         * Renew the lock: its renew(), which asks the backend (File: does the path still
         * name the locked file). false is reported as a lost hold (see cron_guard()).
         *
         * @return bool false when it has been lost: the job should stop.
         * @throws LockException from renew(); when the hold was lost and 'on_lost' is 'throw'.
         */
        public function renew(): bool {}

        /** @throws LockException always: a guard belongs to the run that holds its lock. */
        public function __serialize(): array {}

        /** @throws LockException always. */
        public function __unserialize(array $data): void {}
    }
}

namespace {

    /**
     * Run $job under a lock; skip it quietly when another run holds the lock.
     *
     * The lock is released on every way out: return, exception (which propagates
     * unchanged), exit(), and fatal errors (E_USER_ERROR, max_execution_time, memory_limit,
     * for userland locks too), before shutdown functions run. Guards inside Fibers may be
     * suspended and resumed in any order; after a fatal error every lock cron_guard() holds
     * in the process is released before shutdown functions run, also those of suspended
     * Fibers. Not covered: a fatal error outside every cron_guard() while a Fiber is
     * suspended inside one (File and Redis locks are then released at request end, after
     * shutdown functions; userland locks not at all).
     *
     * - A hold it did not take is not released: if $lock->isHeld() is already true because
     *   the caller took the lock, acquire() confirms it, the job runs, nothing is released;
     *   a failed confirmation is busy.
     * - Guards running on one lock object at the same time (a nested cron_guard() on it, or
     *   cron_guard() in several Fibers) share the hold one of them took: each confirms it
     *   with acquire() (a failed confirmation is busy), and it is released when the last of
     *   them ends, in whatever order they end, so it stays held while any of their jobs runs.
     * - A pcntl_fork() child made inside the job never calls release(), however it ends
     *   (exit(), returning from the job, an uncaught exception): the hold is its parent's.
     * - A lock this process holds through another object (two File objects on one file,
     *   nested cron_guard('name')) is busy at once; with 'wait' != 0 that throws LockException.
     * - When busy, one line goes to the 'log' destination (syslog by default, see
     *   cronlock.log), naming the lock (a named lock: its name and path), the holder as
     *   the backend tells it (File: pid and host, since when and for how long, from its
     *   record and the kernel; Redis: the key's value; Database: the server's session),
     *   and how long this run waited:
     *   "cron_guard: lock sync-orders (/run/cronlock/sync-orders.lock) is held by pid 41327
     *   on web1 since 14:50:00Z (3 h 12 min); waited 2.0 s; skipping this run"
     *   ("held by another process (pid unknown)" when unknown). A holder held longer than
     *   'stale_after' adds ", longer than stale_after (10 min): it looks stuck" and is
     *   logged at warning level. Names are cut to 200
     *   characters; control characters in logged names, holders and messages are escaped
     *   (\n, \u{1b}), so each log line is one line. A Redis key holding any bytes is busy,
     *   whatever its value: bytes of the holder that are not UTF-8 are shown as \xNN.
     * - A wait ended by a pending pcntl signal handler logs "cron_guard: waiting for lock
     *   <what> was interrupted by a signal; waited 1.2 s; skipping this run", returns null and ignores
     *   on_busy (File and Redis; for a userland lock it cannot be told from contention).
     * - An exception from acquire() (Redis down) propagates as it is, with or without
     *   on_busy; it is never taken for busy.
     * - A release() that throws is logged ("cron_guard: releasing lock <what> failed:
     *   <message>") as a lost hold is: to error_log() once, to syslog or the log file when
     *   that is the destination, and to the logger (event release_failed); it is thrown when
     *   the job returned normally; when the job threw, the job's exception propagates. A
     *   release() that calls exit() (or runs out of memory, or suspends a Fiber that is then
     *   destroyed) ends the script (or Fiber) as it would anywhere; after a fatal error the
     *   exit status is exit()'s, the other locks are still released, and a failing release
     *   goes to error_log() alone.
     * - A lost hold is always reported: found at Guard::renew() (false), Guard::expired()
     *   or Guard::lost() (the lock no longer believes it holds: a Redis renewal that found
     *   the key gone), and at the job's end (release()'s own answer; File: one stat(2) of
     *   the path first), it logs "cron_guard: lock <what> was lost (at 14:52:07Z: <why>)
     *   while its job runs; another run may start" when noticed during the job and
     *   "cron_guard: lock <what> was lost during the run (at 14:52:07Z: <why>); another run
     *   may have started" at its end, to error_log() (stderr in the CLI: cron mails it),
     *   to syslog or the log file when that is the destination, and to the logger.
     * - The per-run record ('record', cronlock.record), one line per run to the 'log'
     *   destination: text `cron_guard: record lock=sync-orders outcome=ran waited_ms=3
     *   held_ms=1520 holder=41327@web1` (logfmt: values with spaces quoted; an unknown
     *   holder is `-`), or JSON `{"time":"2026-12-01T14:50:00Z","lock":"sync-orders",
     *   "outcome":"ran","waited_ms":3,"held_ms":1520,"holder":"41327@web1"}` (always these
     *   keys; holder null when unknown). outcome: `ran`, `skipped: busy`, `skipped:
     *   interrupted`, `failed: <exception class>` (the job threw; also when its release then
     *   failed), `release_failed: <exception class>` (the job returned or called exit(), and
     *   release() threw that), `lost`. holder: this run when it ran, the holder when
     *   skipped. held_ms: until released, or until the loss of a `lost` hold was found.
     *   exit() in the job is `ran`; after a fatal error in the job there is no
     *   record (PHP's own fatal error line tells it).
     *
     * Example (crontab: `* * * * * php /srv/app/sync_orders.php`):
     * ```php
     * cron_guard(function (CronLock\Guard $guard) {
     *     foreach (pending_orders() as $order) {
     *         if ($guard->expired()) break;
     *         sync($order);
     *     }
     * }, 'sync-orders', ['max_runtime' => 50]);
     * ```
     *
     * @param callable(\CronLock\Guard): mixed $job
     * @param \CronLock\Lock|string|null $lock any Lock; or a name ([A-Za-z0-9._-], 1 to 200
     *        characters, not '.' or '..') for the File lock `<dir>/<name>.lock` (dir: see cronlock.lock_dir,
     *        by default private to this user); or null: a File lock
     *        named after the main script's real path (`<basename>.<hash>.lock`), so two scripts
     *        never collide and the same script run twice does (a release directory switched
     *        by a deploy's symlink is another real path: name such jobs).
     * @param array{wait?: float, max_runtime?: float, on_busy?: int|null, once_per?: float, stale_after?: float, on_stale?: int|null, on_lost?: string, log?: string, record?: string, record_format?: string, logger?: callable|object|null} $options
     *        'wait': seconds to wait for the lock (default 0: try once; < 0: forever); a
     *        pending pcntl signal handler ends it within about 100 ms; max_execution_time
     *        does not (it counts CPU time on Linux);
     *        'max_runtime': soft deadline in seconds, seen through Guard;
     *        'on_busy': null (default) returns null; an int 0–255 exits the process with that
     *        status, as flock(1) -E does;
     *        'stale_after': seconds; a holder held longer looks stuck (warning level); default
     *        twice 'max_runtime' when that is set, else none (only holders that tell since
     *        when, File's, can look stuck);
     *        'on_stale': an int 0–255: a run that finds the holder stuck exits with it (ahead
     *        of on_busy);
     *        'on_lost': 'log' (default) or 'throw': a lost hold then throws LockException at
     *        the next Guard::renew() or Guard::expired();
     *        'log', 'record', 'record_format': as cronlock.log, cronlock.record and
     *        cronlock.record_format, for this call;
     *        'logger': a callable ($level, $message, $context) or a PSR-3 logger (any object
     *        with log($level, $message, array $context)): receives every line with its
     *        PSR-3 level (notice, warning, error, info) and the context ['event' => busy |
     *        stuck | interrupted | lost | release_failed | record, 'time', 'lock', 'outcome',
     *        'waited_ms', 'held_ms', 'holder'], whatever the destination ('log' => 'none' for
     *        the logger alone); what it throws is logged to error_log(), never propagated;
     *        'once_per': seconds (0.001 to 10 years), CronLock\Redis only (any other lock:
     *        \ValueError): at most one run per window of that length aligned to the Unix epoch
     *        on the Redis server's clock (TIME), across all hosts whatever their clock skew.
     *        The key lives at least until the end of the window in which it was taken; after
     *        the job (return, exception, exit(), fatal error) it is not deleted but left
     *        (token-checked PEXPIREAT) to expire at that window's end, so a short or failed job
     *        still uses up its window; a job that outlasts its window releases as usual. On a
     *        lock this object already holds (your acquire(), an outer guard, another Fiber's) the
     *        guard keeps the key to its window's end too, and whoever ends that hold later leaves
     *        it to expire then. A host
     *        whose clock is ahead of the server's fires a tick at :00 in the previous window:
     *        delay the job a few seconds after the tick (crontab `sleep 5;`) so that every
     *        host within that skew of the server lands in the same window.
     * @return mixed the job's result; null when skipped.
     * @throws \ValueError for a bad name or option value; null lock without a main script (php -r);
     *         'once_per' with a lock that has no TTL.
     * @throws \TypeError for a $lock or option of the wrong type.
     * @throws \CronLock\LockException when the lock cannot be used; when 'wait' != 0 and this
     *         process holds the lock through another object; a failing release() after a
     *         job that returned; whatever acquire() throws (ConnectionException, yours).
     */
    function cron_guard(callable $job, \CronLock\Lock|string|null $lock = null, array $options = []): mixed {}
}

<?php

namespace CronLock\Polyfill;

use CronLock\File;
use CronLock\Guard;
use CronLock\Lock;
use CronLock\LockException;
use CronLock\Redis;

/**
 * cron_guard(): decisions D2 (never release a hold it did not take), D3
 * (another object of this process), D7 (a signal is not "busy"), D8 (a
 * failing release), D10 (per-user lock directory).
 *
 * @internal
 */
final class CronGuard
{
    /**
     * Per lock object (spl_object_hash): [the Lock a running cron_guard() took, how many
     * guards on it still run, the hold's id, the pid that took it]. Guards on one object at
     * the same time (nested, or in several Fibers) share its hold; the last one to end
     * releases it. What is left is released at shutdown. A pcntl_fork() child inherits the
     * guards running in its parent: their end there (the child's exit(), return or fatal
     * error) never releases, as a lock class of the user's own would free it for both.
     *
     * The Run of the guard that took it ends it at shutdown after exit() (a fatal error: no record).
     *
     * @var array<string, array{0: Lock, 1: int, 2: int, 3: int, 4: Run}>
     */
    private static $active = [];
    /** @var int */
    private static $nextId = 1;

    /** @return mixed */
    public static function run(callable $job, $lock, array $options)
    {
        Args::options($options, ['wait', 'max_runtime', 'on_busy', 'once_per', 'stale_after', 'on_stale', 'on_lost', 'log', 'record', 'record_format', 'logger']);
        $wait = Args::seconds($options, 'wait');
        $wait = $wait === null ? 0.0 : $wait;
        $maxRuntime = self::positiveSeconds($options, 'max_runtime');
        $onBusy = self::exitStatus($options, 'on_busy');
        $onStale = self::exitStatus($options, 'on_stale');
        // D17: a holder past twice the job's own budget has ignored its deadline.
        $staleAfter = self::positiveSeconds($options, 'stale_after');
        if ($staleAfter === null && $maxRuntime !== null) {
            $staleAfter = 2.0 * $maxRuntime;
        }
        $onLost = Args::string($options, 'on_lost');
        if ($onLost !== null && $onLost !== 'log' && $onLost !== 'throw') {
            throw Args::value("\$options['on_lost']", "must be 'log' or 'throw', '" . Args::cut($onLost) . "' given");
        }
        $report = new Report($options);
        $oncePer = Args::seconds($options, 'once_per');
        if ($oncePer !== null && !($oncePer >= 0.001 && $oncePer <= Redis::MAX_TTL)) {
            throw Args::value("\$options['once_per']", 'must be a number of seconds from 0.001 to 315360000 (10 years)');
        }
        $named = !$lock instanceof Lock && $lock !== null;
        $lock = self::resolve($lock);
        // a named lock's name, as resolve() made its file <dir>/<name>.lock
        $name = $named && $lock instanceof File ? substr((string) strrchr('/' . $lock->path(), '/'), 1, -5) : null;
        if ($oncePer !== null && !$lock instanceof Redis) {
            $class = get_class($lock);
            $class = substr($class, 0, (int) strcspn($class, "\0")); // an anonymous class's name as PHP shows it
            throw Args::value("\$options['once_per']", "needs a lock with a TTL that can be left to expire at the window's end (CronLock\\Redis); $class has none");
        }
        $what = $name === null ? self::what($lock) : $name . ' (' . self::what($lock) . ')';
        $recordName = $name === null ? self::what($lock) : $name;

        $alreadyHeld = $lock->isHeld();
        $asked = Process::now();
        if ($oncePer === null) {
            $acquired = $lock->acquire($wait); // a backend failure propagates as it is (D7)
        } else {
            // Only this acquire takes a window; the hold keeps its window's
            // end, and releasing it leaves the key to expire then.
            $setOncePer = \Closure::bind(function ($ms) {
                $this->oncePerMs = $ms;
            }, $lock, Redis::class);
            $setOncePer(max(1, (int) ceil($oncePer * 1000)));
            try {
                $acquired = $lock->acquire($wait);
            } finally {
                $setOncePer(null);
            }
        }
        $waited = Process::now() - $asked;
        if (!$acquired) {
            $why = ($lock instanceof File || $lock instanceof Redis) ? Registry::takeRefusal(spl_object_hash($lock)) : null;
            $stuck = self::skip($lock, $why, $what, $recordName, $waited, $staleAfter, $report);
            if ($why === 'signal') {
                return null;
            }
            if ($stuck && $onStale !== null) {
                exit($onStale);
            }
            if ($onBusy !== null) {
                exit($onBusy);
            }
            return null;
        }

        $run = new Run($lock, $what, $recordName, $report, $onLost === 'throw', $waited);
        $guard = (new \ReflectionClass(Guard::class))->newInstanceWithoutConstructor();
        $started = Process::now();
        \Closure::bind(function () use ($lock, $maxRuntime, $started, $run) {
            $this->lock = $lock;
            $this->maxRuntime = $maxRuntime === null ? null : (float) $maxRuntime;
            $this->started = $started;
            $this->run = $run;
        }, $guard, Guard::class)();

        $key = spl_object_hash($lock);
        $hold = null;
        if (isset(self::$active[$key])) {
            self::$active[$key][1]++;
            $hold = [$key, self::$active[$key][2]];
        } elseif (!$alreadyHeld) {
            self::$active[$key] = [$lock, 1, self::$nextId, Process::pid(), $run];
            $hold = [$key, self::$nextId++];
        }
        // finally, not after the call: a Fiber destroyed while suspended in
        // the job unwinds through here without returning or throwing, and
        // its guard ends then, as the extension's does. exit() and fatal
        // errors skip finally: releaseAll() at shutdown covers them.
        $returned = false;
        $failed = null;
        try {
            $result = $job($guard);
            $returned = true;
        } catch (\Throwable $e) {
            $failed = $e;
            throw $e;
        } finally {
            try {
                list($released, $releaseFailure) = self::finish($hold, $lock, $run);
            } catch (\Throwable $e) {
                $run->finish(null, $failed !== null ? $failed : $e, null);
                throw $e;
            }
            $run->finish($released, $failed, $releaseFailure);
            if ($releaseFailure !== null && $returned) {
                throw $releaseFailure[0]; // D8: the job returned, so nothing else is thrown
            }
        }
        return $result;
    }

    /** @param array<string, mixed> $options */
    private static function positiveSeconds(array $options, string $key): ?float
    {
        $seconds = Args::seconds($options, $key);
        if ($seconds !== null && $seconds <= 0) {
            throw Args::value("\$options['$key']", 'must be greater than 0');
        }
        return $seconds;
    }

    /** @param array<string, mixed> $options */
    private static function exitStatus(array $options, string $key): ?int
    {
        if (isset($options[$key]) && !is_int($options[$key])) {
            throw Args::type("\$options['$key']", 'must be of type ?int, ' . Args::typeName($options[$key]) . ' given');
        }
        $status = isset($options[$key]) ? $options[$key] : null;
        if ($status !== null && ($status < 0 || $status > 255)) {
            throw Args::value("\$options['$key']", 'must be an exit status between 0 and 255');
        }
        return $status;
    }

    /** Logs a skipped run and its record; true when the holder looks stuck. */
    private static function skip(Lock $lock, $why, string $what, string $recordName, float $waited, ?float $staleAfter, Report $report): bool
    {
        $fields = ['lock' => $recordName, 'outcome' => 'skipped: busy', 'waited_ms' => (int) floor($waited * 1000), 'held_ms' => 0, 'holder' => null];
        $waitedWords = Report::tenths($waited);
        if ($why === 'signal') {
            $fields['outcome'] = 'skipped: interrupted';
            $report->note('notice', 'interrupted', "cron_guard: waiting for lock $what was interrupted by a signal; waited $waitedWords; skipping this run", $fields);
            $report->record($fields);
            return false;
        }
        if ($why === 'self') {
            $fields['holder'] = Process::pid() . '@' . Process::hostname();
            $report->note('notice', 'busy', sprintf('cron_guard: lock %s is held by this process (pid %d) through another lock object; skipping this run', $what, Process::pid()), $fields);
            $report->record($fields);
            return false;
        }
        list($who, $pidAtHost, $since) = self::holder($lock);
        $fields['holder'] = $pidAtHost;
        $stuck = false;
        if ($since !== null) {
            $age = max(0, time() - $since);
            $who .= ' since ' . Report::clock($since) . ' (' . Report::duration($age) . ')';
            if ($staleAfter !== null && $age > $staleAfter) {
                $stuck = true;
                $who .= ', longer than stale_after (' . Report::limit($staleAfter) . '): it looks stuck';
            }
        }
        $line = "cron_guard: lock $what is held by $who; waited $waitedWords; skipping this run";
        $report->note($stuck ? 'warning' : 'notice', $stuck ? 'stuck' : 'busy', $line, $fields);
        $report->record($fields);
        return $stuck;
    }

    /** Shutdown: release what running cron_guard() calls took (exit(), fatal errors). */
    public static function releaseAll()
    {
        foreach (array_reverse(self::$active, true) as $key => $shared) {
            unset(self::$active[$key]);
            $lock = $shared[0];
            if ($shared[3] !== Process::pid()) {
                continue; // the parent's hold, inherited by this fork child
            }
            $error = error_get_last();
            $fatal = $error !== null && in_array($error['type'], [E_ERROR, E_CORE_ERROR, E_COMPILE_ERROR, E_USER_ERROR, E_RECOVERABLE_ERROR, E_PARSE], true);
            if (!$fatal && $lock instanceof File && !$lock->renew()) {
                $shared[4]->lose('', false);
            }
            list($released, $releaseFailure) = self::release($lock);
            if (!$fatal) {
                $shared[4]->finish($released, null, $releaseFailure); // after exit(): the job ran
            } elseif ($releaseFailure !== null) {
                self::log($releaseFailure[1]); // a fatal error: no run's report, the error log
            }
        }
    }

    /**
     * One guard of a hold ended: the last one releases it. D8: a failing release is handed
     * back for the run's report to log; run() throws it only when the job returned normally.
     *
     * At the job's end, whether the hold survived: File's path is checked first (unlocking never
     * looks at it), else release()'s own answer says.
     *
     * @param array{0: string, 1: int}|null $hold key and id; null: not ours (D2)
     * @return array{0: ?bool, 1: ?array{0: \Throwable, 1: string}} as release(); [null, null] when not released here
     */
    private static function finish($hold, Lock $lock, Run $run): array
    {
        if ($hold === null) {
            return [null, null]; // D2: not ours to release
        }
        list($key, $id) = $hold;
        if (!isset(self::$active[$key]) || self::$active[$key][2] !== $id) {
            return [null, null]; // released at shutdown already
        }
        if (--self::$active[$key][1] > 0) {
            return [null, null]; // another guard's job on it still runs
        }
        $takenBy = self::$active[$key][3];
        unset(self::$active[$key]);
        if ($takenBy !== Process::pid()) {
            return [null, null]; // the parent's hold, inherited by this fork child
        }
        if ($lock instanceof File && !$lock->renew()) {
            $run->lose('', false);
        }
        return self::release($lock);
    }

    /**
     * $lock->release(): its answer (false: the hold was gone), or null and what it threw with
     * its "releasing lock ... failed" line.
     *
     * @return array{0: ?bool, 1: ?array{0: \Throwable, 1: string}}
     */
    private static function release(Lock $lock): array
    {
        try {
            return [(bool) $lock->release(), null];
        } catch (\Throwable $e) {
            return [null, [$e, 'cron_guard: releasing lock ' . self::what($lock) . ' failed: ' . $e->getMessage()]];
        }
    }

    private static function resolve($lock): Lock
    {
        if ($lock instanceof Lock) {
            return $lock;
        }
        if ($lock !== null && !is_string($lock)) {
            // cron_guard($job, 42) is the lock named "42", as in weak mode
            $lock = Args::weakString($lock, 'cron_guard', 2, 'lock', 'CronLock\Lock|string|null');
        }
        if (is_string($lock)) {
            $valid = $lock !== '' && strlen($lock) <= 200 && $lock !== '.' && $lock !== '..'
                && preg_match('/\A[A-Za-z0-9._-]+\z/', $lock);
            if (!$valid) {
                throw Args::value('$lock', sprintf(
                    "must be a lock name of 1 to 200 characters [A-Za-z0-9._-] other than '.' and '..', '%s' given",
                    Args::cut(Args::escapeDefault(substr($lock, 0, 1000))) // 200 characters at most are shown
                ));
            }
            return self::fileLock($lock);
        }
        return self::fileLock(self::scriptLockName());
    }

    private static function fileLock(string $name): File
    {
        list($dir, $mode) = LockDir::resolve();
        return new File("$dir/$name.lock", ['mode' => $mode]);
    }

    /** `<basename>.<FNV-1a 64 of its real path, hex>`, as the extension names it. */
    private static function scriptLockName(): string
    {
        // The first file PHP ran that is not an auto_prepend_file nor this package.
        $prepend = (string) ini_get('auto_prepend_file');
        $prepend = $prepend === '' ? '' : (string) realpath($prepend);
        $package = dirname(__DIR__, 2) . '/';
        $main = null;
        foreach (get_included_files() as $file) {
            if ($file !== $prepend && strncmp($file, $package, strlen($package)) !== 0) {
                $main = $file;
                break;
            }
        }
        if ($main === null || !is_file($main)) {
            throw Args::value('$lock', 'is null but there is no main script file to name the lock after (php -r or stdin?); pass a lock name');
        }
        $real = realpath($main);
        $real = $real === false ? $main : $real;
        // not basename(), which PHP 7 bends to the locale (a leading non-UTF-8 byte is dropped)
        $slash = strrpos($real, '/');
        $name = $slash === false ? $real : substr($real, $slash + 1);
        $base = substr((string) preg_replace('/[^A-Za-z0-9._-]/', '_', $name), 0, 100);
        return $base . '.' . self::fnv1a64($real);
    }

    /** FNV-1a 64 with 16-bit limbs: PHP integers overflow into floats. */
    public static function fnv1a64(string $bytes): string
    {
        $h = [0x2325, 0x8422, 0x9ce4, 0xcbf2]; // 0xcbf29ce484222325, least significant first
        $len = strlen($bytes);
        for ($i = 0; $i < $len; $i++) {
            $h[0] ^= ord($bytes[$i]);
            // times 0x100000001b3 = 0x1b3 + (0x100 << 32), modulo 2^64
            $r0 = $h[0] * 0x1b3;
            $r1 = $h[1] * 0x1b3 + ($r0 >> 16);
            $r2 = $h[2] * 0x1b3 + $h[0] * 0x100 + ($r1 >> 16);
            $r3 = $h[3] * 0x1b3 + $h[1] * 0x100 + ($r2 >> 16);
            $h = [$r0 & 0xffff, $r1 & 0xffff, $r2 & 0xffff, $r3 & 0xffff];
        }
        return sprintf('%04x%04x%04x%04x', $h[3], $h[2], $h[1], $h[0]);
    }

    /**
     * One error_log() line: control characters (and U+2028/2029) escaped as the extension
     * escapes them, so no name, holder or message can start a line of its own.
     */
    private static function log(string $line)
    {
        error_log(Args::escapeControls($line, true));
    }

    private static function what(Lock $lock): string
    {
        if ($lock instanceof File) {
            return Args::cut($lock->path());
        }
        if ($lock instanceof Redis) {
            return \Closure::bind(function () {
                return $this->describe();
            }, $lock, Redis::class)();
        }
        return get_class($lock);
    }

    /**
     * Who holds a busy lock, as far as it can tell: words, pid@host, since (Unix seconds).
     *
     * @return array{0: string, 1: ?string, 2: ?int}
     */
    private static function holder(Lock $lock): array
    {
        if ($lock instanceof File) {
            try {
                $pid = $lock->holderPid();
            } catch (LockException $e) {
                $pid = null;
            }
            if ($pid !== null) {
                $recorded = \Closure::bind(function () {
                    return $this->recordedHolder();
                }, $lock, File::class)();
                $host = Args::cut($recorded !== null && $recorded[0] === $pid ? $recorded[1] : Process::hostname());
                $since = $recorded !== null && $recorded[0] === $pid ? $recorded[2] : null;
                return ["pid $pid on $host", "$pid@$host", $since];
            }
        } elseif ($lock instanceof Redis) {
            $value = \Closure::bind(function () {
                return $this->lastHolder;
            }, $lock, Redis::class)();
            if (is_string($value) && preg_match('/^[^:]*:([0-9]+)@(.*)$/s', $value, $m)) {
                $host = Args::cut(Args::escapeNonUtf8($m[2]));
                // a dead holder on this host: said after who it is, as the extension's remark
                $remark = \Closure::bind(function () {
                    return $this->holderNotRunning();
                }, $lock, Redis::class)();
                return ["pid {$m[1]} on $host$remark", "{$m[1]}@$host", null];
            }
        }
        return ['another process (pid unknown)', null, null];
    }
}

<?php

declare(strict_types=1);

/*
 * Child processes of the torture suite. One role per invocation:
 *
 *   counter BACKEND MODE K LOCK COUNTER GOFILE
 *       K locked read-increment-write cycles of the integer in COUNTER.
 *       BACKEND: file | file-shared-reader | phpflock | redis | setnx
 *       MODE:    block (acquire(-1)) | timed (acquire(t) > 0) | try (acquire(0) + backoff)
 *       LOCK:    a path, or "DSN|KEY|TTL" for redis/setnx
 *       Prints "DONE <increments> <timeouts> <busy>".
 *   counter-fork P K LOCK COUNTER
 *       One File object made before pcntl_fork(); P children share it (each
 *       acquire() in a child reopens) and do K increments each.
 *   holder BACKEND MODE LOCK JOURNAL PHASEFILE SLOT STOPFILE HOLD_US
 *       Until STOPFILE exists: acquire, append "enter TAG", check that the
 *       previous holder left or is dead, hold a while, "leave TAG", release.
 *   hold BACKEND LOCK
 *       Acquire, print "HELD <pid>", sleep until killed.
 *   probe BACKEND LOCK
 *       Try once; print "FREE" (and release) or "BUSY".
 */

namespace Torture;

require __DIR__ . '/common.php';

const PHASE_ACQUIRE = 'A';
const PHASE_HOLD = 'H';
const PHASE_RELEASE = 'R';
const PHASE_OUT = 'O';

function make_lock(string $backend, string $lock): object
{
    switch ($backend) {
        case 'file':
            return new \CronLock\File($lock);
        case 'file-shared-reader':
            return new \CronLock\File($lock, ['shared' => true]);
        case 'redis':
            [$dsn, $key, $ttl] = explode('|', $lock);
            return new \CronLock\Redis($dsn, $key, (float) $ttl, ['connect_timeout' => 10.0, 'read_timeout' => 10.0]);
        case 'phpflock':
            return new PhpFlock($lock);
        case 'setnx':
            [$dsn, $key, $ttl] = explode('|', $lock);
            return new SetNx((int) substr($dsn, strrpos($dsn, ':') + 1), $key, (float) $ttl);
        case 'none':
            return new NoLock(); // negative control: proves the counter test can see a race
    }
    throw new \InvalidArgumentException("unknown backend $backend");
}

final class NoLock
{
    public function acquire(float $timeout = 0.0): bool
    {
        return true;
    }

    public function release(): bool
    {
        return true;
    }
}

/** PHP's own flock() on the same file, as a Lock-like object. */
final class PhpFlock
{
    /** @var resource */
    private $fp;
    private bool $held = false;

    public function __construct(string $path)
    {
        $fp = fopen($path, 'c');
        if ($fp === false) {
            throw new \RuntimeException("fopen $path failed");
        }
        $this->fp = $fp;
    }

    public function acquire(float $timeout = 0.0): bool
    {
        if ($timeout < 0) {
            return $this->held = flock($this->fp, LOCK_EX);
        }
        $end = microtime(true) + $timeout;
        do {
            if (flock($this->fp, LOCK_EX | LOCK_NB)) {
                return $this->held = true;
            }
            usleep(500);
        } while (microtime(true) < $end);
        return false;
    }

    public function release(): bool
    {
        $was = $this->held;
        flock($this->fp, LOCK_UN);
        $this->held = false;
        return $was;
    }
}

/** Another Redis client doing its own SET NX PX + token-checked DEL. */
final class SetNx
{
    private Resp $r;
    private ?string $token = null;

    public function __construct(private int $port, private string $key, private float $ttl)
    {
        $this->r = new Resp($port, 10.0);
    }

    public function acquire(float $timeout = 0.0): bool
    {
        $end = $timeout < 0 ? INF : microtime(true) + $timeout;
        $token = bin2hex(random_bytes(16));
        do {
            if ($this->r->cmd('SET', $this->key, $token, 'NX', 'PX', (string) (int) ($this->ttl * 1000)) === 'OK') {
                $this->token = $token;
                return true;
            }
            usleep(1000);
        } while (microtime(true) < $end);
        return false;
    }

    public function release(): bool
    {
        if ($this->token === null) {
            return false;
        }
        $n = $this->r->cmd('EVAL', "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end", '1', $this->key, $this->token);
        $this->token = null;
        return $n === 1;
    }
}

function take(object $lock, string $mode, int &$timeouts, int &$busy): void
{
    switch ($mode) {
        case 'block':
            while (!$lock->acquire(-1.0)) {
                $busy++; // a blocking acquire may only return false for Redis server trouble
            }
            return;
        case 'timed':
            while (!$lock->acquire(mt_rand(1, 20) / 2.0)) {
                $timeouts++;
            }
            return;
        case 'try':
            $sleep = 50;
            while (!$lock->acquire(0.0)) {
                $busy++;
                usleep(mt_rand(0, $sleep));
                $sleep = min($sleep * 2, 2000);
            }
            return;
    }
    throw new \InvalidArgumentException("unknown mode $mode");
}

function wait_for_go(string $go): void
{
    $end = microtime(true) + 300;
    while (!file_exists($go) && microtime(true) < $end) {
        usleep(2000);
    }
}

/** The locked section: read, sometimes dawdle (to widen any race), write. */
function increment(string $counter): void
{
    $n = (int) file_get_contents($counter);
    if (mt_rand(0, 7) === 0) {
        usleep(mt_rand(0, 300));
    }
    file_put_contents($counter, (string) ($n + 1));
}

$role = $argv[1] ?? '';
mt_srand(getmypid() ^ (int) (microtime(true) * 1e6));

switch ($role) {
    case 'counter':
        [, , $backend, $mode, $k, $lockArg, $counter, $go] = $argv;
        $lock = make_lock($backend, $lockArg);
        $timeouts = $busy = $done = 0;
        wait_for_go($go);
        for ($i = 0; $i < (int) $k; $i++) {
            take($lock, $mode, $timeouts, $busy);
            if ($backend === 'file-shared-reader') {
                // a reader: the value must not move while we hold LOCK_SH
                $a = file_get_contents($counter);
                usleep(mt_rand(0, 200));
                $b = file_get_contents($counter);
                if ($a !== $b) {
                    echo "TORN $a $b\n";
                }
            } else {
                increment($counter);
            }
            $lock->release();
            $done++;
        }
        echo "DONE $done $timeouts $busy\n";
        exit(0);

    case 'counter-fork':
        [, , $p, $k, $lockArg, $counter] = $argv;
        $lock = new \CronLock\File($lockArg); // made before the forks, shared by all children
        $kids = [];
        for ($c = 0; $c < (int) $p; $c++) {
            $pid = pcntl_fork();
            if ($pid === 0) {
                mt_srand(getmypid());
                $fails = 0;
                for ($i = 0; $i < (int) $k; $i++) {
                    if (!$lock->acquire(-1.0)) {
                        $fails++;
                        continue;
                    }
                    increment($counter);
                    if (!$lock->release()) {
                        $fails++;
                    }
                }
                exit($fails === 0 ? 0 : 3);
            }
            $kids[] = $pid;
        }
        $bad = 0;
        foreach ($kids as $pid) {
            pcntl_waitpid($pid, $status);
            if (!pcntl_wifexited($status) || pcntl_wexitstatus($status) !== 0) {
                $bad++;
            }
        }
        echo "DONE " . ((int) $p - $bad) * (int) $k . " $bad 0\n";
        exit(0);

    case 'holder':
        [, , $backend, $mode, $lockArg, $journal, $phaseFile, $slot, $stop, $holdUs] = $argv;
        $slot = (int) $slot;
        $me = Pids::tag(getmypid());
        $phase = fopen($phaseFile, 'c');
        $setPhase = function (string $p) use ($phase, $slot): void {
            fseek($phase, $slot);
            fwrite($phase, $p);
        };
        $j = fopen($journal, 'a'); // O_APPEND: one write() per line, lines never interleave
        $setPhase(PHASE_OUT);
        $lock = make_lock($backend, $lockArg);
        $timeouts = $busy = 0;
        $seq = 0;
        echo "READY\n";
        while (!file_exists($stop)) {
            $setPhase(PHASE_ACQUIRE);
            take($lock, $mode, $timeouts, $busy);
            $setPhase(PHASE_HOLD);
            $seq++;
            fwrite($j, "enter $me $seq\n");
            // Who held it before us? Only holders write enter/leave, so the
            // line before ours is "leave X" or "enter X" of a holder that was
            // killed; a killed X must be dead (or exiting) by now.
            $tail = tail_lines($journal, 200);
            $idx = array_search("enter $me $seq", $tail, true);
            if ($idx !== false && $idx > 0) {
                for ($i = $idx - 1; $i >= 0; $i--) {
                    $parts = explode(' ', $tail[$i]);
                    if ($parts[0] === 'leave') {
                        break;
                    }
                    if ($parts[0] === 'enter') {
                        if (!Pids::deadOrExiting($parts[1])) {
                            fwrite($j, "OVERLAP $me {$parts[1]}\n");
                        }
                        break;
                    }
                }
            }
            $hold = mt_rand(0, (int) $holdUs);
            if ($hold > 0) {
                usleep($hold);
            }
            if ($backend === 'redis' && method_exists($lock, 'renew') && mt_rand(0, 3) === 0) {
                if (!$lock->renew()) {
                    fwrite($j, "LOST $me renew\n");
                }
            }
            fwrite($j, "leave $me $seq\n");
            $setPhase(PHASE_RELEASE);
            if (!$lock->release()) {
                fwrite($j, "LOST $me release\n");
            }
            $setPhase(PHASE_OUT);
            if (mt_rand(0, 1) === 0) {
                usleep(mt_rand(0, (int) $holdUs));
            }
        }
        exit(0);

    case 'hold':
        [, , $backend, $lockArg] = $argv;
        $lock = make_lock($backend, $lockArg);
        $t = $z = 0;
        take($lock, 'block', $t, $z);
        echo 'HELD ' . getmypid() . "\n";
        while (true) {
            sleep(1);
        }

    case 'probe':
        [, , $backend, $lockArg] = $argv;
        $lock = make_lock($backend, $lockArg);
        if ($lock->acquire(0.0)) {
            $lock->release();
            echo "FREE\n";
        } else {
            echo "BUSY\n";
        }
        exit(0);
}

fwrite(STDERR, "unknown role '$role'\n");
exit(2);

/** @return list<string> the last lines of a file (whole lines only) */
function tail_lines(string $file, int $n): array
{
    $fp = fopen($file, 'r');
    $size = fstat($fp)['size'];
    $want = min($size, $n * 64);
    fseek($fp, $size - $want);
    $data = (string) fread($fp, $want);
    fclose($fp);
    $lines = explode("\n", rtrim($data, "\n"));
    if ($want < $size) {
        array_shift($lines); // partial first line
    }
    return $lines;
}

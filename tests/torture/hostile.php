<?php

declare(strict_types=1);

/*
 * 5. Hostile input. Every input must end in a clear exception of a documented
 * class (ValueError / TypeError naming the argument, LockException,
 * ConnectionException) or in a documented refusal/behaviour, and nothing may
 * be written in the sandbox except the intended lock file (the sandbox is
 * snapshotted before and after every input: type, mode, owner, size, md5,
 * link target of every entry).
 */

namespace Torture;

require __DIR__ . '/lib/common.php';

T::init('hostile', $argv);

$sb = T::$tmp . '/sandbox';
foreach (file('/proc/mounts') as $m) {   // a read-only tmpfs left by an interrupted run
    $mp = explode(' ', $m)[1];
    if (str_starts_with($mp, $sb . '/')) {
        exec('umount ' . escapeshellarg($mp));
    }
}
rmtree($sb);
mkdir($sb, 0755, true);
$sb = realpath($sb);
chdir($sb);
ini_set('cronlock.lock_dir', "$sb/lockdir");
mkdir("$sb/lockdir", 0755);
ini_set('error_log', T::$tmp . '/php-error.log');
file_put_contents("$sb/victim.txt", "precious data\n");
file_put_contents("$sb/empty-victim", '');
mkdir("$sb/victim-dir", 0755);

/** @var list<array{0:string,1:callable,2:list<string>,3:list<string>,4:?callable}> $cases */
$cases = [];

/**
 * @param string       $input   what is tried (printed in verbose mode)
 * @param callable     $run     returns a value or throws
 * @param list<string> $expect  regexes; the outcome (Class: message | ok: value) must match one
 * @param list<string> $mayChange regexes of sandbox paths the input may create or change
 * @param callable|null $setup  runs before the snapshot
 */
function input(string $input, callable $run, array $expect, array $mayChange = [], ?callable $setup = null): void
{
    $GLOBALS['cases'][] = [$input, $run, $expect, $mayChange, $setup];
}

const VALUE = '/^ValueError: .*\$/';              // ValueError naming a $argument
const TYPE = '/^(TypeError|ArgumentCountError): .*(\$|argument)/';
const SELF_HELD = '/^CronLock\\\\LockException: lock file \S+ is already held by this process \(pid \d+\) through another /';
const LOCKEX = '/^CronLock\\\\LockException: /';
const CONNEX = '/^CronLock\\\\ConnectionException: /';

/** Runs $f in a pcntl_fork() child as nobody; returns its outcome string. */
function as_nobody(callable $f): Raw
{
    [$r, $w] = stream_socket_pair(STREAM_PF_UNIX, STREAM_SOCK_STREAM, STREAM_IPPROTO_IP);
    $pid = pcntl_fork();
    if ($pid === 0) {
        fclose($r);
        posix_setgid(65534);
        posix_initgroups('nobody', 65534);
        if (!posix_setuid(65534)) {
            fwrite($w, 'setuid failed');
            exit(1);
        }
        fwrite($w, outcome($f));
        fclose($w);
        posix_kill(getmypid(), SIGKILL); // no shutdown of the parent's objects in this copy
        exit(0);
    }
    fclose($w);
    $out = (string) stream_get_contents($r);
    fclose($r);
    pcntl_waitpid($pid, $st);
    return new Raw($out);
}

/** Runs PHP code in a separate php process; its output is the outcome. */
function php_run(string $code, array $args = [], float $timeout = 60): Raw
{
    $p = new Proc(array_merge(T::php(['cronlock.lock_dir' => ini_get('cronlock.lock_dir')]), ['-r', $code], $args));
    if (!$p->wait($timeout)) {
        $p->kill(9);
        $p->wait(10);
        return new Raw('HUNG');
    }
    $r = trim($p->out() . $p->err());
    $p->close();
    return new Raw($r);
}

// ------------------------------------------------------------ File: paths

input("File('')", fn () => new \CronLock\File(''), [VALUE]);
input('File("a\\0b") NUL byte', fn () => new \CronLock\File("$sb/a\0b.lock"), [VALUE]);
input('File(path ending in NUL)', fn () => new \CronLock\File("$sb/x.lock\0"), [VALUE]);
input('File("\\0")', fn () => new \CronLock\File("\0"), [VALUE]);
input('File(directory)', fn () => new \CronLock\File("$sb/victim-dir"), [LOCKEX]);
input('File(".")', fn () => new \CronLock\File('.'), [LOCKEX]);
input('File("/")', fn () => new \CronLock\File('/'), [LOCKEX]);
input('File(path with trailing slash)', fn () => new \CronLock\File("$sb/trailing.lock/"), [LOCKEX]);
input('File(symlink to a regular file)', fn () => (new \CronLock\File("$sb/link-file"))->acquire(), [LOCKEX], [],
    fn () => symlink("$sb/victim.txt", "$sb/link-file"));
input('File(symlink to an empty file)', fn () => (new \CronLock\File("$sb/link-empty"))->acquire(), [LOCKEX], [],
    fn () => symlink("$sb/empty-victim", "$sb/link-empty"));
input('File(dangling symlink)', fn () => new \CronLock\File("$sb/link-dangling"), [LOCKEX], [],
    fn () => symlink("$sb/would-be-created", "$sb/link-dangling"));
input('File(symlink to a directory)', fn () => new \CronLock\File("$sb/link-dir"), [LOCKEX], [],
    fn () => symlink("$sb/victim-dir", "$sb/link-dir"));
input('File(symlink loop)', fn () => new \CronLock\File("$sb/loop-a"), [LOCKEX], [],
    function () use ($sb) {
        symlink("$sb/loop-b", "$sb/loop-a");
        symlink("$sb/loop-a", "$sb/loop-b");
    });
input('File(FIFO) does not hang', fn () => new \CronLock\File("$sb/fifo"), [LOCKEX], [],
    fn () => posix_mkfifo("$sb/fifo", 0600));
input('File(FIFO with a reader waiting)', function () use ($sb) {
    return php_run('try { new CronLock\File($argv[1]); echo "ok: object"; } catch (Throwable $e) { echo get_class($e), ": ", $e->getMessage(); }', ["$sb/fifo2"], 30);
}, [LOCKEX], [], fn () => posix_mkfifo("$sb/fifo2", 0600));
input('File(/dev/null)', fn () => new \CronLock\File('/dev/null'), [LOCKEX]);
input('File(/dev/zero)', fn () => new \CronLock\File('/dev/zero'), [LOCKEX]);
input('File(/dev/tty)', fn () => new \CronLock\File('/dev/tty'), [LOCKEX]);
input('File(character device node made by mknod)', fn () => new \CronLock\File("$sb/chardev"), [LOCKEX], [],
    fn () => exec('mknod ' . escapeshellarg("$sb/chardev") . ' c 1 3'));
input('File(block device node made by mknod)', fn () => new \CronLock\File("$sb/blockdev"), [LOCKEX], [],
    fn () => exec('mknod ' . escapeshellarg("$sb/blockdev") . ' b 7 200'));
input('File(unix socket)', fn () => new \CronLock\File("$sb/sock"), [LOCKEX], [],
    function () use ($sb) {
        $GLOBALS['sock'] = stream_socket_server("unix://$sb/sock");
    });
input('File(/proc/self/status)', fn () => (new \CronLock\File('/proc/self/status'))->acquire(), ['/^(CronLock\\\\LockException: |ok: true)/']);
input('File(in a missing directory)', fn () => new \CronLock\File("$sb/no/such/dir/x.lock"), [LOCKEX]);
input('File(below a regular file)', fn () => new \CronLock\File("$sb/victim.txt/x.lock"), [LOCKEX]);
input('File(path of 5000 bytes)', fn () => new \CronLock\File("$sb/" . str_repeat('d/', 2500) . 'x.lock'), [LOCKEX]);
input('File(name of 300 bytes)', fn () => new \CronLock\File("$sb/" . str_repeat('n', 300)), [LOCKEX]);
input('File(path of 1 MB)', fn () => new \CronLock\File(str_repeat('/', 1 << 20) . 'x'), [LOCKEX, VALUE]);
input('File(non-UTF-8 bytes in the name)', fn () => (new \CronLock\File("$sb/\xff\xfe.lock"))->acquire(), [TYPE, VALUE, '/^ok: true$/'], ['/^\xff\xfe\.lock$/']);
input('File(newline and unicode in the name)', fn () => (new \CronLock\File("$sb/new\nline-ünï.lock"))->acquire(), ['/^ok: true$/'], ["/^new\nline-ünï\\.lock$/"]);
input('File(relative path)', fn () => (new \CronLock\File('relative.lock'))->acquire(), ['/^ok: true$/'], ['/^relative\.lock$/']);
input('File(a PHP script: foreign content)', function () use ($sb) {
    $l = new \CronLock\File("$sb/script.php");
    return $l->acquire() && $l->holderPid() === getmypid() && $l->release();
}, ['/^ok: true$/'], [], fn () => file_put_contents("$sb/script.php", "<?php echo 'hi';\n"));
input('File(128 bytes of foreign content)', fn () => (new \CronLock\File("$sb/foreign128"))->acquire(), ['/^ok: true$/'], [],
    fn () => file_put_contents("$sb/foreign128", str_repeat('z', 127) . "\n"));
input('File(an old record of another host: rewritten in place)', fn () => (new \CronLock\File("$sb/oldrecord.lock"))->acquire(), ['/^ok: true$/'], ['/^oldrecord\.lock$/'],
    fn () => file_put_contents("$sb/oldrecord.lock", str_pad('cronlock pid=1 host=elsewhere since=2001-01-01T00:00:00Z', 127) . "\n"));
input('File(a 1 GiB sparse file)', fn () => (new \CronLock\File("$sb/sparse"))->acquire(), ['/^ok: true$/'], [],
    function () use ($sb) {
        $f = fopen("$sb/sparse", 'w');
        ftruncate($f, 1 << 30);
        fclose($f);
    });
input('File(hard link to a file with content)', fn () => (new \CronLock\File("$sb/hardlink"))->acquire(), ['/^ok: true$/'], [],
    fn () => link("$sb/victim.txt", "$sb/hardlink"));

// ------------------------------------------------- File: swapped between calls

input('symlink swapped in between new File() and acquire()', function () use ($sb) {
    $l = new \CronLock\File("$sb/swap1.lock");
    unlink("$sb/swap1.lock");
    symlink("$sb/victim.txt", "$sb/swap1.lock");
    return $l->acquire();
}, [LOCKEX, '/^ok: false$/'], ['/^swap1\.lock$/']);
input('symlink swapped in while held, then release() + acquire()', function () use ($sb) {
    $l = new \CronLock\File("$sb/swap2.lock");
    $l->acquire();
    rename("$sb/swap2.lock", "$sb/swap2.old");
    symlink("$sb/empty-victim", "$sb/swap2.lock");
    $released = $l->release();
    return [$released, outcome(fn () => $l->acquire())];
}, ['/^ok: array$/'], ['/^swap2\.(lock|old)$/']);
input('symlink swapped in while another process waits in acquire(-1)', function () use ($sb) {
    $l = new \CronLock\File("$sb/swap3.lock");
    $l->acquire();
    $p = new Proc(array_merge(T::php(), ['-r', 'try { var_dump((new CronLock\File($argv[1]))->acquire(-1)); } catch (Throwable $e) { echo get_class($e), ": ", $e->getMessage(); }', "$sb/swap3.lock"]));
    usleep(300000);
    unlink("$sb/swap3.lock");
    symlink("$sb/empty-victim", "$sb/swap3.lock");
    $l->release();
    $p->wait(60) || $p->kill(9);
    $r = trim($p->out() . $p->err());
    $p->close();
    if (str_starts_with($r, 'CronLock\\LockException')) {
        throw new \CronLock\LockException("(from the waiter) $r");
    }
    return $r;
}, [LOCKEX], ['/^swap3\.lock$/']);
input('directory swapped in between calls', function () use ($sb) {
    $l = new \CronLock\File("$sb/swap4.lock");
    unlink("$sb/swap4.lock");
    mkdir("$sb/swap4.lock");
    return $l->acquire();
}, [LOCKEX], ['/^swap4\.lock$/']);
input('FIFO swapped in between calls', function () use ($sb) {
    $l = new \CronLock\File("$sb/swap5.lock");
    unlink("$sb/swap5.lock");
    posix_mkfifo("$sb/swap5.lock", 0600);
    return $l->acquire();
}, [LOCKEX], ['/^swap5\.lock$/']);
input('lock file unlinked between calls (tmp cleaner): retaken on the new file', function () use ($sb) {
    $a = new \CronLock\File("$sb/swap6.lock");
    unlink("$sb/swap6.lock");
    $b = new \CronLock\File("$sb/swap6.lock");
    $first = $b->acquire();
    return [$first, $a->acquire()] === [true, false];
}, ['/^ok: true$/'], ['/^swap6\.lock$/']);

// a dropped File leaves its descriptor for the next object of the same path:
// whatever is at the path by then must still be refused or relocked
foreach ([
    'a symlink to a file' => fn ($p) => symlink(T::$tmp . '/sandbox/empty-victim', $p),
    'a directory' => fn ($p) => mkdir($p),
    'a FIFO' => fn ($p) => posix_mkfifo($p, 0600),
    'a new regular file' => fn ($p) => file_put_contents($p, ''),
] as $what => $swapIn) {
    $name = 'idle-' . preg_replace('/[^a-z]+/', '-', $what) . '.lock';
    input("$what swapped in after a File on the path was dropped (reused descriptor)", function () use ($sb, $name, $swapIn, $what) {
        $a = new \CronLock\File("$sb/$name");
        $a->acquire();
        $a = null;                        // dropped: its descriptor may be kept for reuse
        unlink("$sb/$name");
        $swapIn("$sb/$name");
        $b = new \CronLock\File("$sb/$name");
        $got = $b->acquire();
        if ($what === 'a new regular file') {
            // must lock the file the path names now, not the unlinked one
            return $got && !flock1_free("$sb/$name");
        }
        return $got;
    }, $what === 'a new regular file' ? ['/^ok: true$/'] : [LOCKEX, '/^ok: false$/'], ['/^' . preg_quote($name, '/') . '$/']);
}

// --------------------------------------------------- File: owners, modes, fs

input('File(owned by nobody, 0600) as root', fn () => (new \CronLock\File("$sb/nobodys.lock"))->acquire(), ['/^ok: true$/'], ['/^nobodys\.lock$/'],
    function () use ($sb) {
        file_put_contents("$sb/nobodys.lock", '');
        chmod("$sb/nobodys.lock", 0600);
        chown("$sb/nobodys.lock", 65534);
    });
input("as nobody: root's 0644 file (read-only fallback, nothing written)", fn () => as_nobody(fn () => (new \CronLock\File("$sb/roots.lock"))->acquire()), ['/^ok: true$/'], [],
    function () use ($sb) {
        file_put_contents("$sb/roots.lock", '');
        chmod("$sb/roots.lock", 0644);
        chmod($sb, 0755);
    });
input("as nobody: root's 0600 file", fn () => as_nobody(fn () => new \CronLock\File("$sb/roots600.lock")), [LOCKEX], [],
    function () use ($sb) {
        file_put_contents("$sb/roots600.lock", '');
        chmod("$sb/roots600.lock", 0600);
    });
input("as nobody: a missing file in root's 0755 directory", fn () => as_nobody(fn () => new \CronLock\File("$sb/victim-dir/x.lock")), [LOCKEX]);
input('as nobody: a lock file held by root', function () use ($sb) {
    $l = new \CronLock\File("$sb/shared-owner.lock");
    $l->acquire();
    $r = as_nobody(fn () => (new \CronLock\File("$sb/shared-owner.lock"))->acquire());
    $l->release();
    return $r;
}, ['/^ok: false$/'], ['/^shared-owner\.lock$/'], function () use ($sb) {
    file_put_contents("$sb/shared-owner.lock", '');
    chmod("$sb/shared-owner.lock", 0644);
});
input("mode 0 (owner can't read)", fn () => (new \CronLock\File("$sb/mode0.lock", ['mode' => 0]))->acquire(), ['/^ok: true$/'], ['/^mode0\.lock$/']);
input('mode 04777 (setuid + world-writable bits)', function () use ($sb) {
    $l = new \CronLock\File("$sb/mode4777.lock", ['mode' => 04777]);
    return sprintf('%o', fileperms("$sb/mode4777.lock") & 07777);
}, ['/^ok: /'], ['/^mode4777\.lock$/']);

// ro filesystem: needs mount (root, and a kernel that lets us)
$ro = "$sb/ro";
mkdir($ro);
exec('mount -t tmpfs -o size=1m,mode=0755 tmpfs ' . escapeshellarg($ro) . ' 2>&1', $o, $mountRc);
$roMounted = false;
if ($mountRc === 0) {
    file_put_contents("$ro/existing.lock", '');
    exec('mount -o remount,ro ' . escapeshellarg($ro) . ' 2>&1', $o, $rc2);
    $roMounted = $rc2 === 0;
    if (!$roMounted) {
        exec('umount ' . escapeshellarg($ro));
    }
}
if ($roMounted) {
    input('read-only fs: missing lock file', fn () => new \CronLock\File("$ro/missing.lock"), [LOCKEX]);
    input('read-only fs: existing lock file (held read-only, nothing written)', function () use ($ro) {
        $a = new \CronLock\File("$ro/existing.lock");
        $b = new \CronLock\File("$ro/existing.lock");
        return [$a->acquire(), $b->acquire(), $a->holderPid(), filesize("$ro/existing.lock")] === [true, false, getmypid(), 0];
    }, ['/^ok: true$/']);
} else {
    T::skip('read-only filesystem inputs', 'mount -t tmpfs not permitted here: ' . implode(' ', $o));
}

// ------------------------------------------------------------ File: options

foreach ([
    "['mode' => -1]" => [['mode' => -1], [VALUE]],
    "['mode' => 0o10000]" => [['mode' => 010000], [VALUE]],
    "['mode' => PHP_INT_MAX]" => [['mode' => PHP_INT_MAX], [VALUE]],
    "['mode' => PHP_INT_MIN]" => [['mode' => PHP_INT_MIN], [VALUE]],
    "['mode' => '0644']" => [['mode' => '0644'], [TYPE]],
    "['mode' => 420.0]" => [['mode' => 420.0], [TYPE]],
    "['mode' => true]" => [['mode' => true], [TYPE]],
    "['mode' => []]" => [['mode' => []], [TYPE]],
    "['shared' => 'yes']" => [['shared' => 'yes'], [TYPE]],
    "['shared' => 1]" => [['shared' => 1], [TYPE]],
    "['shared' => null]" => [['shared' => null], [TYPE, '/^ok: /']],
    "['allow_network_fs' => 'false']" => [['allow_network_fs' => 'false'], [TYPE]],
    "['allow_network_fs' => new stdClass]" => [['allow_network_fs' => new \stdClass()], [TYPE]],
    "['timeout' => 1] (unknown key)" => [['timeout' => 1], [VALUE]],
    "[0 => true] (int key)" => [[0 => true], [VALUE]],
    "['MODE' => 0644] (wrong case)" => [['MODE' => 0644], [VALUE]],
    "['mode' => 0644, 'mode ' => 1]" => [['mode' => 0644, 'mode ' => 1], [VALUE]],
    'options with a reference value' => [(function () {
        $m = 0600;
        return ['mode' => &$m];
    })(), ['/^ok: /', TYPE]],
] as $what => [$opts, $expect]) {
    input("File options $what", fn () => new \CronLock\File("$sb/opts.lock", $opts), $expect, ['/^opts\.lock$/']);
}
input('File options with a non-UTF-8 key', fn () => new \CronLock\File("$sb/opts.lock", ["\xff" => 1]), [VALUE], ['/^opts\.lock$/']);
input('File options with a NUL byte in a key', fn () => new \CronLock\File("$sb/opts.lock", ["a\0b" => 1]), [VALUE], ['/^opts\.lock$/']);
input('cron_guard options with a non-UTF-8 key', fn () => cron_guard(fn () => 1, 'opts', ["\xc3\x28" => 1]), [VALUE]);
input('File options not an array', fn () => new \CronLock\File("$sb/opts.lock", 'mode=0644'), [TYPE]);
input('File path not a string (int)', fn () => new \CronLock\File(123), [TYPE, '/^ok: /'], ['/^123$/']);
input('File path null', fn () => new \CronLock\File(null), [TYPE]);
input('File path array', fn () => new \CronLock\File([]), [TYPE]);
input('File path Stringable object', fn () => new \CronLock\File(new class () {
    public function __toString(): string
    {
        return 'stringable.lock';
    }
}), [TYPE, '/^ok: /'], ['/^stringable\.lock$/']);

// ----------------------------------------------------------- File: timeouts

$held = new \CronLock\File("$sb/held.lock");
$held->acquire();
$other = fn () => new \CronLock\File("$sb/held.lock");
foreach ([
    'NAN' => [NAN, [VALUE]],
    '-NAN' => [-NAN, [VALUE]],
    // held by another object of this process: a try is busy, any wait
    // (however short) is refused, as it could only end by a timeout
    'PHP_FLOAT_EPSILON (held by this process)' => [PHP_FLOAT_EPSILON, [SELF_HELD]],
    '1e-300 (held by this process)' => [1e-300, [SELF_HELD]],
    '-0.0 (held by this process)' => [-0.0, ['/^ok: false$/']],
    '0.05 (held by this process)' => [0.05, [SELF_HELD]],
    "'1.5' (numeric string)" => ['1.5', [TYPE, SELF_HELD]],
    "'abc'" => ['abc', [TYPE]],
    'null' => [null, [TYPE]],
    '[]' => [[], [TYPE]],
    'true' => [true, [TYPE, SELF_HELD]],
] as $what => [$t, $expect]) {
    input("acquire($what)", fn () => $other()->acquire($t), $expect, ['/^held\.lock$/']);
}
input('acquire() with 2 arguments', fn () => $other()->acquire(1, 2), [TYPE]);
// "wait forever" values: must block (not return, not throw) while held elsewhere, then get it
foreach (['INF' => 'INF', '-INF' => '-INF', '-1' => '-1', '1e308' => '1e308', 'PHP_FLOAT_MAX' => 'PHP_FLOAT_MAX', '-PHP_FLOAT_MAX' => '-PHP_FLOAT_MAX', 'PHP_INT_MAX' => 'PHP_INT_MAX', '2**53 + 1 seconds' => '9007199254740993.0'] as $what => $expr) {
    input("acquire($what) waits until the holder lets go", function () use ($sb, $held, $expr) {
        $p = new Proc(array_merge(T::php(), ['-r', 'try { $l = new CronLock\File($argv[1]); echo "WAITING\n"; var_dump($l->acquire(' . $expr . ')); } catch (Throwable $e) { echo get_class($e), ": ", $e->getMessage(), "\n"; }', "$sb/held.lock"]));
        $p->waitFor('WAITING', 60);
        usleep(400000);
        $early = trim(str_replace('WAITING', '', $p->out()));
        $held->release();
        $p->wait(60) || $p->kill(9);
        $after = trim(str_replace('WAITING', '', $p->out() . $p->err()));
        $p->close();
        $held->acquire(10.0);
        if ($early !== '') {
            return "returned early: $early";
        }
        return $after;
    }, ['/^ok: \'bool\(true\)\'$/'], ['/^held\.lock$/']);
}
foreach (['NAN' => NAN, 'INF' => INF, '-1' => -1.0, '0' => 0.0, 'null' => null] as $what => $ttl) {
    input("File renew($what) (ttl ignored for File)", fn () => $held->renew($ttl), ['/^ok: true$/'], ['/^held\.lock$/']);
}
input("File renew('x')", fn () => $held->renew('x'), [TYPE]);

// --------------------------------------------------------------- cron_guard

$job = fn () => 'ran';
foreach ([
    "''" => ['', [VALUE]],
    "'a/b'" => ['a/b', [VALUE]],
    "'../escape'" => ['../escape', [VALUE]],
    "'.'" => ['.', [VALUE]],
    "'..'" => ['..', [VALUE]],
    "'a\\0b'" => ["a\0b", [VALUE]],
    "'sp ace'" => ['sp ace', [VALUE]],
    "'ünï'" => ['ünï', [VALUE]],
    "'\\xff'" => ["\xff", [VALUE, TYPE]],
    '201 chars' => [str_repeat('a', 201), [VALUE]],
    "'-rf' (leading dash)" => ['-rf', ['/^ok: \'ran\'$/']],
    "'ok_name-1.2'" => ['ok_name-1.2', ['/^ok: \'ran\'$/']],
    '200 chars' => [str_repeat('b', 200), ['/^ok: \'ran\'$/']],
    '42 (int)' => [42, [TYPE, '/^ok: \'ran\'$/']],
    '1.5 (float)' => [1.5, [TYPE]],
    'true' => [true, [TYPE]],
    '[]' => [[], [TYPE]],
    'new stdClass' => [new \stdClass(), [TYPE]],
    'a Closure' => [fn () => 1, [TYPE]],
] as $what => [$lock, $expect]) {
    input("cron_guard(job, $what)", fn () => cron_guard($job, $lock), $expect, ['/^lockdir\/[A-Za-z0-9._-]+\.lock$/']);
}
foreach ([
    "['wait' => NAN]" => [['wait' => NAN], [VALUE]],
    "['wait' => 'x']" => [['wait' => 'x'], [TYPE]],
    "['wait' => INF] (free lock)" => [['wait' => INF], ['/^ok: \'ran\'$/']],
    "['wait' => -INF] (free lock)" => [['wait' => -INF], ['/^ok: \'ran\'$/']],
    "['wait' => PHP_INT_MAX] (free lock)" => [['wait' => PHP_INT_MAX], ['/^ok: \'ran\'$/']],
    "['max_runtime' => 0]" => [['max_runtime' => 0], [VALUE]],
    "['max_runtime' => -5]" => [['max_runtime' => -5], [VALUE]],
    "['max_runtime' => NAN]" => [['max_runtime' => NAN], [VALUE]],
    "['max_runtime' => -INF]" => [['max_runtime' => -INF], [VALUE]],
    "['max_runtime' => INF]" => [['max_runtime' => INF], ['/^ok: \'ran\'$/']],
    "['max_runtime' => PHP_FLOAT_MIN]" => [['max_runtime' => PHP_FLOAT_MIN], ['/^ok: \'ran\'$/']],
    "['max_runtime' => '5']" => [['max_runtime' => '5'], [TYPE]],
    "['on_busy' => 256]" => [['on_busy' => 256], [VALUE]],
    "['on_busy' => -1]" => [['on_busy' => -1], [VALUE]],
    "['on_busy' => '1']" => [['on_busy' => '1'], [TYPE]],
    "['on_busy' => 1.0]" => [['on_busy' => 1.0], [TYPE]],
    "['on_busy' => true]" => [['on_busy' => true], [TYPE]],
    "['ttl' => 5] (unknown key)" => [['ttl' => 5], [VALUE]],
    "[0 => 'wait']" => [[0 => 'wait'], [VALUE]],
] as $what => [$opts, $expect]) {
    input("cron_guard(job, 'opts', $what)", fn () => cron_guard($job, 'opts', $opts), $expect, ['/^lockdir\/opts\.lock$/']);
}
input('cron_guard(not callable)', fn () => cron_guard('no_such_function_xyz', 'nc'), [TYPE]);
input('cron_guard(job, null) under php -r (no script to name the lock after)', fn () => php_run('try { cron_guard(fn () => 1); echo "ok: 1"; } catch (Throwable $e) { echo get_class($e), ": ", $e->getMessage(); }'), [VALUE]);
input('max_runtime INF: remaining() is finite and positive, expired() false', fn () => cron_guard(fn (\CronLock\Guard $g) => is_finite($g->remaining()) && $g->remaining() > 0 && !$g->expired(), 'inf', ['max_runtime' => INF]), ['/^ok: true$/'], ['/^lockdir\/inf\.lock$/']);
input('max_runtime 1e-9: expired() at once, remaining() 0', fn () => cron_guard(function (\CronLock\Guard $g) {
    usleep(1000);
    return $g->expired() && $g->remaining() === 0.0;
}, 'tiny', ['max_runtime' => 1e-9]), ['/^ok: true$/'], ['/^lockdir\/tiny\.lock$/']);
input('cron_guard: the job throws; the exception propagates and the lock is free after', function () use ($sb) {
    try {
        cron_guard(fn () => throw new \DomainException('from the job'), 'throws');
    } catch (\DomainException $e) {
        return flock1_free("$sb/lockdir/throws.lock") ? 'propagated, free' : 'propagated, STILL HELD';
    }
    return 'not propagated';
}, ["/^ok: 'propagated, free'$/"], ['/^lockdir\/throws\.lock$/']);
input('cron_guard: a userland Lock whose acquire() throws', fn () => cron_guard($job, new class () implements \CronLock\Lock {
    public function acquire(float $timeout = 0.0): bool
    {
        throw new \UnexpectedValueException('acquire exploded');
    }

    public function renew(?float $ttl = null): bool
    {
        return true;
    }

    public function release(): bool
    {
        return true;
    }

    public function isHeld(): bool
    {
        return false;
    }
}), ['/^UnexpectedValueException: acquire exploded$/', LOCKEX]);
input('cron_guard: a userland Lock whose release() throws after the job', fn () => cron_guard($job, new class () implements \CronLock\Lock {
    public function acquire(float $timeout = 0.0): bool
    {
        return true;
    }

    public function renew(?float $ttl = null): bool
    {
        return true;
    }

    public function release(): bool
    {
        throw new \UnexpectedValueException('release exploded');
    }

    public function isHeld(): bool
    {
        return true;
    }
}), ["/^ok: 'ran'$/", '/^UnexpectedValueException: release exploded$/', LOCKEX]);

// lock_dir settings
foreach ([
    'a missing directory' => ["$sb/no-such-dir", [LOCKEX], null],
    'a regular file' => ["$sb/victim.txt", [LOCKEX], null],
    'world-writable without the sticky bit' => ["$sb/ww", [LOCKEX], fn () => mkdir("$sb/ww") && chmod("$sb/ww", 0777)],
    'world-writable with the sticky bit' => ["$sb/wwt", ["/^ok: 'ran'$/"], fn () => mkdir("$sb/wwt") && chmod("$sb/wwt", 01777)],
    'a symlink to a world-writable dir without sticky bit' => ["$sb/ww-link", [LOCKEX], fn () => symlink("$sb/ww", "$sb/ww-link")],
    // relative: it would count from each run's working directory (two runs, two files)
    'relative (lockdir)' => ['lockdir', [LOCKEX], null],
    'a NUL byte' => ["$sb/wwt\0/elsewhere", [LOCKEX], null],
] as $what => [$dir, $expect, $setup]) {
    input("cronlock.lock_dir = $what", function () use ($dir, $job, $sb) {
        $old = ini_set('cronlock.lock_dir', $dir);
        try {
            return cron_guard($job, 'dirtest');
        } finally {
            ini_set('cronlock.lock_dir', $old);
        }
    }, $expect, ['/^wwt\/dirtest\.lock$/'], $setup);
}

// ------------------------------------------------------------------- Redis

$redisInputs = [];
if (T::redisAvailable()) {
    // every DSN points at 127.0.0.1 / a socket path: never at anything we did not start
    $port = RedisServer::freePort(); // nothing listens there
    $dsnCases = [
        "''" => '', "' '" => ' ', "'redis'" => 'redis', "'redis:/'" => 'redis:/', "'redis://'" => 'redis://',
        "'http://127.0.0.1'" => 'http://127.0.0.1',
        'port 65536' => 'redis://127.0.0.1:65536', 'port -1' => 'redis://127.0.0.1:-1',
        'port abc' => 'redis://127.0.0.1:abc', 'db abc' => "redis://127.0.0.1:$port/abc",
        'db 2^64' => "redis://127.0.0.1:$port/18446744073709551616", 'NUL in host' => "redis://127.0.0.1\0:$port",
        "'unix://'" => 'unix://', 'unix relative path' => 'unix://relative.sock', "'[::1' (broken bracket)" => "redis://[::1:$port",
        'user:pass@ only' => 'redis://user:pass@',
    ];
    foreach ($dsnCases as $what => $dsn) {
        input("Redis DSN $what", fn () => new \CronLock\Redis($dsn, 'k', 10.0), [VALUE]);
    }
    // accepted by the constructor (the URL parser is lenient): must then fail
    // cleanly, with a documented class, when used
    $lenient = [
        "'REDIS://…' (scheme case)" => 'REDIS://127.0.0.1:' . $port,
        'port 0' => 'redis://127.0.0.1:0', 'db -1' => "redis://127.0.0.1:$port/-1",
        'query string' => "redis://127.0.0.1:$port/0?timeout=1", 'fragment' => "redis://127.0.0.1:$port#x",
        'two @' => "redis://a@b@127.0.0.1:$port",
    ];
    $server = new RedisServer(T::$tmp . '/redis');
    $server->start();
    $GLOBALS['redisServer'] = $server;
    foreach ($lenient as $what => $dsn) {
        $dsn = str_replace(":$port", ":{$server->port}", $dsn);
        input("Redis DSN $what, then acquire() on a live server", function () use ($dsn, $what) {
            $l = new \CronLock\Redis($dsn, 'k', 10.0, ['connect_timeout' => 2.0]);
            $r = outcome(fn () => $l->acquire());
            $l->release();
            if ($what !== "'REDIS://…' (scheme case)") {
                T::note("Redis DSN $what ($dsn) is accepted by the constructor (not a ValueError); acquire(): $r");
            }
            return new Raw($r);
        }, [VALUE, CONNEX, '/^ok: true$/']);
    }
    $secret = 'S3cr3t-PW-' . bin2hex(random_bytes(4));
    input('Redis: a password never shows in the connection error', function () use ($port, $secret) {
        try {
            (new \CronLock\Redis("redis://user:$secret@127.0.0.1:$port", 'k', 10.0, ['connect_timeout' => 2.0]))->acquire();
        } catch (\Throwable $e) {
            if (str_contains($e->getMessage(), $secret) || str_contains((string) $e, $secret)) {
                return 'PASSWORD LEAKED: ' . $e->getMessage();
            }
            throw $e;
        }
        return 'no error';
    }, [CONNEX]);
    foreach (['connect_timeout', 'read_timeout'] as $opt) {
        input("Redis ['$opt' => (float) PHP_INT_MAX], then acquire()", fn () => (new \CronLock\Redis("redis://127.0.0.1:$port", 'k', 10.0, [$opt => (float) PHP_INT_MAX] + ($opt === 'read_timeout' ? ['connect_timeout' => 1.0] : [])))->acquire(), [VALUE, CONNEX]);
    }
    input('Redis: nothing listening (connection refused)', fn () => (new \CronLock\Redis("redis://127.0.0.1:$port", 'k', 10.0, ['connect_timeout' => 2.0]))->acquire(), [CONNEX]);
    input('Redis: unix socket path that does not exist', fn () => (new \CronLock\Redis("unix://$sb/nope.sock", 'k', 10.0))->acquire(), [CONNEX]);
    input('Redis: unix socket path that is a regular file', fn () => (new \CronLock\Redis("unix://$sb/victim.txt", 'k', 10.0))->acquire(), [CONNEX]);
    foreach (["''" => '', "'a\\0b'" => "a\0b"] as $what => $key) {
        input("Redis key $what", fn () => new \CronLock\Redis("redis://127.0.0.1:$port", $key, 10.0), [VALUE]);
    }
    foreach (['0' => 0.0, '-1' => -1.0, 'NAN' => NAN, 'INF' => INF, '-INF' => -INF, '1e308' => 1e308, 'PHP_FLOAT_EPSILON' => PHP_FLOAT_EPSILON, '11 years' => 11 * 365 * 86400.0] as $what => $ttl) {
        input("Redis ttl $what", fn () => new \CronLock\Redis("redis://127.0.0.1:$port", 'k', $ttl), [VALUE]);
    }
    input('Redis ttl 1e-9 (documented: rounded up to 1 ms)', fn () => new \CronLock\Redis("redis://127.0.0.1:$port", 'k', 1e-9), ['/^ok: CronLock.Redis$/']);
    foreach (["'1.5'" => '1.5', 'null' => null, '[]' => []] as $what => $ttl) {
        input("Redis ttl $what", fn () => new \CronLock\Redis("redis://127.0.0.1:$port", 'k', $ttl), [TYPE, '/^ok: CronLock.Redis$/']);
    }
    foreach ([
        "['auto_renew' => 'yes']" => [['auto_renew' => 'yes'], [TYPE]],
        "['auto_renew' => 1]" => [['auto_renew' => 1], [TYPE]],
        "['connect_timeout' => NAN]" => [['connect_timeout' => NAN], [VALUE]],
        "['connect_timeout' => -1]" => [['connect_timeout' => -1], [VALUE]],
        "['connect_timeout' => 0]" => [['connect_timeout' => 0], [VALUE, '/^ok: /']],
        "['connect_timeout' => INF]" => [['connect_timeout' => INF], [VALUE, '/^ok: /']],
        "['connect_timeout' => '1']" => [['connect_timeout' => '1'], [TYPE]],
        "['read_timeout' => NAN]" => [['read_timeout' => NAN], [VALUE]],
        "['read_timeout' => -1]" => [['read_timeout' => -1], [VALUE]],
        "['read_timeout' => []]" => [['read_timeout' => []], [TYPE]],
        "['ttl' => 5] (unknown)" => [['ttl' => 5], [VALUE]],
        "[1 => true]" => [[1 => true], [VALUE]],
        'a non-UTF-8 key' => [["\xff\xfe" => true], [VALUE]],
    ] as $what => [$opts, $expect]) {
        input("Redis options $what", fn () => new \CronLock\Redis("redis://127.0.0.1:$port", 'k', 10.0, $opts), $expect);
    }
} else {
    T::pending('Redis hostile inputs (about 45 DSNs, keys, TTLs, options, password in messages)');
}

// ---------------------------------------------------------------- run them

T::say('hostile input:');
$byClass = [];
$n = 0;
$only = getenv('TORTURE_ONLY') ?: null;   // a regex, to re-run some inputs by name
foreach ($cases as [$what, $run, $expect, $mayChange, $setup]) {
    $n++;
    if ($only !== null && !preg_match($only, $what)) {
        continue;
    }
    if ($setup !== null) {
        $setup();
    }
    clearstatcache();
    $before = snapshot($sb);
    $t0 = microtime(true);
    $result = outcome($run);
    $dt = microtime(true) - $t0;
    clearstatcache();
    $changes = snapshot_diff($before, snapshot($sb));
    $unexpected = array_values(array_filter($changes, function (string $c) use ($mayChange) {
        $path = preg_replace('/^(created|changed|removed) (.*?)( \(.*)?$/s', '$2', $c);
        foreach ($mayChange as $re) {
            if (preg_match($re . 's', $path)) {
                return false;
            }
        }
        return true;
    }));
    $matched = false;
    foreach ($expect as $re) {
        if (preg_match($re . 's', $result)) {
            $matched = true;
        }
    }
    T::add('inputs');
    $class = preg_match('/^([A-Za-z\\\\]+):/', $result, $cm) ? $cm[1] : '?';
    $byClass[$class] = ($byClass[$class] ?? 0) + 1;
    $shown = str_replace(["\0", "\n"], ['\\0', '\\n'], mb_strimwidth($result, 0, 160, '…'));
    T::check($matched, sprintf('input %d %s => %s', $n, $what, $shown) . ($matched ? '' : ' (expected ' . implode(' or ', $expect) . ')'));
    T::check($unexpected === [], "input $n $what: nothing written outside the intended lock file" . ($unexpected ? ': ' . implode('; ', $unexpected) : ''));
    if ($dt > 30) {
        T::fail("input $n $what took {$dt}s");
    }
    if (T::$verbose) {
        printf("  %3d. %-70s -> %s%s%s\n", $n, str_replace(["\0", "\n"], ['\\0', '\\n'], $what), $shown, $changes ? '   [sandbox: ' . implode('; ', $changes) . ']' : '', $dt > 1 ? sprintf('  (%.1fs)', $dt) : '');
    }
}
if ($roMounted) {
    exec('umount ' . escapeshellarg($ro));
}
if (isset($GLOBALS['redisServer'])) {
    $GLOBALS['redisServer']->stop();
}
// a few inputs leave objects behind: the process must still end cleanly
$held->release();
ksort($byClass);
T::say(sprintf('  %d distinct inputs tried; outcomes: %s', $n, implode(', ', array_map(fn ($k, $v) => "$k $v", array_keys($byClass), $byClass))));
T::finish();

<?php

// The renewal helper process of cronlock/polyfill's CronLock\Redis (see
// Renewer.php): one per holder process, for all its holds that renew. Reads
// "INIT <json>" on stdin, then "HOLD <json>", "DROP <id>", "QUIT"; renews each
// hold every ttl/3; exits when stdin closes (the holder died) or when the
// process that started it is gone (a fork child of it may keep stdin open).

spl_autoload_register(static function ($class) {
    if (strncmp($class, 'CronLock\\Polyfill\\', 18) === 0) {
        $name = substr($class, 18);
        $file = __DIR__ . '/' . (in_array($name, ['PhpRedisClient', 'PredisClient', 'RedisFailure'], true) ? 'RedisClient' : $name) . '.php';
        if (is_file($file)) {
            require_once $file;
        }
    } elseif (strncmp($class, 'CronLock\\', 9) === 0) {
        $file = dirname(__DIR__) . '/' . substr($class, 9) . '.php';
        if (is_file($file)) {
            require_once $file;
        }
    }
});

use CronLock\Polyfill\Process;
use CronLock\Polyfill\RedisClient;
use CronLock\Polyfill\RedisDsn;
use CronLock\Polyfill\Scripts;

/** Longest pause between renewals of a hold after a failed one. */
const RENEW_RETRY_MAX = 1.0;

// Everything comes through one fread() buffer: a buffered fgets() would keep
// lines that stream_select() then never reports.
$pending = '';
$line = static function () use (&$pending) {
    $nl = strpos($pending, "\n");
    if ($nl === false) {
        return null;
    }
    $line = substr($pending, 0, $nl);
    $pending = (string) substr($pending, $nl + 1);
    return $line;
};
while (strpos($pending, "\n") === false) {
    $data = fread(STDIN, 65536);
    if ($data === '' || $data === false) {
        exit(1);
    }
    $pending .= $data;
}
$init = (string) $line();
$job = strncmp($init, 'INIT ', 5) === 0 ? json_decode(substr($init, 5), true) : null;
if (!is_array($job)) {
    exit(1);
}
if ($job['autoload'] !== null) {
    require_once $job['autoload'];
    if (class_exists('Predis\Autoloader', false)) {
        Predis\Autoloader::register();
    }
}
// The process that started us is our parent (proc_open() exec'ed us): once
// it is gone we are reparented, and renew no more, as the extension's
// renewal thread dies with its process. Where our parent cannot be read, or
// is not the owner to begin with, only stdin closing ends us.
$parentPid = static function () {
    if (function_exists('posix_getppid')) {
        return posix_getppid();
    }
    $stat = @file_get_contents('/proc/self/stat');
    $paren = is_string($stat) ? strrpos($stat, ')') : false;
    if ($paren === false) {
        return null;
    }
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses
    $fields = explode(' ', substr($stat, $paren + 2));
    return isset($fields[1]) ? (int) $fields[1] : null;
};
$owner = (int) $job['owner'];
$watchOwner = $parentPid() === $owner;
$ownerGone = static function () use ($watchOwner, $parentPid, $owner) {
    return $watchOwner && $parentPid() !== $owner;
};
// "pid (comm) state ...": T (stopped) or t (stopped while traced)
$ownerStopped = static function () use ($owner) {
    $stat = @file_get_contents("/proc/$owner/stat");
    $paren = is_string($stat) ? strrpos($stat, ')') : false;
    return $paren !== false && in_array(substr($stat, $paren + 2, 1), ['T', 't'], true);
};
echo "READY\n";

/** @var array<string, array<string, mixed>> the holds we renew, by id */
$holds = [];
/** @var array<string, RedisClient> one connection per server and credentials */
$clients = [];
/** @var array<string, float> servers that just did not answer, until when their holds wait */
$down = [];
$serverOf = static function (array $dsn) {
    return json_encode($dsn);
};
$connect = static function (array $hold) use (&$clients) {
    if (!isset($clients[$hold['server']])) {
        $dsn = new RedisDsn();
        foreach ($hold['dsn'] as $field => $value) {
            $dsn->$field = $value;
        }
        $clients[$hold['server']] = RedisClient::open($dsn, (float) $hold['connect_timeout'], (float) $hold['read_timeout']);
    }
    return $clients[$hold['server']];
};
while (true) {
    $next = null;
    foreach ($holds as $hold) {
        $next = $next === null ? $hold['next'] : min($next, $hold['next']);
    }
    if (strpos($pending, "\n") !== false) {
        $ready = 1; // lines already read
    } else {
        $read = [STDIN];
        $none = null;
        // idle: wake up now and then to see whether the owner is gone
        $left = $next === null ? ($watchOwner ? 1.0 : null) : max(0.0, $next - Process::now());
        $ready = $left === null
            ? @stream_select($read, $none, $none, null)
            : @stream_select($read, $none, $none, (int) floor($left), (int) (($left - floor($left)) * 1e6));
        if ($ready === false) {
            continue; // a signal
        }
        if ($ready > 0) {
            $data = fread(STDIN, 65536);
            if ($data === '' || $data === false) {
                exit(0); // the holder is gone
            }
            $pending .= $data;
        }
    }
    if ($ready > 0) {
        while (($command = $line()) !== null) {
            if (strncmp($command, 'HOLD ', 5) === 0) {
                $hold = json_decode(substr($command, 5), true);
                if (!is_array($hold)) {
                    continue;
                }
                $hold['server'] = $serverOf($hold['dsn']);
                $hold['ttl'] = (float) $hold['ttl'];
                $hold['ttl_ms'] = (string) max(1, (int) ceil($hold['ttl'] * 1000));
                // counted from when the acquire was sent, as the holder counts
                $hold['valid_until'] = (float) $hold['sent'] + $hold['ttl'];
                $hold['next'] = (float) $hold['sent'] + $hold['ttl'] / 3;
                $holds[$hold['id']] = $hold;
                try {
                    // Now, not at the first renewal: a slow connect (a TLS
                    // handshake) must not delay it. A failed one is retried then.
                    $connect($hold);
                } catch (Throwable $e) {
                    unset($clients[$hold['server']]);
                }
            } elseif (strncmp($command, 'DROP ', 5) === 0) {
                unset($holds[substr($command, 5)]);
            } elseif ($command === 'QUIT') {
                // the holder's lock objects are gone; a fork child of the
                // holder may keep this stdin open for as long as it lives
                exit(0);
            }
        }
        continue;
    }
    if ($ownerGone()) {
        exit(0); // the holder died (kill -9): its keys expire by their TTL
    }
    if ($ownerStopped()) {
        // SIGSTOP, or Ctrl-Z (which stops us too, unless the holder's
        // handler goes on): a stopped holder renews nothing, as the
        // extension's renewal thread stops with its process.
        foreach ($holds as $id => $hold) {
            $holds[$id]['next'] = max($hold['next'], Process::now() + min($hold['ttl'] / 3, 0.1));
        }
        continue;
    }
    foreach ($holds as $id => $hold) {
        $now = Process::now();
        if ($hold['next'] > $now) {
            continue;
        }
        // One stalled server must not make the others' holds wait: after a
        // renewal found it unreachable, its other holds wait for the retry.
        if (isset($down[$hold['server']]) && $down[$hold['server']] > $now) {
            echo "DOWN $id\n";
            if ($now >= $hold['valid_until']) {
                printf("LOST %s unreachable %.6F\n", $id, $hold['valid_until']);
                unset($holds[$id]);
            } else {
                $holds[$id]['next'] = $down[$hold['server']];
            }
            continue;
        }
        $sent = $now;
        try {
            $client = $connect($hold);
            $reply = $client->script(Scripts::get(Scripts::RENEW), [$hold['key']], [$hold['token'], $hold['ttl_ms'], (string) $hold['window_end']]);
            if ((int) $reply !== 1) {
                // -1: no key at all; 0: someone else's value (renew.lua)
                printf("LOST %s %s %.6F\n", $id, (int) $reply === -1 ? 'gone' : 'another', Process::now());
                unset($holds[$id]);
                continue;
            }
            $holds[$id]['valid_until'] = $sent + $hold['ttl'];
            $holds[$id]['next'] = $sent + $hold['ttl'] / 3;
            printf("RENEWED %s %.6F\n", $id, $sent + $hold['ttl']);
        } catch (Throwable $e) {
            if (isset($clients[$hold['server']])) {
                $clients[$hold['server']]->close();
                unset($clients[$hold['server']]);
            }
            $down[$hold['server']] = Process::now() + RENEW_RETRY_MAX;
            echo "DOWN $id\n"; // a hold that runs out now ran out for this
            if (Process::now() >= $hold['valid_until']) {
                printf("LOST %s unreachable %.6F\n", $id, $hold['valid_until']);
                unset($holds[$id]);
                continue;
            }
            $holds[$id]['next'] = Process::now() + min($hold['ttl'] / 3, RENEW_RETRY_MAX);
        }
    }
}

<?php

// The auto-renew helper process of cronlock/polyfill's CronLock\Redis (see
// Renewer.php). Reads its job as one JSON line on stdin; renews every ttl/3;
// exits when stdin closes (released, or the holder died), when the process
// that took the lock is gone (a fork child of it may keep stdin open), or
// the key is lost.

spl_autoload_register(static function ($class) {
    if (strncmp($class, 'CronLock\\Polyfill\\', 18) === 0) {
        $name = substr($class, 18);
        $file = __DIR__ . '/' . (in_array($name, ['PhpRedisClient', 'PredisClient', 'RedisFailure'], true) ? 'RedisClient' : $name) . '.php';
        if (is_file($file)) {
            require_once $file;
        }
    }
});

// Everything comes through one fread() buffer: a buffered fgets() would keep
// lines that stream_select() then never reports.
$pending = '';
while (($nl = strpos($pending, "\n")) === false) {
    $data = fread(STDIN, 8192);
    if ($data === '' || $data === false) {
        exit(1);
    }
    $pending .= $data;
}
$job = json_decode(substr($pending, 0, $nl), true);
$pending = (string) substr($pending, $nl + 1);
if (!is_array($job)) {
    exit(1);
}
if ($job['autoload'] !== null) {
    require_once $job['autoload'];
    if (class_exists('Predis\Autoloader', false)) {
        Predis\Autoloader::register();
    }
}
$dsn = new CronLock\Polyfill\RedisDsn();
foreach ($job['dsn'] as $field => $value) {
    $dsn->$field = $value;
}
// The process that took the lock is our parent (proc_open() exec'ed us):
// once it is gone we are reparented, and renew no more, as the extension's
// renewer thread dies with its process. Where our parent cannot be read, or
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
$ttl = (float) $job['ttl'];
// Connected before READY, which the lock waits for before it takes the key:
// a slow connect (a TLS handshake, a cold start) delays that acquire, never
// the first renewal. A failed one is retried at each renewal, as below.
$client = null;
try {
    $client = CronLock\Polyfill\RedisClient::open($dsn, (float) $job['connect_timeout'], (float) $job['read_timeout']);
} catch (Throwable $e) {
    $client = null;
}
echo "READY\n";
$period = $ttl / 3;
$ttlMs = (string) max(1, (int) ceil($ttl * 1000));
$token = null;   // what we renew now; null: idle
$seq = 0;
$windowEnd = '0'; // the once-per window's end in ms, below which a renewal never shortens the key's life
$validUntil = 0.0;
$next = 0.0;
while (true) {
    if (strpos($pending, "\n") !== false) {
        $ready = 1; // lines already read
    } else {
        $read = [STDIN];
        $none = null;
        if ($token === null) {
            // idle: wake up now and then to see whether the owner is gone
            $ready = @stream_select($read, $none, $none, $watchOwner ? 1 : null);
        } else {
            $left = max(0.0, $next - CronLock\Polyfill\Process::now());
            $ready = @stream_select($read, $none, $none, (int) floor($left), (int) (($left - floor($left)) * 1e6));
        }
        if ($ready === false) {
            continue; // a signal
        }
        if ($ready > 0) {
            $data = fread(STDIN, 8192);
            if ($data === '' || $data === false) {
                exit(0); // the lock object or its process is gone
            }
            $pending .= $data;
        }
    }
    if ($ready > 0) {
        while (($nl = strpos($pending, "\n")) !== false) {
            $f = explode(' ', substr($pending, 0, $nl));
            $pending = (string) substr($pending, $nl + 1);
            if ($f[0] === 'HOLD' && count($f) === 5) {
                list(, $seq, $token, $windowEnd, $sent) = $f;
                // counted from when the acquire was sent, as the holder counts
                $validUntil = (float) $sent + $ttl;
                $next = (float) $sent + $period;
            } elseif ($f[0] === 'IDLE') {
                $token = null;
            } elseif ($f[0] === 'QUIT') {
                // the lock object is gone; a fork child of the holder may
                // keep this stdin open for as long as it lives
                exit(0);
            }
        }
        continue;
    }
    if ($ownerGone()) {
        exit(0); // the holder died (kill -9): its key expires by its TTL
    }
    if ($token === null) {
        continue;
    }
    if ($ownerStopped()) {
        // SIGSTOP, or Ctrl-Z (which stops us too, unless the holder's
        // handler goes on): a stopped holder renews nothing, as the
        // extension's renewer thread stops with its process.
        $next = CronLock\Polyfill\Process::now() + min($period, 0.1);
        continue;
    }
    $sent = CronLock\Polyfill\Process::now();
    try {
        if ($client === null) {
            $client = CronLock\Polyfill\RedisClient::open($dsn, (float) $job['connect_timeout'], (float) $job['read_timeout']);
        }
        if ((int) $client->script(CronLock\Polyfill\Scripts::get(CronLock\Polyfill\Scripts::RENEW), [$job['key']], [$token, $ttlMs, $windowEnd]) !== 1) {
            echo "LOST $seq\n";
            $token = null;
            continue;
        }
        $validUntil = $sent + $ttl;
        printf("RENEWED %d %.6F\n", $seq, $validUntil);
        $next = $sent + $period;
    } catch (Throwable $e) {
        if ($client !== null) {
            $client->close();
            $client = null;
        }
        if (CronLock\Polyfill\Process::now() >= $validUntil) {
            echo "LOST $seq\n";
            $token = null;
            continue;
        }
        $next = CronLock\Polyfill\Process::now() + min($period, 1.0);
    }
}

<?php

// The auto-renew helper process of cronlock/polyfill's CronLock\Redis (see
// Renewer.php). Reads its job as one JSON line on stdin; renews every ttl/3;
// exits when stdin closes (released, or the holder died) or the key is lost.

spl_autoload_register(static function ($class) {
    if (strncmp($class, 'CronLock\\Polyfill\\', 18) === 0) {
        $name = substr($class, 18);
        $file = __DIR__ . '/' . (in_array($name, ['PhpRedisClient', 'PredisClient', 'RedisFailure'], true) ? 'RedisClient' : $name) . '.php';
        if (is_file($file)) {
            require_once $file;
        }
    }
});

$job = json_decode((string) fgets(STDIN), true);
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
$ttl = (float) $job['ttl'];
$period = $ttl / 3;
$ttlMs = (string) max(1, (int) ceil($ttl * 1000));
$renew = "
-- KEYS[1] lock key; ARGV[1] token, ARGV[2] ttl in ms
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
";
$client = null;
$validUntil = microtime(true) + $ttl;
$next = microtime(true) + $period;
while (true) {
    $left = max(0.0, $next - microtime(true));
    $read = [STDIN];
    $none = null;
    $ready = @stream_select($read, $none, $none, (int) floor($left), (int) (($left - floor($left)) * 1e6));
    if ($ready > 0) {
        $data = fread(STDIN, 8192);
        if ($data === '' || $data === false || feof(STDIN)) {
            exit(0); // released, or the holder is gone
        }
        continue;
    }
    if ($ready === false) {
        continue; // a signal
    }
    $sent = microtime(true);
    try {
        if ($client === null) {
            $client = CronLock\Polyfill\RedisClient::open($dsn, (float) $job['connect_timeout'], (float) $job['read_timeout']);
        }
        if ((int) $client->script($renew, [$job['key']], [$job['token'], $ttlMs]) !== 1) {
            echo "LOST\n";
            exit(0);
        }
        $validUntil = $sent + $ttl;
        printf("RENEWED %.6F\n", $validUntil);
        $next = $sent + $period;
    } catch (Throwable $e) {
        if ($client !== null) {
            $client->close();
            $client = null;
        }
        if (microtime(true) >= $validUntil) {
            echo "LOST\n";
            exit(0);
        }
        $next = microtime(true) + min($period, 1.0);
    }
}

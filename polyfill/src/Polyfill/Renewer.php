<?php

namespace CronLock\Polyfill;

use CronLock\LockException;

/**
 * Renewal without threads: one helper PHP process per process
 * (renew-helper.php), started with the first hold that renews (a lease, or
 * 'auto_renew'), renews every such hold of this process every ttl/3 with the
 * token-checked renew script, on connections of its own (one per server and
 * credentials), as the extension's one renewal thread does (decision D18).
 *
 * It learns everything, passwords included, on its stdin (never argv, which
 * `ps` shows): "INIT <json>" once, then "HOLD <json>" (a hold, or its new
 * once-per window), "DROP <id>" and "QUIT". It exits as soon as that pipe
 * closes (this process died), and before any renewal once this process is
 * gone (kill -9 included) even while a pcntl_fork() child keeps the pipe
 * open: it checks that its parent is still this process. So a dead holder's
 * key still expires within one TTL. It says READY once it has read INIT (the
 * lock waits for that before it takes the key, so a slow start never delays
 * the first renewal), then reports each renewal ("RENEWED <id> <until>", on
 * the Process::now() clock) and a key that is no longer ours ("LOST <id> <why> <when>",
 * why: gone, another or unreachable).
 *
 * @internal
 */
final class Renewer
{
    /** Longest wait for a starting helper to say READY. */
    const START_TIMEOUT = 10.0;

    /** @var self|null the helper of this process */
    private static $shared;
    /** @var array<int, self> a fork child's copies of its parent's helper: never used, never stopped */
    private static $inherited = [];

    /** @var resource|null */
    private $proc;
    /** @var resource */
    private $in;
    /** @var resource */
    private $out;
    /** @var string */
    private $buffer = '';
    /** @var int */
    private $ownerPid;
    /** @var string the PHP binary it runs on, for messages */
    private $php = '';
    /** @var bool it said READY */
    private $ready = false;
    /** @var bool it exited, or its pipe broke */
    private $gone = false;
    /** @var array<string, array<int, array{0: string, 1: float}>> reports not yet picked up, by hold */
    private $reports = [];

    /**
     * The helper of this process, started (and ready) if it is not.
     *
     * @throws LockException when it cannot be started
     */
    public static function shared(): self
    {
        $pid = Process::pid();
        $helper = self::$shared;
        if ($helper !== null && $helper->ownerPid === $pid && !$helper->gone) {
            $helper->awaitReady();
            return $helper;
        }
        if ($helper !== null && $helper->ownerPid !== $pid) {
            self::$inherited[] = $helper; // the parent's
        } elseif ($helper !== null) {
            $helper->stop(); // it died: start a new one
        }
        self::$shared = null;
        $helper = self::start(RedisClient::available());
        self::$shared = $helper;
        $helper->awaitReady();
        return $helper;
    }

    /** @throws LockException */
    private static function start(string $library): self
    {
        $php = PHP_BINARY;
        if (!in_array(PHP_SAPI, ['cli', 'phpdbg'], true) || $php === '' || !is_executable($php)) {
            $php = PHP_BINDIR . '/php'; // php-fpm's PHP_BINARY is php-fpm itself
        }
        // The helper stands in for the extension's renewal thread: signals
        // sent to the job's process group (Ctrl-C, a hang-up, timeout(1),
        // kill -TERM -PGID) are the holder's to handle, and a holder that
        // handles them and finishes its job must stay the holder. Ignored
        // here (the shell's SIG_IGN survives exec), the helper still ends
        // with the holder: it checks before each renewal that the holder
        // lives, and stdin closes when the holder dies. Stop signals (Ctrl-Z)
        // are not ignored, and a stopped holder is not renewed for.
        $command = "trap '' HUP INT QUIT TERM ALRM USR1 USR2 XCPU; exec " . escapeshellarg($php) . ' ' . escapeshellarg(__DIR__ . '/renew-helper.php');
        $spec = [0 => ['pipe', 'r'], 1 => ['pipe', 'w'], 2 => ['file', '/dev/null', 'w']];
        $pipes = [];
        $proc = function_exists('proc_open') ? @proc_open($command, $spec, $pipes) : false;
        if (!is_resource($proc)) {
            throw new LockException("cannot start the auto-renew process ($php): " . FileSystem::lastReason());
        }
        $self = new self();
        $self->proc = $proc;
        $self->in = $pipes[0];
        $self->out = $pipes[1];
        $self->ownerPid = Process::pid();
        $self->php = $php;
        stream_set_blocking($self->out, false);
        $self->send('INIT ' . json_encode([
            'library' => $library,
            'autoload' => self::predisAutoload($library),
            'owner' => $self->ownerPid,
        ]));
        return $self;
    }

    /**
     * Waits for the helper's READY line (once); throws (and ends it) when it exits or stays silent.
     *
     * @throws LockException
     */
    private function awaitReady()
    {
        if ($this->ready) {
            return;
        }
        $php = $this->php;
        $deadline = Process::now() + self::START_TIMEOUT;
        while (($nl = strpos($this->buffer, "\n")) === false) {
            $left = $deadline - Process::now();
            if ($left <= 0) {
                $this->stop();
                throw new LockException(sprintf('cannot start the auto-renew process (%s): it did not start within %d s', $php, self::START_TIMEOUT));
            }
            $read = [$this->out];
            $none = null;
            // (a pipe stream_select() cannot watch: short pauses instead)
            if (@stream_select($read, $none, $none, 0, (int) (min($left, 0.05) * 1e6)) === false) {
                usleep(5000);
            }
            $chunk = @fread($this->out, 8192);
            if (is_string($chunk) && $chunk !== '') {
                $this->buffer .= $chunk;
            } elseif (feof($this->out)) {
                $this->stop();
                throw new LockException("cannot start the auto-renew process ($php): it exits at once");
            }
        }
        $line = substr($this->buffer, 0, $nl);
        $this->buffer = (string) substr($this->buffer, $nl + 1);
        if ($line !== 'READY') {
            $this->stop();
            throw new LockException("cannot start the auto-renew process ($php): it said '" . addcslashes(Args::cut($line), "\0..\37") . "'");
        }
        $this->ready = true;
    }

    /** The file that makes predis autoloadable in the helper (Composer's, or predis' own). */
    private static function predisAutoload(string $library): ?string
    {
        if ($library !== 'predis') {
            return null;
        }
        if (class_exists('Composer\Autoload\ClassLoader', false)) {
            $vendor = dirname(dirname((string) (new \ReflectionClass('Composer\Autoload\ClassLoader'))->getFileName()));
            if (is_file("$vendor/autoload.php")) {
                return "$vendor/autoload.php";
            }
        }
        $file = (string) (new \ReflectionClass('Predis\Client'))->getFileName();
        $auto = dirname($file) . '/Autoloader.php';
        return is_file($auto) ? $auto : null;
    }

    /**
     * Renew $token on $dsn every $ttl/3, the first renewal due $ttl/3 after $sent (the
     * Process::now() at which the acquire was sent; at once if that has passed), never
     * shortening the key's life below $windowEnd (Unix ms of the server's clock; 0: no
     * once-per window). Sent again for the same $id when a once-per acquire confirmed the hold
     * to a later window's end: the renewals then count from that confirm's $sent.
     *
     * @return bool false if the helper is gone
     */
    public function hold(string $id, RedisDsn $dsn, string $key, string $token, float $ttl, float $connectTimeout, float $readTimeout, int $windowEnd, float $sent): bool
    {
        unset($this->reports[$id]);
        return $this->send('HOLD ' . json_encode([
            'id' => $id,
            'dsn' => get_object_vars($dsn) + ['password' => $dsn->password],
            'key' => $key,
            'token' => $token,
            'ttl' => $ttl,
            'connect_timeout' => $connectTimeout,
            'read_timeout' => $readTimeout,
            'window_end' => $windowEnd,
            'sent' => $sent,
        ]));
    }

    /** Stop renewing hold $id (the helper stays for the next acquire). */
    public function drop(string $id)
    {
        unset($this->reports[$id]);
        if (Process::pid() === $this->ownerPid) {
            $this->send("DROP $id");
        }
    }

    /** The helper's word for why a hold was lost, and the lost line's (CronLock\Redis::LOSS_*). */
    const LOSSES = [
        'gone' => \CronLock\Redis::LOSS_KEY_GONE,
        'another' => \CronLock\Redis::LOSS_ANOTHER_TOKEN,
        'unreachable' => \CronLock\Redis::LOSS_UNREACHABLE,
    ];

    /** @return array<int, array{0: string, 1: float, 2?: string}> what the helper reported about hold $id since: ['RENEWED', until], ['DOWN', 0.0] (a renewal could not reach the server) or ['LOST', when (Process::now() clock), why] */
    public function reports(string $id): array
    {
        if (Process::pid() !== $this->ownerPid) {
            return [];
        }
        $chunk = @fread($this->out, 65536);
        if (is_string($chunk)) {
            $this->buffer .= $chunk;
        }
        if ($chunk === false || ($chunk === '' && feof($this->out))) {
            $this->gone = true;
        }
        while (($nl = strpos($this->buffer, "\n")) !== false) {
            $f = explode(' ', substr($this->buffer, 0, $nl));
            $this->buffer = (string) substr($this->buffer, $nl + 1);
            if ($f[0] === 'LOST' && count($f) === 4 && isset(self::LOSSES[$f[2]])) {
                $this->reports[$f[1]][] = ['LOST', (float) $f[3], self::LOSSES[$f[2]]];
            } elseif ($f[0] === 'DOWN' && count($f) === 2) {
                $this->reports[$f[1]][] = ['DOWN', 0.0];
            } elseif ($f[0] === 'RENEWED' && count($f) === 3) {
                $this->reports[$f[1]][] = ['RENEWED', (float) $f[2]];
            }
        }
        $mine = isset($this->reports[$id]) ? $this->reports[$id] : [];
        unset($this->reports[$id]);
        return $mine;
    }

    private function send(string $line): bool
    {
        if ($this->proc === null || Process::pid() !== $this->ownerPid) {
            return false;
        }
        $sent = @fwrite($this->in, $line . "\n") !== false && @fflush($this->in);
        $this->gone = $this->gone || !$sent;
        return $sent;
    }

    /**
     * QUIT ends it (closing its stdin is not enough while a pcntl_fork() child keeps a copy
     * open); then wait for it (it is between renewals, or in one bounded by read_timeout).
     */
    private function stop()
    {
        if ($this->proc === null || Process::pid() !== $this->ownerPid) {
            return;
        }
        @fwrite($this->in, "QUIT\n");
        @fflush($this->in);
        @fclose($this->in);
        @fclose($this->out);
        @proc_close($this->proc);
        $this->proc = null;
        $this->gone = true;
    }

    public function __destruct()
    {
        $this->stop();
    }
}

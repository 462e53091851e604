<?php

namespace CronLock\Polyfill;

use CronLock\LockException;

/**
 * 'auto_renew' without threads: a helper PHP process (renew-helper.php), one per
 * lock object, with its own connection renews the key every ttl/3 with the
 * token-checked renew script while the lock is held ("HOLD <n> <token> <window end> <sent>"
 * until "IDLE" on its stdin). It learns everything, the password included,
 * on its stdin (never argv, which `ps` shows), and exits as soon as that
 * pipe closes (the lock object went away, or this process died), and before
 * any renewal once this process is gone (kill -9 included) even while a
 * pcntl_fork() child keeps the pipe open: it checks that its parent is still
 * this process. So a dead holder's key still expires within one TTL.
 * It says READY once it has read its job and connected (the lock waits for
 * that before it takes the key, so a slow connect never delays the first
 * renewal), then reports each renewal ("RENEWED <n> <unix time until which the key is
 * ours>") and a key that is no longer ours ("LOST <n>") on its stdout.
 *
 * @internal
 */
final class Renewer
{
    /** @var resource */
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

    public static function start(RedisDsn $dsn, string $library, string $key, float $ttl, float $connectTimeout, float $readTimeout): self
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
        $command = "trap '' HUP INT QUIT TERM; exec " . escapeshellarg($php) . ' ' . escapeshellarg(__DIR__ . '/renew-helper.php');
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
        stream_set_blocking($self->out, false);
        $job = [
            'library' => $library,
            'autoload' => self::predisAutoload($library),
            'dsn' => get_object_vars($dsn) + ['password' => $dsn->password],
            'owner' => $self->ownerPid,
            'key' => $key,
            'ttl' => $ttl,
            'connect_timeout' => $connectTimeout,
            'read_timeout' => $readTimeout,
        ];
        fwrite($self->in, json_encode($job) . "\n");
        fflush($self->in);
        $self->php = $php;
        return $self;
    }

    /** Longest wait for a starting helper to say READY. */
    const START_TIMEOUT = 10.0;

    /**
     * Waits for the helper's READY line (once); throws (and ends it) when it exits or stays silent.
     *
     * @throws LockException
     */
    public function awaitReady()
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
     * Renew $token (it belongs to acquisition number $seq, whose script was sent at $sent,
     * Process::now()), never shortening the key's life below $windowEnd (Unix ms of the server's
     * clock; 0: no once-per window). The first renewal is due $ttl/3 after $sent (at once if
     * that has passed). Sent again for the same $seq when a once-per acquire confirmed the hold
     * to a later window's end: the renewals then count from that confirm's $sent.
     *
     * @return bool false if the helper is gone
     * @throws LockException when it never became ready
     */
    public function hold(int $seq, string $token, int $windowEnd, float $sent): bool
    {
        $this->awaitReady();
        return @fwrite($this->in, sprintf("HOLD %d %s %d %.6F\n", $seq, $token, $windowEnd, $sent)) !== false && @fflush($this->in);
    }

    /** Stop renewing (the process stays for the next acquire). */
    public function idle()
    {
        if ($this->proc !== null && Process::pid() === $this->ownerPid) {
            @fwrite($this->in, "IDLE\n");
            @fflush($this->in);
        }
    }

    /** @return array<int, array{0: string, 1: int, 2: float}> ['RENEWED', n, until] or ['LOST', n, 0.0] */
    public function reports(): array
    {
        if (Process::pid() !== $this->ownerPid) {
            return [];
        }
        $chunk = @fread($this->out, 8192);
        if (is_string($chunk)) {
            $this->buffer .= $chunk;
        }
        $reports = [];
        while (($nl = strpos($this->buffer, "\n")) !== false) {
            $line = substr($this->buffer, 0, $nl);
            $this->buffer = (string) substr($this->buffer, $nl + 1);
            $f = explode(' ', $line);
            if ($f[0] === 'LOST' && count($f) === 2) {
                $reports[] = ['LOST', (int) $f[1], 0.0];
            } elseif ($f[0] === 'RENEWED' && count($f) === 3) {
                $reports[] = ['RENEWED', (int) $f[1], (float) $f[2]];
            }
        }
        return $reports;
    }

    /**
     * QUIT ends it (closing its stdin is not enough while a pcntl_fork() child keeps a copy
     * open); then wait for it (it is between renewals, or in one bounded by read_timeout).
     */
    public function stop()
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
    }

    /** In a fork child: the parent's helper, not ours to stop. */
    public function disown()
    {
        $this->ownerPid = -1;
    }

    public function __destruct()
    {
        $this->stop();
    }
}

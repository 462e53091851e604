<?php

namespace CronLock\Polyfill;

use CronLock\File;
use CronLock\Lock;
use CronLock\LockException;
use CronLock\Redis;

/**
 * One run of a job under its hold (a lost hold is always reported: decision
 * D20), as cron_guard() and its Guard see it
 * (the extension's `Run` in src/php/guard.rs): when and why the hold was
 * found gone, the lost lines (once when noticed, once at the end), and the
 * run's record fields.
 *
 * @internal
 */
final class Run
{
    /** @var Lock */
    private $lock;
    /** @var string the lock as the lines name it */
    private $what;
    /** @var string the record's name of the lock */
    private $recordName;
    /** @var Report */
    public $report;
    /** @var bool */
    private $onLostThrow;
    /** @var float */
    private $waited;
    /** @var float */
    private $acquired;
    /** @var float Unix time of the acquire, for a loss's time */
    private $acquiredAt;
    /** @var array{0: float, 1: string}|null when (Unix seconds) and why */
    private $loss;

    public function __construct(Lock $lock, string $what, string $recordName, Report $report, bool $onLostThrow, float $waited)
    {
        $this->lock = $lock;
        $this->what = $what;
        $this->recordName = $recordName;
        $this->report = $report;
        $this->onLostThrow = $onLostThrow;
        $this->waited = $waited;
        $this->acquired = Process::now();
        $this->acquiredAt = microtime(true);
    }

    /** @return array{lock: string, outcome: string, waited_ms: int, held_ms: int, holder: ?string} */
    public function fields(string $outcome): array
    {
        return [
            'lock' => $this->recordName,
            'outcome' => $outcome,
            'waited_ms' => (int) floor($this->waited * 1000),
            'held_ms' => (int) floor($this->held() * 1000),
            'holder' => Process::pid() . '@' . Process::hostname(),
        ];
    }

    /** Seconds the hold lasted: until now, or until its loss was found (not held after that). */
    private function held(): float
    {
        $held = Process::now() - $this->acquired;
        return $this->loss === null ? $held : max(0.0, min($held, $this->loss[0] - $this->acquiredAt));
    }

    /** `at 14:52:07Z: the key holds another token`; null while held. */
    public function lossWords(): ?string
    {
        return $this->loss === null ? null : 'at ' . Report::clock((int) floor($this->loss[0])) . ': ' . $this->loss[1];
    }

    public function lost(): bool
    {
        return $this->loss !== null;
    }

    /** Notes the hold gone (once); $whileRunning: logs the line of a loss noticed before the job's end. */
    public function lose(string $fallback, bool $whileRunning)
    {
        if ($this->loss !== null) {
            return;
        }
        $this->loss = self::lossOf($this->lock, $fallback);
        if ($whileRunning) {
            $this->report->failure('lost', "cron_guard: lock {$this->what} was lost ({$this->lossWords()}) while its job runs; another run may start", $this->fields('lost'));
        }
    }

    /** Whether the lock still believes it holds; a hold found gone is noted. */
    public function check()
    {
        if ($this->loss === null && !$this->lock->isHeld()) {
            $this->lose('isHeld() returned false', true);
        }
    }

    /** @throws LockException for a lost hold with 'on_lost' => 'throw' */
    public function refuseIfLost()
    {
        if ($this->onLostThrow && $this->loss !== null) {
            throw new LockException(Args::escapeControls("lock {$this->what} was lost ({$this->lossWords()}); another run may have started", true));
        }
    }

    /**
     * The job's end: a failing release's line, a loss release() found, the lost line, the record.
     *
     * @param ?\Throwable $failed what the job threw
     * @param ?array{0: \Throwable, 1: string} $releaseFailure what release() threw, and its line
     */
    public function finish(?bool $released, ?\Throwable $failed, ?array $releaseFailure)
    {
        if ($released === false) {
            $this->lose('release() returned false', false);
        }
        // The job's exception is what cron_guard() throws, so the record names it; a release
        // failure thrown after a job that returned comes next.
        if ($failed !== null) {
            $outcome = 'failed: ' . get_class($failed);
        } elseif ($releaseFailure !== null) {
            $outcome = 'release_failed: ' . get_class($releaseFailure[0]);
        } else {
            $outcome = $this->loss !== null ? 'lost' : 'ran';
        }
        if ($releaseFailure !== null) {
            $this->report->failure('release_failed', $releaseFailure[1], $this->fields($outcome));
        }
        if ($this->loss !== null) {
            $this->report->failure('lost', "cron_guard: lock {$this->what} was lost during the run ({$this->lossWords()}); another run may have started", $this->fields('lost'));
        }
        $this->report->record($this->fields($outcome));
    }

    private static function reason(Lock $lock, string $fallback): string
    {
        if ($lock instanceof File) {
            return @lstat($lock->path()) !== false ? 'its path names another file now' : 'its lock file was removed';
        }
        return $fallback;
    }

    /**
     * When (Unix seconds) and why the hold was lost: a Redis lock says (as the
     * renewal helper or the call that found it saw it), others are asked now.
     *
     * @return array{0: int, 1: string}
     */
    private static function lossOf(Lock $lock, string $fallback): array
    {
        if ($lock instanceof Redis) {
            $found = \Closure::bind(function () {
                return $this->lossFound();
            }, $lock, Redis::class)();
            return $found !== null ? [(float) $found[0], $found[1]] : [microtime(true), "the key no longer holds this lock's token"];
        }
        return [microtime(true), self::reason($lock, $fallback)];
    }
}

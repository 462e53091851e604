<?php

namespace CronLock\Tests\Frameworks\Fixture;

/**
 * The job of the framework tests, in whatever process runs it: a Laravel
 * command event's own process, schedule:run for a callback event, a Symfony
 * console command (bridges/laravel/tests/app, bridges/symfony/tests/app).
 *
 * It appends one line when it starts and one when it ends to the journal:
 *
 *   start <label> pid=<pid> ppid=<ppid> t=<unix time> alone=<1|0>
 *   end <label> pid=<pid> t=<unix time>
 *
 * alone=0 means an overlap: another run of a job on this journal was alive
 * at that moment, however it had been started and whether or not it is still
 * in the journal's books. The job holds an flock(2) on "<journal>.witness"
 * for its whole run (opened close-on-exec, so no program started later
 * inherits it); the kernel drops it the instant the job's process dies, so
 * a job that cannot take it at its start knows another one is alive.
 *
 * FIXTURE_JOB_SECONDS overrides the duration (a test's later tick that must
 * not wait for a long job), FIXTURE_JOB_STATUS is the exit status.
 */
final class Job
{
    /** @return int the exit status: FIXTURE_JOB_STATUS, else 0 */
    public static function run(string $journal, string $label, float $seconds): int
    {
        if (($override = getenv('FIXTURE_JOB_SECONDS')) !== false && $override !== '') {
            $seconds = (float) $override; // a test's later tick that must not wait for a long job
        }
        $witness = fopen("$journal.witness", 'ce');
        $alone = flock($witness, LOCK_EX | LOCK_NB);
        $pid = getmypid();
        self::line($journal, sprintf('start %s pid=%d ppid=%d t=%.6f alone=%d', $label, $pid, posix_getppid(), microtime(true), $alone ? 1 : 0));
        // Or until the test creates "$journal.release": a check made while the job
        // runs then never races the job's end, however slow the machine.
        $until = microtime(true) + $seconds;
        while (($left = $until - microtime(true)) > 0 && !file_exists("$journal.release")) {
            usleep((int) min(50_000, $left * 1e6));
        }
        self::line($journal, sprintf('end %s pid=%d t=%.6f', $label, $pid, microtime(true)));
        if ($alone) {
            flock($witness, LOCK_UN);
        }
        fclose($witness);
        return (int) getenv('FIXTURE_JOB_STATUS');
    }

    private static function line(string $journal, string $line): void
    {
        file_put_contents($journal, $line . "\n", FILE_APPEND | LOCK_EX);
    }
}

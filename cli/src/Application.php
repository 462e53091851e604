<?php

namespace CronLock\Cli;

/** `cronlock COMMAND …`: dispatch, help, and what every failure prints and returns. */
final class Application
{
    const USAGE = <<<'TEXT'
usage: cronlock status [PATH…] [--redis DSN | --redis-env VAR [--prefix P]] [--database DSN | --database-env VAR
                       [--user U] [--password-env VAR] [--name NAME…]] [--stale-after DURATION] [--json]
       cronlock gc --older-than DURATION [--dry-run] [DIR…]
       cronlock run (--lock NAME | --file PATH | --redis DSN --key KEY [--ttl S] | --database DSN --name NAME)
                    [--wait SECONDS] [--on-busy N] -- COMMAND [ARG…]

status  who holds which lock, since when, whether the holder lives, how many runs wait
        (File locks of the default lock directory when no PATH, --redis or --database is given)
gc      removes lock files that nobody holds, waits for or used for DURATION (30d, 12h, 0s)
run     runs COMMAND while holding the lock; a busy lock skips it (exit 0, or --on-busy N)

Exit status: 0 ok; 1 status found a stuck holder (--stale-after); 2 something could not be read
or removed; 64 bad command line; 69 a needed extension or library is missing; 75 run could not
use the lock; else run's COMMAND's own status (128+N when signal N ended it).
See docs/operations.md.
TEXT;

    /** @param string[] $argv */
    public static function main(array $argv): int
    {
        $command = isset($argv[1]) ? $argv[1] : 'help';
        $rest = array_slice($argv, 2);
        try {
            switch ($command) {
                case 'status':
                    return StatusCommand::main($rest);
                case 'gc':
                    return GcCommand::main($rest);
                case 'run':
                    return RunCommand::main($rest);
                case 'help':
                case '--help':
                case '-h':
                    fwrite(STDOUT, self::USAGE . "\n");
                    return ExitStatus::OK;
                default:
                    throw new UsageError("unknown command '" . Text::oneLine($command) . "'");
            }
        } catch (UsageError $e) {
            fwrite(STDERR, 'cronlock: ' . $e->getMessage() . "\n" . self::USAGE . "\n");
            return ExitStatus::USAGE;
        } catch (Missing $e) {
            fwrite(STDERR, 'cronlock: ' . $e->getMessage() . "\n");
            return ExitStatus::UNAVAILABLE;
        } catch (\Throwable $e) {
            if ($e instanceof \ValueError) {
                // A lock name, key, DSN or duration of the command line that cronlock refuses:
                // the command line is wrong (its message never holds a password).
                fwrite(STDERR, "cronlock $command: " . Text::oneLine($e->getMessage()) . "\n");
                return ExitStatus::USAGE;
            }
            // A lock that cannot be used (LockException, ConnectionException): its message
            // never holds a password.
            fwrite(STDERR, "cronlock $command: " . Text::oneLine($e->getMessage()) . "\n");
            return $command === 'run' ? ExitStatus::LOCK_FAILED : ExitStatus::INCOMPLETE;
        }
    }
}

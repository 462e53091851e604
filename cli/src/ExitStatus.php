<?php

namespace CronLock\Cli;

/** The command's exit statuses (docs/operations.md lists them). */
final class ExitStatus
{
    /** status: everything asked for was read, nothing is stuck; gc: done. */
    const OK = 0;
    /** status: a holder is held longer than --stale-after. */
    const STUCK = 1;
    /** status, gc: something asked for could not be read or removed (the rest is printed). */
    const INCOMPLETE = 2;
    /** The command line is wrong (sysexits EX_USAGE). */
    const USAGE = 64;
    /** Something the command needs is missing: the lock API, pcntl, a Redis or PDO driver (EX_UNAVAILABLE). */
    const UNAVAILABLE = 69;
    /** run: the lock could not be used (cannot open the file, Redis or the database failing) (EX_TEMPFAIL). */
    const LOCK_FAILED = 75;
}

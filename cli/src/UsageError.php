<?php

namespace CronLock\Cli;

/** A command line that cannot be run as given: the message says what to change (exit status 64). */
final class UsageError extends \InvalidArgumentException
{
}

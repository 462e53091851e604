<?php

namespace CronLock\Cli;

/** Something the command needs is not installed: the message says what (exit status 69). */
final class Missing extends \RuntimeException
{
}

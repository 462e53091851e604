<?php

namespace CronLock;

/** Base of every exception cronlock throws on its own account. */
class LockException extends \RuntimeException
{
}

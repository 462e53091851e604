<?php

namespace CronLock\Cli\Redis;

/** An error reply of a Redis server ("NOAUTH Authentication required.", "WRONGTYPE …"). */
final class ReplyError extends \RuntimeException
{
}

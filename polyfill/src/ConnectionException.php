<?php

namespace CronLock;

/** The lock's backend could not be reached or refused us (network, auth, timeout). */
class ConnectionException extends LockException
{
}

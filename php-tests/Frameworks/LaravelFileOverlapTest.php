<?php

declare(strict_types=1);

namespace CronLock\Tests\Frameworks;

/** LaravelOverlapTestCase on the file backend (the default): lock files in storage/framework/cronlock. */
final class LaravelFileOverlapTest extends LaravelOverlapTestCase
{
    protected function cronlockConfig(): array
    {
        return ['backend' => 'file'];
    }

    protected function recoversOnTheNextTick(): bool
    {
        return true;
    }
}

<?php

declare(strict_types=1);

namespace CronLock\Tests\Frameworks;

/**
 * onOneServer() on the file backend: "once per tick on this host". The two
 * application directories share one lock directory (two deployments on one
 * host, or two schedule:run of one minute); each tick's claim is a file
 * (FileClaims), each application keeps its own file cache, so nothing but
 * the claim decides.
 */
final class LaravelFileOnOneServerTest extends LaravelOnOneServerTestCase
{
    /**
     * @group extension-only
     * not polyfill-specific: the tick's claim is the bridge's (FileClaims), plain PHP;
     * the polyfill's locks only guard withoutOverlapping(), which
     * testAfterKillOfTheWinnerTheNextTickRuns runs on it.
     */
    public function testEachTickRunsOnExactlyOneHost(): void
    {
        $this->assertEachTickRunsOnExactlyOneHost();
    }

    protected function cronlockConfig(string $base): array
    {
        mkdir("$base/locks");
        return ['backend' => 'file', 'directory' => "$base/locks"];
    }

    protected function claimsExpiredBefore(float $t, array $config): int
    {
        $expired = 0;
        foreach (glob($config['directory'] . '/*.claim') ?: [] as $claim) {
            if ((int) filemtime($claim) + self::CLAIM_SECONDS <= floor($t)) {
                $expired++;
            }
        }
        return $expired;
    }

    protected function recoversOnTheNextTick(): bool
    {
        return true;
    }
}

<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\Tests\Support\DatabaseServer;
use PHPUnit\Framework\TestCase;

/** The test helper itself: throw-away database servers that leave each other alone. */
final class DatabaseServerTest extends TestCase
{
    /**
     * MariaDB deletes every #sql* file in its tmpdir when it starts. With the
     * shared /tmp, each test server started deleted the temporary tables of
     * the others (those behind information_schema queries), and one died of
     * signal 11 in the middle of `cronlock status` in the fresh root.
     */
    public function testAMariaDbServerStartsWithoutTouchingTheSharedTemporaryDirectory(): void
    {
        $why = DatabaseServer::available('mysql');
        if ($why !== null) {
            self::markTestSkipped($why);
        }
        $probe = sys_get_temp_dir() . '/#sql-cronlock-probe-' . bin2hex(random_bytes(6));
        touch($probe);
        try {
            $db = DatabaseServer::start('mysql');
            try {
                self::assertSame('1', (string) $db->pdo()->query('SELECT 1')->fetchColumn());
                self::assertFileExists($probe, "the server's start deleted another server's temporary file in " . sys_get_temp_dir());
            } finally {
                $db->stop();
            }
        } finally {
            @unlink($probe);
        }
    }
}

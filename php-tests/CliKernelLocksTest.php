<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\Cli\KernelLocks;
use PHPUnit\Framework\TestCase;

/**
 * The reader of /proc/locks behind `cronlock status` and `cronlock gc`.
 * The kernel prints the file a page per read, and a lock taken or freed
 * elsewhere between two pages shifts the list: the entry at the boundary,
 * a holder with its waiters, comes twice (seen in CI: a file with two
 * flock(1) waiters shown as WAITING 4) or not at all.
 */
final class CliKernelLocksTest extends TestCase
{
    public static function setUpBeforeClass(): void
    {
        require_once dirname(__DIR__) . '/cli/src/autoload.php';
    }

    private static function read(string $text): KernelLocks
    {
        $path = (string) tempnam(sys_get_temp_dir(), 'proc-locks');
        file_put_contents($path, $text);
        try {
            return KernelLocks::read($path);
        } finally {
            unlink($path);
        }
    }

    public function testAHolderPrintedTwiceWithItsWaitersCountsOnce(): void
    {
        $locks = self::read("1: FLOCK  ADVISORY  WRITE 41 fe:00:7 0 EOF\n"
            . "2: FLOCK  ADVISORY  WRITE 42 fe:00:9 0 EOF\n"
            . "2: -> FLOCK  ADVISORY  WRITE 43 fe:00:9 0 EOF\n"
            . "2:  -> FLOCK  ADVISORY  WRITE 44 fe:00:9 0 EOF\n"
            . "3: FLOCK  ADVISORY  WRITE 42 fe:00:9 0 EOF\n"
            . "3: -> FLOCK  ADVISORY  WRITE 43 fe:00:9 0 EOF\n"
            . "3:  -> FLOCK  ADVISORY  WRITE 44 fe:00:9 0 EOF\n"
            . "4: FLOCK  ADVISORY  READ 45 fe:01:9 0 EOF\n");
        $dev = (0xfe << 8) | 0x00;
        self::assertSame([['pid' => 42, 'shared' => false]], $locks->holders($dev, 9));
        self::assertSame(2, $locks->waiters($dev, 9));
        self::assertSame([['pid' => 41, 'shared' => false]], $locks->holders($dev, 7));
        self::assertSame(0, $locks->waiters($dev, 7));
    }

    public function testHoldersAndWaitersTheKernelCannotNameAreEachCounted(): void
    {
        // pid 0: a process of another pid namespace; -1: an OFD lock's owner
        $locks = self::read("1: FLOCK  ADVISORY  READ 0 fe:00:9 0 EOF\n"
            . "2: FLOCK  ADVISORY  READ 0 fe:00:9 0 EOF\n"
            . "2: -> FLOCK  ADVISORY  WRITE 0 fe:00:9 0 EOF\n"
            . "2: -> FLOCK  ADVISORY  WRITE 0 fe:00:9 0 EOF\n");
        self::assertSame([['pid' => null, 'shared' => true], ['pid' => null, 'shared' => true]], $locks->holders(0xfe00, 9));
        self::assertSame(2, $locks->waiters(0xfe00, 9));
    }
}

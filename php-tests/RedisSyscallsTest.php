<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\Tests\Support\Proc;
use CronLock\Tests\Support\RedisServer;
use CronLock\Tests\Support\RedisTopology;
use CronLock\Tests\Support\WebAssembly;
use PHPUnit\Framework\TestCase;

/**
 * What a lock cycle (acquire, fencing token, release) on a kept connection
 * asks of the kernel beyond the round trips, counted with strace (issue 21):
 * no setsockopt (the socket keeps the timeouts of the last command when the
 * next has the same ones), and on Redlock no thread started (the masters
 * are asked at once without one thread per master per operation).
 * It counts calls; it never times them (speed is bench/'s).
 *
 * Traps closed: the calls are counted between two marker writes of the
 * child, so connecting, the first cycle and PHP's start and end do not
 * count; strace's "resumed" halves of a call interrupted by another thread
 * are not counted twice.
 */
final class RedisSyscallsTest extends TestCase
{
    private const CYCLES = 20;

    /** @var list<RedisServer> */
    private array $servers = [];

    private ?RedisTopology $topology = null;

    protected function setUp(): void
    {
        if (WebAssembly::active()) {
            WebAssembly::skip("its system calls are the runtime's, not PHP's");
        }
        if (trim((string) shell_exec('command -v strace 2>/dev/null')) === '') {
            self::markTestSkipped('strace is not installed');
        }
    }

    protected function tearDown(): void
    {
        foreach ($this->servers as $server) {
            $server->kill();
        }
        $this->servers = [];
        $this->topology?->stop();
        $this->topology = null;
        parent::tearDown();
    }

    public function testACycleOnAKeptConnectionSetsNoSocketOption(): void
    {
        RedisServer::requirePolyfillClient();
        $server = RedisServer::start();
        $this->servers[] = $server;
        $calls = self::callsPerCycle($server->dsn(), true);
        self::assertSame(0, $calls['setsockopt'], 'setsockopt calls in ' . self::CYCLES . ' cycles');
    }

    /**
     * @group extension-only
     * cronlock/polyfill talks to one Redis server only (no Redlock).
     */
    public function testARedlockCycleStartsNoThreadAndSetsNoSocketOption(): void
    {
        $this->topology = RedisTopology::masters(3);
        $calls = self::callsPerCycle($this->topology->dsn(), false);
        self::assertSame(0, $calls['clone'], 'threads started in ' . self::CYCLES . ' cycles');
        self::assertSame(0, $calls['setsockopt'], 'setsockopt calls in ' . self::CYCLES . ' cycles');
    }

    /**
     * The setsockopt and clone/clone3 calls of self::CYCLES lock cycles
     * after a first one, in a child PHP run under strace -f.
     *
     * @param string|list<string> $dsn
     * @return array{setsockopt: int, clone: int}
     */
    private static function callsPerCycle($dsn, bool $fencing): array
    {
        $trace = RedisServer::makeTempDir('strace') . '/trace';
        $code = sprintf(<<<'PHP'
            $lock = new CronLock\Redis(%s, 'syscalls:' . getmypid(), 30.0);
            $cycle = function () use ($lock): void {
                $lock->acquire(0) or exit(2);
                %s
                $lock->release() or exit(4);
            };
            $cycle();
            fwrite(STDERR, "CYCLES-BEGIN\n");
            for ($i = 0; $i < %d; $i++) {
                $cycle();
            }
            fwrite(STDERR, "CYCLES-END\n");
            echo "DONE\n";
            PHP,
            var_export($dsn, true),
            $fencing ? '$lock->fencingToken() > 0 or exit(3);' : '',
            self::CYCLES
        );
        $p = Proc::startWrapped(['strace', '-f', '-qq', '-e', 'trace=setsockopt,clone,clone3,write', '-o', $trace], $code);
        self::assertSame(0, $p->wait(120.0), $p->stdout() . $p->stderr());
        self::assertStringContainsString('DONE', $p->stdout());
        $lines = file($trace, FILE_IGNORE_NEW_LINES) ?: [];
        $begin = self::lineOf($lines, 'CYCLES-BEGIN');
        $end = self::lineOf($lines, 'CYCLES-END');
        $counts = ['setsockopt' => 0, 'clone' => 0];
        foreach (array_slice($lines, $begin + 1, $end - $begin - 1) as $line) {
            // "<pid> setsockopt(…" or "<pid> clone3(…"; not "<... clone3 resumed>"
            if (preg_match('/^\d+\s+(setsockopt|clone3?)\(/', $line, $m)) {
                $counts[$m[1] === 'setsockopt' ? 'setsockopt' : 'clone']++;
            }
        }
        return $counts;
    }

    /** @param list<string> $lines */
    private static function lineOf(array $lines, string $marker): int
    {
        foreach ($lines as $i => $line) {
            if (str_contains($line, 'write(2, "' . $marker)) {
                return $i;
            }
        }
        self::fail("no $marker in the trace:\n" . implode("\n", array_slice($lines, -20)));
    }
}

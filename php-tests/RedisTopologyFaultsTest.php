<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\ConnectionException;
use CronLock\Redis;
use CronLock\Tests\Support\Proc;
use CronLock\Tests\Support\RedisServer;
use CronLock\Tests\Support\RedisTopology;
use PHPUnit\Framework\TestCase;

/**
 * Faults of Sentinel, Cluster and Redlock topologies under cron_guard(),
 * checked with a journal: a holder and a waiter, each its own process (two
 * hosts), run cron_guard() jobs that log when they enter, every
 * Guard::renew() with the time it was sent and its answer, and when they
 * leave. Then:
 *
 * - no two holders: a run held the key without a break from its enter
 *   (after its acquire was applied) to the sending of its last renew() that
 *   said true (token-checked: the key still held its token then, and only
 *   its one acquire sets that token); no two runs' such spans overlap;
 * - every loss is reported: a holder whose key someone else took says so
 *   (Guard::renew() false) instead of ever saying true again.
 *
 * Faults: CLIENT PAUSE of the Sentinel master and of the Cluster node that
 * owns the key while held and while a waiter waits (ridden out, nothing
 * lost); kill -9 of the Cluster node that owns the key while held (the
 * loss is reported once it is back); SIGSTOP of a Redlock majority past the
 * TTL (no one can take the lock meanwhile: ConnectionException; the loss
 * is reported after SIGCONT). A negative control (two keys, no exclusion)
 * must be caught by the check. Every test starts its own topology.
 *
 * @group extension-only
 * cronlock/polyfill talks to one Redis server only.
 */
final class RedisTopologyFaultsTest extends TestCase
{
    /** Short, so that a fault costs little time and a renew that cannot be answered fails fast. */
    private const TIMEOUTS = ['connect_timeout' => 0.3, 'read_timeout' => 0.3];

    private const JOB = <<<'PHP'
        [, $dsn, $key, $ttl, $journal, $stop, $wait, $options] = $argv;
        $log = function (string $event) use ($journal): void {
            file_put_contents($journal, sprintf("%.6F %d %s\n", microtime(true), getmypid(), $event), FILE_APPEND | LOCK_EX);
        };
        $lock = new \CronLock\Redis(json_decode($dsn, true), $key, (float) $ttl, json_decode($options, true));
        echo "WAITING\n";
        try {
            $result = cron_guard(function (\CronLock\Guard $guard) use ($log, $stop) {
                $log('enter');
                echo "ENTERED\n";
                while (!file_exists($stop)) {
                    $sent = microtime(true);
                    try {
                        $answer = $guard->renew() ? '1' : '0';
                    } catch (\CronLock\LockException $e) {
                        $answer = 'E';
                    }
                    $log(sprintf('renew %.6F %s', $sent, $answer));
                    usleep(100_000);
                }
                $log('leave');
                return 'ran';
            }, $lock, ['wait' => (float) $wait]);
            echo 'RESULT ', var_export($result, true), "\n";
        } catch (\Throwable $e) {
            echo 'THREW ', get_class($e), ': ', $e->getMessage(), "\n";
        }
        PHP;

    /** @var list<RedisTopology> */
    private array $topologies = [];
    /** @var list<int> pids this test stopped, to SIGCONT whatever happens */
    private array $stopped = [];
    private string $dir;

    protected function setUp(): void
    {
        parent::setUp();
        $this->dir = RedisServer::makeTempDir('cronlock-topology-faults');
    }

    protected function tearDown(): void
    {
        foreach ($this->stopped as $pid) {
            posix_kill($pid, SIGCONT);
        }
        foreach ($this->topologies as $topology) {
            $topology->stop();
        }
        $this->topologies = [];
        array_map('unlink', glob("$this->dir/*") ?: []);
        rmdir($this->dir);
        parent::tearDown();
    }

    private function topology(RedisTopology $topology): RedisTopology
    {
        $this->topologies[] = $topology;
        return $topology;
    }

    /** A cron_guard() job in its own process; it runs until $this->stop($name). */
    private function job(string|array $dsn, string $key, float $ttl, string $name, float $wait): Proc
    {
        $proc = Proc::start(self::JOB, [json_encode($dsn), $key, (string) $ttl, "$this->dir/journal", "$this->dir/stop-$name", (string) $wait, json_encode(self::TIMEOUTS)]);
        $proc->waitForLine('WAITING', 15.0, 'stdout');
        return $proc;
    }

    private function stop(string $name, Proc $proc): string
    {
        touch("$this->dir/stop-$name");
        $proc->wait(30.0);
        return $proc->stdout();
    }

    /**
     * The journal by process: enter and leave times, and each renew as
     * [sent, logged, answer].
     *
     * @return array<int, array{enter: ?float, leave: ?float, renews: list<array{0: float, 1: float, 2: string}>}>
     */
    private function runs(): array
    {
        $runs = [];
        foreach (file("$this->dir/journal", FILE_IGNORE_NEW_LINES) ?: [] as $line) {
            $fields = explode(' ', $line);
            $run = &$runs[(int) $fields[1]];
            $run ??= ['enter' => null, 'leave' => null, 'renews' => []];
            match ($fields[2]) {
                'enter' => $run['enter'] = (float) $fields[0],
                'leave' => $run['leave'] = (float) $fields[0],
                'renew' => $run['renews'][] = [(float) $fields[3], (float) $fields[0], $fields[4]],
            };
            unset($run);
        }
        return $runs;
    }

    /** Polls the journal until $ready(runs) is true. */
    private function awaitJournal(callable $ready, string $what, float $timeout = 30.0): array
    {
        $deadline = microtime(true) + $timeout;
        while (true) {
            $runs = is_file("$this->dir/journal") ? $this->runs() : [];
            if ($ready($runs)) {
                return $runs;
            }
            if (microtime(true) > $deadline) {
                self::fail("not within {$timeout} s: $what\n" . @file_get_contents("$this->dir/journal"));
            }
            usleep(50_000);
        }
    }

    /** @param list<array{0: float, 1: float, 2: string}> $renews */
    private static function answers(array $renews, float $sentAfter, float $sentBefore = INF): string
    {
        $answers = '';
        foreach ($renews as [$sent, , $answer]) {
            if ($sent > $sentAfter && $sent < $sentBefore) {
                $answers .= $answer;
            }
        }
        return $answers;
    }

    /** The journal check: no two runs held the key at once. */
    private static function assertNoTwoHolders(array $runs): void
    {
        $spans = [];
        foreach ($runs as $pid => $run) {
            if ($run['enter'] === null) {
                continue;
            }
            $end = $run['enter'];
            foreach ($run['renews'] as [$sent, , $answer]) {
                if ($answer === '1') {
                    $end = max($end, $sent);
                }
            }
            $spans[$pid] = [$run['enter'], $end];
        }
        foreach ($spans as $a => [$aStart, $aEnd]) {
            foreach ($spans as $b => [$bStart, $bEnd]) {
                if ($a < $b && $aStart <= $bEnd && $bStart <= $aEnd) {
                    self::fail(sprintf('two holders at once: pid %d held [%.3F, %.3F] and pid %d held [%.3F, %.3F]', $a, $aStart, $aEnd, $b, $bStart, $bEnd));
                }
            }
        }
        self::assertGreaterThanOrEqual(2, count($spans), 'both jobs ran');
    }

    /** The data node that owns $key's slot (the others answer MOVED). */
    private static function owner(RedisTopology $cluster, string $key): RedisServer
    {
        foreach ($cluster->servers as $node) {
            try {
                $node->command('GET', $key);
                return $node;
            } catch (\RuntimeException $e) {
                self::assertStringContainsString('MOVED', $e->getMessage());
            }
        }
        self::fail("no node owns $key");
    }

    /**
     * CLIENT PAUSE ALL (1.5 s, half the TTL) of the node holding the key,
     * with a holder renewing and a waiter waiting: both ride it out, the
     * holder keeps the lock (renew() fails while paused, then is true
     * again), the waiter gets it only after the holder's job ended.
     */
    private function rideOutAPause(RedisTopology $topology, \Closure $node): void
    {
        RedisServer::requireVersion('6.2', 'CLIENT PAUSE … ALL');
        $key = 'pause-' . bin2hex(random_bytes(4));
        $holder = $this->job($topology->dsn(), $key, 3.0, 'holder', 0.0);
        $holder->waitForLine('ENTERED', 15.0, 'stdout');
        $waiter = $this->job($topology->dsn(), $key, 3.0, 'waiter', 60.0);
        usleep(300_000); // the waiter is waiting
        $paused = microtime(true);
        $node($key)->command('CLIENT', 'PAUSE', '1500', 'ALL');
        $runs = $this->awaitJournal(
            fn (array $runs) => str_contains(self::answers($runs[$holder->pid()]['renews'] ?? [], $paused + 1.6), '1'),
            'the holder renews again after the pause',
        );
        $felt = array_filter(
            $runs[$holder->pid()]['renews'],
            fn (array $renew) => $renew[0] > $paused && $renew[0] < $paused + 1.2 && ($renew[2] === 'E' || $renew[1] - $renew[0] > self::TIMEOUTS['read_timeout']),
        );
        // (A Cluster renew may outlast the pause: an unanswered node sends it
        // back to the seeds, which redirect it there again.)
        self::assertNotEmpty($felt, 'renew() failed or waited out its read_timeout while the node was paused');
        self::assertStringContainsString("RESULT 'ran'", $this->stop('holder', $holder));
        $waiter->waitForLine('ENTERED', 30.0, 'stdout');
        self::assertStringContainsString("RESULT 'ran'", $this->stop('waiter', $waiter));

        $runs = $this->runs();
        self::assertStringNotContainsString('0', self::answers($runs[$holder->pid()]['renews'], 0.0), 'a pause shorter than the TTL loses nothing');
        self::assertGreaterThan($runs[$holder->pid()]['leave'], $runs[$waiter->pid()]['enter'], 'the waiter got the lock only once the holder was done');
        self::assertNoTwoHolders($runs);
    }

    public function testTheJournalCheckCatchesTwoHolders(): void
    {
        // Negative control: two jobs that do not exclude each other (two
        // keys) must be caught overlapping.
        $masters = $this->topology(RedisTopology::masters(1));
        $dsn = $masters->dsn()[0];
        $first = $this->job($dsn, 'control-a', 3.0, 'first', 0.0);
        $second = $this->job($dsn, 'control-b', 3.0, 'second', 0.0);
        $first->waitForLine('ENTERED', 15.0, 'stdout');
        $second->waitForLine('ENTERED', 15.0, 'stdout');
        $this->awaitJournal(
            function (array $runs): bool {
                $enters = array_column($runs, 'enter');
                if (count($runs) < 2 || in_array(null, $enters, true)) {
                    return false;
                }
                $bothIn = max($enters);
                return count(array_filter($runs, fn (array $run) => str_contains(self::answers($run['renews'], $bothIn), '1'))) === 2;
            },
            'both renew once both are in',
        );
        $this->stop('first', $first);
        $this->stop('second', $second);
        try {
            self::assertNoTwoHolders($this->runs());
        } catch (\PHPUnit\Framework\AssertionFailedError $e) {
            self::assertStringContainsString('two holders at once', $e->getMessage());
            return;
        }
        self::fail('the journal check missed two holders');
    }

    public function testAPauseOfTheSentinelMasterIsRiddenOutByTheHolderAndTheWaiter(): void
    {
        $topology = $this->topology(RedisTopology::sentinel(0));
        $this->rideOutAPause($topology, fn () => $topology->master());
    }

    public function testAPauseOfTheClusterNodeOwningTheKeyIsRiddenOutByTheHolderAndTheWaiter(): void
    {
        $topology = $this->topology(RedisTopology::cluster());
        $this->rideOutAPause($topology, fn (string $key) => self::owner($topology, $key));
    }

    public function testAKilledClusterNodeOwningTheKeyLosesTheLockAndTheHolderIsTold(): void
    {
        $cluster = $this->topology(RedisTopology::cluster());
        $key = 'kill-' . bin2hex(random_bytes(4));
        $holder = $this->job($cluster->dsn(), $key, 3.0, 'holder', 0.0);
        $holder->waitForLine('ENTERED', 15.0, 'stdout');
        $waiter = $this->job($cluster->dsn(), $key, 3.0, 'waiter', 60.0);
        usleep(300_000);
        $owner = self::owner($cluster, $key);
        $owner->kill();
        $killed = microtime(true);
        $this->awaitJournal(
            fn (array $runs) => str_contains(self::answers($runs[$holder->pid()]['renews'] ?? [], $killed), 'E'),
            'renew() fails while the node is down',
        );
        // Back empty (nothing persisted), with its slots (nodes.conf).
        $owner->restart();
        $runs = $this->awaitJournal(
            fn (array $runs) => ($runs[$waiter->pid()]['enter'] ?? null) !== null
                && str_contains(self::answers($runs[$holder->pid()]['renews'], $killed), '0'),
            'the waiter takes the lock and the holder is told it lost it',
            60.0,
        );
        self::assertStringNotContainsString('1', self::answers($runs[$holder->pid()]['renews'], $killed), 'a key that died with its node is never renewed');
        self::assertStringContainsString("RESULT 'ran'", $this->stop('holder', $holder));
        self::assertStringContainsString("RESULT 'ran'", $this->stop('waiter', $waiter));
        self::assertNoTwoHolders($this->runs());
    }

    public function testSigstopOfARedlockMajorityPastTheTtlLetsNobodyInAndTheHolderIsToldAfterSigcont(): void
    {
        $masters = $this->topology(RedisTopology::masters(3));
        $dsns = $masters->dsn();
        $key = 'redlock-stop-' . bin2hex(random_bytes(4));
        $ttl = 2.0;
        $holder = $this->job($dsns, $key, $ttl, 'holder', 0.0);
        $holder->waitForLine('ENTERED', 15.0, 'stdout');
        $waiter = $this->job(array_reverse($dsns), $key, $ttl, 'waiter', 60.0);
        usleep(300_000);
        $stopped = microtime(true);
        foreach (array_slice($masters->servers, 0, 2) as $master) {
            posix_kill($master->pid(), SIGSTOP);
            $this->stopped[] = $master->pid();
        }
        try {
            (new Redis($dsns, $key, $ttl, self::TIMEOUTS))->acquire(0);
            self::fail('a majority stopped: acquire(0) must throw');
        } catch (ConnectionException $e) {
            self::assertStringContainsString('did not answer, and a majority (2) must', $e->getMessage());
        }
        usleep((int) (($ttl + 1.0) * 1e6)); // past the TTL
        foreach (array_slice($masters->servers, 0, 2) as $master) {
            posix_kill($master->pid(), SIGCONT);
        }
        $this->stopped = [];
        $resumed = microtime(true);
        $runs = $this->awaitJournal(
            fn (array $runs) => ($runs[$waiter->pid()]['enter'] ?? null) !== null
                && str_contains(self::answers($runs[$holder->pid()]['renews'], $resumed), '0'),
            'the waiter takes the lock and the holder is told it lost it',
        );
        $holderRenews = $runs[$holder->pid()]['renews'];
        self::assertStringContainsString('E', self::answers($holderRenews, $stopped + 0.1, $resumed - 0.5), 'while a majority is stopped renew() cannot decide');
        self::assertStringNotContainsString('1', self::answers($holderRenews, $stopped + 0.1), 'never renewed once the majority stopped');
        self::assertGreaterThan($resumed, $runs[$waiter->pid()]['enter'], 'nobody got the lock while a majority was stopped');
        self::assertStringContainsString("RESULT 'ran'", $this->stop('holder', $holder));
        self::assertStringContainsString("RESULT 'ran'", $this->stop('waiter', $waiter));
        self::assertNoTwoHolders($this->runs());
    }
}

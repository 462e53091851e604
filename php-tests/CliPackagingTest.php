<?php

declare(strict_types=1);

namespace CronLock\Tests;

use CronLock\Tests\Support\CliTestHelpers;
use CronLock\Tests\Support\FileTestHelpers;
use PHPUnit\Framework\TestCase;

/**
 * How users get the command: cronlock/polyfill requires cronlock/cli, so a
 * project that installs the polyfill from this checkout (path repositories,
 * offline, as the README says) has vendor/bin/cronlock, which runs with the
 * polyfill from Composer's autoloader, and CronLock\Cli\Supervisor loads
 * for code that reuses it. (make install's copy: scripts/lib.sh phpize_build.)
 */
final class CliPackagingTest extends TestCase
{
    use CliTestHelpers;
    use FileTestHelpers;

    protected function tearDown(): void
    {
        $this->reapCommands();
        $this->removeTempDirs();
        parent::tearDown();
    }

    public function testTheReadmesOfflineInstallGivesVendorBinCronlock(): void
    {
        if (!is_executable('/usr/bin/composer')) {
            self::markTestSkipped('composer is not installed (apt-get install composer)');
        }
        $root = dirname(__DIR__);
        $project = $this->makeTempDir('cli-project');
        file_put_contents("$project/composer.json", '{"name": "acme/app"}');
        $env = getenv() + ['COMPOSER_DISABLE_NETWORK' => '1', 'COMPOSER_NO_INTERACTION' => '1', 'COMPOSER_ALLOW_SUPERUSER' => '1',
            'COMPOSER_HOME' => "$project/.composer"];
        unset($env['PHP_INI_SCAN_DIR']); // Composer itself, as a user runs it
        foreach ([
            ['composer', '--working-dir', $project, 'config', 'repositories.cronlock', 'path', "$root/{polyfill,cli}"],
            ['composer', '--working-dir', $project, 'require', '--no-audit', 'cronlock/polyfill:*@dev', 'cronlock/cli:*@dev'],
        ] as $cmd) {
            [$code, $out, $err] = $this->runCommand($cmd, 120.0, $env);
            self::assertSame(0, $code, implode(' ', $cmd) . ":\n$out$err");
        }
        $bin = "$project/vendor/bin/cronlock";
        self::assertFileExists($bin);
        $locks = $this->makeTempDir('cli-project-locks');
        // the system's PHP without the extension: the polyfill comes from vendor/autoload.php
        $env = ['CRONLOCK_LOCK_DIR' => $locks] + $env;
        [$code, $out, $err] = $this->runCommand([PHP_BINARY, $bin, 'run', '--lock', 'job', '--', PHP_BINARY, $bin, 'status', '--json'], 30.0, $env);
        self::assertSame(0, $code, $err);
        $doc = json_decode($out, true, 512, JSON_THROW_ON_ERROR);
        self::assertSame(['job', 'held'], [$doc['locks'][0]['name'], $doc['locks'][0]['state']], 'vendor/bin/cronlock run holds the lock that status lists');
        [$code, $out] = $this->runCommand([PHP_BINARY, '-r', 'require $argv[1]; echo extension_loaded("cronlock") ? "ext" : "polyfill", " ",
            class_exists("CronLock\\\\Cli\\\\Supervisor") ? "supervisor" : "none";', "$project/vendor/autoload.php"], 30.0, $env);
        self::assertSame([0, 'polyfill supervisor'], [$code, $out]);
    }
}

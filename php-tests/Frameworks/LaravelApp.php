<?php

declare(strict_types=1);

namespace CronLock\Tests\Frameworks;

/**
 * A Laravel 8 application in a temporary directory, made from
 * bridges/laravel/tests/app and Debian's php-laravel-framework (no Composer,
 * no Packagist): vendor/autoload.php is what Composer would write for an
 * application that requires laravel/framework and cronlock/polyfill (and,
 * with the bridge, cronlock/laravel, whose provider Laravel then discovers
 * from vendor/composer/installed.json, as after `composer require`).
 *
 *   $app = LaravelApp::create($dir, true);
 *   $app->schedule('$schedule->command("fixture:job", [$journal, "fg", 3])->everyMinute()->withoutOverlapping();');
 *   $tick = $app->tick('2030-01-01 00:00:00');       // php artisan schedule:run, now
 *   $app->artisan(['schedule:list'])->succeed()->stdout();
 *
 * Each application directory is one "host": two of them sharing one Redis
 * or database server are two servers running the same schedule.
 */
final class LaravelApp
{
    public const ILLUMINATE = '/usr/share/php/Illuminate/autoload.php';

    private string $dir;
    /** @var array<string, string> */
    private array $env;

    private function __construct(string $dir, array $env)
    {
        $this->dir = $dir;
        $this->env = $env;
    }

    public static function available(): ?string
    {
        if (!is_file(self::ILLUMINATE)) {
            return 'Laravel is not installed (apt-get install php-laravel-framework)';
        }
        if (!extension_loaded('pcntl') || !extension_loaded('posix')) {
            return 'needs pcntl and posix';
        }
        if (!extension_loaded('intl')) {
            // artisan renders an error through symfony/string, which needs Normalizer
            return 'Laravel\'s console needs the intl extension (apt-get install php-intl)';
        }
        return null;
    }

    /**
     * @param bool $bridge whether cronlock/laravel is installed (else Laravel's own cache mutex)
     * @param array<string, string> $env the application's environment (FIXTURE_CACHE, FIXTURE_REDIS_PORT, …)
     */
    public static function create(string $dir, bool $bridge, array $env = []): self
    {
        $root = dirname(__DIR__, 2);
        self::copyTree("$root/bridges/laravel/tests/app", $dir);
        foreach (['bootstrap/cache', 'storage/framework/cache/data', 'storage/logs', 'vendor/composer'] as $sub) {
            @mkdir("$dir/$sub", 0777, true);
        }
        $psr4 = ['App\\' => "$dir/app/", 'CronLock\\Tests\\Frameworks\\Fixture\\' => "$root/php-tests/Frameworks/Fixture/"];
        $packages = [];
        if ($bridge) {
            $psr4['CronLock\\Laravel\\'] = "$root/bridges/laravel/src/";
            $psr4['CronLock\\Cli\\'] = "$root/cli/src/";
            $manifest = json_decode((string) file_get_contents("$root/bridges/laravel/composer.json"), true, 512, JSON_THROW_ON_ERROR);
            $manifest['version'] = 'dev-main';
            $packages[] = $manifest;
        }
        file_put_contents("$dir/vendor/autoload.php", "<?php\n"
            . '// What Composer writes for laravel/framework + cronlock/polyfill' . ($bridge ? ' + cronlock/laravel (+ cronlock/cli)' : '') . ".\n"
            . 'require_once ' . var_export("$root/polyfill/bootstrap.php", true) . ";\n"
            . 'require_once ' . var_export(self::ILLUMINATE, true) . ";\n"
            . '$psr4 = ' . var_export($psr4, true) . ";\n"
            . 'spl_autoload_register(static function (string $class) use ($psr4): void {' . "\n"
            . '    foreach ($psr4 as $prefix => $base) {' . "\n"
            . '        if (strncmp($class, $prefix, strlen($prefix)) === 0 && is_file($f = $base . str_replace("\\\\", "/", substr($class, strlen($prefix))) . ".php")) {' . "\n"
            . '            require $f;' . "\n"
            . '            return;' . "\n"
            . '        }' . "\n"
            . '    }' . "\n"
            . "});\n");
        file_put_contents("$dir/vendor/composer/installed.json", json_encode(['packages' => $packages], JSON_PRETTY_PRINT | JSON_UNESCAPED_SLASHES));
        // COLUMNS: Symfony Console wraps messages at the terminal's width; the tests read them whole.
        return new self($dir, $env + ['COLUMNS' => '400'] + self::extensionEnv());
    }

    public function dir(): string
    {
        return $this->dir;
    }

    /** The journal of this application's job runs (each application its own unless given one). */
    public function journal(): Journal
    {
        return new Journal("$this->dir/journal.log");
    }

    /**
     * The schedule: PHP statements with $schedule (Illuminate\Console\Scheduling\Schedule)
     * and $journal (the path of the journal the test reads) in scope, and
     * Job the test job (Fixture\Job).
     */
    public function schedule(string $statements, ?string $journal = null): void
    {
        $journal ??= $this->journal()->path();
        file_put_contents("$this->dir/schedule.php", "<?php\n\nuse CronLock\\Tests\\Frameworks\\Fixture\\Job;\nuse Illuminate\\Console\\Scheduling\\Schedule;\n\n"
            . 'return function (Schedule $schedule) {' . "\n"
            . '    $journal = ' . var_export($journal, true) . ";\n"
            . "    $statements\n};\n");
    }

    /** Write config/<name>.php returning $config. */
    public function config(string $name, array $config): void
    {
        file_put_contents("$this->dir/config/$name.php", "<?php\n\nreturn " . var_export($config, true) . ";\n");
    }

    /**
     * @param list<string> $args
     * @param array<string, string|false> $env
     */
    public function artisan(array $args, array $env = []): AppProcess
    {
        return new AppProcess($this->dir, array_merge(['artisan'], $args), $env + $this->env);
    }

    /** `php -r $code` in the application's directory, with its environment (started, not waited for). */
    public function php(string $code, array $env = []): AppProcess
    {
        return new AppProcess($this->dir, ['-r', $code], $env + $this->env);
    }

    /** One cron tick: `php artisan schedule:run` with Laravel's clock at $now (started, not waited for). */
    public function tick(string $now, array $env = []): AppProcess
    {
        return $this->artisan(['schedule:run'], ['FIXTURE_NOW' => $now] + $env);
    }

    /**
     * The environment that makes every PHP the application starts (schedule:run,
     * the shell's php, schedule:finish) load what this test process loaded: the
     * extension through PHP_INI_SCAN_DIR (scripts/test exports it; a run with
     * only `-d extension=` gets a scan directory of its own here), or the
     * polyfill (vendor/autoload.php loads it, as Composer would).
     *
     * @return array<string, string>
     */
    private static function extensionEnv(): array
    {
        static $env = null;
        if ($env !== null) {
            return $env;
        }
        $env = [];
        if (extension_loaded('cronlock')) {
            $probe = shell_exec(escapeshellarg(PHP_BINARY) . ' -r ' . escapeshellarg('echo extension_loaded("cronlock") ? "yes" : "no";'));
            if ($probe !== 'yes') {
                $ext = (string) getenv('CRONLOCK_EXT');
                if ($ext === '' || !is_file($ext)) {
                    throw new \RuntimeException('the cronlock extension is loaded here but not in a plain `php`: export PHP_INI_SCAN_DIR (see COMMON.md) or CRONLOCK_EXT');
                }
                $dir = sys_get_temp_dir() . '/cronlock-frameworks-ini.' . getmypid();
                @mkdir($dir, 0700);
                file_put_contents("$dir/cronlock.ini", "extension=$ext\n");
                $env['PHP_INI_SCAN_DIR'] = (string) getenv('PHP_INI_SCAN_DIR') . ":$dir";
            }
        }
        return $env;
    }

    private static function copyTree(string $from, string $to): void
    {
        @mkdir($to, 0777, true);
        foreach (scandir($from) ?: [] as $f) {
            if ($f === '.' || $f === '..') {
                continue;
            }
            if (is_dir("$from/$f")) {
                self::copyTree("$from/$f", "$to/$f");
            } else {
                copy("$from/$f", "$to/$f");
                chmod("$to/$f", fileperms("$from/$f") & 0777);
            }
        }
    }
}

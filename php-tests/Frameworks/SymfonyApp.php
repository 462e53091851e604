<?php

declare(strict_types=1);

namespace CronLock\Tests\Frameworks;

/**
 * Debian's symfony/lock and symfony/console 5.4 (php-symfony-lock,
 * php-symfony-console) with cronlock/symfony's classes, for this process
 * (load()) and for a child PHP (childPrelude()), and the minimal console
 * application of bridges/symfony/tests/app.
 */
final class SymfonyApp
{
    public const LOCK = '/usr/share/php/Symfony/Component/Lock/autoload.php';
    public const CONSOLE = '/usr/share/php/Symfony/Component/Console/autoload.php';

    public static function available(): ?string
    {
        if (!is_file(self::LOCK) || !is_file(self::CONSOLE)) {
            return 'symfony/lock and symfony/console are not installed (apt-get install php-symfony-lock php-symfony-console)';
        }
        return null;
    }

    public static function load(): void
    {
        if (self::available() === null) {
            require_once self::LOCK;
            require_once self::CONSOLE;
            require_once self::bridgeAutoload();
        }
    }

    /** PHP that a child runs first to have the same classes. */
    public static function childPrelude(): string
    {
        return sprintf("require_once %s;\nrequire_once %s;\nrequire_once %s;\n", var_export(self::LOCK, true), var_export(self::CONSOLE, true), var_export(self::bridgeAutoload(), true));
    }

    private static function bridgeAutoload(): string
    {
        return dirname(__DIR__, 2) . '/bridges/symfony/tests/autoload.php';
    }
}

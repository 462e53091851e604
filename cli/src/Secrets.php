<?php

namespace CronLock\Cli;

/**
 * DSNs and passwords from the command line or, for those that hold a
 * password, from the environment: `--redis-env VAR` (or `--database-env`,
 * `--password-env`) names a variable, so no password shows in `ps` or in a
 * crontab line. A password given in argv works but is warned about once.
 */
final class Secrets
{
    /**
     * The DSN of --$kind or --$kind-env.
     *
     * @throws UsageError when the variable is unset or empty
     */
    public static function dsn(Arguments $args, string $kind): string
    {
        $variable = $args->value("$kind-env");
        if ($variable !== null) {
            if ($args->has($kind)) {
                throw new UsageError("give --$kind or --$kind-env, not both");
            }
            return self::fromEnvironment($variable, "--$kind-env");
        }
        $dsn = (string) $args->value($kind);
        if (Text::withoutPassword($dsn) !== $dsn) {
            fwrite(STDERR, "cronlock: warning: --$kind names a password, which every user of this host can read in ps; use --$kind-env VARIABLE\n");
        }
        return $dsn;
    }

    /** @return array{user?: string, password?: string} CronLock\Database's credentials options */
    public static function credentials(Arguments $args): array
    {
        $options = [];
        if ($args->value('user') !== null) {
            $options['user'] = (string) $args->value('user');
        }
        if ($args->value('password-env') !== null) {
            $options['password'] = self::fromEnvironment((string) $args->value('password-env'), '--password-env');
        }
        return $options;
    }

    private static function fromEnvironment(string $variable, string $option): string
    {
        $value = getenv($variable);
        if (!is_string($value) || $value === '') {
            throw new UsageError("$option $variable: the environment variable $variable is not set");
        }
        return $value;
    }
}

<?php

namespace CronLock\Cli;

/**
 * A command's argv after the command name: long options (`--name value`,
 * `--name=value`), flags, repeatable options, positional arguments, and
 * everything after `--` (or, with $commandFollows, after the first
 * positional argument: `cronlock run --lock x sleep 5`) as a command line
 * of its own, never read as options.
 */
final class Arguments
{
    const FLAG = 'flag';
    const VALUE = 'value';
    const VALUES = 'values';

    /** @var array<string, string|bool|string[]> */
    private $options = [];
    /** @var string[] */
    private $positional = [];
    /** @var string[]|null */
    private $command;

    /**
     * @param string[] $argv
     * @param array<string, string> $spec option name (without --) => FLAG, VALUE or VALUES
     * @throws UsageError for an unknown option or a missing value
     */
    public static function parse(array $argv, array $spec, bool $commandFollows = false): self
    {
        $self = new self();
        $argv = array_values($argv);
        for ($i = 0; $i < count($argv); $i++) {
            $arg = $argv[$i];
            if ($arg === '--') {
                $self->command = array_slice($argv, $i + 1);
                break;
            }
            if (strncmp($arg, '--', 2) !== 0 || $arg === '-') {
                if ($commandFollows) {
                    $self->command = array_slice($argv, $i);
                    break;
                }
                $self->positional[] = $arg;
                continue;
            }
            $eq = strpos($arg, '=');
            $name = substr($arg, 2, $eq === false ? null : $eq - 2);
            if (!isset($spec[$name])) {
                throw new UsageError("unknown option --$name");
            }
            if ($spec[$name] === self::FLAG) {
                if ($eq !== false) {
                    throw new UsageError("--$name takes no value");
                }
                $self->options[$name] = true;
                continue;
            }
            if ($eq !== false) {
                $value = (string) substr($arg, $eq + 1);
            } elseif ($i + 1 < count($argv)) {
                $value = $argv[++$i];
            } else {
                throw new UsageError("--$name needs a value");
            }
            if ($spec[$name] === self::VALUES) {
                $self->options[$name][] = $value;
            } elseif (isset($self->options[$name])) {
                throw new UsageError("--$name is given twice");
            } else {
                $self->options[$name] = $value;
            }
        }
        return $self;
    }

    public function flag(string $name): bool
    {
        return isset($this->options[$name]) && $this->options[$name] === true;
    }

    /** @return string|null */
    public function value(string $name)
    {
        return isset($this->options[$name]) && is_string($this->options[$name]) ? $this->options[$name] : null;
    }

    /** @return string[] */
    public function values(string $name): array
    {
        return isset($this->options[$name]) && is_array($this->options[$name]) ? $this->options[$name] : [];
    }

    public function has(string $name): bool
    {
        return isset($this->options[$name]);
    }

    /** @return string[] */
    public function positional(): array
    {
        return $this->positional;
    }

    /** @return string[]|null null when the command line has none */
    public function command()
    {
        return $this->command;
    }
}

<?php

namespace CronLock\Cli;

/**
 * The directory of cron_guard()'s named and script locks for this user, as
 * the extension and cronlock/polyfill choose it: CRONLOCK_LOCK_DIR when set
 * (empty: the default), else the ini setting cronlock.lock_dir, else
 * /run/cronlock for root, /run/lock/cronlock-<euid> when /run/lock is a
 * directory this user may create entries in, else /tmp/cronlock-<euid>.
 * Only the path: nothing is created or checked (status and gc read).
 */
final class LockDirectory
{
    /** @var string */
    public $path;
    /** @var string why this directory, for the heading of `status` */
    public $origin;

    public static function current(): self
    {
        $self = new self();
        $setting = getenv('CRONLOCK_LOCK_DIR');
        $origin = 'CRONLOCK_LOCK_DIR';
        if ($setting === false) {
            $setting = extension_loaded('cronlock') ? ini_get('cronlock.lock_dir') : get_cfg_var('cronlock.lock_dir');
            $origin = 'cronlock.lock_dir';
        }
        if (is_string($setting) && $setting !== '') {
            $self->path = $setting === '/' ? '/' : rtrim($setting, '/');
            $self->origin = $origin;
            return $self;
        }
        $euid = Processes::euid();
        if ($euid === 0) {
            $self->path = '/run/cronlock';
            $self->origin = 'default lock directory of root';
        } else {
            $base = is_dir('/run/lock') && is_writable('/run/lock') ? '/run/lock' : '/tmp';
            $self->path = "$base/cronlock-$euid";
            $self->origin = "default lock directory of uid $euid";
        }
        return $self;
    }
}

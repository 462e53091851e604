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
    /** @var bool set by CRONLOCK_LOCK_DIR or cronlock.lock_dir (else the user's default) */
    public $explicit = false;

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
            $self->explicit = true;
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

    /**
     * The lock file of cron_guard()'s named lock $name and the mode cron_guard()
     * creates it with, when this directory exists and passes every check
     * cron_guard() makes of it (a real directory; the user's default one owned
     * by this user and closed to group and others; an explicit one absolute
     * and not world-writable without the sticky bit). Else null: let
     * cron_guard() create the directory, or refuse it in its own words.
     *
     * @return array{0: string, 1: int}|null
     */
    public function namedLockFile(string $name)
    {
        if (!preg_match('/\A[A-Za-z0-9._-]{1,200}\z/', $name) || $name === '.' || $name === '..') {
            return null;
        }
        if ($this->path === '' || $this->path[0] !== '/' || strpos($this->path, "\0") !== false) {
            return null;
        }
        clearstatcache(true, $this->path);
        $st = @lstat($this->path);
        if ($st === false || ($st['mode'] & 0170000) !== 0040000) {
            return null;
        }
        if ($this->explicit) {
            $worldWritable = ($st['mode'] & 0002) !== 0 && ($st['mode'] & 01000) === 0;
            return $worldWritable ? null : [$this->path . "/$name.lock", 0644];
        }
        if ($st['uid'] !== Processes::euid() || ($st['mode'] & 0022) !== 0) {
            return null;
        }
        return [$this->path . "/$name.lock", 0600];
    }
}

<?php

namespace CronLock\Polyfill;

use CronLock\LockException;

/**
 * The file system calls of CronLock\File, in userland: a safe open (no
 * symlink, regular files only, identity checked before and after), network
 * file systems from /proc/self/mountinfo, and the kernel's view of flock()
 * holders from /proc/locks.
 *
 * @internal
 */
final class FileSystem
{
    /** Where flock() is unreliable (the extension's list, by mountinfo type). */
    const UNRELIABLE = [
        'nfs' => 'nfs', 'nfs4' => 'nfs', 'smb' => 'smb', 'smbfs' => 'smb', 'smb3' => 'smb2',
        'cifs' => 'cifs', '9p' => '9p', 'ceph' => 'ceph', 'afs' => 'afs', 'kafs' => 'kafs',
        'coda' => 'coda', 'lustre' => 'lustre', 'gfs2' => 'gfs2', 'ocfs2' => 'ocfs2',
    ];

    /** @var array<int, string|null> device => unreliable file system name */
    private static $fsByDev = [];

    /**
     * Opens (creating with $mode minus umask if missing) without truncating.
     * The path must name a regular file, not a symlink, both before the open
     * and after it (same device and inode as the open file), so a symlink or
     * FIFO swapped in meanwhile is never used. Close-on-exec where PHP's
     * fopen() knows the 'e' flag (PHP 8); read-only when not writable for us.
     *
     * @return array{handle: resource, id: array{dev: int, ino: int, size: int, writable: bool}}
     */
    public static function openLockFile(string $path, int $mode): array
    {
        $shown = Args::cut($path);
        for ($try = 0; $try < 10; $try++) {
            clearstatcache(true, $path);
            $before = self::lstatId($path);
            $writable = true;
            $created = false;
            if ($before === null) {
                $umask = umask();
                umask($umask | (0666 & ~$mode));
                $handle = self::createExclusive($path);
                umask($umask);
                if ($handle === null) {
                    continue; // something appeared at the path meanwhile: look again
                }
                if ($handle === false) {
                    $reason = self::$createFailure !== null ? self::$createFailure : self::lastReason($path);
                    clearstatcache(true, $path);
                    if (self::lstatId($path) !== null) {
                        continue; // created by someone else meanwhile: open theirs
                    }
                    if (self::underANonDirectory($path)) {
                        $reason = self::osError('ENOTDIR'); // PHP says ENOENT there
                    }
                    throw new LockException("cannot open lock file $shown: $reason");
                }
                $created = true;
            } else {
                // What the extension's open(O_NOFOLLOW | O_RDWR) fails with.
                if ($before['link']) {
                    throw new LockException("cannot open lock file $shown: " . self::osError('ELOOP'));
                }
                if ($before['kind'] === 'a directory') {
                    throw new LockException("cannot open lock file $shown: " . self::osError('EISDIR'));
                }
                if (!$before['regular']) {
                    throw new LockException("cannot use lock file $shown: not a regular file (it is {$before['kind']})");
                }
                // No O_CREAT ('r+', not 'c+'): PHP has no O_NOFOLLOW, and a
                // symlink swapped in since the lstat() must not make us create
                // the file it points to (root could be made to create any
                // file). Non-blocking ('n'): a FIFO swapped in must not hang
                // the open; the fstat() below refuses it.
                $handle = @fopen($path, 'r+en');
                if ($handle === false) {
                    $reason = self::lastReason($path);
                    $writable = false;
                    $handle = @fopen($path, 'ren');
                    if ($handle === false) {
                        clearstatcache(true, $path);
                        if (self::lstatId($path) === null) {
                            continue; // removed meanwhile: create it
                        }
                        throw new LockException("cannot open lock file $shown: $reason");
                    }
                }
            }
            $st = fstat($handle);
            if ($st === false || ($st['mode'] & 0170000) !== 0100000) {
                fclose($handle);
                throw new LockException("cannot use lock file $shown: not a regular file (it is " . self::kind($st === false ? 0 : $st['mode']) . ')');
            }
            clearstatcache(true, $path);
            $after = self::lstatId($path);
            if ($after === null || $after['link'] || $after['dev'] !== $st['dev'] || $after['ino'] !== $st['ino']) {
                fclose($handle); // replaced while we opened it: start over
                continue;
            }
            stream_set_read_buffer($handle, 0);
            stream_set_write_buffer($handle, 0);
            self::refuseForeignInSharedDir($path, $st['uid'], $handle);
            // fopen() creates with 0666 minus umask: bits beyond that (and
            // file systems that ignore the umask, as PHP on WebAssembly's)
            // need a chmod, on the file we just checked the path names.
            if ($created && ($st['mode'] & 07777) !== ($mode & ~$umask & 07777)) {
                @chmod($path, $mode & ~$umask);
            }
            return ['handle' => $handle, 'id' => ['dev' => $st['dev'], 'ino' => $st['ino'], 'size' => $st['size'], 'writable' => $writable]];
        }
        throw new LockException("cannot open lock file $shown: it was replaced on every attempt to open it");
    }

    /** @var string|null why createExclusive() last failed, when error_get_last() does not say it */
    private static $createFailure;

    /**
     * Creates $path, failing if anything (a symlink too) is there. Not fopen('x'): PHP
     * resolves a symlink at the path before open(2), so O_EXCL would create the file a
     * symlink swapped in since our lstat() points to (root could be made to create any
     * file). link(2) of a new file under a random name never follows its new name (PHP
     * passes the paths as they are, except in ZTS builds, which resolve them first).
     *
     * @return resource|false|null the new file; false: it cannot be created (the reason in
     *                             error_get_last()); null: the path is taken meanwhile
     */
    private static function createExclusive(string $path)
    {
        self::$createFailure = null;
        $temp = dirname($path) . '/.cronlock-' . bin2hex(random_bytes(8));
        $handle = @fopen($temp, 'x+en');
        if ($handle === false) {
            return false;
        }
        $linked = @link($temp, $path);
        $linkError = $linked ? '' : self::lastReason();
        @unlink($temp);
        fclose($handle);
        if ($linked) {
            // Opened again by its own name, which /proc/self/fd, lsof and
            // the extension's fd checks then show (not "… (deleted)").
            // Without O_CREAT: a symlink swapped in meanwhile creates nothing,
            // and the caller's fstat()/lstat() check starts over.
            $handle = @fopen($path, 'r+en');
            return $handle === false ? null : $handle;
        }
        clearstatcache(true, $path);
        if (self::lstatId($path) !== null || $linkError === self::osError('EEXIST')) {
            return null; // taken (or swapped) meanwhile: look again
        }
        if (!self::noHardLinks($linkError)) {
            // the path cannot be made (too long, …): say why
            self::$createFailure = self::lastReason($path) === self::osError('ENAMETOOLONG') ? self::osError('ENAMETOOLONG') : $linkError;
            return false;
        }
        // A file system without hard links only: O_EXCL, which PHP's resolving a
        // symlink first defeats (the gap left there; docs/polyfill.md says so).
        $handle = @fopen($path, 'x+en');
        return $handle === false ? false : $handle;
    }

    /**
     * Whether link(2) failed as a file system without hard links fails it (EPERM, ENOTSUP,
     * ENOSYS; EMLINK, which PHP on WebAssembly says for every link()).
     */
    private static function noHardLinks(string $reason): bool
    {
        $errors = [1 => 'Operation not permitted', 95 => 'Operation not supported', 38 => 'Function not implemented', 31 => 'Too many links'];
        foreach ($errors as $errno => $words) {
            $named = PHP_OS === 'Linux' && function_exists('posix_strerror') ? posix_strerror($errno) : $words;
            if ($reason === $named || $reason === $words) {
                return true;
            }
        }
        return false;
    }

    /**
     * D10: a lock file in a world-writable directory owned by another
     * non-root user is theirs to hold forever: refused.
     *
     * @param resource $handle closed when refused
     */
    private static function refuseForeignInSharedDir(string $path, int $uid, $handle)
    {
        if ($uid === 0) {
            return;
        }
        $dir = @stat(dirname($path));
        if ($dir === false || ($dir['mode'] & 0002) === 0) {
            return;
        }
        $euid = Process::euid();
        if ($uid !== $euid) {
            fclose($handle);
            throw new LockException(sprintf(
                'lock file %s is owned by uid %d, who could hold it forever; it is in the world-writable directory %s: remove it, or use a lock file in a directory that only trusted users can write to',
                Args::cut($path),
                $uid,
                dirname($path)
            ));
        }
    }

    /** @return array{dev: int, ino: int, link: bool, regular: bool, kind: string}|null null when missing */
    public static function lstatId(string $path)
    {
        $st = @lstat($path);
        if ($st === false) {
            return null;
        }
        $type = $st['mode'] & 0170000;
        return [
            'dev' => $st['dev'],
            'ino' => $st['ino'],
            'link' => $type === 0120000,
            'regular' => $type === 0100000,
            'kind' => self::kind($st['mode']),
        ];
    }

    private static function kind(int $mode): string
    {
        $kinds = [0040000 => 'a directory', 0010000 => 'a FIFO', 0020000 => 'a character device',
            0060000 => 'a block device', 0140000 => 'a socket', 0120000 => 'a symlink'];
        $type = $mode & 0170000;
        return isset($kinds[$type]) ? $kinds[$type] : 'not a regular file';
    }

    /** The unreliable file system $path is on (by its device in /proc/self/mountinfo), else null. */
    public static function unreliableFs(string $path, int $dev)
    {
        if (array_key_exists($dev, self::$fsByDev)) {
            return self::$fsByDev[$dev];
        }
        $info = @file_get_contents('/proc/self/mountinfo');
        if ($info === false) {
            return null; // not Linux, or no /proc: cannot tell (see docs/polyfill.md)
        }
        $want = self::major($dev) . ':' . self::minor($dev);
        $byPrefix = null;
        $bestLen = -1;
        $real = realpath(dirname($path));
        foreach (explode("\n", $info) as $line) {
            // "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue"
            $halves = explode(' - ', $line, 2);
            if (count($halves) !== 2) {
                continue;
            }
            $left = explode(' ', $halves[0]);
            $type = explode(' ', $halves[1])[0];
            if (count($left) < 5) {
                continue;
            }
            $base = strpos($type, '.') === false ? $type : substr($type, 0, strpos($type, '.'));
            $fs = isset(self::UNRELIABLE[$base]) ? self::UNRELIABLE[$base] : null;
            if ($left[2] === $want) {
                return self::$fsByDev[$dev] = $fs;
            }
            // Overlay and btrfs report another device in stat(): longest mount point prefix.
            $point = stripcslashes(str_replace(['\\040', '\\011', '\\012', '\\134'], [' ', "\t", "\n", '\\'], $left[4]));
            if ($real !== false && ($point === '/' || strpos($real . '/', rtrim($point, '/') . '/') === 0) && strlen($point) > $bestLen) {
                $bestLen = strlen($point);
                $byPrefix = $fs;
            }
        }
        return self::$fsByDev[$dev] = $byPrefix;
    }

    private static function major(int $dev): int
    {
        return (($dev >> 8) & 0xfff) | (($dev >> 32) & ~0xfff);
    }

    private static function minor(int $dev): int
    {
        return ($dev & 0xff) | (($dev >> 12) & ~0xff);
    }

    /**
     * Pids holding a flock() lock on exactly this device and inode, as
     * /proc/locks says (it never touches the lock), each once; null when
     * unreadable. The kernel prints /proc/locks a page per read, and a lock
     * taken or freed anywhere between two pages shifts the list: an entry at
     * a page boundary is printed twice or not at all. So a read that lists
     * no holder is made again, twice at most.
     *
     * @return int[]|null
     */
    public static function flockHolders(int $dev, int $ino)
    {
        $want = sprintf('%02x:%02x:%d', self::major($dev), self::minor($dev), $ino);
        $pids = [];
        for ($try = 0; $try < 3 && $pids === []; $try++) {
            $text = @file_get_contents('/proc/locks');
            if ($text === false) {
                return null;
            }
            foreach (explode("\n", $text) as $line) {
                // "1: FLOCK  ADVISORY  WRITE 4242 08:02:131 0 EOF"; waiters have "->"
                $f = preg_split('/\s+/', trim($line));
                if (count($f) >= 6 && $f[1] === 'FLOCK' && $f[5] === $want && (preg_match('/^[0-9]+\z/', $f[4]) === 1)) {
                    $pids[(int) $f[4]] = true;
                }
            }
        }
        return array_keys($pids);
    }

    /** Whether process $pid has a descriptor open on this very file (Linux /proc/<pid>/fd). */
    public static function hasOpen(int $pid, int $dev, int $ino): bool
    {
        $fds = @scandir("/proc/$pid/fd");
        if ($fds === false) {
            return false; // gone, or another user's: cannot confirm, so not named (D12)
        }
        foreach ($fds as $fd) {
            if ($fd === '.' || $fd === '..') {
                continue;
            }
            $st = @stat("/proc/$pid/fd/$fd");
            if ($st !== false && $st['dev'] === $dev && $st['ino'] === $ino) {
                return true;
            }
        }
        return false;
    }

    /** Whether a directory on the way to $path exists but is none (ENOTDIR). */
    private static function underANonDirectory(string $path): bool
    {
        for ($dir = dirname($path); $dir !== '/' && $dir !== '.' && $dir !== ''; $dir = dirname($dir)) {
            $st = @stat($dir);
            if ($st !== false) {
                return ($st['mode'] & 0170000) !== 0040000;
            }
        }
        return false;
    }

    /**
     * The C library's words for an errno, as the extension's messages show
     * them: posix_strerror() where it can be asked (Linux numbers), else
     * glibc's words.
     */
    public static function osError(string $name): string
    {
        $errors = [
            'ELOOP' => [40, 'Too many levels of symbolic links'],
            'EISDIR' => [21, 'Is a directory'],
            'ENOTDIR' => [20, 'Not a directory'],
            'ENAMETOOLONG' => [36, 'File name too long'],
            'ENOENT' => [2, 'No such file or directory'],
            'EEXIST' => [17, 'File exists'],
            'EACCES' => [13, 'Permission denied'],
            'EPERM' => [1, 'Operation not permitted'],
            'EROFS' => [30, 'Read-only file system'],
            'ENOSPC' => [28, 'No space left on device'],
            'EDQUOT' => [122, 'Disk quota exceeded'],
        ];
        list($errno, $words) = $errors[$name];
        if (PHP_OS === 'Linux' && function_exists('posix_strerror')) {
            return posix_strerror($errno);
        }
        return $words;
    }

    /**
     * Runs $call, catching the warning or notice PHP raises when it fails:
     * its result, and the OS reason of that message (null: none raised).
     * error_get_last() misses a message a user's error handler took, which
     * an error handler of our own for the length of the call cannot.
     *
     * @return array{0: mixed, 1: string|null}
     */
    public static function withReason(callable $call): array
    {
        $message = null;
        set_error_handler(function (int $type, string $text) use (&$message): bool {
            $message = $text;
            return true;
        });
        try {
            $result = $call();
        } finally {
            restore_error_handler();
        }
        if ($message === null) {
            return [$result, null];
        }
        // "fwrite(): Write of 128 bytes failed with errno=28 No space left on device"
        if (preg_match('/errno=\d+ (.+)$/', $message, $m) === 1) {
            return [$result, $m[1]];
        }
        $pos = strrpos($message, ': ');
        return [$result, $pos === false ? $message : substr($message, $pos + 2)];
    }

    /** The OS reason of the last failed call, without PHP's "fopen(...): " prefix. */
    public static function lastReason(?string $path = null): string
    {
        // PHP cuts its warnings (7.x: at 1024 bytes), the reason at their end
        // with them: a path that long is named by what is wrong with it.
        if ($path !== null && (strlen($path) >= 4096 || max(array_map('strlen', explode('/', $path))) > 255)) {
            return self::osError('ENAMETOOLONG');
        }
        $e = error_get_last();
        if ($e === null) {
            return 'unknown error';
        }
        if ($path !== null && strlen($e['message']) >= 1000) {
            // cut by PHP (7.x: log_errors_max_len): the reason went with the cut
            $dir = dirname($path);
            if (!is_dir($dir)) {
                return self::osError(file_exists($dir) || self::underANonDirectory($path) ? 'ENOTDIR' : 'ENOENT');
            }
            return is_writable($dir) ? 'unknown error' : self::osError('EACCES');
        }
        $pos = strrpos($e['message'], ': ');
        return $pos === false ? $e['message'] : substr($e['message'], $pos + 2);
    }
}

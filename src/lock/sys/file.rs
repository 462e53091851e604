//! Files for flock(2): opening a lock file safely, its identity (stat),
//! the lock calls themselves, and the lock directory's checks.
//!
//! The traps this closes:
//! - a lock file is opened without following a final symlink, close-on-exec
//!   (a program the job starts never inherits the lock) and non-blocking (a
//!   FIFO or a device put at the path cannot hang the open);
//! - a file that exists but is not writable for us is still lockable: the
//!   open falls back to read-only (flock(2) works on any descriptor);
//! - a path's identity is read without following a final symlink, and a
//!   file's from the descriptor we lock, so what we compare is what we hold;
//!   both ask for no timestamps (see `platform::stat_id`), which keeps the
//!   next write of the holder record cheap;
//! - a blocking flock(2) is only ever entered with a wake-up armed
//!   (`wake::Wakeups`): on its own it is restarted after a signal
//!   (SA_RESTART), so PHP's signal handlers would wait with it;
//! - filesystems where flock(2) is unreliable (NFS, SMB, ...) are named, so
//!   the lock can refuse them (the platform file tells them apart).

use super::platform;
use super::stat::{self, Stat};
use parking_lot::Mutex;
use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Identity of a file (device and inode), from fstat/lstat, with its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
    pub uid: u32,
}

impl FileId {
    /// Same file: device and inode (the owner is not part of the identity).
    pub fn same_file(&self, other: &FileId) -> bool {
        self.dev == other.dev && self.ino == other.ino
    }
}

/// The OS reason alone ("Permission denied"), without Rust's "(os error 13)".
pub fn reason(err: &io::Error) -> String {
    let text = err.to_string();
    match text.rsplit_once(" (os error ") {
        Some((reason, _)) => reason.to_owned(),
        None => text,
    }
}

pub fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

/// Opens (creating with `mode` if missing) without following a final
/// symlink, close-on-exec, and non-blocking so a FIFO or device cannot hang
/// us. Falls back to read-only when the file exists but is not writable for
/// us (flock works on read-only descriptors). Returns the file and whether
/// it is writable.
pub fn open_lock_file(path: &CString, mode: u32) -> io::Result<(File, bool)> {
    const BASE: libc::c_int =
        libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY;
    // SAFETY: `path` is a valid NUL-terminated string; the mode is passed as
    // the variadic argument open(2) expects with O_CREAT.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            BASE | libc::O_RDWR | libc::O_CREAT,
            mode as libc::c_uint,
        )
    };
    if fd >= 0 {
        // SAFETY: `fd` was just returned by open(2) and is owned by nobody else.
        return Ok((unsafe { File::from_raw_fd(fd) }, true));
    }
    let err = io::Error::last_os_error();
    if !matches!(
        err.raw_os_error(),
        Some(libc::EACCES | libc::EROFS | libc::EPERM)
    ) {
        return Err(err);
    }
    // SAFETY: as above, without O_CREAT so no mode argument is read.
    let fd = unsafe { libc::open(path.as_ptr(), BASE | libc::O_RDONLY) };
    if fd < 0 {
        // The read-write error says more (it is why we are here).
        return Err(err);
    }
    // SAFETY: `fd` was just returned by open(2) and is owned by nobody else.
    Ok((unsafe { File::from_raw_fd(fd) }, false))
}

fn file_id(st: &Stat) -> FileId {
    FileId {
        dev: st.dev,
        ino: st.ino,
        uid: st.uid,
    }
}

/// The open file's identity, or an error if it is not a regular file.
pub fn regular_file_id(file: &File) -> io::Result<FileId> {
    let st = platform::stat_fd(file.as_raw_fd())?;
    if st.mode & libc::S_IFMT != libc::S_IFREG {
        return Err(io::Error::other(format!(
            "not a regular file (it is {})",
            kind_name(st.mode)
        )));
    }
    Ok(file_id(&st))
}

fn kind_name(mode: libc::mode_t) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => "a directory",
        libc::S_IFIFO => "a FIFO",
        libc::S_IFCHR => "a character device",
        libc::S_IFBLK => "a block device",
        libc::S_IFSOCK => "a socket",
        libc::S_IFLNK => "a symlink",
        _ => "not a regular file",
    }
}

/// What the path names now, a final symlink not followed (a lock file can
/// be unlinked or replaced behind our back, e.g. by a tmp cleaner).
pub fn path_id(path: &CString) -> io::Result<FileId> {
    Ok(file_id(&platform::stat_path(path)?))
}

/// A directory as lstat sees it (a symlink is not followed): its owner and
/// permission bits, or `None` when the path is not a directory.
pub fn dir_owner_and_mode(path: &Path) -> io::Result<Option<(u32, u32)>> {
    let st = stat::lstat(&c_path(path)?)?;
    Ok((st.mode & libc::S_IFMT == libc::S_IFDIR).then_some((st.uid, st.mode & 0o7777)))
}

/// mkdir(2) with exactly `mode` (umask does not apply: it is fixed after).
/// An existing entry is left alone: the caller checks what it is.
pub fn make_private_dir(path: &Path, mode: u32) -> io::Result<()> {
    let c = c_path(path)?;
    // SAFETY: `c` is NUL-terminated.
    if unsafe { libc::mkdir(c.as_ptr(), mode as libc::mode_t) } != 0 {
        let err = io::Error::last_os_error();
        return if err.raw_os_error() == Some(libc::EEXIST) {
            Ok(())
        } else {
            Err(err)
        };
    }
    // SAFETY: as above; the directory was just made by us.
    unsafe { libc::chmod(c.as_ptr(), mode as libc::mode_t) };
    Ok(())
}

/// Whether this process may create files in `dir` (access(2), W_OK|X_OK).
pub fn may_write_dir(dir: &Path) -> bool {
    c_path(dir).is_ok_and(|c| {
        // SAFETY: `c` is NUL-terminated.
        unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) == 0 }
    })
}

/// One non-blocking try: flock(LOCK_EX|LOCK_NB), or LOCK_SH when `shared`
/// (std's file locks are flock(2) on Linux, so util-linux `flock(1)` and
/// PHP's `flock()` see them). `Ok(false)`: held elsewhere.
pub fn try_flock(file: &File, shared: bool) -> io::Result<bool> {
    let tried = if shared {
        file.try_lock_shared()
    } else {
        file.try_lock()
    };
    match tried {
        Ok(()) => Ok(true),
        Err(std::fs::TryLockError::WouldBlock) => Ok(false),
        Err(std::fs::TryLockError::Error(err)) => Err(err),
    }
}

/// A blocking flock(2), as `flock -w` waits: the kernel lists the waiter
/// (/proc/locks, lslocks) and hands it the lock the moment it is free.
/// `Ok(false)`: a signal interrupted it (EINTR), which only a handler
/// without SA_RESTART does; arm [`super::Wakeups`] first, or a wait could
/// outlast its deadline and PHP's signal handlers.
pub fn lock_blocking(file: &File, shared: bool) -> io::Result<bool> {
    let how = if shared { libc::LOCK_SH } else { libc::LOCK_EX };
    // SAFETY: flock(2) on a descriptor `file` owns.
    if unsafe { libc::flock(file.as_raw_fd(), how) } == 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    if err.kind() == io::ErrorKind::Interrupted {
        return Ok(false);
    }
    Err(err)
}

pub fn unlock(file: &File) -> io::Result<()> {
    file.unlock()
}

/// The name of the filesystem `file` is on when flock(2) is unreliable
/// there (network and cluster filesystems), else `None`.
/// Cached per device: the answer cannot change while the filesystem stays
/// mounted, and it saves a syscall on every `new CronLock\File`.
pub fn unreliable_fs(file: &File, dev: u64) -> io::Result<Option<&'static str>> {
    static KNOWN: Mutex<Vec<(u64, Option<&'static str>)>> = Mutex::new(Vec::new());
    if let Some(&(_, fs)) = KNOWN.lock().iter().find(|(d, _)| *d == dev) {
        return Ok(fs);
    }
    let fs = platform::fs_with_unreliable_flock(file)?;
    KNOWN.lock().push((dev, fs));
    Ok(fs)
}

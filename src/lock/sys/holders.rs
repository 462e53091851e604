//! Who holds a lock file, as the kernel sees it: the flock(2) holders of
//! /proc/locks, whether a process has the file open, whether it lives.
//!
//! The traps this closes:
//! - reading /proc/locks never touches the lock, unlike a probing
//!   flock(LOCK_NB) that could make a concurrent try-once acquirer fail;
//! - a pid in /proc/locks can be stale (the locker exited and a child kept
//!   the descriptor, and the pid may since have been reused by an
//!   unrelated process): a holder must also have this very file open;
//! - a process of another user that lives answers kill(0) with EPERM: it
//!   counts as alive.

use super::file::FileId;
use super::platform;
use std::io;

/// Pids of the processes holding a flock(2) lock on the file, as the kernel
/// reports them (/proc/locks).
///
/// # Errors
///
/// Why the kernel cannot be asked (no /proc/locks).
pub fn kernel_flock_holders(id: FileId) -> io::Result<Vec<u32>> {
    platform::flock_holders(id.dev, id.ino)
}

/// Whether `pid` lives and has a descriptor open on the file `id`; where
/// the platform cannot tell which files a process has open, whether it
/// lives. `false` when it cannot be read: unknown is not "holds it".
pub fn holds_file_open(pid: u32, id: FileId) -> bool {
    platform::has_file_open(pid, id.dev, id.ino).unwrap_or_else(|| process_alive(pid))
}

pub fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks for existence and permission.
    unsafe {
        libc::kill(pid, 0) == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
    }
}

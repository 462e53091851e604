//! The other Unixes' side of [`super`] (macOS, the BSDs): the functions of
//! `linux.rs`, with what these systems offer instead.
//!
//! The traps this closes:
//! - without /proc/locks nobody is named from the kernel's view (the caller
//!   then trusts only a recorded pid whose process lives), never a guess;
//! - getentropy(3) gives at most 256 bytes a call: longer buffers are filled
//!   in chunks;
//! - without dup3, a fork child's copy of a lock descriptor is replaced by
//!   dup2 and then made close-on-exec;
//! - without a timer that signals one thread, there is no wake-up for a
//!   blocking flock(2): waits poll instead (`wake::Wakeups` says none).

use super::stat::{self, Stat};
use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// Where this process's open descriptors are listed.
pub const FD_DIRS: &[&str] = &["/dev/fd"];

/// No statfs magic numbers to tell network filesystems by: none is named.
pub fn fs_with_unreliable_flock(_file: &File) -> io::Result<Option<&'static str>> {
    Ok(None)
}

/// No /proc/locks: the kernel's view of the holders is unknown.
///
/// # Errors
///
/// Always: these kernels do not list flock(2) holders.
pub fn flock_holders(_dev: u64, _ino: u64) -> io::Result<Vec<u32>> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "this system's kernel lists no flock(2) holders (only Linux has /proc/locks)",
    ))
}

/// No /proc/<pid>/fd: unknown (the caller then asks whether `pid` lives).
pub fn has_file_open(_pid: u32, _dev: u64, _ino: u64) -> Option<bool> {
    None
}

/// The open file's identity, owner and type.
pub fn stat_fd(fd: RawFd) -> io::Result<Stat> {
    stat::fstat(fd)
}

/// What `path` names, a final symlink not followed.
pub fn stat_path(path: &CStr) -> io::Result<Stat> {
    stat::lstat(path)
}

/// No timer here signals one thread (macOS has no timer_create).
pub const THREAD_TIMERS: bool = false;

/// No wake-up signals: none is needed without [`ThreadTimer`]s.
pub fn wake_signals() -> impl Iterator<Item = libc::c_int> {
    std::iter::empty()
}

/// Never made (see [`THREAD_TIMERS`]).
#[derive(Debug)]
pub struct ThreadTimer;

impl ThreadTimer {
    /// # Errors
    ///
    /// Always `Unsupported`: waits poll instead.
    pub fn new(_signo: libc::c_int) -> io::Result<ThreadTimer> {
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }

    /// # Errors
    ///
    /// Never: there is no such timer to arm.
    pub fn arm(&self, _every: Duration) -> io::Result<()> {
        Ok(())
    }
}

/// One getentropy(3) call for at most 256 bytes: how many it filled, or -1.
pub fn fill_random(buf: &mut [u8]) -> isize {
    let chunk = buf.len().min(256);
    // SAFETY: the pointer and length describe the first `chunk` bytes of
    // `buf`, a live buffer we borrow mutably for the duration of the call.
    match unsafe { libc::getentropy(buf.as_mut_ptr().cast(), chunk) } {
        0 => chunk as isize,
        _ => -1,
    }
}

/// Points descriptor `fd` at the file of `with`, close-on-exec.
///
/// # Safety
///
/// Both must be open descriptors of this process.
pub unsafe fn replace_fd(with: RawFd, fd: RawFd) {
    // SAFETY: the caller passes two open descriptors.
    unsafe {
        libc::dup2(with, fd);
        libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
    }
}

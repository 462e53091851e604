//! The other Unixes' side of [`super`] (macOS, the BSDs): the functions of
//! `linux.rs`, with what these systems offer instead.
//!
//! The traps this closes:
//! - without /proc/locks nobody is named from the kernel's view (the caller
//!   then trusts only a recorded pid whose process lives), never a guess;
//! - getentropy(3) gives at most 256 bytes a call: longer buffers are filled
//!   in chunks;
//! - without dup3, a fork child's copy of a lock descriptor is replaced by
//!   dup2 and then made close-on-exec.

use std::fs::File;
use std::io;
use std::os::fd::RawFd;

/// Where this process's open descriptors are listed.
pub const FD_DIRS: &[&str] = &["/dev/fd"];

/// No statfs magic numbers to tell network filesystems by: none is named.
pub fn fs_with_unreliable_flock(_file: &File) -> io::Result<Option<&'static str>> {
    Ok(None)
}

/// No /proc/locks: the kernel's view of the holders is unknown.
pub fn flock_holders(_dev: u64, _ino: u64) -> Option<Vec<u32>> {
    None
}

/// No /proc/<pid>/fd: unknown (the caller then asks whether `pid` lives).
pub fn has_file_open(_pid: u32, _dev: u64, _ino: u64) -> Option<bool> {
    None
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

//! A file's identity, owner and type, as every Unix's fstat(2) and
//! lstat(2) give them; the platform file may read them more cheaply
//! (Linux: statx without timestamps).
//!
//! The traps this closes:
//! - a path is stat'ed without following a final symlink, so what is
//!   compared is what the path names, not what a symlink there points to.

use std::ffi::CStr;
use std::io;
use std::os::fd::RawFd;

/// What the lock needs of a stat.
#[derive(Debug, Clone, Copy)]
pub struct Stat {
    pub dev: u64,
    pub ino: u64,
    pub uid: u32,
    /// `st_mode`: the type bits (S_IFMT) and the permissions.
    pub mode: libc::mode_t,
}

// The field types differ between Unixes (macOS: an i32 st_dev).
#[allow(clippy::unnecessary_cast)]
fn from_stat(st: &libc::stat) -> Stat {
    Stat {
        dev: st.st_dev as u64,
        ino: st.st_ino as u64,
        uid: st.st_uid,
        mode: st.st_mode,
    }
}

pub fn fstat(fd: RawFd) -> io::Result<Stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is a valid out-pointer for one `struct stat`.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstat succeeded and filled `st`.
    Ok(from_stat(&unsafe { st.assume_init() }))
}

pub fn lstat(path: &CStr) -> io::Result<Stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `path` is NUL-terminated and `st` a valid out-pointer.
    if unsafe { libc::lstat(path.as_ptr(), st.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: lstat succeeded and filled `st`.
    Ok(from_stat(&unsafe { st.assume_init() }))
}

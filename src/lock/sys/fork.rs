//! Lock descriptors across fork(2): a `pcntl_fork()` child gets copies of
//! the parent's lock-file (and lock-connection) descriptors that share the
//! parent's open file description, so it would keep the parent's lock
//! alive after a `kill -9` of the parent, or end the parent's database
//! session when it closes its copy.
//!
//! The traps this closes:
//! - at fork time the child's copies are pointed at /dev/null: the child
//!   holds nothing, and its later close() cannot hit another file;
//! - the list is taken across fork(2), so no other thread (ZTS) can be
//!   halfway through changing it when the child's memory is copied;
//! - the detached numbers are forgotten in the child, so a file it opens
//!   later on the same number is not detached in its own children.

use super::platform;
use parking_lot::Mutex;
use std::os::fd::RawFd;
use std::sync::Once;

fn register_fork_handler() {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        // SAFETY: registers plain function pointers; glibc unregisters them
        // if this shared object is unloaded.
        unsafe {
            libc::pthread_atfork(
                Some(before_fork),
                Some(after_fork_in_parent),
                Some(in_fork_child),
            )
        };
    });
}

/// Descriptors of every open lock file in this process. A `pcntl_fork()`
/// child gets copies that share the parent's open file description, so it
/// would keep the parent's lock alive after a `kill -9` of the parent. The
/// fork handler below points the child's copies at /dev/null: the child
/// holds nothing, and its later close() cannot hit another file.
static LOCK_FDS: Mutex<Vec<RawFd>> = Mutex::new(Vec::new());

pub fn track_fd(fd: RawFd) {
    register_fork_handler();
    LOCK_FDS.lock().push(fd);
}

#[cfg(test)]
pub fn tracked_fds() -> Vec<RawFd> {
    LOCK_FDS.lock().clone()
}

pub fn untrack_fd(fd: RawFd) {
    let mut fds = LOCK_FDS.lock();
    if let Some(at) = fds.iter().position(|&f| f == fd) {
        fds.swap_remove(at);
    }
}

/// Takes LOCK_FDS across fork(2), so that no other thread (ZTS) can be
/// halfway through changing the list when the child's copy of memory is
/// made: the child then finds the list complete and the mutex held by the
/// thread that forked, which is the only thread it has. The forking thread
/// itself never holds LOCK_FDS when it forks (it is only held inside the
/// three functions above, which do not fork), so this cannot deadlock.
extern "C" fn before_fork() {
    std::mem::forget(LOCK_FDS.lock());
}

extern "C" fn after_fork_in_parent() {
    // SAFETY: before_fork locked it in this thread and forgot the guard.
    unsafe { LOCK_FDS.force_unlock() };
}

extern "C" fn in_fork_child() {
    // SAFETY: before_fork locked LOCK_FDS in the thread that forked, which
    // is this one (the child's only thread); nothing else can touch it
    // until the unlock below.
    let fds = unsafe { &mut *LOCK_FDS.data_ptr() };
    // SAFETY: open(2) of a constant path; the result is checked.
    let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if null >= 0 {
        for &fd in fds.iter() {
            // SAFETY: replaces the child's copy of a descriptor we own with
            // /dev/null; the number stays valid for the owner's later close().
            unsafe { platform::replace_fd(null, fd) };
        }
        // SAFETY: `null` was opened above and is not used after this.
        unsafe { libc::close(null) };
    }
    // The detached numbers are no lock files of this process: its objects
    // close them without untracking, and a file opened later on the same
    // number must not be detached in this child's own children.
    fds.clear();
    // SAFETY: pairs the lock taken by before_fork (see above).
    unsafe { LOCK_FDS.force_unlock() };
}

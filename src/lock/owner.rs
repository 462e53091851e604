//! Which process a hold (or a descriptor, or a connection) belongs to: the
//! one fork-ownership check of every backend.
//!
//! The traps this closes:
//! - a `pcntl_fork()` child has a copy of every lock object of its parent:
//!   asked in the child, nothing the parent took is held, released or
//!   closed by the child (release and drop ask on every call);
//! - the pid is the cached one that an atfork handler forgets in the child
//!   (`sys::current_pid`), so the check costs no syscall.

use super::sys;

/// The process that took a hold, opened a descriptor or a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pid: u32,
}

impl Owner {
    /// This process, now.
    pub fn this_process() -> Self {
        Owner {
            pid: sys::current_pid(),
        }
    }

    /// Whether this process is the owner (false in a fork child).
    pub fn is_this_process(self) -> bool {
        self.pid == sys::current_pid()
    }
}

/// The pid of this process (cached; forgotten in a fork child), for
/// messages and holder records.
pub fn current_pid() -> u32 {
    sys::current_pid()
}

/// This host's name, for holder records and session names.
pub fn hostname() -> &'static str {
    sys::hostname()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fork_child_is_not_the_owner() {
        let owner = Owner::this_process();
        assert!(owner.is_this_process());
        assert_eq!(
            owner,
            Owner {
                pid: std::process::id()
            }
        );
        // SAFETY: the child only asks and _exits.
        let child = unsafe { libc::fork() };
        if child == 0 {
            let status =
                i32::from(owner.is_this_process() || !Owner::this_process().is_this_process());
            // SAFETY: leaving the forked child without running test harness code.
            unsafe { libc::_exit(status) };
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(child, &mut status, 0) };
        assert_eq!(libc::WEXITSTATUS(status), 0, "the child owns only its own");
    }
}

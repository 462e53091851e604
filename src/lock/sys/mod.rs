//! Platform calls behind one module: every libc call of the lock code is
//! in here, and nothing outside `sys` names a platform.
//!
//! | file | what |
//! | --- | --- |
//! | `file` | opening lock files safely, stat identities, flock(2), the lock directory's checks |
//! | `stat` | a file's identity, owner and type as every Unix's fstat/lstat give them |
//! | `wake` | wake-ups that interrupt a blocking flock(2) at least every period (a timer signal without SA_RESTART) |
//! | `holders` | who holds a lock file as the kernel sees it (/proc/locks), whether a pid lives |
//! | `process` | this process's pid (forgotten in a fork child), uid, host name, random bytes |
//! | `fork` | lock descriptors detached in a `pcntl_fork()` child |
//! | `sockets` | finding a client library's sockets and making them close-on-exec |
//! | `watchdog` | the thread that shuts down the sockets of a statement that overran |
//! | `linux` / `other` | what differs between Linux and the other Unixes (/proc/locks, statfs magic, statx, per-thread timers, getrandom, dup3); chosen once, here |

mod file;
mod fork;
mod holders;
mod process;
mod sockets;
mod stat;
mod wake;
mod watchdog;

#[cfg(target_os = "linux")]
#[path = "linux.rs"]
mod platform;
#[cfg(not(target_os = "linux"))]
#[path = "other.rs"]
mod platform;

pub use file::{
    c_path, dir_owner_and_mode, lock_blocking, make_private_dir, may_write_dir, open_lock_file,
    path_id, reason, regular_file_id, try_flock, unlock, unreliable_fs, FileId,
};
#[cfg(test)]
pub use fork::tracked_fds;
pub use fork::{track_fd, untrack_fd};
pub use holders::{holds_file_open, kernel_flock_holders, process_alive};
pub use process::{current_pid, descriptors_exhausted, effective_uid, hostname, random_bytes};
pub use sockets::{close_on_exec_sockets, open_sockets, set_close_on_exec, SocketMatch};
pub use wake::Wakeups;
pub use watchdog::{watch_sockets, Cut, InterruptFlag, SocketWatch};

//! This process: its pid (cached, and forgotten in a fork child), its user,
//! the host's name, the OS random source, and whether it has descriptors
//! left.
//!
//! The traps this closes:
//! - the cached pid is forgotten in a fork child by an atfork handler, so a
//!   `pcntl_fork()` child never passes for its parent (every ownership check
//!   compares against it: see `lock::owner`);
//! - an interrupted read of the random source is tried again, not reported;
//! - a client library that failed for want of a descriptor without saying
//!   so can be explained after the fact: a probe open tells EMFILE/ENFILE.

use super::file::reason;
use super::platform;
use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Once, OnceLock};

pub fn effective_uid() -> u32 {
    // SAFETY: geteuid(2) cannot fail.
    unsafe { libc::geteuid() }
}

/// Fills `buf` from the OS random source: getrandom(2) on Linux,
/// getentropy(3) (at most 256 bytes a call) on macOS and the BSDs.
pub fn random_bytes(buf: &mut [u8]) -> io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        let read = platform::fill_random(&mut buf[filled..]);
        if read < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        filled += read as usize;
    }
    Ok(())
}

pub fn hostname() -> &'static str {
    static HOSTNAME: OnceLock<String> = OnceLock::new();
    HOSTNAME.get_or_init(|| {
        let mut buf = [0u8; 256];
        // SAFETY: `buf` is writable for its full length.
        if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
            return "unknown".to_owned();
        }
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    })
}

static PID: AtomicU32 = AtomicU32::new(0);

/// getpid(2) without a syscall: cached, and forgotten in a fork child by
/// an atfork handler (release and drop check it on every call).
pub fn current_pid() -> u32 {
    match PID.load(Ordering::Relaxed) {
        0 => {
            forget_pid_in_fork_children();
            let pid = std::process::id();
            PID.store(pid, Ordering::Relaxed);
            pid
        }
        pid => pid,
    }
}

fn forget_pid_in_fork_children() {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        // SAFETY: registers a plain function pointer; glibc unregisters it
        // if this shared object is unloaded.
        unsafe { libc::pthread_atfork(None, None, Some(forget_pid)) };
    });
}

extern "C" fn forget_pid() {
    PID.store(0, Ordering::Relaxed);
}

/// The OS's words ("Too many open files") when this process cannot open a
/// descriptor now because it has none left (EMFILE) or the system has none
/// (ENFILE); `None` when it can (the probe is closed again at once).
pub fn descriptors_exhausted() -> Option<String> {
    // SAFETY: open(2) of a constant path; the result is checked.
    let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd >= 0 {
        // SAFETY: `fd` was just opened here and is not used after this.
        unsafe { libc::close(fd) };
        return None;
    }
    let err = io::Error::last_os_error();
    matches!(err.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)).then(|| reason(&err))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exhausted_descriptors_are_told_in_the_os_words() {
        assert_eq!(descriptors_exhausted(), None);
        // In a child: lowering the limit below the open descriptors.
        // SAFETY: the child only calls async-signal-safe functions and _exits.
        let child = unsafe { libc::fork() };
        if child == 0 {
            let limit = libc::rlimit {
                rlim_cur: 3,
                rlim_max: 3,
            };
            // SAFETY: a valid rlimit.
            unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
            let told = descriptors_exhausted();
            let code = i32::from(told.as_deref() != Some("Too many open files"));
            // SAFETY: leaving the forked child without running test harness code.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(child, &mut status, 0) };
        assert_eq!(libc::WEXITSTATUS(status), 0);
    }
}

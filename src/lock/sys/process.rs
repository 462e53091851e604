//! This process: its pid (cached, and forgotten in a fork child), its user,
//! the host's name and the OS random source.
//!
//! The traps this closes:
//! - the cached pid is forgotten in a fork child by an atfork handler, so a
//!   `pcntl_fork()` child never passes for its parent (every ownership check
//!   compares against it: see `lock::owner`);
//! - an interrupted read of the random source is tried again, not reported.

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

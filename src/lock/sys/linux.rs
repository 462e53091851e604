//! The Linux side of [`super`]: what only Linux offers or names its own
//! way. `other.rs` has the same functions for the other Unixes.
//!
//! The traps this closes:
//! - a holder's pid is taken from /proc/locks only for exactly this device
//!   and inode (inode numbers alone repeat across filesystems: every tmpfs
//!   counts from 2);
//! - /proc/locks is read a page per read(2), never in the small reads
//!   `read_to_string` starts with: each read makes the kernel walk its list
//!   again, and a list that changed in between loses an entry (measured:
//!   10% of small-read passes missed a held lock while other processes
//!   locked and unlocked; none of 6,000 page reads did);
//! - a fork child's copy of a lock descriptor is replaced atomically and
//!   close-on-exec (dup3), so the number stays valid for its owner's close;
//! - a file's identity is read with statx(2) asking for no timestamps: a
//!   stat that reads ctime/mtime marks them seen (multigrain timestamps,
//!   Linux 6.13+), and the next write of the holder record must then store
//!   a fine-grained time and dirty the inode in the journal (measured on
//!   ext4: about a third of the cycle); fstat/lstat where statx is missing;
//! - a wake-up timer signals this thread alone (SIGEV_THREAD_ID), never
//!   another thread of the process that happens to run;
//! - statx and the timers are raw system calls, so the library needs no
//!   newer glibc than the rest of it (timer_create moved into libc proper
//!   only in glibc 2.34).

use super::stat::{self, Stat};
use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Where this process's open descriptors are listed.
pub const FD_DIRS: &[&str] = &["/proc/self/fd", "/dev/fd"];

/// The name of the filesystem `file` is on when flock(2) is unreliable
/// there (network and cluster filesystems, told by their statfs magic).
pub fn fs_with_unreliable_flock(file: &File) -> io::Result<Option<&'static str>> {
    let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: `st` is a valid out-pointer for one `struct statfs`.
    if unsafe { libc::fstatfs(file.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstatfs succeeded and filled `st`.
    let magic = unsafe { st.assume_init() }.f_type as u64 & 0xFFFF_FFFF;
    Ok(match magic {
        0x6969 => Some("nfs"),
        0x517B => Some("smb"),
        0xFF53_4D42 => Some("cifs"),
        0xFE53_4D42 => Some("smb2"),
        0x0102_1997 => Some("9p"),
        0x00C3_6400 => Some("ceph"),
        0x5346_414F => Some("afs"),
        0x6B41_4653 => Some("kafs"),
        0x7375_7245 => Some("coda"),
        0x0BD0_0BD0 => Some("lustre"),
        0x0116_1970 => Some("gfs2"),
        0x7461_636F => Some("ocfs2"),
        _ => None,
    })
}

/// Pids of the processes holding a flock(2) lock on the file `dev`/`ino`,
/// as the kernel reports them in /proc/locks (waiters, `->`, are not
/// holders), each pid once.
///
/// The kernel prints /proc/locks a page per read(2), walking its list
/// afresh for each, and a lock taken or freed anywhere on the host between
/// two reads shifts the list: an entry at a boundary is printed twice or
/// not at all. A list that fit in one read is a true picture; a longer one
/// that lists no holder is read again, four times at most.
///
/// # Errors
///
/// Why /proc/locks cannot be read (no /proc mounted).
pub fn flock_holders(dev: u64, ino: u64) -> io::Result<Vec<u32>> {
    let wanted = format!(
        "{:02x}:{:02x}:{}",
        libc::major(dev as libc::dev_t),
        libc::minor(dev as libc::dev_t),
        ino
    );
    let mut holders = Vec::new();
    for _ in 0..5 {
        let (text, reads) = read_proc_locks()?;
        holders = listed_holders(&text, &wanted);
        if !holders.is_empty() || reads <= 1 {
            break;
        }
    }
    Ok(holders)
}

/// /proc/locks, and how many read(2) calls returned a part of it (each
/// asks for more than the kernel's page, so the kernel fills a whole page
/// per read and walks its list once per page).
fn read_proc_locks() -> io::Result<(String, usize)> {
    use std::io::Read;
    let mut file = File::open("/proc/locks")?;
    let mut text = Vec::new();
    let mut page = vec![0u8; 64 * 1024];
    let mut reads = 0;
    loop {
        match file.read(&mut page) {
            Ok(0) => break,
            Ok(n) => {
                text.extend_from_slice(&page[..n]);
                reads += 1;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok((String::from_utf8_lossy(&text).into_owned(), reads))
}

fn listed_holders(text: &str, wanted: &str) -> Vec<u32> {
    let mut holders = Vec::new();
    for line in text.lines() {
        // "1: FLOCK  ADVISORY  WRITE 4242 08:02:131 0 EOF"; waiters have "->".
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 6 || fields[1] != "FLOCK" {
            continue;
        }
        let (Ok(pid), dev_ino) = (fields[4].parse::<u32>(), fields[5]) else {
            continue;
        };
        // Exact device and inode only: inode numbers alone repeat across
        // filesystems (every tmpfs mount counts from 2), and naming the
        // holder of another file is worse than naming nobody.
        if dev_ino == wanted && pid != 0 && !holders.contains(&pid) {
            holders.push(pid);
        }
    }
    holders
}

/// Whether `pid` lives and has a descriptor open on the file `dev`/`ino`
/// (its /proc/<pid>/fd entries, followed): `Some(false)` when that cannot
/// be read (another user's process, no /proc), as unknown is not "holds it".
pub fn has_file_open(pid: u32, dev: u64, ino: u64) -> Option<bool> {
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Some(false);
    };
    Some(entries.flatten().any(|entry| {
        std::fs::metadata(entry.path()).is_ok_and(|meta| {
            use std::os::unix::fs::MetadataExt;
            meta.dev() == dev && meta.ino() == ino
        })
    }))
}

/// Set once statx(2) turned out to be missing (ENOSYS; EPERM from a
/// seccomp filter that does not know it): fstat/lstat from then on.
static NO_STATX: AtomicBool = AtomicBool::new(false);

fn statx(dirfd: RawFd, path: &CStr, flags: libc::c_int) -> Option<io::Result<Stat>> {
    if NO_STATX.load(Ordering::Relaxed) {
        return None;
    }
    let mut sx = std::mem::MaybeUninit::<libc::statx>::zeroed();
    let mask = libc::STATX_TYPE | libc::STATX_INO | libc::STATX_UID;
    // SAFETY: statx(2) with a NUL-terminated path and a valid out-pointer
    // for one `struct statx`.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_statx,
            dirfd,
            path.as_ptr(),
            flags,
            mask,
            sx.as_mut_ptr(),
        )
    };
    if rc != 0 {
        let err = io::Error::last_os_error();
        if matches!(err.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) {
            NO_STATX.store(true, Ordering::Relaxed);
            return None;
        }
        return Some(Err(err));
    }
    // SAFETY: statx succeeded and filled `sx`.
    let sx = unsafe { sx.assume_init() };
    Some(Ok(Stat {
        dev: libc::makedev(sx.stx_dev_major, sx.stx_dev_minor),
        ino: sx.stx_ino,
        uid: sx.stx_uid,
        mode: libc::mode_t::from(sx.stx_mode),
    }))
}

/// The open file's identity, owner and type.
pub fn stat_fd(fd: RawFd) -> io::Result<Stat> {
    statx(fd, c"", libc::AT_EMPTY_PATH).unwrap_or_else(|| stat::fstat(fd))
}

/// What `path` names, a final symlink not followed.
pub fn stat_path(path: &CStr) -> io::Result<Stat> {
    statx(libc::AT_FDCWD, path, libc::AT_SYMLINK_NOFOLLOW).unwrap_or_else(|| stat::lstat(path))
}

/// A [`ThreadTimer`] can signal one thread: blocking waits need not poll.
pub const THREAD_TIMERS: bool = true;

/// The realtime signals a wake-up may use, the preferred first: from the
/// top down, never SIGRTMIN itself (PHP's ZTS timeouts use it).
pub fn wake_signals() -> impl Iterator<Item = libc::c_int> {
    ((libc::SIGRTMIN() + 1)..=libc::SIGRTMAX()).rev()
}

/// A POSIX timer that sends a signal to this thread alone
/// (SIGEV_THREAD_ID), deleted when dropped.
#[derive(Debug)]
pub struct ThreadTimer(libc::c_int);

impl ThreadTimer {
    /// # Errors
    ///
    /// What timer_create(2) says (EAGAIN: too many timers).
    pub fn new(signo: libc::c_int) -> io::Result<ThreadTimer> {
        // SAFETY: an all-zero sigevent is a valid value to fill in.
        let mut event: libc::sigevent = unsafe { std::mem::zeroed() };
        event.sigev_notify = libc::SIGEV_THREAD_ID;
        event.sigev_signo = signo;
        // SAFETY: gettid(2) cannot fail.
        event.sigev_notify_thread_id = unsafe { libc::syscall(libc::SYS_gettid) } as libc::c_int;
        let mut id: libc::c_int = 0;
        // SAFETY: the kernel's timer_create(2) with a filled sigevent and
        // a valid out-pointer for its timer id (an int).
        let rc = unsafe {
            libc::syscall(
                libc::SYS_timer_create,
                libc::CLOCK_MONOTONIC,
                &mut event as *mut libc::sigevent,
                &mut id as *mut libc::c_int,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(ThreadTimer(id))
    }

    /// Fires after `every`, then every `every` again, until re-armed or
    /// dropped (a tick lost while the thread was not blocked is followed
    /// by another).
    ///
    /// # Errors
    ///
    /// What timer_settime(2) says (it does not fail on a live timer).
    pub fn arm(&self, every: Duration) -> io::Result<()> {
        let every = libc::timespec {
            tv_sec: every.as_secs() as libc::time_t,
            tv_nsec: every.subsec_nanos() as libc::c_long,
        };
        let spec = libc::itimerspec {
            it_interval: every,
            it_value: every,
        };
        // SAFETY: the kernel's timer_settime(2) on our timer id with a
        // valid itimerspec and no old value wanted.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_timer_settime,
                self.0,
                0,
                &spec as *const libc::itimerspec,
                std::ptr::null_mut::<libc::itimerspec>(),
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for ThreadTimer {
    fn drop(&mut self) {
        // SAFETY: deletes our own timer id, once; any expiry it made is
        // delivered on the way out of this call (the signal is unblocked).
        unsafe { libc::syscall(libc::SYS_timer_delete, self.0) };
    }
}

/// One getrandom(2) call: how many bytes of `buf` it filled, or -1.
pub fn fill_random(buf: &mut [u8]) -> isize {
    // SAFETY: the pointer and length describe `buf`, a live buffer we
    // borrow mutably for the duration of the call.
    unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) }
}

/// Points descriptor `fd` at the file of `with`, close-on-exec.
///
/// # Safety
///
/// Both must be open descriptors of this process.
pub unsafe fn replace_fd(with: RawFd, fd: RawFd) {
    // SAFETY: the caller passes two open descriptors.
    unsafe { libc::dup3(with, fd, libc::O_CLOEXEC) };
}

#[cfg(test)]
mod tests {
    use super::listed_holders;

    #[test]
    fn a_holder_printed_twice_is_one_holder_and_waiters_are_none() {
        // What a read across a shifting page boundary returns: entry 2 again.
        let text = "1: FLOCK  ADVISORY  WRITE 41 fe:00:7 0 EOF\n\
                    2: FLOCK  ADVISORY  WRITE 42 fe:00:9 0 EOF\n\
                    2: -> FLOCK  ADVISORY  WRITE 43 fe:00:9 0 EOF\n\
                    3: FLOCK  ADVISORY  WRITE 42 fe:00:9 0 EOF\n\
                    3: -> FLOCK  ADVISORY  WRITE 43 fe:00:9 0 EOF\n\
                    4: FLOCK  ADVISORY  WRITE 44 fe:01:9 0 EOF\n";
        assert_eq!(listed_holders(text, "fe:00:9"), vec![42]);
        assert_eq!(listed_holders(text, "fe:00:8"), Vec::<u32>::new());
    }
}

//! The Linux side of [`super`]: what only Linux offers or names its own
//! way. `other.rs` has the same functions for the other Unixes.
//!
//! The traps this closes:
//! - a holder's pid is taken from /proc/locks only for exactly this device
//!   and inode (inode numbers alone repeat across filesystems: every tmpfs
//!   counts from 2);
//! - a fork child's copy of a lock descriptor is replaced atomically and
//!   close-on-exec (dup3), so the number stays valid for its owner's close.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};

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
/// as the kernel reports them in /proc/locks; `None` when that cannot be
/// read.
pub fn flock_holders(dev: u64, ino: u64) -> Option<Vec<u32>> {
    let text = std::fs::read_to_string("/proc/locks").ok()?;
    let wanted = format!(
        "{:02x}:{:02x}:{}",
        libc::major(dev as libc::dev_t),
        libc::minor(dev as libc::dev_t),
        ino
    );
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
        if dev_ino == wanted && pid != 0 {
            holders.push(pid);
        }
    }
    Some(holders)
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

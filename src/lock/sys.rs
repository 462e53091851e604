//! Platform calls behind one module: opening lock files safely, flock(2),
//! filesystem detection and the kernel's view of who holds a lock.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, Once, OnceLock};

/// Identity and size of a file, from fstat/lstat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
}

/// The OS reason alone ("Permission denied"), without Rust's "(os error 13)".
pub fn reason(err: &io::Error) -> String {
    let text = err.to_string();
    match text.rsplit_once(" (os error ") {
        Some((reason, _)) => reason.to_owned(),
        None => text,
    }
}

pub fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

/// Opens (creating with `mode` if missing) without following a final
/// symlink, close-on-exec, and non-blocking so a FIFO or device cannot hang
/// us. Falls back to read-only when the file exists but is not writable for
/// us (flock works on read-only descriptors). Returns the file and whether
/// it is writable.
pub fn open_lock_file(path: &CString, mode: u32) -> io::Result<(File, bool)> {
    const BASE: libc::c_int =
        libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY;
    // SAFETY: `path` is a valid NUL-terminated string; the mode is passed as
    // the variadic argument open(2) expects with O_CREAT.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            BASE | libc::O_RDWR | libc::O_CREAT,
            mode as libc::c_uint,
        )
    };
    if fd >= 0 {
        // SAFETY: `fd` was just returned by open(2) and is owned by nobody else.
        return Ok((unsafe { File::from_raw_fd(fd) }, true));
    }
    let err = io::Error::last_os_error();
    if !matches!(
        err.raw_os_error(),
        Some(libc::EACCES | libc::EROFS | libc::EPERM)
    ) {
        return Err(err);
    }
    // SAFETY: as above, without O_CREAT so no mode argument is read.
    let fd = unsafe { libc::open(path.as_ptr(), BASE | libc::O_RDONLY) };
    if fd < 0 {
        // The read-write error says more (it is why we are here).
        return Err(err);
    }
    // SAFETY: `fd` was just returned by open(2) and is owned by nobody else.
    Ok((unsafe { File::from_raw_fd(fd) }, false))
}

fn file_id(st: &libc::stat) -> FileId {
    FileId {
        dev: st.st_dev,
        ino: st.st_ino,
        size: st.st_size as u64,
    }
}

/// fstat: the open file's identity, or an error if it is not a regular file.
pub fn regular_file_id(file: &File) -> io::Result<FileId> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is a valid out-pointer for one `struct stat`.
    if unsafe { libc::fstat(file.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstat succeeded and filled `st`.
    let st = unsafe { st.assume_init() };
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(io::Error::other(format!(
            "not a regular file (it is {})",
            kind_name(st.st_mode)
        )));
    }
    Ok(file_id(&st))
}

fn kind_name(mode: libc::mode_t) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => "a directory",
        libc::S_IFIFO => "a FIFO",
        libc::S_IFCHR => "a character device",
        libc::S_IFBLK => "a block device",
        libc::S_IFSOCK => "a socket",
        libc::S_IFLNK => "a symlink",
        _ => "not a regular file",
    }
}

/// lstat: what the path names now (a lock file can be unlinked or replaced
/// behind our back, e.g. by a tmp cleaner).
pub fn path_id(path: &CString) -> io::Result<FileId> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `path` is NUL-terminated and `st` a valid out-pointer.
    if unsafe { libc::lstat(path.as_ptr(), st.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: lstat succeeded and filled `st`.
    Ok(file_id(&unsafe { st.assume_init() }))
}

/// flock(2) with LOCK_NB when `block` is false. `Ok(false)`: held
/// elsewhere, or a blocking wait was interrupted by a signal (the caller
/// decides whether to wait on).
pub fn flock(file: &File, shared: bool, block: bool) -> io::Result<bool> {
    let mut op = if shared { libc::LOCK_SH } else { libc::LOCK_EX };
    if !block {
        op |= libc::LOCK_NB;
    }
    loop {
        // SAFETY: flock on an fd we own; no memory is passed.
        if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
            return Ok(true);
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EWOULDBLOCK) => return Ok(false),
            Some(libc::EINTR) if block => return Ok(false),
            Some(libc::EINTR) => {}
            _ => return Err(err),
        }
    }
}

pub fn unlock(file: &File) -> io::Result<()> {
    // SAFETY: flock on an fd we own; no memory is passed.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The name of the filesystem `file` is on when flock(2) is unreliable
/// there (network and cluster filesystems), else `None`.
/// Cached per device: the answer cannot change while the filesystem stays
/// mounted, and it saves a syscall on every `new CronLock\File`.
pub fn unreliable_fs(file: &File, dev: u64) -> io::Result<Option<&'static str>> {
    static KNOWN: Mutex<Vec<(u64, Option<&'static str>)>> = Mutex::new(Vec::new());
    if let Some(&(_, fs)) = KNOWN
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|(d, _)| *d == dev)
    {
        return Ok(fs);
    }
    let fs = fs_with_unreliable_flock(file)?;
    KNOWN
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((dev, fs));
    Ok(fs)
}

#[cfg(target_os = "linux")]
fn fs_with_unreliable_flock(file: &File) -> io::Result<Option<&'static str>> {
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

#[cfg(not(target_os = "linux"))]
fn fs_with_unreliable_flock(_file: &File) -> io::Result<Option<&'static str>> {
    Ok(None)
}

/// Pids of the processes holding a flock(2) lock on the file, as the kernel
/// reports them in /proc/locks; `None` when that cannot be read. Reading it
/// never touches the lock, unlike a probing flock(LOCK_NB) that could make a
/// concurrent try-once acquirer fail.
#[cfg(target_os = "linux")]
pub fn kernel_flock_holders(id: FileId) -> Option<Vec<u32>> {
    let text = std::fs::read_to_string("/proc/locks").ok()?;
    let wanted = format!(
        "{:02x}:{:02x}:{}",
        libc::major(id.dev as libc::dev_t),
        libc::minor(id.dev as libc::dev_t),
        id.ino
    );
    let wanted_ino = format!(":{}", id.ino);
    let mut exact = Vec::new();
    let mut same_inode = Vec::new();
    for line in text.lines() {
        // "1: FLOCK  ADVISORY  WRITE 4242 08:02:131 0 EOF"; waiters have "->".
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 6 || fields[1] != "FLOCK" {
            continue;
        }
        let (Ok(pid), dev_ino) = (fields[4].parse::<u32>(), fields[5]) else {
            continue;
        };
        if dev_ino == wanted {
            exact.push(pid);
        } else if dev_ino.ends_with(&wanted_ino) {
            same_inode.push(pid);
        }
    }
    // Some filesystems (btrfs subvolumes, overlayfs) report a device in
    // stat(2) that differs from the one in /proc/locks.
    Some(if exact.is_empty() { same_inode } else { exact })
}

#[cfg(not(target_os = "linux"))]
pub fn kernel_flock_holders(_id: FileId) -> Option<Vec<u32>> {
    None
}

pub fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks for existence and permission.
    unsafe {
        libc::kill(pid, 0) == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
    }
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
/// the fork handler (release and drop check it on every call).
pub fn current_pid() -> u32 {
    match PID.load(Ordering::Relaxed) {
        0 => {
            register_fork_handler();
            let pid = std::process::id();
            PID.store(pid, Ordering::Relaxed);
            pid
        }
        pid => pid,
    }
}

fn register_fork_handler() {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        // SAFETY: registers a plain function pointer; glibc unregisters it
        // if this shared object is unloaded.
        unsafe { libc::pthread_atfork(None, None, Some(in_fork_child)) };
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
    LOCK_FDS.lock().unwrap_or_else(|e| e.into_inner()).push(fd);
}

#[cfg(test)]
pub fn tracked_fds() -> Vec<RawFd> {
    LOCK_FDS.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

pub fn untrack_fd(fd: RawFd) {
    let mut fds = LOCK_FDS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(at) = fds.iter().position(|&f| f == fd) {
        fds.swap_remove(at);
    }
}

extern "C" fn in_fork_child() {
    PID.store(0, Ordering::Relaxed);
    // try_lock: forks come from the PHP thread, which never forks while it
    // holds this mutex; if it somehow is held, leave the fds alone.
    let Ok(mut fds) = LOCK_FDS.try_lock() else {
        return;
    };
    // SAFETY: open(2) of a constant path; the result is checked.
    let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if null < 0 {
        return;
    }
    for &fd in fds.iter() {
        // SAFETY: replaces the child's copy of a descriptor we own with
        // /dev/null; the number stays valid for the owner's later close().
        unsafe { replace_fd(null, fd) };
    }
    // SAFETY: `null` was opened above and is not used after this.
    unsafe { libc::close(null) };
    // The detached numbers are no lock files of this process: its objects
    // close them without untracking, and a file opened later on the same
    // number must not be detached in this child's own children.
    fds.clear();
}

#[cfg(target_os = "linux")]
unsafe fn replace_fd(with: RawFd, fd: RawFd) {
    // SAFETY: the caller passes two open descriptors.
    unsafe { libc::dup3(with, fd, libc::O_CLOEXEC) };
}

#[cfg(not(target_os = "linux"))]
unsafe fn replace_fd(with: RawFd, fd: RawFd) {
    // SAFETY: the caller passes two open descriptors.
    unsafe {
        libc::dup2(with, fd);
        libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
    }
}

//! Platform calls behind one module: opening lock files safely, flock(2),
//! filesystem detection and the kernel's view of who holds a lock.

use parking_lot::Mutex;
use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Once, OnceLock};
use std::time::{Duration, Instant};

/// Identity of a file (device and inode), from fstat/lstat, with its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
    pub uid: u32,
}

impl FileId {
    /// Same file: device and inode (the owner is not part of the identity).
    pub fn same_file(&self, other: &FileId) -> bool {
        self.dev == other.dev && self.ino == other.ino
    }
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
        uid: st.st_uid,
    }
}

fn fstat(file: &File) -> io::Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is a valid out-pointer for one `struct stat`.
    if unsafe { libc::fstat(file.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstat succeeded and filled `st`.
    Ok(unsafe { st.assume_init() })
}

/// The open file's size now (not cached: someone may rewrite it any time).
pub fn file_size(file: &File) -> io::Result<u64> {
    Ok(fstat(file)?.st_size as u64)
}

/// fstat: the open file's identity, or an error if it is not a regular file.
pub fn regular_file_id(file: &File) -> io::Result<FileId> {
    let st = fstat(file)?;
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

fn lstat(path: &CString) -> io::Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `path` is NUL-terminated and `st` a valid out-pointer.
    if unsafe { libc::lstat(path.as_ptr(), st.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: lstat succeeded and filled `st`.
    Ok(unsafe { st.assume_init() })
}

/// lstat: what the path names now (a lock file can be unlinked or replaced
/// behind our back, e.g. by a tmp cleaner).
pub fn path_id(path: &CString) -> io::Result<FileId> {
    Ok(file_id(&lstat(path)?))
}

/// A directory as lstat sees it (a symlink is not followed): its owner and
/// permission bits, or `None` when the path is not a directory.
pub fn dir_owner_and_mode(path: &Path) -> io::Result<Option<(u32, u32)>> {
    let st = lstat(&c_path(path)?)?;
    Ok((st.st_mode & libc::S_IFMT == libc::S_IFDIR).then_some((st.st_uid, st.st_mode & 0o7777)))
}

/// mkdir(2) with exactly `mode` (umask does not apply: it is fixed after).
/// An existing entry is left alone: the caller checks what it is.
pub fn make_private_dir(path: &Path, mode: u32) -> io::Result<()> {
    let c = c_path(path)?;
    // SAFETY: `c` is NUL-terminated.
    if unsafe { libc::mkdir(c.as_ptr(), mode as libc::mode_t) } != 0 {
        let err = io::Error::last_os_error();
        return if err.raw_os_error() == Some(libc::EEXIST) {
            Ok(())
        } else {
            Err(err)
        };
    }
    // SAFETY: as above; the directory was just made by us.
    unsafe { libc::chmod(c.as_ptr(), mode as libc::mode_t) };
    Ok(())
}

pub fn effective_uid() -> u32 {
    // SAFETY: geteuid(2) cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether this process may create files in `dir` (access(2), W_OK|X_OK).
pub fn may_write_dir(dir: &Path) -> bool {
    c_path(dir).is_ok_and(|c| {
        // SAFETY: `c` is NUL-terminated.
        unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) == 0 }
    })
}

/// One non-blocking try: flock(LOCK_EX|LOCK_NB), or LOCK_SH when `shared`
/// (std's file locks are flock(2) on Linux, so util-linux `flock(1)` and
/// PHP's `flock()` see them). `Ok(false)`: held elsewhere. There is no
/// blocking variant on purpose: a blocking flock(2) is restarted after a
/// signal (SA_RESTART), so PHP's signal handlers would wait with it.
pub fn try_flock(file: &File, shared: bool) -> io::Result<bool> {
    let tried = if shared {
        file.try_lock_shared()
    } else {
        file.try_lock()
    };
    match tried {
        Ok(()) => Ok(true),
        Err(std::fs::TryLockError::WouldBlock) => Ok(false),
        Err(std::fs::TryLockError::Error(err)) => Err(err),
    }
}

pub fn unlock(file: &File) -> io::Result<()> {
    file.unlock()
}

/// The name of the filesystem `file` is on when flock(2) is unreliable
/// there (network and cluster filesystems), else `None`.
/// Cached per device: the answer cannot change while the filesystem stays
/// mounted, and it saves a syscall on every `new CronLock\File`.
pub fn unreliable_fs(file: &File, dev: u64) -> io::Result<Option<&'static str>> {
    static KNOWN: Mutex<Vec<(u64, Option<&'static str>)>> = Mutex::new(Vec::new());
    if let Some(&(_, fs)) = KNOWN.lock().iter().find(|(d, _)| *d == dev) {
        return Ok(fs);
    }
    let fs = fs_with_unreliable_flock(file)?;
    KNOWN.lock().push((dev, fs));
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

/// Whether `pid` lives and has a descriptor open on the file `id` (its
/// /proc/<pid>/fd entries, followed). A pid in /proc/locks can be stale: the
/// locker exited and a child kept the descriptor, and the pid may since
/// have been reused by an unrelated process. `false` when that cannot be
/// read (another user's process, no /proc): unknown is not "holds it".
#[cfg(target_os = "linux")]
pub fn holds_file_open(pid: u32, id: FileId) -> bool {
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    entries.flatten().any(|entry| {
        std::fs::metadata(entry.path()).is_ok_and(|meta| {
            use std::os::unix::fs::MetadataExt;
            meta.dev() == id.dev && meta.ino() == id.ino
        })
    })
}

#[cfg(not(target_os = "linux"))]
pub fn holds_file_open(pid: u32, _id: FileId) -> bool {
    process_alive(pid)
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

/// Fills `buf` from the OS random source: getrandom(2) on Linux,
/// getentropy(3) (at most 256 bytes a call) on macOS and the BSDs.
pub fn random_bytes(buf: &mut [u8]) -> io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        let rest = &mut buf[filled..];
        #[cfg(target_os = "linux")]
        // SAFETY: the pointer and length describe `rest`, a live buffer we
        // borrow mutably for the duration of the call.
        let read = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        #[cfg(not(target_os = "linux"))]
        let read = {
            let chunk = rest.len().min(256);
            // SAFETY: as above, for the first `chunk` bytes of `rest`.
            match unsafe { libc::getentropy(rest.as_mut_ptr().cast(), chunk) } {
                0 => chunk as isize,
                _ => -1,
            }
        };
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
    PID.store(0, Ordering::Relaxed);
    // The parent's watchdog thread is not in the child: the child starts
    // its own when it first needs one.
    WATCHDOG.store(std::ptr::null_mut(), Ordering::Release);
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
            unsafe { replace_fd(null, fd) };
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

/// Which sockets of this process [`close_on_exec_sockets`] marks.
#[derive(Debug, Clone, Copy)]
pub enum SocketMatch<'a> {
    /// TCP (IPv4 or IPv6) sockets bound to this local port.
    LocalPort(u16),
    /// Unix-domain sockets connected to the socket at this path.
    UnixPeer(&'a Path),
}

/// The descriptors of this process that may be sockets: /proc/self/fd on
/// Linux, /dev/fd elsewhere, else every number below 4096.
fn candidate_fds() -> Vec<RawFd> {
    for dir in ["/proc/self/fd", "/dev/fd"] {
        if let Ok(entries) = std::fs::read_dir(dir) {
            let fds: Vec<RawFd> = entries
                .flatten()
                .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
                .collect();
            if !fds.is_empty() {
                return fds;
            }
        }
    }
    (0..4096).collect()
}

/// The address of socket `fd`'s near end (`peer`: false) or far end.
fn socket_address(fd: RawFd, peer: bool) -> Option<(libc::sockaddr_storage, libc::socklen_t)> {
    // SAFETY: an all-zero sockaddr_storage is a valid value.
    let mut addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: `addr` is writable for `len` bytes; an fd that is no socket
    // (or not open) only fails.
    let named = unsafe {
        if peer {
            libc::getpeername(fd, (&raw mut addr).cast(), &mut len)
        } else {
            libc::getsockname(fd, (&raw mut addr).cast(), &mut len)
        }
    } == 0;
    named.then_some((addr, len))
}

fn matches(fd: RawFd, wanted: SocketMatch<'_>) -> bool {
    match wanted {
        SocketMatch::LocalPort(port) => {
            let Some((addr, _)) = socket_address(fd, false) else {
                return false;
            };
            let local = match i32::from(addr.ss_family) {
                // SAFETY: the family says which sockaddr type was written.
                libc::AF_INET => unsafe {
                    (*(&raw const addr).cast::<libc::sockaddr_in>()).sin_port
                },
                // SAFETY: as above.
                libc::AF_INET6 => unsafe {
                    (*(&raw const addr).cast::<libc::sockaddr_in6>()).sin6_port
                },
                _ => return false,
            };
            u16::from_be(local) == port
        }
        SocketMatch::UnixPeer(path) => {
            let Some((addr, len)) = socket_address(fd, true) else {
                return false;
            };
            if i32::from(addr.ss_family) != libc::AF_UNIX {
                return false;
            }
            // SAFETY: the family says a sockaddr_un was written.
            let un = unsafe { &*(&raw const addr).cast::<libc::sockaddr_un>() };
            let offset = std::mem::offset_of!(libc::sockaddr_un, sun_path);
            let path_len = (len as usize).saturating_sub(offset).min(un.sun_path.len());
            let bytes: Vec<u8> = un.sun_path[..path_len]
                .iter()
                .map(|&c| c as u8)
                .take_while(|&b| b != 0)
                .collect();
            if bytes.is_empty() {
                return false;
            }
            let peer = Path::new(std::ffi::OsStr::from_bytes(&bytes));
            peer == path || same_inode(peer, path)
        }
    }
}

fn same_inode(a: &Path, b: &Path) -> bool {
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => {
            use std::os::unix::fs::MetadataExt;
            a.dev() == b.dev() && a.ino() == b.ino()
        }
        _ => false,
    }
}

/// Marks close-on-exec every socket of this process that matches `wanted`
/// (a connection a client library opened without FD_CLOEXEC), so that a
/// program the process exec()s does not inherit it.
pub fn close_on_exec_sockets(wanted: SocketMatch<'_>) {
    for fd in candidate_fds() {
        if matches(fd, wanted) {
            set_close_on_exec(fd);
        }
    }
}

pub fn set_close_on_exec(fd: RawFd) {
    // SAFETY: fcntl on a descriptor number; an invalid one only fails.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
        }
    }
}

/// A flag another thread sets when work is waiting for the thread that
/// blocks (PHP: the engine's `EG(vm_interrupt)`, set by pcntl when a signal
/// handler is pending).
#[derive(Clone, Copy)]
pub struct InterruptFlag(*const AtomicBool);

// SAFETY: only read, atomically; `InterruptFlag::new`'s caller promises the
// flag outlives every watch that reads it.
unsafe impl Send for InterruptFlag {}

impl InterruptFlag {
    /// # Safety
    ///
    /// `flag` points at a one-byte boolean that stays valid (and is written
    /// only as a whole byte) for as long as any [`SocketWatch`] given this
    /// flag is armed.
    pub unsafe fn new(flag: *const AtomicBool) -> Self {
        InterruptFlag(flag)
    }

    fn is_set(self) -> bool {
        // SAFETY: valid while armed (see `new`).
        unsafe { (*self.0).load(Ordering::SeqCst) }
    }
}

struct Watches {
    list: Vec<Armed>,
    /// When the watchdog thread looks next (`None`: when woken): a new
    /// watch due no earlier needs no wake-up (a syscall and a context
    /// switch on every statement otherwise).
    next_check: Option<Instant>,
}

/// One statement being watched.
struct Armed {
    id: u64,
    fds: Vec<RawFd>,
    deadline: Instant,
    /// From this instant on, a set flag cuts the statement short too.
    on_interrupt: Option<(Instant, InterruptFlag)>,
    fired: Option<Cut>,
}

/// Why a [`SocketWatch`] shut its sockets down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// The deadline passed.
    Deadline,
    /// The interrupt flag was set.
    Interrupt,
}

/// The thread that shuts down the sockets of statements that overran. One
/// per process: a fork child, which has no copy of the thread, makes its own
/// (in_fork_child forgets the parent's, whose mutex the child never touches).
struct Watchdog {
    armed: Mutex<Watches>,
    thread: OnceLock<std::thread::Thread>,
}

static WATCHDOG: std::sync::atomic::AtomicPtr<Watchdog> =
    std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());
static NEXT_WATCH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// How often a watch that may be cut short by the interrupt flag looks at it.
const INTERRUPT_POLL: Duration = Duration::from_millis(20);

fn watchdog() -> Option<&'static Watchdog> {
    register_fork_handler();
    let current = WATCHDOG.load(Ordering::Acquire);
    if !current.is_null() {
        // SAFETY: watchdogs are leaked, never freed.
        return Some(unsafe { &*current });
    }
    let dog: &'static Watchdog = Box::leak(Box::new(Watchdog {
        armed: Mutex::new(Watches {
            list: Vec::new(),
            next_check: None,
        }),
        thread: OnceLock::new(),
    }));
    let thread = spawn_without_signals(move || dog.run())?;
    let _ = dog.thread.set(thread);
    match WATCHDOG.compare_exchange(
        std::ptr::null_mut(),
        std::ptr::from_ref(dog).cast_mut(),
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        Ok(_) => Some(dog),
        // Another thread (ZTS) made one first: ours parks for ever, unused.
        // SAFETY: as above.
        Err(theirs) => Some(unsafe { &*theirs }),
    }
}

/// Spawns a thread with every signal blocked, so that the kernel never
/// delivers a process signal (meant for PHP's pcntl handlers) to it.
fn spawn_without_signals(body: impl FnOnce() + Send + 'static) -> Option<std::thread::Thread> {
    // SAFETY: sigset_t is plain data, filled by sigfillset; the thread's
    // mask is put back right after the spawn, which inherits the full one.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut previous: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut previous);
        let spawned = std::thread::Builder::new()
            .name("cronlock-watch".to_owned())
            .stack_size(64 * 1024)
            .spawn(body);
        libc::pthread_sigmask(libc::SIG_SETMASK, &previous, std::ptr::null_mut());
        spawned.ok().map(|handle| handle.thread().clone())
    }
}

impl Watchdog {
    fn run(&self) {
        loop {
            match self.check(Instant::now()) {
                None => std::thread::park(),
                Some(wait) => std::thread::park_timeout(wait),
            }
        }
    }

    /// Cuts what overran; returns how long until the next check is due.
    fn check(&self, now: Instant) -> Option<Duration> {
        let mut armed = self.armed.lock();
        let mut next: Option<Duration> = None;
        for watch in armed.list.iter_mut().filter(|w| w.fired.is_none()) {
            let interrupted = watch
                .on_interrupt
                .is_some_and(|(from, flag)| now >= from && flag.is_set());
            let cut = if interrupted {
                Cut::Interrupt
            } else if now >= watch.deadline {
                Cut::Deadline
            } else {
                let mut due = watch.deadline - now;
                if let Some((from, _)) = watch.on_interrupt {
                    due = due.min(from.saturating_duration_since(now).max(INTERRUPT_POLL));
                }
                next = Some(next.map_or(due, |n| n.min(due)));
                continue;
            };
            {
                for &fd in &watch.fds {
                    // SAFETY: shutdown(2) on a descriptor number the
                    // statement's connection owns (it is closed only after
                    // the watch is disarmed); the descriptor stays open.
                    unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
                }
                watch.fired = Some(cut);
            }
        }
        armed.next_check = next.map(|wait| now + wait);
        next
    }
}

/// While it lives, a statement on the connection whose sockets are `fds`
/// is watched: at `deadline`, or once `on_interrupt`'s flag is set after its
/// instant, the sockets are shut down (both directions; the descriptors stay
/// open for their owner), so the blocked read returns at once and the client
/// library reports the connection lost. [`SocketWatch::finish`] says whether
/// and why that happened (then the connection is dead, whatever the
/// statement said).
pub struct SocketWatch {
    armed: Option<(&'static Watchdog, u64)>,
}

/// Watches a statement (see [`SocketWatch`]). Without a watchdog thread (it
/// could not be started) or without descriptors, nothing is cut.
pub fn watch_sockets(
    fds: &[RawFd],
    deadline: Instant,
    on_interrupt: Option<(Instant, InterruptFlag)>,
) -> SocketWatch {
    if fds.is_empty() {
        return SocketWatch { armed: None };
    }
    let Some(dog) = watchdog() else {
        return SocketWatch { armed: None };
    };
    let id = NEXT_WATCH.fetch_add(1, Ordering::Relaxed);
    let first_due = on_interrupt.map_or(deadline, |(from, _)| from.min(deadline));
    let wake = {
        let mut armed = dog.armed.lock();
        armed.list.push(Armed {
            id,
            fds: fds.to_vec(),
            deadline,
            on_interrupt,
            fired: None,
        });
        armed.next_check.is_none_or(|next| next > first_due)
    };
    if wake {
        if let Some(thread) = dog.thread.get() {
            thread.unpark();
        }
    }
    SocketWatch {
        armed: Some((dog, id)),
    }
}

impl SocketWatch {
    /// Ends the watch: why the sockets were shut down, if they were.
    pub fn finish(mut self) -> Option<Cut> {
        self.disarm()
    }

    fn disarm(&mut self) -> Option<Cut> {
        let (dog, id) = self.armed.take()?;
        let mut armed = dog.armed.lock();
        let at = armed.list.iter().position(|w| w.id == id)?;
        armed.list.swap_remove(at).fired
    }
}

impl Drop for SocketWatch {
    fn drop(&mut self) {
        self.disarm();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connected pair of Unix sockets: (ours, the "server" that never answers).
    fn socket_pair() -> (File, File) {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors socketpair(2) writes.
        let made =
            unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, fds.as_mut_ptr()) };
        assert_eq!(made, 0);
        // SAFETY: both were just created and are owned by nobody else.
        unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) }
    }

    fn blocked_read(file: &File) -> isize {
        let mut buf = [0u8; 16];
        // SAFETY: `buf` is writable for its length.
        unsafe { libc::read(file.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) }
    }

    #[test]
    fn a_statement_past_its_deadline_has_its_socket_shut_down() {
        let (ours, _server) = socket_pair();
        let started = Instant::now();
        let watch = watch_sockets(
            &[ours.as_raw_fd()],
            started + Duration::from_millis(200),
            None,
        );
        assert_eq!(blocked_read(&ours), 0, "end of file once cut");
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert_eq!(watch.finish(), Some(Cut::Deadline));
    }

    #[test]
    fn a_set_interrupt_flag_cuts_a_watched_statement_after_its_instant() {
        static FLAG: AtomicBool = AtomicBool::new(false);
        let (ours, _server) = socket_pair();
        let started = Instant::now();
        // SAFETY: a static lives for ever.
        let flag = unsafe { InterruptFlag::new(&raw const FLAG) };
        let watch = watch_sockets(
            &[ours.as_raw_fd()],
            started + Duration::from_secs(60),
            Some((started + Duration::from_millis(100), flag)),
        );
        FLAG.store(true, Ordering::SeqCst);
        assert_eq!(blocked_read(&ours), 0);
        assert!(started.elapsed() >= Duration::from_millis(100));
        assert!(started.elapsed() < Duration::from_secs(30));
        assert_eq!(watch.finish(), Some(Cut::Interrupt));
    }

    #[test]
    fn a_statement_answered_in_time_is_left_alone() {
        let (ours, server) = socket_pair();
        let watch = watch_sockets(
            &[ours.as_raw_fd()],
            Instant::now() + Duration::from_secs(60),
            None,
        );
        // SAFETY: writes one byte from a live buffer.
        unsafe { libc::write(server.as_raw_fd(), b"x".as_ptr().cast(), 1) };
        assert_eq!(blocked_read(&ours), 1);
        assert_eq!(watch.finish(), None);
        // SAFETY: as above.
        unsafe { libc::write(server.as_raw_fd(), b"y".as_ptr().cast(), 1) };
        assert_eq!(blocked_read(&ours), 1, "still connected");
    }

    fn close_on_exec(fd: RawFd) -> bool {
        // SAFETY: fcntl on an open descriptor.
        unsafe { libc::fcntl(fd, libc::F_GETFD) & libc::FD_CLOEXEC != 0 }
    }

    fn inheritable(fd: RawFd) {
        // SAFETY: fcntl on an open descriptor.
        unsafe { libc::fcntl(fd, libc::F_SETFD, 0) };
        assert!(!close_on_exec(fd));
    }

    #[test]
    fn sockets_connected_to_a_unix_socket_path_or_from_a_local_port_are_made_close_on_exec() {
        use std::os::unix::net::{UnixListener, UnixStream};
        let dir = std::env::temp_dir().join(format!("cronlock-cloexec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("server.sock");
        let _ = std::fs::remove_file(&path);
        let _listener = UnixListener::bind(&path).unwrap();
        let client = UnixStream::connect(&path).unwrap();
        let other = UnixStream::connect(&path).unwrap();
        inheritable(client.as_raw_fd());
        close_on_exec_sockets(SocketMatch::UnixPeer(&dir.join("elsewhere.sock")));
        assert!(!close_on_exec(client.as_raw_fd()), "another path");
        close_on_exec_sockets(SocketMatch::UnixPeer(&path));
        assert!(close_on_exec(client.as_raw_fd()));
        assert!(close_on_exec(other.as_raw_fd()));

        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let tcp = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        inheritable(tcp.as_raw_fd());
        close_on_exec_sockets(SocketMatch::LocalPort(tcp.local_addr().unwrap().port()));
        assert!(close_on_exec(tcp.as_raw_fd()));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

//! An flock(2) lock on a file, safe for cron jobs.
//!
//! ```no_run
//! use cronlock::lock::{file::{FileLock, FileOptions}, Wait};
//!
//! let mut lock = FileLock::open("/run/lock/sync-orders.lock".as_ref(), FileOptions::default())?;
//! if lock.acquire(Wait::Once)? {
//!     // ... the job ...
//!     lock.release()?;
//! }
//! # Ok::<(), cronlock::error::Error>(())
//! ```
//!
//! The traps this closes:
//! - the file is opened close-on-exec (programs the job starts never inherit
//!   the lock), without following a final symlink, and must be a regular
//!   file; it is never truncated and never unlinked;
//! - after locking, the path is checked to still name the locked file: if a
//!   tmp cleaner or a user unlinked or replaced it while we waited, the lock
//!   is retaken on the file the path names now. A file unlinked or replaced
//!   while *held* cannot be protected (flock(2) locks an inode, and another
//!   run can lock the new file): `renew` and `acquire` on a held lock notice
//!   it, drop the hold and return false, so the holder can stop;
//! - another object of this thread on the same file (device and inode) is
//!   refused rather than left to wait for its own thread forever;
//! - the holder's pid, host and start time are written only after the lock is
//!   held, in place (no truncate-then-write, which costs a disk flush on
//!   ext4), and only if the file, as it is at that moment, is empty or holds
//!   exactly such a record: locking someone's script or data file never
//!   writes to it, even after it was rewritten in place;
//! - a holder record that cannot be written (a full file system) does not
//!   cost the lock, but is not silent either: [`FileLock::unwritten_record`]
//!   says why, for the PHP layer's warning;
//! - waits poll with non-blocking flock(2), checking [`super::interrupted`]
//!   between tries, so PHP's signal handlers run during a wait;
//! - a dropped, unlocked lock leaves its descriptor to the next `FileLock`
//!   of the same path in this thread (up to 8), so a new object per run
//!   costs no open/close; it is reused only while the path still names its
//!   file and that file passes the checks of a fresh open, and it is
//!   re-checked like any other after locking;
//! - release and drop act only in the process that acquired (`lock::owner`):
//!   a `fork()` child cannot free the parent's lock, and its copy of the
//!   descriptor is detached at fork time, so it cannot keep the lock alive
//!   either.
//!
//! The holder record's format is in `file/record.rs`; the registry of this
//! thread's holds in `lock::registry`.

mod record;

use super::owner::{current_pid, Owner};
use super::registry::{ObjectId, Registry};
use super::sys::{self, FileId};
use super::{Refusal, Wait};
use crate::error::{Error, Result};
use record::{current_record, holds_only_a_record_or_nothing, read_at_most};
pub use record::{parse_record_holder, parse_record_pid, RECORD_LEN};
use std::cell::RefCell;
use std::ffi::CString;
use std::fs::File;
use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How many unlocked descriptors of dropped locks a thread keeps for reuse.
const IDLE_MAX: usize = 8;
/// Longest pause between two tries of a wait; bounds the hand-off latency
/// (there is no flock(2) with a timeout, and a blocking one would not let
/// PHP's signal handlers run: see [`sys::try_flock`]).
const MAX_POLL: Duration = Duration::from_millis(1);
/// A wait forever that has lasted [`LONG_WAIT`] polls at most this far apart:
/// a lock held for minutes costs no thousand syscalls a second, and a free
/// lock or a pending signal is still noticed within this.
const MAX_POLL_LONG_WAIT: Duration = Duration::from_millis(20);
const LONG_WAIT: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileOptions {
    /// Permission bits for a newly created file.
    pub mode: u32,
    /// LOCK_SH (many readers) instead of LOCK_EX.
    pub shared: bool,
    /// Accept filesystems where flock(2) is unreliable (NFS, SMB, ...).
    pub allow_network_fs: bool,
}

impl Default for FileOptions {
    fn default() -> Self {
        FileOptions {
            mode: 0o644,
            shared: false,
            allow_network_fs: false,
        }
    }
}

/// An open lock file, owned by the process that opened it.
#[derive(Debug)]
struct Handle {
    file: File,
    id: FileId,
    writable: bool,
    opened_by: Owner,
}

impl Drop for Handle {
    fn drop(&mut self) {
        // A fork child's registry is a copy nobody reads; leave it alone.
        if self.opened_by.is_this_process() {
            sys::untrack_fd(self.file.as_raw_fd());
        }
    }
}

/// A file this thread holds through one [`FileLock`]: flock(2) excludes two
/// open file descriptions of one process from each other, so a second
/// object on the same file would wait for this thread itself.
#[derive(Debug, Clone, Copy)]
struct HeldFile {
    id: FileId,
    shared: bool,
}

thread_local! {
    static HELD: Registry<HeldFile> = const { Registry::new() };
}

/// Whether another object of this thread holds `id` in a mode that excludes
/// `shared` (readers do not exclude readers).
fn held_by_another_object(id: FileId, shared: bool, me: ObjectId) -> bool {
    HELD.with(|held| held.held_by_another(me, |h| h.id.same_file(&id) && !(h.shared && shared)))
}

#[derive(Debug)]
pub struct FileLock {
    path: PathBuf,
    c_path: CString,
    options: FileOptions,
    /// Dropped by hand: `Drop` gives it to the idle cache instead.
    handle: ManuallyDrop<Handle>,
    /// The process that holds the lock through this object.
    held_by: Option<Owner>,
    /// This object in the thread's [`HELD`] registry.
    object: ObjectId,
    /// Why the last `acquire` returned false.
    refusal: Option<Refusal>,
    /// Why the last `acquire` that took the lock could not write its
    /// holder record; taken by [`FileLock::unwritten_record`].
    record_failure: Option<io::Error>,
}

impl FileLock {
    /// Opens the lock file, creating it when missing.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidValue`] for an empty path, a NUL byte or a mode above
    /// 0o7777; [`Error::Lock`] when the file cannot be opened, is not a
    /// regular file, is on a network filesystem (unless allowed), or is in a
    /// world-writable directory and owned by another user than us or root.
    pub fn open(path: &Path, options: FileOptions) -> Result<Self> {
        if path.as_os_str().is_empty() {
            return Err(Error::value("$path", "must not be empty"));
        }
        let c_path =
            sys::c_path(path).map_err(|_| Error::value("$path", "must not contain NUL bytes"))?;
        if options.mode > 0o7777 {
            return Err(Error::value(
                "$options['mode']",
                "must be between 0 and 0o7777",
            ));
        }
        let handle = match reuse_idle(path, &c_path, &options)? {
            Some(handle) => handle,
            None => open_handle(path, &c_path, &options)?,
        };
        Ok(FileLock {
            path: path.to_owned(),
            c_path,
            options,
            handle: ManuallyDrop::new(handle),
            held_by: None,
            object: ObjectId::next(),
            refusal: None,
            record_failure: None,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Takes the lock. `Ok(false)`: another holder kept it for the whole wait,
    /// the wait was cut short by [`super::interrupted`] (a PHP signal
    /// handler or timeout waiting to run), or, for a try once, another object
    /// of this thread holds the file; [`FileLock::refusal`] tells which.
    ///
    /// On a lock this object holds already it waits for nothing: `Ok(true)`
    /// when the path still names the locked file, else the hold is lost
    /// (the stale file is unlocked) and it is `Ok(false)`.
    ///
    /// # Errors
    ///
    /// [`Error::Lock`] when another object of this thread holds the file and
    /// `wait` is not [`Wait::Once`] (that wait could never end), when
    /// flock(2) fails for another reason than contention, or when the file
    /// cannot be reopened after it was replaced.
    pub fn acquire(&mut self, wait: Wait) -> Result<bool> {
        self.refusal = None;
        if self.is_held() {
            return self.confirm_hold();
        }
        if !self.handle.opened_by.is_this_process() {
            // A fork child: its descriptor was detached; open its own.
            self.reopen()?;
        }
        self.held_by = None;
        let started = Instant::now();
        let mut pause = Duration::from_micros(50);
        loop {
            if held_by_another_object(self.handle.id, self.options.shared, self.object) {
                if wait == Wait::Once {
                    return Ok(self.refuse(Refusal::HeldByThisThread));
                }
                return Err(Error::Lock(format!(
                    "lock file {} is already held by this process (pid {}) through another \
                     CronLock\\File object; waiting for it would deadlock",
                    super::shorten(&self.path.display().to_string()),
                    current_pid()
                )));
            }
            let locked = sys::try_flock(&self.handle.file, self.options.shared)
                .map_err(|e| self.os_error("cannot lock", &e))?;
            if locked {
                if self.still_named_by_path()? {
                    self.held_by = Some(Owner::this_process());
                    self.register_hold();
                    self.write_record();
                    return Ok(true);
                }
                // Replaced or unlinked while we waited: that inode excludes
                // nobody any more. Lock the file the path names now.
                let _ = sys::unlock(&self.handle.file);
                self.reopen()?;
                continue;
            }
            if super::interrupted() {
                return Ok(self.refuse(Refusal::Interrupted));
            }
            let left = wait.remaining();
            if left.is_some_and(|l| l.is_zero()) {
                return Ok(self.refuse(Refusal::Contended));
            }
            let cap = if left.is_none() && started.elapsed() >= LONG_WAIT {
                MAX_POLL_LONG_WAIT
            } else {
                MAX_POLL
            };
            pause = (pause * 2).min(cap);
            std::thread::sleep(left.map_or(pause, |l| l.min(pause)));
        }
    }

    /// Why the last [`FileLock::acquire`] returned `Ok(false)`; `None` after
    /// one that succeeded or failed.
    pub fn refusal(&self) -> Option<Refusal> {
        self.refusal
    }

    /// Whether the lock is still ours: held by this object and the path
    /// still names the locked file. A lost hold is dropped (the stale file
    /// unlocked), so `is_held()` is false afterwards.
    ///
    /// # Errors
    ///
    /// [`Error::Lock`] when the path cannot be examined (other than missing).
    pub fn renew(&mut self) -> Result<bool> {
        if !self.is_held() {
            return Ok(false);
        }
        self.confirm_hold()
    }

    fn confirm_hold(&mut self) -> Result<bool> {
        if self.still_named_by_path()? {
            return Ok(true);
        }
        self.release()?;
        Ok(self.refuse(Refusal::Lost))
    }

    fn refuse(&mut self, why: Refusal) -> bool {
        self.refusal = Some(why);
        false
    }

    /// Gives the lock up. `Ok(false)` when this process did not hold it.
    ///
    /// # Errors
    ///
    /// [`Error::Lock`] if flock(LOCK_UN) fails (it does not on a valid fd).
    pub fn release(&mut self) -> Result<bool> {
        if !self.is_held() {
            return Ok(false);
        }
        self.held_by = None;
        self.unregister_hold();
        sys::unlock(&self.handle.file).map_err(|e| self.os_error("cannot unlock", &e))?;
        Ok(true)
    }

    /// What this object believes (no syscall): see [`FileLock::renew`] for
    /// whether the path still names the file.
    pub fn is_held(&self) -> bool {
        self.held_by.is_some_and(Owner::is_this_process)
    }

    fn register_hold(&self) {
        let entry = HeldFile {
            id: self.handle.id,
            shared: self.options.shared,
        };
        HELD.with(|held| held.register(self.object, entry));
    }

    fn unregister_hold(&self) {
        let _ = HELD.try_with(|held| held.unregister(self.object));
    }

    /// The pid of a process holding the lock now, whoever it is; `None`
    /// when the lock is free or the holder cannot be told for sure. Never
    /// takes or disturbs the lock.
    ///
    /// A pid is only ever one that /proc/locks lists for exactly this
    /// device and inode, that lives, and that has this very file open (so
    /// neither the holder of another file with the same inode number on
    /// another tmpfs, nor a dead locker whose child kept the descriptor, nor
    /// a process that got the dead locker's pid since). Among those, the pid
    /// recorded in the file is preferred.
    ///
    /// # Errors
    ///
    /// [`Error::Lock`] when the file cannot be read.
    pub fn holder_pid(&self) -> Result<Option<u32>> {
        let recorded = self.recorded_pid()?;
        let id = sys::path_id(&self.c_path).unwrap_or(self.handle.id);
        Ok(match sys::kernel_flock_holders(id) {
            Some(pids) => {
                let live: Vec<u32> = pids
                    .into_iter()
                    .filter(|&pid| sys::holds_file_open(pid, id))
                    .collect();
                match recorded {
                    Some(pid) if live.contains(&pid) => Some(pid),
                    _ => live.first().copied(),
                }
            }
            None => recorded.filter(|&pid| sys::process_alive(pid)),
        })
    }

    /// The holder the lock file's record names (pid, host, since in Unix
    /// seconds), for `cron_guard()`'s busy line; `None` when the file holds
    /// no record or cannot be read.
    pub fn recorded_holder(&self) -> Option<(u32, String, u64)> {
        let mut buf = [0u8; RECORD_LEN];
        let n = read_at_most(&self.handle.file, &mut buf).ok()?;
        parse_record_holder(&buf[..n])
    }

    fn recorded_pid(&self) -> Result<Option<u32>> {
        let mut buf = [0u8; RECORD_LEN];
        let n = read_at_most(&self.handle.file, &mut buf)
            .map_err(|e| self.os_error("cannot read", &e))?;
        Ok(parse_record_pid(&buf[..n]))
    }

    fn still_named_by_path(&self) -> Result<bool> {
        match sys::path_id(&self.c_path) {
            Ok(now) => Ok(now.same_file(&self.handle.id)),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
            Err(e) => Err(self.os_error("cannot stat", &e)),
        }
    }

    fn reopen(&mut self) -> Result<()> {
        let fresh = open_handle(&self.path, &self.c_path, &self.options)?;
        drop(ManuallyDrop::into_inner(std::mem::replace(
            &mut self.handle,
            ManuallyDrop::new(fresh),
        )));
        Ok(())
    }

    /// Records who holds the lock. Best effort: the lock is held either way,
    /// and a full disk must not turn a held lock into an error. Decided
    /// now, from the file as it is now (its size and first bytes): nothing
    /// learnt earlier is trusted, since anyone may have rewritten the file
    /// in place since then.
    fn write_record(&mut self) {
        self.record_failure = None;
        if self.options.shared || !self.handle.writable {
            return;
        }
        if holds_only_a_record_or_nothing(&self.handle.file) {
            self.record_failure = self.handle.file.write_all_at(&current_record(), 0).err();
        }
    }

    /// The warning for the holder record the last successful `acquire`
    /// could not write (the lock is held all the same), once; `None` when
    /// it was written or not due.
    pub fn unwritten_record(&mut self) -> Option<String> {
        let err = self.record_failure.take()?;
        Some(format!(
            "cronlock: lock file {} is held, but its holder line could not be written: {}",
            super::shorten(&self.path.display().to_string()),
            sys::reason(&err)
        ))
    }

    fn os_error(&self, what: &str, err: &io::Error) -> Error {
        Error::Lock(format!(
            "{what} lock file {}: {}",
            super::shorten(&self.path.display().to_string()),
            sys::reason(err)
        ))
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        // Closing alone would not release while a fork child shares the open
        // file description; unlock explicitly, but only as the owner.
        let released = self.release().is_ok();
        // SAFETY: taken once, here, and `self.handle` is not used again.
        let handle = unsafe { ManuallyDrop::take(&mut self.handle) };
        if released && handle.opened_by.is_this_process() {
            keep_idle(self.c_path.clone(), self.options, handle);
        }
    }
}

/// Unlocked descriptors of dropped locks, most recent last. A job that
/// makes a `new CronLock\File` per cycle then skips open, fstat, fstatfs
/// and close for one lstat. Reuse requires the path to still name the
/// descriptor's file, and its owner to pass the rule a fresh open applies
/// ([`reuse_idle`]); the file type and filesystem of an open descriptor
/// cannot change. `acquire` checks after every flock anyway.
struct Idle {
    c_path: CString,
    options: FileOptions,
    handle: Handle,
}

thread_local! {
    static IDLE: RefCell<Vec<Idle>> = const { RefCell::new(Vec::new()) };
}

fn take_idle(c_path: &CString, options: &FileOptions) -> Option<Handle> {
    IDLE.with(|idle| {
        let mut idle = idle.borrow_mut();
        // A fork child's copies were detached at fork; they are not files.
        idle.retain(|entry| entry.handle.opened_by.is_this_process());
        let at = idle
            .iter()
            .rposition(|entry| entry.c_path == *c_path && entry.options == *options)?;
        Some(idle.remove(at).handle)
    })
}

/// An idle descriptor of `c_path`, if the path still names its file (one
/// lstat) and that file passes the ownership rule of a fresh open. A path
/// now missing, replaced or unreadable is left to a fresh open, which
/// creates the file or says what is wrong, as the constructor promises.
fn reuse_idle(path: &Path, c_path: &CString, options: &FileOptions) -> Result<Option<Handle>> {
    let Some(handle) = take_idle(c_path, options) else {
        return Ok(None);
    };
    match sys::path_id(c_path) {
        Ok(now) if now.same_file(&handle.id) => {
            // The owner may have changed (chown) since it was opened.
            refuse_foreign_file_in_shared_dir(path, now)?;
            Ok(Some(handle))
        }
        _ => Ok(None),
    }
}

fn keep_idle(c_path: CString, options: FileOptions, handle: Handle) {
    IDLE.with(|idle| {
        let mut idle = idle.borrow_mut();
        if idle.len() >= IDLE_MAX {
            idle.remove(0);
        }
        idle.push(Idle {
            c_path,
            options,
            handle,
        });
    });
}

fn open_handle(path: &Path, c_path: &CString, options: &FileOptions) -> Result<Handle> {
    let fail = |what: &str, e: &io::Error| {
        Error::Lock(format!(
            "{what} lock file {}: {}",
            super::shorten(&path.display().to_string()),
            sys::reason(e)
        ))
    };
    let (file, writable) =
        sys::open_lock_file(c_path, options.mode).map_err(|e| fail("cannot open", &e))?;
    let id = sys::regular_file_id(&file).map_err(|e| fail("cannot use", &e))?;
    if !options.allow_network_fs {
        if let Some(fs) =
            sys::unreliable_fs(&file, id.dev).map_err(|e| fail("cannot statfs", &e))?
        {
            return Err(Error::Lock(format!(
                "lock file {} is on a {fs} filesystem, where flock() is unreliable; \
                 use a local path or pass 'allow_network_fs' => true",
                super::shorten(&path.display().to_string())
            )));
        }
    }
    refuse_foreign_file_in_shared_dir(path, id)?;
    // Tracked only once it is ours to keep: the fork handler rewrites every
    // tracked number, and a refused file's number is soon reused by PHP.
    sys::track_fd(file.as_raw_fd());
    Ok(Handle {
        file,
        id,
        writable,
        opened_by: Owner::this_process(),
    })
}

/// In a directory everyone may write to (/tmp, /run/lock), anyone can
/// create the lock file first and then hold it, or keep it locked, as long
/// as they like. A file there owned by another user than us and root is
/// refused rather than trusted.
fn refuse_foreign_file_in_shared_dir(path: &Path, id: FileId) -> Result<()> {
    let me = sys::effective_uid();
    if id.uid == me || id.uid == 0 {
        return Ok(());
    }
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let world_writable = std::fs::metadata(dir).is_ok_and(|meta| {
        use std::os::unix::fs::PermissionsExt;
        meta.permissions().mode() & 0o002 != 0
    });
    if !world_writable {
        return Ok(());
    }
    Err(Error::Lock(format!(
        "lock file {} is owned by uid {}, who could hold it forever; it is in the \
         world-writable directory {}: remove it, or use a lock file in a directory \
         that only trusted users can write to",
        super::shorten(&path.display().to_string()),
        id.uid,
        dir.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::time::Instant;

    /// A scratch directory, removed when the test ends.
    struct TempDir(PathBuf);

    impl TempDir {
        fn join(&self, name: &str) -> PathBuf {
            self.0.join(name)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn temp_dir(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("cronlock-test-{}-{name}", sys::current_pid()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn open(path: &Path) -> FileLock {
        FileLock::open(path, FileOptions::default()).unwrap()
    }

    #[test]
    fn second_handle_is_excluded_until_release() {
        let dir = temp_dir("excl");
        let path = dir.join("a.lock");
        let (mut a, mut b) = (open(&path), open(&path));
        assert!(a.acquire(Wait::Once).unwrap());
        assert!(a.is_held());
        assert!(!b.acquire(Wait::Once).unwrap());
        assert!(!b.is_held());
        assert!(a.release().unwrap());
        assert!(!a.release().unwrap(), "release is idempotent");
        assert!(b.acquire(Wait::Once).unwrap());
    }

    #[test]
    fn a_pseudo_file_of_size_0_that_has_content_gets_no_record() {
        // procfs says size 0; root may open it read-write, and must not write into it
        let path = Path::new("/proc/self/status");
        let mut lock = FileLock::open(path, FileOptions::default()).unwrap();
        assert!(lock.acquire(Wait::Once).unwrap());
        assert_eq!(lock.unwritten_record(), None, "no write was tried");
        lock.release().unwrap();
    }

    #[test]
    fn creates_with_mode_and_records_holder_in_place() {
        let dir = temp_dir("mode");
        let path = dir.join("a.lock");
        let mut lock = FileLock::open(
            &path,
            FileOptions {
                mode: 0o600,
                ..FileOptions::default()
            },
        )
        .unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600 & !current_umask());
        assert_eq!(meta.len(), 0, "nothing is written before the lock is held");
        assert!(lock.acquire(Wait::Once).unwrap());
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.len(), RECORD_LEN);
        assert!(
            text.starts_with(&format!("cronlock pid={} host=", sys::current_pid())),
            "{text}"
        );
        assert_eq!(lock.holder_pid().unwrap(), Some(sys::current_pid()));
        lock.release().unwrap();
        assert_eq!(lock.holder_pid().unwrap(), None);
    }

    fn current_umask() -> u32 {
        // SAFETY: umask(2) cannot fail; the old value is restored at once.
        unsafe {
            let old = libc::umask(0o022);
            libc::umask(old);
            old as u32
        }
    }

    #[test]
    fn never_writes_into_a_file_with_other_content() {
        let dir = temp_dir("foreign");
        let path = dir.join("script.php");
        std::fs::write(&path, "<?php echo 'hello';\n").unwrap();
        let mut lock = open(&path);
        assert!(lock.acquire(Wait::Once).unwrap());
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "<?php echo 'hello';\n"
        );
        assert_eq!(
            lock.holder_pid().unwrap(),
            Some(sys::current_pid()),
            "from the kernel"
        );
    }

    #[test]
    fn refuses_symlinks_directories_and_fifos() {
        let dir = temp_dir("refuse");
        std::fs::write(dir.join("target"), "").unwrap();
        std::os::unix::fs::symlink(dir.join("target"), dir.join("link")).unwrap();
        let err = FileLock::open(&dir.join("link"), FileOptions::default()).unwrap_err();
        assert!(
            matches!(err, Error::Lock(ref m) if m.contains("link")),
            "{err}"
        );
        let err = FileLock::open(&dir.0, FileOptions::default()).unwrap_err();
        assert!(matches!(err, Error::Lock(_)), "{err}");
        let fifo = sys::c_path(&dir.join("fifo")).unwrap();
        // SAFETY: mkfifo with a valid path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let err = FileLock::open(&dir.join("fifo"), FileOptions::default()).unwrap_err();
        assert!(err.to_string().contains("FIFO"), "{err}");
    }

    #[test]
    fn a_refused_file_leaves_no_descriptor_for_the_fork_handler() {
        let dir = temp_dir("untracked");
        // Opens fine, then is refused as not a regular file.
        assert!(FileLock::open(Path::new("/dev/null"), FileOptions::default()).is_err());
        let reused = File::open("/dev/null").unwrap();
        assert!(!sys::tracked_fds().contains(&reused.as_raw_fd()));
        let lock = open(&dir.join("a.lock"));
        assert!(sys::tracked_fds().contains(&lock.handle.file.as_raw_fd()));
    }

    #[test]
    fn a_dropped_lock_leaves_its_descriptor_for_the_next_object() {
        let dir = temp_dir("idle");
        let path = dir.join("a.lock");
        let first = open(&path);
        let fd = first.handle.file.as_raw_fd();
        drop(first);
        let mut second = open(&path);
        assert_eq!(second.handle.file.as_raw_fd(), fd, "reused, not reopened");
        assert!(second.acquire(Wait::Once).unwrap());
        assert!(!open(&path).acquire(Wait::Once).unwrap());
    }

    #[test]
    fn a_reused_descriptor_of_a_replaced_file_is_not_trusted() {
        let dir = temp_dir("idle-replaced");
        let path = dir.join("a.lock");
        drop(open(&path));
        std::fs::remove_file(&path).unwrap();
        // Not the idle descriptor of the unlinked file: a new one, which
        // creates the file.
        let mut again = open(&path);
        assert!(path.exists(), "created");
        let mut other = open(&path);
        assert!(other.acquire(Wait::Once).unwrap());
        assert!(!again.acquire(Wait::Once).unwrap());
        other.release().unwrap();
        assert!(again.acquire(Wait::Once).unwrap());
        drop((again, other));

        // Replaced by another file: the new one is opened.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, "").unwrap();
        let replaced = sys::path_id(&sys::c_path(&path).unwrap()).unwrap();
        assert!(open(&path).handle.id.same_file(&replaced));

        // Its directory removed: the constructor throws, as for a new path.
        drop(open(&path));
        std::fs::remove_dir_all(&dir.0).unwrap();
        let err = FileLock::open(&path, FileOptions::default()).unwrap_err();
        assert!(
            matches!(err, Error::Lock(ref m) if m.starts_with("cannot open lock file")),
            "{err}"
        );
    }

    /// The ownership rule of a fresh open (D10) holds for a reused
    /// descriptor too. Needs root, to give the file away.
    #[test]
    fn a_reused_descriptor_passes_the_ownership_rule() {
        if sys::effective_uid() != 0 {
            return;
        }
        let dir = temp_dir("idle-owner");
        std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let path = dir.join("a.lock");
        let c_path = sys::c_path(&path).unwrap();
        let refused = |what: &str| {
            let err = FileLock::open(&path, FileOptions::default()).unwrap_err();
            assert!(
                err.to_string().contains("is owned by uid 65534"),
                "{what}: {err}"
            );
        };
        // Recreated by another user.
        drop(open(&path));
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, "").unwrap();
        // SAFETY: chown with a valid path.
        assert_eq!(unsafe { libc::chown(c_path.as_ptr(), 65534, 65534) }, 0);
        refused("recreated");
        // The same file given away.
        std::fs::remove_file(&path).unwrap();
        drop(open(&path));
        // SAFETY: as above.
        assert_eq!(unsafe { libc::chown(c_path.as_ptr(), 65534, 65534) }, 0);
        refused("chowned");
    }

    #[test]
    fn bad_arguments_name_the_argument() {
        let err = FileLock::open(Path::new(""), FileOptions::default()).unwrap_err();
        assert!(matches!(err, Error::InvalidValue { ref arg, .. } if arg == "$path"));
        let err = FileLock::open(Path::new("a\0b"), FileOptions::default()).unwrap_err();
        assert!(matches!(err, Error::InvalidValue { ref arg, .. } if arg == "$path"));
        let opts = FileOptions {
            mode: 0o10000,
            ..FileOptions::default()
        };
        let err = FileLock::open(Path::new("/tmp/x.lock"), opts).unwrap_err();
        assert!(matches!(err, Error::InvalidValue { ref arg, .. } if arg == "$options['mode']"));
    }

    #[test]
    fn relocks_when_the_file_is_replaced_behind_our_back() {
        let dir = temp_dir("replace");
        let path = dir.join("a.lock");
        let mut stale = open(&path);
        std::fs::remove_file(&path).unwrap();
        let mut fresh = open(&path);
        assert!(fresh.acquire(Wait::Once).unwrap());
        // `stale` locks its unlinked inode, notices, and retries on the file
        // the path names now, which `fresh` holds.
        assert!(!stale.acquire(Wait::Once).unwrap());
        fresh.release().unwrap();
        assert!(stale.acquire(Wait::Once).unwrap());
    }

    #[test]
    fn shared_locks_coexist_and_exclude_writers() {
        let dir = temp_dir("shared");
        let path = dir.join("a.lock");
        let shared = FileOptions {
            shared: true,
            ..FileOptions::default()
        };
        let mut r1 = FileLock::open(&path, shared).unwrap();
        let mut r2 = FileLock::open(&path, shared).unwrap();
        let mut w = open(&path);
        assert!(r1.acquire(Wait::Once).unwrap());
        assert!(r2.acquire(Wait::Once).unwrap());
        assert!(!w.acquire(Wait::Once).unwrap());
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            0,
            "readers record nothing"
        );
    }

    /// How long after the holder's release a waiter in another thread,
    /// which waited `hold_for` with `wait`, holds the lock.
    fn hand_off_latency(name: &str, wait: Wait, hold_for: Duration) -> Duration {
        let dir = temp_dir(name);
        let path = dir.join("a.lock");
        let mut holder = open(&path);
        assert!(holder.acquire(Wait::Once).unwrap());
        let waiter_path = path.clone();
        let waiter = std::thread::spawn(move || {
            let got = open(&waiter_path).acquire(wait).unwrap();
            (got, Instant::now())
        });
        std::thread::sleep(hold_for);
        let released_at = Instant::now();
        holder.release().unwrap();
        let (got, acquired_at) = waiter.join().unwrap();
        assert!(got);
        acquired_at - released_at
    }

    #[test]
    fn timed_wait_gets_the_lock_soon_after_release() {
        let wait = Wait::from_seconds("$timeout", 10.0).unwrap();
        // Generous bound: the poll interval is 1 ms; this only catches a
        // regression to coarse polling, not noise on a busy machine.
        assert!(
            hand_off_latency("wait", wait, Duration::from_millis(100)) < Duration::from_millis(200)
        );
    }

    #[test]
    fn a_long_wait_forever_still_takes_a_freed_lock_promptly() {
        // Past LONG_WAIT the waiter polls at its slower pace (20 ms); the
        // bound catches seconds, not noise.
        let held = LONG_WAIT + Duration::from_millis(300);
        assert!(hand_off_latency("forever", Wait::Forever, held) < Duration::from_millis(500));
    }

    #[test]
    fn timed_wait_gives_up_at_the_deadline() {
        let dir = temp_dir("timeout");
        let path = dir.join("a.lock");
        let mut holder = open(&path);
        assert!(holder.acquire(Wait::Once).unwrap());
        // Another thread: in this one, the wait would be refused as a
        // self-deadlock.
        let waiter = std::thread::spawn(move || {
            let mut waiter = open(&path);
            let start = Instant::now();
            let got = waiter
                .acquire(Wait::from_seconds("$timeout", 0.2).unwrap())
                .unwrap();
            (got, waiter.refusal(), start.elapsed())
        });
        let (got, refusal, waited) = waiter.join().unwrap();
        assert!(!got);
        assert_eq!(refusal, Some(Refusal::Contended));
        assert!(waited >= Duration::from_millis(200));
    }

    #[test]
    fn acquire_on_a_held_lock_checks_and_does_not_count() {
        let dir = temp_dir("reacquire");
        let path = dir.join("a.lock");
        let mut lock = open(&path);
        assert!(lock.acquire(Wait::Once).unwrap());
        assert!(
            lock.acquire(Wait::Forever).unwrap(),
            "no wait on a held lock"
        );
        assert!(lock.release().unwrap());
        assert!(!lock.is_held());
        let mut other = open(&path);
        assert!(other.acquire(Wait::Once).unwrap(), "one release frees it");
    }

    #[test]
    fn a_hold_on_an_unlinked_or_replaced_file_is_lost() {
        let dir = temp_dir("lost");
        let path = dir.join("a.lock");
        for replace in [false, true] {
            let mut lock = open(&path);
            assert!(lock.acquire(Wait::Once).unwrap());
            assert!(lock.renew().unwrap());
            std::fs::remove_file(&path).unwrap();
            if replace {
                std::fs::write(&path, "").unwrap();
            }
            assert!(lock.is_held(), "is_held() is what the object believes");
            assert!(!lock.renew().unwrap());
            assert!(!lock.is_held());
            assert!(!lock.renew().unwrap());
            assert!(
                lock.acquire(Wait::Once).unwrap(),
                "takes the file named now"
            );
            lock.release().unwrap();
            let _ = std::fs::remove_file(&path);
        }
        let mut lock = open(&path);
        assert!(lock.acquire(Wait::Once).unwrap());
        std::fs::remove_file(&path).unwrap();
        assert!(
            !lock.acquire(Wait::Once).unwrap(),
            "acquire on held asks too"
        );
        assert_eq!(lock.refusal(), Some(Refusal::Lost));
    }

    #[test]
    fn a_second_object_of_this_thread_is_busy_or_refused_never_a_deadlock() {
        let dir = temp_dir("self");
        let path = dir.join("a.lock");
        let mut first = open(&path);
        assert!(first.acquire(Wait::Once).unwrap());
        let mut second = open(&path);
        assert!(!second.acquire(Wait::Once).unwrap());
        assert_eq!(second.refusal(), Some(Refusal::HeldByThisThread));
        for wait in [Wait::Forever, Wait::from_seconds("$timeout", 5.0).unwrap()] {
            let err = second.acquire(wait).unwrap_err();
            assert!(
                err.to_string().contains("waiting for it would deadlock"),
                "{err}"
            );
        }
        first.release().unwrap();
        assert!(second.acquire(Wait::Forever).unwrap());
        // Shared holds of one thread coexist, as flock(2) lets them.
        let shared = FileOptions {
            shared: true,
            ..FileOptions::default()
        };
        second.release().unwrap();
        let mut r1 = FileLock::open(&path, shared).unwrap();
        let mut r2 = FileLock::open(&path, shared).unwrap();
        assert!(r1.acquire(Wait::Forever).unwrap());
        assert!(r2.acquire(Wait::Forever).unwrap());
        assert!(second.acquire(Wait::Forever).is_err());
    }

    #[test]
    fn user_data_written_over_a_record_is_never_overwritten() {
        let dir = temp_dir("rewritten");
        let path = dir.join("a.lock");
        let mut lock = open(&path);
        assert!(lock.acquire(Wait::Once).unwrap());
        lock.release().unwrap();
        // Same inode, rewritten in place with data of the same size.
        let data = vec![b'd'; RECORD_LEN];
        File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .write_all_at(&data, 0)
            .unwrap();
        assert!(lock.acquire(Wait::Once).unwrap());
        assert_eq!(std::fs::read(&path).unwrap(), data);
    }

    #[test]
    fn fork_child_neither_frees_nor_keeps_the_parent_lock() {
        let dir = temp_dir("fork");
        let path = dir.join("a.lock");
        let mut lock = open(&path);
        assert!(lock.acquire(Wait::Once).unwrap());
        // SAFETY: the child only releases, drops and _exits.
        let child = unsafe { libc::fork() };
        if child == 0 {
            let released = lock.release().unwrap();
            drop(lock);
            // SAFETY: leaving the forked child without running test harness code.
            unsafe { libc::_exit(if released { 1 } else { 0 }) };
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(child, &mut status, 0) };
        assert_eq!(
            libc::WEXITSTATUS(status),
            0,
            "child release must return false"
        );
        assert!(
            !open(&path).acquire(Wait::Once).unwrap(),
            "parent still holds"
        );
        assert!(lock.is_held());
    }

    /// Files of the record's size that start like one, but are not exactly
    /// one: user data, never written over (nor their pid believed).
    #[test]
    fn only_an_exact_record_is_overwritten() {
        let dir = temp_dir("near-records");
        let pad = |text: &str| {
            let mut bytes = text.as_bytes().to_vec();
            bytes.resize(RECORD_LEN - 1, b' ');
            bytes.push(b'\n');
            bytes
        };
        let good = "cronlock pid=1 host=web1 since=2026-11-30T14:50:00Z";
        let mut stray_x = pad(good);
        stray_x[100] = b'X';
        let mut stray_nul = pad(good);
        stray_nul[100] = 0;
        let mut crlf = pad(good);
        crlf[RECORD_LEN - 2] = b'\r';
        let variants: Vec<(&str, Vec<u8>)> = vec![
            (
                "notes",
                pad("cronlock pid=1 -- my notes: customer 42 owes 100 EUR, do not lose"),
            ),
            ("only-prefix", {
                let mut b = b"cronlock ".to_vec();
                b.resize(RECORD_LEN - 1, b'Z');
                b.push(b'\n');
                b
            }),
            (
                "pid-abc",
                pad("cronlock pid=abc host=web1 since=2026-11-30T14:50:00Z"),
            ),
            (
                "no-pid",
                pad("cronlock pid= host=web1 since=2026-11-30T14:50:00Z"),
            ),
            ("since-x", pad("cronlock pid=1 host=x since=x")),
            (
                "since-bad",
                pad("cronlock pid=1 host=x since=2026-11-30 14:50:00Z"),
            ),
            (
                "host-space",
                pad("cronlock pid=1 host=a b since=2026-11-30T14:50:00Z"),
            ),
            (
                "two-spaces",
                pad("cronlock pid=1  host=x since=2026-11-30T14:50:00Z"),
            ),
            (
                "trailer",
                pad("cronlock pid=1 host=x since=2026-11-30T14:50:00Z and more"),
            ),
            ("stray-x", stray_x),
            ("stray-nul", stray_nul),
            ("crlf", crlf),
        ];
        for (name, content) in variants {
            assert_eq!(content.len(), RECORD_LEN, "{name}");
            let path = dir.join(name);
            std::fs::write(&path, &content).unwrap();
            let mut lock = open(&path);
            assert!(lock.acquire(Wait::Once).unwrap(), "{name}");
            lock.release().unwrap();
            assert_eq!(
                std::fs::read(&path).unwrap(),
                content,
                "{name} was overwritten"
            );
        }
        // The exact shape is ours: rewritten with this process's record.
        let path = dir.join("record");
        std::fs::write(&path, pad(good)).unwrap();
        let mut lock = open(&path);
        assert!(lock.acquire(Wait::Once).unwrap());
        let now = std::fs::read(&path).unwrap();
        assert_eq!(parse_record_pid(&now), Some(sys::current_pid()));
    }
}

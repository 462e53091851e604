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
//! - the file tells the truth (D21): once the lock is held, the holder's pid, host
//!   and start time are written in place (no truncate-then-write, which
//!   costs a disk flush on ext4), and just before the unlock they are
//!   rewritten as a free record, so `cat` never names a process that let
//!   go; each write only if the file, as it is at that moment, is empty or
//!   holds exactly such a record (at release: exactly the record this
//!   object wrote), so locking someone's script or data file never writes
//!   to it, even after it was rewritten in place;
//! - a holder record that cannot be written (a full file system) does not
//!   cost the lock, but is not silent either (D24): [`FileLock::unwritten_record`]
//!   says why, for the PHP layer's warning;
//! - a wait blocks in flock(2), as `flock -w` does (D22), so the kernel lists the
//!   waiter and hands it the lock at once, and is woken at least every
//!   100 ms to check its deadline and [`super::interrupted`] (`file/wait.rs`);
//! - a dropped object closes its descriptor (D21): `fuser` and `lsof` list only
//!   processes that hold the lock, wait for it, or keep a live lock object;
//! - release and drop act only in the process that acquired (`lock::owner`):
//!   a `fork()` child cannot free the parent's lock, and its copy of the
//!   descriptor is detached at fork time, so it cannot keep the lock alive
//!   either.
//!
//! The records' format is in `file/record.rs`, who holds a file in
//! `file/holder.rs`, how a wait waits in `file/wait.rs`; the registry of
//! this thread's holds in `lock::registry`.

mod holder;
mod record;
mod wait;

use super::owner::{current_pid, Owner};
use super::registry::{ObjectId, Registry};
use super::sys::{self, FileId};
use super::{Refusal, Wait};
use crate::error::{Error, Result};
pub use holder::Holder;
use record::{current_records, Head};
pub use record::{parse_record, parse_record_pid, Record, RECORD_LEN};
use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use wait::Waiting;

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

/// A lock file, open (so the constructor could check it) and, between an
/// `acquire` and a `release`, locked. An object that lives unlocked keeps
/// its descriptor (its next `acquire` then costs no open and its checks,
/// as a kept database connection does); a dropped one closes it.
#[derive(Debug)]
pub struct FileLock {
    path: PathBuf,
    c_path: CString,
    options: FileOptions,
    handle: Handle,
    /// The process that holds the lock through this object.
    held_by: Option<Owner>,
    /// This object in the thread's [`HELD`] registry.
    object: ObjectId,
    /// Why the last `acquire` returned false.
    refusal: Option<Refusal>,
    /// Why the last `acquire` that took the lock could not write its
    /// holder record; taken by [`FileLock::unwritten_record`].
    record_failure: Option<io::Error>,
    /// The holder record this hold wrote, if it wrote one: the release
    /// rewrites exactly that, and nothing else, as a free record.
    written: Option<[u8; RECORD_LEN]>,
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
        let handle = open_handle(path, &c_path, &options)?;
        Ok(FileLock {
            path: path.to_owned(),
            c_path,
            options,
            handle,
            held_by: None,
            object: ObjectId::next(),
            refusal: None,
            record_failure: None,
            written: None,
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
        let mut waiting: Option<Waiting> = None;
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
            let locked = match waiting.as_mut() {
                None => sys::try_flock(&self.handle.file, self.options.shared),
                Some(waiting) => {
                    waiting.once(&self.handle.file, self.options.shared, wait.remaining())
                }
            }
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
            if wait.remaining().is_some_and(|left| left.is_zero()) {
                return Ok(self.refuse(Refusal::Contended));
            }
            waiting.get_or_insert_with(Waiting::start);
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

    /// Gives the lock up: the holder record, if this hold wrote one and the
    /// file still holds exactly it, becomes a free record first, while the
    /// lock is still ours (so no next holder's record is written over).
    /// `Ok(false)` when this process did not hold it.
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
        self.write_free_record();
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

    /// The file the path names now, else (unlinked, unreadable) ours.
    fn current_id(&self) -> FileId {
        sys::path_id(&self.c_path).unwrap_or(self.handle.id)
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
    /// recorded in the file is preferred. Where the kernel lists no holders
    /// (not Linux), the recorded pid if that process lives.
    ///
    /// # Errors
    ///
    /// [`Error::Lock`] when the file cannot be read.
    pub fn holder_pid(&self) -> Result<Option<u32>> {
        let head = self.head()?;
        let recorded = head.record().and_then(|r| match r {
            Record::Held { pid, .. } if pid != 0 => Some(pid),
            _ => None,
        });
        let id = self.current_id();
        Ok(match holder::nameable_holders(id) {
            Ok((_, named)) => match recorded {
                Some(pid) if named.contains(&pid) => Some(pid),
                _ => named.first().copied(),
            },
            Err(_) => recorded.filter(|&pid| sys::process_alive(pid)),
        })
    }

    /// Who holds the lock now, as the kernel lists it (`None`: nobody), named
    /// by the record in the file when the kernel lists the pid it records.
    /// Never locks, never writes.
    ///
    /// # Errors
    ///
    /// [`Error::Lock`] when the kernel cannot be asked (no /proc/locks: not
    /// Linux, or no /proc), or the file cannot be read.
    pub fn holder(&self) -> Result<Option<Holder>> {
        let id = self.current_id();
        let head = self.head()?;
        // Our descriptor reads our file; a file put at the path since is
        // named by the kernel alone.
        let record = if id.same_file(&self.handle.id) {
            head.record()
        } else {
            None
        };
        holder::holder_of(id, record).map_err(|e| {
            Error::Lock(format!(
                "cannot tell who holds lock file {}: the kernel's list of locks cannot be read \
                 (/proc/locks: {})",
                super::shorten(&self.path.display().to_string()),
                sys::reason(&e)
            ))
        })
    }

    fn head(&self) -> Result<Head> {
        Head::read(&self.handle.file).map_err(|e| self.os_error("cannot read", &e))
    }

    fn still_named_by_path(&self) -> Result<bool> {
        match sys::path_id(&self.c_path) {
            Ok(now) => Ok(now.same_file(&self.handle.id)),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
            Err(e) => Err(self.os_error("cannot stat", &e)),
        }
    }

    fn reopen(&mut self) -> Result<()> {
        self.handle = open_handle(&self.path, &self.c_path, &self.options)?;
        Ok(())
    }

    /// Records who holds the lock. Best effort: the lock is held either way,
    /// and a full disk must not turn a held lock into an error. Decided
    /// now, from one read of the file as it is now: nothing learnt earlier
    /// is trusted, since anyone may have rewritten the file in place since
    /// then.
    fn write_record(&mut self) {
        self.record_failure = None;
        self.written = None;
        if self.options.shared || !self.handle.writable {
            return;
        }
        if !Head::read(&self.handle.file).is_ok_and(|head| head.is_ours_to_write()) {
            return;
        }
        let (held, _) = current_records();
        match self.handle.file.write_all_at(&held, 0) {
            Ok(()) => self.written = Some(held),
            Err(e) => self.record_failure = Some(e),
        }
    }

    /// Turns this hold's record into a free record, if the file still holds
    /// exactly what this hold wrote (a job may have written its own data
    /// into the lock file meanwhile). Best effort, as the holder record: a
    /// record that stays is a stale one, which the kernel's list (what
    /// `holder()` and `cronlock status` read) contradicts.
    fn write_free_record(&mut self) {
        let Some(held) = self.written.take() else {
            return;
        };
        if Head::read(&self.handle.file).is_ok_and(|head| head.holds(&held)) {
            let (_, free) = current_records();
            let _ = self.handle.file.write_all_at(&free, 0);
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
        // file description; unlock explicitly, but only as the owner. The
        // descriptor is closed with the handle.
        let _ = self.release();
    }
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
    if id.uid == 0 || id.uid == sys::effective_uid() {
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
    use std::time::{Duration, Instant};

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
    fn a_dropped_lock_keeps_no_descriptor_open() {
        let dir = temp_dir("closed");
        let path = dir.join("a.lock");
        let mut lock = open(&path);
        assert!(lock.acquire(Wait::Once).unwrap());
        lock.release().unwrap();
        assert_eq!(
            descriptors_on(&path),
            1,
            "a live object keeps its descriptor"
        );
        drop(lock);
        assert_eq!(descriptors_on(&path), 0, "what fuser and lsof would list");
        // Many objects one after another: none is left open.
        for _ in 0..2000 {
            let mut lock = open(&path);
            assert!(lock.acquire(Wait::Once).unwrap());
        }
        assert_eq!(descriptors_on(&path), 0);
    }

    /// How many descriptors of this process are open on `path`'s file.
    fn descriptors_on(path: &Path) -> usize {
        use std::os::unix::fs::MetadataExt;
        let want = std::fs::metadata(path).unwrap();
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .flatten()
            .filter(|entry| {
                std::fs::metadata(entry.path())
                    .is_ok_and(|m| m.dev() == want.dev() && m.ino() == want.ino())
            })
            .count()
    }

    #[test]
    fn release_leaves_a_free_record_and_never_touches_data_the_job_wrote() {
        let dir = temp_dir("free");
        let path = dir.join("a.lock");
        let mut lock = open(&path);
        assert!(lock.acquire(Wait::Once).unwrap());
        lock.release().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.len(), RECORD_LEN);
        assert!(
            matches!(parse_record(text.as_bytes()), Some(Record::Free { .. })),
            "{text}"
        );
        // A free record is ours to overwrite: the next holder names itself.
        assert!(lock.acquire(Wait::Once).unwrap());
        assert_eq!(
            parse_record_pid(&std::fs::read(&path).unwrap()),
            Some(sys::current_pid())
        );
        // The job writes its own data into the lock file while it holds it,
        // of the record's size too: the release leaves both alone.
        for data in [vec![b'd'; RECORD_LEN], b"state=42\n".to_vec()] {
            std::fs::write(&path, &data).unwrap();
            lock.release().unwrap();
            assert_eq!(std::fs::read(&path).unwrap(), data);
            assert!(lock.acquire(Wait::Once).unwrap());
            assert_eq!(std::fs::read(&path).unwrap(), data, "not ours to write");
        }
        // Another holder's record written over ours (it is not what we
        // wrote): left as it is.
        std::fs::write(&path, "").unwrap();
        lock.release().unwrap();
        assert!(lock.acquire(Wait::Once).unwrap());
        let other = record::format_held(4242, "web2", 0);
        std::fs::write(&path, other).unwrap();
        lock.release().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), other);
        // A shared hold writes neither record.
        std::fs::write(&path, "").unwrap();
        let shared = FileOptions {
            shared: true,
            ..FileOptions::default()
        };
        let mut reader = FileLock::open(&path, shared).unwrap();
        assert!(reader.acquire(Wait::Once).unwrap());
        reader.release().unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
    }

    #[test]
    fn holder_pid_is_found_while_the_kernels_list_spans_pages_and_changes() {
        use std::os::fd::AsRawFd;
        use std::sync::atomic::{AtomicBool, Ordering};
        let dir = temp_dir("holder-pages");
        // 200 held locks make /proc/locks several pages long; two threads
        // locking and unlocking shift it between the kernel's pages (with
        // std's small first reads, 7 of 1,000 asks named nobody).
        let held: Vec<std::fs::File> = (0..200)
            .map(|i| {
                let file = std::fs::File::create(dir.join(&format!("held-{i}"))).unwrap();
                // SAFETY: flock(2) on a descriptor this Vec keeps open.
                assert_eq!(unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) }, 0);
                file
            })
            .collect();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let churners: Vec<_> = (0..2)
            .map(|i| {
                let file = std::fs::File::create(dir.join(&format!("churn-{i}"))).unwrap();
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        // SAFETY: flock(2) on a descriptor this thread owns.
                        unsafe {
                            libc::flock(file.as_raw_fd(), libc::LOCK_EX);
                            libc::flock(file.as_raw_fd(), libc::LOCK_UN);
                        }
                    }
                })
            })
            .collect();
        let mut lock = open(&dir.join("mine.lock"));
        assert!(lock.acquire(Wait::Once).unwrap());
        let misses = (0..1000)
            .filter(|_| lock.holder_pid().unwrap() != Some(sys::current_pid()))
            .count();
        stop.store(true, Ordering::Relaxed);
        churners.into_iter().for_each(|t| t.join().unwrap());
        drop(held);
        assert_eq!(misses, 0, "holder_pid() of a held lock named nobody");
    }

    #[test]
    fn holder_names_the_recorded_holder_a_bare_pid_or_nobody() {
        let dir = temp_dir("holder");
        let path = dir.join("a.lock");
        let mut lock = open(&path);
        let observer = open(&path);
        assert_eq!(observer.holder().unwrap(), None, "never held");
        assert!(lock.acquire(Wait::Once).unwrap());
        let text = std::fs::read_to_string(&path).unwrap();
        let Some(Record::Held { host, since, .. }) = parse_record(text.as_bytes()) else {
            panic!("{text}");
        };
        let expected = Holder::Recorded {
            pid: sys::current_pid(),
            host: host.to_owned(),
            since: since.to_owned(),
        };
        assert_eq!(observer.holder().unwrap(), Some(expected.clone()));
        assert_eq!(lock.holder().unwrap(), Some(expected));
        lock.release().unwrap();
        assert_eq!(observer.holder().unwrap(), None, "released: a free record");
        // A holder that wrote no record: the kernel's pid alone.
        std::fs::write(&path, "user data").unwrap();
        assert!(lock.acquire(Wait::Once).unwrap());
        assert_eq!(
            observer.holder().unwrap(),
            Some(Holder::Pid(sys::current_pid()))
        );
        lock.release().unwrap();
        // A record of a process that is not the holder is not believed.
        std::fs::write(&path, record::format_held(1, "elsewhere", 0)).unwrap();
        let mut shared = FileLock::open(
            &path,
            FileOptions {
                shared: true,
                ..FileOptions::default()
            },
        )
        .unwrap();
        assert!(shared.acquire(Wait::Once).unwrap());
        assert_eq!(
            observer.holder().unwrap(),
            Some(Holder::Pid(sys::current_pid()))
        );
        assert_eq!(
            std::fs::read(&path).unwrap(),
            record::format_held(1, "elsewhere", 0),
            "holder() wrote nothing"
        );
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
        // The bound catches a regression to coarse polling, not noise.
        let held = Duration::from_millis(2300);
        assert!(hand_off_latency("forever", Wait::Forever, held) < Duration::from_millis(500));
    }

    /// The voluntary context switches of the calling thread so far.
    fn context_switches() -> u64 {
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        status
            .lines()
            .find_map(|line| line.strip_prefix("voluntary_ctxt_switches:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    /// A waiter blocks in flock(2): the kernel lists it as a waiter for
    /// exactly this file, as it lists `flock -w`, and it wakes about ten
    /// times a second (counted, not timed: a poll every millisecond would
    /// switch hundreds of times in the same wait).
    #[test]
    fn a_wait_blocks_in_the_kernel_and_wakes_ten_times_a_second() {
        let dir = temp_dir("blocking");
        let path = dir.join("a.lock");
        let mut holder = open(&path);
        assert!(holder.acquire(Wait::Once).unwrap());
        assert!(Waiting::start().blocks(), "this platform has wake-ups");
        let id = holder.handle.id;
        let waiter_path = path.clone();
        for wait in [Wait::Forever, Wait::from_seconds("$timeout", 30.0).unwrap()] {
            let waiter_path = waiter_path.clone();
            let (tx, rx) = std::sync::mpsc::channel();
            let waiter = std::thread::spawn(move || {
                let mut lock = open(&waiter_path);
                let before = context_switches();
                tx.send(()).unwrap();
                let got = lock.acquire(wait).unwrap();
                (got, context_switches() - before)
            });
            rx.recv().unwrap();
            let listed = (0..200).any(|_| {
                std::thread::sleep(Duration::from_millis(10));
                kernel_waiters(id) == 1
            });
            assert!(listed, "the waiter is in /proc/locks");
            std::thread::sleep(Duration::from_millis(1000));
            holder.release().unwrap();
            let (got, switches) = waiter.join().unwrap();
            assert!(got);
            assert!(
                switches < 100,
                "{switches} context switches in a wait of about 1 s"
            );
            assert!(holder.acquire(Wait::Once).unwrap());
        }
    }

    /// Blocked waiters (`->` lines) of `id` in /proc/locks.
    fn kernel_waiters(id: FileId) -> usize {
        let wanted = format!(
            " {:02x}:{:02x}:{} ",
            libc::major(id.dev as libc::dev_t),
            libc::minor(id.dev as libc::dev_t),
            id.ino
        );
        std::fs::read_to_string("/proc/locks")
            .unwrap()
            .lines()
            .filter(|line| line.contains("-> FLOCK") && line.contains(&wanted))
            .count()
    }

    static INTERRUPTED: std::sync::Mutex<Option<std::thread::ThreadId>> =
        std::sync::Mutex::new(None);

    fn this_thread_interrupted() -> bool {
        *INTERRUPTED.lock().unwrap() == Some(std::thread::current().id())
    }

    /// PHP's pending signal handlers end a blocked wait (D9): the wake-up
    /// lets the wait see the interrupt however long the lock stays held.
    #[test]
    fn an_interrupt_ends_a_blocked_wait() {
        crate::lock::set_interrupt_check(this_thread_interrupted);
        let dir = temp_dir("interrupt");
        let path = dir.join("a.lock");
        let mut holder = open(&path);
        assert!(holder.acquire(Wait::Once).unwrap());
        for wait in [Wait::Forever, Wait::from_seconds("$timeout", 60.0).unwrap()] {
            let waiter_path = path.clone();
            let (tx, rx) = std::sync::mpsc::channel();
            let waiter = std::thread::spawn(move || {
                tx.send(std::thread::current().id()).unwrap();
                let mut lock = open(&waiter_path);
                let got = lock.acquire(wait).unwrap();
                (got, lock.refusal())
            });
            let waiter_id = rx.recv().unwrap();
            std::thread::sleep(Duration::from_millis(300));
            *INTERRUPTED.lock().unwrap() = Some(waiter_id);
            let (got, refusal) = waiter.join().unwrap();
            *INTERRUPTED.lock().unwrap() = None;
            assert!(!got);
            assert_eq!(refusal, Some(Refusal::Interrupted));
            assert!(holder.is_held(), "the holder never let go");
        }
    }

    /// A waiter whose file is replaced while it waits gets the old file's
    /// lock when its holder lets go, notices, and waits for the new file.
    #[test]
    fn a_file_replaced_during_a_blocked_wait_is_noticed_after_it() {
        let dir = temp_dir("replaced-wait");
        let path = dir.join("a.lock");
        let mut old_holder = open(&path);
        assert!(old_holder.acquire(Wait::Once).unwrap());
        let waiter_path = path.clone();
        let waiter = std::thread::spawn(move || {
            let mut lock = open(&waiter_path);
            let got = lock
                .acquire(Wait::from_seconds("$timeout", 30.0).unwrap())
                .unwrap();
            (got, lock.handle.id)
        });
        std::thread::sleep(Duration::from_millis(300));
        std::fs::remove_file(&path).unwrap();
        let mut new_holder = open(&path);
        assert!(new_holder.acquire(Wait::Once).unwrap());
        old_holder.release().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            !waiter.is_finished(),
            "it waits for the file the path names now"
        );
        new_holder.release().unwrap();
        let (got, id) = waiter.join().unwrap();
        assert!(got);
        assert!(id.same_file(&sys::path_id(&sys::c_path(&path).unwrap()).unwrap()));
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

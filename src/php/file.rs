//! `CronLock\File`: an flock(2) lock file.

use super::args::{Bytes, NullableFloat, OptionalFloat, OptionsArray};
use super::lock_interface::PhpInterfaceLock;
use super::native::{Acquired, Holder, NativeLock};
use super::options::Options;
use crate::lock::file::{FileLock, FileOptions, Holder as FileHolder};
use crate::lock::owner::hostname;
use crate::lock::{shorten, Wait};
use ext_php_rs::binary::Binary;
use ext_php_rs::flags::ClassFlags;
use ext_php_rs::prelude::*;
use ext_php_rs::types::ZendHashTable;
use ext_php_rs::zend::ExecutorGlobals;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

#[php_class]
#[php(name = "CronLock\\File")]
#[php(flags = ClassFlags::Final)]
#[php(implements(PhpInterfaceLock))]
pub struct File {
    lock: FileLock,
}

#[php_impl]
impl File {
    pub fn __construct(path: Bytes, options: OptionsArray) -> PhpResult<Self> {
        super::refuse_second_construct::<File>()?;
        let options = Options::new(
            "$options",
            options.0,
            &["mode", "shared", "allow_network_fs"],
        )?;
        let defaults = FileOptions::default();
        // Out of range (negative too) is refused, once, by FileLock::open.
        let mode = options.int("mode")?.map_or(defaults.mode, |mode| {
            u32::try_from(mode).unwrap_or(u32::MAX)
        });
        let file_options = FileOptions {
            mode,
            shared: options.bool("shared")?.unwrap_or(defaults.shared),
            allow_network_fs: options
                .bool("allow_network_fs")?
                .unwrap_or(defaults.allow_network_fs),
        };
        // Resolved once (D11), against PHP's cwd, which under ZTS is not the process's.
        let path = super::shim::absolute(Path::new(OsStr::from_bytes(&path.0)));
        Ok(File::new(FileLock::open(&path, file_options)?))
    }

    pub fn holder_pid(&self) -> PhpResult<Option<i64>> {
        Ok(self.lock.holder_pid()?.map(i64::from))
    }

    /// "pid 41327 on web1 since 2026-11-30T14:50:00Z", "pid 41327", "an
    /// unknown process", or null when the kernel lists no holder.
    pub fn holder(&self) -> PhpResult<Option<String>> {
        Ok(self.lock.holder()?.map(|holder| holder.to_string()))
    }

    /// The bytes of the path: a file name need not be UTF-8.
    pub fn path(&self) -> Binary<u8> {
        Binary::from(self.lock.path().as_os_str().as_bytes().to_vec())
    }

    pub fn acquire(&mut self, timeout: OptionalFloat) -> PhpResult<bool> {
        let wait = Wait::from_seconds("$timeout", timeout.or(0.0))?;
        // false with the handler's exception pending: PHP throws that
        Ok(self.acquire_and_warn(wait)?.unwrap_or(false))
    }

    /// flock(2) has no expiry: renewing checks that the path still names
    /// the locked file.
    pub fn renew(&mut self, ttl: NullableFloat) -> PhpResult<bool> {
        let _ = ttl;
        Ok(self.lock.renew()?)
    }

    pub fn release(&mut self) -> PhpResult<bool> {
        Ok(self.lock.release()?)
    }

    pub fn is_held(&self) -> bool {
        self.lock.is_held()
    }

    pub fn __serialize(&self) -> PhpResult<Vec<String>> {
        Err(super::not_serializable("CronLock\\File"))
    }

    pub fn __unserialize(&mut self, data: &ZendHashTable) -> PhpResult<()> {
        let _ = data;
        Err(super::not_serializable("CronLock\\File"))
    }
}

impl File {
    pub fn new(lock: FileLock) -> Self {
        super::note_lock_object();
        File { lock }
    }

    /// [`FileLock::acquire`], then the `E_WARNING` for a holder line it
    /// could not write (the lock is kept: D24). `Ok(None)`: an error handler
    /// turned that warning into an exception, now pending; the hold just
    /// taken is given back, since its caller never learns it was taken.
    ///
    /// # Errors
    ///
    /// What [`FileLock::acquire`] throws.
    pub fn acquire_and_warn(&mut self, wait: Wait) -> PhpResult<Option<bool>> {
        let got = self.lock.acquire(wait)?;
        if let Some(warning) = self.lock.unwritten_record() {
            super::shim::warning(&warning);
            if ExecutorGlobals::has_exception() {
                let _ = self.lock.release();
                return Ok(None);
            }
        }
        Ok(Some(got))
    }
}

impl NativeLock for File {
    fn held(&self) -> bool {
        self.lock.is_held()
    }

    fn acquire_for_guard(&mut self, wait: Wait) -> PhpResult<Acquired> {
        Ok(match self.acquire_and_warn(wait)? {
            None => Acquired::Threw,
            Some(true) => Acquired::Yes,
            Some(false) => Acquired::No(self.lock.refusal()),
        })
    }

    fn describe(&self) -> String {
        shorten(&self.lock.path().display().to_string())
    }

    /// The kernel's holder, with the host and since of the file's record
    /// when the record names that pid ([`FileLock::holder`]).
    fn busy_holder(&self) -> Option<Holder> {
        let (pid, host, since) = match self.lock.holder().ok().flatten()? {
            FileHolder::Recorded { pid, host, since } => (
                pid,
                host,
                crate::lock::report::parse_iso8601_utc(&since)
                    .map(|secs| UNIX_EPOCH + Duration::from_secs(secs)),
            ),
            FileHolder::Pid(pid) => (pid, hostname().to_owned(), None),
            FileHolder::Unknown => return None,
        };
        let host = shorten(&host);
        Some(Holder {
            who: format!("pid {pid} on {host}"),
            pid_at_host: Some(format!("{pid}@{host}")),
            since,
            remark: None,
        })
    }

    fn loss_reason(&self) -> String {
        if std::fs::symlink_metadata(self.lock.path()).is_ok() {
            "its path names another file now".to_owned()
        } else {
            "its lock file was removed".to_owned()
        }
    }

    /// One stat(2) of the path: unlocking never looks at it.
    fn confirm_before_release(&mut self) -> Option<bool> {
        Some(self.lock.renew().unwrap_or(false))
    }

    fn release_leftover(&mut self) {
        let _ = self.lock.release();
    }
}

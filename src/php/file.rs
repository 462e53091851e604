//! `CronLock\File`: an flock(2) lock file.

use super::args::{Bytes, NullableFloat, OptionalFloat, OptionsArray};
use super::lock_interface::PhpInterfaceLock;
use super::native::{Acquired, NativeLock};
use super::options::Options;
use crate::lock::file::{FileLock, FileOptions};
use crate::lock::{shorten, Wait};
use ext_php_rs::binary::Binary;
use ext_php_rs::flags::ClassFlags;
use ext_php_rs::prelude::*;
use ext_php_rs::types::ZendHashTable;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

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

    /// The bytes of the path: a file name need not be UTF-8.
    pub fn path(&self) -> Binary<u8> {
        Binary::from(self.lock.path().as_os_str().as_bytes().to_vec())
    }

    pub fn acquire(&mut self, timeout: OptionalFloat) -> PhpResult<bool> {
        Ok(self
            .lock
            .acquire(Wait::from_seconds("$timeout", timeout.or(0.0))?)?)
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
}

impl NativeLock for File {
    fn held(&self) -> bool {
        self.lock.is_held()
    }

    fn acquire_for_guard(&mut self, wait: Wait) -> PhpResult<Acquired> {
        Ok(if self.lock.acquire(wait)? {
            Acquired::Yes
        } else {
            Acquired::No(self.lock.refusal())
        })
    }

    fn describe(&self) -> String {
        shorten(&self.lock.path().display().to_string())
    }

    fn busy_holder(&self) -> Option<String> {
        let pid = self.lock.holder_pid().ok().flatten()?;
        Some(format!("pid {pid}"))
    }

    fn release_leftover(&mut self) {
        let _ = self.lock.release();
    }
}

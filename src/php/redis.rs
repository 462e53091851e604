//! `CronLock\Redis`: a lock that works across machines.

use super::args::{Bytes, NullableFloat, OptionalFloat};
use super::lock_interface::PhpInterfaceLock;
use super::options::Options;
use crate::lock::redis::{check_timeout, ttl_from_secs, RedisLock, RedisOptions};
use crate::lock::Wait;
use ext_php_rs::flags::ClassFlags;
use ext_php_rs::prelude::*;
use ext_php_rs::types::ZendHashTable;
use std::time::Duration;

#[php_class]
#[php(name = "CronLock\\Redis")]
#[php(flags = ClassFlags::Final)]
#[php(implements(PhpInterfaceLock))]
pub struct Redis {
    lock: RedisLock,
}

#[php_impl]
impl Redis {
    pub fn __construct(
        dsn: Bytes,
        key: Bytes,
        ttl: OptionalFloat,
        options: Option<&ZendHashTable>,
    ) -> PhpResult<Self> {
        // D5: re-running the constructor would drop (and release) the lock
        // this object holds and silently switch keys.
        super::refuse_second_construct::<Redis>()?;
        let options = Options::new(
            "$options",
            options,
            &["auto_renew", "connect_timeout", "read_timeout"],
        )?;
        let defaults = RedisOptions::default();
        let timeout = |name: &str, default: Duration| -> PhpResult<Duration> {
            match options.seconds(name)? {
                None => Ok(default),
                // Negative or unrepresentable: refused like zero, by the check.
                Some(seconds) => Ok(check_timeout(
                    &options.arg_name(name),
                    Duration::try_from_secs_f64(seconds).unwrap_or(Duration::ZERO),
                )?),
            }
        };
        let redis_options = RedisOptions {
            connect_timeout: timeout("connect_timeout", defaults.connect_timeout)?,
            read_timeout: timeout("read_timeout", defaults.read_timeout)?,
            auto_renew: options.bool("auto_renew")?.unwrap_or(defaults.auto_renew),
        };
        let (dsn, key) = (dsn.utf8("$dsn")?, key.utf8("$key")?);
        super::note_lock_object();
        Ok(Redis {
            lock: RedisLock::new(&dsn, &key, ttl_from_secs(ttl.or(300.0))?, redis_options)?,
        })
    }

    pub fn acquire(&mut self, timeout: OptionalFloat) -> PhpResult<bool> {
        Ok(self
            .lock
            .acquire(Wait::from_seconds("$timeout", timeout.or(0.0))?)?)
    }

    pub fn renew(&mut self, ttl: NullableFloat) -> PhpResult<bool> {
        let ttl = ttl.0.map(ttl_from_secs).transpose()?;
        Ok(self.lock.renew(ttl)?)
    }

    pub fn release(&mut self) -> PhpResult<bool> {
        Ok(self.lock.release()?)
    }

    pub fn is_held(&self) -> bool {
        self.lock.is_held()
    }

    pub fn token(&self) -> Option<String> {
        self.lock.token().map(str::to_owned)
    }

    pub fn fencing_token(&self) -> Option<i64> {
        self.lock.fencing_token()
    }

    pub fn key(&self) -> String {
        self.lock.key().to_owned()
    }

    /// Always throws: a lock belongs to the process that holds it.
    pub fn __serialize(&self) -> PhpResult<Vec<String>> {
        Err(super::not_serializable("CronLock\\Redis"))
    }

    /// Always throws (the RINIT hook in `super` replaces its handler; this
    /// body only runs on a constructed object).
    pub fn __unserialize(&mut self, data: &ZendHashTable) -> PhpResult<()> {
        let _ = data;
        Err(super::not_serializable("CronLock\\Redis"))
    }
}

impl Redis {
    pub fn lock(&self) -> &RedisLock {
        &self.lock
    }

    /// For the request-shutdown sweep; errors have nowhere to go there.
    pub fn release_leftover(&mut self) {
        let _ = self.lock.release();
    }
}

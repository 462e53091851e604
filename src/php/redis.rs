//! `CronLock\Redis`: a lock that works across machines.

use super::exceptions::lock_exception;
use super::lock_interface::PhpInterfaceLock;
use super::options::{type_name, Options};
use crate::error::Error;
use crate::lock::redis::{check_timeout, ttl_from_secs, RedisLock, RedisOptions};
use crate::lock::Wait;
use ext_php_rs::exception::PhpException;
use ext_php_rs::ffi::{
    zend_class_entry, zend_execute_data, zend_function, zend_hash_str_find_ptr_lc,
    zend_unserialize_data, zval,
};
use ext_php_rs::flags::ClassFlags;
use ext_php_rs::prelude::*;
use ext_php_rs::types::{ZendHashTable, Zval};
use ext_php_rs::zend::{ce, ClassEntry, ExecutorGlobals};
use std::sync::Once;
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
    #[php(defaults(ttl = 300.0))]
    pub fn __construct(
        dsn: &Zval,
        key: String,
        ttl: f64,
        options: Option<&ZendHashTable>,
    ) -> PhpResult<Self> {
        if constructing_a_constructed_object() {
            // D5: re-running the constructor would drop (and release) the
            // lock this object holds and silently switch keys.
            return Err(PhpException::new(
                "Cannot call CronLock\\Redis::__construct() twice".into(),
                0,
                ce::error(),
            ));
        }
        let options = Options::new(
            "$options",
            options,
            &["auto_renew", "connect_timeout", "read_timeout", "replicas"],
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
            replicas: match options.int("replicas")? {
                None => defaults.replicas,
                Some(count) => u32::try_from(count)
                    .ok()
                    .filter(|&count| count <= 1000)
                    .ok_or_else(|| {
                        Error::value(
                            options.arg_name("replicas"),
                            "must be a number of replicas from 0 to 1000",
                        )
                    })?,
            },
        };
        let dsns = dsn_list(dsn)?;
        let dsns: Vec<&str> = dsns.iter().map(String::as_str).collect();
        super::note_lock_object();
        Ok(Redis {
            lock: RedisLock::on_masters(&dsns, &key, ttl_from_secs(ttl)?, redis_options)?,
        })
    }

    #[php(defaults(timeout = 0.0))]
    pub fn acquire(&mut self, timeout: f64) -> PhpResult<bool> {
        Ok(self
            .lock
            .acquire(Wait::from_seconds("$timeout", timeout)?)?)
    }

    pub fn renew(&mut self, ttl: Option<f64>) -> PhpResult<bool> {
        let ttl = ttl.map(ttl_from_secs).transpose()?;
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
        Err(serialization_refused())
    }

    /// Always throws (see [`refuse_unserialize`]; this body only runs on
    /// a constructed object).
    pub fn __unserialize(&mut self, data: &ZendHashTable) -> PhpResult<()> {
        let _ = data;
        Err(serialization_refused())
    }
}

/// `$dsn`: one DSN, or a list of them (Redlock). Never echoes a DSN: it
/// may hold a password.
fn dsn_list(dsn: &Zval) -> PhpResult<Vec<String>> {
    if let Some(one) = dsn.str() {
        return Ok(vec![one.to_owned()]);
    }
    let Some(list) = dsn.array() else {
        return Err(Error::type_(
            "$dsn",
            format!("must be of type array|string, {} given", type_name(dsn)),
        )
        .into());
    };
    // By index only: iterating keys panics in ext-php-rs on string keys
    // that are not UTF-8.
    (0..list.len())
        .map(|index| {
            let value = list
                .get_index(index as i64)
                .ok_or_else(|| Error::value("$dsn", "must be a list of DSNs (keys 0, 1, 2, …)"))?;
            value.str().map(str::to_owned).ok_or_else(|| {
                Error::type_(
                    format!("$dsn[{index}]"),
                    format!("must be of type string, {} given", type_name(value)),
                )
                .into()
            })
        })
        .collect()
}

fn serialization_refused() -> PhpException {
    PhpException::new(
        "a CronLock\\Redis cannot be serialized or unserialized: a lock belongs to \
         the process that holds it"
            .into(),
        0,
        lock_exception(),
    )
}

/// Whether the running `__construct()` call is on an object that was
/// already constructed.
fn constructing_a_constructed_object() -> bool {
    let frame = ExecutorGlobals::get().current_execute_data;
    // SAFETY: inside a method call the engine's current frame is that
    // call's, alive until it returns.
    unsafe { frame.as_mut() }.is_some_and(|frame| frame.get_object::<Redis>().is_some())
}

/// RINIT, once: lets `serialize()` and `unserialize()` reach
/// `__serialize()` / `__unserialize()`, which throw a LockException (D5),
/// instead of PHP's plain `\Exception` for classes marked not serializable.
/// `unserialize()` calls `__unserialize()` on an object that was never
/// constructed, where ext-php-rs' method wrapper would throw its own
/// exception: that method gets a handler that needs no object.
pub fn refuse_serialization() {
    static DONE: Once = Once::new();
    DONE.call_once(|| {
        let Some(class) = ClassEntry::try_find("CronLock\\Redis") else {
            return;
        };
        let name = "__unserialize";
        // SAFETY: the class entry lives for the whole process; the name is
        // a (pointer, length) pair the engine lowercases into its own buffer.
        let method: *mut zend_function = unsafe {
            zend_hash_str_find_ptr_lc(
                &raw const class.function_table,
                name.as_ptr().cast(),
                name.len(),
            )
            .cast()
        };
        if method.is_null() {
            return;
        }
        // SAFETY: an internal method of ours; only its handler is replaced,
        // before any request code runs, so no call is in flight.
        unsafe { (*method).internal_function.handler = Some(refuse_unserialize) };
        let class = std::ptr::from_ref(class).cast_mut();
        // SAFETY: the same process-long class entry; flags are only read
        // by the engine while serializing, which no request does yet.
        unsafe {
            (*class).ce_flags &= !ClassFlags::NotSerializable.bits();
            // The old `C:` format, which would make an unconstructed object.
            (*class).unserialize = Some(refuse_old_unserialize);
        }
    });
}

unsafe extern "C" fn refuse_old_unserialize(
    _object: *mut zval,
    _class: *mut zend_class_entry,
    _buf: *const u8,
    _buf_len: usize,
    _data: *mut zend_unserialize_data,
) -> i32 {
    serialization_refused().throw();
    -1 // FAILURE
}

extern "C" fn refuse_unserialize(_execute_data: *mut zend_execute_data, _retval: *mut zval) {
    serialization_refused().throw();
}

impl Redis {
    pub fn lock(&self) -> &RedisLock {
        &self.lock
    }

    pub fn lock_mut(&mut self) -> &mut RedisLock {
        &mut self.lock
    }

    /// For the request-shutdown sweep; errors have nowhere to go there.
    pub fn release_leftover(&mut self) {
        let _ = self.lock.release();
    }
}

//! `CronLock\Redis`: a lock that works across machines.

use super::args::{Bytes, Dsns, Float, NullableFloat, OptionalFloat, OptionsArray};
use super::lock_interface::PhpInterfaceLock;
use super::options::{type_name, Options};
use crate::error::Error;
use crate::lock::redis::{
    check_timeout, lifetime_from_secs, ttl_from_secs, RedisLock, RedisOptions, SentinelAuth, LEASE,
};
use crate::lock::Wait;
use ext_php_rs::flags::ClassFlags;
use ext_php_rs::prelude::*;
use ext_php_rs::types::ZendHashTable;
use std::time::{Duration, SystemTime};

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
        dsn: Dsns,
        key: Bytes,
        ttl: NullableFloat,
        options: OptionsArray,
    ) -> PhpResult<Self> {
        // D5: re-running the constructor would drop (and release) the lock
        // this object holds and silently switch keys.
        super::refuse_second_construct::<Redis>()?;
        let options = Options::new(
            "$options",
            options.0,
            &[
                "auto_renew",
                "connect_timeout",
                "read_timeout",
                "replicas",
                "sentinel_password",
                "sentinel_user",
            ],
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
        let connect_timeout = timeout("connect_timeout", defaults.connect_timeout)?;
        let read_timeout = timeout("read_timeout", defaults.read_timeout)?;
        let auto_renew = options.bool("auto_renew")?;
        let mut redis_options = RedisOptions {
            connect_timeout,
            read_timeout,
            auto_renew: false,
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
        let sentinel_auth = sentinel_auth(&options)?;
        let key = key.utf8("$key")?;
        let is_list = matches!(dsn, Dsns::List(_));
        let dsns = dsn_list(dsn)?;
        let dsns: Vec<&str> = dsns.iter().map(String::as_str).collect();
        // D15: no $ttl is a lease that renewal keeps; refusing to renew it is an error.
        let ttl = match (ttl.0, auto_renew) {
            (None, Some(false)) => {
                return Err(Error::value(
                    options.arg_name("auto_renew"),
                    format!(
                        "must not be false without a $ttl: the key is then held on a {} s \
                         lease that only renewal keeps; give a $ttl to hold it without renewal",
                        LEASE.as_secs()
                    ),
                )
                .into())
            }
            // No $ttl: a lease that this process renews while it lives.
            (None, _) => {
                redis_options.auto_renew = true;
                LEASE
            }
            (Some(seconds), auto_renew) => {
                redis_options.auto_renew = auto_renew.unwrap_or(defaults.auto_renew);
                ttl_from_secs(seconds)?
            }
        };
        let mut lock = if !is_list {
            RedisLock::new(dsns[0], &key, ttl, redis_options)?
        } else {
            RedisLock::on_masters(&dsns, &key, ttl, redis_options)?
        };
        if let Some(auth) = &sentinel_auth {
            lock.set_sentinel_auth(auth)?;
        }
        super::note_lock_object();
        Ok(Redis { lock })
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

    pub fn holder(&mut self) -> PhpResult<Option<String>> {
        Ok(self.lock.holder()?)
    }

    pub fn claim(&mut self, window: Bytes, seconds: Float) -> PhpResult<bool> {
        let window = window.utf8("$window")?;
        let lasting = lifetime_from_secs("$seconds", seconds.0)?;
        Ok(self.lock.claim(&window, lasting)?)
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

/// `'sentinel_user'` / `'sentinel_password'`: the sentinels' credentials.
/// Never echoes a value.
fn sentinel_auth(options: &Options) -> PhpResult<Option<SentinelAuth>> {
    let user = options.string("sentinel_user")?;
    let Some(password) = options.string("sentinel_password")? else {
        if user.is_some() {
            return Err(Error::value(
                options.arg_name("sentinel_user"),
                "needs 'sentinel_password' too (AUTH takes a user and a password)",
            )
            .into());
        }
        return Ok(None);
    };
    if password.is_empty() {
        return Err(Error::value(
            options.arg_name("sentinel_password"),
            "must not be empty (leave it out when the sentinels need no password)",
        )
        .into());
    }
    if user.as_deref() == Some("") {
        return Err(Error::value(
            options.arg_name("sentinel_user"),
            "must not be empty (leave it out for the default user)",
        )
        .into());
    }
    Ok(Some(SentinelAuth { user, password }))
}

/// `$dsn`: one DSN, or a list of them (Redlock). Never echoes a DSN: it
/// may hold a password.
fn dsn_list(dsn: Dsns) -> PhpResult<Vec<String>> {
    let list = match dsn {
        Dsns::One(one) => {
            let one =
                String::from_utf8(one).map_err(|_| Error::value("$dsn", "must be valid UTF-8"))?;
            return Ok(vec![one]);
        }
        Dsns::List(list) => list,
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

/// For `cron_guard()` (see `native.rs`).
impl super::native::NativeLock for Redis {
    fn held(&self) -> bool {
        self.lock().is_held()
    }

    fn acquire_for_guard(&mut self, wait: Wait) -> PhpResult<super::native::Acquired> {
        use super::native::Acquired;
        use crate::lock::Refusal;
        Ok(if self.lock_mut().acquire(wait)? {
            Acquired::Yes
        } else {
            // Its wait gives up when the interrupt flag is set, and no PHP
            // code has run since to clear it.
            Acquired::No(if crate::lock::interrupted() {
                Some(Refusal::Interrupted)
            } else if self.lock().busy_in_this_process() {
                Some(Refusal::HeldByThisThread)
            } else {
                None
            })
        })
    }

    fn describe(&self) -> String {
        self.lock().describe()
    }

    fn busy_holder(&self) -> Option<super::native::Holder> {
        let (pid, host) = self.lock().last_holder()?;
        let host = crate::lock::shorten(host);
        Some(super::native::Holder {
            who: format!("pid {pid} on {host}"),
            pid_at_host: Some(format!("{pid}@{host}")),
            since: None,
            remark: self.lock().dead_holder_remark(),
        })
    }

    fn loss_reason(&self) -> String {
        match self.lock().loss() {
            Some((_, why)) => why.words().to_owned(),
            None => "the key no longer holds this lock's token".to_owned(),
        }
    }

    fn lost_at(&self) -> Option<SystemTime> {
        self.lock().loss().map(|(at, _)| at)
    }

    fn set_once_per(&mut self, period: Option<Duration>) -> bool {
        self.lock_mut().set_once_per(period);
        true
    }

    fn release_leftover(&mut self) {
        Redis::release_leftover(self);
    }
}

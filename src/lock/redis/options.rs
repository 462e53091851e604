//! Options, TTL and timeout limits, and their checks.

use crate::error::{Error, Result};
use std::time::Duration;

/// The longest TTL accepted: 10 years.
pub const MAX_TTL: Duration = Duration::from_secs(10 * 365 * 24 * 60 * 60);

/// The TTL of a key held without a `$ttl`: the lock renews it every
/// third of that (10 s) while its process lives (Redisson's watchdog), so
/// a holder killed by SIGKILL, or on a host that went down, blocks the
/// next run for at most this long.
pub const LEASE: Duration = Duration::from_secs(30);

/// Whether `rediss://` DSNs work in this build (they do: rustls is built in).
pub fn tls_supported() -> bool {
    true
}

/// Connection settings of a [`RedisLock`](super::RedisLock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedisOptions {
    /// Limit for opening a connection, including AUTH and SELECT. Must be > 0.
    pub connect_timeout: Duration,
    /// Limit for each reply (and each write). Must be > 0.
    pub read_timeout: Duration,
    /// Renew the TTL from a background thread every ttl/3 while held.
    pub auto_renew: bool,
    /// An acquire succeeds only once this many replicas acknowledged the
    /// key (`WAIT`, within 4/5 of `read_timeout`); 0: do not wait.
    pub replicas: u32,
}

impl RedisOptions {
    /// These options with no timeout longer than `budget` (at least 1 ms:
    /// a zero timeout is refused by the socket API), for a call that must
    /// end within it.
    pub(super) fn within(&self, budget: Duration) -> RedisOptions {
        let budget = budget.max(Duration::from_millis(1));
        RedisOptions {
            connect_timeout: self.connect_timeout.min(budget),
            read_timeout: self.read_timeout.min(budget),
            ..*self
        }
    }
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            connect_timeout: Duration::from_secs(1),
            read_timeout: Duration::from_secs(1),
            auto_renew: false,
            replicas: 0,
        }
    }
}

/// Converts a PHP `$ttl` in seconds, with the same checks as [`RedisLock::new`](super::RedisLock::new).
///
/// # Errors
///
/// [`Error::InvalidValue`] for `$ttl` when `seconds` is NaN, infinite, not
/// positive, or longer than [`MAX_TTL`].
pub fn ttl_from_secs(seconds: f64) -> Result<Duration> {
    lifetime_from_secs("$ttl", seconds)
}

/// [`ttl_from_secs`] for the argument `arg` (`$seconds` of a claim).
///
/// # Errors
///
/// [`Error::InvalidValue`] naming `arg`, as for [`ttl_from_secs`].
pub fn lifetime_from_secs(arg: &str, seconds: f64) -> Result<Duration> {
    if seconds.is_finite() && seconds > MAX_TTL.as_secs_f64() {
        // Beyond what a Duration holds, but finite: say what is wrong.
        return Err(too_long(arg));
    }
    let lifetime = Duration::try_from_secs_f64(seconds)
        .map_err(|_| Error::value(arg, "must be a finite number greater than 0"))?;
    check_lifetime(arg, lifetime)
}

fn too_long(arg: &str) -> Error {
    Error::value(
        arg,
        format!("must be at most {} seconds (10 years)", MAX_TTL.as_secs()),
    )
}

pub(super) fn check_ttl(ttl: Duration) -> Result<Duration> {
    check_lifetime("$ttl", ttl)
}

pub(super) fn check_lifetime(arg: &str, lifetime: Duration) -> Result<Duration> {
    if lifetime.is_zero() {
        return Err(Error::value(arg, "must be greater than 0"));
    }
    if lifetime > MAX_TTL {
        return Err(too_long(arg));
    }
    Ok(lifetime)
}

/// The longest connect or read timeout: a day already means "never" for a
/// cron job, and it keeps deadline arithmetic far from overflow.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(86_400);

/// Refuses a zero timeout (the socket API does too) or one above
/// [`MAX_TIMEOUT`].
pub fn check_timeout(arg: &str, timeout: Duration) -> Result<Duration> {
    if timeout.is_zero() || timeout > MAX_TIMEOUT {
        return Err(Error::value(
            arg,
            "must be a number of seconds greater than 0 and at most 86400",
        ));
    }
    Ok(timeout)
}

/// Redis takes whole milliseconds; rounding up keeps a sub-millisecond TTL
/// from becoming 0, which `SET PX` refuses.
pub(super) fn ttl_ms(ttl: Duration) -> u64 {
    // MAX_TTL keeps this far below u64::MAX.
    ttl.as_nanos().div_ceil(1_000_000) as u64
}

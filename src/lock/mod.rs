//! The lock logic, in plain Rust: no PHP types here, so `cargo test`
//! exercises all of it without a PHP runtime.

pub mod database;
pub mod dirs;
pub mod escape;
pub mod file;
pub mod named;
pub mod owner;
pub mod redis;
pub mod registry;
pub mod report;
pub mod signals;
mod sys;

pub use escape::{one_line, shorten};

use crate::error::{Error, Result};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

static INTERRUPT_CHECK: OnceLock<fn() -> bool> = OnceLock::new();

/// Lets the embedding runtime cut waits short: the PHP layer passes a check
/// of the engine's interrupt flag, so a `pcntl` signal handler or
/// `max_execution_time` runs while `acquire()` waits, instead of after.
pub fn set_interrupt_check(check: fn() -> bool) {
    let _ = INTERRUPT_CHECK.set(check);
}

/// Whether a wait should give up now (always false without a check).
pub fn interrupted() -> bool {
    INTERRUPT_CHECK.get().is_some_and(|check| check())
}

/// Why an `acquire` returned false: the busy line of `cron_guard()` says
/// different things for each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Another holder kept the lock for the whole wait.
    Contended,
    /// Another lock object of this thread holds it (a try once; a wait
    /// would be an error, as it could never end).
    HeldByThisThread,
    /// A PHP signal handler (or timeout) is waiting to run.
    Interrupted,
    /// This object held the lock and found it lost (File: the path no
    /// longer names the locked file).
    Lost,
}

/// How long `acquire` may wait, from the PHP `$timeout` argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// `$timeout == 0`: try once.
    Once,
    /// `$timeout > 0`: wait until this instant at the latest.
    Until(Instant),
    /// `$timeout < 0` (or `INF`): wait until acquired.
    Forever,
}

impl Wait {
    /// Reads a PHP timeout in seconds. NaN is refused; a timeout too large
    /// to represent as an instant waits forever.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidValue`] naming `arg` when `seconds` is NaN.
    pub fn from_seconds(arg: &str, seconds: f64) -> Result<Self> {
        if seconds.is_nan() {
            return Err(Error::value(arg, "must be a number, NaN given"));
        }
        if seconds == 0.0 {
            return Ok(Wait::Once);
        }
        if seconds < 0.0 {
            return Ok(Wait::Forever);
        }
        Ok(Duration::try_from_secs_f64(seconds)
            .ok()
            .and_then(|d| Instant::now().checked_add(d))
            .map_or(Wait::Forever, Wait::Until))
    }

    /// Time left before giving up: `Some(ZERO)` once expired, `None` forever.
    pub fn remaining(&self) -> Option<Duration> {
        match self {
            Wait::Once => Some(Duration::ZERO),
            Wait::Until(deadline) => Some(deadline.saturating_duration_since(Instant::now())),
            Wait::Forever => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_signs_map_to_wait_modes() {
        assert_eq!(Wait::from_seconds("$timeout", 0.0).unwrap(), Wait::Once);
        assert_eq!(Wait::from_seconds("$timeout", -0.0).unwrap(), Wait::Once);
        assert_eq!(Wait::from_seconds("$timeout", -1.0).unwrap(), Wait::Forever);
        assert_eq!(
            Wait::from_seconds("$timeout", f64::INFINITY).unwrap(),
            Wait::Forever
        );
        assert_eq!(
            Wait::from_seconds("$timeout", 1e300).unwrap(),
            Wait::Forever
        );
        assert!(matches!(
            Wait::from_seconds("$timeout", 0.5).unwrap(),
            Wait::Until(_)
        ));
        let err = Wait::from_seconds("$timeout", f64::NAN).unwrap_err();
        assert!(err.to_string().contains("$timeout"));
    }
}

//! [`NativeLock`]: what `cron_guard()` and the request's end need of the
//! lock classes of this extension, so that they have one native branch and
//! one userland branch. Each class implements it beside its PHP methods;
//! `lock_classes.rs` tells which class a PHP object is.
//!
//! The traps this closes:
//! - a native lock is asked and acquired directly, not through a PHP call:
//!   a PHP call runs a pending signal handler as it returns (and clears the
//!   engine's interrupt flag), after which an interrupted wait could no
//!   longer be told from contention;
//! - releasing at the request's end (or after a fatal error) runs no PHP
//!   code, which is unsafe while a fatal error unwinds;
//! - a lock that cannot tell who holds it, or has no TTL for `'once_per'`,
//!   says so through the defaults instead of guessing.

use crate::lock::{Refusal, Wait};
use ext_php_rs::prelude::*;
use std::time::{Duration, SystemTime};

/// Who holds a lock `cron_guard()` found busy, as far as the backend can
/// tell, for the busy line and the per-run record.
pub struct Holder {
    /// `pid 41327 on web1`, `MySQL connection 12 from cron@web1`.
    pub who: String,
    /// `41327@web1`, when the backend knows both.
    pub pid_at_host: Option<String>,
    /// When it took the lock (File: its record); what makes a holder look
    /// stuck after `'stale_after'`.
    pub since: Option<SystemTime>,
    /// What the backend adds after the holder and its age, e.g. Redis's
    /// `(not running on this host; the key expires in 29 s)`.
    pub remark: Option<String>,
}

impl Holder {
    /// A holder known by its words only.
    pub fn named(who: String) -> Self {
        Holder {
            who,
            pid_at_host: None,
            since: None,
            remark: None,
        }
    }
}

/// How `acquire()` ended, for `cron_guard()`.
pub enum Acquired {
    Yes,
    /// Busy; why, when the lock can tell.
    No(Option<Refusal>),
    /// acquire() threw (or a signal handler did): the exception is pending
    /// and propagates.
    Threw,
}

/// A lock class of this extension, as `cron_guard()` uses it.
pub trait NativeLock {
    /// `isHeld()`.
    fn held(&self) -> bool;

    /// `acquire()` with the wait of `cron_guard()`'s `'wait'`.
    ///
    /// # Errors
    ///
    /// The lock's own exception (a backend failure is never busy).
    fn acquire_for_guard(&mut self, wait: Wait) -> PhpResult<Acquired>;

    /// How messages name the lock: its path, key, or name and server.
    fn describe(&self) -> String;

    /// Who holds the lock, for the busy line (`pid 41327 on web1`, `MySQL
    /// connection 12 from cron@web1`); `None` when it cannot tell.
    fn busy_holder(&self) -> Option<Holder> {
        None
    }

    /// Why a hold this object had is gone, for `cron_guard()`'s lost line
    /// (`the key holds another token`), asked once the guard noticed.
    fn loss_reason(&self) -> String {
        "the lock no longer holds it".to_owned()
    }

    /// When the hold was lost, if the lock knows (Redis: when the renewal
    /// thread or the call that found out saw it); `None`: when the guard
    /// noticed.
    fn lost_at(&self) -> Option<std::time::SystemTime> {
        None
    }

    /// At the job's end, before release: whether the hold survived, when
    /// release()'s own answer cannot tell (File: its release unlocks
    /// whatever the path names now). `None`: release() will say.
    fn confirm_before_release(&mut self) -> Option<bool> {
        None
    }

    /// `'once_per'`: puts the lock into (`Some`) or out of once-per-window
    /// mode for the next acquire; false when the lock has no TTL to leave
    /// behind at the window's end.
    fn set_once_per(&mut self, period: Option<Duration>) -> bool {
        let _ = period;
        false
    }

    /// Releases what this object holds, running no PHP code; errors have
    /// nowhere to go there.
    fn release_leftover(&mut self);
}

//! What we know about a key we acquired, shared by the lock, the
//! registry of this thread's holds and the renewal thread: until when it
//! is ours, whether it was found lost, and its once-per window.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

/// Why a hold was found lost, for cron_guard()'s lost line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loss {
    /// A token-checked script found no key.
    KeyGone,
    /// It found someone else's value.
    AnotherToken,
    /// The hold's TTL passed without a renewal that confirmed it.
    RanOut,
    /// The TTL passed while the renewals could not reach the server.
    Unreachable,
}

impl Loss {
    /// The words of the lost line, the same in cronlock/polyfill.
    pub fn words(self) -> &'static str {
        match self {
            Loss::KeyGone => "the key is gone",
            Loss::AnotherToken => "the key holds another token",
            Loss::RanOut => "its TTL ran out before a renewal",
            Loss::Unreachable => "its TTL ran out while the server could not be reached",
        }
    }

    /// A token-checked script's "no": -1 is no key, anything else
    /// someone else's value.
    pub(super) fn from_reply(reply: i64) -> Loss {
        if reply == -1 {
            Loss::KeyGone
        } else {
            Loss::AnotherToken
        }
    }
}

/// Shared between the lock and its renewal thread.
pub(super) struct Ownership {
    pub(super) acquired_at: Instant,
    /// When the key expires at the earliest, as nanoseconds after
    /// `acquired_at`; atomic so `is_held` never blocks on a renewal.
    expires_after_ns: AtomicU64,
    /// The key lives at least this long after `acquired_at` whatever a
    /// renewal sets (a once-per window's end); 0: no such floor.
    kept_until_ns: AtomicU64,
    /// End of the latest once-per window the key is kept to (Unix ms of
    /// the server's clock), below which no renewal shortens its life and
    /// which its release leaves it to expire at; 0: an ordinary hold.
    /// Atomic: a once-per guard that confirms the hold (not only the one
    /// that took it) sets it while the renewal thread reads it.
    window_end_ms: AtomicI64,
    lost: AtomicBool,
    /// The renewal thread's last try could not reach the server: a hold
    /// that runs out now ran out for that reason.
    unreachable: AtomicBool,
    /// When and why it was found lost (the first finding counts).
    loss: Mutex<Option<(SystemTime, Loss)>>,
    /// Serializes renewals so an older reply cannot overwrite the expiry a
    /// newer one set.
    pub(super) renew_gate: Mutex<()>,
    /// The lock released or dropped the hold: the renewal thread renews
    /// it no more.
    stopped: AtomicBool,
}

impl Ownership {
    pub(super) fn new(acquired_at: Instant, ttl: Duration) -> Self {
        let state = Ownership {
            acquired_at,
            expires_after_ns: AtomicU64::new(0),
            kept_until_ns: AtomicU64::new(0),
            window_end_ms: AtomicI64::new(0),
            lost: AtomicBool::new(false),
            unreachable: AtomicBool::new(false),
            loss: Mutex::new(None),
            renew_gate: Mutex::new(()),
            stopped: AtomicBool::new(false),
        };
        state.store_expiry(acquired_at, ttl);
        state
    }

    /// A once-per window that ends at `window_end_ms` keeps the key, as a
    /// script sent at `sent` found, `left` from then on at least: the hold
    /// stays valid that long, and renewals and the release keep the key to
    /// that end. An earlier window than one already recorded changes
    /// nothing (the scripts never shorten the key's life either).
    pub(super) fn keep_to_window_end(&self, window_end_ms: i64, sent: Instant, left: Duration) {
        let after = sent.saturating_duration_since(self.acquired_at) + left;
        let nanos = u64::try_from(after.as_nanos()).unwrap_or(u64::MAX);
        self.kept_until_ns.fetch_max(nanos, Ordering::AcqRel);
        self.window_end_ms
            .fetch_max(window_end_ms, Ordering::AcqRel);
    }

    /// See [`Ownership::keep_to_window_end`]; 0: no once-per window.
    pub(super) fn window_end_ms(&self) -> i64 {
        self.window_end_ms.load(Ordering::Acquire)
    }

    fn store_expiry(&self, sent: Instant, ttl: Duration) {
        let after = sent.saturating_duration_since(self.acquired_at) + ttl;
        let nanos = u64::try_from(after.as_nanos()).unwrap_or(u64::MAX);
        self.expires_after_ns.store(nanos, Ordering::Release);
    }

    /// Records a confirmed expiry. `sent` is when the command left, so the
    /// server's expiry (counted from when it arrived) is never earlier.
    /// A hold whose validity ran out before the confirmation came is not
    /// revived (`false`, and it is lost): `is_held()` said false meanwhile,
    /// and a lock that was not held must not be held again without an
    /// acquire.
    pub(super) fn extend(&self, sent: Instant, ttl: Duration) -> bool {
        if !self.is_valid() {
            self.lose(Loss::RanOut);
            return false;
        }
        self.store_expiry(sent, ttl);
        true
    }

    /// Marks the hold lost for `why`, found now (a hold that ran out:
    /// when its TTL passed), unless it was found lost before.
    pub(super) fn lose(&self, why: Loss) {
        let mut loss = self.loss.lock();
        if loss.is_none() {
            let why = if why == Loss::RanOut {
                self.ran_out()
            } else {
                why
            };
            let at = match why {
                Loss::RanOut | Loss::Unreachable => self.expired_at(),
                Loss::KeyGone | Loss::AnotherToken => SystemTime::now(),
            };
            *loss = Some((at, why));
        }
        self.lost.store(true, Ordering::Release);
    }

    /// When and why the hold was lost: as found, or, for a hold whose TTL
    /// passed unrenewed without anyone finding out, when it passed.
    pub(super) fn loss(&self) -> Option<(SystemTime, Loss)> {
        if let Some(found) = *self.loss.lock() {
            return Some(found);
        }
        (!self.is_valid()).then(|| (self.expired_at(), self.ran_out()))
    }

    /// Whether the renewal thread's last try reached the server.
    pub(super) fn note_reached(&self, reached: bool) {
        self.unreachable.store(!reached, Ordering::Release);
    }

    /// Why a hold whose TTL passed ran out.
    fn ran_out(&self) -> Loss {
        if self.unreachable.load(Ordering::Acquire) {
            Loss::Unreachable
        } else {
            Loss::RanOut
        }
    }

    /// The wall-clock time at which the hold's validity ends (or ended).
    fn expired_at(&self) -> SystemTime {
        let now = SystemTime::now();
        let left = self.remaining();
        if !left.is_zero() {
            return now + left;
        }
        let expires_after = Duration::from_nanos(
            self.expires_after_ns
                .load(Ordering::Acquire)
                .max(self.kept_until_ns.load(Ordering::Acquire)),
        );
        let ago = self.acquired_at.elapsed().saturating_sub(expires_after);
        now.checked_sub(ago).unwrap_or(now)
    }

    pub(super) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    pub(super) fn is_valid(&self) -> bool {
        !self.lost.load(Ordering::Acquire) && !self.remaining().is_zero()
    }

    /// How long the hold is valid from now, as far as we know.
    pub(super) fn remaining(&self) -> Duration {
        let expires_after = Duration::from_nanos(
            self.expires_after_ns
                .load(Ordering::Acquire)
                .max(self.kept_until_ns.load(Ordering::Acquire)),
        );
        expires_after.saturating_sub(self.acquired_at.elapsed())
    }

    pub(super) fn signal_stop(&self) {
        self.stopped.store(true, Ordering::Release);
    }

    pub(super) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }
}

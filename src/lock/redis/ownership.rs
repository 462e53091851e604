//! What we know about a key we acquired, shared by the lock, the
//! registry of this thread's holds and the renewal thread: until when it
//! is ours, whether it was found lost, and its once-per window.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

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
    pub(super) lost: AtomicBool,
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
            self.lost.store(true, Ordering::Release);
            return false;
        }
        self.store_expiry(sent, ttl);
        true
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

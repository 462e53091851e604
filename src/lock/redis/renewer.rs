//! The auto-renew thread, and the hold state it shares with the lock.

use super::cluster::Cluster;
use super::options::RedisOptions;
use super::redlock::{on_all, verdict, Node, Verdict};
use super::scripts::renew_invocation;
use super::sentinel::Sentinel;
use parking_lot::{Condvar, Mutex};
use redis::ScriptInvocation;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Longest pause between auto-renew attempts after a failed one.
const RENEW_RETRY_MAX: Duration = Duration::from_secs(1);

/// Shared between the lock and its renewal thread.
pub(super) struct HoldState {
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
    stopping: Mutex<bool>,
    stop_signal: Condvar,
}

impl HoldState {
    pub(super) fn new(acquired_at: Instant, ttl: Duration) -> Self {
        let state = HoldState {
            acquired_at,
            expires_after_ns: AtomicU64::new(0),
            kept_until_ns: AtomicU64::new(0),
            window_end_ms: AtomicI64::new(0),
            lost: AtomicBool::new(false),
            renew_gate: Mutex::new(()),
            stopping: Mutex::new(false),
            stop_signal: Condvar::new(),
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

    /// See [`HoldState::keep_to_window_end`]; 0: no once-per window.
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
        *self.stopping.lock() = true;
        self.stop_signal.notify_all();
    }

    /// Sleeps until `until` or a stop request; true when asked to stop.
    pub(super) fn wait_for_stop(&self, until: Instant) -> bool {
        let mut stopping = self.stopping.lock();
        while !*stopping {
            if self
                .stop_signal
                .wait_until(&mut stopping, until)
                .timed_out()
            {
                break;
            }
        }
        *stopping
    }
}

/// The auto-renew thread's work; owns its own connections.
pub(super) struct Renewal {
    /// The server, or the Redlock masters (fresh connections of its own).
    pub(super) nodes: Vec<Node>,
    pub(super) options: RedisOptions,
    pub(super) key: String,
    pub(super) token: String,
    pub(super) ttl: Duration,
    /// The token-checked delete, for a renewal that came back too late.
    pub(super) release: ScriptInvocation<'static>,
    /// How long a renewal counts as valid from when it was sent.
    pub(super) valid_for: Duration,
    /// Sentinel: renew on the master the sentinels name now.
    pub(super) sentinel: Option<Sentinel>,
    /// Cluster: follow redirections.
    pub(super) cluster: Option<Cluster>,
}

impl Renewal {
    pub(super) fn run(mut self, state: &HoldState) {
        let period = (self.valid_for / 3).max(Duration::from_millis(1));
        let mut next = state.acquired_at + period;
        while !state.wait_for_stop(next) {
            let gate = state.renew_gate.lock();
            let sent = Instant::now();
            // Read at each renewal: a once-per guard that confirms the
            // hold may have kept it to a window's end since.
            let invocation =
                renew_invocation(&self.key, &self.token, self.ttl, state.window_end_ms());
            let invocation = &invocation;
            let followed = match &mut self.sentinel {
                Some(sentinel) => sentinel.follow(&mut self.nodes[0], &self.options).is_ok(),
                None => true,
            };
            let results = if !followed {
                Vec::new()
            } else if let Some(cluster) = &mut self.cluster {
                vec![
                    cluster.run(&mut self.nodes[0], &self.options, false, |conn| {
                        invocation.invoke::<i64>(conn)
                    }),
                ]
            } else {
                // Redlock: half of what is left of the validity, so that a
                // stalled minority cannot keep the answer of the majority
                // from arriving before the hold runs out.
                let deadline = (self.nodes.len() > 1).then(|| sent + state.remaining() / 2);
                on_all(&mut self.nodes, &self.options, deadline, &|conn| {
                    invocation.invoke::<i64>(conn)
                })
            };
            match verdict(results, |reply, _| reply == 1) {
                Verdict::Yes if !state.extend(sent, self.valid_for) => {
                    // Too late: the hold ran out while the renewal was on
                    // its way. Give the key back rather than leave it for
                    // a whole TTL to nobody (best effort).
                    let release = &self.release;
                    let _ = on_all(&mut self.nodes, &self.options, None, &|conn| {
                        release.invoke::<i64>(conn)
                    });
                    return;
                }
                Verdict::Yes => next = sent + period,
                Verdict::No => {
                    state.lost.store(true, Ordering::Release);
                    return;
                }
                // The key has expired unrenewed: someone else may hold it.
                Verdict::Unknown(_) if !state.is_valid() => {
                    state.lost.store(true, Ordering::Release);
                    return;
                }
                Verdict::Unknown(_) => next = Instant::now() + period.min(RENEW_RETRY_MAX),
            }
            drop(gate);
        }
    }
}

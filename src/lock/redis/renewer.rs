//! The auto-renew thread: renews the key every ttl/3 while the lock is
//! held, on connections of its own.

use super::hold::HoldState;
use super::scripts::renew_invocation;
use super::target::Target;
use super::topology::{Topology, Verdict};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// Longest pause between auto-renew attempts after a failed one.
const RENEW_RETRY_MAX: Duration = Duration::from_secs(1);

/// The auto-renew thread's work.
pub(super) struct Renewal {
    /// A copy of the lock's topology, with connections of its own.
    pub(super) topology: Topology,
    pub(super) target: Target,
    pub(super) token: String,
    /// How long a renewal counts as valid from when it was sent.
    pub(super) valid_for: Duration,
}

impl Renewal {
    /// Starts the thread.
    ///
    /// # Errors
    ///
    /// The OS's, when no thread can be started.
    pub(super) fn spawn(self, state: &Arc<HoldState>) -> std::io::Result<JoinHandle<()>> {
        let state = Arc::clone(state);
        thread::Builder::new()
            .name("cronlock-renew".to_owned())
            .spawn(move || self.run(&state))
    }

    fn run(mut self, state: &HoldState) {
        let period = (self.valid_for / 3).max(Duration::from_millis(1));
        let mut next = state.acquired_at + period;
        let options = self.target.options;
        while !state.wait_for_stop(next) {
            let gate = state.renew_gate.lock();
            let sent = Instant::now();
            // Read at each renewal: a once-per guard that confirms the
            // hold may have kept it to a window's end since.
            let invocation = renew_invocation(
                &self.target.key,
                &self.token,
                self.target.ttl,
                state.window_end_ms(),
            );
            // Redlock: half of what is left of the validity, so that a
            // stalled minority cannot keep the answer of the majority
            // from arriving before the hold runs out.
            let deadline = sent + state.remaining() / 2;
            let verdict = self.topology.verdict(
                &options,
                Some(deadline),
                &|conn| invocation.invoke::<i64>(conn),
                |reply, _| reply == 1,
            );
            match verdict {
                Verdict::Yes if !state.extend(sent, self.valid_for) => {
                    // Too late: the hold ran out while the renewal was on
                    // its way. Give the key back rather than leave it for
                    // a whole TTL to nobody (best effort).
                    let release = self.target.release_invocation(&self.token);
                    let _ = self.topology.verdict(
                        &options,
                        None,
                        &|conn| release.invoke::<i64>(conn),
                        |_, _| true,
                    );
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

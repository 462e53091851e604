//! How a File waits for a lock held elsewhere: blocked in flock(2), as
//! `flock -w` waits, and woken at least every 100 ms (decision D22).
//!
//! The traps this closes:
//! - the waiter blocks in the kernel: /proc/locks and lslocks list it (so
//!   `cronlock status` counts it), the kernel hands it the lock the moment
//!   the holder lets go, and a wait of minutes costs ten wake-ups a second,
//!   not a thousand tries;
//! - it is woken at least every [`MAX_BLOCK`] (`sys::Wakeups`), and at its
//!   deadline, so the deadline holds and PHP's pending signal handlers run
//!   within about 100 ms whatever `restart_syscalls` says (D9): the caller
//!   checks both between two calls of [`Waiting::once`];
//! - where no wake-up can be had (no per-thread timer on this Unix, every
//!   realtime signal taken), it polls with flock(LOCK_NB) instead, at most
//!   1 ms apart (20 ms once a wait forever has lasted 2 s), which nobody
//!   can see from outside.

use crate::lock::sys;
use std::fs::File;
use std::io;
use std::time::{Duration, Instant};

/// Longest a blocking flock(2) lasts before a wake-up lets the caller check
/// its deadline and PHP's pending signal handlers (D9: ~100 ms).
const MAX_BLOCK: Duration = Duration::from_millis(100);
/// A wake-up never comes sooner than this, however close the deadline.
const MIN_BLOCK: Duration = Duration::from_millis(1);
/// Polling: the longest pause between two tries (it bounds the hand-off).
const MAX_POLL: Duration = Duration::from_millis(1);
/// Polling: a wait forever that has lasted [`LONG_WAIT`] tries at most
/// this far apart, so a lock held for minutes costs no thousand syscalls a
/// second.
const MAX_POLL_LONG_WAIT: Duration = Duration::from_millis(20);
const LONG_WAIT: Duration = Duration::from_secs(2);

/// One wait of one `acquire`, from its first contended try to its end.
pub(super) struct Waiting {
    how: How,
}

enum How {
    /// `armed`: the period the wake-ups come at now (they repeat, so a
    /// tick costs no re-arming unless the deadline needs a sooner one).
    Blocking {
        wakeups: sys::Wakeups,
        armed: Option<Duration>,
    },
    Polling {
        pause: Duration,
        started: Instant,
    },
}

impl Waiting {
    pub(super) fn start() -> Waiting {
        let how = match sys::Wakeups::start() {
            Some(wakeups) => How::Blocking {
                wakeups,
                armed: None,
            },
            None => How::Polling {
                pause: Duration::from_micros(50),
                started: Instant::now(),
            },
        };
        Waiting { how }
    }

    /// Whether this wait blocks in the kernel (the waiter is listed there).
    #[cfg(test)]
    pub(super) fn blocks(&self) -> bool {
        matches!(self.how, How::Blocking { .. })
    }

    /// Waits once, at most `left` (`None`: no deadline). `Ok(true)`: `file`
    /// holds the lock now. `Ok(false)`: woken or paused without it; the
    /// caller checks its deadline and PHP's signal handlers, then calls
    /// again.
    ///
    /// # Errors
    ///
    /// What flock(2) or the wake-up timer says other than contention.
    pub(super) fn once(
        &mut self,
        file: &File,
        shared: bool,
        left: Option<Duration>,
    ) -> io::Result<bool> {
        match &mut self.how {
            How::Blocking { wakeups, armed } => {
                let next = left
                    .map_or(MAX_BLOCK, |left| left.min(MAX_BLOCK))
                    .max(MIN_BLOCK);
                if armed.is_none_or(|period| next < period) {
                    wakeups.arm(next)?;
                    *armed = Some(next);
                }
                sys::lock_blocking(file, shared)
            }
            How::Polling { pause, started } => {
                let cap = if left.is_none() && started.elapsed() >= LONG_WAIT {
                    MAX_POLL_LONG_WAIT
                } else {
                    MAX_POLL
                };
                *pause = (*pause * 2).min(cap);
                std::thread::sleep(left.map_or(*pause, |left| left.min(*pause)));
                sys::try_flock(file, shared)
            }
        }
    }
}

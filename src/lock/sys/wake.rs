//! Wake-ups for a blocking flock(2). A File wait blocks in the kernel, as
//! `flock -w` does: /proc/locks and lslocks list the waiter, and the
//! kernel hands it the lock the moment it is free. A timer interrupts the
//! blocked call at least every period, so the wait still ends at its
//! deadline and lets PHP's pending signal handlers run (D9, D22).
//!
//! The traps this closes:
//! - the signal is a realtime one nobody else handles: the highest whose
//!   disposition is the default when a wait starts and none is running.
//!   PHP's own timer signal (SIGRTMIN, ZTS timeouts) and any a user's
//!   `pcntl_signal()` took are left alone; a wait that finds its signal
//!   taken by someone else meanwhile says so ([`Wakeups::start`] is
//!   `None`), and the caller polls;
//! - the handler does nothing and has no SA_RESTART, so the kernel returns
//!   EINTR from flock(2) instead of restarting it;
//! - it is installed only while some thread waits, and the default put back
//!   after the last wait (unless someone else's handler replaced it): an
//!   extension unloaded later (at shutdown, on Apache's graceful restart)
//!   leaves no handler pointing into unmapped code;
//! - the signal is unblocked in the waiting thread for the wait (a
//!   `pcntl_sigprocmask()` may block it) and the mask put back after;
//! - the timer is made for one wait, signals only the waiting thread, and
//!   is deleted before the wait returns (its last tick is delivered on the
//!   way out of that call), so no wake-up ever lands in PHP code, where an
//!   EINTR could fail a read;
//! - the bookkeeping is taken across fork(2) and reset in the child, which
//!   has no waiting thread.

use super::platform::{self, ThreadTimer};
use parking_lot::Mutex;
use std::io;
use std::sync::Once;
use std::time::Duration;

/// Which signal wakes waits, and how many waits use it now.
struct Handler {
    signo: libc::c_int,
    waits: usize,
}

static HANDLER: Mutex<Handler> = Mutex::new(Handler { signo: 0, waits: 0 });

extern "C" fn on_wake(_signo: libc::c_int) {}

fn ours() -> libc::sighandler_t {
    on_wake as extern "C" fn(libc::c_int) as libc::sighandler_t
}

/// The handler `signo` has now; `None` if that cannot be read.
fn disposition(signo: libc::c_int) -> Option<libc::sighandler_t> {
    let mut old = std::mem::MaybeUninit::<libc::sigaction>::zeroed();
    // SAFETY: a query only (no new action), into a valid out-pointer.
    if unsafe { libc::sigaction(signo, std::ptr::null(), old.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: sigaction succeeded and filled `old`.
    Some(unsafe { old.assume_init() }.sa_sigaction)
}

fn set_disposition(signo: libc::c_int, handler: libc::sighandler_t) -> bool {
    // SAFETY: an all-zero sigaction is valid: empty mask, no flags (so no
    // SA_RESTART: a blocked flock(2) returns EINTR).
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = handler;
    // SAFETY: installs a plain handler (or SIG_DFL) for one signal.
    unsafe { libc::sigaction(signo, &action, std::ptr::null_mut()) == 0 }
}

/// The signal of a wait starting now, its handler installed; `None` when
/// every candidate is someone else's.
fn take_handler() -> Option<libc::c_int> {
    register_fork_handler();
    let mut handler = HANDLER.lock();
    if handler.waits == 0 {
        let free =
            |signo| matches!(disposition(signo), Some(h) if h == libc::SIG_DFL || h == ours());
        let signo = if handler.signo != 0 && free(handler.signo) {
            handler.signo
        } else {
            platform::wake_signals().find(|&signo| free(signo))?
        };
        if !set_disposition(signo, ours()) {
            return None;
        }
        handler.signo = signo;
    } else if disposition(handler.signo) != Some(ours()) {
        return None;
    }
    handler.waits += 1;
    Some(handler.signo)
}

fn give_back_handler() {
    let mut handler = HANDLER.lock();
    handler.waits -= 1;
    if handler.waits == 0 && disposition(handler.signo) == Some(ours()) {
        set_disposition(handler.signo, libc::SIG_DFL);
    }
}

fn register_fork_handler() {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        // SAFETY: registers plain function pointers; glibc unregisters them
        // if this shared object is unloaded.
        unsafe {
            libc::pthread_atfork(
                Some(before_fork),
                Some(after_fork_in_parent),
                Some(in_fork_child),
            )
        };
    });
}

/// Takes HANDLER across fork(2) (as `fork.rs` does with its list): the
/// forking thread never holds it when it forks, so this cannot deadlock.
extern "C" fn before_fork() {
    std::mem::forget(HANDLER.lock());
}

extern "C" fn after_fork_in_parent() {
    // SAFETY: before_fork locked it in this thread and forgot the guard.
    unsafe { HANDLER.force_unlock() };
}

extern "C" fn in_fork_child() {
    // SAFETY: before_fork locked HANDLER in the thread that forked, this
    // child's only thread; nothing else touches it until the unlock.
    let handler = unsafe { &mut *HANDLER.data_ptr() };
    // The waits of other threads did not come along; the handler did, and
    // the next wait here takes it as its own.
    handler.waits = 0;
    // SAFETY: pairs the lock taken by before_fork.
    unsafe { HANDLER.force_unlock() };
}

/// While it lives, this thread's blocking system calls are interrupted
/// (EINTR) at least every period given to [`Wakeups::arm`].
#[derive(Debug)]
pub struct Wakeups {
    /// An `Option` only so that `drop` deletes it first.
    timer: Option<ThreadTimer>,
    signo: libc::c_int,
    /// The signal was blocked in this thread before: blocked again after.
    was_blocked: bool,
}

impl Wakeups {
    /// `None` where there is no such timer (other Unixes), no free
    /// realtime signal, or the timer cannot be made: the caller polls.
    pub fn start() -> Option<Wakeups> {
        if !platform::THREAD_TIMERS {
            return None;
        }
        let signo = take_handler()?;
        let Ok(timer) = ThreadTimer::new(signo) else {
            give_back_handler();
            return None;
        };
        // SAFETY: sigset_t is plain data; sigemptyset initialises it.
        let was_blocked = unsafe {
            let mut unblock = std::mem::zeroed::<libc::sigset_t>();
            let mut before = std::mem::zeroed::<libc::sigset_t>();
            libc::sigemptyset(&mut unblock);
            libc::sigaddset(&mut unblock, signo);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &unblock, &mut before) == 0
                && libc::sigismember(&before, signo) == 1
        };
        Some(Wakeups {
            timer: Some(timer),
            signo,
            was_blocked,
        })
    }

    /// The next wake-up after `every`, then every `every` (a tick that
    /// came just before the thread blocked is followed by another).
    ///
    /// # Errors
    ///
    /// What the timer's arming says (it does not fail on a live timer).
    pub fn arm(&self, every: Duration) -> io::Result<()> {
        self.timer.as_ref().map_or(Ok(()), |timer| timer.arm(every))
    }
}

impl Drop for Wakeups {
    fn drop(&mut self) {
        // The timer first, while the signal is still unblocked: its last
        // tick is delivered (to the empty handler) on the way out.
        drop(self.timer.take());
        if self.was_blocked {
            // SAFETY: as in `start`; blocks the one signal again.
            unsafe {
                let mut block = std::mem::zeroed::<libc::sigset_t>();
                libc::sigemptyset(&mut block);
                libc::sigaddset(&mut block, self.signo);
                libc::pthread_sigmask(libc::SIG_BLOCK, &block, std::ptr::null_mut());
            }
        }
        give_back_handler();
    }
}

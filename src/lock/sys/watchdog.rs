//! The thread that cuts statements which overran: while a [`SocketWatch`]
//! is armed, the sockets of the statement's connection are shut down at its
//! deadline, or once an interrupt flag (a PHP signal handler pending) is
//! set, so that the client library's blocked read returns.
//!
//! The traps this closes:
//! - a frozen server or a network black hole cannot block a statement for
//!   ever: the client library then reports the connection lost;
//! - only shutdown(2), never close(2): the descriptors stay open for their
//!   owner, so no number is reused under the client library's feet;
//! - the thread runs with every signal blocked, so the kernel never
//!   delivers a process signal meant for PHP's pcntl handlers to it;
//! - it wakes only when a watch is due earlier than its next look (no
//!   syscall and context switch on every statement), and arming one copies
//!   nothing: the statement's descriptors are borrowed for exactly as long
//!   as the watch is armed (`SocketWatch<'a>`);
//! - a fork child, which has no copy of the thread, starts its own: a
//!   watchdog is used only by the process that started it.

use super::process::current_pid;
use parking_lot::Mutex;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A flag another thread sets when work is waiting for the thread that
/// blocks (PHP: the engine's `EG(vm_interrupt)`, set by pcntl when a signal
/// handler is pending).
#[derive(Clone, Copy)]
pub struct InterruptFlag(*const AtomicBool);

// SAFETY: only read, atomically; `InterruptFlag::new`'s caller promises the
// flag outlives every watch that reads it.
unsafe impl Send for InterruptFlag {}

impl InterruptFlag {
    /// # Safety
    ///
    /// `flag` points at a one-byte boolean that stays valid (and is written
    /// only as a whole byte) for as long as any `SocketWatch` given this
    /// flag is armed.
    pub unsafe fn new(flag: *const AtomicBool) -> Self {
        InterruptFlag(flag)
    }

    fn is_set(self) -> bool {
        // SAFETY: valid while armed (see `new`).
        unsafe { (*self.0).load(Ordering::SeqCst) }
    }
}

struct Watches {
    list: Vec<Armed>,
    /// When the watchdog thread looks next (`None`: when woken): a new
    /// watch due no earlier needs no wake-up (a syscall and a context
    /// switch on every statement otherwise).
    next_check: Option<Instant>,
}

/// The sockets of a watched statement, borrowed from the [`SocketWatch`]'s
/// caller (no copy per statement).
struct Fds(*const RawFd, usize);

// SAFETY: read only under the watchdog's mutex, while the watch is armed,
// and a watch is disarmed (under that mutex) before the borrow it was made
// from ends (`SocketWatch<'a>`).
unsafe impl Send for Fds {}

impl Fds {
    fn get(&self) -> &[RawFd] {
        // SAFETY: see `unsafe impl Send for Fds`.
        unsafe { std::slice::from_raw_parts(self.0, self.1) }
    }
}

/// One statement being watched.
struct Armed {
    id: u64,
    fds: Fds,
    deadline: Instant,
    /// From this instant on, a set flag cuts the statement short too.
    on_interrupt: Option<(Instant, InterruptFlag)>,
    fired: Option<Cut>,
}

/// Why a [`SocketWatch`] shut its sockets down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// The deadline passed.
    Deadline,
    /// The interrupt flag was set.
    Interrupt,
}

/// The thread that shuts down the sockets of statements that overran. One
/// per process: a fork child, which has no copy of the thread, makes its own
/// and never touches the parent's (whose mutex may have been held by another
/// thread at fork time).
struct Watchdog {
    /// The process that started the thread.
    started_by: u32,
    armed: Mutex<Watches>,
    thread: OnceLock<std::thread::Thread>,
}

static WATCHDOG: AtomicPtr<Watchdog> = AtomicPtr::new(std::ptr::null_mut());
static NEXT_WATCH: AtomicU64 = AtomicU64::new(1);

/// How often a watch that may be cut short by the interrupt flag looks at it.
const INTERRUPT_POLL: Duration = Duration::from_millis(20);

fn watchdog() -> Option<&'static Watchdog> {
    let pid = current_pid();
    let current = WATCHDOG.load(Ordering::Acquire);
    // SAFETY: watchdogs are leaked, never freed; `started_by` is never
    // written after the watchdog is published.
    if !current.is_null() && unsafe { (*current).started_by } == pid {
        // SAFETY: as above.
        return Some(unsafe { &*current });
    }
    let dog: &'static Watchdog = Box::leak(Box::new(Watchdog {
        started_by: pid,
        armed: Mutex::new(Watches {
            list: Vec::new(),
            next_check: None,
        }),
        thread: OnceLock::new(),
    }));
    let thread = spawn_without_signals(move || dog.run())?;
    let _ = dog.thread.set(thread);
    match WATCHDOG.compare_exchange(
        current,
        std::ptr::from_ref(dog).cast_mut(),
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        Ok(_) => Some(dog),
        // Another thread (ZTS) made one first: ours parks for ever, unused.
        // SAFETY: as above.
        Err(theirs) => Some(unsafe { &*theirs }),
    }
}
/// Spawns a thread with every signal blocked, so that the kernel never
/// delivers a process signal (meant for PHP's pcntl handlers) to it.
fn spawn_without_signals(body: impl FnOnce() + Send + 'static) -> Option<std::thread::Thread> {
    // SAFETY: sigset_t is plain data, filled by sigfillset; the thread's
    // mask is put back right after the spawn, which inherits the full one.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut previous: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut previous);
        let spawned = std::thread::Builder::new()
            .name("cronlock-watch".to_owned())
            .stack_size(64 * 1024)
            .spawn(body);
        libc::pthread_sigmask(libc::SIG_SETMASK, &previous, std::ptr::null_mut());
        spawned.ok().map(|handle| handle.thread().clone())
    }
}

impl Watchdog {
    fn run(&self) {
        loop {
            match self.check(Instant::now()) {
                None => std::thread::park(),
                Some(wait) => std::thread::park_timeout(wait),
            }
        }
    }

    /// Cuts what overran; returns how long until the next check is due.
    fn check(&self, now: Instant) -> Option<Duration> {
        let mut armed = self.armed.lock();
        let mut next: Option<Duration> = None;
        for watch in armed.list.iter_mut().filter(|w| w.fired.is_none()) {
            let interrupted = watch
                .on_interrupt
                .is_some_and(|(from, flag)| now >= from && flag.is_set());
            let cut = if interrupted {
                Cut::Interrupt
            } else if now >= watch.deadline {
                Cut::Deadline
            } else {
                let mut due = watch.deadline - now;
                if let Some((from, _)) = watch.on_interrupt {
                    due = due.min(from.saturating_duration_since(now).max(INTERRUPT_POLL));
                }
                next = Some(next.map_or(due, |n| n.min(due)));
                continue;
            };
            {
                for &fd in watch.fds.get() {
                    // SAFETY: shutdown(2) on a descriptor number the
                    // statement's connection owns (it is closed only after
                    // the watch is disarmed); the descriptor stays open.
                    unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
                }
                watch.fired = Some(cut);
            }
        }
        armed.next_check = next.map(|wait| now + wait);
        next
    }
}

/// While it lives, a statement on the connection whose sockets are `fds`
/// is watched: at `deadline`, or once `on_interrupt`'s flag is set after its
/// instant, the sockets are shut down (both directions; the descriptors stay
/// open for their owner), so the blocked read returns at once and the client
/// library reports the connection lost. [`SocketWatch::finish`] says whether
/// and why that happened (then the connection is dead, whatever the
/// statement said).
pub struct SocketWatch<'a> {
    armed: Option<(&'static Watchdog, u64)>,
    fds: std::marker::PhantomData<&'a [RawFd]>,
}

/// Watches a statement (see [`SocketWatch`]). Without a watchdog thread (it
/// could not be started) or without descriptors, nothing is cut.
pub fn watch_sockets(
    fds: &[RawFd],
    deadline: Instant,
    on_interrupt: Option<(Instant, InterruptFlag)>,
) -> SocketWatch<'_> {
    let unarmed = SocketWatch {
        armed: None,
        fds: std::marker::PhantomData,
    };
    if fds.is_empty() {
        return unarmed;
    }
    let Some(dog) = watchdog() else {
        return unarmed;
    };
    let id = NEXT_WATCH.fetch_add(1, Ordering::Relaxed);
    let first_due = on_interrupt.map_or(deadline, |(from, _)| from.min(deadline));
    let wake = {
        let mut armed = dog.armed.lock();
        armed.list.push(Armed {
            id,
            fds: Fds(fds.as_ptr(), fds.len()),
            deadline,
            on_interrupt,
            fired: None,
        });
        armed.next_check.is_none_or(|next| next > first_due)
    };
    if wake {
        if let Some(thread) = dog.thread.get() {
            thread.unpark();
        }
    }
    SocketWatch {
        armed: Some((dog, id)),
        fds: std::marker::PhantomData,
    }
}

impl SocketWatch<'_> {
    /// Ends the watch: why the sockets were shut down, if they were.
    pub fn finish(mut self) -> Option<Cut> {
        self.disarm()
    }

    fn disarm(&mut self) -> Option<Cut> {
        let (dog, id) = self.armed.take()?;
        let mut armed = dog.armed.lock();
        let at = armed.list.iter().position(|w| w.id == id)?;
        armed.list.swap_remove(at).fired
    }
}

impl Drop for SocketWatch<'_> {
    fn drop(&mut self) {
        self.disarm();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::os::fd::{AsRawFd, FromRawFd};

    /// A connected pair of Unix sockets: (ours, the "server" that never answers).
    fn socket_pair() -> (File, File) {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors socketpair(2) writes.
        let made =
            unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, fds.as_mut_ptr()) };
        assert_eq!(made, 0);
        // SAFETY: both were just created and are owned by nobody else.
        unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) }
    }

    fn blocked_read(file: &File) -> isize {
        let mut buf = [0u8; 16];
        // SAFETY: `buf` is writable for its length.
        unsafe { libc::read(file.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) }
    }

    #[test]
    fn a_statement_past_its_deadline_has_its_socket_shut_down() {
        let (ours, _server) = socket_pair();
        let started = Instant::now();
        let fds = [ours.as_raw_fd()];
        let watch = watch_sockets(&fds, started + Duration::from_millis(200), None);
        assert_eq!(blocked_read(&ours), 0, "end of file once cut");
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert_eq!(watch.finish(), Some(Cut::Deadline));
    }

    #[test]
    fn a_set_interrupt_flag_cuts_a_watched_statement_after_its_instant() {
        static FLAG: AtomicBool = AtomicBool::new(false);
        let (ours, _server) = socket_pair();
        let started = Instant::now();
        // SAFETY: a static lives for ever.
        let flag = unsafe { InterruptFlag::new(&raw const FLAG) };
        let fds = [ours.as_raw_fd()];
        let watch = watch_sockets(
            &fds,
            started + Duration::from_secs(60),
            Some((started + Duration::from_millis(100), flag)),
        );
        FLAG.store(true, Ordering::SeqCst);
        assert_eq!(blocked_read(&ours), 0);
        assert!(started.elapsed() >= Duration::from_millis(100));
        assert!(started.elapsed() < Duration::from_secs(30));
        assert_eq!(watch.finish(), Some(Cut::Interrupt));
    }

    #[test]
    fn a_statement_answered_in_time_is_left_alone() {
        let (ours, server) = socket_pair();
        let fds = [ours.as_raw_fd()];
        let watch = watch_sockets(&fds, Instant::now() + Duration::from_secs(60), None);
        // SAFETY: writes one byte from a live buffer.
        unsafe { libc::write(server.as_raw_fd(), b"x".as_ptr().cast(), 1) };
        assert_eq!(blocked_read(&ours), 1);
        assert_eq!(watch.finish(), None);
        // SAFETY: as above.
        unsafe { libc::write(server.as_raw_fd(), b"y".as_ptr().cast(), 1) };
        assert_eq!(blocked_read(&ours), 1, "still connected");
    }
}

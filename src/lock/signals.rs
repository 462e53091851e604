//! Terminating signals while this process holds Redis keys: the signal has
//! the renewal thread release the keys, then the process dies of that same
//! signal, as if no handler were installed (the shell sees 128+N,
//! `timeout(1)` 124; no PHP code runs, shutdown functions do not run).
//! Database and File locks need none of this: the server and the kernel
//! free them when the process dies (decision D16).
//!
//! Traps it closes:
//!
//! - The script's own handler keeps priority: ours is installed only where
//!   the disposition is the default one, and never put back over another
//!   (a `pcntl_signal()` or `SIG_IGN` installed after ours stays).
//! - PHP keeps its own table of handlers (zend signals): the embedding
//!   runtime says how to read and set a disposition ([`set_dispositions`]).
//! - A handler may only make async-signal-safe calls: ours uses `getpid`,
//!   `write`, `poll`, `clock_gettime`, `sigaction`, `pthread_sigmask` and
//!   `raise` on numbers it finds in atomics, and never takes a lock or
//!   allocates.
//! - The interrupted thread may hold any lock: the work is done by the
//!   renewal thread, which takes only try-locks with a deadline, while the
//!   handler holds the interrupted thread (so the job does not run on after
//!   its key is gone), at most [`RELEASE_WAIT`].
//! - A `pcntl_fork()` child inherits the handler: its signal kills it at
//!   once (it has no renewal thread, and the keys are its parent's).
//! - Between holds the handler behaves as the default disposition: the
//!   process dies of the signal at once.
//! - Our threads must not take the signal themselves: they start with every
//!   signal blocked ([`with_signals_blocked`]).
//! - A signal arriving while one is being handled waits (the handler runs
//!   with every signal blocked) and dies with the first.

use std::ffi::c_int;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// The signals whose default action ends the process and that are sent to
/// end or interrupt a job: hang-up (a closed terminal, a session that
/// ends), Ctrl-C, Ctrl-\ (which also dumps core), `kill`/`timeout`/systemd
/// stop, an `alarm()` watchdog without a handler, the two user signals,
/// and `ulimit -t`'s CPU limit. Not SIGPIPE (PHP ignores it), SIGPROF
/// (PHP's `max_execution_time`), SIGKILL/SIGSTOP (they cannot be caught),
/// nor the faults (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT): the process
/// is broken then, and must not be asked to run anything more.
pub const TERMINATING: [c_int; 8] = [
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGTERM,
    libc::SIGALRM,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGXCPU,
];

/// The longest the handler holds the interrupted thread waiting for the
/// renewal thread: its renewal in flight (bounded by the lock's timeouts)
/// plus the release ([`RELEASE_BUDGET`]). Then the process dies anyway,
/// and a key not released expires by its TTL.
pub const RELEASE_WAIT: Duration = Duration::from_secs(5);

/// What the renewal thread may spend releasing the keys, from when it sees
/// the signal.
pub const RELEASE_BUDGET: Duration = Duration::from_secs(2);

/// How the embedding runtime reads and sets the disposition of a signal:
/// a handler address, `SIG_DFL` (0) or `SIG_IGN` (1).
#[derive(Clone, Copy)]
pub struct Dispositions {
    pub current: fn(c_int) -> usize,
    /// Sets a handler (`extern "C" fn(c_int, *mut siginfo_t, *mut c_void)`,
    /// `SA_SIGINFO`) or `SIG_DFL`.
    pub set: fn(c_int, usize),
}

static DISPOSITIONS: OnceLock<Dispositions> = OnceLock::new();

/// Lets the embedding runtime keep its own table of handlers right (PHP
/// with zend signals routes every signal through it). Without this call,
/// `sigaction(2)` is used.
pub fn set_dispositions(dispositions: Dispositions) {
    let _ = DISPOSITIONS.set(dispositions);
}

fn dispositions() -> Dispositions {
    *DISPOSITIONS.get().unwrap_or(&Dispositions {
        current: os_current,
        set: os_set,
    })
}

/// The process whose renewal thread answers the handler (0: none).
static OWNER: AtomicI32 = AtomicI32::new(0);
/// How many keys that process holds now (0: the handler just dies).
static HELD: AtomicUsize = AtomicUsize::new(0);
/// The write end of the pipe the renewal thread waits on.
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);
/// The read end of the pipe the renewal thread answers on.
static DONE_FD: AtomicI32 = AtomicI32::new(-1);
/// The signal being handled (0: none).
static PENDING: AtomicI32 = AtomicI32::new(0);
/// Which of [`TERMINATING`] have our handler (bit i: `TERMINATING[i]`).
static INSTALLED: AtomicU32 = AtomicU32::new(0);

/// The renewal thread's ends of the two pipes; the handler's ends are
/// kept here too, so that they live as long as the thread.
pub struct Channel {
    wake_read: OwnedFd,
    wake_write: OwnedFd,
    done_read: OwnedFd,
    done_write: OwnedFd,
}

/// What woke the renewal thread.
#[derive(Debug, PartialEq, Eq)]
pub enum Woken {
    /// A terminating signal: release the keys, then [`Channel::answer`].
    Signal(c_int),
    /// A wake-up from this process, or the timeout.
    Other,
}

impl Channel {
    /// Two pipes, close-on-exec, the handler's write end non-blocking.
    ///
    /// # Errors
    ///
    /// The OS's (out of descriptors).
    pub fn open() -> io::Result<Channel> {
        let (wake_read, wake_write) = pipe()?;
        let (done_read, done_write) = pipe()?;
        Ok(Channel {
            wake_read,
            wake_write,
            done_read,
            done_write,
        })
    }

    /// Where others wake the thread (see [`wake`]).
    pub fn waker(&self) -> RawFd {
        self.wake_write.as_raw_fd()
    }

    /// Makes this channel the one the handler uses, for the holds of
    /// process `owner`, which holds none yet.
    pub fn serve(&self, owner: u32) {
        HELD.store(0, Ordering::Release);
        PENDING.store(0, Ordering::Release);
        WAKE_FD.store(self.wake_write.as_raw_fd(), Ordering::Release);
        DONE_FD.store(self.done_read.as_raw_fd(), Ordering::Release);
        OWNER.store(i32::try_from(owner).unwrap_or(0), Ordering::Release);
    }

    /// The handler stops using this channel (before it is closed): a
    /// signal then kills at once.
    pub fn retire(&self) {
        OWNER.store(0, Ordering::Release);
        WAKE_FD.store(-1, Ordering::Release);
        DONE_FD.store(-1, Ordering::Release);
    }

    /// Sleeps until woken, a signal, or `timeout` (`None`: no timeout).
    pub fn wait(&self, timeout: Option<Duration>) -> Woken {
        if let Some(signo) = pending() {
            return Woken::Signal(signo);
        }
        let millis = timeout.map_or(-1, |t| {
            c_int::try_from(t.as_millis().max(u128::from(!t.is_zero()))).unwrap_or(c_int::MAX)
        });
        poll_readable(self.wake_read.as_raw_fd(), millis);
        let mut buf = [0u8; 64];
        // SAFETY: reads into a local buffer of its length from our own
        // non-blocking pipe; the bytes only woke us.
        while unsafe {
            libc::read(
                self.wake_read.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        } > 0
        {}
        pending().map_or(Woken::Other, Woken::Signal)
    }

    /// Tells the waiting handler that the keys are released.
    pub fn answer(&self) {
        write_byte(self.done_write.as_raw_fd());
    }
}

/// Wakes the thread waiting on the channel whose [`Channel::waker`] is `fd`.
pub fn wake(fd: RawFd) {
    write_byte(fd);
}

/// The signal the handler is waiting on, if any.
pub fn pending() -> Option<c_int> {
    match PENDING.load(Ordering::Acquire) {
        0 => None,
        signo => Some(signo),
    }
}

/// How many keys the serving process holds.
pub fn set_held(count: usize) {
    HELD.store(count, Ordering::Release);
}

/// Installs the handler for each of [`TERMINATING`] whose disposition is
/// the default one. Idempotent: a signal that has ours keeps it, one whose
/// disposition the script set keeps that.
pub fn arm() {
    let dispositions = dispositions();
    let ours = handler_address();
    let mut installed = INSTALLED.load(Ordering::Acquire);
    for (index, &signo) in TERMINATING.iter().enumerate() {
        let bit = 1 << index;
        if installed & bit != 0 {
            continue;
        }
        let current = (dispositions.current)(signo);
        if current == ours {
            installed |= bit;
        } else if current == libc::SIG_DFL {
            (dispositions.set)(signo, ours);
            installed |= bit;
        }
    }
    INSTALLED.store(installed, Ordering::Release);
}

/// Puts back the default disposition where ours is still installed.
pub fn disarm() {
    let dispositions = dispositions();
    let ours = handler_address();
    let installed = INSTALLED.swap(0, Ordering::AcqRel);
    for (index, &signo) in TERMINATING.iter().enumerate() {
        if installed & (1 << index) != 0 && (dispositions.current)(signo) == ours {
            (dispositions.set)(signo, libc::SIG_DFL);
        }
    }
}

/// Whether our handler is installed for `signo` now.
pub fn is_armed(signo: c_int) -> bool {
    (dispositions().current)(signo) == handler_address()
}

/// Runs `spawn` (which starts threads) with every signal blocked in this
/// thread, so the new threads start with them blocked and never take a
/// signal meant for the process; this thread's mask is restored after.
pub fn with_signals_blocked<T>(spawn: impl FnOnce() -> T) -> T {
    // SAFETY: sigfillset/pthread_sigmask on local sets; the old mask is
    // put back below.
    let old = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
        old
    };
    let result = spawn();
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    result
}

fn handler_address() -> usize {
    on_terminating_signal as extern "C" fn(c_int, *mut libc::siginfo_t, *mut libc::c_void) as usize
}

/// The handler. Async-signal-safe only (see the module docs).
extern "C" fn on_terminating_signal(
    signo: c_int,
    _info: *mut libc::siginfo_t,
    _context: *mut libc::c_void,
) {
    let owner = OWNER.load(Ordering::Acquire);
    // SAFETY: getpid(2) is async-signal-safe.
    let ours = owner != 0 && unsafe { libc::getpid() } == owner;
    if ours && HELD.load(Ordering::Acquire) > 0 {
        let _ = PENDING.compare_exchange(0, signo, Ordering::AcqRel, Ordering::Acquire);
        let wake = WAKE_FD.load(Ordering::Acquire);
        let done = DONE_FD.load(Ordering::Acquire);
        if wake >= 0 && done >= 0 {
            write_byte(wake);
            wait_readable_for(done, RELEASE_WAIT);
        }
    }
    die_of(signo)
}

/// Ends the process by `signo` as the default disposition would.
fn die_of(signo: c_int) -> ! {
    // SAFETY: sigaction, pthread_sigmask and raise are async-signal-safe;
    // every structure is local. If the signal does not kill us (it
    // cannot, as its default action ends the process), _exit does, with
    // the status a shell shows for it.
    unsafe {
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        libc::sigemptyset(&mut default.sa_mask);
        libc::sigaction(signo, &default, std::ptr::null_mut());
        let mut only: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut only);
        libc::sigaddset(&mut only, signo);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &only, std::ptr::null_mut());
        libc::raise(signo);
        libc::_exit(128 + signo)
    }
}

/// Waits until `fd` is readable or `limit` has passed, across EINTR.
fn wait_readable_for(fd: RawFd, limit: Duration) {
    let started = monotonic_ms();
    let limit = i64::try_from(limit.as_millis()).unwrap_or(i64::MAX);
    loop {
        let left = limit - (monotonic_ms() - started);
        if left <= 0 || poll_readable(fd, c_int::try_from(left).unwrap_or(c_int::MAX)) {
            return;
        }
    }
}

/// `poll(2)` for one descriptor: true when readable (or hung up).
fn poll_readable(fd: RawFd, millis: c_int) -> bool {
    let mut entry = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd; poll(2) is async-signal-safe.
    unsafe { libc::poll(&mut entry, 1, millis) > 0 }
}

// time_t and c_long are i64 here, i32 on 32-bit targets.
#[allow(clippy::useless_conversion)]
fn monotonic_ms() -> i64 {
    // SAFETY: clock_gettime(2) into a local timespec; async-signal-safe.
    let now = unsafe {
        let mut now: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now);
        now
    };
    i64::from(now.tv_sec) * 1000 + i64::from(now.tv_nsec) / 1_000_000
}

/// One byte into a non-blocking pipe (a full pipe already wakes).
fn write_byte(fd: RawFd) {
    // SAFETY: write(2) of one byte from a local; async-signal-safe.
    let _ = unsafe { libc::write(fd, [1u8].as_ptr().cast(), 1) };
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as c_int; 2];
    // SAFETY: pipe2 fills the two-element array on success.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are ours alone.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn os_current(signo: c_int) -> usize {
    // SAFETY: reads the disposition into a local struct.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(signo, std::ptr::null(), &mut old) != 0 {
            return libc::SIG_IGN;
        }
        old.sa_sigaction
    }
}

fn os_set(signo: c_int, handler: usize) {
    // SAFETY: installs a handler that is async-signal-safe (or SIG_DFL),
    // with every signal blocked while it runs.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler;
        action.sa_flags = if handler == libc::SIG_DFL {
            0
        } else {
            libc::SA_SIGINFO
        };
        libc::sigfillset(&mut action.sa_mask);
        libc::sigaction(signo, &action, std::ptr::null_mut());
    }
}

//! One renewal thread per process, for every Redis hold of the process:
//! it renews the holds that renew (a lease, `auto_renew`) every ttl/3 on
//! connections of its own, at most one per server, and releases every
//! hold when a terminating signal arrives (`lock::signals`).
//!
//! Traps it closes:
//!
//! - A stopped holder is not renewed for: the thread stops with its
//!   process (SIGSTOP, Ctrl-Z), as every thread does.
//! - A forked child keeps nothing alive: it has no renewal thread, its
//!   copies of the parent's holds are forgotten (never unregistered,
//!   never closed), and its own first hold starts a service of its own.
//! - A renewal that came back "not ours" loses the hold; one that came back
//!   yes after the hold ran out does not revive it, and gives the key back.
//! - Redlock: no master is awaited past half of what is left of the hold.
//! - Sentinel and Cluster: each hold's copy of the topology follows the
//!   master and the redirections, as the lock does.
//! - One stalled server must not starve the others' holds: after a
//!   renewal found it unreachable, other holds due on it wait for the
//!   retry instead of each waiting out its timeout.
//! - A renewal never waits for the PHP thread: a hold the lock is renewing
//!   itself right now (its gate is taken) is retried shortly after.
//! - A release waits for the renewal of its hold in flight, so that no
//!   renewal of it is sent after `release()` returns.
//! - The thread takes no signal (it starts with all blocked), and on a
//!   signal needs no lock the interrupted thread may hold (try-locks with
//!   a deadline).
//! - The thread ends before the module is unloaded ([`shutdown`]).

use super::ownership::{Loss, Ownership};
use super::pool::Pool as ConnectionPool;
use super::scripts::{renew_invocation, scripts};
use super::target::Target;
use super::topology::{Topology, Verdict};
use crate::lock::owner::{current_pid, Owner};
use crate::lock::registry::ObjectId;
use crate::lock::signals::{self, Channel, Woken};
use parking_lot::Mutex;
use std::cell::Cell;
use std::collections::HashMap;
use std::mem;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// Longest pause between renewals of a hold after a failed one.
const RENEW_RETRY_MAX: Duration = Duration::from_secs(1);

/// When the lock is renewing a hold itself, the thread tries again this
/// much later (the lock's renewal extends it anyway).
const BUSY_RETRY: Duration = Duration::from_millis(20);

/// The longest a release on a signal waits for one connect or reply.
const SIGNAL_RELEASE_TIMEOUT: Duration = Duration::from_millis(500);

/// [`Service::next_wake_ns`] while the thread is awake.
const AWAKE: u64 = 0;

/// A hold, as the renewal thread knows it.
struct Entry {
    /// The hold, as a user of the thread's kept connections.
    id: ObjectId,
    state: Arc<Ownership>,
    /// A lease or `auto_renew`: renew it; otherwise only release it on a
    /// signal.
    renews: bool,
    /// Locked by the renewal thread only (it is never contended; a mutex
    /// so that the entry can be shared).
    work: Mutex<Work>,
}

struct Work {
    /// A copy of the lock's topology; its connections are lent by the pool.
    topology: Topology,
    target: Arc<Target>,
    token: String,
    /// How long a renewal counts as valid from when it was sent.
    valid_for: Duration,
    /// When the next renewal is due.
    next: Instant,
    /// Renewed no more (lost, or given back).
    done: bool,
}

/// What the lock hands over when it takes a key.
pub(super) struct Handover {
    pub(super) topology: Topology,
    pub(super) target: Arc<Target>,
    pub(super) token: String,
    pub(super) valid_for: Duration,
    pub(super) renews: bool,
}

/// A hold known to the renewal thread; dropping it forgets the hold.
pub(super) struct Registration {
    entry: Arc<Entry>,
    service: Arc<Service>,
}

impl Registration {
    /// Forgets the hold, and waits for its renewal in flight, if any.
    pub(super) fn finish(self) {
        let state = Arc::clone(&self.entry.state);
        let renews = self.entry.renews;
        drop(self);
        if renews {
            // The thread renews under the gate and checks `stopped` there.
            drop(state.renew_gate.lock());
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.entry.state.signal_stop();
        self.service.remove(&self.entry);
    }
}

/// Starts renewing (or, for a hold that does not renew, watching) `hold`,
/// whose state is `state`; the first renewal is due ttl/3 after it was
/// acquired.
///
/// # Errors
///
/// The OS's, when the thread or its pipes cannot be made.
pub(super) fn register(hold: Handover, state: &Arc<Ownership>) -> std::io::Result<Registration> {
    let service = service()?;
    let period = period(hold.valid_for);
    let entry = Arc::new(Entry {
        id: ObjectId::next(),
        state: Arc::clone(state),
        renews: hold.renews,
        work: Mutex::new(Work {
            topology: hold.topology,
            target: hold.target,
            token: hold.token,
            valid_for: hold.valid_for,
            next: state.acquired_at + period,
            done: false,
        }),
    });
    service.add(&entry);
    Ok(Registration { entry, service })
}

/// Stops the renewal thread of this process and waits for it (before the
/// module is unloaded), and puts the signals' default dispositions back.
pub fn shutdown() {
    let service = SERVICE.lock().take();
    if let Some(service) = service {
        if service.owner.is_this_process() {
            service.stop.store(true, Ordering::Release);
            signals::wake(service.waker);
            if let Some(thread) = service.thread.lock().take() {
                let _ = thread.join();
            }
        } else {
            // A fork child's copy of its parent's: not ours to close.
            mem::forget(service);
        }
    }
    signals::disarm();
}

/// Puts the signals' default dispositions back if this process holds
/// nothing (the end of a request: PHP resets its table of handlers for the
/// next one).
pub fn holds_nothing_now() {
    let holds = SERVICE
        .lock()
        .as_ref()
        .filter(|service| service.owner.is_this_process())
        .map_or(0, |service| service.holds.lock().len());
    if holds == 0 {
        signals::disarm();
    }
}

/// The renewal service of this process.
struct Service {
    owner: Owner,
    holds: Mutex<Vec<Arc<Entry>>>,
    /// Where the thread is woken.
    waker: RawFd,
    /// When the thread wakes up next by itself, as nanoseconds after
    /// `epoch` (`u64::MAX`: not before it is woken; [`AWAKE`]: it is
    /// awake), so that a hold due later does not wake it.
    next_wake_ns: AtomicU64,
    epoch: Instant,
    stop: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
}

static SERVICE: Mutex<Option<Arc<Service>>> = Mutex::new(None);

fn service() -> std::io::Result<Arc<Service>> {
    let mut current = SERVICE.lock();
    if let Some(service) = current
        .as_ref()
        .filter(|service| service.owner.is_this_process())
    {
        return Ok(Arc::clone(service));
    }
    if let Some(parents) = current.take() {
        // A fork child: the parent's thread does not exist here, and its
        // pipes and connections are the parent's. Forget them untouched.
        mem::forget(parents);
    }
    let channel = Channel::open()?;
    let service = Arc::new(Service {
        owner: Owner::this_process(),
        holds: Mutex::new(Vec::new()),
        waker: channel.waker(),
        next_wake_ns: AtomicU64::new(AWAKE),
        epoch: Instant::now(),
        stop: AtomicBool::new(false),
        thread: Mutex::new(None),
    });
    // Before the thread runs: a signal from now on is answered.
    channel.serve(current_pid());
    let running = Arc::clone(&service);
    let thread = signals::with_signals_blocked(|| {
        thread::Builder::new()
            .name("cronlock-renew".to_owned())
            .spawn(move || run(&running, &channel))
    })?;
    *service.thread.lock() = Some(thread);
    *current = Some(Arc::clone(&service));
    Ok(service)
}

impl Service {
    fn add(&self, entry: &Arc<Entry>) {
        let mut holds = self.holds.lock();
        holds.push(Arc::clone(entry));
        signals::set_held(holds.len());
        drop(holds);
        signals::arm();
        if entry.renews {
            let due = self.since_epoch(entry.work.lock().next);
            let next_wake = self.next_wake_ns.load(Ordering::Acquire);
            // Due before the thread's next wake-up, or the thread is awake
            // and may have looked at the holds before this one came.
            if next_wake == AWAKE || due < next_wake {
                signals::wake(self.waker);
            }
        }
    }

    /// `at` as nanoseconds after `epoch`, never [`AWAKE`] nor `u64::MAX`.
    fn since_epoch(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_nanos())
            .unwrap_or(u64::MAX - 1)
            .clamp(1, u64::MAX - 1)
    }

    fn remove(&self, entry: &Arc<Entry>) {
        if !self.owner.is_this_process() {
            return;
        }
        let mut holds = self.holds.lock();
        holds.retain(|held| !Arc::ptr_eq(held, entry));
        signals::set_held(holds.len());
    }
}

/// The thread: renews what is due, sleeps until the next is due or it is
/// woken, releases everything on a signal.
fn run(service: &Service, channel: &Channel) {
    let mut pool = Pool::default();
    loop {
        if service.stop.load(Ordering::Acquire) {
            channel.retire();
            return;
        }
        if signals::pending().is_some() {
            release_all(service, &mut pool);
            channel.answer();
            // The handler ends the process now.
            loop {
                thread::park();
            }
        }
        let now = Instant::now();
        let holds: Vec<Arc<Entry>> = service.holds.lock().clone();
        // Connections that only holds gone since used are closed.
        pool.connections
            .keep_only_users(|user| holds.iter().any(|entry| entry.id == user));
        let mut next: Option<Instant> = None;
        let mut renewed = false;
        for entry in holds.iter().filter(|entry| entry.renews) {
            if signals::pending().is_some() || service.stop.load(Ordering::Acquire) {
                break;
            }
            let mut work = entry.work.lock();
            if work.done || entry.state.is_stopped() {
                continue;
            }
            if work.next <= now {
                renew(entry, &mut work, &mut pool);
                renewed = true;
            }
            if !work.done {
                next = Some(next.map_or(work.next, |n| n.min(work.next)));
            }
        }
        if renewed {
            continue;
        }
        let wake_at = next.map_or(u64::MAX, |next| service.since_epoch(next));
        service.next_wake_ns.store(wake_at, Ordering::Release);
        let timeout = next.map(|next| next.saturating_duration_since(Instant::now()));
        let woken = channel.wait(timeout);
        service.next_wake_ns.store(AWAKE, Ordering::Release);
        if woken == Woken::Other {
            pool.forget_down_servers_older_than(RENEW_RETRY_MAX);
        }
    }
}

fn period(valid_for: Duration) -> Duration {
    (valid_for / 3).max(Duration::from_millis(1))
}

/// One renewal of `entry`.
fn renew(entry: &Entry, work: &mut Work, pool: &mut Pool) {
    let state = &entry.state;
    let period = period(work.valid_for);
    let Some(gate) = state.renew_gate.try_lock() else {
        work.next = Instant::now() + BUSY_RETRY;
        return;
    };
    if state.is_stopped() {
        return;
    }
    let options = work.target.options;
    let server = work.topology.next_server().map(str::to_owned);
    if let Some(until) = server.as_ref().and_then(|server| pool.down_until(server)) {
        // It did not answer another hold's renewal just now.
        state.note_reached(false);
        if !state.is_valid() {
            state.lose(Loss::Unreachable);
            work.done = true;
        } else {
            work.next = until;
        }
        return;
    }
    let sent = Instant::now();
    // Read at each renewal: a once-per guard that confirms the hold may
    // have kept it to a window's end since.
    let invocation = renew_invocation(
        &work.target.key,
        &work.token,
        work.target.ttl,
        state.window_end_ms(),
    );
    // Redlock: half of what is left of the validity, so that a stalled
    // minority cannot keep the majority's answer from arriving before the
    // hold runs out.
    let deadline = sent + state.remaining() / 2;
    pool.lend(&mut work.topology, &options);
    let refusal = Cell::new(0);
    let verdict = work.topology.verdict(
        &options,
        Some(deadline),
        &|conn| invocation.invoke::<i64>(conn),
        |reply, _| {
            if reply != 1 {
                refusal.set(reply); // why it is not ours, for the lost line
            }
            reply == 1
        },
    );
    match verdict {
        Verdict::Yes if !state.extend(sent, work.valid_for) => {
            // Too late: the hold ran out while the renewal was on its way.
            // Give the key back rather than leave it for a whole TTL to
            // nobody (best effort).
            let release = work.target.release_invocation(&work.token);
            let _ = work.topology.verdict(
                &options,
                None,
                &|conn| release.invoke::<i64>(conn),
                |_, _| true,
            );
            work.done = true;
        }
        Verdict::Yes => {
            state.note_reached(true);
            work.next = sent + period;
        }
        Verdict::No => {
            state.lose(Loss::from_reply(refusal.get()));
            work.done = true;
        }
        Verdict::Unknown(failures) => {
            state.note_reached(false);
            if let Some(server) =
                server.filter(|_| failures.iter().any(|(_, f)| f.is_unreachable()))
            {
                pool.mark_down(server, Instant::now() + RENEW_RETRY_MAX);
            }
            if state.is_valid() {
                work.next = Instant::now() + period.min(RENEW_RETRY_MAX);
            } else {
                // The key has expired unrenewed: someone else may hold it.
                state.lose(Loss::Unreachable);
                work.done = true;
            }
        }
    }
    pool.take_back(&mut work.topology, entry.id);
    drop(gate);
}

/// On a terminating signal: every hold of this process given back
/// (token-checked; a once-per hold left to expire at its window's end),
/// each connect and reply awaited at most [`SIGNAL_RELEASE_TIMEOUT`], all
/// within [`signals::RELEASE_BUDGET`]. Takes only try-locks: the
/// interrupted thread may hold any lock.
fn release_all(service: &Service, pool: &mut Pool) {
    let deadline = Instant::now() + signals::RELEASE_BUDGET;
    let Some(holds) = service.holds.try_lock_until(deadline) else {
        return;
    };
    let holds = holds.clone();
    for entry in holds {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        if entry.state.is_lost() {
            continue;
        }
        let Some(mut work) = entry.work.try_lock_until(deadline) else {
            continue;
        };
        let work = &mut *work;
        let options = work.target.options.within(left.min(SIGNAL_RELEASE_TIMEOUT));
        let window_end = entry.state.window_end_ms();
        let mut invocation = if window_end != 0 {
            scripts().end_window.prepare_invoke()
        } else {
            scripts().release.prepare_invoke()
        };
        invocation.key(&work.target.key).arg(&work.token);
        if window_end != 0 {
            invocation.arg(window_end);
        }
        invocation.arg(&work.target.channel);
        pool.lend(&mut work.topology, &options);
        let _ = work.topology.verdict(
            &options,
            Some(deadline),
            &|conn| invocation.invoke::<i64>(conn),
            |_, _| true,
        );
        pool.take_back(&mut work.topology, entry.id);
    }
}

/// The renewal thread's connections (at most one per server and
/// credentials, lent to a hold's topology for each renewal), and the
/// servers that just did not answer.
#[derive(Default)]
struct Pool {
    connections: ConnectionPool,
    /// Servers that just did not answer, until when their holds wait.
    down: HashMap<String, Instant>,
}

impl Pool {
    fn lend(&mut self, topology: &mut Topology, options: &super::options::RedisOptions) {
        self.connections.lend(topology, options);
    }

    fn take_back(&mut self, topology: &mut Topology, user: ObjectId) {
        self.connections.take_back(topology, user);
    }

    fn mark_down(&mut self, server: String, until: Instant) {
        self.down.insert(server, until);
    }

    fn down_until(&self, server: &str) -> Option<Instant> {
        self.down
            .get(server)
            .copied()
            .filter(|&until| until > Instant::now())
    }

    fn forget_down_servers_older_than(&mut self, age: Duration) {
        let now = Instant::now();
        self.down.retain(|_, until| *until + age > now);
    }
}

//! [`RedisLock`]: acquire (with its wait), renew, release.

use super::errors::{plain_io, FailedOp};
use super::listener::Listener;
use super::options::{check_lifetime, check_timeout, check_ttl, ttl_ms, RedisOptions};
use super::ownership::{Loss, Ownership};
use super::pool::Shared;
use super::registry::{self, LockName};
use super::renewer::{self, Handover, Registration};
use super::scripts::{renew_invocation, scripts};
use super::target::Target;
use super::token::{random_token, HolderValue};
use super::topology::{Attempt, Mode, SentinelAuth, Topology};
use crate::error::{Error, Result};
use crate::lock::owner::{current_pid, hostname, Owner};
use crate::lock::registry::ObjectId;
use crate::lock::{sys, Wait};
use std::cell::Cell;
use std::mem;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// The longest window id [`RedisLock::claim`] takes (keys stay short).
const MAX_WINDOW_BYTES: usize = 200;

/// Waiters retry at least this often, for holders that `DEL` the key
/// without publishing (other clients, or an ACL user without channel rights).
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// A lock on one Redis key. See the [module docs](super) for the protocol.
pub struct RedisLock {
    /// Where the key lives and how its commands reach it.
    topology: Topology,
    /// The key, its settings, and how messages name it.
    /// Shared with the renewal thread's handover, which every acquire makes.
    pub(super) target: Arc<Target>,
    /// This object in the thread's registry of holds.
    object: ObjectId,
    /// Its entry in that registry.
    name: LockName,
    /// The process whose connections and renewal thread `topology` and
    /// `hold` use.
    owner: Owner,
    hold: Option<Acquisition>,
    /// The value of `<key>` seen by the last acquire that found it busy.
    last_holder: Option<HolderValue>,
    /// When that key expired at the latest, as the same acquire found it
    /// (`None`: it has no TTL).
    last_expires_in: Option<Duration>,
    /// The last acquire found the key held by another object of this thread.
    busy_here: bool,
    /// When and why the last hold was lost (see [`RedisLock::loss`]).
    last_loss: Option<(SystemTime, Loss)>,
    /// Set by [`RedisLock::set_once_per`]: the window of a once-per-window
    /// acquire.
    once_per: Option<Duration>,
    /// The token of an acquire that got no answer (a stalled or vanished
    /// server): the script may still have run, or run later, and then the
    /// key holds this token for the whole TTL. The next acquire reuses it
    /// (the script takes "key == our token" as ours) and release or drop
    /// deletes the key if it holds it. For Redlock: any master may.
    unsettled: Option<String>,
}

/// What we know about a key we acquired.
struct Acquisition {
    token: String,
    fence: i64,
    state: Arc<Ownership>,
    /// Known to the renewal thread, which renews it (a lease,
    /// `auto_renew`) and releases it on a terminating signal; `None` when
    /// the thread could not be started for a hold that does not renew.
    registration: Option<Registration>,
}

impl Acquisition {
    /// Stops renewing it, and waits for its renewal in flight, if any.
    fn finish(self) {
        self.state.signal_stop();
        if let Some(registration) = self.registration {
            registration.finish();
        }
    }
}

/// Shortest and longest pause of a waiter whose server fails.
const RECONNECT_BACKOFF_MIN: Duration = Duration::from_millis(20);
const RECONNECT_BACKOFF_MAX: Duration = Duration::from_millis(100);

/// Longest wait for a connection or a reply when deleting the key of an
/// unanswered acquire (see [`RedisLock::release`]).
const UNSETTLED_CLEANUP_TIMEOUT: Duration = Duration::from_secs(1);

/// Longest single sleep of a waiter, so that PHP's pending signal handlers
/// run within about this long.
const INTERRUPT_CHECK_INTERVAL: Duration = Duration::from_millis(100);

impl RedisLock {
    /// Validates and parses; connects lazily on first use, so this never
    /// blocks.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidValue`] naming `$key` (empty or containing NUL), `$ttl`
    /// (zero or above [`MAX_TTL`](super::MAX_TTL)), `$dsn` (not a DSN the redis crate accepts;
    /// the message never contains the password) or
    /// `$options['connect_timeout']` / `$options['read_timeout']` (zero).
    pub fn new(dsn: &str, key: &str, ttl: Duration, options: RedisOptions) -> Result<Self> {
        Self::build(&[dsn], key, ttl, options)
    }

    /// A Redlock: the key on each of `dsns`, independent masters, held while
    /// a majority granted it (see the module docs).
    ///
    /// # Errors
    ///
    /// As for [`RedisLock::new`], and [`Error::InvalidValue`] naming `$dsn`
    /// for a list of fewer than two DSNs (a list of one would be a Redlock
    /// with no master to spare, most likely a mistake: one master is a
    /// string DSN) or one that names a server twice, as far as the DSNs show
    /// it (the same address however spelt, with any database). Two DSNs
    /// that turn out to reach one server are the first acquire's
    /// [`Error::Lock`].
    pub fn on_masters(
        dsns: &[&str],
        key: &str,
        ttl: Duration,
        options: RedisOptions,
    ) -> Result<Self> {
        match dsns.len() {
            0 => Err(Error::value(
                "$dsn",
                "must be a DSN or a non-empty list of DSNs",
            )),
            1 => Err(Error::value(
                "$dsn",
                "must list at least 2 Redlock masters (one master is a DSN string, not a list)",
            )),
            _ => Self::build(dsns, key, ttl, options),
        }
    }

    fn build(dsns: &[&str], key: &str, ttl: Duration, options: RedisOptions) -> Result<Self> {
        if key.is_empty() {
            return Err(Error::value("$key", "must not be empty"));
        }
        if key.contains('\0') {
            return Err(Error::value("$key", "must not contain NUL bytes"));
        }
        let ttl = check_ttl(ttl)?;
        check_timeout("$options['connect_timeout']", options.connect_timeout)?;
        check_timeout("$options['read_timeout']", options.read_timeout)?;
        let (topology, secrets) = Topology::parse(dsns, &options)?;
        let (address, db) = topology.identity();
        let name = LockName {
            address,
            db,
            key: key.to_owned(),
        };
        let (fence_key, channel) = topology.companions(key)?;
        Ok(RedisLock {
            topology,
            target: Arc::new(Target {
                key: key.to_owned(),
                fence_key,
                channel,
                ttl,
                options,
                secrets,
            }),
            name,
            object: ObjectId::next(),
            owner: Owner::this_process(),
            hold: None,
            last_holder: None,
            last_expires_in: None,
            busy_here: false,
            last_loss: None,
            once_per: None,
            unsettled: None,
        })
    }

    /// Takes the lock, waiting as `wait` says. `Ok(false)`: someone else
    /// holds it (or a PHP signal handler is pending and cut the wait short).
    ///
    /// On a lock this object holds, one token-checked round trip extends the
    /// key's TTL to the lock's TTL: `Ok(true)` while the key is still ours,
    /// `Ok(false)` (and the hold is dropped, never retaken in that call)
    /// when it is not.
    ///
    /// Another object of this thread holding the same key (the same
    /// registry name, see `registry::LockName`, or a key whose value the
    /// first attempt finds to be that object's token): `Ok(false)` at once
    /// for [`Wait::Once`], else [`Error::Lock`], because the wait could only
    /// end by a release this thread would have to make.
    ///
    /// While waiting it listens on `<key>:released` (a second connection,
    /// subscribed before the first retry so no release is missed) and retries at
    /// the latest when the holder's key expires, and every 50 ms for holders
    /// that delete without publishing. A server that cannot be reached or
    /// stops answering while we wait is retried (20 to 100 ms apart) until
    /// the deadline; only then is its last failure the error. Its token is
    /// kept when the last try got no answer, for the next acquire, release
    /// or drop.
    ///
    /// # Errors
    ///
    /// [`Error::Connection`] when Redis cannot be reached, refuses us or times
    /// out; [`Error::Lock`] when Redis rejects the script (e.g. `<key>` holds
    /// a non-string value), the auto-renew thread cannot be started, or
    /// waiting would deadlock as above.
    pub fn acquire(&mut self, wait: Wait) -> Result<bool> {
        let object = self.object;
        let options = self.target.options;
        Shared::lend(
            self,
            |lock| &mut lock.topology,
            object,
            &options,
            |lock| lock.acquire_here(wait),
        )
    }

    fn acquire_here(&mut self, wait: Wait) -> Result<bool> {
        self.adopt_process();
        self.busy_here = false;
        if self.is_held() {
            return self.confirm_hold();
        }
        self.forget_hold();
        if let Some(token) = registry::held_by_another(&self.name, self.object) {
            self.last_holder = Some(HolderValue(token));
            if wait == Wait::Once {
                self.busy_here = true;
                return Ok(false);
            }
            return Err(self.would_deadlock());
        }
        let token = match &self.unsettled {
            Some(token) => token.clone(),
            None => format!("{}:{}@{}", random_token()?, current_pid(), hostname()),
        };
        if wait == Wait::Once {
            return match self.attempt(&token, Mode::Take)? {
                Attempt::Ours(fence, sent, window_end, window_left) => {
                    self.start_hold(token, fence, sent, window_end, window_left)
                }
                Attempt::Busy(expires_in) => {
                    self.last_expires_in = expires_in;
                    self.busy_here = self.busy_through_this_thread();
                    Ok(false)
                }
            };
        }
        self.wait_for(token, wait)
    }

    /// The key's value, as the last attempt found it, is the token of
    /// another object of this thread: the same lock through another DSN
    /// (other seeds or sentinels, masters in another order, a host name).
    fn busy_through_this_thread(&self) -> bool {
        self.last_holder
            .as_deref()
            .is_some_and(|holder| registry::holds_token(&self.target.key, holder, self.object))
    }

    fn would_deadlock(&self) -> Error {
        Error::Lock(format!(
            "{} is already held by this process (pid {}) through another \
             CronLock\\Redis object; waiting for it would deadlock",
            self.describe(),
            current_pid()
        ))
    }

    fn wait_for(&mut self, token: String, wait: Wait) -> Result<bool> {
        let mut listener = Listener::default();
        let mut backoff = RECONNECT_BACKOFF_MIN;
        loop {
            let started = Instant::now();
            let nap = match self.attempt(&token, Mode::Wait) {
                Ok(Attempt::Ours(fence, sent, window_end, window_left)) => {
                    return self.start_hold(token, fence, sent, window_end, window_left)
                }
                Ok(Attempt::Busy(expires_in)) => {
                    self.last_expires_in = expires_in;
                    if self.busy_through_this_thread() {
                        self.busy_here = true;
                        return Err(self.would_deadlock());
                    }
                    backoff = RECONNECT_BACKOFF_MIN;
                    // Subscribe, then retry at once, so a release between
                    // the attempt and the subscription still wakes us.
                    let server = self.topology.listener_server();
                    if listener.subscribe(server, &self.target.options, &self.target.channel) {
                        continue;
                    }
                    if wait.remaining() == Some(Duration::ZERO) {
                        return Ok(false);
                    }
                    let nap = expires_in.map_or(POLL_INTERVAL, |e| e.min(POLL_INTERVAL));
                    self.topology.retry_pause(nap)
                }
                Err(FailedOp {
                    error,
                    transient: true,
                    ..
                }) => {
                    // A restart, failover or pause: ride it out until the
                    // deadline. The subscription died with the server.
                    if wait.remaining() == Some(Duration::ZERO) {
                        return Err(error);
                    }
                    listener.broke();
                    let nap = backoff.saturating_sub(started.elapsed());
                    backoff = (backoff * 2).min(RECONNECT_BACKOFF_MAX);
                    nap
                }
                Err(failed) => return Err(failed.error),
            };
            if crate::lock::interrupted() {
                return Ok(false);
            }
            let mut nap = nap;
            if let Some(remaining) = wait.remaining() {
                nap = nap.min(remaining);
            }
            // A zero read timeout is refused by the socket API.
            listener.wait(nap.clamp(Duration::from_millis(1), INTERRUPT_CHECK_INTERVAL));
            if crate::lock::interrupted() {
                return Ok(false);
            }
        }
    }

    /// One run of the acquire script (see [`Topology::attempt`]).
    fn attempt(&mut self, token: &str, mode: Mode) -> std::result::Result<Attempt, FailedOp> {
        let invocation = self.acquire_invocation(token, mode);
        self.topology.attempt(
            &self.target,
            token,
            mode,
            &invocation,
            &mut self.last_holder,
            &mut self.unsettled,
        )
    }

    fn acquire_invocation(&self, token: &str, mode: Mode) -> redis::ScriptInvocation<'static> {
        let script = match self.once_per {
            Some(_) => &scripts().acquire_in_window,
            None => &scripts().acquire,
        };
        let mut invocation = script.prepare_invoke();
        invocation
            .key(&self.target.key)
            .key(&self.target.fence_key)
            .arg(token)
            .arg(ttl_ms(self.target.ttl));
        if let Some(window) = self.once_per {
            invocation.arg(ttl_ms(window));
        }
        invocation.arg(if mode == Mode::Confirm { "1" } else { "0" });
        invocation
    }

    /// D1: acquire() on a held lock asks the server and extends the TTL.
    /// In once-per mode (a once-per guard on a hold it did not take: the
    /// caller's acquire(), an outer guard, a guard in another Fiber) it
    /// also keeps the key to the end of the current window, and the hold
    /// then ends as one taken in that window does, whoever releases it.
    fn confirm_hold(&mut self) -> Result<bool> {
        let Some(hold) = &self.hold else {
            return Ok(false);
        };
        if self.once_per.is_none() && hold.state.window_end_ms() != 0 {
            // The acquire script's PEXPIRE would cut the key's life from
            // its once-per window's end down to the TTL; the renew script
            // is the same token check and never shortens it.
            return self.renew(None);
        }
        let token = hold.token.clone();
        let state = Arc::clone(&hold.state);
        let gate = state.renew_gate.lock();
        let sent = Instant::now();
        match self.attempt(&token, Mode::Confirm)? {
            Attempt::Ours(_, _, window_end, window_left)
                if state.extend(sent, self.topology.valid_for(self.target.ttl)) =>
            {
                if window_end != 0 {
                    let left = self.topology.valid_for(window_left);
                    state.keep_to_window_end(window_end, sent, left);
                }
                Ok(true)
            }
            // Ours, but it ran out while we asked (no reviving it; extend
            // noted that).
            Attempt::Ours(..) | Attempt::Busy(_) => {
                let gone = self.last_holder.as_deref().is_none_or(str::is_empty);
                state.lose(if gone {
                    Loss::KeyGone
                } else {
                    Loss::AnotherToken
                });
                drop(gate);
                self.forget_hold();
                Ok(false)
            }
        }
    }

    /// Records a fresh hold (the key holds `token` since after `sent`).
    fn start_hold(
        &mut self,
        token: String,
        fence: i64,
        sent: Instant,
        window_end_ms: i64,
        window_left: Duration,
    ) -> Result<bool> {
        let state = Ownership::new(sent, self.topology.valid_for(self.target.ttl));
        if window_end_ms != 0 {
            // once_per: the key lives until its window ends whatever the
            // TTL, so the hold does too (renew() and isHeld() say so).
            let left = self.topology.valid_for(window_left);
            state.keep_to_window_end(window_end_ms, sent, left);
        }
        let state = Arc::new(state);
        let renews = self.target.options.auto_renew;
        let hold = Handover {
            topology: self.topology.fresh(),
            target: Arc::clone(&self.target),
            token: token.clone(),
            valid_for: self.topology.valid_for(self.target.ttl),
            renews,
        };
        let registration = match renewer::register(hold, &state) {
            Ok(registration) => Some(registration),
            // Only a terminating signal would have needed the thread.
            Err(_) if !renews => None,
            Err(err) => {
                // Best effort: otherwise the key stays until its TTL.
                let _ = self.delete_if_ours(&token);
                return Err(Error::Lock(format!(
                    "cannot start the auto-renew thread: {}",
                    plain_io(&err)
                )));
            }
        };
        self.unsettled = None;
        self.last_loss = None;
        registry::register(&self.name, self.object, &token, &state);
        self.hold = Some(Acquisition {
            token,
            fence,
            state,
            registration,
        });
        Ok(true)
    }

    /// Extends the key's TTL to `ttl` (default: the lock's TTL) if it is
    /// still ours. `Ok(false)`: it is not (never acquired, released, expired
    /// and taken over, or in a forked child); the lock is then not held.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidValue`] for a zero or too long `$ttl`;
    /// [`Error::Connection`] / [`Error::Lock`] as for [`RedisLock::acquire`],
    /// after which the lock is still held until its TTL runs out.
    pub fn renew(&mut self, ttl: Option<Duration>) -> Result<bool> {
        let object = self.object;
        let options = self.target.options;
        Shared::lend(
            self,
            |lock| &mut lock.topology,
            object,
            &options,
            |lock| lock.renew_here(ttl),
        )
    }

    fn renew_here(&mut self, ttl: Option<Duration>) -> Result<bool> {
        self.adopt_process();
        let ttl = check_ttl(ttl.unwrap_or(self.target.ttl))?;
        let Some(hold) = &self.hold else {
            return Ok(false);
        };
        let state = Arc::clone(&hold.state);
        let token = hold.token.clone();
        let invocation =
            renew_invocation(&self.target.key, &hold.token, ttl, state.window_end_ms());
        let gate = state.renew_gate.lock();
        // Lost, or run out unrenewed: a dropped hold stays dropped.
        if !state.is_valid() {
            state.lose(Loss::RanOut);
            drop(gate);
            self.forget_hold();
            return Ok(false);
        }
        let sent = Instant::now();
        // Redlock: half of what is left, so a stalled minority cannot make
        // the majority's answer come after the hold ran out.
        let deadline = sent + state.remaining() / 2;
        let refusal = Cell::new(0);
        let renewed = self.topology.yes_or_no(
            &self.target,
            "renew",
            Some(deadline),
            &|conn| invocation.invoke::<i64>(conn),
            |reply, _| noting_refusal(&refusal, reply, reply == 1),
        )?;
        // extend() notes a hold that ran out meanwhile.
        let kept = renewed && state.extend(sent, self.topology.valid_for(ttl));
        if !renewed {
            state.lose(Loss::from_reply(refusal.get()));
        }
        drop(gate);
        if !kept {
            if renewed {
                // Extended on the servers, but too late to count: give
                // the key back rather than leave it to nobody for a TTL.
                let _ = self.delete_if_ours(&token);
            }
            self.forget_hold();
        }
        Ok(kept)
    }

    /// Deletes the key if it is still ours. `Ok(true)`: we held it and
    /// released it; `Ok(false)`: we did not hold it (never acquired, already
    /// released, lost to someone else, whose key is left alone, past its
    /// TTL without renewal, which sends nothing, or in a forked child).
    /// Either way the lock is not held afterwards. Not held, but an acquire
    /// got no answer: deletes the key if it holds that acquire's token.
    ///
    /// # Errors
    ///
    /// [`Error::Connection`] / [`Error::Lock`] as for [`RedisLock::acquire`];
    /// the lock is then not held and the key expires by its TTL.
    pub fn release(&mut self) -> Result<bool> {
        let object = self.object;
        let options = self.target.options;
        Shared::lend(
            self,
            |lock| &mut lock.topology,
            object,
            &options,
            |lock| lock.release_here(),
        )
    }

    fn release_here(&mut self) -> Result<bool> {
        self.adopt_process();
        let Some(hold) = self.take_hold() else {
            return self.release_unsettled();
        };
        // Stop the renewer now; joining waits until after the delete so
        // waiters are not kept waiting for an in-flight renewal.
        hold.state.signal_stop();
        // Lost, or its TTL ran out unrenewed: not ours to delete any more,
        // and no need to reach a server that may be gone.
        let refusal = Cell::new(0);
        let released = if !hold.state.is_valid() {
            Ok(false)
        } else if hold.state.window_end_ms() != 0 {
            self.leave_to_expire(
                &hold.token,
                hold.state.window_end_ms(),
                hold.state.remaining(),
                &refusal,
            )
        } else {
            self.delete_if_ours_within(&hold.token, Some(hold.state.remaining()), &refusal)
        };
        if released == Ok(false) {
            if hold.state.is_valid() {
                hold.state.lose(Loss::from_reply(refusal.get()));
            }
            self.last_loss = hold.state.loss();
        }
        hold.finish();
        released
    }

    /// The key's value now (`GET <key>`, one read-only round trip: no
    /// write, no fencing number, no expiry change), bytes that are not
    /// UTF-8 shown as `\xNN`; `None` when there is no key. Compare it with
    /// [`RedisLock::token`] to know whether the key is ours. Redlock: the
    /// value a majority of the masters holds (`None`: a majority has no key).
    ///
    /// # Errors
    ///
    /// [`Error::Connection`] when the server cannot be reached or (Redlock)
    /// no majority of the masters agrees on one value; [`Error::Lock`]
    /// when the key holds a value that is not a string.
    pub fn holder(&mut self) -> Result<Option<String>> {
        let object = self.object;
        let options = self.target.options;
        Shared::lend(
            self,
            |lock| &mut lock.topology,
            object,
            &options,
            |lock| lock.holder_here(),
        )
    }

    fn holder_here(&mut self) -> Result<Option<String>> {
        self.adopt_process();
        let key = &self.target.key;
        let value = self.topology.agreed_reply(&self.target, "read", &|conn| {
            redis::cmd("GET")
                .arg(key)
                .query::<Option<HolderValue>>(conn)
        })?;
        Ok(value.map(|holder| holder.0))
    }

    /// Claims the window `window` (the caller's own id of a scheduler
    /// tick, never aligned to any clock here) for `lasting`, exactly once
    /// across hosts: `SET <key>:claim:<window> <token> NX PX` (no fencing
    /// number, nothing left after `lasting`). `Ok(true)`: this call claimed
    /// it (a retry that finds its own token counts). Redlock: when a
    /// majority of the masters granted it; else the grants are given back.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidValue`] naming `$window` (empty, a NUL byte, over
    /// 200 bytes) or `$seconds` (zero or above 10 years);
    /// [`Error::Connection`] / [`Error::Lock`] as for [`RedisLock::acquire`].
    pub fn claim(&mut self, window: &str, lasting: Duration) -> Result<bool> {
        let object = self.object;
        let options = self.target.options;
        Shared::lend(
            self,
            |lock| &mut lock.topology,
            object,
            &options,
            |lock| lock.claim_here(window, lasting),
        )
    }

    fn claim_here(&mut self, window: &str, lasting: Duration) -> Result<bool> {
        if window.is_empty() {
            return Err(Error::value("$window", "must not be empty"));
        }
        if window.contains('\0') {
            return Err(Error::value("$window", "must not contain NUL bytes"));
        }
        if window.len() > MAX_WINDOW_BYTES {
            return Err(Error::value(
                "$window",
                format!("must be at most {MAX_WINDOW_BYTES} bytes"),
            ));
        }
        let lasting = check_lifetime("$seconds", lasting)?;
        self.adopt_process();
        let claim_key = format!("{}:claim:{window}", self.target.key);
        let token = format!("{}:{}@{}", random_token()?, current_pid(), hostname());
        let claim = |ms: u64| {
            let mut invocation = scripts().claim.prepare_invoke();
            invocation.key(&claim_key).arg(&token).arg(ms);
            invocation
        };
        let take = claim(ttl_ms(lasting));
        let claimed = self.topology.yes_or_no(
            &self.target,
            "claim a window of",
            None,
            &|conn| take.invoke::<i64>(conn),
            |reply, _| reply == 1,
        );
        if !matches!(claimed, Ok(true)) && self.topology.some_may_lack_the_key() {
            // A Redlock short of a majority: give back what was granted.
            let give_back = claim(0);
            let _ = self.topology.on_each(&self.target.options, None, &|conn| {
                give_back.invoke::<i64>(conn)
            });
        }
        claimed
    }

    /// Makes the next acquire a once-per-window acquire: windows of
    /// `period` aligned to the Unix epoch on the Redis server's clock
    /// (`TIME`), the key kept at least until the window in which it was
    /// taken, or the hold confirmed (an acquire on a held lock), ends.
    /// `None` turns it off. Releasing such a hold, whoever does it, leaves
    /// the key to expire at the latest such window's end instead of
    /// deleting it (a run that failed still used its window); renewals
    /// never shorten the key's life below it.
    pub fn set_once_per(&mut self, period: Option<Duration>) {
        self.once_per = period;
    }

    /// Sentinel: from now on the sentinels (not the master: the DSN's
    /// credentials are its) are sent `AUTH` with `auth`, by this object
    /// and its renewal thread. The password is cut out of every message.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidValue`] naming `$options['sentinel_password']` when
    /// the DSN is not a Sentinel DSN.
    pub fn set_sentinel_auth(&mut self, auth: &SentinelAuth) -> Result<()> {
        if !self.topology.set_sentinel_auth(auth) {
            return Err(Error::value(
                "$options['sentinel_password']",
                "applies to a redis-sentinel:// or rediss-sentinel:// DSN only",
            ));
        }
        Arc::make_mut(&mut self.target)
            .secrets
            .add(Some(&auth.password));
        Ok(())
    }

    /// Releases a hold taken in once-per mode: if the key is still ours
    /// and its window has not ended yet (by the server's clock), it is left
    /// to expire at the window's end (`PEXPIREAT`, token-checked), so nobody
    /// takes it again in that window; past the window's end it is deleted.
    fn leave_to_expire(
        &mut self,
        token: &str,
        window_end_ms: i64,
        valid: Duration,
        refusal: &Cell<i64>,
    ) -> Result<bool> {
        let mut invocation = scripts().end_window.prepare_invoke();
        invocation
            .key(&self.target.key)
            .arg(token)
            .arg(window_end_ms)
            .arg(&self.target.channel);
        let redlock = self.topology.some_may_lack_the_key();
        self.topology.yes_or_no(
            &self.target,
            "leave to expire",
            Some(release_deadline(valid)),
            &|conn| invocation.invoke::<i64>(conn),
            // -1 as for release: no key is a lost hold (D20), except on a
            // Redlock master that never had it (a minority).
            |reply, _retried| {
                let yes = reply == 1 || reply == 2 || (reply == -1 && redlock);
                noting_refusal(refusal, reply, yes)
            },
        )
    }

    /// Deletes the key (on every Redlock master) if an unanswered acquire
    /// left our token in it. `Ok(true)`: it had (on some master). Best
    /// effort, so that the end of a request or a destructor never hangs on
    /// a stalled server: one try per server, without following a failover
    /// or redirection (the script went to the server we talked to), its
    /// connect and reply awaited at most [`UNSETTLED_CLEANUP_TIMEOUT`], and
    /// the token is forgotten either way (the key then expires by its TTL).
    fn release_unsettled(&mut self) -> Result<bool> {
        let Some(token) = self.unsettled.take() else {
            return Ok(false);
        };
        self.topology
            .release_unsettled(&self.target, &token, UNSETTLED_CLEANUP_TIMEOUT)
    }

    fn delete_if_ours(&mut self, token: &str) -> Result<bool> {
        self.delete_if_ours_within(token, None, &Cell::new(0))
    }

    /// [`RedisLock::delete_if_ours`] for a hold still `valid` that long:
    /// Redlock waits for no master past that (a key that expired needs
    /// no delete), but at least [`RELEASE_MIN_WAIT`].
    /// `refusal`: the reply of a "no", for [`Loss::from_reply`].
    fn delete_if_ours_within(
        &mut self,
        token: &str,
        valid: Option<Duration>,
        refusal: &Cell<i64>,
    ) -> Result<bool> {
        let invocation = self.target.release_invocation(token);
        let redlock = self.topology.some_may_lack_the_key();
        // No key at all is a lost hold (D20), also when the command was
        // sent again after a broken connection: a server that restarted
        // without persistence lost the key, and another run may have taken
        // it meanwhile (an outside operator saw a silent double run). The
        // first try's reply lost after it deleted the key would be
        // reported so too: a false alarm, never a silent loss. For
        // Redlock, a master that never granted (or lost) the key is no
        // reason to report a held lock as not held.
        self.topology.yes_or_no(
            &self.target,
            "release",
            valid.map(release_deadline),
            &|conn| invocation.invoke::<i64>(conn),
            |reply, _retried| {
                noting_refusal(refusal, reply, reply == 1 || (reply == -1 && redlock))
            },
        )
    }

    /// Whether this process holds the lock as far as we know: acquired, not
    /// released, not found lost, and its TTL since the last confirmed acquire
    /// or renew has not run out. Local: no round trip.
    pub fn is_held(&self) -> bool {
        self.owner.is_this_process() && self.hold.as_ref().is_some_and(|hold| hold.state.is_valid())
    }

    /// The token stored as the key's value; `None` when not held.
    pub fn token(&self) -> Option<&str> {
        self.current_hold().map(|hold| hold.token.as_str())
    }

    /// The fencing number of this acquisition (strictly increasing per key,
    /// across holders); `None` when not held.
    pub fn fencing_token(&self) -> Option<i64> {
        if !self.topology.fences() {
            // See the module docs, "Redlock": no number across independent
            // masters is strictly increasing under the failures Redlock is
            // meant to survive.
            return None;
        }
        self.current_hold().map(|hold| hold.fence)
    }

    fn current_hold(&self) -> Option<&Acquisition> {
        self.hold.as_ref().filter(|_| self.is_held())
    }

    /// Who held the lock when the last `acquire` found it busy: the pid and
    /// host from a cronlock token, `None` for another client's value.
    pub fn last_holder(&self) -> Option<(u32, &str)> {
        let (_, holder) = self.last_holder.as_deref()?.split_once(':')?;
        let (pid, host) = holder.split_once('@')?;
        Some((pid.parse().ok()?, host))
    }

    /// When the holder the last `acquire` found is a process of this host
    /// that is no longer running, the busy line's remark saying so and when
    /// the key expires at the latest. Only words: containers share host
    /// names, so nothing is done on that guess.
    pub fn dead_holder_remark(&self) -> Option<String> {
        let (pid, host) = self.last_holder()?;
        if host != hostname() || sys::process_alive(pid) {
            return None;
        }
        Some(match self.last_expires_in {
            Some(left) => format!(
                "(not running on this host; the key expires in {} s)",
                left.as_millis().div_ceil(1000)
            ),
            None => "(not running on this host)".to_owned(),
        })
    }

    /// Whether the last `acquire` found the key held by another lock object
    /// of this thread (then [`RedisLock::last_holder`] names this process).
    pub fn busy_in_this_process(&self) -> bool {
        self.busy_here
    }

    /// The Redis key.
    pub fn key(&self) -> &str {
        &self.target.key
    }

    /// `redis key '<key>' at <address>[/db]` for messages, the key cut to
    /// 200 characters.
    pub fn describe(&self) -> String {
        self.target.describe(&self.topology.place())
    }

    /// Takes the hold out of this object and out of the thread's registry.
    fn take_hold(&mut self) -> Option<Acquisition> {
        let hold = self.hold.take()?;
        registry::unregister(self.object);
        Some(hold)
    }

    /// Drops a hold that is no longer valid, stopping its renewer; when
    /// and why it was lost stays known ([`RedisLock::loss`]).
    fn forget_hold(&mut self) {
        if let Some(hold) = self.take_hold() {
            if let Some(loss) = hold.state.loss() {
                self.last_loss = Some(loss);
            }
            hold.finish();
        }
    }

    /// When and why the last hold of this object was lost, as the renewal
    /// thread or the call that found out saw it: `None` while held, or
    /// when no hold was lost (never acquired, released).
    pub fn loss(&self) -> Option<(SystemTime, Loss)> {
        match &self.hold {
            Some(hold) => hold.state.loss(),
            None => self.last_loss,
        }
    }

    /// In a forked child the connection is the parent's socket and the
    /// renewer thread does not exist: forget both without touching them, and
    /// start over as this process's lock. (The registry entry copied from
    /// the parent names the parent's pid, so it is ignored.)
    fn adopt_process(&mut self) {
        if !self.owner.is_this_process() {
            self.topology.forget_connections();
            mem::forget(self.hold.take());
            // The parent's token: never this process's to take or delete.
            self.unsettled = None;
            self.owner = Owner::this_process();
        }
    }
}

impl Drop for RedisLock {
    fn drop(&mut self) {
        self.adopt_process();
        if self.hold.is_some() || self.unsettled.is_some() {
            // Nobody to tell; the key expires by its TTL.
            let _ = self.release();
        }
        Shared::forget(self.object);
    }
}

/// A yes/no script's "yes" test that notes a "no" `reply` in `refusal`
/// (for [`Loss::from_reply`]).
fn noting_refusal(refusal: &Cell<i64>, reply: i64, yes: bool) -> bool {
    if !yes {
        refusal.set(reply);
    }
    yes
}

/// The least a Redlock release waits for the masters, however little of
/// the hold's validity is left: enough for live masters to answer on a
/// busy machine.
const RELEASE_MIN_WAIT: Duration = Duration::from_millis(50);

/// When a Redlock release of a hold still valid for `valid` stops waiting.
fn release_deadline(valid: Duration) -> Instant {
    Instant::now() + valid.max(RELEASE_MIN_WAIT)
}

//! [`RedisLock`]: acquire (with its wait), renew, release.

use super::cluster::{companions, Cluster};
use super::connection::{run_retrying_once, with_connection};
use super::dsn::{parse_dsn, Secrets};
use super::errors::{describe_failure, makes_lock_unusable, plain_io, Failed, Failure};
use super::listener::Listener;
use super::options::{check_timeout, check_ttl, ttl_ms, RedisOptions};
use super::redlock::{drift, in_parallel, on_all, quorum, verdict, Node, Verdict};
use super::registry::{self, LockName};
use super::renewer::{HoldState, Renewal};
use super::scripts::{renew_invocation, scripts};
use super::sentinel::{Sentinel, SentinelAuth};
use super::token::{random_token, HolderValue};
use crate::error::{Error, Result};
use crate::lock::shorten;
use crate::lock::{sys, Wait};
use redis::{Connection, ErrorKind, RedisResult};
use std::mem;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// Waiters retry at least this often, for holders that `DEL` the key
/// without publishing (other clients, or an ACL user without channel rights).
pub(super) const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// A lock on one Redis key. See the [module docs](super) for the protocol.
pub struct RedisLock {
    /// The server; for Redlock, the independent masters; for Sentinel, the
    /// master the sentinels named last.
    pub(super) nodes: Vec<Node>,
    /// Sentinel: who names the master.
    sentinel: Option<Sentinel>,
    /// Cluster: the seeds, and how to follow redirections.
    cluster: Option<Cluster>,
    pub(super) key: String,
    fence_key: String,
    pub(super) channel: String,
    pub(super) ttl: Duration,
    pub(super) options: RedisOptions,
    secrets: Secrets,
    /// Tells this lock apart from other objects on the same key in the
    /// per-thread registry of holds.
    id: u64,
    /// Its entry in that registry.
    name: LockName,
    /// The process whose sockets and thread `conn` and `hold` are.
    owner_pid: u32,
    hold: Option<Hold>,
    /// The value of `<key>` seen by the last acquire that found it busy.
    pub(super) last_holder: Option<HolderValue>,
    /// The last acquire found the key held by another object of this thread.
    busy_here: bool,
    /// Set by [`RedisLock::set_once_per`]: the window of a once-per-window
    /// acquire.
    once_per: Option<Duration>,
    /// The token of an acquire that got no answer (a stalled or vanished
    /// server): the script may still have run, or run later, and then the
    /// key holds this token for the whole TTL. The next acquire reuses it
    /// (the script takes "key == our token" as ours) and release or drop
    /// deletes the key if it holds it. For Redlock: any master may.
    pub(super) unsettled: Option<String>,
    /// Redlock: each master's `run_id` (`INFO server`), learnt by the first
    /// attempt it answers; `Some("")` when it would not say.
    pub(super) run_ids: Vec<Option<String>>,
}

/// What we know about a key we acquired.
pub(super) struct Hold {
    token: String,
    fence: i64,
    state: Arc<HoldState>,
    renewer: Option<JoinHandle<()>>,
}

impl Hold {
    /// Stops the renewal thread, if any, and waits for it.
    fn finish(self) {
        if let Some(renewer) = self.renewer {
            self.state.signal_stop();
            // A panic in the thread already lost the lock; nothing to report.
            let _ = renewer.join();
        }
    }
}

/// The acquire script's reply: `{1, fence, '', window end, ms until it}`
/// or `{0, PTTL, holder, 0, 0}`.
pub(super) type AcquireReply = (i64, i64, HolderValue, i64, i64);

/// Why the acquire script runs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// `acquire(0)`: one try.
    Take,
    /// One try of a waiter.
    Wait,
    /// `acquire()` on a held lock: only confirm and extend, never take (in
    /// once-per mode, extend to the window's end too).
    Confirm,
}

/// What one run of the acquire script found.
pub(super) enum Attempt {
    /// `<key>` holds our token (just set, or it already did): the fencing
    /// number, when the attempt started (the TTL runs from later), the end
    /// of its once-per window (server ms; 0: none), and how long after the
    /// attempt started the key lives at least because of that window.
    Ours(i64, Instant, i64, Duration),
    /// Someone else holds the key; it expires within this time (`None`: it
    /// has no TTL, or it is gone).
    Busy(Option<Duration>),
}

/// Shortest and longest pause of a waiter whose server fails.
pub(super) const RECONNECT_BACKOFF_MIN: Duration = Duration::from_millis(20);
pub(super) const RECONNECT_BACKOFF_MAX: Duration = Duration::from_millis(100);

/// Longest wait for a connection or a reply when deleting the key of an
/// unanswered acquire (see [`RedisLock::release`]).
pub(super) const UNSETTLED_CLEANUP_TIMEOUT: Duration = Duration::from_secs(1);

/// Longest single sleep of a waiter, so that PHP's pending signal handlers
/// run within about this long.
pub(super) const INTERRUPT_CHECK_INTERVAL: Duration = Duration::from_millis(100);

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
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        if key.is_empty() {
            return Err(Error::value("$key", "must not be empty"));
        }
        if key.contains('\0') {
            return Err(Error::value("$key", "must not contain NUL bytes"));
        }
        let ttl = check_ttl(ttl)?;
        check_timeout("$options['connect_timeout']", options.connect_timeout)?;
        check_timeout("$options['read_timeout']", options.read_timeout)?;
        if dsns.len() > 1 && options.replicas > 0 {
            return Err(Error::value(
                "$options['replicas']",
                "applies to one master (or a Sentinel DSN), not to a list of Redlock masters",
            ));
        }
        let mut nodes: Vec<Node> = Vec::with_capacity(dsns.len());
        let mut secrets = Secrets::none();
        let mut sentinel = None;
        let mut cluster = None;
        for (index, dsn) in dsns.iter().enumerate() {
            if let Some((found, found_secrets)) = Cluster::parse(dsn)? {
                if dsns.len() > 1 {
                    return Err(Error::value(
                        format!("$dsn[{index}]"),
                        "must be a redis://, rediss:// or unix:// DSN: Redlock needs independent masters",
                    ));
                }
                secrets.merge(found_secrets);
                nodes.push(found.first_node());
                cluster = Some(found);
                break;
            }
            if let Some((found, found_secrets)) = Sentinel::parse(dsn)? {
                if dsns.len() > 1 {
                    return Err(Error::value(
                        format!("$dsn[{index}]"),
                        "must be a redis://, rediss:// or unix:// DSN: Redlock needs independent masters",
                    ));
                }
                secrets.merge(found_secrets);
                nodes.push(found.first_node());
                sentinel = Some(found);
                break;
            }
            let (server, found) = parse_dsn(dsn).map_err(|err| match err {
                Error::InvalidValue { arg, reason } if dsns.len() > 1 => {
                    Error::value(format!("{arg}[{index}]"), reason)
                }
                other => other,
            })?;
            secrets.merge(found);
            let node = Node::new(server);
            if let Some(other) = nodes
                .iter()
                .find(|other| other.server_identity() == node.server_identity())
            {
                let (first, again) = (other.address(), node.address());
                let also = if first == again {
                    String::new()
                } else {
                    format!(" (also as {again})")
                };
                return Err(Error::value(
                    "$dsn",
                    format!(
                        "names the Redis master {first} twice{also}; Redlock needs independent \
                         masters"
                    ),
                ));
            }
            nodes.push(node);
        }
        let masters = nodes.len();
        let name = LockName {
            address: match (&sentinel, &cluster) {
                (Some(sentinel), _) => sentinel.identity(),
                (_, Some(cluster)) => cluster.identity(),
                _ => {
                    let mut masters: Vec<String> = nodes
                        .iter()
                        .map(|node| {
                            let addr = node.server.client.get_connection_info().addr();
                            format!("{addr}/{}", node.server.db)
                        })
                        .collect();
                    masters.sort();
                    masters.join(",")
                }
            },
            db: nodes[0].server.db,
            key: key.to_owned(),
        };
        let (fence_key, channel) = if cluster.is_some() {
            companions(key)?
        } else {
            (format!("{key}:fence"), format!("{key}:released"))
        };
        Ok(RedisLock {
            nodes,
            sentinel,
            cluster,
            name,
            key: key.to_owned(),
            fence_key,
            channel,
            ttl,
            options,
            secrets,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            owner_pid: sys::current_pid(),
            hold: None,
            last_holder: None,
            busy_here: false,
            once_per: None,
            unsettled: None,
            run_ids: vec![None; masters],
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
        self.adopt_process();
        self.busy_here = false;
        if self.is_held() {
            return self.confirm_hold();
        }
        self.forget_hold();
        if let Some(token) = registry::held_by_another(&self.name, self.id) {
            self.last_holder = Some(HolderValue(token));
            if wait == Wait::Once {
                self.busy_here = true;
                return Ok(false);
            }
            return Err(self.would_deadlock());
        }
        let token = match &self.unsettled {
            Some(token) => token.clone(),
            None => format!(
                "{}:{}@{}",
                random_token()?,
                sys::current_pid(),
                sys::hostname()
            ),
        };
        if wait == Wait::Once {
            return match self.attempt(&token, Mode::Take)? {
                Attempt::Ours(fence, sent, window_end, window_left) => {
                    self.start_hold(token, fence, sent, window_end, window_left)
                }
                Attempt::Busy(_) => {
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
            .is_some_and(|holder| registry::holds_token(&self.key, holder, self.id))
    }

    fn would_deadlock(&self) -> Error {
        Error::Lock(format!(
            "{} is already held by this process (pid {}) through another \
             CronLock\\Redis object; waiting for it would deadlock",
            self.describe(),
            sys::current_pid()
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
                    if self.busy_through_this_thread() {
                        self.busy_here = true;
                        return Err(self.would_deadlock());
                    }
                    backoff = RECONNECT_BACKOFF_MIN;
                    // Subscribe, then retry at once, so a release between
                    // the attempt and the subscription still wakes us.
                    // Redlock: the first master's channel; polling covers
                    // the rest.
                    if listener.subscribe(&self.nodes[0].server, &self.options, &self.channel) {
                        continue;
                    }
                    if wait.remaining() == Some(Duration::ZERO) {
                        return Ok(false);
                    }
                    let nap = expires_in.map_or(POLL_INTERVAL, |e| e.min(POLL_INTERVAL));
                    if self.is_redlock() {
                        // Waiters that split the votes must not retry in step.
                        nap.mul_f64(0.5 + jitter())
                    } else {
                        nap
                    }
                }
                Err(Failed {
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

    /// One run of the acquire script (retried once on a broken connection:
    /// it is idempotent for a given token). A take or wait whose script got
    /// no answer keeps `token` as [`RedisLock::unsettled`]; one that found
    /// the key held by someone else drops it.
    fn attempt(&mut self, token: &str, mode: Mode) -> std::result::Result<Attempt, Failed> {
        if self.is_redlock() {
            return self.attempt_on_masters(token, mode);
        }
        let outcome = self.attempt_on_one(token, mode);
        if mode != Mode::Confirm {
            match &outcome {
                Err(failed) if failed.unanswered => self.unsettled = Some(token.to_owned()),
                Ok(Attempt::Busy(_)) => self.unsettled = None,
                _ => {}
            }
        }
        outcome
    }

    fn attempt_on_one(&mut self, token: &str, mode: Mode) -> std::result::Result<Attempt, Failed> {
        let invocation = self.acquire_invocation(token, mode);
        let sent = Instant::now();
        let replicas = if mode == Mode::Confirm {
            0
        } else {
            self.options.replicas
        };
        // WAIT gives up a little before the socket would.
        let wait_ms = (self.options.read_timeout.as_millis() * 4 / 5).max(1) as u64;
        let (((acquired, number, holder, window_end, window_left_ms), acks), _) =
            self.run("acquire", mode == Mode::Wait, |conn| {
                let reply: AcquireReply = invocation.invoke(conn)?;
                if reply.0 != 1 || replicas == 0 {
                    return Ok((reply, 0));
                }
                let acks: i64 = redis::cmd("WAIT").arg(replicas).arg(wait_ms).query(conn)?;
                Ok((reply, acks))
            })?;
        if acquired == 1 && acks < i64::from(replicas) {
            // Not safe from a failover yet: give it back.
            let given_back = self.delete_if_ours(token);
            return Err(Failed {
                error: Error::Connection(self.secrets.scrub(format!(
                    "{} was taken, but only {acks} of the {replicas} replicas asked for \
                     acknowledged it within {wait_ms} ms; it was given back",
                    self.describe()
                ))),
                transient: true,
                unanswered: given_back.is_err(),
            });
        }
        if acquired == 1 {
            let window_left = Duration::from_millis(u64::try_from(window_left_ms).unwrap_or(0));
            return Ok(Attempt::Ours(number, sent, window_end, window_left));
        }
        self.last_holder = Some(holder);
        // PTTL is -1 for a key without TTL, -2 for no key.
        Ok(Attempt::Busy(
            u64::try_from(number).ok().map(Duration::from_millis),
        ))
    }

    pub(super) fn acquire_invocation(
        &self,
        token: &str,
        mode: Mode,
    ) -> redis::ScriptInvocation<'static> {
        let script = match self.once_per {
            Some(_) => &scripts().acquire_in_window,
            None => &scripts().acquire,
        };
        let mut invocation = script.prepare_invoke();
        invocation
            .key(&self.key)
            .key(&self.fence_key)
            .arg(token)
            .arg(ttl_ms(self.ttl));
        if let Some(window) = self.once_per {
            invocation.arg(ttl_ms(window));
        }
        invocation.arg(if mode == Mode::Confirm { "1" } else { "0" });
        invocation
    }

    pub(super) fn is_redlock(&self) -> bool {
        self.nodes.len() > 1
    }

    /// How long a hold confirmed with `ttl` counts as valid from when the
    /// command was sent: the TTL, less the drift allowance for Redlock.
    pub(super) fn valid_for(&self, ttl: Duration) -> Duration {
        if self.is_redlock() {
            ttl.saturating_sub(drift(ttl))
        } else {
            ttl
        }
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
                if state.extend(sent, self.valid_for(self.ttl)) =>
            {
                if window_end != 0 {
                    state.keep_to_window_end(window_end, sent, self.valid_for(window_left));
                }
                Ok(true)
            }
            // Ours, or it ran out while we asked (no reviving it).
            Attempt::Ours(..) | Attempt::Busy(_) => {
                state.lost.store(true, Ordering::Release);
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
        let state = HoldState::new(sent, self.valid_for(self.ttl));
        if window_end_ms != 0 {
            // once_per: the key lives until its window ends whatever the
            // TTL, so the hold does too (renew() and isHeld() say so).
            state.keep_to_window_end(window_end_ms, sent, self.valid_for(window_left));
        }
        let state = Arc::new(state);
        let renewer = if self.options.auto_renew {
            match self.spawn_renewer(&token, &state) {
                Ok(renewer) => Some(renewer),
                Err(err) => {
                    // Best effort: otherwise the key stays until its TTL.
                    let _ = self.delete_if_ours(&token);
                    return Err(Error::Lock(format!(
                        "cannot start the auto-renew thread: {}",
                        plain_io(&err)
                    )));
                }
            }
        } else {
            None
        };
        self.unsettled = None;
        registry::register(&self.name, self.id, self.owner_pid, &token, &state);
        self.hold = Some(Hold {
            token,
            fence,
            state,
            renewer,
        });
        Ok(true)
    }

    fn spawn_renewer(
        &self,
        token: &str,
        state: &Arc<HoldState>,
    ) -> std::io::Result<JoinHandle<()>> {
        let renewal = Renewal {
            nodes: self
                .nodes
                .iter()
                .map(|node| Node::new(node.server.clone()))
                .collect(),
            options: self.options,
            key: self.key.clone(),
            token: token.to_owned(),
            ttl: self.ttl,
            release: {
                let mut release = scripts().release.prepare_invoke();
                release.key(&self.key).arg(token).arg(&self.channel);
                release
            },
            valid_for: self.valid_for(self.ttl),
            sentinel: self.sentinel.as_ref().map(Sentinel::fresh),
            cluster: self.cluster.as_ref().map(Cluster::fresh),
        };
        let state = Arc::clone(state);
        thread::Builder::new()
            .name("cronlock-renew".to_owned())
            .spawn(move || renewal.run(&state))
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
        self.adopt_process();
        let ttl = check_ttl(ttl.unwrap_or(self.ttl))?;
        let Some(hold) = &self.hold else {
            return Ok(false);
        };
        let state = Arc::clone(&hold.state);
        let token = hold.token.clone();
        let invocation = renew_invocation(&self.key, &hold.token, ttl, state.window_end_ms());
        let gate = state.renew_gate.lock();
        // Lost, or run out unrenewed: a dropped hold stays dropped.
        if !state.is_valid() {
            state.lost.store(true, Ordering::Release);
            drop(gate);
            self.forget_hold();
            return Ok(false);
        }
        let sent = Instant::now();
        // Redlock: half of what is left, so a stalled minority cannot make
        // the majority's answer come after the hold ran out.
        let deadline = sent + state.remaining() / 2;
        let renewed = self.everywhere(
            "renew",
            Some(deadline),
            &|conn| invocation.invoke::<i64>(conn),
            |reply, _| reply == 1,
        )?;
        let kept = renewed && state.extend(sent, self.valid_for(ttl));
        if !kept {
            state.lost.store(true, Ordering::Release);
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
        self.adopt_process();
        let Some(hold) = self.take_hold() else {
            return self.release_unsettled();
        };
        // Stop the renewer now; joining waits until after the delete so
        // waiters are not kept waiting for an in-flight renewal.
        hold.state.signal_stop();
        // Lost, or its TTL ran out unrenewed: not ours to delete any more,
        // and no need to reach a server that may be gone.
        let released = if !hold.state.is_valid() {
            Ok(false)
        } else if hold.state.window_end_ms() != 0 {
            self.leave_to_expire(
                &hold.token,
                hold.state.window_end_ms(),
                hold.state.remaining(),
            )
        } else {
            self.delete_if_ours_within(&hold.token, Some(hold.state.remaining()))
        };
        hold.finish();
        released
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
        let Some(sentinel) = &mut self.sentinel else {
            return Err(Error::value(
                "$options['sentinel_password']",
                "applies to a redis-sentinel:// or rediss-sentinel:// DSN only",
            ));
        };
        sentinel.authenticate(auth);
        self.secrets.add(Some(&auth.password));
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
    ) -> Result<bool> {
        let mut invocation = scripts().end_window.prepare_invoke();
        invocation
            .key(&self.key)
            .arg(token)
            .arg(window_end_ms)
            .arg(&self.channel);
        let redlock = self.is_redlock();
        self.everywhere(
            "leave to expire",
            Some(release_deadline(valid)),
            &|conn| invocation.invoke::<i64>(conn),
            // -1 as for release: our first try most likely deleted it
            // (or, for Redlock, a minority master never had it).
            |reply, retried| reply == 1 || reply == 2 || (reply == -1 && (retried || redlock)),
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
        let mut invocation = scripts().release.prepare_invoke();
        invocation.key(&self.key).arg(&token).arg(&self.channel);
        let options = self.options;
        let bounded = RedisOptions {
            connect_timeout: options.connect_timeout.min(UNSETTLED_CLEANUP_TIMEOUT),
            read_timeout: options.read_timeout.min(UNSETTLED_CLEANUP_TIMEOUT),
            ..options
        };
        let results = in_parallel(&mut self.nodes, &|node| {
            with_connection(&mut node.conn, &node.server, &bounded, |conn| {
                conn.set_read_timeout(Some(bounded.read_timeout))?;
                let reply = invocation.invoke::<i64>(conn);
                // The connection may be kept for the next command.
                conn.set_read_timeout(Some(options.read_timeout))?;
                conn.set_write_timeout(Some(options.read_timeout))?;
                reply
            })
        });
        let mut deleted = false;
        let mut failures = Vec::new();
        for (index, result) in results.into_iter().enumerate() {
            match result {
                Ok(1) => deleted = true,
                Ok(_) => {}
                Err(failure) => failures.push((index, failure)),
            }
        }
        if deleted || failures.len() < quorum(self.nodes.len()) {
            return Ok(deleted);
        }
        // The message names the timeouts this try had.
        let options = mem::replace(&mut self.options, bounded);
        let error = if self.is_redlock() {
            self.majority_error("release", &failures, None).error
        } else {
            self.error(0, "release", &failures[0].1)
        };
        self.options = options;
        Err(error)
    }

    fn delete_if_ours(&mut self, token: &str) -> Result<bool> {
        self.delete_if_ours_within(token, None)
    }

    /// [`RedisLock::delete_if_ours`] for a hold still `valid` that long:
    /// Redlock waits for no master past that (a key that expired needs
    /// no delete), but at least [`RELEASE_MIN_WAIT`].
    fn delete_if_ours_within(&mut self, token: &str, valid: Option<Duration>) -> Result<bool> {
        let mut invocation = scripts().release.prepare_invoke();
        invocation.key(&self.key).arg(token).arg(&self.channel);
        let redlock = self.is_redlock();
        // No key at all after a broken connection: most likely our first
        // try deleted it and its reply was lost; nobody else holds it. For
        // Redlock, a master that never granted (or lost) the key is no
        // reason to report a held lock as not held.
        self.everywhere(
            "release",
            valid.map(release_deadline),
            &|conn| invocation.invoke::<i64>(conn),
            |reply, retried| reply == 1 || (reply == -1 && (retried || redlock)),
        )
    }

    /// Runs a token-checked yes/no script on the server, or on every
    /// Redlock master: `Ok(true)` when it (a majority) said yes,
    /// `Ok(false)` when it (so many that no majority is left) said no.
    /// Redlock: no master is awaited past `deadline` (see
    /// [`redlock::on_all`](super::redlock::on_all)).
    pub(super) fn everywhere(
        &mut self,
        op: &str,
        deadline: Option<Instant>,
        command: &(dyn Fn(&mut Connection) -> RedisResult<i64> + Sync),
        yes: impl Fn(i64, bool) -> bool,
    ) -> Result<bool> {
        if !self.is_redlock() {
            let (reply, retried) = self.run(op, false, command)?;
            return Ok(yes(reply, retried));
        }
        let budget = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let results = on_all(&mut self.nodes, &self.options, deadline, command);
        match verdict(results, yes) {
            Verdict::Yes => Ok(true),
            Verdict::No => Ok(false),
            Verdict::Unknown(failures) => Err(self.majority_error(op, &failures, budget).error),
        }
    }

    /// Whether this process holds the lock as far as we know: acquired, not
    /// released, not found lost, and its TTL since the last confirmed acquire
    /// or renew has not run out. Local: no round trip.
    pub fn is_held(&self) -> bool {
        self.owner_pid == sys::current_pid()
            && self.hold.as_ref().is_some_and(|hold| hold.state.is_valid())
    }

    /// The token stored as the key's value; `None` when not held.
    pub fn token(&self) -> Option<&str> {
        self.current_hold().map(|hold| hold.token.as_str())
    }

    /// The fencing number of this acquisition (strictly increasing per key,
    /// across holders); `None` when not held.
    pub fn fencing_token(&self) -> Option<i64> {
        if self.is_redlock() {
            // See the module docs, "Redlock": no number across independent
            // masters is strictly increasing under the failures Redlock is
            // meant to survive.
            return None;
        }
        self.current_hold().map(|hold| hold.fence)
    }

    fn current_hold(&self) -> Option<&Hold> {
        self.hold.as_ref().filter(|_| self.is_held())
    }

    /// Who held the lock when the last `acquire` found it busy: the pid and
    /// host from a cronlock token, `None` for another client's value.
    pub fn last_holder(&self) -> Option<(u32, &str)> {
        let (_, holder) = self.last_holder.as_deref()?.split_once(':')?;
        let (pid, host) = holder.split_once('@')?;
        Some((pid.parse().ok()?, host))
    }

    /// Whether the last `acquire` found the key held by another lock object
    /// of this thread (then [`RedisLock::last_holder`] names this process).
    pub fn busy_in_this_process(&self) -> bool {
        self.busy_here
    }

    /// The Redis key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// `redis key '<key>' at <address>[/db]` for messages, the key cut to
    /// 200 characters.
    pub fn describe(&self) -> String {
        if let Some(sentinel) = &self.sentinel {
            return format!(
                "redis key '{}' at {}",
                shorten(&self.key),
                sentinel.describe()
            );
        }
        if let Some(cluster) = &self.cluster {
            return format!(
                "redis key '{}' in {}",
                shorten(&self.key),
                cluster.describe()
            );
        }
        let at = self
            .nodes
            .iter()
            .map(Node::address)
            .collect::<Vec<_>>()
            .join(", ");
        format!("redis key '{}' at {at}", shorten(&self.key))
    }

    /// Takes the hold out of this object and out of the thread's registry.
    fn take_hold(&mut self) -> Option<Hold> {
        let hold = self.hold.take()?;
        registry::unregister(&self.name, self.id);
        Some(hold)
    }

    /// Drops a hold that is no longer valid, stopping its renewer.
    fn forget_hold(&mut self) {
        if let Some(hold) = self.take_hold() {
            hold.finish();
        }
    }

    /// In a forked child the connection is the parent's socket and the
    /// renewer thread does not exist: forget both without touching them, and
    /// start over as this process's lock. (The registry entry copied from
    /// the parent names the parent's pid, so it is ignored.)
    fn adopt_process(&mut self) {
        let pid = sys::current_pid();
        if self.owner_pid != pid {
            for node in &mut self.nodes {
                mem::forget(node.conn.take());
            }
            if let Some(sentinel) = &mut self.sentinel {
                sentinel.forget_connection();
            }
            mem::forget(self.hold.take());
            // The parent's token: never this process's to take or delete.
            self.unsettled = None;
            self.owner_pid = pid;
        }
    }

    /// Runs `command`, reconnecting and running it once more when the
    /// connection broke (closed by the server or the network, reset, timed
    /// out): every script is safe to run twice. Returns whether it ran twice.
    /// `in_wait`: a signal for PHP that interrupted the read ends it (D9).
    fn run<T>(
        &mut self,
        op: &str,
        in_wait: bool,
        mut command: impl FnMut(&mut Connection) -> RedisResult<T>,
    ) -> std::result::Result<(T, bool), Failed> {
        let node = &mut self.nodes[0];
        if let Some(sentinel) = &mut self.sentinel {
            if let Err(reason) = sentinel.follow(node, &self.options) {
                return Err(Failed {
                    error: Error::Connection(self.secrets.scrub(format!(
                        "cannot {op} key '{}': {reason}",
                        shorten(&self.key)
                    ))),
                    transient: true,
                    unanswered: false,
                });
            }
        }
        let mut sent = false;
        let noting_sent = |conn: &mut Connection| {
            sent = true;
            command(conn)
        };
        let result = match &mut self.cluster {
            Some(cluster) => cluster.run(node, &self.options, in_wait, noting_sent),
            None => run_retrying_once(
                &mut node.conn,
                &node.server,
                &self.options,
                in_wait,
                noting_sent,
            ),
        };
        result.map_err(|failure| Failed {
            error: self.error(0, op, &failure),
            transient: failure.is_transient(),
            unanswered: failure.left_unanswered(sent),
        })
    }

    pub(super) fn error(&self, node: usize, op: &str, failure: &Failure) -> Error {
        self.error_with(node, op, failure, &self.options)
    }

    /// [`RedisLock::error`] for a call that was given the timeouts of `given`.
    pub(super) fn error_with(
        &self,
        node: usize,
        op: &str,
        failure: &Failure,
        given: &RedisOptions,
    ) -> Error {
        let addr = self.nodes[node].server.client.get_connection_info().addr();
        let key = shorten(&self.key);
        let message = match failure {
            Failure::Connect(err) if err.is_timeout() => format!(
                "cannot connect to Redis at {addr} to {op} key '{key}': no answer within {} ms",
                given.connect_timeout.as_millis()
            ),
            Failure::Connect(err) => format!(
                "cannot connect to Redis at {addr} to {op} key '{key}': {}",
                describe_failure(err)
            ),
            Failure::Command(err) if err.is_timeout() => format!(
                "Redis at {addr} gave no answer within {} ms to {op} key '{key}'",
                given.read_timeout.as_millis()
            ),
            Failure::Command(err) if err.kind() == ErrorKind::Io => format!(
                "lost the connection to Redis at {addr} while trying to {op} key '{key}': {}",
                describe_failure(err)
            ),
            Failure::Command(err) => format!(
                "Redis at {addr} refused to {op} key '{key}': {}",
                describe_failure(err)
            ),
            Failure::RedirectLoop { reason, .. } => {
                format!("cannot {op} key '{key}': {reason}")
            }
        };
        let message = self.secrets.scrub(message);
        match failure {
            Failure::Command(err) if makes_lock_unusable(err) => Error::Lock(message),
            _ => Error::Connection(message),
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
    }
}

/// A number in [0, 1) that differs between processes and calls.
/// The least a Redlock release waits for the masters, however little of
/// the hold's validity is left: enough for live masters to answer on a
/// busy machine.
const RELEASE_MIN_WAIT: Duration = Duration::from_millis(50);

/// When a Redlock release of a hold still valid for `valid` stops waiting.
fn release_deadline(valid: Duration) -> Instant {
    Instant::now() + valid.max(RELEASE_MIN_WAIT)
}

fn jitter() -> f64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.subsec_nanos());
    let mixed = (u64::from(nanos) ^ u64::from(sys::current_pid()).rotate_left(32))
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (mixed >> 11) as f64 / (1u64 << 53) as f64
}

//! A Redis lock for one key: a random token stored with `SET NX PX`, that
//! only its holder can extend or delete, and that expires by itself when
//! the holder dies.
//!
//! ```no_run
//! use cronlock::lock::redis::{RedisLock, RedisOptions};
//! use cronlock::lock::Wait;
//! use std::time::Duration;
//!
//! # fn main() -> cronlock::error::Result<()> {
//! let options = RedisOptions { auto_renew: true, ..RedisOptions::default() };
//! let mut lock = RedisLock::new(
//!     "redis://127.0.0.1:6379/0",
//!     "cron:sync-orders",
//!     Duration::from_secs(300),
//!     options,
//! )?;
//! if lock.acquire(Wait::Once)? {
//!     let fence = lock.fencing_token(); // hand this to downstream writes
//!     // ... the job ...
//!     lock.release()?;
//! } // else: the previous run is still going; skip this one
//! # Ok(())
//! # }
//! ```
//!
//! # What is stored in Redis
//!
//! | name | kind | what |
//! | --- | --- | --- |
//! | `<key>` | string key | the holder's token, `<32 hex digits>:<pid>@<host>` (128 random bits from `getrandom(2)`, then who holds it, so `GET <key>` answers "who?"), with the lock's TTL |
//! | `<key>:fence` | string key | the fencing counter: `INCR`ed by every successful acquire, never expires, never deleted by cronlock |
//! | `<key>:released` | pub/sub channel | `release()` publishes an empty message here to wake waiters |
//!
//! Every operation is one Lua script, so it is atomic and one round trip
//! (the crate's [`Script`] sends `EVALSHA` and loads the script only when the
//! server answers `NOSCRIPT`):
//!
//! - acquire: `SET <key> <token> NX PX <ttl>`; on success `INCR <key>:fence`
//!   and reply `{1, fence, ''}`. Else, if `GET <key>` is our token,
//!   `PEXPIRE <key> <ttl>` and reply `{1, GET <key>:fence, ''}` (a hold being
//!   confirmed, or a retry whose first reply was lost: nobody else `INCR`s
//!   the fence while we hold the key); otherwise reply `{0, PTTL <key>, GET
//!   <key>}` so a waiter knows when the key expires at the latest. In
//!   confirm mode (acquire on a held lock) the `SET NX` is skipped, so a lost
//!   key is reported, never silently retaken.
//! - renew: `PEXPIRE <key> <ttl>` only if `GET <key>` is still our token.
//! - release: `DEL <key>` and `PUBLISH <key>:released ""` only if `GET <key>`
//!   is still our token; replies 1 (deleted), 0 (someone else's value) or -1
//!   (no key). The publish is a `pcall`, so an ACL user without
//!   channel rights can still release (its waiters then poll).
//!
//! All three are safe to run twice, which is what lets a command whose
//! connection broke be sent again (see below).
//!
//! Any other client that takes `<key>` with `SET NX` excludes cronlock and is
//! excluded by it. Within one thread, a registry of held keys (address,
//! database, key) makes a second [`RedisLock`] on a held key busy at once,
//! and refuses to let it wait for a release only this thread could make. A key that is no longer ours (expired, then taken by
//! someone else) is never extended or deleted: `renew()`/`release()` report
//! `false` and the lock turns not held. Deleting `<key>:fence` restarts the
//! fencing counter; leave it alone. Redis Cluster is not supported (no
//! `MOVED` handling).
//!
//! # DSN
//!
//! Parsed by the redis crate: `redis://[[user]:password@]host[:port][/db]`,
//! `rediss://…` for TLS, `unix:///path/to/redis.sock` (with `?db=N`,
//! `?user=U&pass=P` as query parameters). Percent-encode reserved characters
//! in user names and passwords. No error message ever contains the password.
//!
//! # TLS
//!
//! `rediss://` verifies the server with rustls against the system's CA
//! certificates (`rustls-native-certs`); setting `SSL_CERT_FILE` (a PEM
//! bundle) or `SSL_CERT_DIR` replaces those, e.g. to trust a private CA.
//! The environment is read at each connect. `rediss://host:port/#insecure`
//! turns verification off (certificate and host name): only for testing.
//!
//! # Timeouts and failures
//!
//! [`RedisLock::new`] only parses; the connection is opened on first use,
//! within `connect_timeout` (TCP connect plus AUTH/SELECT; host names are
//! resolved by the system without a timeout). Every reply must arrive
//! within `read_timeout`. Unreachable server, refused authentication or a
//! timeout are [`Error::Connection`]; a connection that failed is dropped.
//!
//! A command that failed by I/O (an idle connection closed by the server's
//! `timeout` or a firewall, a reset, no reply within `read_timeout`, as
//! under `CLIENT PAUSE … WRITE` during a `FAILOVER`, or EINTR) is sent once
//! more on a new connection; an error reply is not. A release whose second
//! try finds no key counts as released (the first try most likely deleted
//! it; nobody else holds it). A waiter (`acquire` with a timeout) retries
//! connection failures and LOADING/BUSY/MASTERDOWN/TRYAGAIN replies 20 to
//! 100 ms apart until its deadline, then returns the last failure; a read
//! cut short by a signal for which PHP has a handler ends the wait
//! (`Ok(false)`).
//!
//! Messages say what failed in words: the address, the operation, the key
//! (cut to 200 characters) and the OS or server reason, never Rust's
//! "(os error N)" or the crate's error kinds.
//!
//! - `acquire` failing leaves the lock not held (or, on a held lock, held as
//!   far as we know). If the server executed the script but every reply was
//!   lost, the key stays until its TTL.
//! - `renew` failing keeps the lock held as far as we know: [`RedisLock::is_held`]
//!   stays true until the TTL from the last confirmed acquire or renew has
//!   passed, and a later `renew` may still succeed.
//! - `release` failing forgets the lock: it is not held any more, and the key
//!   expires by its TTL.
//!
//! # TTL
//!
//! Sent in milliseconds, rounded up (so at least 1 ms); at most 10 years
//! ([`MAX_TTL`]) — more is refused as a bad `$ttl`.
//!
//! # Auto-renew
//!
//! With [`RedisOptions::auto_renew`] a thread with its own connection renews
//! the key every ttl/3 while the lock is held. It stops when the lock is
//! released or dropped (woken at once, not after a sleep), or when it finds
//! the key is no longer ours or could not renew before the TTL ran out; the
//! lock is then lost. It always renews to the lock's TTL, also after a
//! one-off `renew(Some(ttl))`.
//!
//! # Fork
//!
//! The lock belongs to the process that acquired it. In a child made by
//! `fork()`, the lock is not held, `renew`/`release` return `false` without
//! sending anything, and dropping it sends nothing: the inherited sockets
//! are forgotten, never closed (closing a TLS session would corrupt the
//! parent's), and the parent's renewal thread, which does not exist in the
//! child, is neither joined nor signalled. The child may `acquire` on its
//! own connection.

use super::Wait;
use crate::error::{Error, Result};
use parking_lot::{Condvar, Mutex};
use redis::{
    Client, Connection, ErrorKind, IntoConnectionInfo, RedisConnectionInfo, RedisError,
    RedisResult, Script, ScriptInvocation, ServerErrorKind,
};
use std::cell::RefCell;
use std::collections::HashMap;
use std::mem;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// The longest TTL accepted: 10 years.
pub const MAX_TTL: Duration = Duration::from_secs(10 * 365 * 24 * 60 * 60);

/// Waiters retry at least this often, for holders that `DEL` the key
/// without publishing (other clients, or an ACL user without channel rights).
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Longest pause between auto-renew attempts after a failed one.
const RENEW_RETRY_MAX: Duration = Duration::from_secs(1);

const ACQUIRE_LUA: &str = r"
-- KEYS[1] lock key, KEYS[2] fence counter
-- ARGV[1] token, ARGV[2] ttl in ms, ARGV[3] '1': only confirm a hold we have
if ARGV[3] ~= '1' and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence = redis.pcall('INCR', KEYS[2])
  if type(fence) == 'table' then
    -- do not leave behind a lock the caller will never know it holds
    redis.call('DEL', KEYS[1])
    return fence
  end
  return {1, fence, ''}
end
local holder = redis.pcall('GET', KEYS[1])
if holder == ARGV[1] then
  -- Ours already: a hold being confirmed, or a retry whose first reply was
  -- lost. Nobody INCRs the fence while we hold the key, so it is still ours.
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  local fence = tonumber(redis.pcall('GET', KEYS[2]))
  return {1, fence or 0, ''}
end
-- busy: when it expires at the latest, and who holds it (for the log line)
if type(holder) ~= 'string' then holder = '' end
return {0, redis.call('PTTL', KEYS[1]), holder}
";

const RENEW_LUA: &str = r"
-- KEYS[1] lock key; ARGV[1] token, ARGV[2] ttl in ms
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
";

const RELEASE_LUA: &str = r"
-- KEYS[1] lock key; ARGV[1] token, ARGV[2] release channel
-- 1: deleted; 0: someone else's value; -1: no key at all
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('DEL', KEYS[1])
  -- pcall: a user without channel rights may still release
  redis.pcall('PUBLISH', ARGV[2], '')
  return 1
end
if holder then
  return 0
end
return -1
";

struct Scripts {
    acquire: Script,
    renew: Script,
    release: Script,
}

fn scripts() -> &'static Scripts {
    static SCRIPTS: OnceLock<Scripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| Scripts {
        acquire: Script::new(ACQUIRE_LUA),
        renew: Script::new(RENEW_LUA),
        release: Script::new(RELEASE_LUA),
    })
}

/// Whether `rediss://` DSNs work in this build (they do: rustls is built in).
pub fn tls_supported() -> bool {
    true
}

/// Connection settings of a [`RedisLock`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedisOptions {
    /// Limit for opening a connection, including AUTH and SELECT. Must be > 0.
    pub connect_timeout: Duration,
    /// Limit for each reply (and each write). Must be > 0.
    pub read_timeout: Duration,
    /// Renew the TTL from a background thread every ttl/3 while held.
    pub auto_renew: bool,
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            connect_timeout: Duration::from_secs(1),
            read_timeout: Duration::from_secs(1),
            auto_renew: false,
        }
    }
}

/// Converts a PHP `$ttl` in seconds, with the same checks as [`RedisLock::new`].
///
/// # Errors
///
/// [`Error::InvalidValue`] for `$ttl` when `seconds` is NaN, infinite, not
/// positive, or longer than [`MAX_TTL`].
pub fn ttl_from_secs(seconds: f64) -> Result<Duration> {
    let ttl = Duration::try_from_secs_f64(seconds)
        .map_err(|_| Error::value("$ttl", "must be a finite number greater than 0"))?;
    check_ttl(ttl)
}

fn check_ttl(ttl: Duration) -> Result<Duration> {
    if ttl.is_zero() {
        return Err(Error::value("$ttl", "must be greater than 0"));
    }
    if ttl > MAX_TTL {
        return Err(Error::value(
            "$ttl",
            format!("must be at most {} seconds (10 years)", MAX_TTL.as_secs()),
        ));
    }
    Ok(ttl)
}

/// The longest connect or read timeout: a day already means "never" for a
/// cron job, and it keeps deadline arithmetic far from overflow.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(86_400);

/// Refuses a zero timeout (the socket API does too) or one above
/// [`MAX_TIMEOUT`].
pub fn check_timeout(arg: &str, timeout: Duration) -> Result<Duration> {
    if timeout.is_zero() || timeout > MAX_TIMEOUT {
        return Err(Error::value(
            arg,
            "must be a number of seconds greater than 0 and at most 86400",
        ));
    }
    Ok(timeout)
}

/// Redis takes whole milliseconds; rounding up keeps a sub-millisecond TTL
/// from becoming 0, which `SET PX` refuses.
fn ttl_ms(ttl: Duration) -> u64 {
    // MAX_TTL keeps this far below u64::MAX.
    ttl.as_nanos().div_ceil(1_000_000) as u64
}

/// A lock on one Redis key. See the [module docs](self) for the protocol.
pub struct RedisLock {
    server: Server,
    key: String,
    fence_key: String,
    channel: String,
    ttl: Duration,
    options: RedisOptions,
    secrets: Secrets,
    /// Tells this lock apart from other objects on the same key in the
    /// per-thread registry of holds.
    id: u64,
    /// Its entry in that registry.
    name: LockName,
    /// The process whose sockets and thread `conn` and `hold` are.
    owner_pid: u32,
    conn: Option<Connection>,
    hold: Option<Hold>,
    /// The value of `<key>` seen by the last acquire that found it busy.
    last_holder: Option<String>,
    /// The last acquire found the key held by another object of this thread.
    busy_here: bool,
}

/// What we know about a key we acquired.
struct Hold {
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

/// Shared between the lock and its renewal thread.
struct HoldState {
    acquired_at: Instant,
    /// When the key expires at the earliest, as nanoseconds after
    /// `acquired_at`; atomic so `is_held` never blocks on a renewal.
    expires_after_ns: AtomicU64,
    lost: AtomicBool,
    /// Serializes renewals so an older reply cannot overwrite the expiry a
    /// newer one set.
    renew_gate: Mutex<()>,
    stopping: Mutex<bool>,
    stop_signal: Condvar,
}

impl HoldState {
    fn new(acquired_at: Instant, ttl: Duration) -> Self {
        let state = HoldState {
            acquired_at,
            expires_after_ns: AtomicU64::new(0),
            lost: AtomicBool::new(false),
            renew_gate: Mutex::new(()),
            stopping: Mutex::new(false),
            stop_signal: Condvar::new(),
        };
        state.extend(acquired_at, ttl);
        state
    }

    /// Records a confirmed expiry. `sent` is when the command left, so the
    /// server's expiry (counted from when it arrived) is never earlier.
    fn extend(&self, sent: Instant, ttl: Duration) {
        let after = sent.saturating_duration_since(self.acquired_at) + ttl;
        let nanos = u64::try_from(after.as_nanos()).unwrap_or(u64::MAX);
        self.expires_after_ns.store(nanos, Ordering::Release);
    }

    fn is_valid(&self) -> bool {
        let expires_after = Duration::from_nanos(self.expires_after_ns.load(Ordering::Acquire));
        !self.lost.load(Ordering::Acquire) && self.acquired_at.elapsed() < expires_after
    }

    fn signal_stop(&self) {
        *self.stopping.lock() = true;
        self.stop_signal.notify_all();
    }

    /// Sleeps until `until` or a stop request; true when asked to stop.
    fn wait_for_stop(&self, until: Instant) -> bool {
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

/// Where a key lives: the same address, database and key is the same lock.
#[derive(Clone, PartialEq, Eq, Hash)]
struct LockName {
    address: String,
    db: i64,
    key: String,
}

/// A hold registered by one lock object of this thread.
struct Registered {
    lock_id: u64,
    pid: u32,
    token: String,
    state: Weak<HoldState>,
}

thread_local! {
    /// The keys this thread holds, so that a second object on the same key
    /// answers at once instead of waiting for a release that this very
    /// thread would have to make. Per thread: ZTS threads may wait on each
    /// other.
    static HELD_HERE: RefCell<HashMap<LockName, Registered>> = RefCell::new(HashMap::new());
}

/// Why the acquire script runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `acquire(0)`: one try.
    Take,
    /// One try of a waiter.
    Wait,
    /// `acquire()` on a held lock: only confirm and extend, never take.
    Confirm,
}

/// What one run of the acquire script found.
enum Attempt {
    /// `<key>` holds our token (just set, or it already did): the fencing
    /// number, and when the attempt started (the TTL runs from later).
    Ours(i64, Instant),
    /// Someone else holds the key; it expires within this time (`None`: it
    /// has no TTL, or it is gone).
    Busy(Option<Duration>),
}

/// Shortest and longest pause of a waiter whose server fails.
const RECONNECT_BACKOFF_MIN: Duration = Duration::from_millis(20);
const RECONNECT_BACKOFF_MAX: Duration = Duration::from_millis(100);

/// Longest single sleep of a waiter, so that PHP's pending signal handlers
/// run within about this long.
const INTERRUPT_CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// How often a waiter re-subscribes after its subscription broke.
const RESUBSCRIBE_INTERVAL: Duration = Duration::from_secs(1);

impl RedisLock {
    /// Validates and parses; connects lazily on first use, so this never
    /// blocks.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidValue`] naming `$key` (empty or containing NUL), `$ttl`
    /// (zero or above [`MAX_TTL`]), `$dsn` (not a DSN the redis crate accepts;
    /// the message never contains the password) or
    /// `$options['connect_timeout']` / `$options['read_timeout']` (zero).
    pub fn new(dsn: &str, key: &str, ttl: Duration, options: RedisOptions) -> Result<Self> {
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
        // The URL parser would quietly trim or escape these.
        if dsn.bytes().any(|b| b < 0x20 || b == 0x7f) {
            return Err(Error::value(
                "$dsn",
                "must not contain NUL bytes or other control characters",
            ));
        }
        if dsn.trim() != dsn {
            return Err(Error::value(
                "$dsn",
                "must not have leading or trailing spaces",
            ));
        }
        let mut secrets = Secrets::in_dsn(dsn);
        let bad_dsn = |err: RedisError, secrets: &Secrets| {
            Error::value(
                "$dsn",
                secrets.scrub(format!(
                    "must look like redis://[[user]:password@]host[:port][/db], \
                     rediss://… or unix:///path/to/redis.sock ({})",
                    describe_failure(&err)
                )),
            )
        };
        let info = dsn
            .into_connection_info()
            .map_err(|err| bad_dsn(err, &secrets))?;
        let settings = info.redis_settings().clone();
        if settings.db() < 0 {
            return Err(Error::value("$dsn", "must not name a negative database"));
        }
        secrets.add(settings.password());
        let bare = info.set_redis_settings(RedisConnectionInfo::default().set_skip_set_lib_name());
        let server = Server {
            client: Client::open(bare).map_err(|err| bad_dsn(err, &secrets))?,
            username: settings.username().map(str::to_owned),
            password: settings.password().map(str::to_owned),
            db: settings.db(),
        };
        let name = LockName {
            address: server.client.get_connection_info().addr().to_string(),
            db: server.db,
            key: key.to_owned(),
        };
        Ok(RedisLock {
            server,
            name,
            key: key.to_owned(),
            fence_key: format!("{key}:fence"),
            channel: format!("{key}:released"),
            ttl,
            options,
            secrets,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            owner_pid: super::sys::current_pid(),
            conn: None,
            hold: None,
            last_holder: None,
            busy_here: false,
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
    /// Another object of this thread holding the same key (same address,
    /// database and key): `Ok(false)` at once for [`Wait::Once`], else
    /// [`Error::Lock`], because the wait could only end by a release this
    /// thread would have to make.
    ///
    /// While waiting it listens on `<key>:released` (a second connection,
    /// subscribed before the first retry so no release is missed) and retries at
    /// the latest when the holder's key expires, and every 50 ms for holders
    /// that delete without publishing. A server that cannot be reached or
    /// stops answering while we wait is retried (20 to 100 ms apart) until
    /// the deadline; only then is its last failure the error.
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
        if let Some(token) = self.held_by_another_object() {
            self.last_holder = Some(token);
            if wait == Wait::Once {
                self.busy_here = true;
                return Ok(false);
            }
            return Err(Error::Lock(format!(
                "{} is already held by this process (pid {}) through another \
                 CronLock\\Redis object; waiting for it would deadlock",
                self.describe(),
                super::sys::current_pid()
            )));
        }
        let token = format!(
            "{}:{}@{}",
            random_token()?,
            super::sys::current_pid(),
            super::sys::hostname()
        );
        if wait == Wait::Once {
            return match self.attempt(&token, Mode::Take)? {
                Attempt::Ours(fence, sent) => self.start_hold(token, fence, sent),
                Attempt::Busy(_) => Ok(false),
            };
        }
        self.wait_for(token, wait)
    }

    fn wait_for(&mut self, token: String, wait: Wait) -> Result<bool> {
        let mut listener = Listener::default();
        let mut backoff = RECONNECT_BACKOFF_MIN;
        loop {
            let started = Instant::now();
            let nap = match self.attempt(&token, Mode::Wait) {
                Ok(Attempt::Ours(fence, sent)) => return self.start_hold(token, fence, sent),
                Ok(Attempt::Busy(expires_in)) => {
                    backoff = RECONNECT_BACKOFF_MIN;
                    // Subscribe, then retry at once, so a release between
                    // the attempt and the subscription still wakes us.
                    if listener.subscribe(&self.server, &self.options, &self.channel) {
                        continue;
                    }
                    if wait.remaining() == Some(Duration::ZERO) {
                        return Ok(false);
                    }
                    expires_in.map_or(POLL_INTERVAL, |e| e.min(POLL_INTERVAL))
                }
                Err(Failed {
                    error,
                    transient: true,
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
            if super::interrupted() {
                return Ok(false);
            }
            let mut nap = nap;
            if let Some(remaining) = wait.remaining() {
                nap = nap.min(remaining);
            }
            // A zero read timeout is refused by the socket API.
            listener.wait(nap.clamp(Duration::from_millis(1), INTERRUPT_CHECK_INTERVAL));
            if super::interrupted() {
                return Ok(false);
            }
        }
    }

    /// One run of the acquire script (retried once on a broken connection:
    /// it is idempotent for a given token).
    fn attempt(&mut self, token: &str, mode: Mode) -> std::result::Result<Attempt, Failed> {
        let mut invocation = scripts().acquire.prepare_invoke();
        invocation
            .key(&self.key)
            .key(&self.fence_key)
            .arg(token)
            .arg(ttl_ms(self.ttl))
            .arg(if mode == Mode::Confirm { "1" } else { "0" });
        let sent = Instant::now();
        let ((acquired, number, holder), _): ((i64, i64, String), _) =
            self.run("acquire", mode == Mode::Wait, |conn| {
                invocation.invoke(conn)
            })?;
        if acquired == 1 {
            return Ok(Attempt::Ours(number, sent));
        }
        self.last_holder = Some(holder);
        // PTTL is -1 for a key without TTL, -2 for no key.
        Ok(Attempt::Busy(
            u64::try_from(number).ok().map(Duration::from_millis),
        ))
    }

    /// D1: acquire() on a held lock asks the server and extends the TTL.
    fn confirm_hold(&mut self) -> Result<bool> {
        let Some(hold) = &self.hold else {
            return Ok(false);
        };
        let token = hold.token.clone();
        let state = Arc::clone(&hold.state);
        let gate = state.renew_gate.lock();
        let sent = Instant::now();
        match self.attempt(&token, Mode::Confirm)? {
            Attempt::Ours(..) => {
                state.extend(sent, self.ttl);
                Ok(true)
            }
            Attempt::Busy(_) => {
                state.lost.store(true, Ordering::Release);
                drop(gate);
                self.forget_hold();
                Ok(false)
            }
        }
    }

    /// Records a fresh hold (the key holds `token` since after `sent`).
    fn start_hold(&mut self, token: String, fence: i64, sent: Instant) -> Result<bool> {
        let state = Arc::new(HoldState::new(sent, self.ttl));
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
        HELD_HERE.with(|held| {
            held.borrow_mut().insert(
                self.name.clone(),
                Registered {
                    lock_id: self.id,
                    pid: self.owner_pid,
                    token: token.clone(),
                    state: Arc::downgrade(&state),
                },
            )
        });
        self.hold = Some(Hold {
            token,
            fence,
            state,
            renewer,
        });
        Ok(true)
    }

    /// The token of a valid hold on this key by another object of this
    /// thread (and process); stale entries are dropped on the way.
    fn held_by_another_object(&self) -> Option<String> {
        let pid = super::sys::current_pid();
        HELD_HERE.with(|held| {
            let mut held = held.borrow_mut();
            let entry = held.get(&self.name)?;
            let live = entry.pid == pid
                && entry.lock_id != self.id
                && entry.state.upgrade().is_some_and(|state| state.is_valid());
            if live {
                Some(entry.token.clone())
            } else {
                held.remove(&self.name);
                None
            }
        })
    }

    fn spawn_renewer(
        &self,
        token: &str,
        state: &Arc<HoldState>,
    ) -> std::io::Result<JoinHandle<()>> {
        let renewal = Renewal {
            server: self.server.clone(),
            options: self.options,
            invocation: renew_invocation(&self.key, token, self.ttl),
            ttl: self.ttl,
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
        if hold.state.lost.load(Ordering::Acquire) {
            self.forget_hold();
            return Ok(false);
        }
        let state = Arc::clone(&hold.state);
        let invocation = renew_invocation(&self.key, &hold.token, ttl);
        let gate = state.renew_gate.lock();
        let sent = Instant::now();
        let (renewed, _) = self.run("renew", false, |conn| invocation.invoke::<i64>(conn))?;
        let renewed = renewed == 1;
        if renewed {
            state.extend(sent, ttl);
        } else {
            state.lost.store(true, Ordering::Release);
        }
        drop(gate);
        if !renewed {
            self.forget_hold();
        }
        Ok(renewed)
    }

    /// Deletes the key if it is still ours. `Ok(true)`: we held it and
    /// released it; `Ok(false)`: we did not hold it (never acquired, already
    /// released, lost to someone else, whose key is left alone, past its
    /// TTL without renewal, which sends nothing, or in a forked child).
    /// Either way the lock is not held afterwards.
    ///
    /// # Errors
    ///
    /// [`Error::Connection`] / [`Error::Lock`] as for [`RedisLock::acquire`];
    /// the lock is then not held and the key expires by its TTL.
    pub fn release(&mut self) -> Result<bool> {
        self.adopt_process();
        let Some(hold) = self.take_hold() else {
            return Ok(false);
        };
        // Stop the renewer now; joining waits until after the delete so
        // waiters are not kept waiting for an in-flight renewal.
        hold.state.signal_stop();
        // Lost, or its TTL ran out unrenewed: not ours to delete any more,
        // and no need to reach a server that may be gone.
        let released = if !hold.state.is_valid() {
            Ok(false)
        } else {
            self.delete_if_ours(&hold.token)
        };
        hold.finish();
        released
    }

    fn delete_if_ours(&mut self, token: &str) -> Result<bool> {
        let mut invocation = scripts().release.prepare_invoke();
        invocation.key(&self.key).arg(token).arg(&self.channel);
        match self.run("release", false, |conn| invocation.invoke::<i64>(conn))? {
            (1, _) => Ok(true),
            // No key at all after a broken connection: most likely our first
            // try deleted it and its reply was lost; nobody else holds it.
            (-1, retried) => Ok(retried),
            _ => Ok(false),
        }
    }

    /// Whether this process holds the lock as far as we know: acquired, not
    /// released, not found lost, and its TTL since the last confirmed acquire
    /// or renew has not run out. Local: no round trip.
    pub fn is_held(&self) -> bool {
        self.owner_pid == super::sys::current_pid()
            && self.hold.as_ref().is_some_and(|hold| hold.state.is_valid())
    }

    /// The token stored as the key's value; `None` when not held.
    pub fn token(&self) -> Option<&str> {
        self.current_hold().map(|hold| hold.token.as_str())
    }

    /// The fencing number of this acquisition (strictly increasing per key,
    /// across holders); `None` when not held.
    pub fn fencing_token(&self) -> Option<i64> {
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
        let db = match self.server.db {
            0 => String::new(),
            db => format!("/{db}"),
        };
        format!(
            "redis key '{}' at {}{db}",
            shorten(&self.key),
            self.server.client.get_connection_info().addr()
        )
    }

    /// Takes the hold out of this object and out of the thread's registry.
    fn take_hold(&mut self) -> Option<Hold> {
        let hold = self.hold.take()?;
        // try_with: a lock dropped while the thread's locals are torn down.
        let _ = HELD_HERE.try_with(|held| {
            let mut held = held.borrow_mut();
            if held
                .get(&self.name)
                .is_some_and(|entry| entry.lock_id == self.id)
            {
                held.remove(&self.name);
            }
        });
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
        let pid = super::sys::current_pid();
        if self.owner_pid != pid {
            mem::forget(self.conn.take());
            mem::forget(self.hold.take());
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
        command: impl FnMut(&mut Connection) -> RedisResult<T>,
    ) -> std::result::Result<(T, bool), Failed> {
        run_retrying_once(
            &mut self.conn,
            &self.server,
            &self.options,
            in_wait,
            command,
        )
        .map_err(|failure| Failed {
            error: self.error(op, &failure),
            transient: failure.is_transient(),
        })
    }

    fn error(&self, op: &str, failure: &Failure) -> Error {
        let addr = self.server.client.get_connection_info().addr();
        let key = shorten(&self.key);
        let message = match failure {
            Failure::Connect(err) if err.is_timeout() => format!(
                "cannot connect to Redis at {addr} to {op} key '{key}': no answer within {} ms",
                self.options.connect_timeout.as_millis()
            ),
            Failure::Connect(err) => format!(
                "cannot connect to Redis at {addr} to {op} key '{key}': {}",
                describe_failure(err)
            ),
            Failure::Command(err) if err.is_timeout() => format!(
                "Redis at {addr} gave no answer within {} ms to {op} key '{key}'",
                self.options.read_timeout.as_millis()
            ),
            Failure::Command(err) if err.kind() == ErrorKind::Io => format!(
                "lost the connection to Redis at {addr} while trying to {op} key '{key}': {}",
                describe_failure(err)
            ),
            Failure::Command(err) => format!(
                "Redis at {addr} refused to {op} key '{key}': {}",
                describe_failure(err)
            ),
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
        if self.hold.is_some() {
            // Nobody to tell; the key expires by its TTL.
            let _ = self.release();
        }
    }
}

/// The second connection of a waiter, subscribed to `<key>:released`.
#[derive(Default)]
struct Listener {
    conn: Option<Connection>,
    /// When we last tried to subscribe; `None`: never, or after a break.
    tried_at: Option<Instant>,
}

impl Listener {
    /// Subscribes if not subscribed and due; true when it newly did.
    /// Without a subscription, waiting falls back to polling.
    fn subscribe(&mut self, server: &Server, options: &RedisOptions, channel: &str) -> bool {
        if self.conn.is_some()
            || self
                .tried_at
                .is_some_and(|at| at.elapsed() < RESUBSCRIBE_INTERVAL)
        {
            return false;
        }
        self.tried_at = Some(Instant::now());
        let Ok(mut conn) = open(server, options) else {
            return false;
        };
        let mut pubsub = conn.as_pubsub();
        let subscribed = pubsub.subscribe(channel).is_ok();
        // Dropping a PubSub unsubscribes; the connection stays subscribed
        // until `Drop`, which lets the last one unsubscribe.
        mem::forget(pubsub);
        if subscribed {
            self.conn = Some(conn);
        }
        subscribed
    }

    /// The server went away: the subscription with it; subscribe anew
    /// once it answers.
    fn broke(&mut self) {
        if self.conn.take().is_some() {
            self.tried_at = None;
        }
    }

    /// Sleeps up to `nap`, less when a release is published.
    fn wait(&mut self, nap: Duration) {
        let Some(conn) = self.conn.as_mut() else {
            thread::sleep(nap);
            return;
        };
        let mut pubsub = conn.as_pubsub();
        let woken = pubsub
            .set_read_timeout(Some(nap))
            .and_then(|()| pubsub.get_message().map(drop));
        mem::forget(pubsub);
        match woken {
            Ok(()) => {}
            // A signal (EINTR even under SA_RESTART, since the socket has a
            // timeout) is a wake-up like the timeout, not a broken subscription.
            Err(err) if err.is_timeout() || is_interrupted(&err) => {}
            Err(_) => {
                // Keep waiting by polling; the lock's own connection reports
                // real trouble on the next attempt.
                self.conn = None;
                self.tried_at = Some(Instant::now());
            }
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.as_mut() {
            // Unsubscribes, so the server forgets us before we return.
            drop(conn.as_pubsub());
        }
    }
}

/// Replies that say the lock cannot work with this key or server, as
/// opposed to the server being unreachable or refusing us.
fn makes_lock_unusable(err: &RedisError) -> bool {
    matches!(
        err.kind(),
        ErrorKind::Server(
            ServerErrorKind::ResponseError
                | ServerErrorKind::CrossSlot
                | ServerErrorKind::ExecAbort
        ) | ErrorKind::UnexpectedReturnType
    ) || err.code() == Some("WRONGTYPE")
}

enum Failure {
    Connect(RedisError),
    Command(RedisError),
}

impl Failure {
    /// Whether a waiter should try again: the server could not be reached,
    /// the connection broke or timed out, or the server said "not now".
    fn is_transient(&self) -> bool {
        let (Failure::Connect(err) | Failure::Command(err)) = self;
        err.kind() == ErrorKind::Io
            || matches!(
                err.code(),
                Some("LOADING" | "BUSY" | "TRYAGAIN" | "MASTERDOWN")
            )
    }
}

/// A failed command: the error for PHP, and whether a wait rides it out.
struct Failed {
    error: Error,
    transient: bool,
}

impl From<Failed> for Error {
    fn from(failed: Failed) -> Self {
        failed.error
    }
}

/// Cuts a user-supplied name to 200 characters for messages.
fn shorten(name: &str) -> String {
    const LIMIT: usize = 200;
    match name.char_indices().nth(LIMIT) {
        Some((cut, _)) => format!("{}…", &name[..cut]),
        None => name.to_owned(),
    }
}

fn io_error(err: &RedisError) -> Option<&std::io::Error> {
    let source = std::error::Error::source(err)?;
    source.downcast_ref::<std::io::Error>().or_else(|| {
        source
            .downcast_ref::<Arc<dyn std::error::Error + Send + Sync>>()
            .and_then(|inner| inner.downcast_ref::<std::io::Error>())
    })
}

fn is_interrupted(err: &RedisError) -> bool {
    io_error(err).is_some_and(|io| io.kind() == std::io::ErrorKind::Interrupted)
}

/// The OS's words for an I/O error, without Rust's "(os error N)".
fn plain_io(err: &std::io::Error) -> String {
    if err.kind() == std::io::ErrorKind::UnexpectedEof {
        return "the server closed the connection".to_owned();
    }
    let text = err.to_string();
    match err.raw_os_error() {
        Some(code) => text
            .strip_suffix(&format!(" (os error {code})"))
            .map_or_else(|| text.clone(), str::to_owned),
        None => text,
    }
}

/// What went wrong, in words: the OS reason, or the server's reply with
/// the common codes explained.
fn describe_failure(err: &RedisError) -> String {
    if let Some(io) = io_error(err) {
        return plain_io(io);
    }
    let detail = err.detail().unwrap_or_default().trim();
    let with_detail = |words: &str| {
        if detail.is_empty() {
            words.to_owned()
        } else {
            format!("{words} ({detail})")
        }
    };
    match (err.kind(), err.code()) {
        (_, Some("OOM")) => "out of memory (maxmemory reached)".to_owned(),
        (_, Some("NOPERM")) => with_detail("permission denied by ACL"),
        (_, Some("READONLY")) => "it is a read-only replica".to_owned(),
        (_, Some("WRONGPASS")) | (ErrorKind::AuthenticationFailed, _) => {
            "wrong user name or password (or the user is disabled)".to_owned()
        }
        (_, Some("NOAUTH")) => "it requires a password, and the DSN has none".to_owned(),
        (_, Some("LOADING")) => "it is still loading its data set".to_owned(),
        (_, Some("BUSY")) => "it is busy running a script".to_owned(),
        (_, Some("MASTERDOWN")) => "it is a replica that lost its master".to_owned(),
        (_, Some("MOVED" | "ASK" | "CLUSTERDOWN" | "CROSSSLOT" | "TRYAGAIN")) => {
            "it is a Redis Cluster node, and cluster mode is not supported".to_owned()
        }
        (_, Some("WRONGTYPE")) => "the key holds a value of another type".to_owned(),
        (_, Some("ERR")) if !detail.is_empty() => detail.to_owned(),
        (_, Some(code)) => with_detail(&code.to_lowercase()),
        (ErrorKind::UnexpectedReturnType, _) => with_detail("unexpected reply"),
        _ => {
            // The crate's own errors read "<what> - <Kind>[: <detail>]".
            let text = err.to_string();
            match text.split_once(&format!(" - {:?}", err.kind())) {
                Some((what, rest)) => format!("{what}{rest}"),
                None => text,
            }
        }
    }
}

/// Where and as whom to connect. `client` knows only the address and TLS:
/// the redis crate would pipeline AUTH, SELECT and two `CLIENT SETINFO` and
/// wait up to the timeout for each reply, so a silent server would take
/// several times `connect_timeout`. [`open`] sends them against one deadline.
#[derive(Clone)]
struct Server {
    client: Client,
    username: Option<String>,
    password: Option<String>,
    db: i64,
}

fn open(server: &Server, options: &RedisOptions) -> RedisResult<Connection> {
    // No representable deadline means no deadline beyond the socket's own.
    let deadline = Instant::now() + options.connect_timeout;
    let mut conn = server
        .client
        .get_connection_with_timeout(options.connect_timeout)?;
    let mut handshake = |command: &redis::Cmd| -> RedisResult<()> {
        // A zero timeout is refused by the socket API.
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        conn.set_read_timeout(Some(left))?;
        conn.set_write_timeout(Some(left))?;
        command.query::<()>(&mut conn)
    };
    if let Some(password) = &server.password {
        let mut auth = redis::cmd("AUTH");
        if let Some(username) = &server.username {
            auth.arg(username);
        }
        handshake(auth.arg(password))?;
    }
    if server.db != 0 {
        handshake(redis::cmd("SELECT").arg(server.db))?;
    }
    if server.password.is_none() && server.db == 0 {
        // Something that accepts TCP is not yet a Redis that answers: find
        // out within connect_timeout, not on the first command.
        handshake(&redis::cmd("PING"))?;
    }
    conn.set_read_timeout(Some(options.read_timeout))?;
    conn.set_write_timeout(Some(options.read_timeout))?;
    Ok(conn)
}

/// Runs `command` on the connection in `slot`, opening it first if needed.
/// A connection that failed other than by an error reply is dropped: after
/// a timeout or I/O error its replies may be out of step.
fn with_connection<T>(
    slot: &mut Option<Connection>,
    server: &Server,
    options: &RedisOptions,
    command: impl FnOnce(&mut Connection) -> RedisResult<T>,
) -> std::result::Result<T, Failure> {
    let mut conn = match slot.take() {
        Some(conn) => conn,
        None => open(server, options).map_err(Failure::Connect)?,
    };
    let result = command(&mut conn);
    let in_step = match &result {
        Ok(_) => true,
        Err(err) => matches!(err.kind(), ErrorKind::Server(_) | ErrorKind::Extension),
    };
    if in_step {
        *slot = Some(conn);
    }
    result.map_err(Failure::Command)
}

/// [`with_connection`], and once more on a new connection when the command
/// failed by I/O (an idle connection the server or a firewall dropped, a
/// reset, a timeout, a signal): only for commands that may run twice. An
/// error reply is not retried. Returns whether it ran twice.
///
/// `stop_on_signal`: a read cut short by a signal for which PHP has a
/// handler pending is not retried, so that a waiter returns to PHP at once
/// (a socket read with a timeout fails with EINTR even under SA_RESTART).
fn run_retrying_once<T>(
    slot: &mut Option<Connection>,
    server: &Server,
    options: &RedisOptions,
    stop_on_signal: bool,
    mut command: impl FnMut(&mut Connection) -> RedisResult<T>,
) -> std::result::Result<(T, bool), Failure> {
    match with_connection(slot, server, options, &mut command) {
        Ok(value) => Ok((value, false)),
        Err(Failure::Command(err))
            if stop_on_signal && is_interrupted(&err) && super::interrupted() =>
        {
            Err(Failure::Command(err))
        }
        Err(Failure::Command(err)) if err.kind() == ErrorKind::Io => {
            with_connection(slot, server, options, &mut command).map(|value| (value, true))
        }
        Err(failure) => Err(failure),
    }
}

fn renew_invocation(key: &str, token: &str, ttl: Duration) -> ScriptInvocation<'static> {
    let mut invocation = scripts().renew.prepare_invoke();
    invocation.key(key).arg(token).arg(ttl_ms(ttl));
    invocation
}

/// The auto-renew thread's work; owns its own connection.
struct Renewal {
    server: Server,
    options: RedisOptions,
    invocation: ScriptInvocation<'static>,
    ttl: Duration,
}

impl Renewal {
    fn run(self, state: &HoldState) {
        let period = (self.ttl / 3).max(Duration::from_millis(1));
        let mut conn = None;
        let mut next = state.acquired_at + period;
        while !state.wait_for_stop(next) {
            let gate = state.renew_gate.lock();
            let sent = Instant::now();
            let outcome =
                run_retrying_once(&mut conn, &self.server, &self.options, false, |conn| {
                    self.invocation.invoke::<i64>(conn)
                });
            match outcome {
                Ok((1, _)) => {
                    state.extend(sent, self.ttl);
                    next = sent + period;
                }
                Ok(_) => {
                    state.lost.store(true, Ordering::Release);
                    return;
                }
                // The key has expired unrenewed: someone else may hold it.
                Err(_) if !state.is_valid() => {
                    state.lost.store(true, Ordering::Release);
                    return;
                }
                Err(_) => next = Instant::now() + period.min(RENEW_RETRY_MAX),
            }
            drop(gate);
        }
    }
}

/// 128 bits from the OS random source, hex-encoded.
fn random_token() -> Result<String> {
    let mut bytes = [0u8; 16];
    let mut filled = 0;
    while filled < bytes.len() {
        let rest = &mut bytes[filled..];
        // SAFETY: the pointer and length describe `rest`, a live buffer we
        // borrow mutably for the duration of the call.
        let read = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if read < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(Error::Lock(format!(
                "cannot read the OS random source: {}",
                plain_io(&err)
            )));
        }
        filled += read as usize;
    }
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut token = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        token.push(char::from(HEX[usize::from(byte >> 4)]));
        token.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    Ok(token)
}

/// Passwords found in a DSN, to cut out of any message that might echo them.
struct Secrets(Vec<String>);

impl Secrets {
    /// The raw forms, as written in the DSN (the decoded one is added from
    /// the parsed connection info).
    fn in_dsn(dsn: &str) -> Self {
        let mut secrets = Secrets(Vec::new());
        if let Some(url) = redis::parse_redis_url(dsn) {
            secrets.add(url.password());
            for (name, value) in url.query_pairs() {
                if name == "pass" {
                    secrets.add(Some(&value));
                }
            }
            for pair in url.query().unwrap_or_default().split('&') {
                secrets.add(pair.strip_prefix("pass="));
            }
        }
        secrets
    }

    fn add(&mut self, secret: Option<&str>) {
        if let Some(secret) = secret.filter(|secret| !secret.is_empty()) {
            self.0.push(secret.to_owned());
            // Longest first, so no part of a longer form is left behind.
            self.0.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
            self.0.dedup();
        }
    }

    fn scrub(&self, mut message: String) -> String {
        for secret in &self.0 {
            if message.contains(secret.as_str()) {
                message = message.replace(secret.as_str(), "***");
            }
        }
        message
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::fs;
    use std::net::TcpListener;
    use std::path::PathBuf;
    use std::process::{Child, Command, Stdio};
    use std::sync::atomic::AtomicUsize;

    /// Serializes the tests that set `SSL_CERT_FILE` or fork: a child forked
    /// while another thread holds std's environment lock would deadlock.
    static ENV_LOCK: Mutex<()> = Mutex::new(());

    #[derive(Clone, Copy)]
    enum Listen {
        Tcp,
        Unix,
        Tls,
    }

    /// A redis-server of our own on a free port, killed by pid on drop.
    struct TestServer {
        child: Child,
        dir: PathBuf,
        port: u16,
        listen: Listen,
        /// `user:password@` or empty, for the raw client.
        auth: String,
    }

    impl TestServer {
        fn start() -> Self {
            Self::start_with(Listen::Tcp, "", &[])
        }

        fn start_with(listen: Listen, auth: &str, extra: &[&str]) -> Self {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            // Another process may take the free port before redis binds it.
            for _ in 0..5 {
                let dir = std::env::temp_dir().join(format!(
                    "cronlock-redis-test-{}-{}",
                    super::super::sys::current_pid(),
                    NEXT.fetch_add(1, Ordering::Relaxed)
                ));
                fs::create_dir_all(&dir).unwrap();
                let port = TcpListener::bind("127.0.0.1:0")
                    .and_then(|listener| listener.local_addr())
                    .unwrap()
                    .port()
                    .to_string();
                let mut command = Command::new("redis-server");
                command
                    .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                    .arg("--dir")
                    .arg(&dir)
                    .arg("--logfile")
                    .arg(dir.join("redis.log"));
                match listen {
                    Listen::Tcp => command.args(["--port", &port]),
                    Listen::Unix => command
                        .args(["--port", "0", "--unixsocket"])
                        .arg(dir.join("redis.sock")),
                    Listen::Tls => {
                        make_certificates(&dir);
                        command
                            .args(["--port", "0", "--tls-port", &port])
                            .args(["--tls-auth-clients", "no"])
                            .arg("--tls-cert-file")
                            .arg(dir.join("server.crt"))
                            .arg("--tls-key-file")
                            .arg(dir.join("server.key"))
                            .arg("--tls-ca-cert-file")
                            .arg(dir.join("ca.crt"))
                    }
                };
                let child = command
                    .args(extra)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("redis-server must be installed");
                let mut server = TestServer {
                    child,
                    dir,
                    port: port.parse().unwrap(),
                    listen,
                    auth: auth.to_owned(),
                };
                if server.wait_until_ready() {
                    return server;
                }
            }
            panic!("redis-server did not start");
        }

        fn wait_until_ready(&mut self) -> bool {
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if self.child.try_wait().unwrap().is_some() {
                    return false;
                }
                let client = Client::open(self.raw_dsn()).unwrap();
                if let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_secs(1)) {
                    if redis::cmd("PING").query::<String>(&mut conn).is_ok() {
                        return true;
                    }
                }
                thread::sleep(Duration::from_millis(10));
            }
            false
        }

        /// The address, credentials and database of the raw client; TLS
        /// without verification.
        fn raw_dsn(&self) -> String {
            match self.listen {
                Listen::Tcp => format!("redis://{}127.0.0.1:{}", self.auth, self.port),
                Listen::Unix => format!("unix://{}", self.dir.join("redis.sock").display()),
                Listen::Tls => format!("rediss://{}127.0.0.1:{}/#insecure", self.auth, self.port),
            }
        }

        fn raw(&self) -> Connection {
            raw_client(&self.raw_dsn())
        }

        fn kill(&mut self) {
            self.child.kill().unwrap();
            self.child.wait().unwrap();
        }
    }

    impl Drop for TestServer {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
            let _ = fs::remove_dir_all(&self.dir);
        }
    }

    fn raw_client(dsn: &str) -> Connection {
        Client::open(dsn)
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(2))
            .unwrap()
    }

    /// A private CA (`ca.crt`), a server certificate it signed for
    /// 127.0.0.1 and localhost, and an unrelated CA (`other-ca.crt`).
    fn make_certificates(dir: &std::path::Path) {
        let openssl = |args: &[&str]| {
            let status = Command::new("openssl")
                .args(args)
                .current_dir(dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .expect("the TLS tests need the openssl CLI (apt-get install -y openssl)");
            assert!(status.success(), "openssl {args:?} failed");
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        for ca in ["ca", "other-ca"] {
            let (key, crt, subject) = (
                format!("{ca}.key"),
                format!("{ca}.crt"),
                format!("/CN={ca}"),
            );
            openssl(
                &[
                    &["req", "-x509", "-days", "2", "-subj", &subject][..],
                    &ec,
                    &[
                        "-keyout",
                        &key,
                        "-out",
                        &crt,
                        "-addext",
                        "basicConstraints=critical,CA:TRUE",
                        "-addext",
                        "keyUsage=critical,keyCertSign,cRLSign",
                    ],
                ]
                .concat(),
            );
        }
        openssl(
            &[
                &["req", "-subj", "/CN=localhost"][..],
                &ec,
                &["-keyout", "server.key", "-out", "server.csr"],
            ]
            .concat(),
        );
        fs::write(
            dir.join("server.ext"),
            "subjectAltName=DNS:localhost,IP:127.0.0.1\n\
             basicConstraints=critical,CA:FALSE\n\
             keyUsage=critical,digitalSignature\n\
             extendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        openssl(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-set_serial",
            "2",
            "-days",
            "2",
            "-extfile",
            "server.ext",
            "-out",
            "server.crt",
        ]);
    }

    fn new_lock(dsn: &str, key: &str, ttl: Duration) -> RedisLock {
        RedisLock::new(dsn, key, ttl, RedisOptions::default()).unwrap()
    }

    fn auto_renewing(dsn: &str, key: &str, ttl: Duration) -> RedisLock {
        let options = RedisOptions {
            auto_renew: true,
            ..RedisOptions::default()
        };
        RedisLock::new(dsn, key, ttl, options).unwrap()
    }

    fn within(timeout: Duration) -> Wait {
        Wait::Until(Instant::now() + timeout)
    }

    fn get(raw: &mut Connection, key: &str) -> Option<String> {
        redis::cmd("GET").arg(key).query(raw).unwrap()
    }

    fn pttl(raw: &mut Connection, key: &str) -> i64 {
        redis::cmd("PTTL").arg(key).query(raw).unwrap()
    }

    fn subscribers(raw: &mut Connection) -> i64 {
        let (_, count): (String, i64) = redis::cmd("PUBSUB")
            .arg(&["NUMSUB", "job:released"])
            .query(raw)
            .unwrap();
        count
    }

    fn evalsha_calls(raw: &mut Connection) -> u64 {
        let stats: String = redis::cmd("INFO").arg("commandstats").query(raw).unwrap();
        stats
            .lines()
            .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
            .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
    }

    fn connection_error(result: Result<bool>) -> String {
        match result {
            Err(Error::Connection(message)) => message,
            other => panic!("expected a connection error, got {other:?}"),
        }
    }

    fn bad_argument(result: Result<RedisLock>) -> (String, String) {
        match result {
            Err(Error::InvalidValue { arg, reason }) => (arg, reason),
            Err(other) => panic!("expected a bad value, got {other:?}"),
            Ok(_) => panic!("expected a bad value, got a lock"),
        }
    }

    #[test]
    fn new_validates_arguments_without_connecting() {
        let dsn = "redis://127.0.0.1:1";
        let ttl = Duration::from_secs(1);
        let options = RedisOptions::default();
        assert_eq!(
            bad_argument(RedisLock::new(dsn, "", ttl, options)).0,
            "$key"
        );
        assert_eq!(
            bad_argument(RedisLock::new(dsn, "a\0b", ttl, options)).0,
            "$key"
        );
        assert_eq!(
            bad_argument(RedisLock::new(dsn, "k", Duration::ZERO, options)).0,
            "$ttl"
        );
        let too_long = MAX_TTL + Duration::from_nanos(1);
        assert_eq!(
            bad_argument(RedisLock::new(dsn, "k", too_long, options)).0,
            "$ttl"
        );
        let no_connect = RedisOptions {
            connect_timeout: Duration::ZERO,
            ..options
        };
        let (arg, _) = bad_argument(RedisLock::new(dsn, "k", ttl, no_connect));
        assert_eq!(arg, "$options['connect_timeout']");
        let no_read = RedisOptions {
            read_timeout: Duration::ZERO,
            ..options
        };
        let (arg, _) = bad_argument(RedisLock::new(dsn, "k", ttl, no_read));
        assert_eq!(arg, "$options['read_timeout']");
        let endless = RedisOptions {
            connect_timeout: MAX_TIMEOUT + Duration::from_secs(1),
            ..options
        };
        let (arg, _) = bad_argument(RedisLock::new(dsn, "k", ttl, endless));
        assert_eq!(
            arg, "$options['connect_timeout']",
            "no deadline may overflow"
        );
        assert!(RedisLock::new(
            dsn,
            "k",
            ttl,
            RedisOptions {
                read_timeout: MAX_TIMEOUT,
                ..options
            }
        )
        .is_ok());

        for bad_dsn in [
            "",
            "localhost:6379",
            "http://:Sup3r-S3cret@127.0.0.1",
            "redis://:Sup3r-S3cret@127.0.0.1/notadb",
            "redis://user:Sup3r-S3cret@127.0.0.1:99999",
            "redis://:Sup3r%2DS3cret@127.0.0.1/x",
            "rediss://:Sup3r-S3cret@127.0.0.1/#verify",
            "redis://:Sup3r-S3cret@0.0.0.0",
            "unix:///tmp/redis.sock?pass=Sup3r-S3cret&db=x",
            "redis://:Sup3r-S3cret@127.0.0.1:6379\0",
            "\0redis://:Sup3r-S3cret@127.0.0.1",
            "unix:///tmp/cronlock\0.sock",
            "redis://:Sup3r-S3cret@127.0.0.1\t/0",
            " redis://:Sup3r-S3cret@127.0.0.1",
            "redis://:Sup3r-S3cret@127.0.0.1/-1",
        ] {
            let (arg, reason) = bad_argument(RedisLock::new(bad_dsn, "k", ttl, options));
            assert_eq!(arg, "$dsn", "{bad_dsn}");
            assert!(!reason.contains("S3cret"), "{bad_dsn}: {reason}");
            assert!(
                !reason.contains("InvalidClientConfig"),
                "{bad_dsn}: {reason}"
            );
        }

        // Lazy: nothing listens on port 1, yet nothing fails before acquire.
        let started = Instant::now();
        let mut lock = new_lock("redis://127.0.0.1:1", "k", ttl);
        assert_eq!(lock.release(), Ok(false));
        assert_eq!(lock.renew(None), Ok(false));
        assert!(!lock.is_held());
        assert_eq!((lock.token(), lock.fencing_token()), (None, None));
        assert_eq!((lock.key(), lock.ttl), ("k", ttl));
        drop(lock);
        assert!(started.elapsed() < Duration::from_millis(100));
        assert!(tls_supported());
    }

    #[test]
    fn ttl_conversions() {
        assert_eq!(ttl_from_secs(1.5), Ok(Duration::from_millis(1500)));
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e10] {
            assert!(
                matches!(ttl_from_secs(bad), Err(Error::InvalidValue { arg, .. }) if arg == "$ttl")
            );
        }
        assert_eq!(ttl_ms(Duration::from_nanos(1)), 1);
        assert_eq!(ttl_ms(Duration::from_millis(1)), 1);
        assert_eq!(ttl_ms(Duration::from_micros(1001)), 2);
        assert_eq!(ttl_ms(MAX_TTL), MAX_TTL.as_secs() * 1000);
    }

    #[test]
    fn scrub_removes_every_form_of_the_password() {
        let dsn = "redis://user:p%40ss@127.0.0.1/0";
        let mut secrets = Secrets::in_dsn(dsn);
        let info = dsn.into_connection_info().unwrap();
        secrets.add(info.redis_settings().password());
        assert_eq!(
            secrets.scrub("a p%40ss b p@ss c".to_owned()),
            "a *** b *** c"
        );
        let unix = Secrets::in_dsn("unix:///run/redis.sock?pass=a%2Bb&db=1");
        assert_eq!(unix.scrub("a%2Bb a+b".to_owned()), "*** ***");
    }

    #[test]
    fn acquire_contention_release() {
        let server = TestServer::start();
        let mut raw = server.raw();
        let dsn = server.raw_dsn();
        let mut a = new_lock(&dsn, "job", Duration::from_secs(10));
        let mut b = new_lock(&dsn, "job", Duration::from_secs(10));

        assert_eq!(a.acquire(Wait::Once), Ok(true));
        assert!(a.is_held());
        let token = a.token().unwrap().to_owned();
        let fence = a.fencing_token();
        let _: i64 = redis::cmd("PEXPIRE")
            .arg("job")
            .arg(2_000)
            .query(&mut raw)
            .unwrap();
        let before = evalsha_calls(&mut raw);
        assert_eq!(a.acquire(Wait::Once), Ok(true), "holding again: still ours");
        assert_eq!(evalsha_calls(&mut raw), before + 1, "asks the server, once");
        assert!(
            (9_000..=10_000).contains(&pttl(&mut raw, "job")),
            "and extends the TTL to the lock's"
        );
        assert_eq!(
            (a.token(), a.fencing_token()),
            (Some(token.as_str()), fence)
        );
        assert_eq!(get(&mut raw, "job").as_deref(), Some(token.as_str()));

        // Another object of this thread on the same key: busy at once,
        // without a round trip; a wait would deadlock and is refused.
        let before = evalsha_calls(&mut raw);
        assert_eq!(b.acquire(Wait::Once), Ok(false));
        assert!(b.busy_in_this_process());
        assert_eq!(evalsha_calls(&mut raw), before);
        match b.acquire(within(Duration::from_secs(5))) {
            Err(Error::Lock(message)) => assert!(
                message.contains("redis key 'job' at 127.0.0.1:")
                    && message.contains("is already held by this process")
                    && message.contains("waiting for it would deadlock"),
                "{message}"
            ),
            other => panic!("expected a LockException, got {other:?}"),
        }
        assert!(!b.is_held());
        assert_eq!(
            b.last_holder(),
            Some((
                super::super::sys::current_pid(),
                super::super::sys::hostname()
            )),
            "the busy reply names the holder"
        );
        assert_eq!((b.token(), b.fencing_token()), (None, None));
        assert_eq!(b.release(), Ok(false));
        assert_eq!(get(&mut raw, "job").as_deref(), Some(token.as_str()));

        assert_eq!(a.renew(Some(Duration::from_secs(30))), Ok(true));
        assert!((29_000..=30_000).contains(&pttl(&mut raw, "job")));
        assert_eq!(a.renew(None), Ok(true));
        assert!(pttl(&mut raw, "job") <= 10_000);
        assert!(matches!(
            a.renew(Some(Duration::ZERO)),
            Err(Error::InvalidValue { .. })
        ));

        assert_eq!(a.release(), Ok(true));
        assert!(!a.is_held());
        assert_eq!(a.token(), None);
        assert_eq!(get(&mut raw, "job"), None);
        assert_eq!(a.release(), Ok(false), "release is idempotent");

        assert_eq!(b.acquire(Wait::Once), Ok(true));
        drop(b);
        assert_eq!(get(&mut raw, "job"), None, "drop releases");
    }

    #[test]
    fn tokens_are_random_and_fencing_increases_across_holders() {
        let server = TestServer::start();
        let mut raw = server.raw();
        let dsn = server.raw_dsn();
        let mut locks = [
            new_lock(&dsn, "job", Duration::from_secs(10)),
            new_lock(&dsn, "job", Duration::from_secs(10)),
        ];
        let mut tokens = HashSet::new();
        let mut last_fence = 0;
        for round in 0..6 {
            let lock = &mut locks[round % 2];
            assert_eq!(lock.acquire(Wait::Once), Ok(true));
            let token = lock.token().unwrap().to_owned();
            let (random, holder) = token.split_once(':').unwrap();
            assert_eq!(random.len(), 32, "128 bits in hex");
            assert!(random.bytes().all(|b| b.is_ascii_hexdigit()));
            let pid = super::super::sys::current_pid();
            assert_eq!(holder, format!("{pid}@{}", super::super::sys::hostname()));
            assert!(tokens.insert(token));
            let fence = lock.fencing_token().unwrap();
            assert!(fence > last_fence);
            last_fence = fence;
            let counter: i64 = redis::cmd("GET").arg("job:fence").query(&mut raw).unwrap();
            assert_eq!(counter, fence);
            assert_eq!(lock.release(), Ok(true));
        }
    }

    #[test]
    fn expired_lock_taken_over_is_left_alone() {
        let server = TestServer::start();
        let mut raw = server.raw();
        let dsn = server.raw_dsn();
        let mut old = new_lock(&dsn, "job", Duration::from_millis(150));
        let mut new = new_lock(&dsn, "job", Duration::from_secs(10));
        assert_eq!(old.acquire(Wait::Once), Ok(true));
        thread::sleep(Duration::from_millis(300));
        assert!(!old.is_held(), "the TTL ran out");
        assert_eq!(old.token(), None);
        assert_eq!(new.acquire(Wait::Once), Ok(true));
        let token = new.token().unwrap().to_owned();

        assert_eq!(old.renew(None), Ok(false));
        assert_eq!(old.release(), Ok(false));
        assert!(!old.is_held());
        assert_eq!(get(&mut raw, "job").as_deref(), Some(token.as_str()));
        assert!(
            pttl(&mut raw, "job") > 9_000,
            "not shortened by the old holder"
        );
        assert!(new.is_held());
    }

    #[test]
    fn excludes_and_respects_plain_set_nx_clients() {
        let server = TestServer::start();
        let mut raw = server.raw();
        let dsn = server.raw_dsn();
        let mut lock = new_lock(&dsn, "job", Duration::from_secs(10));
        let set_nx = |raw: &mut Connection, ttl: Option<u64>| -> bool {
            let mut cmd = redis::cmd("SET");
            cmd.arg("job").arg("other").arg("NX");
            if let Some(ttl) = ttl {
                cmd.arg("PX").arg(ttl);
            }
            cmd.query::<Option<String>>(raw).unwrap().is_some()
        };

        assert!(set_nx(&mut raw, Some(10_000)));
        assert_eq!(lock.acquire(Wait::Once), Ok(false));
        assert_eq!(
            lock.last_holder(),
            None,
            "another client's value names nobody"
        );
        assert_eq!(lock.release(), Ok(false));
        assert_eq!(get(&mut raw, "job").as_deref(), Some("other"));
        let _: i64 = redis::cmd("DEL").arg("job").query(&mut raw).unwrap();

        assert_eq!(lock.acquire(Wait::Once), Ok(true));
        assert!(!set_nx(&mut raw, None));
        assert_eq!(lock.release(), Ok(true));
        assert!(set_nx(&mut raw, None), "a key without TTL");

        // A waiter gives up at its deadline...
        let started = Instant::now();
        assert_eq!(lock.acquire(within(Duration::from_millis(300))), Ok(false));
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(300) && waited < Duration::from_millis(900));

        // ...and notices a DEL that publishes nothing by polling.
        let waiter = thread::spawn(move || {
            let acquired = lock.acquire(within(Duration::from_secs(5)));
            (acquired, Instant::now())
        });
        thread::sleep(Duration::from_millis(200));
        let deleted = Instant::now();
        let _: i64 = redis::cmd("DEL").arg("job").query(&mut raw).unwrap();
        let (acquired, at) = waiter.join().unwrap();
        assert_eq!(acquired, Ok(true));
        let latency = at.saturating_duration_since(deleted);
        println!("plain DEL -> waiter holds: {latency:?}");
        assert!(latency < Duration::from_millis(500));
    }

    #[test]
    fn waiter_takes_over_on_release_and_on_expiry() {
        let server = TestServer::start();
        let mut raw = server.raw();
        let dsn = server.raw_dsn();
        let mut holder = new_lock(&dsn, "job", Duration::from_secs(10));
        let mut waiter = new_lock(&dsn, "job", Duration::from_secs(10));
        assert_eq!(holder.acquire(Wait::Once), Ok(true));

        let waiting = thread::spawn(move || {
            let acquired = waiter.acquire(within(Duration::from_secs(5)));
            (acquired, Instant::now(), waiter)
        });
        thread::sleep(Duration::from_millis(300));
        assert_eq!(
            subscribers(&mut raw),
            1,
            "the waiter listens for the release"
        );
        let released = Instant::now();
        assert_eq!(holder.release(), Ok(true));
        let (acquired, at, mut waiter) = waiting.join().unwrap();
        assert_eq!(acquired, Ok(true));
        let latency = at.saturating_duration_since(released);
        println!("release -> waiter holds: {latency:?}");
        assert!(latency < Duration::from_millis(500));
        assert_eq!(subscribers(&mut raw), 0);
        assert_eq!(get(&mut raw, "job").as_deref(), waiter.token());
        assert_eq!(waiter.release(), Ok(true));

        // A holder that died: the key's PTTL bounds the wait.
        let _: () = redis::cmd("SET")
            .arg("job")
            .arg("crashed")
            .arg("PX")
            .arg(300)
            .query(&mut raw)
            .unwrap();
        let started = Instant::now();
        assert_eq!(waiter.acquire(Wait::Forever), Ok(true));
        let waited = started.elapsed();
        println!("expiry -> waiter holds after {waited:?}");
        assert!(waited >= Duration::from_millis(200) && waited < Duration::from_secs(1));
    }

    #[test]
    fn authenticates_with_password_and_acl_user() {
        let server = TestServer::start_with(
            Listen::Tcp,
            ":Master-Pw-7x@",
            &["--requirepass", "Master-Pw-7x"],
        );
        let mut raw = server.raw();
        // Redis 7 gives new users no channel rights: PUBLISH is refused.
        let _: () = redis::cmd("ACL")
            .arg(&["SETUSER", "cron", "on", ">Cron-Pw-9z", "~*", "+@all"])
            .query(&mut raw)
            .unwrap();
        let address = format!("127.0.0.1:{}", server.port);
        let user_dsn = format!("redis://cron:Cron-Pw-9z@{address}");
        let mut as_user = raw_client(&user_dsn);
        assert!(redis::cmd("PUBLISH")
            .arg("c")
            .arg("m")
            .query::<i64>(&mut as_user)
            .is_err());

        let mut lock = new_lock(
            &format!("redis://:Master-Pw-7x@{address}"),
            "job",
            Duration::from_secs(10),
        );
        assert_eq!(lock.acquire(Wait::Once), Ok(true));
        assert_eq!(lock.release(), Ok(true));

        let mut holder = new_lock(&user_dsn, "job", Duration::from_secs(10));
        let mut waiter = new_lock(&user_dsn, "job", Duration::from_secs(10));
        assert_eq!(holder.acquire(Wait::Once), Ok(true));
        let waiting = thread::spawn(move || {
            let acquired = waiter.acquire(within(Duration::from_secs(5)));
            (acquired, Instant::now(), waiter)
        });
        thread::sleep(Duration::from_millis(200));
        let released = Instant::now();
        assert_eq!(
            holder.release(),
            Ok(true),
            "release works without PUBLISH rights"
        );
        let (acquired, at, mut waiter) = waiting.join().unwrap();
        assert_eq!(acquired, Ok(true));
        assert!(at.saturating_duration_since(released) < Duration::from_millis(500));
        assert_eq!(waiter.release(), Ok(true));

        for dsn in [
            format!("redis://:Wrong-Pw-1x@{address}"),
            format!("redis://cron:Wrong-Pw-1x@{address}"),
            format!("redis://nobody:Wrong-Pw-1x@{address}"),
            format!("redis://{address}"),
        ] {
            let mut lock = new_lock(&dsn, "job", Duration::from_secs(10));
            let started = Instant::now();
            let message = connection_error(lock.acquire(Wait::Once));
            assert!(started.elapsed() < Duration::from_secs(1));
            println!("{message}");
            for password in ["Wrong-Pw-1x", "Master-Pw-7x", "Cron-Pw-9z"] {
                assert!(!message.contains(password), "{message}");
            }
            assert!(!lock.is_held());
        }
    }

    #[test]
    fn selects_the_database() {
        let server = TestServer::start();
        let dsn = server.raw_dsn();
        let mut lock = new_lock(&format!("{dsn}/3"), "job", Duration::from_secs(10));
        assert_eq!(lock.acquire(Wait::Once), Ok(true));
        let mut db3 = raw_client(&format!("{dsn}/3"));
        assert_eq!(get(&mut db3, "job").as_deref(), lock.token());
        assert!(get(&mut db3, "job:fence").is_some());
        assert_eq!(get(&mut server.raw(), "job"), None);
        assert_eq!(lock.release(), Ok(true));
    }

    #[test]
    fn connects_over_a_unix_socket() {
        let server = TestServer::start_with(Listen::Unix, "", &["--unixsocketperm", "700"]);
        let dsn = server.raw_dsn();
        let mut a = new_lock(&dsn, "job", Duration::from_secs(10));
        let mut b = new_lock(&dsn, "job", Duration::from_secs(10));
        assert_eq!(a.acquire(Wait::Once), Ok(true));
        assert_eq!(b.acquire(Wait::Once), Ok(false));
        assert_eq!(a.release(), Ok(true));

        let mut in_db2 = new_lock(&format!("{dsn}?db=2"), "job", Duration::from_secs(10));
        assert_eq!(in_db2.acquire(Wait::Once), Ok(true));
        let mut db2 = raw_client(&format!("{dsn}?db=2"));
        assert_eq!(get(&mut db2, "job").as_deref(), in_db2.token());
        assert_eq!(b.acquire(Wait::Once), Ok(true), "db 0 is another key");
    }

    #[test]
    fn tls_verifies_with_ssl_cert_file_unless_insecure() {
        let _env = ENV_LOCK.lock();
        let server = TestServer::start_with(Listen::Tls, "", &[]);
        let verified = format!("rediss://127.0.0.1:{}", server.port);
        let previous = std::env::var_os("SSL_CERT_FILE");

        std::env::set_var("SSL_CERT_FILE", server.dir.join("ca.crt"));
        let mut a = new_lock(&verified, "job", Duration::from_secs(10));
        let mut b = new_lock(&verified, "job", Duration::from_secs(10));
        assert_eq!(a.acquire(Wait::Once), Ok(true));
        assert_eq!(b.acquire(Wait::Once), Ok(false));
        assert_eq!(a.release(), Ok(true));

        std::env::set_var("SSL_CERT_FILE", server.dir.join("other-ca.crt"));
        let mut untrusted = new_lock(&verified, "job", Duration::from_secs(10));
        let message = connection_error(untrusted.acquire(Wait::Once));
        println!("{message}");
        let mut insecure = new_lock(
            &format!("{verified}/#insecure"),
            "job",
            Duration::from_secs(10),
        );
        assert_eq!(insecure.acquire(Wait::Once), Ok(true));
        assert_eq!(insecure.release(), Ok(true));

        match previous {
            Some(value) => std::env::set_var("SSL_CERT_FILE", value),
            None => std::env::remove_var("SSL_CERT_FILE"),
        }
    }

    #[test]
    fn dead_server_fails_fast_and_forgets_on_release() {
        let mut server = TestServer::start();
        let dsn = server.raw_dsn();
        let mut released = new_lock(&dsn, "a", Duration::from_secs(10));
        let mut renewed = new_lock(&dsn, "b", Duration::from_secs(10));
        let mut expired = new_lock(&dsn, "c", Duration::from_millis(100));
        assert_eq!(released.acquire(Wait::Once), Ok(true));
        assert_eq!(renewed.acquire(Wait::Once), Ok(true));
        assert_eq!(expired.acquire(Wait::Once), Ok(true));
        server.kill();
        thread::sleep(Duration::from_millis(150));
        assert_eq!(
            expired.release(),
            Ok(false),
            "past its TTL the key is not ours: nothing to send to a dead server"
        );

        let started = Instant::now();
        connection_error(released.release());
        assert!(started.elapsed() < Duration::from_secs(1));
        assert!(!released.is_held(), "the key expires by its TTL");
        assert_eq!(released.release(), Ok(false));

        connection_error(renewed.renew(None));
        assert!(renewed.is_held(), "still ours until the TTL runs out");

        let started = Instant::now();
        let message = connection_error(released.acquire(Wait::Once));
        println!("{message}");
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn unresponsive_server_times_out() {
        // Accepts TCP connections (the kernel does) but never answers.
        let silent = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = silent.local_addr().unwrap().port();
        let options = RedisOptions {
            connect_timeout: Duration::from_millis(200),
            ..RedisOptions::default()
        };
        // AUTH and SELECT share the one connect deadline.
        for dsn in [
            format!("redis://127.0.0.1:{port}"),
            format!("redis://cron:pw@127.0.0.1:{port}/3"),
        ] {
            let mut lock = RedisLock::new(&dsn, "job", Duration::from_secs(10), options).unwrap();
            let started = Instant::now();
            let message = connection_error(lock.acquire(Wait::Once));
            let waited = started.elapsed();
            assert!(
                waited >= Duration::from_millis(150) && waited < Duration::from_millis(600),
                "{dsn}: {waited:?}"
            );
            assert!(
                message.contains("cannot connect to Redis at 127.0.0.1:")
                    && message.contains("no answer within 200 ms"),
                "{message}"
            );
        }

        let server = TestServer::start();
        let options = RedisOptions {
            read_timeout: Duration::from_millis(300),
            ..RedisOptions::default()
        };
        let mut lock =
            RedisLock::new(&server.raw_dsn(), "job", Duration::from_secs(10), options).unwrap();
        assert_eq!(lock.acquire(Wait::Once), Ok(true));
        let _: () = redis::cmd("CLIENT")
            .arg(&["PAUSE", "1500", "ALL"])
            .query(&mut server.raw())
            .unwrap();
        let paused = Instant::now();
        // No answer within read_timeout, then none to the reconnect's PING
        // within connect_timeout.
        let message = connection_error(lock.renew(None));
        let waited = paused.elapsed();
        assert!(
            waited >= Duration::from_millis(1250) && waited < Duration::from_millis(2500),
            "{waited:?}"
        );
        assert!(message.contains("no answer within 1000 ms"), "{message}");
        assert!(lock.is_held());
        thread::sleep(Duration::from_millis(1600).saturating_sub(paused.elapsed()));
        assert_eq!(lock.renew(None), Ok(true), "reconnects");
    }

    #[test]
    fn auto_renew_keeps_the_lock_until_release() {
        let server = TestServer::start();
        let mut raw = server.raw();
        let dsn = server.raw_dsn();
        let mut lock = auto_renewing(&dsn, "job", Duration::from_millis(300));
        assert_eq!(lock.acquire(Wait::Once), Ok(true));
        let token = lock.token().unwrap().to_owned();
        for _ in 0..15 {
            thread::sleep(Duration::from_millis(100));
            assert!(lock.is_held());
            assert_eq!(get(&mut raw, "job").as_deref(), Some(token.as_str()));
        }
        assert_eq!(lock.release(), Ok(true));
        let calls = evalsha_calls(&mut raw);
        thread::sleep(Duration::from_millis(350));
        assert_eq!(evalsha_calls(&mut raw), calls, "the renewer stopped");

        // A renewer sleeping for 10 s is woken at once by release and drop.
        let mut lock = auto_renewing(&dsn, "job", Duration::from_secs(30));
        assert_eq!(lock.acquire(Wait::Once), Ok(true));
        let started = Instant::now();
        assert_eq!(lock.release(), Ok(true));
        assert!(started.elapsed() < Duration::from_millis(300));
        assert_eq!(lock.acquire(Wait::Once), Ok(true));
        let started = Instant::now();
        drop(lock);
        assert!(started.elapsed() < Duration::from_millis(300));
        assert_eq!(get(&mut raw, "job"), None);
    }

    #[test]
    fn auto_renew_notices_a_lost_lock() {
        let server = TestServer::start();
        let mut raw = server.raw();
        let mut lock = auto_renewing(&server.raw_dsn(), "job", Duration::from_millis(300));
        assert_eq!(lock.acquire(Wait::Once), Ok(true));
        let _: () = redis::cmd("SET")
            .arg("job")
            .arg("intruder")
            .query(&mut raw)
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(2);
        while lock.is_held() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(10));
        }
        assert!(!lock.is_held());
        assert_eq!(lock.renew(None), Ok(false));
        assert_eq!(lock.release(), Ok(false));
        assert_eq!(get(&mut raw, "job").as_deref(), Some("intruder"));
    }

    #[test]
    fn fence_counter_of_the_wrong_type_leaves_no_lock_behind() {
        let server = TestServer::start();
        let mut raw = server.raw();
        let _: i64 = redis::cmd("HSET")
            .arg(&["job:fence", "f", "v"])
            .query(&mut raw)
            .unwrap();
        let mut lock = new_lock(&server.raw_dsn(), "job", Duration::from_secs(10));
        assert!(matches!(lock.acquire(Wait::Once), Err(Error::Lock(_))));
        assert!(!lock.is_held());
        assert_eq!(get(&mut raw, "job"), None);
    }

    /// Waits for a forked child; kills it if it hangs.
    fn exit_status(pid: libc::pid_t) -> i32 {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut status = 0;
        loop {
            // SAFETY: `pid` is our child and `status` a live c_int.
            let done = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if done == pid {
                return if libc::WIFEXITED(status) {
                    libc::WEXITSTATUS(status)
                } else {
                    -1
                };
            }
            if Instant::now() > deadline {
                // SAFETY: signalling our own child, then reaping it.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                return -2;
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn forked_child_never_touches_the_parents_lock() {
        let _env = ENV_LOCK.lock();
        // TLS: had the child written to or closed the shared session, the
        // parent's next command on it would fail.
        let server = TestServer::start_with(Listen::Tls, "", &[]);
        let mut raw = server.raw();
        let mut lock = auto_renewing(&server.raw_dsn(), "job", Duration::from_secs(5));
        assert_eq!(lock.acquire(Wait::Once), Ok(true));
        let token = lock.token().unwrap().to_owned();

        for uses_the_lock in [false, true] {
            // SAFETY: the child only runs the lock's fork-aware code and
            // leaves by _exit, without running the test harness's code.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0);
            if pid == 0 {
                let inert = !uses_the_lock
                    || (!lock.is_held()
                        && lock.token().is_none()
                        && lock.renew(None) == Ok(false)
                        && lock.release() == Ok(false)
                        && lock.acquire(Wait::Once) == Ok(false));
                drop(lock);
                // SAFETY: ends the child without unwinding or atexit handlers.
                unsafe { libc::_exit(if inert { 0 } else { 1 }) }
            }
            assert_eq!(exit_status(pid), 0);
            assert_eq!(get(&mut raw, "job").as_deref(), Some(token.as_str()));
            assert!(lock.is_held());
            assert_eq!(lock.renew(None), Ok(true), "the TLS session is intact");
        }
        assert_eq!(lock.release(), Ok(true));
    }

    #[test]
    fn acquire_on_a_held_lock_asks_the_server() {
        let server = TestServer::start();
        let mut raw = server.raw();
        let dsn = server.raw_dsn();
        let mut a = new_lock(&dsn, "job", Duration::from_secs(10));
        assert_eq!(a.acquire(Wait::Once), Ok(true));
        let _: i64 = redis::cmd("DEL").arg("job").query(&mut raw).unwrap();
        assert_eq!(
            a.acquire(Wait::Once),
            Ok(false),
            "the key is gone: the hold is lost"
        );
        assert!(!a.is_held());
        assert_eq!(get(&mut raw, "job"), None, "and not silently retaken");
        assert_eq!(a.acquire(Wait::Once), Ok(true), "a new acquire takes it");

        let _: () = redis::cmd("SET")
            .arg(&["job", "intruder"])
            .query(&mut raw)
            .unwrap();
        assert_eq!(a.acquire(within(Duration::from_secs(1))), Ok(false));
        assert!(!a.is_held());
        assert_eq!(get(&mut raw, "job").as_deref(), Some("intruder"));
        assert_eq!(a.release(), Ok(false));

        // A second object may take the key once the first lost it.
        let _: i64 = redis::cmd("DEL").arg("job").query(&mut raw).unwrap();
        let mut b = new_lock(&dsn, "job", Duration::from_secs(10));
        assert_eq!(a.acquire(Wait::Once), Ok(true));
        let _: i64 = redis::cmd("DEL").arg("job").query(&mut raw).unwrap();
        assert_eq!(a.acquire(Wait::Once), Ok(false));
        assert_eq!(b.acquire(Wait::Once), Ok(true));
        assert!(!b.busy_in_this_process());
    }

    #[test]
    fn a_connection_the_server_dropped_is_retried_once() {
        let server = TestServer::start_with(Listen::Tcp, "", &["--timeout", "1"]);
        let dsn = server.raw_dsn();
        let mut lock = auto_renewing(&dsn, "job", Duration::from_secs(30));
        let mut renewed = new_lock(&dsn, "other", Duration::from_secs(30));
        assert_eq!(lock.acquire(Wait::Once), Ok(true));
        assert_eq!(renewed.acquire(Wait::Once), Ok(true));
        // Idle for longer than the server's timeout: it closes both.
        thread::sleep(Duration::from_millis(2_500));
        assert_eq!(renewed.renew(None), Ok(true));
        assert_eq!(renewed.acquire(Wait::Once), Ok(true));
        assert_eq!(lock.release(), Ok(true));
        assert_eq!(get(&mut server.raw(), "job"), None);
        thread::sleep(Duration::from_millis(2_500));
        assert_eq!(renewed.release(), Ok(true));
        assert_eq!(get(&mut server.raw(), "other"), None);
    }

    #[test]
    fn a_waiter_rides_out_a_server_restart() {
        let mut server = TestServer::start();
        let dsn = server.raw_dsn();
        let _: () = redis::cmd("SET")
            .arg(&["job", "other"])
            .query(&mut server.raw())
            .unwrap();
        let mut waiter = new_lock(&dsn, "job", Duration::from_secs(10));
        let waiting = thread::spawn(move || {
            let acquired = waiter.acquire(within(Duration::from_secs(20)));
            (acquired, waiter)
        });
        thread::sleep(Duration::from_millis(300));
        server.kill();
        thread::sleep(Duration::from_millis(700));
        let port = server.port.to_string();
        let restarted = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--port", &port])
            .arg("--dir")
            .arg(&server.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        server.child = restarted;
        assert!(server.wait_until_ready());
        let (acquired, waiter) = waiting.join().unwrap();
        assert_eq!(acquired, Ok(true));
        assert_eq!(get(&mut server.raw(), "job").as_deref(), waiter.token());
    }

    #[test]
    fn messages_say_what_happened_in_words() {
        let mut server = TestServer::start();
        let dsn = server.raw_dsn();
        let long_key = "k".repeat(1_000);
        let mut lock = new_lock(&dsn, &long_key, Duration::from_secs(10));
        let mut raw = server.raw();
        let _: () = redis::cmd("CONFIG")
            .arg(&["SET", "maxmemory", "1"])
            .query(&mut raw)
            .unwrap();
        let message = connection_error(lock.acquire(Wait::Once));
        assert!(
            message.contains("refused to acquire key 'kkk")
                && message.contains("…': out of memory (maxmemory reached)")
                && !message.contains(&"k".repeat(201)),
            "{message}"
        );
        let _: () = redis::cmd("CONFIG")
            .arg(&["SET", "maxmemory", "0"])
            .query(&mut raw)
            .unwrap();
        let _: () = redis::cmd("ACL")
            .arg(&[
                "SETUSER", "cron", "on", ">pw", "~*", "+@all", "-evalsha", "-eval",
            ])
            .query(&mut raw)
            .unwrap();
        let mut denied = new_lock(
            &format!("redis://cron:pw@127.0.0.1:{}", server.port),
            "job",
            Duration::from_secs(10),
        );
        let message = connection_error(denied.acquire(Wait::Once));
        assert!(
            message.contains(": permission denied by ACL ("),
            "{message}"
        );
        let _: () = redis::cmd("REPLICAOF")
            .arg(&["127.0.0.1", "1"])
            .query(&mut raw)
            .unwrap();
        let message =
            connection_error(new_lock(&dsn, "job", Duration::from_secs(1)).acquire(Wait::Once));
        assert!(
            message.ends_with(": it is a read-only replica"),
            "{message}"
        );
        server.kill();
        let message = connection_error(lock.acquire(Wait::Once));
        assert!(
            message.starts_with("cannot connect to Redis at 127.0.0.1:")
                && message.ends_with(": Connection refused"),
            "{message}"
        );
        assert!(!message.contains("os error"), "{message}");
    }
}

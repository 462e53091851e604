//! A named lock on a database server: MySQL/MariaDB `GET_LOCK()` or a
//! PostgreSQL session-level advisory lock. The lock belongs to one
//! connection (session) and the server frees it when that session ends, so
//! a killed holder never blocks the next run.
//!
//! This module holds the lock logic only: the state machine, the mapping of
//! a name to the server's lock, the SQL, error classification and the
//! sliced waits. It talks to the server through [`Session`], which the PHP
//! layer implements over a `\PDO` (the user's, or one of the lock's own).
//!
//! # Names
//!
//! MySQL/MariaDB: a name of 1 to 64 bytes of printable ASCII without
//! upper-case letters (`[\x20-\x40\x5b-\x7e]`) that does not start with
//! `cronlock:` is the server's lock name as is (`SELECT GET_LOCK('nightly-report', 0)`).
//! Any other name becomes `cronlock:` followed by the 40 hex digits of the
//! SHA-1 of its bytes (`SELECT GET_LOCK(CONCAT('cronlock:', SHA1('Nightly Report')), 0)`):
//! MySQL folds lock names to lower case and refuses more than 64
//! characters, so only hashing keeps "compared byte for byte" on every
//! server, and the two forms can never meet.
//!
//! PostgreSQL: the advisory key is the first 64 bits of the MD5 of the
//! name's bytes, as a signed big-endian bigint:
//! `SELECT pg_try_advisory_lock(('x' || left(md5('nightly-report'), 16))::bit(64)::bigint)`.
//! 64 bits make an accidental collision between a shop's names negligible
//! (hashtext() has 32 bits and is not promised stable across releases).
//! Advisory locks are per database: both sides must be connected to the
//! same database.

pub use super::sys::InterruptFlag;
use super::{sys, Refusal, Wait};
use crate::error::{Error, Result};
use std::cell::RefCell;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Longest single blocking wait on the server, so that PHP signal handlers
/// run within about this long.
pub const WAIT_SLICE: Duration = Duration::from_millis(100);

/// How long a statement on a connection the lock opened itself may go
/// unanswered (beyond the server-side wait it asks for) before the lock cuts
/// the connection (see [`watch_statement`]): far more than any of its
/// statements takes on a server that works, short enough that a frozen
/// server or a network black hole ends a wait.
pub const ANSWER_GRACE: Duration = Duration::from_secs(10);

/// A wait statement on a server that works answers within its slice and a
/// round trip; with a PHP signal handler pending, one still unanswered this
/// long after its slice is cut, so the handler runs.
const INTERRUPT_GRACE: Duration = Duration::from_millis(50);

const HASHED_PREFIX: &str = "cronlock:";
const MYSQL_NAME_MAX: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    MySql,
    Postgres,
}

impl Flavor {
    /// The flavor for a PDO driver name.
    ///
    /// # Errors
    ///
    /// [`Error::Lock`] naming any driver other than `mysql` and `pgsql`.
    pub fn from_driver(driver: &str) -> Result<Self> {
        match driver {
            "mysql" => Ok(Flavor::MySql),
            "pgsql" => Ok(Flavor::Postgres),
            other => Err(Error::Lock(format!(
                "CronLock\\Database supports the PDO drivers mysql and pgsql, not '{}'",
                cut(other)
            ))),
        }
    }

    pub fn product(self) -> &'static str {
        match self {
            Flavor::MySql => "MySQL/MariaDB",
            Flavor::Postgres => "PostgreSQL",
        }
    }
}

/// The server-side name of a lock: what `GET_LOCK` or the advisory lock
/// functions get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    MySql(String),
    Postgres(i64),
}

impl Target {
    pub fn new(flavor: Flavor, name: &str) -> Self {
        match flavor {
            Flavor::MySql => Target::MySql(mysql_lock_name(name.as_bytes())),
            Flavor::Postgres => Target::Postgres(postgres_key(name.as_bytes())),
        }
    }

    /// The one query parameter naming the lock.
    fn param(&self) -> String {
        match self {
            Target::MySql(name) => name.clone(),
            Target::Postgres(key) => key.to_string(),
        }
    }

    /// How a DBA sees it: `GET_LOCK` name or `advisory key N`.
    pub fn describe(&self) -> String {
        match self {
            Target::MySql(name) => format!("GET_LOCK name '{}'", cut(name)),
            Target::Postgres(key) => format!("advisory key {key}"),
        }
    }
}

/// The MySQL/MariaDB lock name for `name` (see the module docs).
pub fn mysql_lock_name(name: &[u8]) -> String {
    let plain = !name.is_empty()
        && name.len() <= MYSQL_NAME_MAX
        && !name.starts_with(HASHED_PREFIX.as_bytes())
        && name
            .iter()
            .all(|&b| (0x20..=0x7e).contains(&b) && !b.is_ascii_uppercase());
    if plain {
        // Checked above: ASCII only.
        return String::from_utf8_lossy(name).into_owned();
    }
    format!("{HASHED_PREFIX}{}", sha1_smol::Sha1::from(name).digest())
}

/// The PostgreSQL advisory key for `name`:
/// `('x' || left(md5(name), 16))::bit(64)::bigint`.
pub fn postgres_key(name: &[u8]) -> i64 {
    let digest = md5(name);
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

/// A value in a result row, as PDO hands it over.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Int(i64),
    Text(String),
}

impl Value {
    /// Integers, booleans (PostgreSQL, as 0/1) and numeric strings.
    pub fn int(&self) -> Option<i64> {
        match self {
            Value::Null => None,
            Value::Int(i) => Some(*i),
            Value::Text(t) => match t.as_str() {
                "t" | "true" => Some(1),
                "f" | "false" => Some(0),
                t => t.trim().parse().ok(),
            },
        }
    }

    pub fn text(&self) -> Option<String> {
        match self {
            Value::Null => None,
            Value::Int(i) => Some(i.to_string()),
            Value::Text(t) => Some(t.clone()),
        }
    }
}

/// A failed statement or connect, as PDO reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlError {
    /// SQLSTATE, e.g. `HY000`, `08006`, `55P03`.
    pub sqlstate: String,
    /// The driver's own error number (MySQL: 2006, 1045, ...).
    pub code: Option<i64>,
    /// The server's or client library's words, without PDO's prefixes and
    /// never with a password.
    pub message: String,
    /// Whether it happened while opening a connection.
    pub connecting: bool,
}

impl SqlError {
    /// Whether the session is gone (killed, server restarted or away): a
    /// lock it held is no longer held.
    pub fn lost_connection(&self, flavor: Flavor) -> bool {
        if self.connecting {
            return true;
        }
        match flavor {
            // 2006 gone away, 2013 lost during query, 2055 lost at reading,
            // 1927 connection killed (MariaDB), 1053 server shutdown,
            // 4031 disconnected for inactivity (MySQL 8).
            Flavor::MySql => matches!(self.code, Some(2006 | 2013 | 2055 | 1927 | 1053 | 4031)),
            Flavor::Postgres => {
                self.sqlstate.starts_with("08")
                    || matches!(self.sqlstate.as_str(), "57P01" | "57P02" | "57P03")
                    || self.message.contains("server closed the connection")
                    || self.message.contains("no connection to the server")
                    || self.message.contains("terminating connection")
            }
        }
    }
}

impl SqlError {
    /// What the user must do to their PDO before a statement can release
    /// the lock on it, for the two states a job typically leaves it in.
    fn release_advice(&self, flavor: Flavor) -> &'static str {
        match flavor {
            // 25P02: "current transaction is aborted, commands ignored
            // until end of transaction block".
            Flavor::Postgres if self.sqlstate == "25P02" => {
                "roll back the transaction ($pdo->rollBack())"
            }
            // 2014: "Cannot execute queries while other unbuffered queries
            // are active" (the driver's words carry no code of their own).
            Flavor::MySql
                if self.code == Some(2014) || self.message.contains("unbuffered queries") =>
            {
                "fetch the rest of the open result set or close it ($statement->closeCursor())"
            }
            _ => "make the PDO usable again",
        }
    }
}

/// One connection to the server, as the lock needs it.
pub trait Session {
    /// Runs one statement with string parameters (`?` placeholders) and
    /// returns its first row (empty when there is none). Opens the
    /// connection first when the session owns one and has none open.
    ///
    /// # Errors
    ///
    /// The statement's or the connect's [`SqlError`].
    fn query(&mut self, sql: &str, params: &[&str]) -> std::result::Result<Vec<Value>, SqlError>;

    /// [`Session::query`] for a statement that waits up to `slice` on the
    /// server (GET_LOCK with a timeout, pg_advisory_lock under
    /// lock_timeout): it may take that long before the server answers.
    ///
    /// # Errors
    ///
    /// As for [`Session::query`].
    fn wait_query(
        &mut self,
        sql: &str,
        params: &[&str],
        slice: Duration,
    ) -> std::result::Result<Vec<Value>, SqlError> {
        let _ = slice;
        self.query(sql, params)
    }

    /// Whether a transaction is open on the connection (PostgreSQL waits
    /// then use a savepoint, so a timed-out slice does not abort it).
    fn in_transaction(&mut self) -> bool;

    /// Whether [`Session::disconnect`] lets the next query open a new
    /// connection (a DSN lock's own connection), rather than the user's PDO.
    fn owns_connection(&self) -> bool;

    /// Forgets (closes) a lost or suspect connection; the next query opens a
    /// new one when the session owns its connection. A user's PDO is left
    /// alone.
    fn disconnect(&mut self);

    /// Whether a PHP signal handler ran since the last call (the engine runs
    /// pending handlers when a PDO call returns, so the flag the wait loop
    /// checks may already be consumed): a wait then gives up like one cut
    /// short by a signal. Reading clears it.
    fn signal_handled(&mut self) -> bool;

    /// "MySQL/MariaDB at mysql:host=db1" or "the PDO given": for messages.
    /// Never contains a password.
    fn label(&self) -> String;
}

/// What the server says about the connection we talk on.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SessionInfo {
    /// Which server (and PostgreSQL database) the connection reaches: two
    /// objects on the same server and name in one thread must not wait on
    /// each other.
    server: String,
    /// MySQL `CONNECTION_ID()`, PostgreSQL `pg_backend_pid()`.
    id: i64,
}

/// Who holds a lock that is busy, as far as the server tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// MySQL connection id or PostgreSQL backend pid.
    pub session: i64,
    /// MySQL: `user@host:port` from the process list; PostgreSQL: the
    /// client address. `None` when our user may not see it.
    pub client: Option<String>,
    /// PostgreSQL `application_name` (cronlock's own connections set
    /// `cronlock pid N on HOST`).
    pub application: Option<String>,
}

impl Holder {
    pub fn describe(&self, flavor: Flavor) -> String {
        let mut text = match flavor {
            Flavor::MySql => format!("MySQL connection {}", self.session),
            Flavor::Postgres => format!("PostgreSQL backend pid {}", self.session),
        };
        if let Some(app) = self.application.as_deref().filter(|a| !a.is_empty()) {
            let _ = write!(text, " ({})", cut(app));
        }
        if let Some(client) = self.client.as_deref().filter(|c| !c.is_empty()) {
            let _ = write!(text, " from {}", cut(client));
        }
        text
    }
}

#[derive(Debug)]
struct Hold {
    session: i64,
}

static NEXT_OBJECT: AtomicU64 = AtomicU64::new(1);

/// A held lock of this thread, for the "another object holds it" check.
struct Held {
    pid: u32,
    server: String,
    target: Target,
    object: u64,
}

thread_local! {
    static HELD: RefCell<Vec<Held>> = const { RefCell::new(Vec::new()) };
}

fn held_elsewhere(server: &str, target: &Target, object: u64) -> bool {
    let pid = sys::current_pid();
    HELD.with(|held| {
        held.borrow().iter().any(|h| {
            h.pid == pid && h.object != object && h.server == server && h.target == *target
        })
    })
}

fn register_hold(server: &str, target: &Target, object: u64) {
    HELD.with(|held| {
        let mut held = held.borrow_mut();
        // Entries of a parent process are copies nobody holds.
        let pid = sys::current_pid();
        held.retain(|h| h.pid == pid);
        held.push(Held {
            pid,
            server: server.to_owned(),
            target: target.clone(),
            object,
        });
    });
}

fn unregister_hold(object: u64) {
    HELD.with(|held| held.borrow_mut().retain(|h| h.object != object));
}

/// The lock state of one `CronLock\Database` object.
#[derive(Debug)]
pub struct DatabaseLock {
    flavor: Flavor,
    name: String,
    target: Target,
    object: u64,
    owner_pid: u32,
    info: Option<SessionInfo>,
    hold: Option<Hold>,
    /// Why the last `acquire` returned false.
    refusal: Option<Refusal>,
}

impl DatabaseLock {
    /// # Errors
    ///
    /// [`Error::InvalidValue`] naming `$name` when it is empty or contains a
    /// NUL byte.
    pub fn new(flavor: Flavor, name: &str) -> Result<Self> {
        if name.is_empty() {
            return Err(Error::value("$name", "must not be empty"));
        }
        if name.contains('\0') {
            return Err(Error::value("$name", "must not contain NUL bytes"));
        }
        Ok(DatabaseLock {
            flavor,
            name: name.to_owned(),
            target: Target::new(flavor, name),
            object: NEXT_OBJECT.fetch_add(1, Ordering::Relaxed),
            owner_pid: sys::current_pid(),
            info: None,
            hold: None,
            refusal: None,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn flavor(&self) -> Flavor {
        self.flavor
    }

    pub fn target(&self) -> &Target {
        &self.target
    }

    /// "'name' (MySQL/MariaDB at mysql:host=db)", for messages: after
    /// "lock" in errors and in the busy line of cron_guard().
    pub fn describe(&self, session: &dyn Session) -> String {
        match &self.target {
            Target::MySql(plain) if *plain == self.name => {
                format!("'{}' ({})", cut(&self.name), session.label())
            }
            target => format!(
                "'{}' ({}, {})",
                cut(&self.name),
                session.label(),
                target.describe()
            ),
        }
    }

    /// Whether another object of this thread holds the same lock (as far
    /// as this object has talked to the server), for the busy line.
    pub fn held_by_another_object(&self) -> bool {
        self.info
            .as_ref()
            .is_some_and(|info| held_elsewhere(&info.server, &self.target, self.object))
    }

    /// What this object believes: acquired in this process, not released,
    /// not found lost. No round trip.
    pub fn is_held(&self) -> bool {
        self.owner_pid == sys::current_pid() && self.hold.is_some()
    }

    /// Takes the lock, waiting as `wait` says, in slices of at most
    /// [`WAIT_SLICE`] on the server's own blocking wait, giving up early
    /// (false) when [`super::interrupted`] says so. On a lock this object
    /// holds it asks the server whether this session still holds it:
    /// false (and not held any more) when it does not.
    ///
    /// # Errors
    ///
    /// [`Error::Connection`] when the server cannot be reached or the
    /// connection is lost while trying; [`Error::Lock`] for another failure,
    /// and when another object of this thread holds the lock and `wait`
    /// would wait (it would wait for itself).
    pub fn acquire(&mut self, session: &mut dyn Session, wait: Wait) -> Result<bool> {
        self.refusal = None;
        let acquired = self.try_acquire(session, wait)?;
        if !acquired && self.refusal.is_none() {
            self.refusal = Some(Refusal::Contended);
        }
        Ok(acquired)
    }

    /// Why the last [`DatabaseLock::acquire`] returned false; `None` after
    /// one that returned true.
    pub fn refusal(&self) -> Option<Refusal> {
        self.refusal
    }

    fn try_acquire(&mut self, session: &mut dyn Session, wait: Wait) -> Result<bool> {
        self.adopt_process(session);
        if self.hold.is_some() {
            let confirmed = self.confirm(session)?;
            if !confirmed {
                self.refusal = Some(Refusal::Lost);
            }
            return Ok(confirmed);
        }
        let info = match self.session_info(session) {
            Ok(info) => info,
            Err(err)
                if err.lost_connection(self.flavor)
                    && !err.connecting
                    && session.owns_connection() =>
            {
                // A connection of ours that died while idle (server
                // restart, wait_timeout): open a new one, once. (One that
                // could not be opened just now is not tried again.)
                self.forget_session(session);
                self.session_info(session)
                    .map_err(|err| self.error(session, "cannot reach", &err))?
            }
            Err(err) => return Err(self.error(session, "cannot reach", &err)),
        };
        if held_elsewhere(&info.server, &self.target, self.object) {
            if wait == Wait::Once {
                self.refusal = Some(Refusal::HeldByThisThread);
                return Ok(false);
            }
            return Err(Error::Lock(format!(
                "lock {} is already held by this process (pid {}) through another \
                 CronLock\\Database object; waiting for it would deadlock",
                self.describe(session),
                sys::current_pid()
            )));
        }
        session.signal_handled();
        let acquired = self.try_once(session, wait)?;
        if acquired || wait == Wait::Once || self.refusal == Some(Refusal::Interrupted) {
            return self.finish_acquire(acquired, &info);
        }
        let acquired = self.wait(session, wait)?;
        self.finish_acquire(acquired, &info)
    }

    fn finish_acquire(&mut self, acquired: bool, info: &SessionInfo) -> Result<bool> {
        if acquired {
            self.hold = Some(Hold { session: info.id });
            register_hold(&info.server, &self.target, self.object);
        }
        Ok(acquired)
    }

    /// The first try of an acquire; part of the wait (which a pending signal
    /// handler may cut short) unless `wait` is [`Wait::Once`].
    fn try_once(&mut self, session: &mut dyn Session, wait: Wait) -> Result<bool> {
        let param = self.target.param();
        let sql = match self.flavor {
            Flavor::MySql => "SELECT GET_LOCK(?, 0)",
            Flavor::Postgres => "SELECT pg_try_advisory_lock(?::bigint)",
        };
        let row = if wait == Wait::Once {
            session.query(sql, &[&param])
        } else {
            session.wait_query(sql, &[&param], Duration::ZERO)
        };
        match row {
            Ok(row) => self.lock_result(session, &row),
            Err(err) if self.cut_short_by_signal(session, &err) => Ok(false),
            Err(err) => Err(self.fail(session, "cannot acquire", &err)),
        }
    }

    /// A wait whose connection broke while a PHP signal handler was due (a
    /// signal can break a blocking read of the client library, and a
    /// connection of our own is cut for it): given up like one cut short by
    /// the signal, the connection forgotten.
    fn cut_short_by_signal(&mut self, session: &mut dyn Session, err: &SqlError) -> bool {
        if (super::interrupted() || session.signal_handled()) && err.lost_connection(self.flavor) {
            self.forget_session(session);
            self.refusal = Some(Refusal::Interrupted);
            return true;
        }
        false
    }

    /// GET_LOCK: 1 acquired, 0 timed out, NULL an error (e.g. killed).
    fn lock_result(&self, session: &dyn Session, row: &[Value]) -> Result<bool> {
        match row.first().and_then(Value::int) {
            Some(1) => Ok(true),
            Some(0) => Ok(false),
            _ => Err(Error::Lock(format!(
                "cannot acquire lock {}: the server answered NULL (was the query killed?)",
                self.describe(session)
            ))),
        }
    }

    fn wait(&mut self, session: &mut dyn Session, wait: Wait) -> Result<bool> {
        match self.flavor {
            Flavor::MySql => self.wait_mysql(session, wait),
            Flavor::Postgres => self.wait_postgres(session, wait),
        }
    }

    fn wait_mysql(&mut self, session: &mut dyn Session, wait: Wait) -> Result<bool> {
        let param = self.target.param();
        loop {
            if super::interrupted() || session.signal_handled() {
                self.refusal = Some(Refusal::Interrupted);
                return Ok(false);
            }
            let Some(slice) = next_slice(wait) else {
                return Ok(false);
            };
            let seconds = format!("{:.3}", slice.as_secs_f64());
            match session.wait_query("SELECT GET_LOCK(?, ?)", &[&param, &seconds], slice) {
                Ok(row) => {
                    if self.lock_result(session, &row)? {
                        return Ok(true);
                    }
                }
                Err(err) if self.cut_short_by_signal(session, &err) => return Ok(false),
                Err(err) => return Err(self.fail(session, "cannot acquire", &err)),
            }
        }
    }

    /// `pg_advisory_lock` under a `lock_timeout` of one slice, catching
    /// 55P03; the user's `lock_timeout` is put back afterwards. Inside a
    /// transaction each slice runs under a savepoint, so a timed-out slice
    /// does not abort the user's transaction.
    fn wait_postgres(&mut self, session: &mut dyn Session, wait: Wait) -> Result<bool> {
        let saved = session
            .query("SELECT current_setting('lock_timeout')", &[])
            .map_err(|err| self.fail(session, "cannot acquire", &err))?
            .first()
            .and_then(Value::text)
            .unwrap_or_else(|| "0".to_owned());
        let in_transaction = session.in_transaction();
        let param = self.target.param();
        let outcome = loop {
            if super::interrupted() || session.signal_handled() {
                self.refusal = Some(Refusal::Interrupted);
                break Ok(false);
            }
            let Some(slice) = next_slice(wait) else {
                break Ok(false);
            };
            let timeout = format!("{}ms", slice.as_millis().max(1));
            if in_transaction {
                if let Err(err) = session.query("SAVEPOINT cronlock_wait", &[]) {
                    break Err(err);
                }
            }
            // Inside the user's transaction the slice's lock_timeout is
            // local to it (rolled back with the savepoint), so a SET LOCAL
            // of the user's never becomes the session's setting.
            let attempt = session.wait_query(
                if in_transaction {
                    "SELECT set_config('lock_timeout', ?, true), pg_advisory_lock(?::bigint)"
                } else {
                    "SELECT set_config('lock_timeout', ?, false), pg_advisory_lock(?::bigint)"
                },
                &[&timeout, &param],
                slice,
            );
            match attempt {
                Ok(_) => {
                    if in_transaction {
                        let _ = session.query("RELEASE SAVEPOINT cronlock_wait", &[]);
                    }
                    break Ok(true);
                }
                Err(err) if err.sqlstate == "55P03" => {
                    if in_transaction {
                        if let Err(err) = session.query("ROLLBACK TO SAVEPOINT cronlock_wait", &[])
                        {
                            break Err(err);
                        }
                    }
                }
                Err(err) => break Err(err),
            }
        };
        match outcome {
            Ok(acquired) => {
                // Inside a transaction the rollbacks above already put it back.
                let restore = if in_transaction {
                    "SELECT set_config('lock_timeout', ?, true)"
                } else {
                    "SELECT set_config('lock_timeout', ?, false)"
                };
                if let Err(err) = session.query(restore, &[&saved]) {
                    if acquired {
                        let _ = self.unlock(session);
                    }
                    return Err(self.fail(session, "cannot acquire", &err));
                }
                Ok(acquired)
            }
            Err(err) if self.cut_short_by_signal(session, &err) => Ok(false),
            Err(err) => Err(self.fail(session, "cannot acquire", &err)),
        }
    }

    /// acquire() on a held lock: does this session still hold it?
    fn confirm(&mut self, session: &mut dyn Session) -> Result<bool> {
        match self.still_held(session) {
            Ok(true) => Ok(true),
            Ok(false) => {
                self.drop_hold();
                Ok(false)
            }
            Err(err) if err.lost_connection(self.flavor) => {
                self.drop_hold();
                self.forget_session(session);
                Ok(false)
            }
            Err(err) => Err(self.error(session, "cannot check", &err)),
        }
    }

    fn still_held(&self, session: &mut dyn Session) -> std::result::Result<bool, SqlError> {
        let row = match &self.target {
            Target::MySql(name) => {
                session.query("SELECT IS_USED_LOCK(?) = CONNECTION_ID()", &[name])?
            }
            Target::Postgres(key) => {
                let (classid, objid) = split_key(*key);
                session.query(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' \
                     AND pid = pg_backend_pid() AND granted AND objsubid = 1 \
                     AND classid = ?::oid AND objid = ?::oid \
                     AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                    &[&classid.to_string(), &objid.to_string()],
                )?
            }
        };
        let held = row.first().and_then(Value::int).unwrap_or(0) > 0;
        // The same connection as at acquire: a reconnected session holds nothing.
        let same = match (&self.info, &self.hold) {
            (Some(info), Some(hold)) => info.id == hold.session,
            _ => false,
        };
        Ok(held && same)
    }

    /// Asks the server whether this connection still holds the lock; false
    /// (and not held any more) when it does not or the session is gone.
    /// `ttl` has no meaning here: the lock lives as long as the session.
    ///
    /// # Errors
    ///
    /// [`Error::Lock`] / [`Error::Connection`] for a failure that says
    /// nothing about the session (the lock then stays held as far as we
    /// know).
    pub fn renew(&mut self, session: &mut dyn Session) -> Result<bool> {
        self.adopt_process(session);
        if self.hold.is_none() {
            return Ok(false);
        }
        self.confirm(session)
    }

    /// Releases the lock. `Ok(false)` when this object did not hold it
    /// (never acquired, released, lost with its session, or in a fork child,
    /// which sends nothing).
    ///
    /// # Errors
    ///
    /// [`Error::Lock`] / [`Error::Connection`] when the server refuses. A
    /// connection of the lock's own is then closed, which frees the lock on
    /// the server, so it is not held afterwards. On the user's PDO nothing
    /// can free it but a statement that works, so the lock stays held (as
    /// it is on the server) and the message says what to do first; the next
    /// release(), the destructor or the request's end try again.
    pub fn release(&mut self, session: &mut dyn Session) -> Result<bool> {
        self.adopt_process(session);
        if self.hold.is_none() {
            return Ok(false);
        }
        match self.unlock(session) {
            Ok(released) => {
                self.drop_hold();
                Ok(released)
            }
            Err(err) if err.lost_connection(self.flavor) => {
                self.drop_hold();
                self.forget_session(session);
                Ok(false)
            }
            Err(err) if session.owns_connection() => {
                // Closing our own session is the sure way to free the lock.
                self.drop_hold();
                self.forget_session(session);
                Err(self.error(session, "cannot release", &err))
            }
            Err(err) => Err(Error::Lock(format!(
                "cannot release lock {}: {}. The lock is still held on this PDO's connection: \
                 {}, then call release() again (closing the PDO also frees it)",
                self.describe(session),
                err.message.trim_end_matches('.'),
                err.release_advice(self.flavor)
            ))),
        }
    }

    fn unlock(&self, session: &mut dyn Session) -> std::result::Result<bool, SqlError> {
        let param = self.target.param();
        let row = match self.flavor {
            Flavor::MySql => session.query("SELECT RELEASE_LOCK(?)", &[&param])?,
            Flavor::Postgres => session.query("SELECT pg_advisory_unlock(?::bigint)", &[&param])?,
        };
        Ok(row.first().and_then(Value::int) == Some(1))
    }

    /// Who holds the lock now, as the server tells (`None`: nobody, or the
    /// server does not say).
    ///
    /// # Errors
    ///
    /// As for [`DatabaseLock::acquire`].
    pub fn holder(&self, session: &mut dyn Session) -> Result<Option<Holder>> {
        let row = match &self.target {
            Target::MySql(name) => session.query(
                "SELECT l.id, CONCAT(p.USER, '@', p.HOST), NULL FROM (SELECT IS_USED_LOCK(?) AS id) l \
                 LEFT JOIN information_schema.PROCESSLIST p ON p.ID = l.id",
                &[name],
            ),
            Target::Postgres(key) => {
                let (classid, objid) = split_key(*key);
                session.query(
                    "SELECT l.pid, host(a.client_addr), a.application_name FROM pg_locks l \
                     LEFT JOIN pg_stat_activity a ON a.pid = l.pid \
                     WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
                     AND l.classid = ?::oid AND l.objid = ?::oid \
                     AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                     LIMIT 1",
                    &[&classid.to_string(), &objid.to_string()],
                )
            }
        }
        .map_err(|err| self.error(session, "cannot look up the holder of", &err))?;
        let Some(id) = row.first().and_then(Value::int) else {
            return Ok(None);
        };
        Ok(Some(Holder {
            session: id,
            client: row.get(1).and_then(Value::text),
            application: row.get(2).and_then(Value::text),
        }))
    }

    /// The id of the session this object talks on (MySQL connection id,
    /// PostgreSQL backend pid), asking the server once per connection.
    ///
    /// # Errors
    ///
    /// As for [`DatabaseLock::acquire`].
    pub fn session_id(&mut self, session: &mut dyn Session) -> Result<i64> {
        self.adopt_process(session);
        self.session_info(session)
            .map(|info| info.id)
            .map_err(|err| self.error(session, "cannot reach", &err))
    }

    fn session_info(
        &mut self,
        session: &mut dyn Session,
    ) -> std::result::Result<SessionInfo, SqlError> {
        if let Some(info) = &self.info {
            return Ok(info.clone());
        }
        let row = match self.flavor {
            // Our own process-list row needs no privilege: its HOST has the
            // client port, which names the socket of a user's PDO.
            Flavor::MySql => session.query(
                "SELECT CONCAT(@@hostname, ':', @@port), CONNECTION_ID(), \
                 (SELECT HOST FROM information_schema.PROCESSLIST WHERE ID = CONNECTION_ID()), \
                 @@socket",
                &[],
            )?,
            // Port, database and start time: advisory locks are per database.
            Flavor::Postgres => session.query(
                "SELECT concat(current_setting('port'), '/', current_database(), '@', \
                 pg_postmaster_start_time()), pg_backend_pid()",
                &[],
            )?,
        };
        let info = SessionInfo {
            server: row.first().and_then(Value::text).unwrap_or_default(),
            id: row.get(1).and_then(Value::int).unwrap_or(-1),
        };
        if self.flavor == Flavor::MySql && !session.owns_connection() {
            // mysqlnd leaves its socket inheritable (libpq does not): a
            // program the job exec()s would keep the user's session, and
            // the lock, alive after the job is killed. Over TCP our own
            // process-list row names the client port; over the server's
            // Unix socket (HOST 'localhost') the socket is found by its peer,
            // the server's @@socket.
            let host = row.get(2).and_then(Value::text).unwrap_or_default();
            if let Some(port) = host
                .rsplit_once(':')
                .and_then(|(_, port)| port.parse::<u16>().ok())
            {
                sys::close_on_exec_sockets(sys::SocketMatch::LocalPort(port));
            } else if let Some(socket) = row.get(3).and_then(Value::text).filter(|s| !s.is_empty())
            {
                sys::close_on_exec_sockets(sys::SocketMatch::UnixPeer(std::path::Path::new(
                    &socket,
                )));
            }
        }
        self.info = Some(info.clone());
        Ok(info)
    }

    fn drop_hold(&mut self) {
        self.hold = None;
        unregister_hold(self.object);
    }

    fn forget_session(&mut self, session: &mut dyn Session) {
        self.info = None;
        session.disconnect();
    }

    /// In a fork child: the parent's hold and session are not ours.
    fn adopt_process(&mut self, session: &mut dyn Session) {
        let pid = sys::current_pid();
        if self.owner_pid != pid {
            self.owner_pid = pid;
            self.hold = None;
            self.info = None;
            session.disconnect();
        }
    }

    /// A failed statement while trying to lock: a lost connection is a
    /// [`Error::Connection`], and our own connection is dropped for a new
    /// one next time.
    fn fail(&mut self, session: &mut dyn Session, what: &str, err: &SqlError) -> Error {
        let error = self.error(session, what, err);
        if err.lost_connection(self.flavor) {
            self.forget_session(session);
        }
        error
    }

    fn error(&self, session: &dyn Session, what: &str, err: &SqlError) -> Error {
        let message = format!("{what} lock {}: {}", self.describe(session), err.message);
        if err.lost_connection(self.flavor) {
            Error::Connection(message)
        } else {
            Error::Lock(message)
        }
    }

    /// After a PHP exception (or `exit()`) thrown by a signal handler in the
    /// middle of an acquire: the server may have granted the lock in the
    /// statement whose answer was lost. A connection of our own is closed
    /// (which frees it); on the user's PDO it is unlocked if held.
    pub fn abandon(&mut self, session: &mut dyn Session) {
        if self.hold.is_some() {
            return;
        }
        if session.owns_connection() {
            self.forget_session(session);
        } else if let Ok(true) = self.still_held_by_session(session) {
            let _ = self.unlock(session);
        }
    }

    fn still_held_by_session(
        &self,
        session: &mut dyn Session,
    ) -> std::result::Result<bool, SqlError> {
        let row = match &self.target {
            Target::MySql(name) => {
                session.query("SELECT IS_USED_LOCK(?) = CONNECTION_ID()", &[name])?
            }
            Target::Postgres(_) => return Ok(true),
        };
        Ok(row.first().and_then(Value::int) == Some(1))
    }

    /// For the drop of the PHP object: whether a release is due.
    pub fn needs_release(&self) -> bool {
        self.is_held()
    }
}

impl Drop for DatabaseLock {
    fn drop(&mut self) {
        if self.owner_pid == sys::current_pid() {
            unregister_hold(self.object);
        }
    }
}

/// getpid(2), cached, as the other locks see it (forgotten in a fork child).
pub fn current_pid() -> u32 {
    sys::current_pid()
}

pub fn hostname() -> &'static str {
    sys::hostname()
}

/// A descriptor of a connection the lock opened: made close-on-exec
/// (mysqlnd leaves its socket inheritable, so a program the job starts
/// would keep the session, and the lock, alive after the job is killed),
/// and a fork child's copy is pointed at /dev/null at fork time, so nothing
/// the child does (PDO's destructor sends COM_QUIT or Terminate) can end
/// the parent's session.
pub fn track_connection_fd(fd: i32) {
    sys::set_close_on_exec(fd);
    sys::track_fd(fd);
}

pub fn untrack_connection_fd(fd: i32) {
    sys::untrack_fd(fd);
}

/// The socket descriptors open in this process now (see
/// [`sys::open_sockets`]), to find the ones a new PDO connection made.
pub fn open_sockets() -> Vec<i32> {
    sys::open_sockets()
}

/// Watches one statement on a connection the lock opened itself, whose
/// sockets are `fds`: when the server has not answered [`ANSWER_GRACE`]
/// after the statement's own wait (`slice`, for a wait statement), or, for a
/// wait statement, once `interrupt` is set (a PHP signal handler pending)
/// [`INTERRUPT_GRACE`] after its slice, the sockets are shut down so that
/// the blocked read returns. [`StatementWatch::finish`] says which.
pub fn watch_statement(
    fds: &[i32],
    slice: Option<Duration>,
    interrupt: Option<InterruptFlag>,
) -> StatementWatch {
    let started = std::time::Instant::now();
    let budget = slice.unwrap_or(Duration::ZERO) + ANSWER_GRACE;
    let on_interrupt = slice
        .zip(interrupt)
        .map(|(slice, flag)| (started + slice + INTERRUPT_GRACE, flag));
    StatementWatch {
        watch: sys::watch_sockets(fds, started + budget, on_interrupt),
        budget,
    }
}

/// See [`watch_statement`].
pub struct StatementWatch {
    watch: sys::SocketWatch,
    budget: Duration,
}

impl StatementWatch {
    /// Ends the watch. `Err` when it cut the connection: the error to
    /// report (a lost connection; the statement's own result, if any, no
    /// longer counts).
    ///
    /// # Errors
    ///
    /// The [`SqlError`] saying the server did not answer in time, or that
    /// the statement was cut for a pending signal handler.
    pub fn finish(self, flavor: Flavor) -> std::result::Result<(), SqlError> {
        let message = match self.watch.finish() {
            None => return Ok(()),
            Some(sys::Cut::Interrupt) => "the server had not answered when a PHP signal handler \
                                          was due, so the connection was closed"
                .to_owned(),
            Some(sys::Cut::Deadline) => format!(
                "the server did not answer within {} s, so the connection was closed \
                 (the next acquire() opens a new one)",
                self.budget.as_secs_f64()
            ),
        };
        Err(lost_connection_error(flavor, message))
    }
}

/// An [`SqlError`] that [`SqlError::lost_connection`] classifies as lost.
fn lost_connection_error(flavor: Flavor, message: String) -> SqlError {
    match flavor {
        // 2013: CR_SERVER_LOST, "Lost connection to server during query".
        Flavor::MySql => SqlError {
            sqlstate: "HY000".to_owned(),
            code: Some(2013),
            message,
            connecting: false,
        },
        // 08006: connection_failure.
        Flavor::Postgres => SqlError {
            sqlstate: "08006".to_owned(),
            code: None,
            message,
            connecting: false,
        },
    }
}

/// The next blocking wait: at most [`WAIT_SLICE`], `None` once the wait is over.
fn next_slice(wait: Wait) -> Option<Duration> {
    match wait.remaining() {
        None => Some(WAIT_SLICE),
        Some(Duration::ZERO) => None,
        Some(left) => Some(left.min(WAIT_SLICE)),
    }
}

/// pg_locks shows a bigint advisory key as classid (high 32 bits) and objid
/// (low 32 bits), with objsubid 1.
fn split_key(key: i64) -> (u32, u32) {
    let bits = key as u64;
    ((bits >> 32) as u32, bits as u32)
}

/// A user-supplied string for a message: at most 200 characters, then "…".
pub fn cut(text: &str) -> String {
    match text.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// A PDO DSN for messages: any `password=` part removed.
pub fn dsn_label(dsn: &str) -> String {
    let (driver, rest) = dsn.split_once(':').unwrap_or((dsn, ""));
    let kept: Vec<&str> = rest
        .split(';')
        .filter(|part| {
            !part
                .trim_start()
                .to_ascii_lowercase()
                .starts_with("password")
        })
        .collect();
    let mut label = format!("{driver}:{}", kept.join(";"));
    for secret in dsn_secrets(dsn) {
        label = label.replace(&secret, "***");
    }
    cut(&label)
}

/// Passwords a PDO DSN may carry besides the `'password'` option, so that
/// no label or message shows them: `password=…` in the `;` form and in
/// libpq's space-separated form (quoted or not), and the password of a
/// `postgresql://user:password@host` URI.
pub fn dsn_secrets(dsn: &str) -> Vec<String> {
    let mut secrets = Vec::new();
    let lower = dsn.to_ascii_lowercase();
    let mut from = 0;
    while let Some(at) = lower[from..].find("password") {
        let start = from + at + "password".len();
        from = start;
        let rest = dsn[start..].trim_start();
        let Some(value) = rest.strip_prefix('=') else {
            continue;
        };
        let value = value.trim_start();
        let secret = match value.strip_prefix('\'') {
            Some(quoted) => quoted.split('\'').next().unwrap_or(""),
            None => value
                .split(|c: char| c == ';' || c.is_whitespace())
                .next()
                .unwrap_or(""),
        };
        if !secret.is_empty() {
            secrets.push(secret.to_owned());
        }
    }
    if let Some((_, after_scheme)) = dsn.split_once("://") {
        let authority = after_scheme.split(['/', '?']).next().unwrap_or("");
        if let Some((userinfo, _)) = authority.rsplit_once('@') {
            if let Some((_, password)) = userinfo.split_once(':') {
                if !password.is_empty() {
                    secrets.push(password.to_owned());
                }
            }
        }
    }
    secrets
}

/// MD5 (RFC 1321), for the PostgreSQL key a DBA computes with `md5()`.
fn md5(input: &[u8]) -> [u8; 16] {
    const S: [u32; 64] = [
        7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 5, 9, 14, 20, 5, 9, 14, 20, 5,
        9, 14, 20, 5, 9, 14, 20, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 6, 10,
        15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
    ];
    let k: [u32; 64] =
        std::array::from_fn(|i| ((i as f64 + 1.0).sin().abs() * 4_294_967_296.0) as u32);
    let mut state: [u32; 4] = [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476];
    let mut message = input.to_vec();
    message.push(0x80);
    while message.len() % 64 != 56 {
        message.push(0);
    }
    message.extend_from_slice(&((input.len() as u64).wrapping_mul(8)).to_le_bytes());
    for block in message.chunks_exact(64) {
        let words: [u32; 16] = std::array::from_fn(|i| {
            u32::from_le_bytes([
                block[4 * i],
                block[4 * i + 1],
                block[4 * i + 2],
                block[4 * i + 3],
            ])
        });
        let [mut a, mut b, mut c, mut d] = state;
        for i in 0..64 {
            let (f, g) = match i / 16 {
                0 => ((b & c) | (!b & d), i),
                1 => ((d & b) | (!d & c), (5 * i + 1) % 16),
                2 => (b ^ c ^ d, (3 * i + 5) % 16),
                _ => (c ^ (b | !d), (7 * i) % 16),
            };
            let rotated = a
                .wrapping_add(f)
                .wrapping_add(k[i])
                .wrapping_add(words[g])
                .rotate_left(S[i]);
            a = d;
            d = c;
            c = b;
            b = b.wrapping_add(rotated);
        }
        state[0] = state[0].wrapping_add(a);
        state[1] = state[1].wrapping_add(b);
        state[2] = state[2].wrapping_add(c);
        state[3] = state[3].wrapping_add(d);
    }
    let mut out = [0u8; 16];
    for (i, word) in state.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&word.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn md5_matches_rfc_1321() {
        assert_eq!(hex(&md5(b"")), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(hex(&md5(b"abc")), "900150983cd24fb0d6963f7d28e17f72");
        assert_eq!(
            hex(&md5(
                b"12345678901234567890123456789012345678901234567890123456789012345678901234567890"
            )),
            "57edf4a22be3c955ac49da2e2107b67a"
        );
    }

    #[test]
    fn postgres_key_is_the_first_64_bits_of_md5_signed() {
        // SELECT ('x' || left(md5('abc'), 16))::bit(64)::bigint
        assert_eq!(postgres_key(b"abc"), 0x9001_5098_3cd2_4fb0_u64 as i64);
        assert!(postgres_key(b"abc") < 0);
        assert_ne!(postgres_key(b"cron:a"), postgres_key(b"cron:b"));
    }

    #[test]
    fn mysql_names_plain_or_hashed() {
        assert_eq!(mysql_lock_name(b"nightly-report"), "nightly-report");
        assert_eq!(mysql_lock_name(b"a b:c/d"), "a b:c/d");
        let upper = mysql_lock_name(b"Nightly");
        assert_eq!(
            upper,
            format!("cronlock:{}", sha1_smol::Sha1::from("Nightly").digest())
        );
        assert_ne!(upper, mysql_lock_name(b"nightly"));
        assert_eq!(upper.len(), 49);
        // 64 bytes plain, 65 hashed, and a shared 64-byte prefix does not collide
        let long_a = format!("{}a", "x".repeat(64));
        let long_b = format!("{}b", "x".repeat(64));
        assert_eq!(mysql_lock_name("x".repeat(64).as_bytes()), "x".repeat(64));
        assert!(mysql_lock_name(long_a.as_bytes()).starts_with("cronlock:"));
        assert_ne!(
            mysql_lock_name(long_a.as_bytes()),
            mysql_lock_name(long_b.as_bytes())
        );
        // the hashed form is never somebody's plain name
        let hashed = mysql_lock_name(b"Nightly");
        assert_ne!(mysql_lock_name(hashed.as_bytes()), hashed);
        assert!(mysql_lock_name("é".as_bytes()).starts_with("cronlock:"));
        assert!(mysql_lock_name(b"tab\there").starts_with("cronlock:"));
    }

    #[test]
    fn pg_locks_split() {
        assert_eq!(split_key(-1), (u32::MAX, u32::MAX));
        assert_eq!(split_key(0x0000_0001_0000_0002), (1, 2));
    }

    #[test]
    fn names_are_validated_and_messages_cut() {
        assert!(matches!(
            DatabaseLock::new(Flavor::MySql, ""),
            Err(Error::InvalidValue { .. })
        ));
        assert!(DatabaseLock::new(Flavor::MySql, "a\0b")
            .unwrap_err()
            .to_string()
            .contains("$name"));
        let long = "é".repeat(300);
        assert_eq!(cut(&long).chars().count(), 201);
        assert!(cut(&long).ends_with('…'));
        assert_eq!(
            dsn_label("pgsql:host=db;password=secret;dbname=x"),
            "pgsql:host=db;dbname=x"
        );
        assert!(Flavor::from_driver("sqlite")
            .unwrap_err()
            .to_string()
            .contains("'sqlite'"));
    }

    #[test]
    fn no_form_of_a_dsn_password_is_shown() {
        for dsn in [
            "pgsql:host=127.0.0.1 port=5432 dbname=app user=cron password=S3cretPW",
            "pgsql:host=127.0.0.1 password = 'S3cretPW' dbname=app",
            "pgsql:postgresql://cron:S3cretPW@127.0.0.1:5432/app",
            "mysql:host=db;dbname=app; Password=S3cretPW;charset=utf8mb4",
        ] {
            assert!(dsn_secrets(dsn).iter().any(|s| s == "S3cretPW"), "{dsn}");
            assert!(
                !dsn_label(dsn).contains("S3cretPW"),
                "{dsn}: {}",
                dsn_label(dsn)
            );
        }
    }

    /// A scripted session: each query pops the next answer.
    struct Script {
        answers: VecDeque<std::result::Result<Vec<Value>, SqlError>>,
        sent: Vec<String>,
        owns: bool,
        disconnects: usize,
    }

    impl Script {
        fn new(owns: bool, answers: Vec<std::result::Result<Vec<Value>, SqlError>>) -> Self {
            Script {
                answers: answers.into(),
                sent: Vec::new(),
                owns,
                disconnects: 0,
            }
        }
    }

    impl Session for Script {
        fn query(
            &mut self,
            sql: &str,
            params: &[&str],
        ) -> std::result::Result<Vec<Value>, SqlError> {
            self.sent.push(format!("{sql} {params:?}"));
            // Out of script: the lock is busy.
            self.answers.pop_front().unwrap_or_else(|| one(0))
        }
        fn in_transaction(&mut self) -> bool {
            false
        }
        fn owns_connection(&self) -> bool {
            self.owns
        }
        fn disconnect(&mut self) {
            self.disconnects += 1;
        }
        fn signal_handled(&mut self) -> bool {
            false
        }
        fn label(&self) -> String {
            "MySQL/MariaDB at mysql:host=db".to_owned()
        }
    }

    fn info(id: i64) -> std::result::Result<Vec<Value>, SqlError> {
        Ok(vec![Value::Text("db:3306".into()), Value::Int(id)])
    }

    fn one(v: i64) -> std::result::Result<Vec<Value>, SqlError> {
        Ok(vec![Value::Int(v)])
    }

    fn gone() -> std::result::Result<Vec<Value>, SqlError> {
        Err(SqlError {
            sqlstate: "HY000".into(),
            code: Some(2006),
            message: "MySQL server has gone away".into(),
            connecting: false,
        })
    }

    #[test]
    fn acquire_on_held_asks_the_server_and_drops_a_lost_hold() {
        let mut lock = DatabaseLock::new(Flavor::MySql, "job").unwrap();
        let mut s = Script::new(true, vec![info(7), one(1), one(1), one(0)]);
        assert!(lock.acquire(&mut s, Wait::Once).unwrap());
        assert!(lock.acquire(&mut s, Wait::Once).unwrap(), "still ours");
        assert!(
            !lock.acquire(&mut s, Wait::Once).unwrap(),
            "server says lost"
        );
        assert!(!lock.is_held());
        assert!(s.sent[2].contains("IS_USED_LOCK"));
        assert_eq!(s.sent.len(), 4);
    }

    #[test]
    fn renew_is_false_when_the_session_is_gone_and_a_dsn_lock_reconnects() {
        let mut lock = DatabaseLock::new(Flavor::MySql, "job").unwrap();
        let mut s = Script::new(true, vec![info(7), one(1), gone(), info(8), one(1)]);
        assert!(lock.acquire(&mut s, Wait::Once).unwrap());
        assert!(!lock.renew(&mut s).unwrap());
        assert!(!lock.is_held());
        assert_eq!(s.disconnects, 1);
        assert!(!lock.release(&mut s).unwrap(), "nothing to release");
        assert!(lock.acquire(&mut s, Wait::Once).unwrap(), "new session");
        assert_eq!(lock.hold.as_ref().unwrap().session, 8);
    }

    fn refused(
        sqlstate: &str,
        code: i64,
        message: &str,
    ) -> std::result::Result<Vec<Value>, SqlError> {
        Err(SqlError {
            sqlstate: sqlstate.into(),
            code: Some(code),
            message: message.into(),
            connecting: false,
        })
    }

    #[test]
    fn a_release_the_users_pdo_refuses_keeps_the_hold_for_the_next_try() {
        let mut lock = DatabaseLock::new(Flavor::Postgres, "job").unwrap();
        let aborted =
            "current transaction is aborted, commands ignored until end of transaction block";
        let mut s = Script::new(
            false,
            vec![info(7), one(1), refused("25P02", 7, aborted), one(1)],
        );
        assert!(lock.acquire(&mut s, Wait::Once).unwrap());
        let err = lock.release(&mut s).unwrap_err();
        assert!(matches!(err, Error::Lock(_)));
        let text = err.to_string();
        assert!(
            text.contains(aborted) && text.contains("still held"),
            "{text}"
        );
        assert!(text.contains("roll back the transaction"), "{text}");
        assert!(
            lock.is_held(),
            "the server still holds it: so does the object"
        );
        assert!(lock.needs_release(), "the destructor tries again");
        assert_eq!(s.disconnects, 0, "the user's connection is left alone");
        assert!(lock.release(&mut s).unwrap(), "the next release() frees it");
        assert!(!lock.is_held());

        let mut lock = DatabaseLock::new(Flavor::MySql, "job").unwrap();
        let busy = "Cannot execute queries while other unbuffered queries are active.";
        let mut s = Script::new(false, vec![info(7), one(1), refused("HY000", 2014, busy)]);
        assert!(lock.acquire(&mut s, Wait::Once).unwrap());
        let text = lock.release(&mut s).unwrap_err().to_string();
        assert!(
            text.contains("closeCursor()") && !text.contains("active.."),
            "{text}"
        );
        assert!(lock.is_held());
    }

    #[test]
    fn a_release_our_own_connection_refuses_closes_it_which_frees_the_lock() {
        let mut lock = DatabaseLock::new(Flavor::Postgres, "job").unwrap();
        let mut s = Script::new(
            true,
            vec![info(7), one(1), refused("XX000", 1, "internal error")],
        );
        assert!(lock.acquire(&mut s, Wait::Once).unwrap());
        assert!(lock.release(&mut s).is_err());
        assert!(!lock.is_held());
        assert_eq!(s.disconnects, 1);
    }

    #[test]
    fn a_lost_idle_connection_of_ours_is_reopened_once_but_a_users_is_an_error() {
        let mut lock = DatabaseLock::new(Flavor::MySql, "job").unwrap();
        let mut s = Script::new(true, vec![gone(), info(9), one(1)]);
        assert!(lock.acquire(&mut s, Wait::Once).unwrap());
        let mut lock = DatabaseLock::new(Flavor::MySql, "job2").unwrap();
        let mut s = Script::new(false, vec![gone()]);
        assert!(matches!(
            lock.acquire(&mut s, Wait::Once),
            Err(Error::Connection(_))
        ));
    }

    #[test]
    fn two_objects_in_one_thread_never_wait_on_each_other() {
        let mut a = DatabaseLock::new(Flavor::MySql, "same").unwrap();
        let mut b = DatabaseLock::new(Flavor::MySql, "same").unwrap();
        let mut s = Script::new(false, vec![info(7), one(1), info(7)]);
        assert!(a.acquire(&mut s, Wait::Once).unwrap());
        assert!(
            !b.acquire(&mut s, Wait::Once).unwrap(),
            "busy, no GET_LOCK sent"
        );
        let err = b.acquire(&mut s, Wait::Forever).unwrap_err().to_string();
        assert!(
            err.contains("through another CronLock\\Database object"),
            "{err}"
        );
        assert_eq!(s.sent.len(), 3);
        let mut s = Script::new(false, vec![one(1), one(1)]);
        assert!(a.release(&mut s).unwrap());
        assert!(b.acquire(&mut s, Wait::Forever).unwrap());
    }

    #[test]
    fn waits_in_slices_of_at_most_100_ms_until_the_deadline() {
        let mut lock = DatabaseLock::new(Flavor::MySql, "slices").unwrap();
        let mut s = Script::new(true, vec![info(7)]);
        let started = std::time::Instant::now();
        let wait = Wait::from_seconds("$timeout", 0.2).unwrap();
        assert!(!lock.acquire(&mut s, wait).unwrap());
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert!(s.sent[1].contains("GET_LOCK(?, 0)"));
        for query in &s.sent[2..] {
            let seconds: f64 = query
                .rsplit('"')
                .nth(1)
                .and_then(|s| s.parse().ok())
                .expect("a timeout parameter");
            assert!(
                query.contains("GET_LOCK(?, ?)") && seconds <= 0.1,
                "{query}"
            );
        }
    }

    #[test]
    fn errors_name_the_lock_and_classify_lost_sessions() {
        let mut lock = DatabaseLock::new(Flavor::Postgres, "pg-job").unwrap();
        let mut s = Script::new(
            true,
            vec![
                Err(SqlError {
                    sqlstate: "08006".into(),
                    code: Some(7),
                    message:
                        "connection to server at \"127.0.0.1\", port 1 failed: Connection refused"
                            .into(),
                    connecting: true,
                }),
                Err(SqlError {
                    sqlstate: "08006".into(),
                    code: Some(7),
                    message: "Connection refused".into(),
                    connecting: true,
                }),
            ],
        );
        let err = lock.acquire(&mut s, Wait::Once).unwrap_err();
        assert!(matches!(err, Error::Connection(_)));
        let text = err.to_string();
        assert!(
            text.contains("'pg-job'") && text.contains("advisory key"),
            "{text}"
        );
        let denied = SqlError {
            sqlstate: "42501".into(),
            code: None,
            message: "permission denied".into(),
            connecting: false,
        };
        assert!(!denied.lost_connection(Flavor::Postgres));
    }
}

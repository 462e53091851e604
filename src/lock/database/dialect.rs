//! What differs between the database servers a lock runs on: one
//! [`Dialect`] per server (php-lock/lock's shape: one small file each),
//! chosen by the PDO driver's name. The state machine (`lock.rs`) never
//! names a server.
//!
//! A new server is one file implementing [`Dialect`] and one line in
//! `DIALECTS` (`mod.rs`).
//!
//! The traps this closes:
//! - a driver cronlock has no dialect for is refused when the lock is
//!   made, naming the drivers it has, never at the first acquire;
//! - no statement of a dialect splices the lock's name into SQL as text:
//!   it is a parameter, or (MySQL) a hex literal of its bytes, which nothing
//!   in a name can turn into SQL.

use super::errors::{Holder, SqlError};
use super::names::Target;
use super::session::{Session, Value};
use crate::lock::shorten;
use std::fmt::Write as _;
use std::time::Duration;

/// One statement with its parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub sql: String,
    pub params: Vec<String>,
}

impl Query {
    pub fn new(sql: impl Into<String>, params: Vec<String>) -> Self {
        Query {
            sql: sql.into(),
            params,
        }
    }

    fn param_refs(&self) -> Vec<&str> {
        self.params.iter().map(String::as_str).collect()
    }

    /// Runs it on `session`: the first row.
    ///
    /// # Errors
    ///
    /// The statement's [`SqlError`].
    pub fn run(&self, session: &mut dyn Session) -> std::result::Result<Vec<Value>, SqlError> {
        session.query(&self.sql, &self.param_refs())
    }

    /// Runs it on `session` as a blocking wait of at most `slice` (see
    /// [`Session::wait_query`]): the first row.
    ///
    /// # Errors
    ///
    /// The statement's [`SqlError`].
    pub fn run_waiting(
        &self,
        session: &mut dyn Session,
        slice: Duration,
    ) -> std::result::Result<Vec<Value>, SqlError> {
        session.wait_query(&self.sql, &self.param_refs(), slice)
    }
}

/// How a wait on the server ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Waited {
    Granted,
    /// The wait is over (its deadline, or [`Slices::next`] said stop).
    NotGranted,
    /// The server answered NULL (MySQL: the statement was killed).
    Null,
    /// A wait statement failed: maybe cut short by a signal.
    Failed(SqlError),
    /// Putting the session's settings back (or reading them first) failed;
    /// a lock granted meanwhile was unlocked again.
    SettingsFailed(SqlError),
}

/// The slices of a wait, as the state machine hands them out: at most
/// [`super::WAIT_SLICE`] each, none once the wait is over or a PHP signal
/// handler is due.
pub trait Slices {
    /// The next blocking wait, `None` to stop.
    fn next(&mut self, session: &mut dyn Session) -> Option<Duration>;
}

/// One database server's SQL and error codes.
pub trait Dialect: Sync + std::fmt::Debug {
    /// The PDO driver name: `mysql`, `pgsql`.
    fn driver(&self) -> &'static str;

    /// For messages: `MySQL/MariaDB`, `PostgreSQL`.
    fn product(&self) -> &'static str;

    /// The server's name for the lock `name` (see `names.rs`).
    fn target(&self, name: &str) -> Target;

    /// Which server (and database) the session reaches and its id: a row
    /// of the server's identity (two objects on the same server and name in
    /// one thread must not wait on each other) and the session id (MySQL
    /// `CONNECTION_ID()`, PostgreSQL `pg_backend_pid()`), then whatever
    /// [`Dialect::protect_users_connection`] reads.
    fn session_info_sql(&self) -> &'static str;

    /// On the user's PDO, after [`Dialect::session_info_sql`]: what keeps
    /// the user's connection from programs the job exec()s (nothing where
    /// the client library does that itself).
    fn protect_users_connection(&self, row: &[Value]) {
        let _ = row;
    }

    /// One try, no wait: answers 1 (granted) or 0, and NULL for an error.
    fn try_lock(&self, target: &Target) -> Query;

    /// Waits for the lock in the slices `slices` hands out, on the
    /// server's own blocking wait.
    fn wait(&self, session: &mut dyn Session, target: &Target, slices: &mut dyn Slices) -> Waited;

    /// Answers 1 when it released the lock.
    fn unlock(&self, target: &Target) -> Query;

    /// Answers more than 0 while this session holds the lock.
    fn held_by_this_session(&self, target: &Target) -> Query;

    /// After an acquire abandoned mid-statement on the user's PDO: the
    /// question that tells whether the server granted it (`None`: unlocking
    /// a lock this session does not hold is harmless, so just unlock).
    fn granted_before_abandon(&self, target: &Target) -> Option<Query>;

    /// Who holds the lock: a row of session id, client, application name.
    fn holder(&self, target: &Target) -> Query;

    /// A holder's session for messages: `MySQL connection N`.
    fn holder_session(&self, id: i64) -> String;

    /// Whether a failed statement (not a connect) means the session is gone.
    fn lost_connection(&self, err: &SqlError) -> bool;

    /// What the user must do to their PDO before a statement can release
    /// the lock, for the states this server reports; `None`: nothing
    /// specific to say.
    fn release_advice(&self, err: &SqlError) -> Option<&'static str>;

    /// Whether the session is gone (killed, server restarted or away, or
    /// never opened): a lock it held is no longer held.
    fn lost_session(&self, err: &SqlError) -> bool {
        err.connecting || self.lost_connection(err)
    }

    /// [`Dialect::release_advice`], or the general advice.
    fn advice_before_release(&self, err: &SqlError) -> &'static str {
        self.release_advice(err)
            .unwrap_or("make the PDO usable again")
    }

    /// Who holds a busy lock, in words: `MySQL connection 42 from
    /// cron@10.0.0.5:51234`, `PostgreSQL backend pid 7 (cronlock pid 9 on
    /// web1) from 10.0.0.5`.
    fn describe_holder(&self, holder: &Holder) -> String {
        let mut text = self.holder_session(holder.session);
        if let Some(app) = holder.application.as_deref().filter(|a| !a.is_empty()) {
            let _ = write!(text, " ({})", shorten(app));
        }
        if let Some(client) = holder.client.as_deref().filter(|c| !c.is_empty()) {
            let _ = write!(text, " from {}", shorten(client));
        }
        text
    }

    /// An error [`Dialect::lost_connection`] classifies as lost, for a
    /// connection the lock cut itself.
    fn lost_connection_error(&self, message: String) -> SqlError;

    /// Claims `key` in the claims table `table` for `seconds` (server
    /// time) with `holder`, in one statement: true when this call took it
    /// (a new row, an expired one, or one `holder` already has: a retry of
    /// this very call), false while another holder's claim runs.
    fn claim(
        &self,
        session: &mut dyn Session,
        table: &str,
        key: &str,
        seconds: f64,
        holder: &str,
    ) -> Result<bool, SqlError>;

    /// Deletes at most [`super::claims::SWEEP_ROWS`] expired claims.
    fn sweep_claims_sql(&self, table: &str) -> String;

    /// The CREATE TABLE (and index) of a claims table, as a DBA runs it.
    fn claims_table_sql(&self, table: &str) -> String;

    /// Whether a failed statement says its table does not exist.
    fn missing_table(&self, err: &SqlError) -> bool;

    /// Statements run once on a connection the lock opened, best effort:
    /// the session must outlive the server's idle limits (the lock lives
    /// exactly as long as it), and may tell another host who holds it
    /// (`application` is `cronlock pid N on HOST`).
    fn own_connection_setup(&self, application: &str) -> Vec<Query>;
}

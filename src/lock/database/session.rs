//! The connection a Database lock talks on, as the lock needs it: the PHP
//! layer implements [`Session`] over a `\PDO` (the user's, or one the lock
//! opens from a DSN and keeps), the tests over a script.
//!
//! The traps this closes:
//! - a session says whether it owns its connection: only then may the lock
//!   close it (to free a lock, or drop a suspect connection); a user's PDO
//!   is never closed behind their back;
//! - a PHP signal handler the engine ran inside a PDO call is reported by
//!   [`Session::signal_handled`], since the engine's own flag is consumed
//!   by then;
//! - a label never contains a password.

use super::errors::SqlError;
use std::time::Duration;

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

    /// Runs one statement that returns no rows: how many rows it changed
    /// (MySQL's affected rows, as PDO reports them).
    ///
    /// # Errors
    ///
    /// As for [`Session::query`].
    fn execute(&mut self, sql: &str, params: &[&str]) -> std::result::Result<u64, SqlError>;

    /// Whether a transaction is open on the connection (PostgreSQL waits
    /// then use a savepoint, so a timed-out slice does not abort it), or
    /// one opens with every statement (MySQL with autocommit off).
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

/// `application_name` of the lock's own PostgreSQL connections (and
/// whatever a dialect names its sessions by): `cronlock pid N on HOST`.
pub fn application_name() -> String {
    format!(
        "cronlock pid {} on {}",
        crate::lock::owner::current_pid(),
        crate::lock::owner::hostname()
    )
}

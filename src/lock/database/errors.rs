//! Failed statements and who holds a busy lock, as the server reports
//! them. Whether a failure means a lost session (the lock it held is gone,
//! a connection of ours is dropped for a new one) is the dialect's call
//! ([`super::Dialect::lost_session`]).
//!
//! The traps this closes:
//! - a failure while connecting always counts as a lost session, whatever
//!   the driver's code;
//! - when a connect fails for want of descriptors and the driver gives no
//!   reason (mysqlnd: "Unknown error while connecting"), the message says
//!   so in the OS's words ("Too many open files"), as the other backends'
//!   messages do;
//! - holder details (application name, client address) come from the
//!   server: [`super::Dialect::describe_holder`] escapes them like every
//!   name in a message.

use crate::lock::sys;

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
    /// A connect that failed without saying why, explained: when this
    /// process has no descriptor left (EMFILE) or the system none (ENFILE),
    /// the driver's reasonless words are replaced by the OS's.
    pub fn explain_connect_failure(mut self) -> Self {
        if self.connecting && REASONLESS.contains(&self.message.as_str()) {
            if let Some(reason) = sys::descriptors_exhausted() {
                self.message = reason;
            }
        }
        self
    }
}

/// What drivers say when a connect failed for a reason they did not learn
/// (mysqlnd when it could not make its socket; the PDO layer's own
/// fallback).
const REASONLESS: &[&str] = &["Unknown error while connecting", "unknown error"];

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

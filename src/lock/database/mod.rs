//! A named lock on a database server: MySQL/MariaDB `GET_LOCK()` or a
//! PostgreSQL session-level advisory lock. The lock belongs to one
//! connection (session) and the server frees it when that session ends, so
//! a killed holder never blocks the next run.
//!
//! This module holds the lock logic only; it talks to the server through
//! [`Session`], which the PHP layer implements over a `\PDO` (the user's,
//! or one of the lock's own: `php/pdo.rs`).
//!
//! | file | what |
//! | --- | --- |
//! | `lock` | the state machine of one `CronLock\Database` object: acquire, confirm, renew, release, abandon, claim |
//! | `claims` | claims of a window for N seconds (a row of the claims table): checks, holder tokens, the sweep |
//! | `dialect` | the [`Dialect`] trait (what differs between servers) and the choice by PDO driver |
//! | `mysql`, `postgres` | the two dialects: their SQL, waits and error codes |
//! | `names` | a name's server-side lock name (`GET_LOCK` name, advisory key), as a DBA reproduces it |
//! | `session` | the [`Session`] trait and the values of a result row |
//! | `errors` | [`SqlError`] and its classification (lost session or not), [`Holder`] |
//! | `sockets` | the sockets of the lock's own connection: close-on-exec, fork, the statement watch |
//! | `dsn` | a PDO DSN shown without its password |

mod claims;
mod dialect;
mod dsn;
mod errors;
mod lock;
mod mysql;
mod names;
mod postgres;
mod session;
mod sockets;

pub use crate::lock::sys::InterruptFlag;
pub use claims::{Claimed, ClaimsTable, DEFAULT_TABLE as DEFAULT_CLAIMS_TABLE};
pub use dialect::{Dialect, Query, Slices, Waited};
pub use dsn::{dsn_label, dsn_secrets};
pub use errors::{Holder, SqlError};
pub use lock::{DatabaseLock, WAIT_SLICE};
pub use names::{claim_key, mysql_lock_name, postgres_key};
pub use session::{application_name, Session, Value};
pub use sockets::{
    open_sockets, track_connection_fd, untrack_connection_fd, watch_statement, StatementWatch,
    ANSWER_GRACE,
};

use crate::error::{Error, Result};
use crate::lock::shorten;

/// Every server cronlock locks on, by PDO driver name: a new dialect is
/// one file and one entry here.
pub const DIALECTS: &[&dyn Dialect] = &[&mysql::MySql, &postgres::Postgres];

/// The dialect of a PDO driver.
///
/// # Errors
///
/// [`Error::Lock`] naming any driver without a dialect.
pub fn for_driver(driver: &str) -> Result<&'static dyn Dialect> {
    if let Some(dialect) = DIALECTS.iter().find(|d| d.driver() == driver) {
        return Ok(*dialect);
    }
    let known: Vec<&str> = DIALECTS.iter().map(|d| d.driver()).collect();
    Err(Error::Lock(format!(
        "CronLock\\Database supports the PDO drivers {}, not '{}'",
        known.join(" and "),
        shorten(driver)
    )))
}

//! Claims (decision D27): "this window is mine for N seconds", exactly once across hosts
//! (`CronLock\Database::claim()`, what Laravel's `onOneServer()` needs). A
//! claim must outlive the session that made it, so it is a row of a table
//! the DBA creates once ([`Dialect::claims_table_sql`]), keyed by the lock's
//! name and the window (`names.rs`, [`super::names::claim_key`]).
//!
//! The traps this closes:
//! - one statement takes a window, atomically, whether it is new or its
//!   row expired ([`Dialect::claim`]); which row expired is decided by the
//!   server's clock, which window a tick is by the caller's (its own tick
//!   time: hosts are never re-aligned to the server);
//! - each call has its own holder token, so a claim whose answer was lost
//!   (the lock's own connection died; it reconnects and asks once more)
//!   finds its own row and is still this call's, and no two calls can both
//!   take one window;
//! - a claim inside a transaction of the PDO given (or with MySQL's
//!   autocommit off) would be seen by other hosts only at its COMMIT and
//!   undone by a rollback: refused;
//! - every claim then deletes at most [`SWEEP_ROWS`] expired rows, so the
//!   table holds no more than the windows still running plus what that
//!   leaves (nothing once claims go on);
//! - the table's name is an identifier checked once ([`ClaimsTable`]),
//!   the only text ever spliced into a claim's SQL;
//! - a missing table is reported with the exact CREATE TABLE to run.

use super::dialect::Dialect;
use super::errors::SqlError;
use super::session::Session;
use crate::error::{Error, Result};
use crate::lock::shorten;

/// The claims table unless `'claims_table'` names another.
pub const DEFAULT_TABLE: &str = "cronlock_claims";

/// Expired rows each claim deletes at most.
pub const SWEEP_ROWS: u32 = 100;

/// Longest window, in bytes (the key column holds 16 + 1 + this).
pub const WINDOW_MAX: usize = 200;

/// Longest claim: a year (a longer one is a unit mistake, and MySQL's
/// DATETIME ends at 9999).
pub const SECONDS_MAX: f64 = 31_536_000.0;

/// A claims table's name: letters, digits and `_` (not starting with a
/// digit), optionally `schema.table`, each part at most 64 characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimsTable(String);

impl ClaimsTable {
    /// # Errors
    ///
    /// [`Error::InvalidValue`] naming `arg` for any other name.
    pub fn new(arg: &str, name: &str) -> Result<Self> {
        let part_ok = |part: &str| {
            !part.is_empty()
                && part.len() <= 64
                && !part.starts_with(|c: char| c.is_ascii_digit())
                && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        let mut parts = name.split('.');
        let ok = parts.next().is_some_and(part_ok)
            && parts.next().is_none_or(part_ok)
            && parts.next().is_none();
        if ok {
            Ok(ClaimsTable(name.to_owned()))
        } else {
            Err(Error::value(
                arg,
                "must be a table name of letters, digits and _ (or schema.table)",
            ))
        }
    }

    pub fn name(&self) -> &str {
        &self.0
    }
}

impl Default for ClaimsTable {
    fn default() -> Self {
        ClaimsTable(DEFAULT_TABLE.to_owned())
    }
}

/// A window as `claim()` takes it.
///
/// # Errors
///
/// [`Error::InvalidValue`] naming `$window` when it is empty, has a NUL
/// byte, is longer than [`WINDOW_MAX`] bytes or is not UTF-8.
pub fn check_window(window: &[u8]) -> Result<&str> {
    let refuse = |why: &str| Err(Error::value("$window", why));
    if window.is_empty() {
        return refuse("must not be empty");
    }
    if window.contains(&0) {
        return refuse("must not contain NUL bytes");
    }
    if window.len() > WINDOW_MAX {
        return refuse(&format!("must be at most {WINDOW_MAX} bytes long"));
    }
    std::str::from_utf8(window).or_else(|_| refuse("must be valid UTF-8"))
}

/// A claim's length as `claim()` takes it.
///
/// # Errors
///
/// [`Error::InvalidValue`] naming `$seconds` unless it is more than 0 and at
/// most [`SECONDS_MAX`].
pub fn check_seconds(seconds: f64) -> Result<f64> {
    if seconds > 0.0 && seconds <= SECONDS_MAX {
        Ok(seconds)
    } else {
        Err(Error::value(
            "$seconds",
            format!("must be greater than 0 and at most {SECONDS_MAX} (a year)"),
        ))
    }
}

/// This call's holder: `cronlock pid N on HOST #<16 hex digits>`.
pub fn holder_token() -> String {
    let mut bytes = [0u8; 8];
    // A clock-based fallback still differs between calls of this process.
    if crate::lock::sys::random_bytes(&mut bytes).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        bytes = (nanos as u64).to_be_bytes();
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{} #{hex}", shorten(&super::session::application_name()))
}

/// What one claim() did.
#[derive(Debug)]
pub struct Claimed {
    /// Whether this call claimed the window.
    pub claimed: bool,
    /// Why the sweep of expired rows failed (the claim stands).
    pub sweep_failed: Option<SqlError>,
}

/// Claims `key` for `seconds` with `holder` on `session`, then sweeps
/// expired rows. The caller checked the arguments and the transaction.
///
/// # Errors
///
/// The claim statement's [`SqlError`].
pub fn claim_once(
    dialect: &dyn Dialect,
    session: &mut dyn Session,
    table: &ClaimsTable,
    key: &str,
    seconds: f64,
    holder: &str,
) -> std::result::Result<Claimed, SqlError> {
    let claimed = dialect.claim(session, table.name(), key, seconds, holder)?;
    let sweep_failed = session
        .execute(&dialect.sweep_claims_sql(table.name()), &[])
        .err();
    Ok(Claimed {
        claimed,
        sweep_failed,
    })
}

/// The message of a claim that failed because the table is missing: what
/// to create, exactly.
pub fn missing_table_advice(dialect: &dyn Dialect, table: &ClaimsTable) -> String {
    format!(
        "the claims table {} does not exist; a DBA creates it once (and grants SELECT, \
         INSERT, UPDATE, DELETE on it): {}",
        table.name(),
        dialect.claims_table_sql(table.name())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_seconds_and_table_names_are_checked() {
        assert!(check_window(b"").is_err());
        assert!(check_window(b"a\0b").is_err());
        assert!(check_window(&[b'x'; 200]).is_ok());
        assert!(check_window(&[b'x'; 201]).is_err());
        assert!(check_window(b"\xff").is_err());
        assert_eq!(
            check_window(b"2026-12-01 10:05").unwrap(),
            "2026-12-01 10:05"
        );
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, SECONDS_MAX * 2.0] {
            assert!(check_seconds(bad).is_err(), "{bad}");
        }
        assert_eq!(check_seconds(0.5).unwrap(), 0.5);
        for good in ["cronlock_claims", "ops.claims", "_t1"] {
            assert!(ClaimsTable::new("t", good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "1t",
            "a.b.c",
            "a-b",
            "t; DROP",
            "a.",
            "\"t\"",
            &"x".repeat(65),
        ] {
            assert!(ClaimsTable::new("t", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn holder_tokens_differ_between_calls() {
        let (a, b) = (holder_token(), holder_token());
        assert_ne!(a, b);
        assert!(a.starts_with("cronlock pid "), "{a}");
    }
}

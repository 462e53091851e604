//! The one error type of cronlock (the PHP layer maps it to exceptions in
//! `php::exceptions`, so this module needs no PHP).

use std::fmt;

/// Everything that can go wrong, in the terms a PHP caller needs.
///
/// Contention is not an error: lock operations report it as `Ok(false)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// An argument has a bad value (PHP `\ValueError`). `arg` names it as the
    /// PHP signature does, e.g. `$path` or `$options['mode']`.
    InvalidValue { arg: String, reason: String },
    /// An argument has the wrong type (PHP `\TypeError`).
    InvalidType { arg: String, reason: String },
    /// The lock cannot be used at all (PHP `CronLock\LockException`).
    Lock(String),
    /// The backend could not be reached or refused us
    /// (PHP `CronLock\ConnectionException`).
    Connection(String),
}

impl Error {
    pub fn value(arg: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::InvalidValue {
            arg: arg.into(),
            reason: reason.into(),
        }
    }

    pub fn type_(arg: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::InvalidType {
            arg: arg.into(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidValue { arg, reason } | Error::InvalidType { arg, reason } => {
                write!(f, "{arg} {reason}")
            }
            Error::Lock(message) | Error::Connection(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

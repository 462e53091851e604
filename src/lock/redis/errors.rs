//! Classifying the redis crate's errors and saying them in words (D6).

use crate::error::Error;
use redis::{ErrorKind, RedisError, ServerErrorKind};
use std::sync::Arc;

/// Replies that say the lock cannot work with this key or server, as
/// opposed to the server being unreachable or refusing us.
pub(super) fn makes_lock_unusable(err: &RedisError) -> bool {
    if let Some((code, _)) = script_call_error(err) {
        return code == "WRONGTYPE";
    }
    matches!(
        err.kind(),
        ErrorKind::Server(
            ServerErrorKind::ResponseError
                | ServerErrorKind::CrossSlot
                | ServerErrorKind::ExecAbort
        ) | ErrorKind::UnexpectedReturnType
    ) || err.code() == Some("WRONGTYPE")
}

pub(super) enum Fault {
    Connect(RedisError),
    Command(RedisError),
    /// No server to send it to: the Cluster nodes kept redirecting the
    /// command (a resharding under way) until the call's budget ran out,
    /// or no sentinel named the master; `reason` says which, in words.
    /// `maybe_ran`: a try before that broke off unanswered.
    Unrouted {
        reason: String,
        maybe_ran: bool,
    },
}

impl Fault {
    /// Whether a command that was `sent` (at least once) may have run, or
    /// may run yet: anything but the server's error reply.
    pub(super) fn left_unanswered(&self, sent: bool) -> bool {
        match self {
            Fault::Unrouted { maybe_ran, .. } => sent && *maybe_ran,
            Fault::Command(err) => sent && err.kind() == ErrorKind::Io,
            Fault::Connect(_) => sent,
        }
    }

    /// Whether the server could not be reached or did not answer (as
    /// opposed to answering with an error).
    pub(super) fn is_unreachable(&self) -> bool {
        match self {
            Fault::Connect(_) => true,
            Fault::Command(err) => err.kind() == ErrorKind::Io,
            Fault::Unrouted { .. } => false,
        }
    }

    /// Whether a waiter should try again: the server could not be reached,
    /// the connection broke or timed out, or the server said "not now".
    pub(super) fn is_transient(&self) -> bool {
        let (Fault::Connect(err) | Fault::Command(err)) = self else {
            return true;
        };
        err.kind() == ErrorKind::Io
            || matches!(
                script_call_error(err).map_or(err.code(), |(code, _)| Some(code)),
                Some("LOADING" | "BUSY" | "TRYAGAIN" | "MASTERDOWN" | "CLUSTERDOWN")
            )
    }
}

/// A failed command: the error for PHP, whether a wait rides it out, and
/// whether the command was sent without a reply (so it may still run).
pub(super) struct FailedOp {
    pub(super) error: Error,
    pub(super) transient: bool,
    pub(super) unanswered: bool,
}

impl From<FailedOp> for Error {
    fn from(failed: FailedOp) -> Self {
        failed.error
    }
}

/// Redis before 7 wraps an error that a command inside a script got:
/// "ERR Error running script (call to f_…): @user_script:1: -OOM command
/// not allowed …". Returns that command's code and text, so they are said
/// and classified as Redis 7 and later report them.
fn script_call_error(err: &RedisError) -> Option<(&str, &str)> {
    if err.code() != Some("ERR") {
        return None;
    }
    let detail = err.detail()?;
    if !detail.starts_with("Error running script") {
        return None;
    }
    let (_, inner) = detail.split_once(": -")?;
    let inner = inner.trim();
    let (code, text) = inner.split_once(' ').unwrap_or((inner, ""));
    let is_code = !code.is_empty() && code.bytes().all(|b| b.is_ascii_uppercase());
    is_code.then_some((code, text.trim()))
}

/// A `-READONLY` reply (also from inside a script): the server is a
/// replica now, and the command did not write.
pub(super) fn is_readonly(err: &RedisError) -> bool {
    let code = script_call_error(err).map_or(err.code(), |(code, _)| Some(code));
    code == Some("READONLY")
        || err
            .detail()
            .is_some_and(|detail| detail.contains("-READONLY ") || detail.starts_with("READONLY "))
}

pub(super) fn io_error(err: &RedisError) -> Option<&std::io::Error> {
    let source = std::error::Error::source(err)?;
    source.downcast_ref::<std::io::Error>().or_else(|| {
        source
            .downcast_ref::<Arc<dyn std::error::Error + Send + Sync>>()
            .and_then(|inner| inner.downcast_ref::<std::io::Error>())
    })
}

pub(super) fn is_interrupted(err: &RedisError) -> bool {
    io_error(err).is_some_and(|io| io.kind() == std::io::ErrorKind::Interrupted)
}

/// The OS's words for an I/O error, without Rust's "(os error N)".
pub(super) fn plain_io(err: &std::io::Error) -> String {
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
pub(super) fn describe_failure(err: &RedisError) -> String {
    if let Some(io) = io_error(err) {
        return plain_io(io);
    }
    let (code, detail) = match script_call_error(err) {
        Some((code, text)) => (Some(code), text),
        None => (err.code(), err.detail().unwrap_or_default().trim()),
    };
    let with_detail = |words: &str| {
        if detail.is_empty() {
            words.to_owned()
        } else {
            format!("{words} ({detail})")
        }
    };
    match (err.kind(), code) {
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
        (_, Some("MOVED" | "ASK")) => {
            "it is a Redis Cluster node (use a redis-cluster:// DSN)".to_owned()
        }
        (_, Some("CLUSTERDOWN")) => with_detail("the cluster is down"),
        (_, Some("CROSSSLOT")) => with_detail("the keys are in different cluster slots"),
        (_, Some("TRYAGAIN")) => with_detail("the cluster is moving the key's slot"),
        (_, Some("WRONGTYPE")) if detail.starts_with("the key holds a ") => detail.to_owned(),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn server_error(reply: &[u8]) -> RedisError {
        redis::parse_redis_value(reply)
            .unwrap()
            .extract_error()
            .unwrap_err()
    }

    #[test]
    fn an_error_inside_a_script_on_redis_6_reads_as_on_redis_7() {
        let wrapped = server_error(
            b"-ERR Error running script (call to f_0123): @user_script:1: -OOM command not allowed when used memory > 'maxmemory'. \r\n",
        );
        let plain = server_error(b"-OOM command not allowed when used memory > 'maxmemory'.\r\n");
        assert_eq!(
            describe_failure(&wrapped),
            "out of memory (maxmemory reached)"
        );
        assert_eq!(describe_failure(&wrapped), describe_failure(&plain));
        assert_eq!(makes_lock_unusable(&wrapped), makes_lock_unusable(&plain));
        assert!(!makes_lock_unusable(&wrapped));
    }

    #[test]
    fn a_script_s_own_error_stays_what_it_was() {
        let own = server_error(
            b"-ERR Error running script (call to f_0123): @user_script:1: Script attempted to access nonexistent global variable 'x'\r\n",
        );
        assert!(script_call_error(&own).is_none());
        assert!(makes_lock_unusable(&own));
    }
}

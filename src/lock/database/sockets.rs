//! The sockets of a connection the lock opened itself: found (PDO does not
//! say which descriptor it made), kept from fork children and exec()ed
//! programs, and watched while a statement runs on them.
//!
//! The traps this closes:
//! - mysqlnd leaves its socket inheritable: made close-on-exec, so a
//!   program the job starts cannot keep the session, and the lock, alive
//!   after the job is killed;
//! - a fork child's copy is pointed at /dev/null at fork time, so nothing
//!   the child does (PDO's destructor sends COM_QUIT or Terminate) can end
//!   the parent's session;
//! - a frozen server or a network black hole cannot block a statement for
//!   ever: unanswered [`ANSWER_GRACE`] past its own wait, its connection
//!   is cut (and reported lost); with a PHP signal handler pending, a wait
//!   statement is cut [`INTERRUPT_GRACE`] past its slice, so the handler
//!   runs.

use super::dialect::Dialect;
use super::errors::SqlError;
use crate::lock::sys::{self, InterruptFlag};
use std::time::Duration;

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

/// A descriptor of a connection the lock opened: made close-on-exec and
/// detached in fork children (see the module docs).
pub fn track_connection_fd(fd: i32) {
    sys::set_close_on_exec(fd);
    sys::track_fd(fd);
}

pub fn untrack_connection_fd(fd: i32) {
    sys::untrack_fd(fd);
}

/// The socket descriptors open in this process now, to find the ones a new
/// PDO connection made (every descriptor that fstat says is a socket).
pub fn open_sockets() -> Vec<i32> {
    sys::open_sockets()
}

/// Watches one statement on a connection the lock opened itself, whose
/// sockets are `fds`: when the server has not answered [`ANSWER_GRACE`]
/// after the statement's own wait (`slice`, for a wait statement), or, for a
/// wait statement, once `interrupt` is set (a PHP signal handler pending)
/// `INTERRUPT_GRACE` (50 ms) after its slice, the sockets are shut down so that
/// the blocked read returns. `StatementWatch::finish` says which.
pub fn watch_statement(
    fds: &[i32],
    slice: Option<Duration>,
    interrupt: Option<InterruptFlag>,
) -> StatementWatch<'_> {
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
pub struct StatementWatch<'a> {
    watch: sys::SocketWatch<'a>,
    budget: Duration,
}

impl StatementWatch<'_> {
    /// Ends the watch. `Err` when it cut the connection: the error to
    /// report (a lost connection; the statement's own result, if any, no
    /// longer counts).
    ///
    /// # Errors
    ///
    /// The [`SqlError`] saying the server did not answer in time, or that
    /// the statement was cut for a pending signal handler.
    pub fn finish(self, dialect: &dyn Dialect) -> Result<(), SqlError> {
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
        Err(dialect.lost_connection_error(message))
    }
}

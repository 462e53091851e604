//! One command on every Redlock master at once without a thread per
//! master: written to every kept connection first, then each reply read in
//! turn, each awaited no longer than on a thread of its own (its bound runs
//! from when it was written). A thread per master per operation cost two
//! `clone3` and ~10 `rt_sigprocmask` per master and operation. Also the
//! thread-per-master way ([`in_parallel`]), for connecting and retrying,
//! which both this file and `redlock.rs` use.
//!
//! Traps it closes:
//! - the command is a closure that talks to a connection (a script's
//!   `EVALSHA`, then `SCRIPT LOAD` and again on `NOSCRIPT`): it runs
//!   twice, on a [`Recorder`] that writes its first command and stops it,
//!   then on a [`Replayer`] that answers that command with the reply read
//!   and sends any further one to the connection;
//! - replies read one after another must not add up their timeouts: a read
//!   waits only for what is left of its master's bound (one `setsockopt`,
//!   only when that is noticeably less than the socket has, i.e. after a
//!   slow master);
//! - a master without a kept connection would be connected to on this
//!   thread, one after another (each unreachable one its connect
//!   timeout): then the caller asks every master on a thread of its own;
//! - a broken connection (a failed write or read, a timeout, EINTR: this is
//!   the PHP thread, which takes signals) is dropped and the command tried
//!   once more on a new connection while time is left, as
//!   [`Node::run_before`](super::super::node::Node::run_before) does (on
//!   threads: only those masters).

use super::super::connection::{in_step, Conn};
use super::super::errors::Fault;
use super::super::node::NodeResult;
use super::super::options::RedisOptions;
use super::single::Single;
use crate::lock::signals;
use redis::{ConnectionLike, ErrorKind, RedisError, RedisResult, Value};
use std::thread;
use std::time::{Duration, Instant};

/// A command for every master: what [`Redlock`](super::redlock::Redlock)
/// runs.
pub(super) type Command<'a, T> = dyn Fn(&mut dyn ConnectionLike) -> RedisResult<T> + Sync + 'a;

/// What writing the command to one master left.
enum Written<T> {
    /// Its reply is due until then.
    Awaiting(Instant),
    /// Nothing to read: the result (a timeout before it went out, a failed
    /// write, a command that sent nothing).
    Done(RedisResult<T>),
}

/// Runs `command` on every master, none awaited past `deadline`, when each
/// has a kept connection (`None` otherwise: nothing was sent). For each
/// master, in master order: its result (and whether it ran twice), and
/// whether `command` was sent to it.
pub(super) fn on_kept_connections<T: Send>(
    masters: &mut [Single],
    options: &RedisOptions,
    deadline: Option<Instant>,
    command: &Command<'_, T>,
) -> Option<Vec<(NodeResult<T>, bool)>> {
    if masters.iter().any(|master| master.node.conn.is_none()) {
        return None;
    }
    let left = || {
        deadline.map_or(Duration::MAX, |d| {
            d.saturating_duration_since(Instant::now())
        })
    };
    let written: Vec<(Written<T>, bool)> = masters
        .iter_mut()
        .map(|master| match master.node.conn.as_mut() {
            Some(conn) => write(conn, options.within(left()).read_timeout, &left, command),
            None => (Written::Done(Err(timed_out())), false),
        })
        .collect();
    let mut failed = Vec::new();
    let mut results: Vec<(NodeResult<T>, bool)> = Vec::with_capacity(masters.len());
    for (index, (master, (written, sent))) in masters.iter_mut().zip(written).enumerate() {
        let result = match (written, master.node.conn.as_mut()) {
            (Written::Awaiting(until), Some(conn)) => {
                let reply = read(conn, until);
                command(&mut Replayer {
                    conn,
                    reply: Some(reply),
                })
            }
            (Written::Awaiting(_), None) => Err(timed_out()),
            (Written::Done(result), _) => result,
        };
        if !in_step(&result) {
            // After a timeout or I/O error its replies may be out of step.
            master.node.conn = None;
        }
        if matches!(&result, Err(err) if err.kind() == ErrorKind::Io) && !left().is_zero() {
            failed.push(index);
        }
        results.push((
            result.map(|value| (value, false)).map_err(Fault::Command),
            sent,
        ));
    }
    if !failed.is_empty() {
        let again = in_parallel(
            masters
                .iter_mut()
                .enumerate()
                .filter(|(index, _)| failed.contains(index))
                .map(|(_, master)| master)
                .collect(),
            &|master| {
                master
                    .node
                    .once_before(options, deadline, |conn| command(conn))
            },
        );
        for (index, result) in failed.into_iter().zip(again) {
            results[index].0 = result.map(|value| (value, true));
        }
    }
    Some(results)
}

/// Writes `command`'s first command to `conn` with the socket's timeouts
/// at `bound`; whether it went out.
fn write<T>(
    conn: &mut Conn,
    bound: Duration,
    left: &dyn Fn() -> Duration,
    command: &Command<'_, T>,
) -> (Written<T>, bool) {
    if left().is_zero() {
        return (Written::Done(Err(timed_out())), false);
    }
    if let Err(err) = conn.time_out_after(bound) {
        return (Written::Done(Err(err)), false);
    }
    let mut recorder = Recorder {
        conn,
        written: None,
    };
    let result = command(&mut recorder);
    let written = match recorder.written {
        Some(Ok(())) => Written::Awaiting(Instant::now() + bound),
        Some(Err(err)) => Written::Done(Err(err)),
        None => Written::Done(result),
    };
    (written, true)
}

/// The reply on `conn`, awaited until `until`.
fn read(conn: &mut Conn, until: Instant) -> RedisResult<Value> {
    let left = until.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(timed_out());
    }
    if conn
        .timeout()
        .is_none_or(|timeout| left + slack(timeout) < timeout)
    {
        conn.time_out_after(left)?;
    }
    loop {
        // Push messages are no replies (as in the crate's own reads).
        match conn.recv_response()? {
            Value::Push { .. } => {}
            reply => return Ok(reply),
        }
    }
}

/// How much less than the socket's timeout must be left before a read sets
/// it: so the usual read sets none, and a reply read after a stalled
/// master's is awaited past its bound by this at most.
fn slack(timeout: Duration) -> Duration {
    (timeout / 50).max(Duration::from_millis(2))
}

fn timed_out() -> RedisError {
    RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut))
}

/// Writes the first command it is given and fails every command, so that
/// the command stops before it waits for a reply.
struct Recorder<'a> {
    conn: &'a mut Conn,
    /// How writing the first command went; `None`: none came.
    written: Option<RedisResult<()>>,
}

impl Recorder<'_> {
    fn stop() -> RedisError {
        RedisError::from((ErrorKind::Client, "written; its reply is read later"))
    }
}

impl ConnectionLike for Recorder<'_> {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        if self.written.is_none() {
            self.written = Some(self.conn.send_packed_command(cmd));
        }
        Err(Self::stop())
    }

    /// No Redlock command pipelines: one would end as this error.
    fn req_packed_commands(&mut self, _: &[u8], _: usize, _: usize) -> RedisResult<Vec<Value>> {
        Err(Self::stop())
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }

    fn check_connection(&mut self) -> bool {
        self.conn.check_connection()
    }

    fn is_open(&self) -> bool {
        self.conn.is_open()
    }
}

/// Answers the first command with the reply read for it; sends the others
/// to the connection.
struct Replayer<'a> {
    conn: &'a mut Conn,
    reply: Option<RedisResult<Value>>,
}

impl ConnectionLike for Replayer<'_> {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        match self.reply.take() {
            Some(reply) => reply,
            None => self.conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.conn.req_packed_commands(cmd, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }

    fn check_connection(&mut self) -> bool {
        self.conn.check_connection()
    }

    fn is_open(&self) -> bool {
        self.conn.is_open()
    }
}

/// Runs `run` on every master, one scoped thread each when there are
/// several (one runs on this thread).
pub(super) fn in_parallel<T: Send>(
    mut masters: Vec<&mut Single>,
    run: &(dyn Fn(&mut Single) -> std::result::Result<T, Fault> + Sync),
) -> Vec<std::result::Result<T, Fault>> {
    if let [master] = masters.as_mut_slice() {
        return vec![run(master)];
    }
    thread::scope(|scope| {
        // Signals are the PHP thread's to take (see lock::signals).
        let started: Vec<_> = signals::with_signals_blocked(|| {
            masters
                .into_iter()
                .map(|master| {
                    thread::Builder::new()
                        .name("cronlock-redlock".to_owned())
                        // No signal check here: the engine's interrupt flag
                        // belongs to the PHP thread, which checks it after.
                        .spawn_scoped(scope, move || run(master))
                })
                .collect()
        });
        started
            .into_iter()
            .map(|spawned| match spawned {
                Ok(handle) => handle
                    .join()
                    .unwrap_or_else(|_| Err(local_failure("its thread panicked"))),
                Err(_) => Err(local_failure("no thread could be started for it")),
            })
            .collect()
    })
}

fn local_failure(what: &'static str) -> Fault {
    Fault::Connect(RedisError::from((ErrorKind::Io, what)))
}

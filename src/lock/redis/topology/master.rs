//! What every topology ends at, and what its commands answer: [`Master`],
//! the one server that takes a key's commands now (Single, Sentinel and
//! Cluster each find it their own way, as every redis-rs topology ends at
//! one `ConnectionLike`), the acquire attempt's outcome, and the verdict of
//! a yes/no script.

use super::super::connection::{with_connection, Conn, Server};
use super::super::errors::Fault;
use super::super::node::{Node, NodeResult};
use super::super::options::RedisOptions;
use super::super::token::HolderValue;
use redis::{Connection, RedisResult};
use std::time::{Duration, Instant};

/// The server that takes the key's commands now.
pub(super) trait Master {
    /// Runs `command` there (finding it first, if the topology must),
    /// once more on a new connection after a broken one; whether it ran
    /// twice. `in_wait`: a signal for PHP that interrupted the read ends
    /// it (D9).
    fn run<T>(
        &mut self,
        options: &RedisOptions,
        in_wait: bool,
        command: impl FnMut(&mut Connection) -> RedisResult<T>,
    ) -> NodeResult<T>;

    /// The node commands went to last.
    fn node(&self) -> &Node;

    fn node_mut(&mut self) -> &mut Node;

    /// Where the key is, for messages: `at host:port`, `at master 'm'
    /// (sentinels …)`, `in the Redis Cluster with seeds …`.
    fn place(&self) -> String;

    /// A copy without connections, for the renewal thread.
    fn fresh(&self) -> Self;

    /// In a forked child: forget the parent's sockets without closing them.
    fn forget_connections(&mut self);

    /// Each connection slot and the server it is for, so that the renewal
    /// thread can lend it a connection it keeps and take it back.
    fn for_each_connection(&mut self, visit: &mut dyn FnMut(&Server, &mut Option<Conn>));
}

/// The acquire script's reply: `{1, fence, '', window end, ms until it}`
/// or `{0, PTTL, holder, 0, 0}`.
pub(super) type AcquireReply = (i64, i64, HolderValue, i64, i64);

/// Why the acquire script runs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(in crate::lock::redis) enum Mode {
    /// `acquire(0)`: one try.
    Take,
    /// One try of a waiter.
    Wait,
    /// `acquire()` on a held lock: only confirm and extend, never take (in
    /// once-per mode, extend to the window's end too).
    Confirm,
}

/// What one run of the acquire script found.
pub(in crate::lock::redis) enum Attempt {
    /// `<key>` holds our token (just set, or it already did): the fencing
    /// number, when the attempt started (the TTL runs from later), the end
    /// of its once-per window (server ms; 0: none), and how long after the
    /// attempt started the key lives at least because of that window.
    Ours(i64, Instant, i64, Duration),
    /// Someone else holds the key; it expires within this time (`None`: it
    /// has no TTL, or it is gone).
    Busy(Option<Duration>),
}

/// What the servers said to a yes/no script (renew, release, the end of a
/// once-per window): for one master its answer, for Redlock a majority's.
pub(in crate::lock::redis) enum Verdict {
    /// It (a majority) said yes.
    Yes,
    /// It said no (so many said no that a majority can no longer say yes).
    No,
    /// Too few answered: these are the failures, by master index.
    Unknown(Vec<(usize, Fault)>),
}

/// How many of `masters` must agree: a strict majority (all of one).
pub(super) fn quorum(masters: usize) -> usize {
    masters / 2 + 1
}

/// Counts the answers of a yes/no script, one result per master.
pub(super) fn verdict(results: Vec<NodeResult<i64>>, yes: impl Fn(i64, bool) -> bool) -> Verdict {
    let masters = results.len();
    let needed = quorum(masters);
    let mut ayes = 0;
    let mut noes = 0;
    let mut failures = Vec::new();
    for (index, result) in results.into_iter().enumerate() {
        match result {
            Ok((reply, retried)) if yes(reply, retried) => ayes += 1,
            Ok(_) => noes += 1,
            Err(failure) => failures.push((index, failure)),
        }
    }
    if ayes >= needed {
        Verdict::Yes
    } else if noes + needed > masters {
        Verdict::No
    } else {
        Verdict::Unknown(failures)
    }
}

/// One try on `node` as it is (no failover or redirection followed), its
/// connect and reply awaited at most as long as `bounded` says; the
/// connection is left with the timeouts of `usual`.
pub(super) fn once_on<T>(
    node: &mut Node,
    bounded: &RedisOptions,
    usual: &RedisOptions,
    command: impl FnOnce(&mut Connection) -> RedisResult<T>,
) -> Result<T, Fault> {
    with_connection(&mut node.conn, &node.server, bounded, |conn| {
        conn.time_out_after(bounded.read_timeout)?;
        let reply = command(conn);
        // The connection may be kept for the next command.
        conn.time_out_after(usual.read_timeout)?;
        reply
    })
}

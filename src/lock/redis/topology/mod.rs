//! Where a key lives and how its commands reach it: one closed type,
//! [`Topology`], one file per kind. Single, Sentinel and Cluster each end
//! at one [`Master`] for the key; Redlock is a composite of single masters.
//! The lock asks its topology, never which kind it is; what differs
//! between the kinds is decided here, once.

mod cluster;
mod fanout;
mod master;
mod redlock;
mod sentinel;
mod single;

pub use sentinel::SentinelAuth;

pub(super) use master::{Attempt, Mode, Verdict};

use super::connection::{Conn, Server};
use super::dsn::Secrets;
use super::errors::FailedOp;
use super::node::NodeResult;
use super::options::RedisOptions;
use super::target::Target;
use super::token::HolderValue;
use crate::error::{Error, Result};
use cluster::Cluster;
use fanout::Command;
use master::{once_on, quorum, verdict, AcquireReply, Master};
use redis::{Connection, RedisResult, ScriptInvocation};
use redlock::Redlock;
use sentinel::Sentinel;
use single::Single;
use std::time::{Duration, Instant};

pub(super) enum Topology {
    /// `redis://`, `rediss://`, `unix://`.
    Single(Single),
    /// `redis-sentinel://`: the master the sentinels name.
    Sentinel(Sentinel),
    /// `redis-cluster://`: the node that owns the key's slot.
    Cluster(Cluster),
    /// A list of DSNs: independent masters, a majority of which hold it.
    Redlock(Redlock),
}

/// Runs `$one` with `$master` bound to the [`Master`] of Single, Sentinel
/// or Cluster, or `$many` with `$redlock` bound to the Redlock.
macro_rules! by_kind {
    ($topology:expr, $master:ident => $one:expr, $redlock:ident => $many:expr) => {
        match $topology {
            Topology::Single($master) => $one,
            Topology::Sentinel($master) => $one,
            Topology::Cluster($master) => $one,
            Topology::Redlock($redlock) => $many,
        }
    };
}

impl Topology {
    /// One DSN: a Cluster, Sentinel or single-server DSN; several: Redlock
    /// masters.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidValue`] naming `$dsn` (`$dsn[i]` in a list; never
    /// with the password), or `$options['replicas']` for Redlock.
    pub(super) fn parse(dsns: &[&str], options: &RedisOptions) -> Result<(Topology, Secrets)> {
        if let [dsn] = dsns {
            if let Some((cluster, secrets)) = Cluster::parse(dsn)? {
                return Ok((Topology::Cluster(cluster), secrets));
            }
            if let Some((sentinel, secrets)) = Sentinel::parse(dsn)? {
                return Ok((Topology::Sentinel(sentinel), secrets));
            }
            let (single, secrets) = Single::parse(dsn)?;
            return Ok((Topology::Single(single), secrets));
        }
        if options.replicas > 0 {
            return Err(Error::value(
                "$options['replicas']",
                "applies to one master (or a Sentinel DSN), not to a list of Redlock masters",
            ));
        }
        let other_kind =
            |dsn: &str| Ok(Cluster::parse(dsn)?.is_some() || Sentinel::parse(dsn)?.is_some());
        let (redlock, secrets) = Redlock::parse(dsns, &other_kind)?;
        Ok((Topology::Redlock(redlock), secrets))
    }

    /// For the registry of held keys (D3): what names the servers without
    /// asking one, and the database.
    pub(super) fn identity(&self) -> (String, i64) {
        let address = match self {
            Topology::Single(single) => single.identity(),
            Topology::Sentinel(sentinel) => sentinel.identity(),
            Topology::Cluster(cluster) => cluster.identity(),
            Topology::Redlock(redlock) => redlock.identity(),
        };
        (address, self.first_node_db())
    }

    fn first_node_db(&self) -> i64 {
        by_kind!(self, master => master.node().server.db(),
            redlock => redlock.masters[0].node.server.db())
    }

    /// The names of `<key>:fence` and `<key>:released`: in the key's slot
    /// on a Cluster.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidValue`] naming `$key`, for a Cluster key whose slot
    /// no hash tag can name.
    pub(super) fn companions(&self, key: &str) -> Result<(String, String)> {
        match self {
            Topology::Cluster(_) => cluster::companions(key),
            _ => Ok((format!("{key}:fence"), format!("{key}:released"))),
        }
    }

    /// Where the key is, for messages (see [`Master::place`]).
    pub(super) fn place(&self) -> String {
        by_kind!(self, master => master.place(), redlock => redlock.place())
    }

    /// Whether an acquire's fencing number means anything: not for
    /// Redlock, where no number made from independent counters is
    /// strictly increasing when a master restarts without its counter or a
    /// grant reaches only part of a majority.
    pub(super) fn fences(&self) -> bool {
        !matches!(self, Topology::Redlock(_))
    }

    /// Whether a server may lack the key of a hold that is valid: a
    /// Redlock master that never granted it or lost it, which is no reason
    /// to report a held lock as not held.
    pub(super) fn some_may_lack_the_key(&self) -> bool {
        matches!(self, Topology::Redlock(_))
    }

    /// How long a hold confirmed with `ttl` counts as valid from when the
    /// command was sent: the TTL, less the drift allowance for Redlock.
    pub(super) fn valid_for(&self, ttl: Duration) -> Duration {
        match self {
            Topology::Redlock(_) => redlock::valid_for(ttl),
            _ => ttl,
        }
    }

    /// A waiter's pause of `nap`: Redlock waiters that split the votes
    /// must not retry in step, so theirs is spread over half to 1.5 times it.
    pub(super) fn retry_pause(&self, nap: Duration) -> Duration {
        match self {
            Topology::Redlock(_) => nap.mul_f64(0.5 + jitter()),
            _ => nap,
        }
    }

    /// The server a waiter subscribes to `<key>:released` on (Redlock:
    /// the first master's; polling covers the rest).
    pub(super) fn listener_server(&self) -> &Server {
        by_kind!(self, master => &master.node().server,
            redlock => &redlock.masters[0].node.server)
    }

    /// `false`: not a Sentinel topology.
    pub(super) fn set_sentinel_auth(&mut self, auth: &SentinelAuth) -> bool {
        match self {
            Topology::Sentinel(sentinel) => {
                sentinel.authenticate(auth);
                true
            }
            _ => false,
        }
    }

    /// A copy without connections, for the renewal thread.
    pub(super) fn fresh(&self) -> Topology {
        match self {
            Topology::Single(single) => Topology::Single(single.fresh()),
            Topology::Sentinel(sentinel) => Topology::Sentinel(sentinel.fresh()),
            Topology::Cluster(cluster) => Topology::Cluster(cluster.fresh()),
            Topology::Redlock(redlock) => Topology::Redlock(redlock.fresh()),
        }
    }

    /// In a forked child every connection is the parent's socket (and TLS
    /// session): forget them all without closing them.
    pub(super) fn forget_connections(&mut self) {
        by_kind!(self, master => master.forget_connections(), redlock => {
            for master in &mut redlock.masters {
                master.node.forget_connection();
            }
        });
    }

    /// Each connection slot and the server it is for (see
    /// [`Master::for_each_connection`]).
    pub(super) fn for_each_connection(
        &mut self,
        visit: &mut dyn FnMut(&Server, &mut Option<Conn>),
    ) {
        by_kind!(self, master => master.for_each_connection(visit), redlock => {
            for master in &mut redlock.masters {
                visit(&master.node.server, &mut master.node.conn);
            }
        });
    }

    /// The server the next command goes to, named as
    /// [`Server::pool_key`] names it; `None` for Redlock (its masters are
    /// asked at once, each within a share of the validity).
    pub(super) fn next_server(&self) -> Option<&str> {
        by_kind!(self, master => Some(master.node().server.pool_key()), _redlock => None)
    }

    /// One run of the acquire script (retried once on a broken connection:
    /// it is idempotent for a given token), with `WAIT` for the replicas
    /// asked for. Records who holds the key in `last_holder`; a take or
    /// wait whose script may have set the key without our knowing keeps
    /// `token` in `unsettled`, one that found the key held by someone else
    /// clears it.
    pub(super) fn attempt(
        &mut self,
        target: &Target,
        token: &str,
        mode: Mode,
        invocation: &ScriptInvocation<'static>,
        last_holder: &mut Option<HolderValue>,
        unsettled: &mut Option<String>,
    ) -> std::result::Result<Attempt, FailedOp> {
        by_kind!(self, master => {
            let outcome = attempt_on(master, target, token, mode, invocation, last_holder);
            if mode != Mode::Confirm {
                match &outcome {
                    Err(failed) if failed.unanswered => *unsettled = Some(token.to_owned()),
                    Ok(Attempt::Busy(_)) => *unsettled = None,
                    _ => {}
                }
            }
            outcome
        }, redlock => redlock.attempt(target, token, mode, invocation, last_holder, unsettled))
    }

    /// Runs a token-checked yes/no script where the key lives: the master,
    /// or every Redlock master at once, none awaited past `deadline`.
    pub(super) fn verdict(
        &mut self,
        options: &RedisOptions,
        deadline: Option<Instant>,
        command: &Command<'_, i64>,
        yes: impl Fn(i64, bool) -> bool,
    ) -> Verdict {
        let results = by_kind!(self, master => vec![master.run(options, false, |conn: &mut Connection| command(conn))],
            redlock => redlock.on_all(options, deadline, command));
        verdict(results, yes)
    }

    /// [`Topology::verdict`] for the lock: `Ok(true)` for yes, `Ok(false)`
    /// for no, the failure of `op` in words when it is unknown (a Redlock
    /// master's failures each given `deadline`'s share of the time).
    ///
    /// # Errors
    ///
    /// [`Error::Connection`] / [`Error::Lock`].
    pub(super) fn yes_or_no(
        &mut self,
        target: &Target,
        op: &str,
        deadline: Option<Instant>,
        command: &Command<'_, i64>,
        yes: impl Fn(i64, bool) -> bool,
    ) -> Result<bool> {
        by_kind!(self, master => {
            let (reply, retried) = run_on(master, target, op, false, |conn: &mut Connection| command(conn))?;
            Ok(yes(reply, retried))
        }, redlock => {
            let budget = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            match verdict(redlock.on_all(&target.options, deadline, command), yes) {
                Verdict::Yes => Ok(true),
                Verdict::No => Ok(false),
                Verdict::Unknown(failures) => {
                    Err(redlock.majority_error(target, op, &failures, budget).error)
                }
            }
        })
    }

    /// Runs a one-key `command` where the key lives (or on every Redlock
    /// master at once, none awaited past `deadline`): each server's reply.
    pub(super) fn on_each<T: Send>(
        &mut self,
        options: &RedisOptions,
        deadline: Option<Instant>,
        command: &Command<'_, T>,
    ) -> Vec<NodeResult<T>> {
        by_kind!(self, master => vec![master.run(options, false, |conn: &mut Connection| command(conn))],
            redlock => redlock.on_all(options, deadline, command))
    }

    /// The reply to a read-only `command` where the key lives: the
    /// master's, or the one a majority of the Redlock masters gave.
    ///
    /// # Errors
    ///
    /// The failure of `op` in words ([`Error::Connection`] /
    /// [`Error::Lock`]); for Redlock [`Error::Connection`] also when the
    /// masters that answered gave no majority one reply.
    pub(super) fn agreed_reply<T: Send + PartialEq>(
        &mut self,
        target: &Target,
        op: &str,
        command: &Command<'_, T>,
    ) -> Result<T> {
        by_kind!(self, master => {
            Ok(run_on(master, target, op, false, |conn: &mut Connection| command(conn))?.0)
        }, redlock => {
            let results = redlock.on_all(&target.options, None, command);
            let masters = results.len();
            let mut replies: Vec<(T, usize)> = Vec::new();
            let mut failures = Vec::new();
            for (index, result) in results.into_iter().enumerate() {
                match result {
                    Ok((reply, _)) => match replies.iter_mut().find(|(seen, _)| *seen == reply) {
                        Some((_, count)) => *count += 1,
                        None => replies.push((reply, 1)),
                    },
                    Err(failure) => failures.push((index, failure)),
                }
            }
            if let Some(at) = replies.iter().position(|(_, count)| *count >= quorum(masters)) {
                return Ok(replies.swap_remove(at).0);
            }
            if !failures.is_empty() {
                return Err(redlock.majority_error(target, op, &failures, None).error);
            }
            Err(Error::Connection(target.secrets.scrub(format!(
                "cannot {op} {}: the {masters} Redis masters disagree, and no majority ({}) \
                 gave one answer",
                target.describe(&redlock.place()),
                quorum(masters)
            ))))
        })
    }

    /// Deletes the key (on every Redlock master) if it holds `token`, one
    /// try per server on the node the script went to (no failover or
    /// redirection followed), each connect and reply awaited at most
    /// `limit`. `Ok(true)`: it did (on some master).
    ///
    /// # Errors
    ///
    /// When no (majority of) server(s) answered, the failure in words,
    /// naming the timeouts this try had.
    pub(super) fn release_unsettled(
        &mut self,
        target: &Target,
        token: &str,
        limit: Duration,
    ) -> Result<bool> {
        let invocation = target.release_invocation(token);
        let usual = target.options;
        let bounded = usual.within(limit);
        let release = |node: &mut super::node::Node| {
            once_on(node, &bounded, &usual, |conn| {
                invocation.invoke::<i64>(conn)
            })
        };
        let results = by_kind!(self, master => vec![release(master.node_mut())],
            redlock => redlock.on_nodes(&release));
        let masters = results.len();
        let mut deleted = false;
        let mut failures = Vec::new();
        for (index, result) in results.into_iter().enumerate() {
            match result {
                Ok(1) => deleted = true,
                Ok(_) => {}
                Err(failure) => failures.push((index, failure)),
            }
        }
        if deleted || failures.len() < quorum(masters) {
            return Ok(deleted);
        }
        // The message names the timeouts this try had.
        let given = Target {
            options: bounded,
            ..target.clone()
        };
        Err(by_kind!(self, master => {
            given.error(&master.node().addr(), "release", &failures[0].1, &bounded)
        }, redlock => redlock.majority_error(&given, "release", &failures, None).error))
    }
}

/// [`Master::run`] with the failure of `op` in words, and whether the
/// command was sent without a reply (so it may still run).
fn run_on<M: Master, T>(
    master: &mut M,
    target: &Target,
    op: &str,
    in_wait: bool,
    mut command: impl FnMut(&mut Connection) -> RedisResult<T>,
) -> std::result::Result<(T, bool), FailedOp> {
    let mut sent = false;
    let result = master.run(&target.options, in_wait, |conn| {
        sent = true;
        command(conn)
    });
    result.map_err(|failure| FailedOp {
        error: target.error(&master.node().addr(), op, &failure, &target.options),
        transient: failure.is_transient(),
        unanswered: failure.left_unanswered(sent),
    })
}

/// The acquire script on one master, then `WAIT` for the replicas asked
/// for (too few acknowledgements give the key back and fail the attempt,
/// transiently: a waiter retries).
fn attempt_on<M: Master>(
    master: &mut M,
    target: &Target,
    token: &str,
    mode: Mode,
    invocation: &ScriptInvocation<'static>,
    last_holder: &mut Option<HolderValue>,
) -> std::result::Result<Attempt, FailedOp> {
    let sent = Instant::now();
    let replicas = if mode == Mode::Confirm {
        0
    } else {
        target.options.replicas
    };
    // WAIT gives up a little before the socket would.
    let wait_ms = (target.options.read_timeout.as_millis() * 4 / 5).max(1) as u64;
    let (((acquired, number, holder, window_end, window_left_ms), acks), _) =
        run_on(master, target, "acquire", mode == Mode::Wait, |conn| {
            let reply: AcquireReply = invocation.invoke(conn)?;
            if reply.0 != 1 || replicas == 0 {
                return Ok((reply, 0));
            }
            let acks: i64 = redis::cmd("WAIT").arg(replicas).arg(wait_ms).query(conn)?;
            Ok((reply, acks))
        })?;
    if acquired == 1 && acks < i64::from(replicas) {
        // Not safe from a failover yet: give it back.
        let release = target.release_invocation(token);
        let given_back = run_on(master, target, "release", false, |conn| {
            release.invoke::<i64>(conn)
        });
        return Err(FailedOp {
            error: Error::Connection(target.secrets.scrub(format!(
                "{} was taken, but only {acks} of the {replicas} replicas asked for \
                 acknowledged it within {wait_ms} ms; it was given back",
                target.describe(&master.place())
            ))),
            transient: true,
            unanswered: given_back.is_err(),
        });
    }
    if acquired == 1 {
        let window_left = Duration::from_millis(u64::try_from(window_left_ms).unwrap_or(0));
        return Ok(Attempt::Ours(number, sent, window_end, window_left));
    }
    *last_holder = Some(holder);
    // PTTL is -1 for a key without TTL, -2 for no key.
    Ok(Attempt::Busy(
        u64::try_from(number).ok().map(Duration::from_millis),
    ))
}

/// A number in [0, 1) that differs between processes and calls.
fn jitter() -> f64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.subsec_nanos());
    let mixed = (u64::from(nanos) ^ u64::from(crate::lock::owner::current_pid()).rotate_left(32))
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (mixed >> 11) as f64 / (1u64 << 53) as f64
}

//! Redlock: one key on N independent masters, held while a majority
//! granted it (see the module docs of [`super`], "Redlock").
//!
//! Every operation goes to all masters at once (one thread per master, so a
//! master that is down or stopped costs its timeout once, not once per
//! master), each with the single-node retry after a broken connection.

use super::connection::{with_connection, Server};
use super::errors::{Failed, Failure};
use super::lock::{AcquireReply, Attempt, Mode, RedisLock};
use super::options::RedisOptions;
use super::scripts::scripts;
use crate::error::Error;
use redis::{Connection, ConnectionAddr, ErrorKind, RedisError, RedisResult};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::thread;
use std::time::{Duration, Instant};

/// One master: where it is and our connection to it.
pub(super) struct Node {
    pub(super) server: Server,
    pub(super) conn: Option<Connection>,
}

impl Node {
    pub(super) fn new(server: Server) -> Self {
        Node { server, conn: None }
    }

    /// The server as far as its DSN shows it, without the database: one
    /// string for every spelling of the loopback address (`localhost`,
    /// `127.0.0.1`, `::1`, `::ffff:127.0.0.1`) and for an IPv4 address and
    /// its IPv4-mapped IPv6 form. Spellings that only a connection can tell
    /// apart (a unix socket and a port, a host name) are caught by the
    /// masters' `run_id` (see [`RedisLock::attempt_on_masters`]).
    pub(super) fn server_identity(&self) -> String {
        match self.server.client.get_connection_info().addr() {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                format!("{}:{port}", canonical_host(host))
            }
            other => other.to_string(),
        }
    }

    pub(super) fn address(&self) -> String {
        let addr = self.server.client.get_connection_info().addr().to_string();
        match self.server.db {
            0 => addr,
            db => format!("{addr}/{db}"),
        }
    }
}

fn canonical_host(host: &str) -> String {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.eq_ignore_ascii_case("localhost") {
        return "loopback".to_owned();
    }
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
            Some(v4) => canonical_ip(IpAddr::V4(v4)),
            None => canonical_ip(IpAddr::V6(v6)),
        },
        Ok(ip) => canonical_ip(ip),
        Err(_) => host.to_ascii_lowercase(),
    }
}

/// `localhost` may be either loopback address: all three are one.
fn canonical_ip(ip: IpAddr) -> String {
    if ip == IpAddr::V4(Ipv4Addr::LOCALHOST) || ip == IpAddr::V6(Ipv6Addr::LOCALHOST) {
        "loopback".to_owned()
    } else {
        ip.to_string()
    }
}

/// The `run_id` in a reply to `INFO server`; empty when there is none.
fn run_id_in(info: &str) -> String {
    info.lines()
        .find_map(|line| line.strip_prefix("run_id:"))
        .map_or_else(String::new, |id| id.trim().to_owned())
}

/// How many masters must grant the key: a strict majority.
pub(super) fn quorum(masters: usize) -> usize {
    masters / 2 + 1
}

/// The clock drift allowed between masters and us over one TTL (the
/// Redlock paper's 1 % plus 2 ms for the resolution of Redis' expiry): a
/// hold counts as valid for TTL − drift from when the attempt was sent.
pub(super) fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// One node's result of [`on_all`]: the value and whether it ran twice.
pub(super) type NodeResult<T> = Result<(T, bool), Failure>;

/// Runs `command` on every node, all at once when there are several
/// (one scoped thread each), and returns each node's result in node order:
/// the value and whether it ran twice. One node runs on this thread.
/// With a `deadline`, no node's connect, write or reply is awaited past
/// it (see [`run_before`]).
pub(super) fn on_all<T: Send>(
    nodes: &mut [Node],
    options: &RedisOptions,
    deadline: Option<Instant>,
    command: &(dyn Fn(&mut Connection) -> RedisResult<T> + Sync),
) -> Vec<NodeResult<T>> {
    in_parallel(nodes, &|node| run_before(node, options, deadline, command))
}

/// [`on_all`], also saying for each node whether `command` was sent to it
/// (at least once), so that a failure can tell "may have run" from "never
/// went out".
pub(super) fn on_all_noting_sent<T: Send>(
    nodes: &mut [Node],
    options: &RedisOptions,
    deadline: Option<Instant>,
    command: &(dyn Fn(&mut Connection) -> RedisResult<T> + Sync),
) -> Vec<(NodeResult<T>, bool)> {
    let results = in_parallel(nodes, &|node| {
        let mut sent = false;
        let result = run_before(node, options, deadline, |conn| {
            sent = true;
            command(conn)
        });
        Ok((result, sent))
    });
    results
        .into_iter()
        .map(|outcome| match outcome {
            Ok((result, sent)) => (result, sent),
            Err(failure) => (Err(failure), false),
        })
        .collect()
}

/// The single-node retry after a broken connection on one master, with
/// every timeout (connect, write, reply; the retry only if time is left)
/// cut to what is left until `deadline`. A stalled minority then costs an
/// operation no more than the share of the validity time it was given,
/// instead of a renewal outliving the hold it renews.
fn run_before<T>(
    node: &mut Node,
    options: &RedisOptions,
    deadline: Option<Instant>,
    mut command: impl FnMut(&mut Connection) -> RedisResult<T>,
) -> NodeResult<T> {
    let left = || {
        deadline.map_or(Duration::MAX, |d| {
            d.saturating_duration_since(Instant::now())
        })
    };
    let mut once = |node: &mut Node| {
        let left = left();
        if left.is_zero() {
            return Err(Failure::Command(RedisError::from(std::io::Error::from(
                std::io::ErrorKind::TimedOut,
            ))));
        }
        let bounded = bounded(options, left);
        with_connection(&mut node.conn, &node.server, &bounded, |conn| {
            // A kept connection carries the timeouts of its last command.
            conn.set_read_timeout(Some(bounded.read_timeout))?;
            conn.set_write_timeout(Some(bounded.read_timeout))?;
            command(conn)
        })
    };
    match once(node) {
        Ok(value) => Ok((value, false)),
        Err(Failure::Command(err)) if err.kind() == ErrorKind::Io && !left().is_zero() => {
            once(node).map(|value| (value, true))
        }
        Err(failure) => Err(failure),
    }
}

/// `options` with its timeouts cut to `budget` (at least 1 ms: a zero
/// timeout is refused by the socket API).
pub(super) fn bounded(options: &RedisOptions, budget: Duration) -> RedisOptions {
    let budget = budget.max(Duration::from_millis(1));
    RedisOptions {
        connect_timeout: options.connect_timeout.min(budget),
        read_timeout: options.read_timeout.min(budget),
        ..*options
    }
}

/// Runs `run` on every node, one scoped thread each when there are several.
pub(super) fn in_parallel<T: Send>(
    nodes: &mut [Node],
    run: &(dyn Fn(&mut Node) -> Result<T, Failure> + Sync),
) -> Vec<Result<T, Failure>> {
    if let [node] = nodes {
        return vec![run(node)];
    }
    thread::scope(|scope| {
        let started: Vec<_> = nodes
            .iter_mut()
            .map(|node| {
                thread::Builder::new()
                    .name("cronlock-redlock".to_owned())
                    // No signal check here: the engine's interrupt flag
                    // belongs to the PHP thread, which checks it after.
                    .spawn_scoped(scope, move || run(node))
            })
            .collect();
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

fn local_failure(what: &'static str) -> Failure {
    Failure::Connect(RedisError::from((ErrorKind::Io, what)))
}

/// What a majority said to a yes/no operation (renew, release, the end of
/// a once-per window).
pub(super) enum Verdict {
    /// A majority said yes.
    Yes,
    /// So many said no that a majority can no longer say yes.
    No,
    /// Too few answered: these are the failures, by node index.
    Unknown(Vec<(usize, Failure)>),
}

/// Counts the answers of [`on_all`] for an operation whose replies are
/// `yes` or not.
pub(super) fn verdict(
    results: Vec<Result<(i64, bool), Failure>>,
    yes: impl Fn(i64, bool) -> bool,
) -> Verdict {
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
    } else if noes > masters - needed {
        Verdict::No
    } else {
        Verdict::Unknown(failures)
    }
}

impl RedisLock {
    /// One acquire (or confirm) on every master. Held when a majority
    /// granted and time is left of the validity (TTL − elapsed − drift); a
    /// take that falls short undoes its grants. Contention (some master
    /// holding another token, and no majority ours) is `Busy`; fewer masters
    /// answering within half the validity than a majority, or a majority
    /// that granted too late, is the error.
    pub(super) fn attempt_on_masters(
        &mut self,
        token: &str,
        mode: Mode,
    ) -> std::result::Result<Attempt, Failed> {
        let invocation = self.acquire_invocation(token, mode);
        let sent = Instant::now();
        // Half the validity for the answers, so a hold won against a
        // stalled minority still has half of it left.
        let budget = self.valid_for(self.ttl) / 2;
        // Until every master said who it is: INFO first, on the same
        // connection, so that two DSNs of one server are caught.
        let identify = self.run_ids.iter().any(Option::is_none);
        let results = on_all_noting_sent(
            &mut self.nodes,
            &self.options,
            Some(sent + budget),
            &|conn| {
                let run_id = if identify {
                    match redis::cmd("INFO").arg("server").query::<String>(conn) {
                        Ok(info) => Some(run_id_in(&info)),
                        // Refused (an ACL without INFO): it cannot say.
                        Err(err) if matches!(err.kind(), ErrorKind::Server(_)) => {
                            Some(String::new())
                        }
                        Err(err) => return Err(err),
                    }
                } else {
                    None
                };
                Ok((run_id, invocation.invoke::<AcquireReply>(conn)?))
            },
        );
        let elapsed = sent.elapsed();
        // A master that got the script but did not answer may set the key
        // yet (a stalled one runs it when it resumes).
        let mut left_ours = false;
        let masters = results.len();
        let needed = quorum(masters);
        let mut granted = Vec::new();
        let mut busy = 0;
        let mut expires_in: Option<Duration> = None;
        let mut window_end = 0;
        let mut window_left: Option<Duration> = None;
        let mut failures = Vec::new();
        for (index, (result, reached)) in results.into_iter().enumerate() {
            let result = result.map(|((run_id, reply), retried)| {
                if let Some(run_id) = run_id {
                    self.run_ids[index].get_or_insert(run_id);
                }
                (reply, retried)
            });
            match result {
                Ok(((1, _, _, ends, left_ms), _)) => {
                    granted.push(index);
                    window_end = window_end.max(ends);
                    // the key lives that long on every master that granted
                    let left = Duration::from_millis(u64::try_from(left_ms).unwrap_or(0));
                    window_left = Some(window_left.map_or(left, |l| l.min(left)));
                }
                Ok(((_, pttl, holder, _, _), _)) => {
                    busy += 1;
                    if !holder.is_empty() || self.last_holder.is_none() {
                        self.last_holder = Some(holder);
                    }
                    // PTTL is -1 for a key without TTL, -2 for no key.
                    if let Ok(ms) = u64::try_from(pttl) {
                        let pttl = Duration::from_millis(ms);
                        expires_in = Some(expires_in.map_or(pttl, |e| e.min(pttl)));
                    }
                }
                Err(failure) => {
                    left_ours |= failure.left_unanswered(reached);
                    failures.push((index, failure));
                }
            }
        }
        if let Some(error) = self.one_server_twice() {
            if !granted.is_empty() && !self.undo_grants(token, &granted) {
                self.unsettled = Some(token.to_owned());
            }
            return Err(Failed {
                error,
                transient: false,
                unanswered: false,
            });
        }
        let in_time = elapsed + drift(self.ttl) < self.ttl;
        if granted.len() >= needed && in_time {
            return Ok(Attempt::Ours(
                0,
                sent,
                window_end,
                window_left.unwrap_or_default(),
            ));
        }
        if mode == Mode::Confirm {
            // Never undo our own hold: report it lost only when a majority
            // said the key is not ours.
            if busy > masters - needed || (granted.len() >= needed && !in_time) {
                return Ok(Attempt::Busy(expires_in));
            }
            return Err(self.majority_error("acquire", &failures, Some(budget)));
        }
        let late = granted.len() >= needed;
        if !granted.is_empty() {
            left_ours |= !self.undo_grants(token, &granted);
        }
        if left_ours {
            self.unsettled = Some(token.to_owned());
        } else if failures.is_empty() {
            // Every master answered, and none holds our token.
            self.unsettled = None;
        }
        if late {
            // Nobody else holds it: the answers came too late to count.
            Err(self.too_late_error(elapsed))
        } else if busy > 0 && granted.len() + busy >= needed {
            Ok(Attempt::Busy(expires_in))
        } else {
            Err(self.majority_error("acquire", &failures, Some(budget)))
        }
    }

    /// Best effort: deletes the key (if still ours) on the masters that
    /// granted an attempt that did not win, so that it does not block the
    /// next one. `false`: a master did not answer, and may keep ours.
    fn undo_grants(&mut self, token: &str, granted: &[usize]) -> bool {
        let mut invocation = scripts().release.prepare_invoke();
        invocation.key(&self.key).arg(token).arg(&self.channel);
        let mut nodes: Vec<Node> = granted
            .iter()
            .map(|&index| Node {
                server: self.nodes[index].server.clone(),
                conn: self.nodes[index].conn.take(),
            })
            .collect();
        let results = on_all(&mut nodes, &self.options, None, &|conn| {
            invocation.invoke::<i64>(conn)
        });
        for (node, &index) in nodes.into_iter().zip(granted) {
            self.nodes[index].conn = node.conn;
        }
        results.iter().all(Result::is_ok)
    }

    /// Two masters that gave the same `run_id`: one server, reached
    /// through two DSNs (a unix socket and a port, a host name and an
    /// address), which would count twice in every majority.
    fn one_server_twice(&self) -> Option<Error> {
        for (index, run_id) in self.run_ids.iter().enumerate() {
            let Some(run_id) = run_id.as_deref().filter(|id| !id.is_empty()) else {
                continue;
            };
            if let Some(other) = self.run_ids[index + 1..]
                .iter()
                .position(|other| other.as_deref() == Some(run_id))
            {
                return Some(Error::Lock(format!(
                    "cannot use {}: the Redis masters {} and {} are one server (the same \
                     run_id); Redlock needs independent masters",
                    self.describe(),
                    self.nodes[index].address(),
                    self.nodes[index + 1 + other].address()
                )));
            }
        }
        None
    }

    /// A majority granted, but the attempt took so long that no validity
    /// time was left: not contention, and not ours.
    fn too_late_error(&self, elapsed: Duration) -> Failed {
        Failed {
            error: Error::Connection(format!(
                "cannot acquire {}: a majority of the {} Redis masters granted it, but only after \
                 {} ms, which leaves none of the lock's validity time ({} ms: the TTL less the \
                 drift allowance)",
                self.describe(),
                self.nodes.len(),
                elapsed.as_millis(),
                self.valid_for(self.ttl).as_millis()
            )),
            transient: true,
            unanswered: false,
        }
    }

    /// Too few masters answered `op` (each given at most `budget`, a share
    /// of the validity time): each one's failure, in one message.
    pub(super) fn majority_error(
        &self,
        op: &str,
        failures: &[(usize, Failure)],
        budget: Option<Duration>,
    ) -> Failed {
        let masters = self.nodes.len();
        // The per-master messages name the timeouts that master was given.
        let given = budget.map_or(self.options, |budget| bounded(&self.options, budget));
        let reasons: Vec<String> = failures
            .iter()
            .map(|(index, failure)| self.error_with(*index, op, failure, &given).to_string())
            .collect();
        let within = match budget {
            Some(budget) if budget < self.options.read_timeout => format!(
                " within {} ms (the share of the lock's validity time a call may wait)",
                budget.as_millis()
            ),
            _ => String::new(),
        };
        let message = format!(
            "cannot {op} {}: {} of the {masters} Redis masters did not answer{within}, and a \
             majority ({}) must: {}",
            self.describe(),
            failures.len(),
            quorum(masters),
            reasons.join("; ")
        );
        let unusable = failures.iter().any(|(index, failure)| {
            matches!(self.error_with(*index, op, failure, &given), Error::Lock(_))
        });
        Failed {
            error: if unusable {
                Error::Lock(message)
            } else {
                Error::Connection(message)
            },
            transient: failures.iter().all(|(_, failure)| failure.is_transient()),
            // Callers that need it (the acquire) count it per master.
            unanswered: false,
        }
    }
}

#[cfg(test)]
mod identity_tests {
    use super::{canonical_host, run_id_in};

    #[test]
    fn loopback_and_ipv4_mapped_spellings_are_one_host() {
        for loopback in [
            "localhost",
            "LOCALHOST",
            "127.0.0.1",
            "[::1]",
            "::1",
            "[::ffff:127.0.0.1]",
            "::ffff:7f00:1",
            "0:0:0:0:0:0:0:1",
        ] {
            assert_eq!(canonical_host(loopback), "loopback", "{loopback}");
        }
        assert_eq!(canonical_host("[::ffff:10.0.0.1]"), "10.0.0.1");
        assert_eq!(canonical_host("127.0.0.2"), "127.0.0.2");
        assert_eq!(canonical_host("Redis.Example"), "redis.example");
        assert_ne!(canonical_host("[::2]"), canonical_host("[::1]"));
    }

    #[test]
    fn the_run_id_is_read_from_info_server() {
        let info = "# Server\r\nredis_version:7.0.15\r\nrun_id:0123abcd\r\ntcp_port:6379\r\n";
        assert_eq!(run_id_in(info), "0123abcd");
        assert_eq!(run_id_in("# Server\r\n"), "");
    }
}

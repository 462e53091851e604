//! Redlock: one key on N independent masters, held while a majority
//! granted it (see the module docs of `lock::redis`, "Redlock"): a
//! composite of single masters, as Symfony's `CombinedStore` is of stores.
//!
//! Every operation goes to all masters at once, so that a master that is
//! down or stopped costs its timeout once, not once per master, each with
//! the single-node retry after a broken connection: written to every kept
//! connection before any reply is read ([`fanout`](super::fanout)), or,
//! when a master must be connected to first, one thread per master.

use super::super::dsn::Secrets;
use super::super::errors::{FailedOp, Fault};
use super::super::node::{Node, NodeResult};
use super::super::options::RedisOptions;
use super::super::target::Target;
use super::super::token::HolderValue;
use super::fanout::{in_parallel, on_kept_connections, Command};
use super::master::{quorum, AcquireReply, Attempt, Mode};
use super::single::Single;
use crate::error::{Error, Result};
use redis::{ErrorKind, ScriptInvocation};
use std::time::{Duration, Instant};

pub(in crate::lock::redis) struct Redlock {
    pub(super) masters: Vec<Single>,
    /// Each master's `run_id` (`INFO server`), learnt by the first attempt
    /// it answers; `Some("")` when it would not say.
    run_ids: Vec<Option<String>>,
}

impl Redlock {
    /// The masters of `dsns`, each a plain DSN, none named twice as far as
    /// the DSNs show it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidValue`] naming `$dsn` or `$dsn[i]`.
    /// `other_kind`: whether a DSN is one of another topology (Sentinel,
    /// Cluster), which cannot be a Redlock master.
    pub(super) fn parse(
        dsns: &[&str],
        other_kind: &dyn Fn(&str) -> Result<bool>,
    ) -> Result<(Redlock, Secrets)> {
        let mut masters: Vec<Single> = Vec::with_capacity(dsns.len());
        let mut secrets = Secrets::none();
        for (index, dsn) in dsns.iter().enumerate() {
            if other_kind(dsn)? {
                return Err(Error::value(
                    format!("$dsn[{index}]"),
                    "must be a redis://, rediss:// or unix:// DSN: Redlock needs independent masters",
                ));
            }
            let (master, found) = Single::parse(dsn).map_err(|err| match err {
                Error::InvalidValue { arg, reason } => {
                    Error::value(format!("{arg}[{index}]"), reason)
                }
                other => other,
            })?;
            secrets.merge(found);
            let identity = master.node.server_identity();
            if let Some(other) = masters
                .iter()
                .find(|other| other.node.server_identity() == identity)
            {
                let (first, again) = (other.node.address(), master.node.address());
                let also = if first == again {
                    String::new()
                } else {
                    format!(" (also as {again})")
                };
                return Err(Error::value(
                    "$dsn",
                    format!(
                        "names the Redis master {first} twice{also}; Redlock needs independent \
                         masters"
                    ),
                ));
            }
            masters.push(master);
        }
        let run_ids = vec![None; masters.len()];
        Ok((Redlock { masters, run_ids }, secrets))
    }

    /// For the registry of held keys: the masters' `address/db`, sorted
    /// (their order does not matter).
    pub(super) fn identity(&self) -> String {
        let mut masters: Vec<String> = self.masters.iter().map(Single::identity).collect();
        masters.sort();
        masters.join(",")
    }

    /// `at a:6379, b:6379, c:6379` for messages.
    pub(super) fn place(&self) -> String {
        let at = self
            .masters
            .iter()
            .map(|master| master.node.address())
            .collect::<Vec<_>>()
            .join(", ");
        format!("at {at}")
    }

    /// A copy without connections (for the renewal thread).
    pub(super) fn fresh(&self) -> Redlock {
        Redlock {
            masters: self
                .masters
                .iter()
                .map(|master| Single {
                    node: master.node.fresh(),
                })
                .collect(),
            run_ids: self.run_ids.clone(),
        }
    }

    /// Runs `command` on every master at once (none awaited past
    /// `deadline`), each master's result in master order.
    pub(super) fn on_all<T: Send>(
        &mut self,
        options: &RedisOptions,
        deadline: Option<Instant>,
        command: &Command<'_, T>,
    ) -> Vec<NodeResult<T>> {
        self.on_all_noting_sent(options, deadline, command)
            .into_iter()
            .map(|(result, _)| result)
            .collect()
    }

    /// [`Redlock::on_all`], also saying for each master whether `command`
    /// was sent to it (at least once), so that a failure can tell "may
    /// have run" from "never went out".
    fn on_all_noting_sent<T: Send>(
        &mut self,
        options: &RedisOptions,
        deadline: Option<Instant>,
        command: &Command<'_, T>,
    ) -> Vec<(NodeResult<T>, bool)> {
        on_kept_connections(&mut self.masters, options, deadline, command)
            .unwrap_or_else(|| self.on_threads_noting_sent(options, deadline, command))
    }

    /// [`Redlock::on_all_noting_sent`] with one thread per master, each
    /// connecting first if it must.
    fn on_threads_noting_sent<T: Send>(
        &mut self,
        options: &RedisOptions,
        deadline: Option<Instant>,
        command: &Command<'_, T>,
    ) -> Vec<(NodeResult<T>, bool)> {
        let results = in_parallel(self.masters.iter_mut().collect(), &|master| {
            let mut sent = false;
            let result = master.run_before(options, deadline, |conn| {
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

    /// Runs `run` on every master's node, one scoped thread each.
    pub(super) fn on_nodes<T: Send>(
        &mut self,
        run: &(dyn Fn(&mut Node) -> std::result::Result<T, Fault> + Sync),
    ) -> Vec<std::result::Result<T, Fault>> {
        in_parallel(self.masters.iter_mut().collect(), &|master| {
            run(&mut master.node)
        })
    }

    /// One acquire (or confirm) on every master. Held when a majority
    /// granted and time is left of the validity (TTL − elapsed − drift); a
    /// take that falls short undoes its grants. Contention (some master
    /// holding another token, and no majority ours) is `Busy`; fewer masters
    /// answering within half the validity than a majority, or a majority
    /// that granted too late, is the error. Records who holds the key in
    /// `last_holder` and a token that may be left in it in `unsettled`.
    pub(super) fn attempt(
        &mut self,
        target: &Target,
        token: &str,
        mode: Mode,
        invocation: &ScriptInvocation<'static>,
        last_holder: &mut Option<HolderValue>,
        unsettled: &mut Option<String>,
    ) -> std::result::Result<Attempt, FailedOp> {
        let sent = Instant::now();
        // Half the validity for the answers, so a hold won against a
        // stalled minority still has half of it left.
        let budget = valid_for(target.ttl) / 2;
        // Until every master said who it is: INFO first, on the same
        // connection, so that two DSNs of one server are caught (on
        // threads: the script after INFO would be awaited master after
        // master).
        let identify = self.run_ids.iter().any(Option::is_none);
        let on_all = if identify {
            Self::on_threads_noting_sent
        } else {
            Self::on_all_noting_sent
        };
        let results = on_all(self, &target.options, Some(sent + budget), &|conn| {
            let run_id = if identify {
                match redis::cmd("INFO").arg("server").query::<String>(conn) {
                    Ok(info) => Some(run_id_in(&info)),
                    // Refused (an ACL without INFO): it cannot say.
                    Err(err) if matches!(err.kind(), ErrorKind::Server(_)) => Some(String::new()),
                    Err(err) => return Err(err),
                }
            } else {
                None
            };
            Ok((run_id, invocation.invoke::<AcquireReply>(conn)?))
        });
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
                    if !holder.is_empty() || last_holder.is_none() {
                        *last_holder = Some(holder);
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
        if let Some(error) = self.one_server_twice(target) {
            if !granted.is_empty() && !self.undo_grants(target, token, &granted) {
                *unsettled = Some(token.to_owned());
            }
            return Err(FailedOp {
                error,
                transient: false,
                unanswered: false,
            });
        }
        let in_time = elapsed + drift(target.ttl) < target.ttl;
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
            return Err(self.majority_error(target, "acquire", &failures, Some(budget)));
        }
        let late = granted.len() >= needed;
        if !granted.is_empty() {
            left_ours |= !self.undo_grants(target, token, &granted);
        }
        if left_ours {
            *unsettled = Some(token.to_owned());
        } else if failures.is_empty() {
            // Every master answered, and none holds our token.
            *unsettled = None;
        }
        if late {
            // Nobody else holds it: the answers came too late to count.
            Err(self.too_late_error(target, elapsed))
        } else if busy > 0 && granted.len() + busy >= needed {
            Ok(Attempt::Busy(expires_in))
        } else {
            Err(self.majority_error(target, "acquire", &failures, Some(budget)))
        }
    }

    /// Best effort: deletes the key (if still ours) on the masters that
    /// granted an attempt that did not win, so that it does not block the
    /// next one. `false`: a master did not answer, and may keep ours.
    fn undo_grants(&mut self, target: &Target, token: &str, granted: &[usize]) -> bool {
        let invocation = target.release_invocation(token);
        let mut masters: Vec<Single> = granted
            .iter()
            .map(|&index| Single {
                node: Node {
                    server: self.masters[index].node.server.clone(),
                    conn: self.masters[index].node.conn.take(),
                },
            })
            .collect();
        let results = in_parallel(masters.iter_mut().collect(), &|master| {
            master.run_before(&target.options, None, |conn| invocation.invoke::<i64>(conn))
        });
        for (master, &index) in masters.into_iter().zip(granted) {
            self.masters[index].node.conn = master.node.conn;
        }
        results.iter().all(std::result::Result::is_ok)
    }

    /// Two masters that gave the same `run_id`: one server, reached
    /// through two DSNs (a unix socket and a port, a host name and an
    /// address), which would count twice in every majority.
    fn one_server_twice(&self, target: &Target) -> Option<Error> {
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
                    target.describe(&self.place()),
                    self.masters[index].node.address(),
                    self.masters[index + 1 + other].node.address()
                )));
            }
        }
        None
    }

    /// A majority granted, but the attempt took so long that no validity
    /// time was left: not contention, and not ours.
    fn too_late_error(&self, target: &Target, elapsed: Duration) -> FailedOp {
        FailedOp {
            error: Error::Connection(format!(
                "cannot acquire {}: a majority of the {} Redis masters granted it, but only after \
                 {} ms, which leaves none of the lock's validity time ({} ms: the TTL less the \
                 drift allowance)",
                target.describe(&self.place()),
                self.masters.len(),
                elapsed.as_millis(),
                valid_for(target.ttl).as_millis()
            )),
            transient: true,
            unanswered: false,
        }
    }

    /// Too few masters answered `op` (each given at most `budget`, a share
    /// of the validity time): each one's failure, in one message.
    pub(super) fn majority_error(
        &self,
        target: &Target,
        op: &str,
        failures: &[(usize, Fault)],
        budget: Option<Duration>,
    ) -> FailedOp {
        let masters = self.masters.len();
        // The per-master messages name the timeouts that master was given.
        let given = budget.map_or(target.options, |budget| target.options.within(budget));
        let error_of = |index: usize, failure: &Fault| {
            target.error(&self.masters[index].node.addr(), op, failure, &given)
        };
        let reasons: Vec<String> = failures
            .iter()
            .map(|(index, failure)| error_of(*index, failure).to_string())
            .collect();
        let within = match budget {
            Some(budget) if budget < target.options.read_timeout => format!(
                " within {} ms (the share of the lock's validity time a call may wait)",
                budget.as_millis()
            ),
            _ => String::new(),
        };
        let message = format!(
            "cannot {op} {}: {} of the {masters} Redis masters did not answer{within}, and a \
             majority ({}) must: {}",
            target.describe(&self.place()),
            failures.len(),
            quorum(masters),
            reasons.join("; ")
        );
        let unusable = failures
            .iter()
            .any(|(index, failure)| matches!(error_of(*index, failure), Error::Lock(_)));
        FailedOp {
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

/// The clock drift allowed between masters and us over one TTL (the
/// Redlock paper's 1 % plus 2 ms for the resolution of Redis' expiry).
fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// How long a hold confirmed with `ttl` counts as valid from when the
/// command was sent: the TTL less the drift allowance.
pub(super) fn valid_for(ttl: Duration) -> Duration {
    ttl.saturating_sub(drift(ttl))
}

/// The `run_id` in a reply to `INFO server`; empty when there is none.
fn run_id_in(info: &str) -> String {
    info.lines()
        .find_map(|line| line.strip_prefix("run_id:"))
        .map_or_else(String::new, |id| id.trim().to_owned())
}

#[cfg(test)]
mod identity_tests {
    use super::run_id_in;

    #[test]
    fn the_run_id_is_read_from_info_server() {
        let info = "# Server\r\nredis_version:7.0.15\r\nrun_id:0123abcd\r\ntcp_port:6379\r\n";
        assert_eq!(run_id_in(info), "0123abcd");
        assert_eq!(run_id_in("# Server\r\n"), "");
    }
}

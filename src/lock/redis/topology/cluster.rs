//! Redis Cluster: `redis-cluster://[[user]:password@]host[:port][,host[:port]…]`
//! (`rediss-cluster://` for TLS), the addresses being seed nodes. Commands
//! go to the node that answered last; a `MOVED` reply moves us to the node
//! it names (for this and later commands), an `ASK` reply sends that one
//! command there after `ASKING`, and a node that cannot be reached sends us
//! back to the seeds, which redirect us again.
//!
//! The lock key is exactly `$key`; its companions (`:fence`, `:released`)
//! must live in its slot: with a hash tag in `$key` they keep it (`$key` +
//! suffix); without one they get `$key` as their hash tag (`{$key}` +
//! suffix), which hashes like `$key` itself.

use super::super::connection::{with_connection, Conn, Server};
use super::super::dsn::{
    parse_dsn, refused_part, split_fragment, starts_with_ignoring_case, with_default_port, Secrets,
};
use super::super::errors::{is_interrupted, Fault};
use super::super::node::Node;
use super::super::options::RedisOptions;
use super::master::Master;
use crate::error::{Error, Result};
use redis::{Connection, ErrorKind, RedisResult};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The most redirections one command follows (a resharding moves a slot
/// once; more means the cluster is still settling).
const MAX_REDIRECTS: usize = 5;

/// Pauses before following a redirect loop again, within the call's budget.
const REDIRECT_BACKOFF_MIN: Duration = Duration::from_millis(20);
const REDIRECT_BACKOFF_MAX: Duration = Duration::from_millis(100);

pub(in crate::lock::redis) struct Cluster {
    seeds: Seeds,
    /// The node that answered last: commands go there first.
    node: Node,
}

/// The seed nodes, and how to reach a node a redirection names.
struct Seeds {
    seeds: Vec<String>,
    scheme: &'static str,
    userinfo: String,
    insecure: bool,
    /// The seed to fall back to next.
    next_seed: usize,
}

impl Cluster {
    /// `Ok(None)`: not a cluster DSN.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidValue`] naming `$dsn` (never with the password).
    pub(super) fn parse(dsn: &str) -> Result<Option<(Cluster, Secrets)>> {
        let Some((seeds, secrets)) = Seeds::parse(dsn)? else {
            return Ok(None);
        };
        let node = Node::new(seeds.server(&seeds.seeds[0])?);
        Ok(Some((Cluster { seeds, node }, secrets)))
    }

    /// For the registry of held keys: the seeds, whatever their order.
    pub(super) fn identity(&self) -> String {
        let mut seeds = self.seeds.seeds.clone();
        seeds.sort();
        format!("cluster:{}", seeds.join(","))
    }
}

impl Master for Cluster {
    /// See [`Seeds::run`].
    fn run<T>(
        &mut self,
        options: &RedisOptions,
        in_wait: bool,
        command: impl FnMut(&mut Connection) -> RedisResult<T>,
    ) -> std::result::Result<(T, bool), Fault> {
        self.seeds.run(&mut self.node, options, in_wait, command)
    }

    fn node(&self) -> &Node {
        &self.node
    }

    fn node_mut(&mut self) -> &mut Node {
        &mut self.node
    }

    /// `in the Redis Cluster with seeds a:7000, b:7001` for messages.
    fn place(&self) -> String {
        format!(
            "in the Redis Cluster with seeds {}",
            self.seeds.seeds.join(", ")
        )
    }

    /// A copy without connections (for the renewal thread), pointed at
    /// the node that answered last.
    fn fresh(&self) -> Self {
        Cluster {
            seeds: Seeds {
                seeds: self.seeds.seeds.clone(),
                scheme: self.seeds.scheme,
                userinfo: self.seeds.userinfo.clone(),
                insecure: self.seeds.insecure,
                next_seed: 0,
            },
            node: self.node.fresh(),
        }
    }

    fn forget_connections(&mut self) {
        self.node.forget_connection();
    }

    fn for_each_connection(&mut self, visit: &mut dyn FnMut(&Server, &mut Option<Conn>)) {
        visit(&self.node.server, &mut self.node.conn);
    }
}

impl Seeds {
    fn parse(dsn: &str) -> Result<Option<(Seeds, Secrets)>> {
        let scheme = if starts_with_ignoring_case(dsn, "redis-cluster://") {
            "redis"
        } else if starts_with_ignoring_case(dsn, "rediss-cluster://") {
            "rediss"
        } else {
            return Ok(None);
        };
        let rest = &dsn[scheme.len() + "-cluster://".len()..];
        let (rest, insecure) = split_fragment(rest, scheme, "cluster")?;
        if rest.contains('?') {
            return Err(Error::value(
                "$dsn",
                "must not have a query (?…): a cluster has no databases",
            ));
        }
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        let shape = || {
            Error::value(
                "$dsn",
                format!(
                    "must look like {scheme}-cluster://[[user]:password@]host[:port][,host[:port]…] \
                     (seed nodes; a cluster has no databases)"
                ),
            )
        };
        let (userinfo, hosts) = match rest.rsplit_once('@') {
            Some((userinfo, hosts)) => (format!("{userinfo}@"), hosts),
            None => (String::new(), rest),
        };
        let secrets = Secrets::in_dsn(&format!("redis://{userinfo}localhost"));
        if hosts.is_empty() || hosts.contains('/') {
            return Err(shape());
        }
        let mut cluster = Seeds {
            seeds: Vec::new(),
            scheme,
            userinfo,
            insecure,
            next_seed: 0,
        };
        for host in hosts.split(',') {
            if host.is_empty() {
                return Err(shape());
            }
            let seed = with_default_port(host, 6379);
            cluster
                .server(&seed)
                .map_err(|err| refused_part(err, &secrets))?;
            cluster.seeds.push(seed);
        }
        Ok(Some((cluster, secrets)))
    }

    fn server(&self, address: &str) -> Result<Server> {
        let suffix = if self.insecure { "/#insecure" } else { "" };
        let (server, _) = parse_dsn(&format!(
            "{}://{}{address}{suffix}",
            self.scheme, self.userinfo
        ))?;
        Ok(server)
    }

    fn point_at(&self, node: &mut Node, address: &str) -> bool {
        match self.server(address) {
            Ok(server) => {
                node.server = Arc::new(server);
                node.conn = None;
                true
            }
            Err(_) => false,
        }
    }

    /// Runs `command` on the node that owns the key, following `MOVED` and
    /// `ASK`, and falling back to the seeds when the node is unreachable.
    ///
    /// The whole call, however many nodes it walks, takes at most
    /// [`call_budget`]: every connect and every reply is awaited only for
    /// what is left of it, so a stalled cluster costs one budget, not one
    /// timeout per seed. Returns whether the command may have run before
    /// the try that answered (a broken connection's try).
    fn run<T>(
        &mut self,
        node: &mut Node,
        options: &RedisOptions,
        in_wait: bool,
        mut command: impl FnMut(&mut Connection) -> RedisResult<T>,
    ) -> std::result::Result<(T, bool), Fault> {
        let deadline = Instant::now() + call_budget(options);
        let mut unreachable = 0;
        let mut redirects = 0;
        let mut broken_once = false;
        let started = Instant::now();
        let mut backoff = REDIRECT_BACKOFF_MIN;
        // The nodes a redirect loop went through, for its message.
        let mut redirected_between: Vec<String> = Vec::new();
        let mut looped = false;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let bounded = options.within(left);
            let failure = match with_connection(&mut node.conn, &node.server, &bounded, |conn| {
                conn.time_out_after(bounded.read_timeout)?;
                command(conn)
            }) {
                Ok(done) => return Ok((done, broken_once)),
                Err(failure) => failure,
            };
            let out_of_time = deadline <= Instant::now();
            let cut_short = match &failure {
                Fault::Connect(_) => true,
                Fault::Command(err) => err.kind() == ErrorKind::Io,
                Fault::Unrouted { .. } => false,
            };
            if out_of_time && looped && cut_short {
                // The budget ran out on one of the loop's reconnects: the
                // loop is what happened, not a slow node.
                return Err(redirect_loop(&redirected_between, started, broken_once));
            }
            match &failure {
                Fault::Command(err)
                    if in_wait && is_interrupted(err) && crate::lock::interrupted() =>
                {
                    return Err(failure);
                }
                // Once more on a new connection, as for one server.
                Fault::Command(err)
                    if err.kind() == ErrorKind::Io && !broken_once && !out_of_time =>
                {
                    broken_once = true;
                }
                Fault::Command(err) if err.redirect_node().is_some() => {
                    let Some((address, _)) = err.redirect_node() else {
                        return Err(failure);
                    };
                    let address = address.to_owned();
                    if redirected_between.is_empty() {
                        redirected_between.push(node.address());
                    }
                    if !redirected_between.contains(&address) {
                        redirected_between.push(address.clone());
                    }
                    if out_of_time {
                        return Err(redirect_loop(&redirected_between, started, broken_once));
                    }
                    if redirects >= MAX_REDIRECTS {
                        // Nodes that send us back and forth: a resharding
                        // whose nodes were told in a careless order. It
                        // settles; pause, and follow again.
                        if in_wait && crate::lock::interrupted() {
                            return Err(redirect_loop(&redirected_between, started, broken_once));
                        }
                        let left = deadline.saturating_duration_since(Instant::now());
                        std::thread::sleep(backoff.min(left));
                        backoff = (backoff * 2).min(REDIRECT_BACKOFF_MAX);
                        redirects = 0;
                        looped = true;
                    }
                    redirects += 1;
                    if err.code() == Some("MOVED") {
                        if !self.point_at(node, &address) {
                            return Err(failure);
                        }
                        continue;
                    }
                    // ASK: this one command, on that node, after ASKING.
                    let mut target = Node::new(match self.server(&address) {
                        Ok(server) => server,
                        Err(_) => return Err(failure),
                    });
                    let bounded =
                        options.within(deadline.saturating_duration_since(Instant::now()));
                    match with_connection(&mut target.conn, &target.server, &bounded, |conn| {
                        conn.time_out_after(bounded.read_timeout)?;
                        redis::cmd("ASKING").query::<()>(conn)?;
                        match command(conn) {
                            // A script the node did not know: the crate
                            // loaded it and sent it again, without ASKING.
                            Err(err) if err.redirect_node().is_some() => {
                                redis::cmd("ASKING").query::<()>(conn)?;
                                command(conn)
                            }
                            other => other,
                        }
                    }) {
                        Ok(done) => return Ok((done, broken_once)),
                        // Sent back again: ask the node we follow anew.
                        Err(Fault::Command(err)) if err.redirect_node().is_some() => {}
                        Err(other) => return Err(other),
                    }
                }
                Fault::Connect(_) if unreachable < self.seeds.len() && !out_of_time => {
                    // The node may be gone (failover, resharding): ask a seed.
                    unreachable += 1;
                    let seed = self.seeds[self.next_seed % self.seeds.len()].clone();
                    self.next_seed += 1;
                    if !self.point_at(node, &seed) {
                        return Err(failure);
                    }
                }
                _ => return Err(failure),
            }
        }
    }
}

/// The failure of a call whose nodes kept sending it elsewhere until its
/// budget ran out: transient, as a resharding settles.
fn redirect_loop(between: &[String], started: Instant, broken_once: bool) -> Fault {
    Fault::Unrouted {
        reason: format!(
            "the cluster nodes kept redirecting it ({}) for {} ms: the key's slot is being \
             moved and the nodes do not agree yet on where",
            between.join(" -> "),
            started.elapsed().as_millis()
        ),
        maybe_ran: broken_once,
    }
}

/// The longest one cluster call takes, whatever it walks: what one server
/// may take (a reply, a reconnect, the reply of the retry).
fn call_budget(options: &RedisOptions) -> Duration {
    options.read_timeout * 2 + options.connect_timeout
}

/// The names of `<key>:fence` and `<key>:released` in the key's slot, or
/// why there are none.
///
/// # Errors
///
/// [`Error::InvalidValue`] naming `$key` for a key with `}` but no hash tag,
/// whose slot no hash tag can name.
pub(in crate::lock::redis) fn companions(key: &str) -> Result<(String, String)> {
    if has_hash_tag(key) {
        return Ok((format!("{key}:fence"), format!("{key}:released")));
    }
    if key.contains('}') {
        return Err(Error::value(
            "$key",
            "contains '}' but no hash tag ({…}), so cronlock's counter and channel cannot share \
             its cluster slot; use a hash tag, e.g. '{cron}:job'",
        ));
    }
    Ok((format!("{{{key}}}:fence"), format!("{{{key}}}:released")))
}

/// Redis Cluster's rule: the part between the first `{` and the first `}`
/// after it, when not empty, is what is hashed.
fn has_hash_tag(key: &str) -> bool {
    key.split_once('{')
        .and_then(|(_, after)| after.split_once('}'))
        .is_some_and(|(tag, _)| !tag.is_empty())
}

#[cfg(test)]
mod tests {
    use super::Cluster;
    use crate::error::Error;

    fn refusal(dsn: &str) -> String {
        match Cluster::parse(dsn) {
            Err(Error::InvalidValue { reason, .. }) => reason,
            Err(other) => panic!("{dsn}: {other}"),
            Ok(found) => panic!("{dsn}: accepted ({})", found.is_some()),
        }
    }

    #[test]
    fn a_query_or_a_stray_fragment_is_refused() {
        assert!(refusal("redis-cluster://h:1?db=2").contains("no databases"));
        assert!(refusal("redis-cluster://h:1,h:2/?x=1").contains("no databases"));
        for dsn in ["redis-cluster://h:1#insecure", "rediss-cluster://h:1#x"] {
            assert_eq!(
                refusal(dsn),
                "must not have a #fragment (only rediss-cluster:// takes #insecure)"
            );
        }
        assert!(Cluster::parse("rediss-cluster://h:1/#insecure")
            .unwrap()
            .is_some());
    }

    #[test]
    fn a_bad_seed_is_said_once_and_in_the_cluster_grammar() {
        let shape = "must look like redis-cluster://[[user]:password@]host[:port][,host[:port]…] \
                     (seed nodes; a cluster has no databases)";
        for dsn in [
            "redis-cluster://h:1,",
            "redis-cluster://,h:1",
            "redis-cluster://h:1,,h:2",
        ] {
            assert_eq!(refusal(dsn), shape, "{dsn}");
        }
        let bad_port = refusal("redis-cluster://:Pw-Secret-1@h:1,h:x");
        assert!(!bad_port.contains("$dsn"), "{bad_port}");
        assert!(!bad_port.contains("Pw-Secret"), "{bad_port}");
    }
}

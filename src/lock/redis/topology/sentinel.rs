//! Redis Sentinel: `redis-sentinel://[[user]:password@]host[:port][,host[:port]…]/master[/db]`
//! (`rediss-sentinel://` for TLS to the master and the sentinels). Before
//! every operation the sentinels are asked which address is the master now
//! (`SENTINEL get-master-addr-by-name`, any sentinel that answers), and a
//! new connection is opened when it moved; every new connection checks with
//! `ROLE` that it reached a master. An old master that still takes writes
//! after a failover is never asked again.

use super::super::connection::{open, Conn, Server};
use super::super::dsn::{
    parse_dsn, percent_decoded, refused_part, split_fragment, starts_with_ignoring_case,
    with_default_port, Secrets,
};
use super::super::errors::{describe_failure, is_readonly, Fault};
use super::super::node::Node;
use super::super::options::RedisOptions;
use super::master::Master;
use crate::error::{Error, Result};
use redis::{Connection, ErrorKind, RedisError, RedisResult};

/// `AUTH [user] password` for every sentinel (the DSN's credentials are
/// the master's): their `requirepass`, or an ACL user of theirs.
#[derive(Clone, PartialEq, Eq)]
pub struct SentinelAuth {
    /// An ACL user; `None`: the `default` user (`requirepass`).
    pub user: Option<String>,
    pub password: String,
}

impl std::fmt::Debug for SentinelAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelAuth")
            .field("user", &self.user)
            .field("password", &"***")
            .finish()
    }
}

/// The default port of a sentinel.
const SENTINEL_PORT: u16 = 26379;

/// Where the sentinels are, the master's name, and how to reach the master
/// they name.
pub(in crate::lock::redis) struct Sentinel {
    sentinels: Vec<Server>,
    master: String,
    master_dsn: MasterDsn,
    /// The sentinel that answered last (asked first next time).
    at: usize,
    /// Our connection to it.
    conn: Option<Conn>,
    /// The master the sentinels named last (a placeholder until asked).
    node: Node,
    /// The last command on `node`'s connection succeeded: the next one
    /// goes there without asking a sentinel first. Cleared by a failed or
    /// refused call (asked again before the next) and by a new connection.
    master_answered: bool,
}

/// How to reach whichever address the sentinels name: the DSN's scheme,
/// credentials and database.
#[derive(Clone)]
struct MasterDsn {
    /// `redis` or `rediss`.
    scheme: &'static str,
    /// `user:password@` as written in the DSN (still percent-encoded), or empty.
    userinfo: String,
    db: i64,
    insecure: bool,
}

impl MasterDsn {
    fn server(&self, host: &str, port: u16) -> Result<Server> {
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        let suffix = if self.insecure { "#insecure" } else { "" };
        let (server, _) = parse_dsn(&format!(
            "{}://{}{host}:{port}/{}{suffix}",
            self.scheme, self.userinfo, self.db
        ))?;
        Ok(server.into_named_master())
    }
}

impl Sentinel {
    /// `Ok(None)`: not a sentinel DSN.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidValue`] naming `$dsn` (never with the password).
    pub(super) fn parse(dsn: &str) -> Result<Option<(Sentinel, Secrets)>> {
        let scheme = if starts_with_ignoring_case(dsn, "redis-sentinel://") {
            "redis"
        } else if starts_with_ignoring_case(dsn, "rediss-sentinel://") {
            "rediss"
        } else {
            return Ok(None);
        };
        let rest = &dsn[scheme.len() + "-sentinel://".len()..];
        let (rest, insecure) = split_fragment(rest, scheme, "sentinel")?;
        if rest.contains('?') {
            return Err(Error::value(
                "$dsn",
                "must not have a query (?…); give the database as /master/db",
            ));
        }
        let shape = || {
            Error::value(
                "$dsn",
                format!(
                    "must look like {scheme}-sentinel://[[user]:password@]host[:port][,host[:port]…]/master[/db]"
                ),
            )
        };
        let (authority, path) = rest.split_once('/').ok_or_else(shape)?;
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (format!("{userinfo}@"), hosts),
            None => (String::new(), authority),
        };
        let secrets = Secrets::in_dsn(&format!("redis://{userinfo}localhost"));
        let (master, db) = match path.split_once('/') {
            Some((master, db)) => (master, db.parse::<i64>().map_err(|_| shape())?),
            None => (path, 0),
        };
        if master.is_empty() || db < 0 || hosts.is_empty() {
            return Err(shape());
        }
        let master = percent_decoded(master).ok_or_else(|| {
            Error::value(
                "$dsn",
                "has a master name whose %-escapes are not UTF-8 (write '%25' for '%')",
            )
        })?;
        let mut sentinels = Vec::new();
        for host in hosts.split(',') {
            let with_port = with_default_port(host, SENTINEL_PORT);
            let suffix = if insecure { "/#insecure" } else { "" };
            let (server, _) =
                parse_dsn(&format!("{scheme}://{with_port}{suffix}")).map_err(|_| shape())?;
            sentinels.push(server);
        }
        let master_dsn = MasterDsn {
            scheme,
            userinfo,
            db,
            insecure,
        };
        // The master's DSN must parse too (credentials, TLS); until the
        // sentinels are first asked, this address is a placeholder.
        let placeholder = master_dsn
            .server("127.0.0.1", 6379)
            .map_err(|err| refused_part(err, &secrets))?;
        let sentinel = Sentinel {
            sentinels,
            master,
            master_dsn,
            at: 0,
            conn: None,
            node: Node::new(placeholder),
            master_answered: false,
        };
        Ok(Some((sentinel, secrets)))
    }

    /// From now on every sentinel is sent `AUTH` with `auth` (the
    /// renewal thread's copy too).
    pub(super) fn authenticate(&mut self, auth: &SentinelAuth) {
        self.conn = None;
        for sentinel in &mut self.sentinels {
            sentinel.authenticate_as(auth.user.clone(), Some(auth.password.clone()));
        }
    }

    /// `master 'mymaster' (sentinels a:26379, b:26379)` for messages.
    fn describe(&self) -> String {
        format!(
            "master '{}' (sentinels {})",
            crate::lock::shorten(&self.master),
            self.addresses()
        )
    }

    /// For the registry of held keys: the master's name, database and
    /// sentinels, whatever their order.
    pub(super) fn identity(&self) -> String {
        let mut sentinels: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| s.client.get_connection_info().addr().to_string())
            .collect();
        sentinels.sort();
        format!(
            "sentinel:{}/{}@{}",
            self.master,
            self.master_dsn.db,
            sentinels.join(",")
        )
    }

    fn addresses(&self) -> String {
        self.sentinels
            .iter()
            .map(|s| s.client.get_connection_info().addr().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Points the node at the master the sentinels name now (a new
    /// connection when it moved). `Err`: the reason, in words, that no
    /// sentinel named one.
    fn follow(&mut self, options: &RedisOptions) -> std::result::Result<(), String> {
        let count = self.sentinels.len();
        let first = self.at;
        let mut reasons = Vec::new();
        for step in 0..count {
            let index = (first + step) % count;
            let kept = self.conn.take().filter(|_| index == self.at);
            let mut conn = match kept {
                Some(conn) => conn,
                None => match open(&self.sentinels[index], options) {
                    Ok(conn) => conn,
                    Err(err) => {
                        reasons.push(format!(
                            "{}: {}",
                            self.sentinels[index].client.get_connection_info().addr(),
                            describe_sentinel_failure(&err)
                        ));
                        continue;
                    }
                },
            };
            let reply = redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(&self.master)
                .query::<Option<(String, u16)>>(&mut *conn);
            let addr = self.sentinels[index]
                .client
                .get_connection_info()
                .addr()
                .to_string();
            match reply {
                Ok(Some((host, port))) => {
                    (self.at, self.conn) = (index, Some(conn));
                    let current = self.node.addr();
                    let named = if host.contains(':') {
                        format!("[{host}]:{port}")
                    } else {
                        format!("{host}:{port}")
                    };
                    if current != named {
                        let server = self
                            .master_dsn
                            .server(&host, port)
                            .map_err(|e| e.to_string())?;
                        self.node = Node::new(server);
                    }
                    return Ok(());
                }
                Ok(None) => {
                    (self.at, self.conn) = (index, Some(conn));
                    reasons.push(format!("{addr}: knows no master of that name"));
                }
                Err(err) => reasons.push(format!("{addr}: {}", describe_sentinel_failure(&err))),
            }
        }
        Err(format!(
            "no sentinel named the {}: {}",
            self.describe(),
            reasons.join("; ")
        ))
    }
}

impl Master for Sentinel {
    /// Sends the command to the master the sentinels named, asking them
    /// first unless the last command on this connection succeeded (so no
    /// sentinel round trip per call while the master answers as master):
    /// on a new connection, after a failed or refused call, and when the
    /// master answers `-READONLY` (demoted: asked, and sent once more to
    /// the master they name now). No sentinel naming one is a transient
    /// failure that sent nothing.
    fn run<T>(
        &mut self,
        options: &RedisOptions,
        in_wait: bool,
        mut command: impl FnMut(&mut Connection) -> RedisResult<T>,
    ) -> std::result::Result<(T, bool), Fault> {
        let asked = !(self.master_answered && self.node.conn.is_some());
        if asked {
            self.follow(options).map_err(|reason| Fault::Unrouted {
                reason,
                maybe_ran: false,
            })?;
        }
        let mut result = self.node.run(options, in_wait, &mut command);
        let failed_over = |fault: &Fault| match fault {
            // Demoted since we last asked (READONLY wrote nothing), or gone.
            Fault::Command(err) => is_readonly(err) || err.kind() == ErrorKind::Io,
            Fault::Connect(_) => true,
            Fault::Unrouted { .. } => false,
        };
        if !asked && matches!(&result, Err(fault) if failed_over(fault)) {
            let maybe_ran =
                matches!(&result, Err(Fault::Command(err)) if err.kind() == ErrorKind::Io);
            self.follow(options)
                .map_err(|reason| Fault::Unrouted { reason, maybe_ran })?;
            // Every script is safe to run twice; it may have run once.
            result = self
                .node
                .run(options, in_wait, &mut command)
                .map(|(value, _)| (value, true));
        }
        self.master_answered = result.is_ok();
        result
    }

    fn node(&self) -> &Node {
        &self.node
    }

    fn node_mut(&mut self) -> &mut Node {
        &mut self.node
    }

    fn place(&self) -> String {
        format!("at {}", self.describe())
    }

    /// A copy without connections (for the renewal thread), pointed at
    /// the master named last.
    fn fresh(&self) -> Self {
        Sentinel {
            sentinels: self.sentinels.clone(),
            master: self.master.clone(),
            master_dsn: self.master_dsn.clone(),
            at: self.at,
            conn: None,
            node: self.node.fresh(),
            master_answered: false,
        }
    }

    /// In a forked child: the connections to the sentinel and the master
    /// are the parent's sockets; forget them without closing them.
    fn forget_connections(&mut self) {
        std::mem::forget(self.conn.take());
        self.node.forget_connection();
    }

    fn for_each_connection(&mut self, visit: &mut dyn FnMut(&Server, &mut Option<Conn>)) {
        visit(&self.sentinels[self.at], &mut self.conn);
        visit(&self.node.server, &mut self.node.conn);
    }
}

/// A sentinel's refusal in words: its credentials are the options, never
/// the DSN's (those are the master's).
fn describe_sentinel_failure(err: &RedisError) -> String {
    match (err.kind(), err.code()) {
        (_, Some("NOAUTH")) => "it requires a password: give the sentinels' password as \
                                $options['sentinel_password']"
            .to_owned(),
        (_, Some("WRONGPASS")) | (redis::ErrorKind::AuthenticationFailed, _) => {
            "wrong $options['sentinel_user'] or $options['sentinel_password'] \
             (or the user is disabled)"
                .to_owned()
        }
        _ => describe_failure(err),
    }
}

#[cfg(test)]
mod auth_tests {
    use super::SentinelAuth;

    #[test]
    fn debug_output_never_shows_the_sentinel_password() {
        let auth = SentinelAuth {
            user: Some("watcher".into()),
            password: "Hunter2-Secret".into(),
        };
        let shown = format!("{auth:?}");
        assert!(shown.contains("watcher"), "{shown}");
        assert!(!shown.contains("Hunter2"), "{shown}");
    }
}

#[cfg(test)]
mod parse_tests {
    use super::Sentinel;
    use crate::error::Error;

    fn refusal(dsn: &str) -> String {
        match Sentinel::parse(dsn) {
            Err(Error::InvalidValue { reason, .. }) => reason,
            Err(other) => panic!("{dsn}: {other}"),
            Ok(found) => panic!("{dsn}: accepted ({})", found.is_some()),
        }
    }

    #[test]
    fn a_query_or_a_stray_fragment_is_refused() {
        assert!(refusal("redis-sentinel://h:1/m?db=2").contains("/master/db"));
        assert!(refusal("redis-sentinel://h:1/m#insecure").contains("rediss-sentinel://"));
        assert!(Sentinel::parse("rediss-sentinel://h:1/m/2#insecure")
            .unwrap()
            .is_some());
    }

    #[test]
    fn the_master_name_is_percent_decoded() {
        let parsed = Sentinel::parse("redis-sentinel://h:1/my%20master%2Fa%zz/3").unwrap();
        let Some((sentinel, _)) = parsed else {
            panic!("not a sentinel DSN");
        };
        assert_eq!(sentinel.master, "my master/a%zz");
        assert_eq!(sentinel.master_dsn.db, 3);
        assert!(refusal("redis-sentinel://h:1/my%ffmaster").contains("not UTF-8"));
        assert!(refusal("redis-sentinel://h:1/my#master").contains("#fragment"));
    }
}

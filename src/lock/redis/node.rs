//! One server and our connection to it: running a command there (once
//! more after a broken connection), and telling two DSNs of one server
//! apart. Every topology ends at nodes.

use super::connection::{run_retrying_once, with_connection, Conn, Server};
use super::errors::Fault;
use super::options::RedisOptions;
use redis::{Connection, ConnectionAddr, ErrorKind, RedisError, RedisResult};
use std::mem;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One node's result of a command: the value and whether it ran twice.
pub(super) type NodeResult<T> = Result<(T, bool), Fault>;

/// Where a server is and our connection to it (opened on first use).
pub(super) struct Node {
    /// Shared with the renewal thread's copy of the node ([`Node::fresh`]),
    /// which every acquire makes.
    pub(super) server: Arc<Server>,
    pub(super) conn: Option<Conn>,
}

impl Node {
    pub(super) fn new(server: Server) -> Self {
        Node {
            server: Arc::new(server),
            conn: None,
        }
    }

    /// The same server, without the connection (for the renewal thread).
    pub(super) fn fresh(&self) -> Node {
        Node {
            server: Arc::clone(&self.server),
            conn: None,
        }
    }

    /// In a forked child the connection is the parent's socket (and TLS
    /// session): forget it without closing it.
    pub(super) fn forget_connection(&mut self) {
        mem::forget(self.conn.take());
    }

    /// `host:port` (or the socket path) for messages, without the database.
    pub(super) fn addr(&self) -> String {
        self.server.client.get_connection_info().addr().to_string()
    }

    /// [`Node::addr`] with `/db` when the database is not 0.
    pub(super) fn address(&self) -> String {
        match self.server.db() {
            0 => self.addr(),
            db => format!("{}/{db}", self.addr()),
        }
    }

    /// The server as far as its DSN shows it, without the database: one
    /// string for every spelling of the loopback address (`localhost`,
    /// `127.0.0.1`, `::1`, `::ffff:127.0.0.1`) and for an IPv4 address and
    /// its IPv4-mapped IPv6 form. Spellings that only a connection can tell
    /// apart (a unix socket and a port, a host name) are caught by the
    /// Redlock masters' `run_id`.
    pub(super) fn server_identity(&self) -> String {
        match self.server.client.get_connection_info().addr() {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                format!("{}:{port}", canonical_host(host))
            }
            other => other.to_string(),
        }
    }

    /// Runs `command`, once more on a new connection when the connection
    /// broke (see [`run_retrying_once`]).
    pub(super) fn run<T>(
        &mut self,
        options: &RedisOptions,
        in_wait: bool,
        command: impl FnMut(&mut Connection) -> RedisResult<T>,
    ) -> NodeResult<T> {
        run_retrying_once(&mut self.conn, &self.server, options, in_wait, command)
    }

    /// [`Node::run`] with every timeout (connect, write, reply; the retry
    /// only if time is left) cut to what is left until `deadline`. A
    /// stalled Redlock minority then costs an operation no more than the
    /// share of the validity time it was given, instead of a renewal
    /// outliving the hold it renews.
    pub(super) fn run_before<T>(
        &mut self,
        options: &RedisOptions,
        deadline: Option<Instant>,
        mut command: impl FnMut(&mut Connection) -> RedisResult<T>,
    ) -> NodeResult<T> {
        match self.once_before(options, deadline, &mut command) {
            Ok(value) => Ok((value, false)),
            Err(Fault::Command(err))
                if err.kind() == ErrorKind::Io && !left(deadline).is_zero() =>
            {
                self.once_before(options, deadline, command)
                    .map(|value| (value, true))
            }
            Err(failure) => Err(failure),
        }
    }

    /// One try of [`Node::run_before`] (a new connection if there is none).
    pub(super) fn once_before<T>(
        &mut self,
        options: &RedisOptions,
        deadline: Option<Instant>,
        command: impl FnOnce(&mut Connection) -> RedisResult<T>,
    ) -> Result<T, Fault> {
        let left = left(deadline);
        if left.is_zero() {
            return Err(Fault::Command(RedisError::from(std::io::Error::from(
                std::io::ErrorKind::TimedOut,
            ))));
        }
        let bounded = options.within(left);
        with_connection(&mut self.conn, &self.server, &bounded, |conn| {
            // The same bound as the last command's sets nothing.
            conn.time_out_after(bounded.read_timeout)?;
            command(conn)
        })
    }
}

/// What is left until `deadline` (no deadline: all the time there is).
fn left(deadline: Option<Instant>) -> Duration {
    deadline.map_or(Duration::MAX, |d| {
        d.saturating_duration_since(Instant::now())
    })
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

#[cfg(test)]
mod identity_tests {
    use super::canonical_host;

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
}

//! Opening a connection (with AUTH/SELECT under one deadline) and running
//! a command on it, once more after a broken connection.
//!
//! Traps it closes:
//! - a kept connection carries the socket timeouts of its last command, and
//!   setting them is two `setsockopt` calls: [`Conn`] remembers what it
//!   carries, so a command with the same bound as the last sets nothing;
//! - a `setsockopt` that failed halfway leaves the timeouts unknown: the
//!   next bound sets both again.

use super::errors::{is_interrupted, Fault};
use super::options::RedisOptions;
use redis::{Client, Connection, ErrorKind, RedisResult};
use std::ops::{Deref, DerefMut};
use std::time::{Duration, Instant};

/// A connection and the read and write timeout its socket carries.
pub(super) struct Conn {
    connection: Connection,
    /// `None`: not known (never set, or a set that failed).
    timeout: Option<Duration>,
}

impl Conn {
    /// Makes the socket's read and write timeouts `timeout`, calling
    /// `setsockopt` only when they are something else now.
    ///
    /// # Errors
    ///
    /// The socket refused the timeout (a zero one, a closed socket).
    pub(super) fn time_out_after(&mut self, timeout: Duration) -> RedisResult<()> {
        if self.timeout == Some(timeout) {
            return Ok(());
        }
        self.timeout = None;
        self.connection.set_read_timeout(Some(timeout))?;
        self.connection.set_write_timeout(Some(timeout))?;
        self.timeout = Some(timeout);
        Ok(())
    }

    /// The read and write timeout the socket carries (`None`: not known).
    pub(super) fn timeout(&self) -> Option<Duration> {
        self.timeout
    }
}

impl Deref for Conn {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        &self.connection
    }
}

impl DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut Connection {
        &mut self.connection
    }
}

/// Where and as whom to connect. `client` knows only the address and TLS:
/// the redis crate would pipeline AUTH, SELECT and two `CLIENT SETINFO` and
/// wait up to the timeout for each reply, so a silent server would take
/// several times `connect_timeout`. [`open`] sends them against one deadline.
#[derive(Clone)]
pub(super) struct Server {
    /// Never replaced: another address is another `Server`.
    pub(super) client: Client,
    // Private, as is everything else `pool_key` is made of: a change goes
    // through a method that makes the key anew.
    username: Option<String>,
    password: Option<String>,
    db: i64,
    /// Sentinel: the address is the master the sentinels named; a new
    /// connection checks with `ROLE` that it still is one.
    require_master: bool,
    /// [`Server::pool_key`], made once: the pools look it up at every
    /// operation, and formatting it each time cost about a tenth of a
    /// Redis lock cycle's client CPU.
    pool_key: String,
}

impl Server {
    pub(super) fn new(
        client: Client,
        username: Option<String>,
        password: Option<String>,
        db: i64,
    ) -> Self {
        let mut server = Server {
            client,
            username,
            password,
            db,
            require_master: false,
            pool_key: String::new(),
        };
        server.pool_key = server.make_pool_key();
        server
    }

    /// The same server, as a master the sentinels named (see
    /// `require_master`).
    pub(super) fn into_named_master(mut self) -> Self {
        self.require_master = true;
        self.pool_key = self.make_pool_key();
        self
    }

    /// The same server, sent `AUTH` with other credentials from now on.
    pub(super) fn authenticate_as(&mut self, username: Option<String>, password: Option<String>) {
        self.username = username;
        self.password = password;
        self.pool_key = self.make_pool_key();
    }

    pub(super) fn require_master(&self) -> bool {
        self.require_master
    }

    pub(super) fn db(&self) -> i64 {
        self.db
    }

    #[cfg(test)]
    pub(super) fn credentials(&self) -> (Option<&str>, Option<&str>) {
        (self.username.as_deref(), self.password.as_deref())
    }

    /// Names the server and the credentials a connection was opened
    /// with: connections of one key are interchangeable (the renewal
    /// thread keeps one per key).
    pub(super) fn pool_key(&self) -> &str {
        &self.pool_key
    }

    fn make_pool_key(&self) -> String {
        format!(
            "{:?}/{}/{:?}/{:?}/{}",
            self.client.get_connection_info().addr(),
            self.db,
            self.username,
            self.password,
            self.require_master
        )
    }
}

/// A new connection to `server`, ready for commands (authenticated, its
/// database selected, checked to answer), with `options`' timeouts.
///
/// # Errors
///
/// The connect, a handshake command or its reply failed or timed out.
pub(super) fn open(server: &Server, options: &RedisOptions) -> RedisResult<Conn> {
    // No representable deadline means no deadline beyond the socket's own.
    let deadline = Instant::now() + options.connect_timeout;
    let mut conn = server
        .client
        .get_connection_with_timeout(options.connect_timeout)?;
    let mut handshake = |command: &redis::Cmd| -> RedisResult<()> {
        // A zero timeout is refused by the socket API.
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        conn.set_read_timeout(Some(left))?;
        conn.set_write_timeout(Some(left))?;
        command.query::<()>(&mut conn)
    };
    if let Some(password) = &server.password {
        let mut auth = redis::cmd("AUTH");
        if let Some(username) = &server.username {
            auth.arg(username);
        }
        handshake(auth.arg(password))?;
    }
    if server.db != 0 {
        handshake(redis::cmd("SELECT").arg(server.db))?;
    }
    if server.require_master() {
        // A failover may have demoted it since the sentinels answered.
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        conn.set_read_timeout(Some(left))?;
        let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut conn)?;
        let is_master =
            matches!(role.first(), Some(redis::Value::BulkString(role)) if role == b"master");
        if !is_master {
            return Err(redis::RedisError::from((
                ErrorKind::Io,
                "it is no longer the master (a failover is under way)",
            )));
        }
    } else if server.password.is_none() && server.db == 0 {
        // Something that accepts TCP is not yet a Redis that answers: find
        // out within connect_timeout, not on the first command.
        handshake(&redis::cmd("PING"))?;
    }
    let mut conn = Conn {
        connection: conn,
        timeout: None,
    };
    conn.time_out_after(options.read_timeout)?;
    Ok(conn)
}

/// Runs `command` on the connection in `slot`, opening it first if needed.
/// A connection that failed other than by an error reply is dropped: after
/// a timeout or I/O error its replies may be out of step.
pub(super) fn with_connection<T>(
    slot: &mut Option<Conn>,
    server: &Server,
    options: &RedisOptions,
    command: impl FnOnce(&mut Conn) -> RedisResult<T>,
) -> std::result::Result<T, Fault> {
    let mut conn = match slot.take() {
        Some(conn) => conn,
        None => open(server, options).map_err(Fault::Connect)?,
    };
    let result = command(&mut conn);
    if in_step(&result) {
        *slot = Some(conn);
    }
    result.map_err(Fault::Command)
}

/// Whether a connection is still fit for the next command after a command
/// ended with `result`: not after a timeout or I/O error (its replies may be
/// out of step), only after a reply (an error reply too).
pub(super) fn in_step<T>(result: &RedisResult<T>) -> bool {
    match result {
        Ok(_) => true,
        Err(err) => matches!(err.kind(), ErrorKind::Server(_) | ErrorKind::Extension),
    }
}

/// [`with_connection`], and once more on a new connection when the command
/// failed by I/O (an idle connection the server or a firewall dropped, a
/// reset, a timeout, a signal): only for commands that may run twice. An
/// error reply is not retried. Returns whether it ran twice.
///
/// `stop_on_signal`: a read cut short by a signal for which PHP has a
/// handler pending is not retried, so that a waiter returns to PHP at once
/// (a socket read with a timeout fails with EINTR even under SA_RESTART).
pub(super) fn run_retrying_once<T>(
    slot: &mut Option<Conn>,
    server: &Server,
    options: &RedisOptions,
    stop_on_signal: bool,
    mut command: impl FnMut(&mut Connection) -> RedisResult<T>,
) -> std::result::Result<(T, bool), Fault> {
    let mut command = |conn: &mut Conn| command(conn);
    match with_connection(slot, server, options, &mut command) {
        Ok(value) => Ok((value, false)),
        Err(Fault::Command(err))
            if stop_on_signal && is_interrupted(&err) && crate::lock::interrupted() =>
        {
            Err(Fault::Command(err))
        }
        Err(Fault::Command(err)) if err.kind() == ErrorKind::Io => {
            with_connection(slot, server, options, &mut command).map(|value| (value, true))
        }
        Err(failure) => Err(failure),
    }
}

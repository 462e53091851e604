//! One Redis server: `redis://`, `rediss://` or `unix://`. Commands go to
//! it, once more on a new connection after a broken one.

use super::super::connection::{Conn, Server};
use super::super::dsn::{parse_dsn, Secrets};
use super::super::errors::Fault;
use super::super::node::{Node, NodeResult};
use super::super::options::RedisOptions;
use super::master::Master;
use crate::error::Result;
use redis::{Connection, RedisResult};

pub(in crate::lock::redis) struct Single {
    pub(super) node: Node,
}

impl Single {
    /// # Errors
    ///
    /// [`Error::InvalidValue`](crate::error::Error::InvalidValue) naming
    /// `$dsn` (never with the password).
    pub(super) fn parse(dsn: &str) -> Result<(Single, Secrets)> {
        let (server, secrets) = parse_dsn(dsn)?;
        Ok((
            Single {
                node: Node::new(server),
            },
            secrets,
        ))
    }

    /// For the registry of held keys: `address/db`.
    pub(super) fn identity(&self) -> String {
        format!("{}/{}", self.node.addr(), self.node.server.db())
    }
}

impl Master for Single {
    fn run<T>(
        &mut self,
        options: &RedisOptions,
        in_wait: bool,
        command: impl FnMut(&mut Connection) -> RedisResult<T>,
    ) -> std::result::Result<(T, bool), Fault> {
        self.node.run(options, in_wait, command)
    }

    fn node(&self) -> &Node {
        &self.node
    }

    fn node_mut(&mut self) -> &mut Node {
        &mut self.node
    }

    fn place(&self) -> String {
        format!("at {}", self.node.address())
    }

    fn fresh(&self) -> Self {
        Single {
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

impl Single {
    /// A Redlock master's [`Node::run_before`].
    pub(super) fn run_before<T>(
        &mut self,
        options: &RedisOptions,
        deadline: Option<std::time::Instant>,
        command: impl FnMut(&mut Connection) -> RedisResult<T>,
    ) -> NodeResult<T> {
        self.node.run_before(options, deadline, command)
    }
}

//! The key a lock is on, its settings, and how to speak of it: what every
//! topology needs to run the scripts and to say in words what failed (D6).

use super::dsn::Secrets;
use super::errors::{describe_failure, makes_lock_unusable, Fault};
use super::options::RedisOptions;
use super::scripts::scripts;
use crate::error::Error;
use crate::lock::shorten;
use redis::{ErrorKind, ScriptInvocation};
use std::time::Duration;

#[derive(Clone)]
pub(super) struct Target {
    pub(super) key: String,
    /// `<key>:fence` (Cluster: in the key's slot).
    pub(super) fence_key: String,
    /// `<key>:released` (Cluster: in the key's slot).
    pub(super) channel: String,
    pub(super) ttl: Duration,
    pub(super) options: RedisOptions,
    /// The DSNs' passwords, cut out of every message.
    pub(super) secrets: Secrets,
}

impl Target {
    /// `redis key '<key>' <place>`, the key cut to 200 characters.
    pub(super) fn describe(&self, place: &str) -> String {
        format!("redis key '{}' {place}", shorten(&self.key))
    }

    /// The token-checked delete (and publish) of `token`.
    pub(super) fn release_invocation(&self, token: &str) -> ScriptInvocation<'static> {
        let mut invocation = scripts().release.prepare_invoke();
        invocation.key(&self.key).arg(token).arg(&self.channel);
        invocation
    }

    /// `failure` of `op` on the server at `addr`, in words, for a call
    /// that was given the timeouts of `given`. A reply that says the lock
    /// cannot work with this key is [`Error::Lock`], anything else
    /// [`Error::Connection`].
    pub(super) fn error(
        &self,
        addr: &str,
        op: &str,
        failure: &Fault,
        given: &RedisOptions,
    ) -> Error {
        let key = shorten(&self.key);
        let message = match failure {
            Fault::Connect(err) if err.is_timeout() => format!(
                "cannot connect to Redis at {addr} to {op} key '{key}': no answer within {} ms",
                given.connect_timeout.as_millis()
            ),
            Fault::Connect(err) => format!(
                "cannot connect to Redis at {addr} to {op} key '{key}': {}",
                describe_failure(err)
            ),
            Fault::Command(err) if err.is_timeout() => format!(
                "Redis at {addr} gave no answer within {} ms to {op} key '{key}'",
                given.read_timeout.as_millis()
            ),
            Fault::Command(err) if err.kind() == ErrorKind::Io => format!(
                "lost the connection to Redis at {addr} while trying to {op} key '{key}': {}",
                describe_failure(err)
            ),
            Fault::Command(err) => format!(
                "Redis at {addr} refused to {op} key '{key}': {}",
                describe_failure(err)
            ),
            Fault::Unrouted { reason, .. } => {
                format!("cannot {op} key '{key}': {reason}")
            }
        };
        let message = self.secrets.scrub(message);
        match failure {
            Fault::Command(err) if makes_lock_unusable(err) => Error::Lock(message),
            _ => Error::Connection(message),
        }
    }
}

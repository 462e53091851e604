//! Parsing a DSN into a [`Server`], and the passwords to keep out of
//! messages.

use super::connection::Server;
use super::errors::describe_failure;
use crate::error::{Error, Result};
use redis::{Client, IntoConnectionInfo, RedisConnectionInfo, RedisError};

/// Parses and checks a DSN: where and as whom to connect, and every form
/// of its password.
///
/// # Errors
///
/// [`Error::InvalidValue`] naming `$dsn`; the message never contains the
/// password.
pub(super) fn parse_dsn(dsn: &str) -> Result<(Server, Secrets)> {
    // The URL parser would quietly trim or escape these.
    if dsn.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err(Error::value(
            "$dsn",
            "must not contain NUL bytes or other control characters",
        ));
    }
    if dsn.trim() != dsn {
        return Err(Error::value(
            "$dsn",
            "must not have leading or trailing spaces",
        ));
    }
    let mut secrets = Secrets::in_dsn(dsn);
    let bad_dsn = |err: RedisError, secrets: &Secrets| {
        Error::value(
            "$dsn",
            secrets.scrub(format!(
                "must look like redis://[[user]:password@]host[:port][/db], \
                 rediss://… or unix:///path/to/redis.sock ({})",
                describe_failure(&err)
            )),
        )
    };
    let info = dsn
        .into_connection_info()
        .map_err(|err| bad_dsn(err, &secrets))?;
    let settings = info.redis_settings().clone();
    if settings.db() < 0 {
        return Err(Error::value("$dsn", "must not name a negative database"));
    }
    secrets.add(settings.password());
    let bare = info.set_redis_settings(RedisConnectionInfo::default().set_skip_set_lib_name());
    let server = Server {
        client: Client::open(bare).map_err(|err| bad_dsn(err, &secrets))?,
        username: settings.username().map(str::to_owned),
        password: settings.password().map(str::to_owned),
        db: settings.db(),
        require_master: false,
    };
    Ok((server, secrets))
}

/// Passwords found in a DSN, to cut out of any message that might echo them.
pub(super) struct Secrets(Vec<String>);

impl Secrets {
    pub(super) fn none() -> Self {
        Secrets(Vec::new())
    }

    pub(super) fn merge(&mut self, other: Secrets) {
        for secret in other.0 {
            self.add(Some(&secret));
        }
    }

    /// The raw forms, as written in the DSN (the decoded one is added from
    /// the parsed connection info).
    pub(super) fn in_dsn(dsn: &str) -> Self {
        let mut secrets = Secrets(Vec::new());
        if let Some(url) = redis::parse_redis_url(dsn) {
            secrets.add(url.password());
            for (name, value) in url.query_pairs() {
                if name == "pass" {
                    secrets.add(Some(&value));
                }
            }
            for pair in url.query().unwrap_or_default().split('&') {
                secrets.add(pair.strip_prefix("pass="));
            }
        }
        secrets
    }

    pub(super) fn add(&mut self, secret: Option<&str>) {
        if let Some(secret) = secret.filter(|secret| !secret.is_empty()) {
            self.0.push(secret.to_owned());
            // Longest first, so no part of a longer form is left behind.
            self.0.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
            self.0.dedup();
        }
    }

    pub(super) fn scrub(&self, mut message: String) -> String {
        for secret in &self.0 {
            if message.contains(secret.as_str()) {
                message = message.replace(secret.as_str(), "***");
            }
        }
        message
    }
}

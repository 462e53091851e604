//! Parsing a DSN into a [`Server`], the pieces of Sentinel and Cluster
//! DSNs, and the passwords to keep out of messages.

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
    let url = redis::parse_redis_url(dsn);
    let query_db = match &url {
        Some(url) => check_url_parts(dsn, url.scheme(), url.fragment(), url.query())?,
        None => None,
    };
    let info = dsn
        .into_connection_info()
        .map_err(|err| bad_dsn(err, &secrets))?;
    let settings = info.redis_settings().clone();
    let is_unix = url
        .as_ref()
        .is_some_and(|url| url.scheme().ends_with("unix"));
    let db = match &query_db {
        // unix://: the crate took it from the query already.
        Some(_) if is_unix => settings.db(),
        Some(text) => parse_db(text).map_err(|err| bad_dsn(err, &secrets))?,
        None => settings.db(),
    };
    if settings.db() < 0 || db < 0 {
        return Err(Error::value("$dsn", "must not name a negative database"));
    }
    let path_names_db = url
        .as_ref()
        .is_some_and(|url| !is_unix && !url.path().trim_matches('/').is_empty());
    if path_names_db && query_db.is_some() && settings.db() != db {
        return Err(Error::value(
            "$dsn",
            format!(
                "names database {} in its path and {db} in ?db=; give it once",
                settings.db()
            ),
        ));
    }
    secrets.add(settings.password());
    let bare = info.set_redis_settings(RedisConnectionInfo::default().set_skip_set_lib_name());
    let server = Server::new(
        Client::open(bare).map_err(|err| bad_dsn(err, &secrets))?,
        settings.username().map(str::to_owned),
        settings.password().map(str::to_owned),
        db,
    );
    Ok((server, secrets))
}

/// What the redis crate would quietly ignore: a fragment other than
/// rediss://'s `#insecure`, an empty port, query parameters it does not
/// read (or reads only for unix://), a parameter given twice. Returns the
/// `?db=` value, unparsed.
fn check_url_parts(
    dsn: &str,
    scheme: &str,
    fragment: Option<&str>,
    query: Option<&str>,
) -> Result<Option<String>> {
    let tls = matches!(scheme, "rediss" | "valkeys");
    let unix = scheme.ends_with("unix");
    // rediss:// with another fragment: the crate's own refusal says it.
    if fragment.is_some() && !tls {
        return Err(Error::value(
            "$dsn",
            "must not have a #fragment (only rediss:// takes #insecure)",
        ));
    }
    let mut db = None;
    let mut seen: Vec<&str> = Vec::new();
    if let Some(query) = query {
        for pair in query.split('&') {
            let name = pair.split_once('=').map_or(pair, |(name, _)| name);
            let known = name == "db" || (unix && (name == "user" || name == "pass"));
            if !known || !pair.contains('=') {
                return Err(Error::value(
                    "$dsn",
                    "must not have query parameters other than ?db=N (and, for unix://, user= and pass=)",
                ));
            }
            if seen.contains(&name) {
                return Err(Error::value(
                    "$dsn",
                    format!("gives the query parameter '{name}' more than once"),
                ));
            }
            seen.push(name);
            if let Some(("db", value)) = pair.split_once('=') {
                db = Some(value.to_owned());
            }
        }
    }
    if !unix {
        let authority = dsn
            .split_once("://")
            .map_or("", |(_, rest)| rest)
            .split(['/', '?', '#'])
            .next()
            .unwrap_or_default();
        let host = authority
            .rsplit_once('@')
            .map_or(authority, |(_, host)| host);
        if host.ends_with(':') {
            return Err(Error::value(
                "$dsn",
                "has ':' but no port after it (leave both out for 6379)",
            ));
        }
    }
    Ok(db)
}

/// A database number as the redis crate reads one from a path.
fn parse_db(text: &str) -> std::result::Result<i64, RedisError> {
    text.parse::<i64>().map_err(|_| {
        RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "Invalid database number",
        ))
    })
}

/// Passwords found in a DSN, to cut out of any message that might echo them.
#[derive(Clone)]
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

/// `(before '#', whether it is #insecure)`: only TLS (`rediss-…://`) takes
/// a fragment, and only that one; the rest is refused rather than ignored.
/// `kind`: `sentinel` or `cluster`, for the message.
pub(super) fn split_fragment<'a>(
    rest: &'a str,
    scheme: &str,
    kind: &str,
) -> Result<(&'a str, bool)> {
    match rest.split_once('#') {
        None => Ok((rest, false)),
        Some((rest, "insecure")) if scheme == "rediss" => Ok((rest, true)),
        Some(_) => Err(Error::value(
            "$dsn",
            format!("must not have a #fragment (only rediss-{kind}:// takes #insecure)"),
        )),
    }
}

/// `host` as written in a list of hosts, with `port` added when it names
/// none (`[v6]` and `[v6]:port` included).
pub(super) fn with_default_port(host: &str, port: u16) -> String {
    let has_port = match host.strip_prefix('[') {
        Some(v6) => v6.contains("]:"),
        None => host.contains(':'),
    };
    if has_port {
        host.to_owned()
    } else {
        format!("{host}:{port}")
    }
}

/// `Error::value("$dsn", …)` for a part of a Sentinel or Cluster DSN that
/// the plain-DSN parser refused: its reason, without a second "$dsn".
pub(super) fn refused_part(err: Error, secrets: &Secrets) -> Error {
    match err {
        Error::InvalidValue { reason, .. } => Error::value("$dsn", secrets.scrub(reason)),
        other => Error::value("$dsn", secrets.scrub(other.to_string())),
    }
}

/// `my%20master` → `my master`, as a URL path segment is decoded; `None`
/// when the bytes are not UTF-8. A `%` not followed by two hex digits
/// stays as written.
pub(super) fn percent_decoded(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let hex = bytes
            .get(at + 1..at + 3)
            .and_then(|pair| std::str::from_utf8(pair).ok())
            .and_then(|pair| u8::from_str_radix(pair, 16).ok());
        match (bytes[at], hex) {
            (b'%', Some(byte)) => {
                decoded.push(byte);
                at += 3;
            }
            (byte, _) => {
                decoded.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8(decoded).ok()
}

pub(super) fn starts_with_ignoring_case(text: &str, prefix: &str) -> bool {
    text.get(..prefix.len())
        .is_some_and(|start| start.eq_ignore_ascii_case(prefix))
}

#[cfg(test)]
mod tests {
    use super::parse_dsn;
    use crate::error::Error;

    fn db_of(dsn: &str) -> i64 {
        match parse_dsn(dsn) {
            Ok((server, _)) => server.db(),
            Err(err) => panic!("{dsn}: {err}"),
        }
    }

    fn refusal(dsn: &str) -> String {
        match parse_dsn(dsn) {
            Err(Error::InvalidValue { arg, reason }) if arg == "$dsn" => reason,
            Err(other) => panic!("{dsn}: {other}"),
            Ok(_) => panic!("{dsn} was accepted"),
        }
    }

    #[test]
    fn every_form_of_the_database_number_is_honoured() {
        assert_eq!(db_of("redis://h:1"), 0);
        assert_eq!(db_of("redis://h:1/2"), 2);
        assert_eq!(db_of("redis://h:1?db=2"), 2);
        assert_eq!(db_of("redis://h:1/?db=2"), 2);
        assert_eq!(db_of("redis://h:1/2?db=2"), 2);
        assert_eq!(db_of("rediss://h:1?db=4#insecure"), 4);
        assert_eq!(db_of("unix:///tmp/r.sock?db=3"), 3);
    }

    #[test]
    fn a_database_given_twice_differently_is_refused() {
        assert_eq!(
            refusal("redis://h:1/2?db=3"),
            "names database 2 in its path and 3 in ?db=; give it once"
        );
        assert!(refusal("redis://h:1?db=1&db=2").contains("'db' more than once"));
        assert!(refusal("redis://h:1?db=x").contains("(Invalid database number)"));
        assert_eq!(
            refusal("redis://h:1?db=-1"),
            "must not name a negative database"
        );
    }

    #[test]
    fn what_the_crate_would_ignore_is_refused() {
        let unknown =
            "must not have query parameters other than ?db=N (and, for unix://, user= and pass=)";
        for dsn in [
            "redis://h:1?database=2",
            "redis://h:1?protocol=3",
            "redis://h:1?pass=secret",
            "redis://h:1?",
            "redis://h:1?db",
            "redis://h:1?db=2&",
            "unix:///tmp/r.sock?db=1&timeout=3",
        ] {
            assert_eq!(refusal(dsn), unknown, "{dsn}");
        }
        for dsn in [
            "redis://h:/0",
            "redis://h:",
            "redis://:pw@h:",
            "redis://[::1]:",
        ] {
            assert_eq!(
                refusal(dsn),
                "has ':' but no port after it (leave both out for 6379)",
                "{dsn}"
            );
        }
        for dsn in [
            "redis://h:1#x",
            "redis://h:1/0#insecure",
            "redis://h#",
            "unix:///s#x",
        ] {
            assert_eq!(
                refusal(dsn),
                "must not have a #fragment (only rediss:// takes #insecure)",
                "{dsn}"
            );
        }
        assert!(refusal("rediss://h:1#x").contains("only #insecure"));
        let (server, _) = parse_dsn("unix:///tmp/r.sock?user=u&pass=p&db=1").unwrap();
        assert_eq!(server.credentials(), (Some("u"), Some("p")));
    }
}

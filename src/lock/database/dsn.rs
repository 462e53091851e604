//! PDO DSNs in messages: the DSN shown without any form of its password.
//!
//! The traps this closes:
//! - a password can sit in a DSN in more forms than `password=`: libpq's
//!   space-separated `password = 'x'` (quoted or not), any case of the
//!   key, and a `postgresql://user:password@host` URI; every one is cut
//!   out of the label and of every message that quotes the DSN;
//! - the label is cut and escaped as every name in a message is.

use crate::lock::shorten;

/// A PDO DSN for messages: any `password=` part removed.
pub fn dsn_label(dsn: &str) -> String {
    let (driver, rest) = dsn.split_once(':').unwrap_or((dsn, ""));
    let kept: Vec<&str> = rest
        .split(';')
        .filter(|part| {
            !part
                .trim_start()
                .to_ascii_lowercase()
                .starts_with("password")
        })
        .collect();
    let mut label = format!("{driver}:{}", kept.join(";"));
    for secret in dsn_secrets(dsn) {
        label = label.replace(&secret, "***");
    }
    shorten(&label)
}

/// Passwords a PDO DSN may carry besides the `'password'` option, so that
/// no label or message shows them: `password=…` in the `;` form and in
/// libpq's space-separated form (quoted or not), and the password of a
/// `postgresql://user:password@host` URI.
pub fn dsn_secrets(dsn: &str) -> Vec<String> {
    let mut secrets = Vec::new();
    let lower = dsn.to_ascii_lowercase();
    let mut from = 0;
    while let Some(at) = lower[from..].find("password") {
        let start = from + at + "password".len();
        from = start;
        let rest = dsn[start..].trim_start();
        let Some(value) = rest.strip_prefix('=') else {
            continue;
        };
        let value = value.trim_start();
        let secret = match value.strip_prefix('\'') {
            Some(quoted) => quoted.split('\'').next().unwrap_or(""),
            None => value
                .split(|c: char| c == ';' || c.is_whitespace())
                .next()
                .unwrap_or(""),
        };
        if !secret.is_empty() {
            secrets.push(secret.to_owned());
        }
    }
    if let Some((_, after_scheme)) = dsn.split_once("://") {
        let authority = after_scheme.split(['/', '?']).next().unwrap_or("");
        if let Some((userinfo, _)) = authority.rsplit_once('@') {
            if let Some((_, password)) = userinfo.split_once(':') {
                if !password.is_empty() {
                    secrets.push(password.to_owned());
                }
            }
        }
    }
    secrets
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_part_is_dropped() {
        assert_eq!(
            dsn_label("pgsql:host=db;password=secret;dbname=x"),
            "pgsql:host=db;dbname=x"
        );
    }

    #[test]
    fn no_form_of_a_dsn_password_is_shown() {
        for dsn in [
            "pgsql:host=127.0.0.1 port=5432 dbname=app user=cron password=S3cretPW",
            "pgsql:host=127.0.0.1 password = 'S3cretPW' dbname=app",
            "pgsql:postgresql://cron:S3cretPW@127.0.0.1:5432/app",
            "mysql:host=db;dbname=app; Password=S3cretPW;charset=utf8mb4",
        ] {
            assert!(dsn_secrets(dsn).iter().any(|s| s == "S3cretPW"), "{dsn}");
            assert!(
                !dsn_label(dsn).contains("S3cretPW"),
                "{dsn}: {}",
                dsn_label(dsn)
            );
        }
    }
}

//! The server's name of a lock: what `GET_LOCK()` or the advisory lock
//! functions get for a `CronLock\Database` name, as a DBA reproduces it in
//! plain SQL.
//!
//! MySQL/MariaDB: a name of 1 to 64 bytes of printable ASCII without
//! upper-case letters (`[\x20-\x40\x5b-\x7e]`) that does not start with
//! `cronlock:` is the server's lock name as is (`SELECT GET_LOCK('nightly-report', 0)`).
//! Any other name becomes `cronlock:` followed by the 40 hex digits of the
//! SHA-1 of its bytes (`SELECT GET_LOCK(CONCAT('cronlock:', SHA1('Nightly Report')), 0)`).
//!
//! PostgreSQL: the advisory key is the first 64 bits of the MD5 of the
//! name's bytes, as a signed big-endian bigint:
//! `SELECT pg_try_advisory_lock(('x' || left(md5('nightly-report'), 16))::bit(64)::bigint)`.
//! Advisory locks are per database: both sides must be connected to the
//! same database.
//!
//! A claim (`claim()`, `claims.rs`) of a window by a lock is the row whose
//! `name` is the first 16 hex digits of the MD5 of the lock's name, a
//! colon, and the window as given, on both servers:
//! `CONCAT(LEFT(MD5('nightly-report'), 16), ':', '2026-12-01 10:05')`,
//! `left(md5('nightly-report'), 16) || ':' || '2026-12-01 10:05'`.
//!
//! The traps this closes:
//! - MySQL folds lock names to lower case and refuses more than 64
//!   characters: only hashing keeps "compared byte for byte" on every
//!   server, and a hashed name can never be somebody's plain one (plain
//!   names never start with `cronlock:`);
//! - two long names sharing a 64-byte prefix are never cut to one lock;
//! - 64 bits make an accidental collision between a shop's PostgreSQL names
//!   negligible (hashtext() has 32 bits and is not promised stable across
//!   releases); the MD5 is RustCrypto's, the one a DBA's `md5()` computes;
//! - a claim's key starts with a fixed-width digest of the lock's name, so
//!   no lock's windows can be another lock's (`a` + `b:c` is not `a:b` +
//!   `c`), and the window stays readable.

use md5::{Digest, Md5};

const HASHED_PREFIX: &str = "cronlock:";
const MYSQL_NAME_MAX: usize = 64;

/// The server-side name of a lock, as the dialect's statements take it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The server's name of the lock (MySQL's lock name, PostgreSQL's key
    /// in decimal): a query parameter, or a hex literal in MySQL's text.
    param: String,
    /// How a DBA sees it when that is not the name itself: `GET_LOCK name
    /// 'cronlock:…'` or `advisory key N`.
    shown: Option<String>,
}

impl Target {
    /// A lock the server knows by `param`; `shown` (when the name alone
    /// does not tell) is how messages name it for a DBA.
    pub fn new(param: String, shown: Option<String>) -> Self {
        Target { param, shown }
    }

    pub fn param(&self) -> &str {
        &self.param
    }

    pub fn shown(&self) -> Option<&str> {
        self.shown.as_deref()
    }
}

/// The MySQL/MariaDB lock name for `name` (see the module docs).
pub fn mysql_lock_name(name: &[u8]) -> String {
    let plain = !name.is_empty()
        && name.len() <= MYSQL_NAME_MAX
        && !name.starts_with(HASHED_PREFIX.as_bytes())
        && name
            .iter()
            .all(|&b| (0x20..=0x7e).contains(&b) && !b.is_ascii_uppercase());
    if plain {
        // Checked above: ASCII only.
        return String::from_utf8_lossy(name).into_owned();
    }
    format!("{HASHED_PREFIX}{}", sha1_smol::Sha1::from(name).digest())
}

/// The PostgreSQL advisory key for `name`:
/// `('x' || left(md5(name), 16))::bit(64)::bigint`.
pub fn postgres_key(name: &[u8]) -> i64 {
    let digest = Md5::digest(name);
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

/// The claims table's key of `window` claimed by the lock `name`: the
/// first 16 hex digits of MD5(name), `:`, the window.
pub fn claim_key(name: &[u8], window: &str) -> String {
    let digest = Md5::digest(name);
    let mut key: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    key.push(':');
    key.push_str(window);
    key
}

/// pg_locks shows a bigint advisory key as classid (high 32 bits) and objid
/// (low 32 bits), with objsubid 1.
pub fn split_key(key: i64) -> (u32, u32) {
    let bits = key as u64;
    ((bits >> 32) as u32, bits as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn md5_matches_rfc_1321() {
        let md5 = |input: &[u8]| hex(&Md5::digest(input));
        assert_eq!(md5(b""), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(md5(b"abc"), "900150983cd24fb0d6963f7d28e17f72");
        assert_eq!(
            md5(
                b"12345678901234567890123456789012345678901234567890123456789012345678901234567890"
            ),
            "57edf4a22be3c955ac49da2e2107b67a"
        );
    }

    #[test]
    fn postgres_key_is_the_first_64_bits_of_md5_signed() {
        // SELECT ('x' || left(md5('abc'), 16))::bit(64)::bigint
        assert_eq!(postgres_key(b"abc"), 0x9001_5098_3cd2_4fb0_u64 as i64);
        assert!(postgres_key(b"abc") < 0);
        assert_ne!(postgres_key(b"cron:a"), postgres_key(b"cron:b"));
    }

    #[test]
    fn mysql_names_plain_or_hashed() {
        assert_eq!(mysql_lock_name(b"nightly-report"), "nightly-report");
        assert_eq!(mysql_lock_name(b"a b:c/d"), "a b:c/d");
        let upper = mysql_lock_name(b"Nightly");
        assert_eq!(
            upper,
            format!("cronlock:{}", sha1_smol::Sha1::from("Nightly").digest())
        );
        assert_ne!(upper, mysql_lock_name(b"nightly"));
        assert_eq!(upper.len(), 49);
        // 64 bytes plain, 65 hashed, and a shared 64-byte prefix does not collide
        let long_a = format!("{}a", "x".repeat(64));
        let long_b = format!("{}b", "x".repeat(64));
        assert_eq!(mysql_lock_name("x".repeat(64).as_bytes()), "x".repeat(64));
        assert!(mysql_lock_name(long_a.as_bytes()).starts_with("cronlock:"));
        assert_ne!(
            mysql_lock_name(long_a.as_bytes()),
            mysql_lock_name(long_b.as_bytes())
        );
        // the hashed form is never somebody's plain name
        let hashed = mysql_lock_name(b"Nightly");
        assert_ne!(mysql_lock_name(hashed.as_bytes()), hashed);
        assert!(mysql_lock_name("é".as_bytes()).starts_with("cronlock:"));
        assert!(mysql_lock_name(b"tab\there").starts_with("cronlock:"));
    }

    #[test]
    fn claim_keys_start_with_a_fixed_width_digest_of_the_name() {
        // SELECT CONCAT(LEFT(MD5('abc'), 16), ':', 'w')
        assert_eq!(claim_key(b"abc", "w"), "900150983cd24fb0:w");
        assert_ne!(claim_key(b"a", "b:c"), claim_key(b"a:b", "c"));
        assert_eq!(claim_key(b"x", "").len(), 17);
    }

    #[test]
    fn pg_locks_split() {
        assert_eq!(split_key(-1), (u32::MAX, u32::MAX));
        assert_eq!(split_key(0x0000_0001_0000_0002), (1, 2));
    }
}

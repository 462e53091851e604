//! The names of `cron_guard()`'s own file locks: a lock name given as a
//! string (`cron_guard($job, 'nightly')`), and the name of a script's lock
//! (`cron_guard($job)`), made from the main script's real path. The files
//! are `<dir>/<name>.lock` in the directory `lock::dirs` picks.
//! cronlock/polyfill makes the same names (`tests/vectors.json` holds
//! examples both check).
//!
//! The traps this closes:
//! - a lock name is a file name in a directory of ours: `[A-Za-z0-9._-]`,
//!   1 to 200 characters, never `.` or `..`, so it can never name another
//!   directory or a hidden path;
//! - a script's lock is named after its real path, so `sync_orders.php`
//!   and `sync_orders_archive.php` never collide, and the same script run
//!   twice (also through a symlink) always does; the base name is kept
//!   readable and the path's hash makes it unique;
//! - a base name is sanitised per byte, not per character, so a script
//!   called "sync órders.php" gets the same name from the polyfill (which
//!   sees bytes), whatever the encoding of the path.

use crate::error::{Error, Result};
use crate::lock::shorten;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The longest lock name `cron_guard()` accepts.
const NAME_MAX: usize = 200;
/// The most bytes of a script's base name its lock name keeps.
const SCRIPT_BASE_MAX: usize = 100;

fn allowed(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"._-".contains(&byte)
}

/// Checks a lock name given to `cron_guard()`.
///
/// # Errors
///
/// [`Error::InvalidValue`] naming `$lock` and showing the name (escaped).
pub fn check_lock_name(name: &str) -> Result<()> {
    let valid = !name.is_empty()
        && name.len() <= NAME_MAX
        && name != "."
        && name != ".."
        && name.bytes().all(allowed);
    if valid {
        Ok(())
    } else {
        Err(Error::value(
            "$lock",
            format!(
                "must be a lock name of 1 to 200 characters [A-Za-z0-9._-] other than '.' and '..', '{}' given",
                shorten(&name.escape_default().to_string())
            ),
        ))
    }
}

/// `sync_orders.php.<16 hex digits>`: the lock name of the script whose
/// real path is `real_path` (FNV-1a 64 of the path's bytes).
pub fn script_lock_name(real_path: &Path) -> String {
    let base: String = real_path
        .file_name()
        .map(std::ffi::OsStr::as_bytes)
        .unwrap_or_default()
        .iter()
        .map(|&b| if allowed(b) { char::from(b) } else { '_' })
        .take(SCRIPT_BASE_MAX)
        .collect();
    format!("{base}.{:016x}", fnv1a64(real_path.as_os_str().as_bytes()))
}

/// The lock file of lock `name` in `dir`.
pub fn lock_file(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.lock"))
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_file_names_of_our_directory() {
        assert!(check_lock_name("nightly-report_2.v1").is_ok());
        for bad in ["", ".", "..", "a/b", "a b", "é", &"x".repeat(201)] {
            let err = check_lock_name(bad).unwrap_err().to_string();
            assert!(err.starts_with("$lock must be a lock name"), "{err}");
        }
        let err = check_lock_name("a\nb").unwrap_err().to_string();
        assert!(err.ends_with("'a\\nb' given"), "{err}");
    }

    #[test]
    fn a_script_is_named_after_its_real_path() {
        let a = script_lock_name(Path::new("/srv/app/sync_orders.php"));
        let b = script_lock_name(Path::new("/srv/other/sync_orders.php"));
        assert!(a.starts_with("sync_orders.php.") && a.len() == "sync_orders.php.".len() + 16);
        assert_ne!(a, b, "same base name, other path");
        assert_eq!(a, script_lock_name(Path::new("/srv/app/sync_orders.php")));
        let odd = script_lock_name(Path::new("/srv/sync órders.php"));
        assert!(odd.starts_with("sync___rders.php."), "{odd}");
    }
}

//! `cron_guard()`'s `$lock` argument as a lock object: the object given, a
//! named lock (`'nightly'`) or the main script's lock (`null`), both
//! `CronLock\File`s in the named-locks directory. The names are made in
//! `lock::named`, the directory chosen in `lock::dirs`; this module asks
//! PHP for the settings and the script.
//!
//! The traps this closes:
//! - the main script is the first file PHP ran other than the
//!   `auto_prepend_file` (which PHP runs before it), as cronlock/polyfill
//!   picks it; `php -r` and stdin have none, which is an error naming the
//!   fix;
//! - a script path is read as bytes: a script named in Latin-1 is a path
//!   like any other;
//! - weak mode has made `cron_guard($job, 42)` the lock named "42".

use super::args::LockOrName;
use super::engine;
use super::file::File;
use super::ini;
use crate::error::Error;
use crate::lock::dirs::{self, named_lock_dir};
use crate::lock::file::{FileLock, FileOptions};
use crate::lock::named::{check_lock_name, lock_file, script_lock_name};
use ext_php_rs::convert::IntoZval;
use ext_php_rs::prelude::*;
use ext_php_rs::types::{ZendCallable, Zval};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// The lock object `cron_guard()` runs the job under, and its name when
/// it is a named lock (which the lines show before its path).
///
/// # Errors
///
/// `\ValueError` for a lock name it refuses or a script lock without a
/// script; `CronLock\LockException` when the directory or the file cannot
/// be used.
pub fn resolve_lock(lock: LockOrName) -> PhpResult<(Zval, Option<String>)> {
    match lock {
        LockOrName::Lock(object) => Ok((object.shallow_clone(), None)),
        LockOrName::Name(name) => {
            let name = String::from_utf8_lossy(&name).into_owned();
            check_lock_name(&name)?;
            Ok((named_file_lock(&name)?, Some(name)))
        }
        LockOrName::Script => Ok((named_file_lock(&script_lock_name(&main_script()?))?, None)),
    }
}

fn named_file_lock(name: &str) -> PhpResult<Zval> {
    let setting = dirs::setting(engine::ini_string(ini::LOCK_DIR).unwrap_or_default());
    let dir = named_lock_dir(&setting)?;
    let options = FileOptions {
        mode: dir.file_mode,
        ..FileOptions::default()
    };
    let file = File::new(FileLock::open(&lock_file(&dir.path, name), options)?);
    Ok(file.into_zval(false)?)
}

/// The real path of the main script.
fn main_script() -> Result<PathBuf, Error> {
    let no_script = || {
        Error::value(
            "$lock",
            "is null but there is no main script file to name the lock after (php -r or stdin?); pass a lock name",
        )
    };
    let included = ZendCallable::try_from_name("get_included_files")
        .ok()
        .and_then(|f| f.try_call(vec![]).ok())
        .ok_or_else(no_script)?;
    let prepend = engine::ini_string(c"auto_prepend_file")
        .filter(|setting| !setting.is_empty())
        .and_then(|setting| std::fs::canonicalize(setting).ok());
    let first: PathBuf = included
        .array()
        .and_then(|files| {
            files
                .values()
                .filter_map(|path| path.zend_str())
                .map(|path| PathBuf::from(OsStr::from_bytes(path.as_bytes())))
                .find(|path| prepend.as_deref() != Some(path.as_path()))
        })
        .ok_or_else(no_script)?;
    Ok(std::fs::canonicalize(&first).unwrap_or(first))
}

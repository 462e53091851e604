//! Where `cron_guard()` keeps the lock files of named and script locks
//! (decisions D10 and D13).
//!
//! The traps this closes:
//! - one default directory per user, whatever the environment says (D13): every
//!   process of a user on a host (cron's, a login shell's, php-fpm's, the
//!   extension's and cronlock/polyfill's) must lock the same file, so
//!   `TMPDIR`, `sys_temp_dir` and the working directory are never read.
//!   It is `/run/cronlock` for root (only root can create entries in /run);
//!   else `/run/lock/cronlock-<euid>` when /run/lock is a directory this
//!   user may create entries in; else `/tmp/cronlock-<euid>`, a fixed
//!   absolute path (a relative `TMPDIR` used to give a directory per
//!   working directory, and a `TMPDIR` of a login shell another one than
//!   cron's);
//! - no other user can open (and so flock) or pre-create our lock files: the
//!   default directory is created 0700, and refused unless it is a real
//!   directory (a symlink is not) owned by us that neither group nor others
//!   can write; files in it are created 0600;
//! - every refusal says what happened and what to do about that cause (a
//!   missing parent, a full file system, a parent we may not write, another
//!   user's directory, a file in its place, loose permissions), and how to
//!   name another directory;
//! - an explicit `cronlock.lock_dir` (or `$CRONLOCK_LOCK_DIR`) is used as is
//!   (files 0644, so that several users can share it on purpose), but must
//!   be absolute, without NUL bytes, an existing directory, and not
//!   world-writable without the sticky bit.
//!
//! cronlock/polyfill's `Polyfill/LockDir.php` says the same sentences.

use super::sys;
use crate::error::{Error, Result};
use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedLockDir {
    pub path: PathBuf,
    /// Permission bits for the lock files created in it.
    pub file_mode: u32,
}

/// The environment variable that names the lock directory ahead of
/// `cronlock.lock_dir`: cronlock/polyfill reads it (userland cannot register
/// an ini setting), so a host moving between the polyfill and the extension
/// must see one directory, hence one lock file, from both.
pub const LOCK_DIR_ENV: &str = "CRONLOCK_LOCK_DIR";

/// What every refusal of a directory offers besides fixing it.
const SET_ANOTHER: &str =
    "set CRONLOCK_LOCK_DIR or cronlock.lock_dir to an absolute directory of your own";

/// The lock directory setting in force: `$CRONLOCK_LOCK_DIR` when set (even
/// empty, which means the default directory), else `ini` (the
/// `cronlock.lock_dir` setting).
pub fn setting(ini: std::ffi::OsString) -> PathBuf {
    PathBuf::from(std::env::var_os(LOCK_DIR_ENV).unwrap_or(ini))
}

/// The default directory of this user (see the header): the same for every
/// process of the user, whatever its environment or working directory.
pub fn default_dir() -> PathBuf {
    let euid = sys::effective_uid();
    if euid == 0 {
        return PathBuf::from("/run/cronlock");
    }
    let run_lock = Path::new("/run/lock");
    if run_lock.is_dir() && sys::may_write_dir(run_lock) {
        return run_lock.join(format!("cronlock-{euid}"));
    }
    PathBuf::from(format!("/tmp/cronlock-{euid}"))
}

/// The directory named locks use with `setting` (`cronlock.lock_dir`), as
/// `php --ri cronlock` shows it; nothing is created or checked.
pub fn named_lock_dir_path(setting: &Path) -> PathBuf {
    if setting.as_os_str().is_empty() {
        default_dir()
    } else {
        setting.to_owned()
    }
}

/// An explicit `cronlock.lock_dir` must name one directory for every run:
/// an absolute path without NUL bytes. A relative one would count from
/// each run's working directory (cron's is `$HOME`, a run by hand the
/// project's), so two runs of one job would lock two different files; a
/// NUL byte would cut the path short, to another directory.
///
/// # Errors
///
/// [`Error::Lock`] naming the setting and saying why.
pub fn check_setting(setting: &Path) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let name = setting_name();
    let bytes = setting.as_os_str().as_bytes();
    let shown = || super::shorten(&String::from_utf8_lossy(bytes).escape_default().to_string());
    if bytes.contains(&0) {
        return Err(Error::Lock(format!(
            "{name} '{}' contains a NUL byte; set it to an absolute directory path",
            shown()
        )));
    }
    if !bytes.is_empty() && !setting.is_absolute() {
        return Err(Error::Lock(format!(
            "{name} '{}' is a relative path, which would count from each run's \
             working directory; set it to an absolute directory path",
            shown()
        )));
    }
    Ok(())
}

/// The setting in force as a message names it: `$CRONLOCK_LOCK_DIR` when
/// set (it counts ahead of the ini setting), else `cronlock.lock_dir`.
fn setting_name() -> &'static str {
    if std::env::var_os(LOCK_DIR_ENV).is_some() {
        "$CRONLOCK_LOCK_DIR"
    } else {
        "cronlock.lock_dir"
    }
}

/// What `php --ri cronlock` shows as the named locks directory: the path,
/// or "none: " and the reason `cron_guard()` would refuse it. Nothing is
/// created: a default directory that does not exist yet is shown as the
/// path `cron_guard()` will create.
pub fn named_lock_dir_summary(setting: &Path) -> String {
    let checked = check_setting(setting).and_then(|()| {
        let path = named_lock_dir_path(setting);
        if !setting.as_os_str().is_empty() {
            check_explicit_dir(&path)?;
        } else if std::fs::symlink_metadata(&path).is_ok() {
            check_private_dir(&path)?;
        }
        Ok(path)
    });
    match checked {
        Ok(path) => shown(&path),
        Err(refusal) => format!("none: {refusal}"),
    }
}

/// The directory for named locks, made ready: the default one is created
/// if missing and checked to be ours alone; an explicit one must exist.
///
/// # Errors
///
/// [`Error::Lock`] for a setting [`check_setting`] refuses, and naming the
/// directory and what to do when it cannot be created, is not a directory
/// (a symlink counts as not), belongs to another user, or is writable by
/// others (the default one: by group or others; an explicit one: by
/// everyone without the sticky bit), or, set explicitly, does not exist.
pub fn named_lock_dir(setting: &Path) -> Result<NamedLockDir> {
    check_setting(setting)?;
    if !setting.as_os_str().is_empty() {
        check_explicit_dir(setting)?;
        return Ok(NamedLockDir {
            path: setting.to_owned(),
            file_mode: 0o644,
        });
    }
    let path = default_dir();
    prepare_private_dir(&path)?;
    Ok(NamedLockDir {
        path,
        file_mode: 0o600,
    })
}

/// Creates `path` 0700 if missing, then checks it is ours alone.
fn prepare_private_dir(path: &Path) -> Result<()> {
    sys::make_private_dir(path, 0o700).map_err(|e| cannot_create(path, &e))?;
    check_private_dir(path)
}

fn shown(path: &Path) -> String {
    super::shorten(&path.display().to_string())
}

fn refusal(path: &Path, what: &str, advice: &str) -> Error {
    Error::Lock(format!("lock directory {} {what}; {advice}", shown(path)))
}

/// Why mkdir(2) of the default directory failed, with the advice for that
/// cause: "No such file or directory" alone would send the user looking
/// for a directory that is not there.
fn cannot_create(path: &Path, err: &io::Error) -> Error {
    let parent = shown(path.parent().unwrap_or(Path::new("/")));
    let reason = sys::reason(err);
    match err.kind() {
        io::ErrorKind::NotFound => refusal(
            path,
            &format!("cannot be created: its parent directory {parent} does not exist"),
            &format!("create {parent} or {SET_ANOTHER}"),
        ),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded => refusal(
            path,
            &format!("cannot be created: {reason}"),
            &format!("free space or inodes on the file system of {parent}, or {SET_ANOTHER}"),
        ),
        io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem => refusal(
            path,
            &format!("cannot be created: {reason}"),
            &format!("this user may not create entries in {parent}, so {SET_ANOTHER}"),
        ),
        _ => refusal(path, &format!("cannot be created: {reason}"), SET_ANOTHER),
    }
}

/// The default directory must be a real directory of ours alone: anyone who
/// may open our lock files can hold them, anyone who may create entries
/// there can pre-create them.
fn check_private_dir(path: &Path) -> Result<()> {
    let euid = sys::effective_uid();
    match sys::dir_owner_and_mode(path) {
        Err(e) => Err(refusal(
            path,
            &format!("cannot be examined: {}", sys::reason(&e)),
            SET_ANOTHER,
        )),
        Ok(None) => Err(refusal(
            path,
            "is not a directory",
            &format!("remove it (cronlock recreates it) or {SET_ANOTHER}"),
        )),
        Ok(Some((owner, _))) if owner != euid => Err(refusal(
            path,
            &format!("is owned by uid {owner}, not by this process's uid {euid}"),
            &format!("have its owner or root remove it (cronlock recreates it), or {SET_ANOTHER}"),
        )),
        Ok(Some((_, mode))) if mode & 0o022 != 0 => Err(refusal(
            path,
            &format!("is writable by group or others (mode {mode:04o})"),
            &format!("chmod 700 it or {SET_ANOTHER}"),
        )),
        Ok(Some(_)) => Ok(()),
    }
}

/// An explicit directory, followed if it is a symlink (the directory the
/// files land in counts), must exist and must not be world-writable without
/// the sticky bit: anyone could swap our lock file for theirs there.
/// Whatever else stops its use (a parent we may not search) is named by
/// opening the lock file.
fn check_explicit_dir(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(refusal(
                path,
                "does not exist",
                "create it, or set CRONLOCK_LOCK_DIR or cronlock.lock_dir to an existing \
                 absolute directory",
            ));
        }
        Err(_) => return Ok(()),
    };
    if !meta.is_dir() {
        return Err(refusal(
            path,
            "is not a directory",
            "set CRONLOCK_LOCK_DIR or cronlock.lock_dir to an existing absolute directory",
        ));
    }
    let mode = meta.permissions().mode();
    if mode & 0o002 != 0 && mode & 0o1000 == 0 {
        return Err(refusal(
            path,
            "is world-writable without the sticky bit",
            "chmod +t it or set CRONLOCK_LOCK_DIR or cronlock.lock_dir to a safer directory",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A fresh directory of this test's own (never a global place).
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "cronlock-dirs-{name}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn refusal_of(result: Result<()>) -> String {
        result.unwrap_err().to_string()
    }

    #[test]
    fn an_explicit_directory_is_used_as_is_with_shareable_files() {
        let open = scratch("explicit");
        let dir = named_lock_dir(&open).unwrap();
        std::fs::remove_dir(&open).unwrap();
        assert_eq!(dir.path, open);
        assert_eq!(dir.file_mode, 0o644);
    }

    #[test]
    fn an_explicit_directory_that_does_not_exist_says_to_create_it() {
        let err = named_lock_dir(Path::new("/nonexistent/locks"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "lock directory /nonexistent/locks does not exist; create it, or set \
             CRONLOCK_LOCK_DIR or cronlock.lock_dir to an existing absolute directory"
        );
    }

    #[test]
    fn a_relative_setting_is_refused() {
        for setting in ["var/lock", "./locks", "../x"] {
            let err = named_lock_dir(Path::new(setting)).unwrap_err().to_string();
            assert!(
                err.contains(&format!("cronlock.lock_dir '{setting}' is a relative path"))
                    || err.contains(&format!(
                        "$CRONLOCK_LOCK_DIR '{setting}' is a relative path"
                    )),
                "{err}"
            );
        }
    }

    #[test]
    fn a_setting_with_a_nul_byte_is_refused() {
        use std::os::unix::ffi::OsStrExt;
        let setting = Path::new(std::ffi::OsStr::from_bytes(b"/tmp\0/elsewhere"));
        let err = named_lock_dir(setting).unwrap_err().to_string();
        assert!(
            err.contains("cronlock.lock_dir '/tmp\\u{0}/elsewhere' contains a NUL byte"),
            "{err}"
        );
    }

    #[test]
    fn the_summary_names_the_directory_or_why_it_is_refused() {
        let open = scratch("summary");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let summary = named_lock_dir_summary(&open);
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let sticky = named_lock_dir_summary(&open);
        std::fs::remove_dir(&open).unwrap();
        assert!(
            summary.starts_with("none: lock directory ")
                && summary.contains("world-writable without the sticky bit"),
            "{summary}"
        );
        assert_eq!(sticky, open.display().to_string());
        assert!(
            named_lock_dir_summary(Path::new("rel")).starts_with("none: cronlock.lock_dir 'rel'")
        );
        assert!(
            named_lock_dir_summary(Path::new("/srv/x\n"))
                .starts_with("none: lock directory /srv/x\\n does not exist; "),
            "one line, the newline escaped"
        );
    }

    #[test]
    fn the_default_directory_never_depends_on_the_environment() {
        let dir = default_dir();
        let euid = sys::effective_uid();
        let expected = if euid == 0 {
            PathBuf::from("/run/cronlock")
        } else if sys::may_write_dir(Path::new("/run/lock")) {
            PathBuf::from(format!("/run/lock/cronlock-{euid}"))
        } else {
            PathBuf::from(format!("/tmp/cronlock-{euid}"))
        };
        assert_eq!(dir, expected);
        assert_eq!(named_lock_dir_path(Path::new("")), expected);
    }

    #[test]
    fn a_private_directory_is_made_0700_and_accepted_again() {
        let base = scratch("private");
        let dir = base.join("cronlock-1");
        prepare_private_dir(&dir).unwrap();
        let (owner, mode) = sys::dir_owner_and_mode(&dir).unwrap().unwrap();
        prepare_private_dir(&dir).unwrap();
        std::fs::remove_dir_all(&base).unwrap();
        assert_eq!(owner, sys::effective_uid());
        assert_eq!(mode, 0o700);
    }

    #[test]
    fn each_refusal_says_what_to_do_about_its_cause() {
        let base = scratch("refusals");
        let missing = base.join("gone/cronlock-1");
        let file = base.join("file");
        std::fs::write(&file, b"").unwrap();
        let link = base.join("link");
        std::os::unix::fs::symlink(&base, &link).unwrap();
        let loose = base.join("loose");
        std::fs::create_dir(&loose).unwrap();
        std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o777)).unwrap();
        let b = base.display();
        let cases = [
            (
                refusal_of(prepare_private_dir(&missing)),
                format!(
                    "lock directory {b}/gone/cronlock-1 cannot be created: its parent directory \
                     {b}/gone does not exist; create {b}/gone or {SET_ANOTHER}"
                ),
            ),
            (
                refusal_of(prepare_private_dir(&file)),
                format!(
                    "lock directory {b}/file is not a directory; remove it (cronlock recreates \
                     it) or {SET_ANOTHER}"
                ),
            ),
            (
                refusal_of(prepare_private_dir(&link)),
                format!(
                    "lock directory {b}/link is not a directory; remove it (cronlock recreates \
                     it) or {SET_ANOTHER}"
                ),
            ),
            (
                refusal_of(prepare_private_dir(&loose)),
                format!(
                    "lock directory {b}/loose is writable by group or others (mode 0777); \
                     chmod 700 it or {SET_ANOTHER}"
                ),
            ),
        ];
        std::fs::remove_dir_all(&base).unwrap();
        for (got, want) in cases {
            assert_eq!(got, want);
        }
    }

    #[test]
    fn the_full_and_the_forbidden_parent_get_their_own_advice() {
        let full = std::io::Error::from_raw_os_error(libc::ENOSPC);
        let quota = std::io::Error::from_raw_os_error(libc::EDQUOT);
        let denied = std::io::Error::from_raw_os_error(libc::EACCES);
        let read_only = std::io::Error::from_raw_os_error(libc::EROFS);
        let dir = Path::new("/run/lock/cronlock-7");
        assert_eq!(
            cannot_create(dir, &full).to_string(),
            format!(
                "lock directory /run/lock/cronlock-7 cannot be created: No space left on \
                 device; free space or inodes on the file system of /run/lock, or {SET_ANOTHER}"
            )
        );
        assert!(cannot_create(dir, &quota)
            .to_string()
            .contains("free space or inodes on the file system of /run/lock"));
        for err in [denied, read_only] {
            assert_eq!(
                cannot_create(dir, &err).to_string(),
                format!(
                    "lock directory /run/lock/cronlock-7 cannot be created: {}; this user may \
                     not create entries in /run/lock, so {SET_ANOTHER}",
                    sys::reason(&err)
                )
            );
        }
    }

    #[test]
    fn another_users_directory_is_refused() {
        if sys::effective_uid() != 0 {
            return; // only root can give a directory away (chown)
        }
        let base = scratch("foreign");
        let dir = base.join("cronlock-0");
        std::fs::create_dir(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(1), None).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let err = refusal_of(prepare_private_dir(&dir));
        std::fs::remove_dir_all(&base).unwrap();
        assert_eq!(
            err,
            format!(
                "lock directory {}/cronlock-0 is owned by uid 1, not by this process's uid 0; \
                 have its owner or root remove it (cronlock recreates it), or {SET_ANOTHER}",
                base.display()
            )
        );
    }
}

//! Where `cron_guard()` keeps the lock files of named and script locks.
//!
//! By default a directory of this user's own, so that no other user can
//! open (and so flock) or pre-create the lock files of our jobs:
//! `/run/cronlock` for root (only root can create entries in /run), else
//! `<base>/cronlock-<euid>` with base `/run/lock` when writable, else the
//! system temp directory; created 0700, and refused unless it is a real
//! directory owned by us that neither group nor others can write. Files in
//! it are created 0600. An explicit `cronlock.lock_dir` is used as is (files
//! 0644, so that several users can share it on purpose), except that a
//! world-writable directory without the sticky bit is refused.

use super::sys;
use crate::error::{Error, Result};
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

/// The lock directory setting in force: `$CRONLOCK_LOCK_DIR` when set (even
/// empty, which means the default directory), else `ini` (the
/// `cronlock.lock_dir` setting).
pub fn setting(ini: std::ffi::OsString) -> PathBuf {
    PathBuf::from(std::env::var_os(LOCK_DIR_ENV).unwrap_or(ini))
}

/// The directory named locks use with `setting` (`cronlock.lock_dir`), as
/// `php --ri cronlock` shows it; nothing is created or checked.
pub fn named_lock_dir_path(setting: &Path) -> PathBuf {
    if !setting.as_os_str().is_empty() {
        return setting.to_owned();
    }
    let euid = sys::effective_uid();
    if euid == 0 && Path::new("/run").is_dir() {
        return PathBuf::from("/run/cronlock");
    }
    let run_lock = Path::new("/run/lock");
    let base = if run_lock.is_dir() && sys::may_write_dir(run_lock) {
        run_lock.to_owned()
    } else {
        std::env::temp_dir()
    };
    base.join(format!("cronlock-{euid}"))
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
    let bytes = setting.as_os_str().as_bytes();
    let shown = || super::shorten(&String::from_utf8_lossy(bytes).escape_default().to_string());
    if bytes.contains(&0) {
        return Err(Error::Lock(format!(
            "cronlock.lock_dir '{}' contains a NUL byte; set it to an absolute directory path",
            shown()
        )));
    }
    if !bytes.is_empty() && !setting.is_absolute() {
        return Err(Error::Lock(format!(
            "cronlock.lock_dir '{}' is a relative path, which would count from each run's \
             working directory; set it to an absolute directory path",
            shown()
        )));
    }
    Ok(())
}

/// What `php --ri cronlock` shows as the named locks directory: the path,
/// or "none: " and the reason `cron_guard()` would refuse it. Nothing is
/// created.
pub fn named_lock_dir_summary(setting: &Path) -> String {
    let checked = check_setting(setting).and_then(|()| {
        let path = named_lock_dir_path(setting);
        if !setting.as_os_str().is_empty() {
            check_explicit_dir(&path)?;
        }
        Ok(path)
    });
    match checked {
        Ok(path) => super::shorten(&path.display().to_string()),
        Err(refusal) => format!("none: {refusal}"),
    }
}

/// An explicit directory, followed if it is a symlink (the directory the
/// files land in counts), must not be world-writable without the sticky
/// bit: anyone could swap our lock file for theirs there. A missing one
/// passes (opening the lock file then says so).
fn check_explicit_dir(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(());
    };
    let mode = meta.permissions().mode();
    if mode & 0o002 != 0 && mode & 0o1000 == 0 {
        return Err(Error::Lock(format!(
            "lock directory {} is world-writable without the sticky bit; \
             chmod +t it or set cronlock.lock_dir to a safer directory",
            super::shorten(&path.display().to_string())
        )));
    }
    Ok(())
}

/// The directory for named locks, made ready: the default one is created
/// if missing and checked to be ours alone.
///
/// # Errors
///
/// [`Error::Lock`] for a setting [`check_setting`] refuses, and naming the
/// directory when it cannot be created, is not a directory (a symlink
/// counts as not), belongs to another user, or is writable by others (the
/// default one: by group or others; an explicit one: by everyone without
/// the sticky bit).
pub fn named_lock_dir(setting: &Path) -> Result<NamedLockDir> {
    check_setting(setting)?;
    let path = named_lock_dir_path(setting);
    if !setting.as_os_str().is_empty() {
        check_explicit_dir(&path)?;
        return Ok(NamedLockDir {
            path,
            file_mode: 0o644,
        });
    }
    let fail = |why: String| {
        Error::Lock(format!(
            "lock directory {} {why}; remove it (cronlock recreates it) or set \
             cronlock.lock_dir",
            path.display()
        ))
    };
    sys::make_private_dir(&path, 0o700)
        .map_err(|e| fail(format!("cannot be created: {}", sys::reason(&e))))?;
    let euid = sys::effective_uid();
    match sys::dir_owner_and_mode(&path) {
        Err(e) => Err(fail(format!("cannot be examined: {}", sys::reason(&e)))),
        Ok(None) => Err(fail("is not a directory".to_owned())),
        Ok(Some((owner, _))) if owner != euid => Err(fail(format!(
            "is owned by uid {owner}, not by this process's uid {euid}"
        ))),
        Ok(Some((_, mode))) if mode & 0o022 != 0 => Err(fail(format!(
            "is writable by group or others (mode {mode:04o})"
        ))),
        Ok(Some(_)) => Ok(NamedLockDir {
            path,
            file_mode: 0o600,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_explicit_directory_is_used_as_is_with_shareable_files() {
        let dir = named_lock_dir(Path::new("/some/where")).unwrap();
        assert_eq!(dir.path, Path::new("/some/where"));
        assert_eq!(dir.file_mode, 0o644);
    }

    #[test]
    fn a_relative_setting_is_refused() {
        for setting in ["var/lock", "./locks", "../x"] {
            let err = named_lock_dir(Path::new(setting)).unwrap_err().to_string();
            assert!(
                err.contains(&format!("cronlock.lock_dir '{setting}' is a relative path")),
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
        let open = std::env::temp_dir().join(format!("cronlock-dirs-{}", std::process::id()));
        std::fs::create_dir_all(&open).unwrap();
        use std::os::unix::fs::PermissionsExt;
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
        assert_eq!(named_lock_dir_summary(Path::new("/srv/x\n")), "/srv/x\\n");
    }

    #[test]
    fn the_default_directory_is_private_to_this_user() {
        let dir = named_lock_dir(Path::new("")).unwrap();
        assert_eq!(dir.file_mode, 0o600);
        let (owner, mode) = sys::dir_owner_and_mode(&dir.path).unwrap().unwrap();
        assert_eq!(owner, sys::effective_uid());
        assert_eq!(mode & 0o077, 0);
        assert_eq!(dir.path, named_lock_dir_path(Path::new("")));
    }
}

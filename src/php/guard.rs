//! `cron_guard()` and the `CronLock\Guard` it hands to the job.

use super::engine;
use super::file::File;
use super::ini;
use super::lock_interface::PhpInterfaceLock;
use super::options::{type_name, Options};
use super::redis::Redis;
use crate::error::Error;
use crate::lock::file::{FileLock, FileOptions};
use crate::lock::redis::MAX_TTL;
use ext_php_rs::class::RegisteredClass;
use ext_php_rs::convert::IntoZval;
use ext_php_rs::flags::ClassFlags;
use ext_php_rs::prelude::*;
use ext_php_rs::types::{ZendCallable, ZendClassObject, ZendHashTable, Zval};
use ext_php_rs::zend::BailoutGuard;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Handed to the job: its lock and its soft deadline.
#[php_class]
#[php(name = "CronLock\\Guard")]
#[php(flags = ClassFlags::Final)]
pub struct Guard {
    lock: Zval,
    deadline: Option<Instant>,
}

#[php_impl]
impl Guard {
    pub fn lock(&self) -> Zval {
        self.lock.shallow_clone()
    }

    pub fn remaining(&self) -> Option<f64> {
        self.deadline
            .map(|d| d.saturating_duration_since(Instant::now()).as_secs_f64())
    }

    pub fn expired(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    pub fn renew(&self) -> PhpResult<bool> {
        let renewed = self
            .lock
            .try_call_method("renew", vec![])
            .map_err(|e| Error::Lock(format!("renew() failed: {e}")))?;
        Ok(renewed.bool().unwrap_or(false))
    }
}

/// Releases the lock when dropped: on return, on exception, on `exit()`, and
/// (through `BailoutGuard`) on a fatal error, before shutdown functions run.
struct Releaser {
    lock: Zval,
    /// `'once_per'`: leave the key to expire at its window's end instead.
    once_per: bool,
}

impl Drop for Releaser {
    fn drop(&mut self) {
        if self.once_per {
            end_window(&mut self.lock);
            return;
        }
        if self.lock.object_mut().is_some_and(super::release_native) {
            return;
        }
        // A userland Lock: call its release() even while an exception or
        // exit() is unwinding.
        engine::with_exception_saved(|| {
            let _ = self.lock.try_call_method("release", vec![]);
        });
    }
}

#[php_function]
pub fn cron_guard(
    job: ZendCallable,
    lock: Option<&Zval>,
    options: Option<&ZendHashTable>,
) -> PhpResult<Zval> {
    let options = Options::new(
        "$options",
        options,
        &["wait", "max_runtime", "on_busy", "once_per"],
    )?;
    let wait = options.seconds("wait")?.unwrap_or(0.0);
    let max_runtime = match options.seconds("max_runtime")? {
        Some(s) if s <= 0.0 => {
            return Err(
                Error::value(options.arg_name("max_runtime"), "must be greater than 0").into(),
            )
        }
        other => other,
    };
    let on_busy = match options.int("on_busy")? {
        Some(code) if !(0..=255).contains(&code) => {
            return Err(Error::value(
                options.arg_name("on_busy"),
                "must be an exit status between 0 and 255",
            )
            .into())
        }
        other => other.map(|c| c as i32),
    };

    let once_per = once_per_period(&options)?;

    let mut lock = resolve_lock(lock)?;
    if once_per.is_some() {
        set_once_per(&mut lock, &options, once_per)?;
    }
    let acquired = lock
        .try_call_method("acquire", vec![&wait])
        .map_err(|e| Error::Lock(format!("acquire() failed: {e}")));
    if once_per.is_some() {
        set_once_per(&mut lock, &options, None)?;
    }
    let acquired = acquired?;
    if !acquired.bool().unwrap_or(false) {
        engine::error_log(&busy_message(&lock));
        if let Some(code) = on_busy {
            engine::exit(code);
        }
        return Ok(Zval::null());
    }

    let releaser = BailoutGuard::new(Releaser {
        lock: lock.shallow_clone(),
        once_per: once_per.is_some(),
    });
    let deadline = max_runtime.map(|s| {
        Duration::try_from_secs_f64(s)
            .ok()
            .and_then(|d| Instant::now().checked_add(d))
            .unwrap_or_else(far_future)
    });
    let guard = Guard { lock, deadline }.into_zval(false)?;
    let result = job.try_call(vec![&guard]);
    drop(releaser);
    // An exception from the job is pending in the engine and propagates
    // unchanged; the return value is then ignored.
    Ok(result.unwrap_or_default())
}

/// `'once_per'` in seconds: positive, at most the longest TTL.
fn once_per_period(options: &Options) -> PhpResult<Option<Duration>> {
    let Some(seconds) = options.seconds("once_per")? else {
        return Ok(None);
    };
    match Duration::try_from_secs_f64(seconds) {
        Ok(period) if period >= Duration::from_millis(1) && period <= MAX_TTL => Ok(Some(period)),
        _ => Err(Error::value(
            options.arg_name("once_per"),
            format!(
                "must be a number of seconds from 0.001 to {} (10 years)",
                MAX_TTL.as_secs()
            ),
        )
        .into()),
    }
}

/// Puts a CronLock\Redis into (or out of) once-per-window mode for the
/// acquire of this run; any other lock has no TTL to leave behind.
fn set_once_per(lock: &mut Zval, options: &Options, period: Option<Duration>) -> PhpResult<()> {
    let mut class = lock
        .object()
        .and_then(|o| o.get_class_name().ok())
        .unwrap_or_default();
    // An anonymous class's name goes on after a NUL, as PHP shows it.
    class.truncate(class.find('\0').unwrap_or(class.len()));
    let redis = lock
        .object_mut()
        .and_then(ZendClassObject::<Redis>::from_zend_obj_mut);
    match redis {
        Some(redis) => {
            redis.lock_mut().set_once_per(period);
            Ok(())
        }
        None => Err(Error::value(
            options.arg_name("once_per"),
            format!(
                "needs a lock with a TTL that can be left to expire at the window's end \
                 (CronLock\\Redis); {class} has none"
            ),
        )
        .into()),
    }
}

/// After a once-per-window run: the key stays until its window ends.
fn end_window(lock: &mut Zval) {
    let Some(redis) = lock
        .object_mut()
        .and_then(ZendClassObject::<Redis>::from_zend_obj_mut)
    else {
        return;
    };
    if let Err(err) = redis.lock_mut().end_window() {
        engine::error_log(&format!(
            "cron_guard: leaving {} to expire at the end of its window failed: {err}",
            redis.lock().describe()
        ));
    }
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(100 * 365 * 86_400)
}

fn resolve_lock(lock: Option<&Zval>) -> PhpResult<Zval> {
    let interface = PhpInterfaceLock::get_metadata().ce();
    match lock {
        Some(value) if value.is_object() => {
            let object = value.object().expect("checked is_object");
            if !object.instance_of(interface) {
                return Err(Error::type_(
                    "$lock",
                    format!(
                        "must be of type CronLock\\Lock|string|null, {} given",
                        object.get_class_name().unwrap_or_default()
                    ),
                )
                .into());
            }
            Ok(value.shallow_clone())
        }
        Some(value) if value.is_string() => {
            let name = value.str().unwrap_or_default();
            validate_name(name)?;
            file_lock_zval(&lock_file_path(name)?)
        }
        None => file_lock_zval(&lock_file_path(&script_lock_name()?)?),
        Some(value) if value.is_null() => file_lock_zval(&lock_file_path(&script_lock_name()?)?),
        Some(value) => Err(Error::type_(
            "$lock",
            format!(
                "must be of type CronLock\\Lock|string|null, {} given",
                type_name(value)
            ),
        )
        .into()),
    }
}

fn file_lock_zval(path: &Path) -> PhpResult<Zval> {
    let file = File::new(FileLock::open(path, FileOptions::default())?);
    Ok(file.into_zval(false)?)
}

fn validate_name(name: &str) -> Result<(), Error> {
    let valid = !name.is_empty()
        && name.len() <= 200
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if valid {
        Ok(())
    } else {
        Err(Error::value(
            "$lock",
            format!(
                "must be a lock name of 1 to 200 characters [A-Za-z0-9._-], '{}' given",
                name.escape_default()
            ),
        ))
    }
}

/// The directory for named locks: `cronlock.lock_dir`, or when that is
/// empty, /run/lock (a tmpfs meant for lock files) if we may write there,
/// else the system temp directory.
pub fn lock_dir_for(setting: &str) -> PathBuf {
    if !setting.is_empty() {
        return PathBuf::from(setting);
    }
    let run_lock = Path::new("/run/lock");
    // SAFETY: access(2) with a NUL-terminated constant path.
    if unsafe { libc::access(c"/run/lock".as_ptr(), libc::W_OK | libc::X_OK) } == 0
        && run_lock.is_dir()
    {
        return run_lock.to_owned();
    }
    std::env::temp_dir()
}

fn lock_file_path(name: &str) -> Result<PathBuf, Error> {
    let dir = lock_dir_for(&engine::ini_string(ini::LOCK_DIR).unwrap_or_default());
    if let Ok(meta) = std::fs::metadata(&dir) {
        // Anyone could swap our lock file for theirs in such a directory.
        if meta.mode() & 0o002 != 0 && meta.mode() & 0o1000 == 0 {
            return Err(Error::Lock(format!(
                "lock directory {} is world-writable without the sticky bit; \
                 chmod +t it or set cronlock.lock_dir to a safer directory",
                dir.display()
            )));
        }
    }
    Ok(dir.join(format!("{name}.lock")))
}

/// `sync_orders.php.<hash of its real path>`: the same script always maps to
/// the same lock, two scripts never do (even with equal base names).
fn script_lock_name() -> Result<String, Error> {
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
    let first = included
        .array()
        .and_then(|files| files.get_index(0))
        .and_then(|path| path.str().map(str::to_owned))
        .ok_or_else(no_script)?;
    let real = std::fs::canonicalize(&first).unwrap_or_else(|_| PathBuf::from(&first));
    let base: String = real
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(100)
        .collect();
    Ok(format!(
        "{base}.{:016x}",
        fnv1a64(real.as_os_str().as_encoded_bytes())
    ))
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn busy_message(lock: &Zval) -> String {
    let object = lock.object();
    let (what, holder) = if let Some(file) = object.and_then(ZendClassObject::<File>::from_zend_obj)
    {
        let pid = file.lock().holder_pid().ok().flatten();
        (
            format!("{}", file.lock().path().display()),
            pid.map(|pid| format!("pid {pid}")),
        )
    } else if let Some(redis) = object.and_then(ZendClassObject::<Redis>::from_zend_obj) {
        (
            format!("redis key '{}'", redis.lock().key()),
            redis
                .lock()
                .last_holder()
                .map(|(pid, host)| format!("pid {pid} on {host}")),
        )
    } else {
        let class = object.and_then(|o| o.get_class_name().ok());
        (class.unwrap_or_default(), None)
    };
    let holder = holder.unwrap_or_else(|| "another process (pid unknown)".to_owned());
    format!("cron_guard: lock {what} is held by {holder}; skipping this run")
}

/// The registration of `cron_guard()` for `get_module`.
pub fn cron_guard_function() -> ext_php_rs::builders::FunctionBuilder<'static> {
    wrap_function!(cron_guard)
}

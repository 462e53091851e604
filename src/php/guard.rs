//! `cron_guard()` and the `CronLock\Guard` it hands to the job.

use super::args::{Callback, LockOrName, OptionalFloat, OptionsArray};
use super::database::Database;
use super::engine;
use super::file::File;
use super::ini;
use super::options::Options;
use super::redis::Redis;
use crate::error::Error;
use crate::lock::dirs::named_lock_dir;
use crate::lock::file::{FileLock, FileOptions};
use crate::lock::redis::MAX_TTL;
use crate::lock::{shorten, Refusal, Wait};
use ext_php_rs::convert::IntoZval;
use ext_php_rs::flags::ClassFlags;
use ext_php_rs::prelude::*;
use ext_php_rs::types::{ZendCallable, ZendClassObject, ZendHashTable, Zval};
use ext_php_rs::zend::{bailout, try_catch, ExecutorGlobals};
pub use holds::forget_leftovers as forget_leftover_holds;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
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

    pub fn __serialize(&self) -> PhpResult<Vec<String>> {
        Err(super::not_serializable("CronLock\\Guard"))
    }

    pub fn __unserialize(&mut self, data: &ZendHashTable) -> PhpResult<()> {
        let _ = data;
        Err(super::not_serializable("CronLock\\Guard"))
    }

    pub fn renew(&self) -> PhpResult<bool> {
        let renewed = self
            .lock
            .try_call_method("renew", vec![])
            .map_err(|e| Error::Lock(format!("renew() failed: {e}")))?;
        Ok(renewed.bool().unwrap_or(false))
    }
}

#[php_function]
pub fn cron_guard(job: Callback, lock: LockOrName, options: OptionsArray) -> PhpResult<Zval> {
    let options = Options::new(
        "$options",
        options.0,
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
    let wait_arg = options.arg_name("wait");
    let once_per = once_per_period(&options)?;
    let once_per_arg = options.arg_name("once_per");
    drop(options);

    let mut lock = resolve_lock(lock)?;
    if once_per.is_some() {
        // Refuses a lock without a TTL to leave behind.
        set_once_per(&mut lock, &once_per_arg, once_per)?;
    }
    // D2: a hold this call did not take is not this call's to release.
    let Some(held_before) = ask_is_held(&lock)? else {
        return Ok(Zval::null());
    };
    // A guard that took this very object is running (this call is nested
    // in its job, or runs in another Fiber): this one shares its hold.
    let shares_a_guards_hold = holds::taken(&lock);
    let acquired = acquire(&mut lock, wait, &wait_arg);
    if once_per.is_some() {
        // Only this acquire takes a window; the hold keeps its window's end,
        // and releasing it leaves the key to expire then.
        set_once_per(&mut lock, &once_per_arg, None)?;
    }
    match acquired? {
        Acquired::Yes => {}
        Acquired::Threw => return Ok(Zval::null()),
        Acquired::No(refusal) => {
            engine::error_log(&busy_message(&lock, refusal));
            if let (Some(code), false) = (on_busy, refusal == Some(Refusal::Interrupted)) {
                engine::exit(code);
            }
            return Ok(Zval::null());
        }
    }
    let deadline = max_runtime.map(|s| {
        Duration::try_from_secs_f64(s)
            .ok()
            .and_then(|d| Instant::now().checked_add(d))
            .unwrap_or_else(far_future)
    });
    let guard = Guard {
        lock: lock.shallow_clone(),
        deadline,
    }
    .into_zval(false)?;
    if held_before && !shares_a_guards_hold {
        return Ok(job.0.try_call(vec![&guard]).unwrap_or_default());
    }

    let hold = holds::enter(&lock);
    let caller_frame = engine::current_frame();
    let outcome = try_catch(AssertUnwindSafe(|| {
        let result = job.0.try_call(vec![&guard]);
        // An exception from the job is pending in the engine and
        // propagates unchanged; the return value is then ignored.
        hold.release().map(|()| result)
    }));
    let Ok(result) = outcome else {
        // A fatal error (or another bailout) in the job, in a Fiber it
        // resumed, or in the release: the script ends, after its shutdown
        // functions, which must see every lock of ours free. Released by
        // hold, not by stack position: a Fiber's cron_guard() may be
        // suspended mid-job.
        engine::restore_frame(caller_frame);
        holds::release_all_after_fatal();
        drop((guard, lock, job, wait_arg));
        // SAFETY: re-raises the bailout caught above, with nothing of ours
        // left on this frame that needs dropping.
        unsafe { bailout() }
    };
    Ok(result?.unwrap_or_default())
}

enum Acquired {
    Yes,
    /// Busy; the reason when the lock is ours to ask (native locks).
    No(Option<Refusal>),
    /// acquire() threw: the exception is pending and propagates.
    Threw,
}

/// `$lock->isHeld()`; `None` when it threw (the exception is pending).
fn ask_is_held(lock: &Zval) -> PhpResult<Option<bool>> {
    if let Some(file) = lock
        .object()
        .and_then(ZendClassObject::<File>::from_zend_obj)
    {
        return Ok(Some(file.lock().is_held()));
    }
    let held = lock
        .try_call_method("isHeld", vec![])
        .map_err(|e| Error::Lock(format!("isHeld() failed: {e}")))?;
    if ExecutorGlobals::has_exception() {
        return Ok(None);
    }
    Ok(Some(held.bool().unwrap_or(false)))
}

/// `$lock->acquire($wait)`. A backend failure is never taken for busy: it
/// propagates (a userland acquire() returns normally with the exception
/// pending, which is checked here). Native locks are called directly, not
/// through PHP: a PHP call runs the pending signal handler as it returns
/// (and clears the engine's interrupt flag), after which an interrupted
/// wait could no longer be told from contention.
fn acquire(lock: &mut Zval, wait: f64, wait_arg: &str) -> PhpResult<Acquired> {
    let object = lock.object_mut();
    if let Some(file) = object.and_then(ZendClassObject::<File>::from_zend_obj_mut) {
        let got = file
            .lock_mut()
            .acquire(Wait::from_seconds(wait_arg, wait)?)?;
        return Ok(if got {
            Acquired::Yes
        } else {
            Acquired::No(file.lock().refusal())
        });
    }
    let object = lock.object_mut();
    if let Some(redis) = object.and_then(ZendClassObject::<Redis>::from_zend_obj_mut) {
        return Ok(if redis.acquire(OptionalFloat(Some(wait)))? {
            Acquired::Yes
        } else {
            // Its wait gives up when the interrupt flag is set, and no PHP
            // code has run since to clear it.
            Acquired::No(if crate::lock::interrupted() {
                Some(Refusal::Interrupted)
            } else if redis.lock().busy_in_this_process() {
                Some(Refusal::HeldByThisThread)
            } else {
                None
            })
        });
    }
    let object = lock.object_mut();
    if let Some(db) = object.and_then(ZendClassObject::<Database>::from_zend_obj_mut) {
        // Its PDO calls may run a signal handler that throws or exit()s.
        let got = db.acquire(OptionalFloat(Some(wait)))?;
        if ExecutorGlobals::has_exception() {
            return Ok(Acquired::Threw);
        }
        return Ok(if got {
            Acquired::Yes
        } else {
            Acquired::No(db.refusal())
        });
    }
    let got = lock
        .try_call_method("acquire", vec![&wait])
        .map_err(|e| Error::Lock(format!("acquire() failed: {e}")))?;
    if ExecutorGlobals::has_exception() {
        return Ok(Acquired::Threw);
    }
    Ok(if got.bool().unwrap_or(false) {
        Acquired::Yes
    } else {
        Acquired::No(None)
    })
}

/// The holds `cron_guard()` took and has not released yet, in this thread,
/// one per lock object. Not a stack: with Fibers, guards are suspended and
/// resumed in any order, and a Fiber may never be resumed at all. Guards
/// that run on one lock object at the same time (nested, or in several
/// Fibers) share its hold, which the last of them to end releases.
mod holds {
    use super::{describe, engine};
    use crate::error::Error;
    use ext_php_rs::boxed::ZBox;
    use ext_php_rs::convert::IntoZval;
    use ext_php_rs::prelude::*;
    use ext_php_rs::types::{ZendObject, Zval};
    use ext_php_rs::zend::{try_catch, ExecutorGlobals};
    use std::cell::{Cell, RefCell};
    use std::mem::ManuallyDrop;
    use std::panic::AssertUnwindSafe;

    /// The hold on one lock object.
    struct Shared {
        id: u64,
        /// Identity of the lock object; `lock` keeps it alive, so no other
        /// object can take its address while the entry exists.
        object: *const ZendObject,
        lock: Zval,
        /// The guards on it whose jobs have not ended yet.
        guards: usize,
        /// The process that took it: a `pcntl_fork()` child inherits the
        /// guards running in its parent, and their end there (the child's
        /// `exit()`, fatal error or return) must not release the parent's
        /// hold, as a lock class of the user's own would free it for both.
        pid: u32,
    }

    thread_local! {
        // Emptied at every request's end (forget_leftovers, RSHUTDOWN): a
        // zval must not outlive the engine, and thread-locals are dropped
        // at thread exit, after it.
        static HOLDS: RefCell<Vec<Shared>> = const { RefCell::new(Vec::new()) };
        static NEXT_ID: Cell<u64> = const { Cell::new(1) };
    }

    fn identity(lock: &Zval) -> *const ZendObject {
        lock.object().map_or(std::ptr::null(), std::ptr::from_ref)
    }

    /// One guard's part in a hold; [`Hold::release`] gives it up (dropped
    /// unreleased, when a Rust panic unwinds cron_guard(), it releases too).
    pub struct Hold {
        id: u64,
    }

    /// Whether a `cron_guard()` that took `lock` is still running.
    pub fn taken(lock: &Zval) -> bool {
        let object = identity(lock);
        HOLDS.with(|holds| holds.borrow().iter().any(|hold| hold.object == object))
    }

    /// Joins the hold on `lock` of the guards running on it, or starts one.
    pub fn enter(lock: &Zval) -> Hold {
        let object = identity(lock);
        HOLDS.with(|holds| {
            let mut holds = holds.borrow_mut();
            if let Some(shared) = holds.iter_mut().find(|hold| hold.object == object) {
                shared.guards += 1;
                return Hold { id: shared.id };
            }
            let id = NEXT_ID.with(|next| next.replace(next.get() + 1));
            holds.push(Shared {
                id,
                object,
                lock: lock.shallow_clone(),
                guards: 1,
                pid: std::process::id(),
            });
            Hold { id }
        })
    }

    /// One guard of hold `id` ended: the lock to release when it was the
    /// last; `None` while others run, when a fatal error released it, or in
    /// a fork child of the process that took it.
    fn leave(id: u64) -> Option<Zval> {
        HOLDS.with(|holds| {
            let mut holds = holds.borrow_mut();
            let at = holds.iter().position(|hold| hold.id == id)?;
            holds[at].guards -= 1;
            if holds[at].guards > 0 {
                return None;
            }
            let shared = holds.remove(at);
            (shared.pid == std::process::id()).then_some(shared.lock)
        })
    }

    impl Hold {
        /// Releases the lock when this is the last guard on it. A failing
        /// release is logged; it is also thrown when nothing else is
        /// pending (D8), while a job's exception or `exit()` keeps
        /// propagating.
        pub fn release(self) -> PhpResult<()> {
            let this = ManuallyDrop::new(self);
            let Some(lock) = leave(this.id) else {
                return Ok(());
            };
            if ExecutorGlobals::has_exception() {
                // The job threw, called exit(), or died of memory_limit,
                // which PHP unwinds like exit(): there may be no memory
                // left to call release() with.
                engine::with_room_for_cleanup(|| {
                    engine::with_exception_set_aside(|| release_logged(&lock, false))
                })?;
                return Ok(());
            }
            release_logged(&lock, true)
        }
    }

    impl Drop for Hold {
        fn drop(&mut self) {
            if let Some(lock) = leave(self.id) {
                let _ = engine::with_exception_set_aside(|| release_logged(&lock, false));
            }
        }
    }

    /// How a release failed: it threw, or it could not be called at all.
    enum Failure {
        Threw(ZBox<ZendObject>),
        NotCalled(Error),
    }

    /// Calls `$lock->release()`; on failure logs "releasing lock … failed"
    /// and, when `rethrow`, throws the failure (else it is only logged).
    /// An `exit()` in it (or PHP's out-of-memory error, or the destruction
    /// of a Fiber suspended in it) is no failure: it keeps unwinding, as it
    /// would from any other function.
    fn release_logged(lock: &Zval, rethrow: bool) -> PhpResult<()> {
        let called = lock.try_call_method("release", vec![]);
        if engine::exit_unwinding() {
            return Ok(());
        }
        let (message, failure) = match (ExecutorGlobals::take_exception(), called) {
            (Some(thrown), _) => (exception_message(&thrown), Failure::Threw(thrown)),
            (None, Err(e)) => {
                let e = Error::Lock(format!("release() could not be called: {e}"));
                (e.to_string(), Failure::NotCalled(e))
            }
            (None, Ok(_)) => return Ok(()),
        };
        // Logged first: with an exception pending, error_log() cannot run.
        engine::error_log(&format!(
            "cron_guard: releasing lock {} failed: {message}",
            describe(lock)
        ));
        if !rethrow {
            return Ok(());
        }
        match failure {
            Failure::Threw(thrown) => {
                let _ = ext_php_rs::exception::throw_object(thrown.into_zval(false)?);
                Ok(())
            }
            Failure::NotCalled(e) => Err(e.into()),
        }
    }

    /// `getMessage()` of a Throwable (never an exit unwind: see
    /// [`engine::exit_unwinding`], whose objects have no methods at all).
    fn exception_message(thrown: &ZendObject) -> String {
        thrown
            .try_call_method("getMessage", vec![])
            .ok()
            .and_then(|m| m.string())
            .unwrap_or_else(|| thrown.get_class_name().unwrap_or_default())
    }

    /// After a fatal error: releases every hold of this thread (the script
    /// is ending), with the memory limit lifted for the calls, as a job
    /// that hit `memory_limit` left none to spare. A release() that calls
    /// exit() sets the exit status; the other locks are released all the
    /// same, and the fatal error goes on to shutdown as before.
    pub fn release_all_after_fatal() {
        let mut all: Vec<Shared> = HOLDS.with(|holds| std::mem::take(&mut *holds.borrow_mut()));
        all.retain(|shared| shared.pid == std::process::id());
        let frame = engine::current_frame();
        engine::with_room_for_cleanup(|| {
            for shared in all.iter().rev() {
                engine::with_exception_set_aside(|| {
                    // A fatal error in one release() leaves the others to do.
                    let released = try_catch(AssertUnwindSafe(|| {
                        let _ = release_logged(&shared.lock, false);
                    }));
                    if released.is_err() {
                        engine::restore_frame(frame);
                    }
                    engine::discard_exit_unwinding();
                });
            }
        });
    }

    /// RSHUTDOWN, in every request: holds of guards whose frames never
    /// ended (a Fiber left suspended through a fatal error outside every
    /// cron_guard()). Native locks are released by the shutdown sweep; the
    /// references are let go without a destructor call, which must not run
    /// this late (the engine frees the objects with the rest of the store).
    pub fn forget_leftovers() {
        HOLDS.with(|holds| {
            for shared in holds.borrow_mut().drain(..) {
                std::mem::forget(shared.lock);
            }
        });
    }
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
fn set_once_per(lock: &mut Zval, arg: &str, period: Option<Duration>) -> PhpResult<()> {
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
            arg,
            format!(
                "needs a lock with a TTL that can be left to expire at the window's end \
                 (CronLock\\Redis); {class} has none"
            ),
        )
        .into()),
    }
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(100 * 365 * 86_400)
}

fn resolve_lock(lock: LockOrName) -> PhpResult<Zval> {
    match lock {
        LockOrName::Lock(object) => Ok(object.shallow_clone()),
        // weak mode has made cron_guard($job, 42) the lock named "42"
        LockOrName::Name(name) => {
            let name = String::from_utf8_lossy(&name).into_owned();
            validate_name(&name)?;
            named_file_lock(&name)
        }
        LockOrName::Script => named_file_lock(&script_lock_name()?),
    }
}

fn named_file_lock(name: &str) -> PhpResult<Zval> {
    let setting = crate::lock::dirs::setting(engine::ini_string(ini::LOCK_DIR).unwrap_or_default());
    let dir = named_lock_dir(&setting)?;
    let options = FileOptions {
        mode: dir.file_mode,
        ..FileOptions::default()
    };
    let path = dir.path.join(format!("{name}.lock"));
    let file = File::new(FileLock::open(&path, options)?);
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
                "must be a lock name of 1 to 200 characters [A-Za-z0-9._-] other than '.' and '..', '{}' given",
                shorten(&name.escape_default().to_string())
            ),
        ))
    }
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
    // The first file PHP ran that is not the auto_prepend_file (which PHP
    // runs before the main script), as cronlock/polyfill picks it.
    let prepend = engine::ini_string(c"auto_prepend_file")
        .filter(|setting| !setting.is_empty())
        .and_then(|setting| std::fs::canonicalize(setting).ok());
    use std::os::unix::ffi::OsStrExt;
    // Paths as bytes: a script named in Latin-1 is a path like any other.
    let first: PathBuf = included
        .array()
        .and_then(|files| {
            files
                .values()
                .filter_map(|path| path.zend_str())
                .map(|path| PathBuf::from(std::ffi::OsStr::from_bytes(path.as_bytes())))
                .find(|path| prepend.as_deref() != Some(path.as_path()))
        })
        .ok_or_else(no_script)?;
    let real = std::fs::canonicalize(&first).unwrap_or(first);
    // One '_' per byte, not per character: cronlock/polyfill (which sees
    // bytes) names the same file for a script called "sync órders.php".
    let base: String = real
        .file_name()
        .map(std::ffi::OsStr::as_encoded_bytes)
        .unwrap_or_default()
        .iter()
        .map(|&b| {
            if b.is_ascii_alphanumeric() || b"._-".contains(&b) {
                char::from(b)
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

/// How messages name a lock: the path, the Redis key, or the class.
fn describe(lock: &Zval) -> String {
    let object = lock.object();
    if let Some(file) = object.and_then(ZendClassObject::<File>::from_zend_obj) {
        shorten(&file.lock().path().display().to_string())
    } else if let Some(redis) = object.and_then(ZendClassObject::<Redis>::from_zend_obj) {
        redis.lock().describe()
    } else if let Some(db) = object.and_then(ZendClassObject::<Database>::from_zend_obj) {
        db.describe()
    } else {
        object
            .and_then(|o| o.get_class_name().ok())
            .unwrap_or_default()
    }
}

fn busy_message(lock: &Zval, refusal: Option<Refusal>) -> String {
    let what = describe(lock);
    let pid = std::process::id();
    match refusal {
        Some(Refusal::Interrupted) => {
            return format!(
                "cron_guard: waiting for lock {what} was interrupted by a signal; skipping this run"
            )
        }
        Some(Refusal::HeldByThisThread) => {
            return format!(
                "cron_guard: lock {what} is held by this process (pid {pid}) through another \
                 lock object; skipping this run"
            )
        }
        Some(Refusal::Contended | Refusal::Lost) | None => {}
    }
    let object = lock.object();
    let holder = if let Some(file) = object.and_then(ZendClassObject::<File>::from_zend_obj) {
        file.lock()
            .holder_pid()
            .ok()
            .flatten()
            .map(|pid| format!("pid {pid}"))
    } else if let Some(redis) = object.and_then(ZendClassObject::<Redis>::from_zend_obj) {
        redis.lock().holder_description()
    } else if let Some(db) = object.and_then(ZendClassObject::<Database>::from_zend_obj) {
        db.holder_for_message()
    } else {
        None
    };
    let holder = holder.unwrap_or_else(|| "another process (pid unknown)".to_owned());
    format!("cron_guard: lock {what} is held by {holder}; skipping this run")
}

/// The registration of `cron_guard()` for `get_module`.
pub fn cron_guard_function() -> ext_php_rs::builders::FunctionBuilder<'static> {
    wrap_function!(cron_guard)
}

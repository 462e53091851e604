//! `cron_guard()` and the `CronLock\Guard` it hands to the job: one branch
//! for the lock classes of this extension (through [`super::native::NativeLock`]),
//! one for a userland `CronLock\Lock` (through its PHP methods). The holds
//! it takes are kept in `holds.rs`, named and script locks made in
//! `named.rs`.
//!
//! The traps this closes:
//! - a hold this call did not take is not this call's to release (D2); a
//!   guard on an object another running guard took shares that hold;
//! - a backend failure in acquire() is never taken for busy: it propagates,
//!   with or without `'on_busy'`, and there is no busy line;
//! - a wait cut short by a signal is told from contention (its own busy
//!   line, `'on_busy'` not applied);
//! - the lock is released however the job ends: return, exception, `exit()`,
//!   a fatal error (by hold, not by stack position: a Fiber's cron_guard()
//!   may be suspended mid-job).

use super::args::{Callback, LockOrName, OptionsArray};
use super::engine;
use super::holds;
use super::lock_classes::{self, describe};
use super::named::resolve_lock;
use super::native::Acquired;
use super::options::Options;
use crate::error::Error;
use crate::lock::redis::MAX_TTL;
use crate::lock::{Refusal, Wait};
use ext_php_rs::convert::IntoZval;
use ext_php_rs::flags::ClassFlags;
use ext_php_rs::prelude::*;
use ext_php_rs::types::{ZendHashTable, Zval};
use ext_php_rs::zend::{bailout, try_catch, ExecutorGlobals};
use std::panic::AssertUnwindSafe;
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

    let part = holds::enter(&lock);
    let caller_frame = engine::current_frame();
    let outcome = try_catch(AssertUnwindSafe(|| {
        let result = job.0.try_call(vec![&guard]);
        // An exception from the job is pending in the engine and
        // propagates unchanged; the return value is then ignored.
        part.release().map(|()| result)
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

/// `$lock->isHeld()`; `None` when it threw (the exception is pending).
fn ask_is_held(lock: &Zval) -> PhpResult<Option<bool>> {
    if let Some(native) = lock.object().and_then(lock_classes::native) {
        return Ok(Some(native.held()));
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
/// through PHP (see `native.rs`).
fn acquire(lock: &mut Zval, wait: f64, wait_arg: &str) -> PhpResult<Acquired> {
    if let Some(native) = lock.object_mut().and_then(lock_classes::native_mut) {
        return native.acquire_for_guard(Wait::from_seconds(wait_arg, wait)?);
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

/// Puts the lock into (or out of) once-per-window mode for the acquire of
/// this run; a lock without a TTL to leave behind is refused.
fn set_once_per(lock: &mut Zval, arg: &str, period: Option<Duration>) -> PhpResult<()> {
    let class = lock_classes::class_name(lock);
    let set = lock
        .object_mut()
        .and_then(lock_classes::native_mut)
        .is_some_and(|native| native.set_once_per(period));
    if set {
        return Ok(());
    }
    Err(Error::value(
        arg,
        format!(
            "needs a lock with a TTL that can be left to expire at the window's end \
             ({}); {class} has none",
            lock_classes::WITH_TTL
        ),
    )
    .into())
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(100 * 365 * 86_400)
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
    let holder = lock
        .object()
        .and_then(lock_classes::native)
        .and_then(|native| native.busy_holder());
    let holder = holder.unwrap_or_else(|| "another process (pid unknown)".to_owned());
    format!("cron_guard: lock {what} is held by {holder}; skipping this run")
}

/// The registration of `cron_guard()` for `get_module`.
pub fn cron_guard_function() -> ext_php_rs::builders::FunctionBuilder<'static> {
    wrap_function!(cron_guard)
}

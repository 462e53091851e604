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
//!   may be suspended mid-job);
//! - a skip is quiet but findable (`report.rs`), and says who holds the lock,
//!   since when, for how long, and how long this run waited; a holder older
//!   than `'stale_after'` looks stuck, at warning level (`'on_stale'`);
//! - a lost hold is never silent (D20): noticed at `Guard::renew()`,
//!   `Guard::expired()` or `Guard::lost()`, and always at the job's end
//!   (release()'s own answer; File: the path, which unlocking never checks),
//!   it is logged once when noticed and once at the end (`'on_lost' =>
//!   'throw'` turns it into an exception at the next check);
//! - a failing release is reported as a lost hold is (error log once, the
//!   destination, the logger), and its record says `release_failed`, not
//!   `failed` (the job threw), unless the job did throw (D8).

use super::args::{Callback, LockOrName, OptionsArray};
use super::engine;
use super::holds::{self, Released};
use super::lock_classes::{self, describe};
use super::named::resolve_lock;
use super::native::{Acquired, Holder};
use super::options::Options;
use super::report::{Level, Report, RunFields};
use crate::error::Error;
use crate::lock::owner::{current_pid, hostname};
use crate::lock::redis::MAX_TTL;
use crate::lock::report::{clock_time, duration_words, limit_words, tenths, Outcome};
use crate::lock::{Refusal, Wait};
use ext_php_rs::convert::IntoZval;
use ext_php_rs::flags::ClassFlags;
use ext_php_rs::prelude::*;
use ext_php_rs::types::{ZendHashTable, Zval};
use ext_php_rs::zend::{bailout, try_catch, ExecutorGlobals};
use std::cell::RefCell;
use std::panic::AssertUnwindSafe;
use std::rc::Rc;
use std::time::{Duration, Instant, SystemTime};

/// Handed to the job: its lock, its soft deadline, and what became of
/// its hold.
#[php_class]
#[php(name = "CronLock\\Guard")]
#[php(flags = ClassFlags::Final)]
pub struct Guard {
    lock: Zval,
    deadline: Option<Instant>,
    run: Rc<Run>,
}

/// One run of a job under its hold, as cron_guard() and its Guard see it.
struct Run {
    /// The lock as the lines name it.
    what: String,
    report: Report,
    /// The record's name of the lock (a named lock: its name).
    record_name: String,
    on_lost_throw: bool,
    waited: Duration,
    acquired: Instant,
    loss: RefCell<Option<Loss>>,
}

/// When and why the hold was found gone.
struct Loss {
    at: SystemTime,
    why: String,
}

impl Run {
    fn fields(&self, outcome: Outcome) -> RunFields {
        RunFields {
            lock: self.record_name.clone(),
            outcome,
            waited: self.waited,
            held: self.held(),
            holder: Some(format!("{}@{}", current_pid(), hostname())),
        }
    }

    /// How long the hold lasted: until now, or until its loss was found
    /// (a hold lost mid-job is not held after that).
    fn held(&self) -> Duration {
        let elapsed = self.acquired.elapsed();
        let Some(lost_at) = self.loss.borrow().as_ref().map(|loss| loss.at) else {
            return elapsed;
        };
        match SystemTime::now().checked_sub(elapsed) {
            Some(acquired_at) => lost_at
                .duration_since(acquired_at)
                .unwrap_or(Duration::ZERO)
                .min(elapsed),
            None => elapsed,
        }
    }

    /// `at 14:52:07Z: the key holds another token`.
    fn loss_words(&self) -> Option<String> {
        let loss = self.loss.borrow();
        let loss = loss.as_ref()?;
        Some(format!(
            "at {}: {}",
            clock_time(loss.at, SystemTime::now()),
            loss.why
        ))
    }

    /// Notes the hold gone (once); `while_running`: logs the line of a
    /// loss noticed before the job's end.
    fn lose(&self, lock: &Zval, fallback: &str, while_running: bool) {
        if self.loss.borrow().is_some() {
            return;
        }
        let native = lock.object().and_then(lock_classes::native);
        let why = native.map_or_else(|| fallback.to_owned(), |native| native.loss_reason());
        let at = native
            .and_then(|native| native.lost_at())
            .unwrap_or_else(SystemTime::now);
        *self.loss.borrow_mut() = Some(Loss { at, why });
        if while_running {
            let line = format!(
                "cron_guard: lock {} was lost ({}) while its job runs; another run may start",
                self.what,
                self.loss_words().unwrap_or_default()
            );
            self.report
                .failure("lost", &line, &self.fields(Outcome::Lost));
        }
    }

    /// Whether the lock still believes it holds (no round trip for this
    /// extension's locks); a hold found gone is noted.
    fn check(&self, lock: &Zval) -> PhpResult<()> {
        if self.loss.borrow().is_some() {
            return Ok(());
        }
        let held = match lock.object().and_then(lock_classes::native) {
            Some(native) => native.held(),
            None => lock
                .try_call_method("isHeld", vec![])
                .map_err(|e| Error::Lock(format!("isHeld() failed: {e}")))?
                .bool()
                .unwrap_or(false),
        };
        if !held && !ExecutorGlobals::has_exception() {
            self.lose(lock, "isHeld() returned false", true);
        }
        Ok(())
    }

    /// `'on_lost' => 'throw'`: the LockException for a lost hold.
    fn refuse_if_lost(&self) -> PhpResult<()> {
        match (self.on_lost_throw, self.loss_words()) {
            (true, Some(words)) => Err(Error::Lock(format!(
                "lock {} was lost ({words}); another run may have started",
                self.what
            ))
            .into()),
            _ => Ok(()),
        }
    }
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

    pub fn expired(&self) -> PhpResult<bool> {
        self.run.check(&self.lock)?;
        self.run.refuse_if_lost()?;
        Ok(self.deadline.is_some_and(|d| Instant::now() >= d))
    }

    pub fn lost(&self) -> PhpResult<Option<String>> {
        self.run.check(&self.lock)?;
        Ok(self.run.loss_words())
    }

    pub fn __serialize(&self) -> PhpResult<Vec<String>> {
        Err(super::not_serializable("CronLock\\Guard"))
    }

    pub fn __unserialize(&mut self, data: &ZendHashTable) -> PhpResult<()> {
        let _ = data;
        Err(super::not_serializable("CronLock\\Guard"))
    }

    pub fn renew(&self) -> PhpResult<bool> {
        self.run.refuse_if_lost()?;
        let renewed = self
            .lock
            .try_call_method("renew", vec![])
            .map_err(|e| Error::Lock(format!("renew() failed: {e}")))?;
        if ExecutorGlobals::has_exception() {
            return Ok(false);
        }
        let renewed = renewed.bool().unwrap_or(false);
        if !renewed {
            self.run.lose(&self.lock, "renew() returned false", true);
            self.run.refuse_if_lost()?;
        }
        Ok(renewed)
    }
}

#[php_function]
pub fn cron_guard(job: Callback, lock: LockOrName, options: OptionsArray) -> PhpResult<Zval> {
    let options = Options::new(
        "$options",
        options.0,
        &[
            "wait",
            "max_runtime",
            "on_busy",
            "once_per",
            "stale_after",
            "on_stale",
            "on_lost",
            "log",
            "record",
            "record_format",
            "logger",
        ],
    )?;
    let wait = options.seconds("wait")?.unwrap_or(0.0);
    let max_runtime = positive_seconds(&options, "max_runtime")?;
    let on_busy = exit_status(&options, "on_busy")?;
    let on_stale = exit_status(&options, "on_stale")?;
    // D17: a holder past twice the job's own budget has ignored its
    // deadline; without a budget nothing says what "too long" is.
    let stale_after = positive_seconds(&options, "stale_after")?.or(max_runtime.map(|s| 2.0 * s));
    let on_lost_throw = match options.string("on_lost")?.as_deref() {
        None | Some("log") => false,
        Some("throw") => true,
        Some(other) => {
            return Err(Error::value(
                options.arg_name("on_lost"),
                format!(
                    "must be 'log' or 'throw', '{}' given",
                    crate::lock::shorten(other)
                ),
            )
            .into())
        }
    };
    let report = Report::read(&options)?;
    let wait_arg = options.arg_name("wait");
    let once_per = once_per_period(&options)?;
    let once_per_arg = options.arg_name("once_per");
    drop(options);

    let (mut lock, name) = resolve_lock(lock)?;
    let what = match &name {
        Some(name) => format!("{name} ({})", describe(&lock)),
        None => describe(&lock),
    };
    let record_name = name.unwrap_or_else(|| describe(&lock));
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
    let asked = Instant::now();
    let acquired = acquire(&mut lock, wait, &wait_arg);
    let waited = asked.elapsed();
    if once_per.is_some() {
        // Only this acquire takes a window; the hold keeps its window's end,
        // and releasing it leaves the key to expire then.
        set_once_per(&mut lock, &once_per_arg, None)?;
    }
    match acquired? {
        Acquired::Yes => {}
        Acquired::Threw => return Ok(Zval::null()),
        Acquired::No(refusal) => {
            let skip = Skip {
                what: &what,
                record_name: &record_name,
                waited,
                stale_after,
            };
            let stuck = skip.report(&lock, refusal, &report);
            let interrupted = refusal == Some(Refusal::Interrupted);
            match (stuck, on_stale, on_busy) {
                (_, _, _) if interrupted => {}
                (true, Some(code), _) | (_, _, Some(code)) => engine::exit(code),
                _ => {}
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
    let run = Rc::new(Run {
        what,
        report,
        record_name,
        on_lost_throw,
        waited,
        acquired: Instant::now(),
        loss: RefCell::new(None),
    });
    let guard = Guard {
        lock: lock.shallow_clone(),
        deadline,
        run: Rc::clone(&run),
    }
    .into_zval(false)?;
    if held_before && !shares_a_guards_hold {
        // Not ours to release (D2): the caller's hold, checked by its
        // own acquire() above.
        let result = job.0.try_call(vec![&guard]).unwrap_or_default();
        finish(
            &run,
            &lock,
            engine::pending_exception_class(),
            Released::NotLast,
        );
        return Ok(result);
    }

    let part = holds::enter(&lock);
    let caller_frame = engine::current_frame();
    let outcome = try_catch(AssertUnwindSafe(|| {
        let result = job.0.try_call(vec![&guard]);
        // An exception from the job is pending in the engine and
        // propagates unchanged; the return value is then ignored.
        let job_threw = engine::pending_exception_class();
        if part.is_last() {
            let survived = lock
                .object_mut()
                .and_then(lock_classes::native_mut)
                .and_then(|native| native.confirm_before_release());
            if survived == Some(false) {
                run.lose(&lock, "", false);
            }
        }
        finish(&run, &lock, job_threw, part.release());
        result
    }));
    let Ok(result) = outcome else {
        // A fatal error (or another bailout) in the job, in a Fiber it
        // resumed, or in the release: the script ends, after its shutdown
        // functions, which must see every lock of ours free. Released by
        // hold, not by stack position: a Fiber's cron_guard() may be
        // suspended mid-job.
        engine::restore_frame(caller_frame);
        holds::release_all_after_fatal();
        drop((guard, lock, job, wait_arg, run));
        // SAFETY: re-raises the bailout caught above, with nothing of ours
        // left on this frame that needs dropping.
        unsafe { bailout() }
    };
    Ok(result.unwrap_or_default())
}

/// The job's end: a failing release's line, a loss release() found, the
/// lost line, the record. `job_threw`: the class of the job's exception.
fn finish(run: &Run, lock: &Zval, job_threw: Option<String>, released: Released) {
    let release_failure = match released {
        Released::Failed(failure) => Some(failure),
        Released::Answered(false) => {
            run.lose(lock, "release() returned false", false);
            None
        }
        Released::NotLast | Released::Answered(true) | Released::Unanswered => None,
    };
    // The job's exception is what cron_guard() throws, so the record names
    // it; a release failure thrown after a job that returned comes next.
    let outcome = match (job_threw, &release_failure) {
        (Some(class), _) => Outcome::Failed(class),
        (None, Some(failure)) => Outcome::ReleaseFailed(failure.class.clone()),
        (None, None) if run.loss.borrow().is_some() => Outcome::Lost,
        (None, None) => Outcome::Ran,
    };
    if let Some(failure) = &release_failure {
        run.report.failure(
            "release_failed",
            &failure.line,
            &run.fields(outcome.clone()),
        );
    }
    if let Some(words) = run.loss_words() {
        let line = format!(
            "cron_guard: lock {} was lost during the run ({words}); another run may have started",
            run.what
        );
        run.report
            .failure("lost", &line, &run.fields(Outcome::Lost));
    }
    run.report.record(&run.fields(outcome));
}

/// A skipped run: its line and its record.
struct Skip<'a> {
    what: &'a str,
    record_name: &'a str,
    waited: Duration,
    stale_after: Option<f64>,
}

impl Skip<'_> {
    /// Logs the skip; true when the holder looks stuck.
    fn report(&self, lock: &Zval, refusal: Option<Refusal>, report: &Report) -> bool {
        let what = self.what;
        let waited = tenths(self.waited);
        let mut fields = RunFields {
            lock: self.record_name.to_owned(),
            outcome: Outcome::SkippedBusy,
            waited: self.waited,
            held: Duration::ZERO,
            holder: None,
        };
        match refusal {
            Some(Refusal::Interrupted) => {
                fields.outcome = Outcome::SkippedInterrupted;
                let line = format!(
                    "cron_guard: waiting for lock {what} was interrupted by a signal; waited {waited}; skipping this run"
                );
                report.note(Level::Notice, "interrupted", &line, &fields);
                report.record(&fields);
                return false;
            }
            Some(Refusal::HeldByThisThread) => {
                fields.holder = Some(format!("{}@{}", current_pid(), hostname()));
                let line = format!(
                    "cron_guard: lock {what} is held by this process (pid {}) through another \
                     lock object; skipping this run",
                    current_pid()
                );
                report.note(Level::Notice, "busy", &line, &fields);
                report.record(&fields);
                return false;
            }
            Some(Refusal::Contended | Refusal::Lost) | None => {}
        }
        let holder = lock
            .object()
            .and_then(lock_classes::native)
            .and_then(|native| native.busy_holder())
            .unwrap_or_else(|| Holder::named("another process (pid unknown)".to_owned()));
        fields.holder = holder.pid_at_host.clone();
        let now = SystemTime::now();
        let mut who = holder.who;
        let mut stuck = false;
        if let Some(since) = holder.since {
            let age = now.duration_since(since).unwrap_or_default();
            who.push_str(&format!(
                " since {} ({})",
                clock_time(since, now),
                duration_words(age)
            ));
            if let Some(limit) = self.stale_after {
                if age.as_secs_f64() > limit {
                    stuck = true;
                    who.push_str(&format!(
                        ", longer than stale_after ({}): it looks stuck",
                        limit_words(limit)
                    ));
                }
            }
        }
        if let Some(remark) = holder.remark {
            who.push(' ');
            who.push_str(&remark);
        }
        let line =
            format!("cron_guard: lock {what} is held by {who}; waited {waited}; skipping this run");
        let (level, event) = if stuck {
            (Level::Warning, "stuck")
        } else {
            (Level::Notice, "busy")
        };
        report.note(level, event, &line, &fields);
        report.record(&fields);
        stuck
    }
}

/// A number of seconds greater than 0, or absent.
fn positive_seconds(options: &Options, key: &str) -> PhpResult<Option<f64>> {
    match options.seconds(key)? {
        Some(s) if s <= 0.0 => {
            Err(Error::value(options.arg_name(key), "must be greater than 0").into())
        }
        other => Ok(other),
    }
}

/// An exit status (0 to 255), or absent.
fn exit_status(options: &Options, key: &str) -> PhpResult<Option<i32>> {
    match options.int(key)? {
        Some(code) if !(0..=255).contains(&code) => Err(Error::value(
            options.arg_name(key),
            "must be an exit status between 0 and 255",
        )
        .into()),
        other => Ok(other.map(|c| c as i32)),
    }
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

/// The registration of `cron_guard()` for `get_module`.
pub fn cron_guard_function() -> ext_php_rs::builders::FunctionBuilder<'static> {
    wrap_function!(cron_guard)
}

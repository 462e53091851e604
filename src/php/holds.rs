//! The holds `cron_guard()` took and has not released yet, in this thread,
//! one per lock object. Not a stack: with Fibers, guards are suspended and
//! resumed in any order, and a Fiber may never be resumed at all. Guards
//! that run on one lock object at the same time (nested, or in several
//! Fibers) share its hold, which the last of them to end releases.
//!
//! The traps this closes:
//! - cron_guard() never releases a hold it did not take (D2), and a shared
//!   hold is released once, by the last guard on it, whatever order they
//!   end in;
//! - a `pcntl_fork()` child inherits the guards running in its parent, and
//!   their end there (the child's `exit()`, fatal error or return) must not
//!   release the parent's hold, as a lock class of the user's own would
//!   free it for both (`lock::owner`);
//! - a failing release is thrown only when nothing else is pending (D8),
//!   and handed back for the run's report to log (a release outside one,
//!   after a fatal error, is logged to the error log); an `exit()` in it
//!   keeps unwinding;
//! - after a fatal error every hold of the thread is released, with the
//!   memory limit lifted, before shutdown functions run;
//! - no zval outlives the request: what a Fiber left suspended is let go
//!   at RSHUTDOWN without a destructor call.

use super::engine;
use super::exceptions;
use super::lock_classes::describe;
use crate::error::Error;
use crate::lock::owner::Owner;
use ext_php_rs::convert::IntoZval;
use ext_php_rs::prelude::*;
use ext_php_rs::types::{ZendObject, Zval};
use ext_php_rs::zend::{try_catch, ExecutorGlobals};
use std::cell::{Cell, RefCell};
use std::mem::ManuallyDrop;
use std::panic::AssertUnwindSafe;

/// The hold on one lock object.
struct SharedHold {
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
    taken_by: Owner,
}

thread_local! {
    // Emptied at every request's end (forget_leftovers, RSHUTDOWN): a
    // zval must not outlive the engine, and thread-locals are dropped
    // at thread exit, after it.
    static HOLDS: RefCell<Vec<SharedHold>> = const { RefCell::new(Vec::new()) };
    static NEXT_ID: Cell<u64> = const { Cell::new(1) };
}

fn identity(lock: &Zval) -> *const ZendObject {
    lock.object().map_or(std::ptr::null(), std::ptr::from_ref)
}

/// One guard's part in a hold; [`GuardPart::release`] gives it up (dropped
/// unreleased, when a Rust panic unwinds cron_guard(), it releases too).
pub struct GuardPart {
    id: u64,
}

/// Whether a `cron_guard()` that took `lock` is still running.
pub fn taken(lock: &Zval) -> bool {
    let object = identity(lock);
    HOLDS.with(|holds| holds.borrow().iter().any(|hold| hold.object == object))
}

/// Joins the hold on `lock` of the guards running on it, or starts one.
pub fn enter(lock: &Zval) -> GuardPart {
    let object = identity(lock);
    HOLDS.with(|holds| {
        let mut holds = holds.borrow_mut();
        if let Some(shared) = holds.iter_mut().find(|hold| hold.object == object) {
            shared.guards += 1;
            return GuardPart { id: shared.id };
        }
        let id = NEXT_ID.with(|next| next.replace(next.get() + 1));
        holds.push(SharedHold {
            id,
            object,
            lock: lock.shallow_clone(),
            guards: 1,
            taken_by: Owner::this_process(),
        });
        GuardPart { id }
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
        shared.taken_by.is_this_process().then_some(shared.lock)
    })
}

/// How one guard's end left the hold.
pub enum Released {
    /// Other guards on it still run (or it is not this process's).
    NotLast,
    /// release() answered: false means the hold was already gone.
    Answered(bool),
    /// release() threw or could not be called: for the run's report to
    /// log; thrown when nothing was pending (D8).
    Failed(ReleaseFailure),
    /// release() ended the script (`exit()`, out of memory) or its Fiber.
    Unanswered,
}

/// A release that failed: its "releasing lock … failed" line and the
/// class of what it threw.
pub struct ReleaseFailure {
    pub line: String,
    pub class: String,
}

impl GuardPart {
    /// Whether this guard's end releases the hold (no other guard on it
    /// still runs, and this process took it).
    pub fn is_last(&self) -> bool {
        HOLDS.with(|holds| {
            holds
                .borrow()
                .iter()
                .find(|hold| hold.id == self.id)
                .is_some_and(|hold| hold.guards == 1 && hold.taken_by.is_this_process())
        })
    }

    /// Releases the lock when this is the last guard on it. A failing
    /// release is the caller's to log (it goes through the run's
    /// report); it is also thrown when nothing else is pending (D8),
    /// while a job's exception or `exit()` keeps propagating.
    pub fn release(self) -> Released {
        let this = ManuallyDrop::new(self);
        let Some(lock) = leave(this.id) else {
            return Released::NotLast;
        };
        if ExecutorGlobals::has_exception() {
            // The job threw, called exit(), or died of memory_limit,
            // which PHP unwinds like exit(): there may be no memory
            // left to call release() with.
            engine::with_room_for_cleanup(|| {
                engine::with_exception_set_aside(|| call_release(&lock, false))
            })
        } else {
            call_release(&lock, true)
        }
    }
}

impl Drop for GuardPart {
    fn drop(&mut self) {
        if let Some(lock) = leave(self.id) {
            engine::with_exception_set_aside(|| release_unreported(&lock));
        }
    }
}

/// Calls `$lock->release()` and says how it went. On failure, when
/// `rethrow`, the failure is thrown (else only returned, for the caller
/// to log). An `exit()` in it (or PHP's out-of-memory error, or the
/// destruction of a Fiber suspended in it) is no failure: it keeps
/// unwinding, as it would from any other function.
fn call_release(lock: &Zval, rethrow: bool) -> Released {
    let called = lock.try_call_method("release", vec![]);
    if engine::exit_unwinding() {
        return Released::Unanswered;
    }
    let (message, class, thrown) = match (ExecutorGlobals::take_exception(), called) {
        (Some(thrown), _) => (
            exception_message(&thrown),
            thrown.get_class_name().unwrap_or_default(),
            Ok(thrown),
        ),
        (None, Err(e)) => {
            let e = Error::Lock(format!("release() could not be called: {e}"));
            let class = exceptions::lock_exception().name().unwrap_or_default();
            (e.to_string(), class.to_owned(), Err(e))
        }
        (None, Ok(answer)) => return Released::Answered(answer.bool().unwrap_or(false)),
    };
    // Made before the throw: no PHP code runs with an exception pending.
    let failure = ReleaseFailure {
        line: format!(
            "cron_guard: releasing lock {} failed: {message}",
            describe(lock)
        ),
        class,
    };
    if rethrow {
        match thrown {
            Ok(thrown) => {
                if let Ok(thrown) = thrown.into_zval(false) {
                    let _ = ext_php_rs::exception::throw_object(thrown);
                }
            }
            Err(e) => PhpException::from(e).throw(),
        }
    }
    Released::Failed(failure)
}

/// A release outside every run's report (a guard part dropped by a Rust
/// panic, the sweep after a fatal error): its failure goes to PHP's
/// error log.
fn release_unreported(lock: &Zval) {
    if let Released::Failed(failure) = call_release(lock, false) {
        engine::error_log(&failure.line);
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
    let mut all: Vec<SharedHold> = HOLDS.with(|holds| std::mem::take(&mut *holds.borrow_mut()));
    all.retain(|shared| shared.taken_by.is_this_process());
    let frame = engine::current_frame();
    engine::with_room_for_cleanup(|| {
        for shared in all.iter().rev() {
            engine::with_exception_set_aside(|| {
                // A fatal error in one release() leaves the others to do.
                let released = try_catch(AssertUnwindSafe(|| release_unreported(&shared.lock)));
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

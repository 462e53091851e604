//! The PHP face of cronlock: one module per PHP class. Only argument,
//! result and error conversion happens here; the locking is in `crate::lock`.

//!
//! | file | what |
//! | --- | --- |
//! | `lifecycle` | MINIT, RINIT, RSHUTDOWN: settings, exceptions, the classes' fixes, the leftover sweep |
//! | `file`, `redis`, `database` | the lock classes; each implements [`native::NativeLock`] |
//! | `pdo` | the PDO session `CronLock\Database` runs its statements on |
//! | `native` | what `cron_guard()` needs of a lock class |
//! | `lock_classes` | which lock class a PHP object is (the one list of them) |
//! | `guard` | `cron_guard()` and `CronLock\Guard` |
//! | `holds` | the holds `cron_guard()` took, shared by the guards on one object |
//! | `report` | where `cron_guard()`'s lines go (`'log'`, `'record'`, `'logger'`) |
//! | `named` | `cron_guard()`'s named and script locks |
//! | `lock_interface` | the `CronLock\Lock` interface |
//! | `args`, `options`, `arginfo` | parameters by PHP's own rules, `$options` arrays, signatures |
//! | `exceptions`, `engine`, `shim` (+ `shim.c`), `ini`, `info` | exceptions, engine calls, the C shim, `cronlock.*` settings, `php --ri` |
//!
//! This file holds only what every class shares.

pub mod arginfo;
pub mod args;
pub mod database;
pub mod engine;
pub mod exceptions;
pub mod file;
pub mod guard;
pub mod holds;
pub mod info;
pub mod ini;
pub mod lifecycle;
pub mod lock_classes;
pub mod lock_interface;
pub mod named;
pub mod native;
pub mod options;
pub mod pdo;
pub mod redis;
pub mod report;
pub mod shim;

use crate::error::Error;
use ext_php_rs::class::RegisteredClass;
use ext_php_rs::exception::PhpException;
use ext_php_rs::types::ZendClassObject;
use ext_php_rs::zend::{ce, ExecutorGlobals};
use std::cell::Cell;

thread_local! {
    /// Whether this request made a lock object, so that the shutdown sweep
    /// costs nothing in requests that never used cronlock.
    static LOCK_OBJECTS_MADE: Cell<bool> = const { Cell::new(false) };
}

pub fn note_lock_object() {
    LOCK_OBJECTS_MADE.with(|made| made.set(true));
}

/// Whether this request made a lock object; forgets it for the next one.
pub fn take_lock_objects_made() -> bool {
    LOCK_OBJECTS_MADE.with(|made| made.replace(false))
}

/// For `__construct()`: `\Error` when it is called on an object that is
/// constructed already (`$lock->__construct(...)` again), which would
/// otherwise drop the old lock, held or not, and switch to another one.
pub fn refuse_second_construct<T: RegisteredClass>() -> Result<(), PhpException> {
    let frame = ExecutorGlobals::get().current_execute_data;
    // SAFETY: during a method call the engine's current frame is that
    // call's, alive until it returns.
    let this = unsafe { frame.as_mut() }.and_then(|frame| frame.This.object());
    match this.and_then(ZendClassObject::<T>::from_zend_obj) {
        Some(_) => Err(PhpException::new(
            format!("Cannot call {}::__construct() twice", T::CLASS_NAME),
            0,
            ce::error(),
        )),
        None => Ok(()),
    }
}

/// What serializing or unserializing a lock or guard throws.
pub fn not_serializable(class: &str) -> PhpException {
    Error::Lock(format!(
        "a {class} cannot be serialized: a lock belongs to the process that holds it"
    ))
    .into()
}

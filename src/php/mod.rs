//! The PHP face of cronlock: one module per PHP class. Only argument,
//! result and error conversion happens here; the locking is in `crate::lock`.

pub mod arginfo;
pub mod args;
pub mod database;
pub mod engine;
pub mod exceptions;
pub mod file;
pub mod guard;
pub mod info;
pub mod ini;
pub mod lock_interface;
pub mod options;
pub mod redis;
pub mod shim;

use crate::error::Error;
use ext_php_rs::class::RegisteredClass;
use ext_php_rs::exception::PhpException;
use ext_php_rs::ffi::zend_object;
use ext_php_rs::types::{ZendClassObject, ZendObject};
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

/// MINIT: runs before the macro registers the interface and classes.
pub extern "C" fn startup(_type: i32, module_number: i32) -> i32 {
    ini::register(module_number);
    crate::lock::set_interrupt_check(shim::vm_interrupted);
    // Through PHP's table of handlers, which pcntl reads and writes too.
    crate::lock::signals::set_dispositions(crate::lock::signals::Dispositions {
        current: shim::signal_handler,
        set: shim::set_signal_handler,
    });
    shim::on_post_startup(fix_classes);
    match exceptions::register() {
        Ok(()) => 0,
        Err(_) => -1,
    }
}

/// RSHUTDOWN: a fatal error skips destructors, and a php-fpm worker lives on
/// into its next request, so every lock still held by an object of ours is
/// released here. Shutdown functions and destructors have already run.
pub extern "C" fn request_shutdown(_type: i32, _module_number: i32) -> i32 {
    // Userland locks too: no zval may outlive the request.
    guard::forget_leftover_holds();
    if !LOCK_OBJECTS_MADE.with(|made| made.replace(false)) {
        return 0;
    }
    shim::each_object(release_leftover);
    crate::lock::redis::holds_nothing_now();
    0
}

/// MSHUTDOWN: the Redis renewal thread must end before this module's code
/// is unloaded.
pub extern "C" fn module_shutdown(_type: i32, _module_number: i32) -> i32 {
    crate::lock::redis::shutdown();
    0
}

extern "C" fn release_leftover(object: *mut zend_object) {
    // SAFETY: each_object visits only live objects of the store, which
    // outlive RSHUTDOWN.
    release_native(unsafe { shim::object(object) });
}

/// Releases `object` if it is one of our lock classes, without calling PHP
/// code (safe while an exception or a fatal error unwinds). Returns whether
/// it was one of ours.
pub fn release_native(object: &mut ZendObject) -> bool {
    if let Some(file) = ZendClassObject::<file::File>::from_zend_obj_mut(object) {
        file.release_leftover();
    } else if let Some(redis) = ZendClassObject::<redis::Redis>::from_zend_obj_mut(object) {
        redis.release_leftover();
    } else if let Some(db) = ZendClassObject::<database::Database>::from_zend_obj_mut(object) {
        db.release_leftover();
    } else {
        return false;
    }
    true
}

/// RINIT.
pub extern "C" fn request_startup(_type: i32, _module_number: i32) -> i32 {
    fix_classes();
    0
}

/// Once, after every module's MINIT (our classes are registered at the end
/// of ours), so ZTS threads start with the fixed tables; and at the first
/// request if that hook never ran (a php-fpm pool's
/// `php_admin_value[extension]` loads us after startup).
extern "C" fn fix_classes() {
    arginfo::fix_signatures();
    allow_serialize_hooks();
    refuse_guard_construct();
}

/// ext-php-rs marks classes with a Rust object "not serializable", so that
/// PHP throws a plain `\Exception`; cronlock throws its own LockException
/// from the classes' `__serialize()` and `__unserialize()`, which PHP only
/// calls once that flag is off. `__unserialize()` runs on an object that was
/// never constructed, which ext-php-rs's method glue refuses with a plain
/// `\Exception` before our code runs, so its handler is replaced by
/// [`refuse_unserialize`], which needs no Rust object.
fn allow_serialize_hooks() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        for class in [
            file::File::get_metadata().ce(),
            redis::Redis::get_metadata().ce(),
            database::Database::get_metadata().ce(),
            guard::Guard::get_metadata().ce(),
        ] {
            let class = std::ptr::from_ref(class).cast_mut();
            // SAFETY: our own registered class entries, changed once, before
            // any script of this process has run; `__unserialize` is an
            // internal method of theirs (declared in their #[php_impl]).
            unsafe {
                (*class).ce_flags &= !ext_php_rs::flags::ClassFlags::NotSerializable.bits();
                set_handler(class, "__unserialize", refuse_unserialize);
                // The old `C:` format, which would make an unconstructed object.
                (*class).unserialize = Some(refuse_old_unserialize);
            }
        }
    });
}

type Handler =
    unsafe extern "C" fn(*mut ext_php_rs::ffi::zend_execute_data, *mut ext_php_rs::ffi::zval);

/// Makes `handler` run for the internal method `name` (lowercase) of `class`.
///
/// # Safety
///
/// `class` must be one of our registered class entries, before any script
/// has run, and `name` an internal method of it.
unsafe fn set_handler(class: *mut ext_php_rs::ffi::zend_class_entry, name: &str, handler: Handler) {
    // SAFETY: the caller's promise; the table lookup only reads `name`.
    unsafe {
        let found = ext_php_rs::ffi::zend_hash_str_find(
            &raw const (*class).function_table,
            name.as_ptr().cast(),
            name.len(),
        );
        if let Some(function) = found
            .as_ref()
            .map(|zv| zv.value.ptr.cast::<ext_php_rs::ffi::zend_function>())
        {
            (*function).internal_function.handler = Some(handler);
        }
    }
}

/// `new CronLock\Guard()`: ext-php-rs's constructor of a class without one
/// throws a plain `\Exception`; PHP's own internal classes that only the
/// engine makes throw `\Error` naming the class (HashContext: "Cannot
/// directly construct HashContext, call hash_init() instead").
fn refuse_guard_construct() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let class = std::ptr::from_ref(guard::Guard::get_metadata().ce()).cast_mut();
        // SAFETY: our own class entry, before any script has run; ext-php-rs
        // gives every class an internal `__construct`.
        unsafe { set_handler(class, "__construct", refuse_construct) };
    });
}

ext_php_rs::zend_fastcall! {
    /// `CronLock\Guard::__construct()`: cron_guard() makes guards from Rust.
    unsafe extern "C" fn refuse_construct(
        _ex: *mut ext_php_rs::ffi::zend_execute_data,
        _retval: *mut ext_php_rs::ffi::zval,
    ) {
        PhpException::new(
            "Cannot directly construct CronLock\\Guard, call cron_guard() instead".into(),
            0,
            ce::error(),
        )
        .throw();
    }
}

ext_php_rs::zend_fastcall! {
    /// `__unserialize()` of the lock classes and Guard: throws, touching nothing.
    unsafe extern "C" fn refuse_unserialize(
        ex: *mut ext_php_rs::ffi::zend_execute_data,
        _retval: *mut ext_php_rs::ffi::zval,
    ) {
        // SAFETY: the engine passes the frame of this method call.
        if unsafe { shim::parse_unserialize_args(ex) }.is_err() {
            return; // the engine's ArgumentCountError or TypeError
        }
        // SAFETY: as above; its `This` is the object being unserialized.
        let class = unsafe { ex.as_ref() }
            .and_then(|ex| ex.This.object())
            .and_then(|object| object.get_class_name().ok())
            .unwrap_or_default();
        not_serializable(&class).throw();
    }
}

/// `unserialize()` of the `C:` format of the lock classes and Guard: throws.
unsafe extern "C" fn refuse_old_unserialize(
    _object: *mut ext_php_rs::ffi::zval,
    class: *mut ext_php_rs::ffi::zend_class_entry,
    _buf: *const u8,
    _buf_len: usize,
    _data: *mut ext_php_rs::ffi::zend_unserialize_data,
) -> i32 {
    // SAFETY: the engine passes the class entry being unserialized.
    let name = unsafe { class.as_ref() }
        .and_then(|class| class.name().map(str::to_owned))
        .unwrap_or_default();
    not_serializable(&name).throw();
    -1 // FAILURE
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

//! The extension's life in the engine: MINIT (settings, exceptions, the
//! interrupt check), the fixes made to our classes once every module has
//! started, RINIT, and RSHUTDOWN's sweep of what is still held.
//!
//! The traps this closes:
//! - a fatal error skips destructors, and a php-fpm worker lives on into
//!   its next request: every lock still held by an object of ours is
//!   released at RSHUTDOWN, without calling PHP code;
//! - no zval of `cron_guard()`'s holds outlives the request;
//! - serializing a lock or a guard throws our own LockException (not
//!   ext-php-rs's plain `\Exception`), also for the old `C:` format and on
//!   an object that was never constructed;
//! - `new CronLock\Guard()` throws `\Error` naming `cron_guard()`, as PHP's
//!   own engine-made classes do;
//! - a php-fpm pool that loads us after startup still gets the fixes, at
//!   the first request.

use super::{arginfo, exceptions, guard, holds, ini, lock_classes, shim};
use ext_php_rs::class::RegisteredClass;
use ext_php_rs::exception::PhpException;
use ext_php_rs::ffi::zend_object;
use ext_php_rs::types::ZendObject;
use ext_php_rs::zend::ce;

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
    holds::forget_leftovers();
    if !super::take_lock_objects_made() {
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
/// code (safe while an exception or a fatal error unwinds).
fn release_native(object: &mut ZendObject) {
    if let Some(native) = lock_classes::native_mut(object) {
        native.release_leftover();
    }
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
        let [file, redis, database] = lock_classes::class_entries();
        for class in [file, redis, database, guard::Guard::get_metadata().ce()] {
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
        super::not_serializable(&class).throw();
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
    super::not_serializable(&name).throw();
    -1 // FAILURE
}

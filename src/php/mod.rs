//! The PHP face of cronlock: one module per PHP class. Only argument,
//! result and error conversion happens here; the locking is in `crate::lock`.

pub mod arginfo;
pub mod args;
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

use ext_php_rs::ffi::zend_object;
use ext_php_rs::types::{ZendClassObject, ZendObject};
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
    shim::on_post_startup(arginfo::fix_signatures_at_startup);
    match exceptions::register() {
        Ok(()) => 0,
        Err(_) => -1,
    }
}

/// RSHUTDOWN: a fatal error skips destructors, and a php-fpm worker lives on
/// into its next request, so every lock still held by an object of ours is
/// released here. Shutdown functions and destructors have already run.
pub extern "C" fn request_shutdown(_type: i32, _module_number: i32) -> i32 {
    if !LOCK_OBJECTS_MADE.with(|made| made.replace(false)) {
        return 0;
    }
    shim::each_object(release_leftover);
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
    } else {
        return false;
    }
    true
}

/// RINIT.
pub extern "C" fn request_startup(_type: i32, _module_number: i32) -> i32 {
    arginfo::fix_signatures();
    0
}

//! Signatures the ext-php-rs macros cannot express: the union types
//! `CronLock\Lock|string|null` and `string|array`, `array $options = []` and a class return
//! type. They are set in place once, so Reflection, IDEs and the stub test
//! see the contract's exact signatures. Argument parsing is unaffected.

use ext_php_rs::ffi::{
    zend_fetch_function_str, zend_function, zend_hash_str_find_ptr_lc, zend_internal_arg_info,
    zend_type, _ZEND_TYPE_NAME_BIT,
};
use ext_php_rs::types::ZendStr;
use ext_php_rs::zend::{ClassEntry, ExecutorGlobals};
use std::ffi::CStr;
use std::sync::Once;

const MAY_BE_NULL: u32 = 1 << 1;
const MAY_BE_STRING: u32 = 1 << 6;
const MAY_BE_ARRAY: u32 = 1 << 7;

/// Runs at the first request: the classes are only registered at the end
/// of MINIT, after our own startup code. php-fpm's
/// `php_admin_value[extension]` also calls RINIT right after loading us,
/// before the engine has function tables: then it waits for a real request.
pub fn fix_signatures() {
    static FIXED: Once = Once::new();
    if FIXED.is_completed() || ExecutorGlobals::get().function_table().is_none() {
        return;
    }
    FIXED.call_once(|| {
        let lock_or_name = class_type("CronLock\\Lock", MAY_BE_STRING | MAY_BE_NULL);
        let array = zend_type {
            ptr: std::ptr::null_mut(),
            type_mask: MAY_BE_ARRAY,
        };
        let cron_guard = function("cron_guard");
        set_arg(cron_guard, 1, lock_or_name, c"null");
        set_arg(cron_guard, 2, array, c"[]");
        set_arg(method("CronLock\\File", "__construct"), 1, array, c"[]");
        let redis_construct = method("CronLock\\Redis", "__construct");
        let string_or_array = zend_type {
            ptr: std::ptr::null_mut(),
            type_mask: MAY_BE_STRING | MAY_BE_ARRAY,
        };
        set_arg(redis_construct, 0, string_or_array, c"");
        set_arg(redis_construct, 3, array, c"[]");
        set_arg(
            method("CronLock\\Guard", "lock"),
            -1,
            class_type("CronLock\\Lock", 0),
            c"",
        );
    });
}

/// A pointer, not a copy: an internal function is allocated as a
/// `zend_internal_function`, smaller than the `zend_function` union
/// (ext-php-rs' `Function::try_from_*` copy the whole union and over-read).
fn function(name: &str) -> *mut zend_function {
    // SAFETY: a (pointer, length) pair of a live &str; the engine only reads it.
    unsafe { zend_fetch_function_str(name.as_ptr().cast(), name.len()) }
}

fn method(class: &str, name: &str) -> *mut zend_function {
    let Some(class) = ClassEntry::try_find(class) else {
        return std::ptr::null_mut();
    };
    // SAFETY: the class entry lives for the whole process; the name is a
    // (pointer, length) pair the engine lowercases into its own buffer.
    unsafe {
        zend_hash_str_find_ptr_lc(
            &raw const class.function_table,
            name.as_ptr().cast(),
            name.len(),
        )
        .cast()
    }
}

fn class_type(name: &str, extra: u32) -> zend_type {
    zend_type {
        ptr: ZendStr::new_interned(name, true).into_raw().cast(),
        type_mask: _ZEND_TYPE_NAME_BIT | extra,
    }
}

/// `index` -1 is the return type, which internal functions keep in the slot
/// before the first argument.
fn set_arg(function: *mut zend_function, index: isize, type_: zend_type, default: &'static CStr) {
    if function.is_null() {
        return;
    }
    // SAFETY: every function of this extension is an internal function; only
    // its `zend_internal_function` part is touched.
    let internal = unsafe { &(*function).internal_function };
    if internal.arg_info.is_null() || index >= internal.num_args as isize {
        return;
    }
    // SAFETY: `index` is within the argument array or is its return slot;
    // ext-php-rs leaks these tables for the life of the process.
    let info: &mut zend_internal_arg_info = unsafe { &mut *internal.arg_info.offset(index) };
    info.type_ = type_;
    if index >= 0 && !default.is_empty() {
        info.default_value = default.as_ptr();
    }
}

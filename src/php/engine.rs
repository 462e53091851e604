//! Engine calls that ext-php-rs does not wrap.

use ext_php_rs::types::{ZendCallable, Zval};
use ext_php_rs::zend::{ExecutorGlobals, ModuleEntry};
use std::ffi::{c_char, CStr};

extern "C" {
    fn zend_throw_unwind_exit();
    fn zend_exception_save();
    fn zend_exception_restore();
    #[link_name = "display_ini_entries"]
    fn php_display_ini_entries(module: *mut ModuleEntry);
    fn zend_ini_string_ex(
        name: *const c_char,
        name_length: usize,
        orig: i32,
        exists: *mut bool,
    ) -> *mut c_char;
}

/// What `exit($status)` does: the script unwinds through `finally` blocks
/// and shutdown functions, then the process exits with `status`.
pub fn exit(status: i32) {
    ExecutorGlobals::get_mut().exit_status = status;
    // SAFETY: called from inside a PHP function call, as the exit opcode does.
    unsafe { zend_throw_unwind_exit() };
}

/// Runs `f` with any pending exception (or `exit()` unwind) set aside, so
/// that PHP code can be called, then puts it back: the engine refuses to
/// call functions while an exception is pending.
pub fn with_exception_saved<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: save and restore are paired around a PHP call, as the engine
    // does around destructors.
    unsafe { zend_exception_save() };
    let result = f();
    // SAFETY: pairs the save above.
    unsafe { zend_exception_restore() };
    result
}

/// The current value of an ini setting registered by this extension.
pub fn ini_string(name: &CStr) -> Option<String> {
    let mut exists = false;
    // SAFETY: `name` is NUL-terminated and its length excludes the NUL.
    let value = unsafe { zend_ini_string_ex(name.as_ptr(), name.to_bytes().len(), 0, &mut exists) };
    if value.is_null() || !exists {
        return None;
    }
    // SAFETY: the engine returns a NUL-terminated string it keeps alive.
    Some(
        unsafe { CStr::from_ptr(value) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// One line through PHP's `error_log()`, so it goes wherever the user's
/// `error_log` ini setting sends errors.
pub fn error_log(message: &str) {
    if let Ok(error_log) = ZendCallable::try_from_name("error_log") {
        let _: Option<Zval> = error_log.try_call(vec![&message]).ok();
    }
}

/// The standard ini table of `phpinfo()`: each `cronlock.*` setting with its
/// local and master value.
pub fn display_ini_entries(module: *mut ModuleEntry) {
    // SAFETY: `module` is the entry the engine passed to our info function.
    unsafe { php_display_ini_entries(module) };
}

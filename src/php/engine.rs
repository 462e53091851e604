//! Engine calls that ext-php-rs does not wrap.

use ext_php_rs::boxed::ZBox;
use ext_php_rs::ffi::zend_execute_data;
use ext_php_rs::types::{ZendCallable, Zval};
use ext_php_rs::zend::{ExecutorGlobals, ModuleEntry, ProcessGlobals};
use std::ffi::CStr;

extern "C" {
    fn zend_throw_unwind_exit();
    fn zend_throw_exception_internal(exception: *mut ext_php_rs::types::ZendObject);
    fn zend_set_memory_limit(limit: usize) -> i32;
    fn zend_is_unwind_exit(exception: *const ext_php_rs::types::ZendObject) -> bool;
    fn zend_is_graceful_exit(exception: *const ext_php_rs::types::ZendObject) -> bool;
    fn zend_memory_usage(real_usage: bool) -> usize;
    #[link_name = "display_ini_entries"]
    fn php_display_ini_entries(module: *mut ModuleEntry);
}

/// What `exit($status)` does: the script unwinds through `finally` blocks
/// and shutdown functions, then the process exits with `status`.
/// Not with an exception pending: that one propagates instead (the engine
/// must never get an unwind exit on top of a pending exception).
pub fn exit(status: i32) {
    if ExecutorGlobals::has_exception() {
        return;
    }
    ExecutorGlobals::get_mut().exit_status = status;
    // SAFETY: called from inside a PHP function call, as the exit opcode
    // does, with no exception pending (checked above).
    unsafe { zend_throw_unwind_exit() };
}

/// The frame PHP is executing now (for [`restore_frame`]).
pub fn current_frame() -> *mut zend_execute_data {
    ExecutorGlobals::get().current_execute_data
}

/// After a bailout out of PHP code we called, the engine still points at the
/// frame where the fatal error happened; PHP code called from here on must
/// see our caller's frame as its parent instead, as after a normal return.
pub fn restore_frame(frame: *mut zend_execute_data) {
    ExecutorGlobals::get_mut().current_execute_data = frame;
}

/// Runs `f`, which calls PHP code to release a lock, with room for that
/// after the job died of `memory_limit`: the memory limit is lifted, then
/// put back to `memory_limit` as PHP's own fatal-error path does; and on
/// PHP builds that delay an out-of-memory error (they unwind the script
/// like `exit()` and refuse every function call until the request shuts
/// down, where they clear the state so that shutdown functions can run),
/// that refusal is lifted for the call and put back after it, so that the
/// unwinding goes on exactly as before.
pub fn with_room_for_cleanup<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: plain setter of the request's allocator limit.
    unsafe { zend_set_memory_limit(usize::MAX >> 1) };
    let refused = super::shim::lift_delayed_oom();
    let result = f();
    super::shim::restore_delayed_oom(refused);
    let configured = ProcessGlobals::get().memory_limit;
    let limit = usize::try_from(configured).unwrap_or(usize::MAX >> 1);
    // SAFETY: as above. Below the memory in use it fails (as PHP's own
    // restore does then); the limit is then held at what is in use.
    unsafe {
        if zend_set_memory_limit(limit) != 0 {
            zend_set_memory_limit(zend_memory_usage(true));
        }
    }
    result
}

/// Runs `f` with any pending exception (or `exit()` unwind) set aside, so
/// that PHP code can be called (the engine refuses calls while one is
/// pending), then throws it again, unchanged, as an internal function
/// throws. Not zend_exception_save(): an exception thrown while one is
/// saved takes the saved one as its `previous`, and clearing it would lose
/// the job's exception. `f` must leave no exception of its own pending.
pub fn with_exception_set_aside<R>(f: impl FnOnce() -> R) -> R {
    let pending = std::mem::replace(
        &mut ExecutorGlobals::get_mut().exception,
        std::ptr::null_mut(),
    );
    let result = f();
    if pending.is_null() {
        return result;
    }
    if exit_unwinding() {
        // `f` ran exit() (or a Fiber of it is being destroyed): that ends
        // the script as it would anywhere, over what was pending, as the
        // engine lets an exit unwind win over any exception.
        // SAFETY: `pending` is the engine's exception object we took above,
        // with the reference the engine held, which this box now drops.
        drop(unsafe { ZBox::from_raw(pending) });
    } else {
        // SAFETY: as above; throwing hands the reference back.
        unsafe { zend_throw_exception_internal(pending) };
    }
    result
}

/// Whether what is pending is no exception but the script ending (`exit()`,
/// or an out-of-memory error on PHP builds that unwind it like `exit()`)
/// or a Fiber that PHP destroys while it is suspended. Such an unwind is
/// never caught, logged or replaced; its object has no methods to call.
pub fn exit_unwinding() -> bool {
    let pending = ExecutorGlobals::get().exception;
    // SAFETY: the engine's pending exception, live while it is pending;
    // both functions only compare its class entry.
    !pending.is_null() && unsafe { zend_is_unwind_exit(pending) || zend_is_graceful_exit(pending) }
}

/// Drops a pending [`exit_unwinding`] unwind while a fatal error is being
/// handled: the exit status `exit()` set stays, and the fatal error's own
/// bailout goes on to shutdown (which does not run with one pending).
pub fn discard_exit_unwinding() {
    if exit_unwinding() {
        drop(ExecutorGlobals::take_exception());
    }
}

/// The current value of an ini setting registered by this extension, as
/// the bytes it holds (a directory name need not be UTF-8; a NUL byte is
/// kept, for the caller to refuse).
pub fn ini_string(name: &CStr) -> Option<std::ffi::OsString> {
    use std::os::unix::ffi::OsStringExt;
    super::shim::ini_value(name).map(std::ffi::OsString::from_vec)
}

/// `ini_set($name, $value)`: the previous value, `None` when PHP has no
/// such setting (its extension is not loaded) or refused the value.
pub fn ini_set_for_now(name: &str, value: &str) -> Option<String> {
    let ini_set = ZendCallable::try_from_name("ini_set").ok()?;
    let previous = ini_set.try_call(vec![&name, &value]).ok()?;
    previous.string()
}

/// One line through PHP's `error_log()`, so it goes wherever the user's
/// `error_log` ini setting sends errors. Control characters (and Unicode
/// line breaks) are escaped: the names, paths, holders and messages in it
/// come from users or servers, and must not start a line of their own.
pub fn error_log(message: &str) {
    let line = crate::lock::one_line(message);
    if let Ok(error_log) = ZendCallable::try_from_name("error_log") {
        let _: Option<Zval> = error_log.try_call(vec![&line]).ok();
    }
}

/// The standard ini table of `phpinfo()`: each `cronlock.*` setting with its
/// local and master value.
pub fn display_ini_entries(module: *mut ModuleEntry) {
    // SAFETY: `module` is the entry the engine passed to our info function.
    unsafe { php_display_ini_entries(module) };
}

/// The class of the exception pending in the engine, `None` when there is
/// none or it is an `exit()` unwind (see [`exit_unwinding`]).
pub fn pending_exception_class() -> Option<String> {
    if exit_unwinding() {
        return None;
    }
    let pending = ExecutorGlobals::get().exception;
    // SAFETY: the engine's pending exception, live while it is pending.
    let object = unsafe { pending.as_ref() }?;
    object.get_class_name().ok()
}

/// Whether an exception (or `exit()` unwind) is pending: what
/// `ExecutorGlobals::has_exception()` says, without the lock ext-php-rs takes
/// around every read of the globals (a lock cycle of CronLock\Database asks
/// a dozen times).
pub fn exception_pending() -> bool {
    // SAFETY: this thread's executor globals, valid for the whole request;
    // one pointer read.
    unsafe {
        !(*ext_php_rs::ffi::ext_php_rs_executor_globals())
            .exception
            .is_null()
    }
}

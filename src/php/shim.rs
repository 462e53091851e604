//! The Rust side of src/php/shim.c, the engine internals that are C macros
//! or layouts that change between PHP releases (built by build.rs against the
//! target PHP's headers). Only safe wrappers leave this module.

use ext_php_rs::ffi::{zend_execute_data, zend_function, zend_object, zend_string};
use ext_php_rs::types::{ZendObject, Zval};
use std::ffi::{c_char, c_int, CStr, CString, OsString};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

extern "C" {
    fn cronlock_php_version() -> *const c_char;
    fn cronlock_php_api() -> u32;
    fn cronlock_php_zts() -> bool;
    fn cronlock_vm_interrupted() -> bool;
    fn cronlock_vm_interrupt_flag() -> *const std::sync::atomic::AtomicBool;
    fn cronlock_each_object(visit: extern "C" fn(*mut zend_object));
    fn cronlock_on_post_startup(run: extern "C" fn());
    fn cronlock_function(name: *const c_char) -> *mut zend_function;
    fn cronlock_method(class: *const c_char, method: *const c_char) -> *mut zend_function;
    fn cronlock_arg_set_class(
        function: *mut zend_function,
        index: i32,
        class: *const c_char,
        or_string: bool,
        or_null: bool,
        default: *const c_char,
    ) -> bool;
    fn cronlock_arg_set_builtin(
        function: *mut zend_function,
        index: i32,
        is_float: bool,
        is_string: bool,
        is_array: bool,
        or_null: bool,
        default: *const c_char,
    ) -> bool;
    #[cfg(php82)]
    fn cronlock_mark_sensitive(function: *mut zend_function, index: u32) -> bool;
    fn cronlock_parse_double(
        arg: *mut Zval,
        dest: *mut f64,
        is_null: *mut bool,
        allow_null: bool,
    ) -> bool;
    fn cronlock_parse_str(arg: *mut Zval, dest: *mut *mut zend_string, allow_null: bool) -> bool;
    fn cronlock_parse_array(arg: *mut Zval) -> bool;
    fn cronlock_parse_array_or_str(arg: *mut Zval, string: *mut *mut zend_string) -> i32;
    fn cronlock_parse_class_or_str(
        arg: *mut Zval,
        class: *const c_char,
        allow_null: bool,
        string: *mut *mut zend_string,
    ) -> i32;
    fn cronlock_parse_unserialize_args(frame: *mut zend_execute_data) -> bool;
    fn cronlock_parse_callable(arg: *mut Zval) -> bool;
    fn cronlock_php_cwd(buf: *mut c_char, len: usize) -> bool;
    fn cronlock_ini_value(name: *const c_char, name_len: usize, len: *mut usize) -> *const c_char;
    fn cronlock_lift_delayed_oom() -> i32;
    fn cronlock_restore_delayed_oom(state: i32);
    fn cronlock_warning(message: *const c_char);
    fn cronlock_signal_handler(signo: c_int) -> usize;
    fn cronlock_signal_set(signo: c_int, handler: usize);
}

/// The PHP this build was compiled against: version, API number, ZTS.
pub fn built_for() -> (String, u32, bool) {
    // SAFETY: returns a pointer to the headers' PHP_VERSION literal.
    let version = unsafe { CStr::from_ptr(cronlock_php_version()) };
    // SAFETY: plain constant getters.
    let (api, zts) = unsafe { (cronlock_php_api(), cronlock_php_zts()) };
    (version.to_string_lossy().into_owned(), api, zts)
}

/// The handler PHP runs for `signo` (its own table with zend signals,
/// where pcntl writes too): an address, `SIG_DFL` (0) or `SIG_IGN` (1).
pub fn signal_handler(signo: c_int) -> usize {
    // SAFETY: reads one entry of PHP's signal table (or sigaction(2)).
    unsafe { cronlock_signal_handler(signo) }
}

/// Makes `handler` (an `SA_SIGINFO` handler, or `SIG_DFL`) the disposition
/// of `signo` through PHP, as `pcntl_signal()` does.
pub fn set_signal_handler(signo: c_int, handler: usize) {
    // SAFETY: `handler` is SIG_DFL or an async-signal-safe extern "C"
    // handler of the SA_SIGINFO shape (lock::signals).
    unsafe { cronlock_signal_set(signo, handler) }
}

/// Whether the engine has work waiting at its next opcode: a `pcntl` signal
/// handler (with `pcntl_async_signals(true)`) or `max_execution_time`.
/// Always false on a thread PHP did not start.
pub fn vm_interrupted() -> bool {
    // SAFETY: reads the current thread's executor globals; the shim answers
    // false on a thread that has none (ZTS).
    unsafe { cronlock_vm_interrupted() }
}

/// The engine's interrupt flag of this thread, for a watchdog thread to
/// read while this one blocks; `None` on a thread PHP did not start.
pub fn vm_interrupt_flag() -> Option<crate::lock::database::InterruptFlag> {
    // SAFETY: the address of a field of this thread's executor globals.
    let flag = unsafe { cronlock_vm_interrupt_flag() };
    // SAFETY: the executor globals live as long as this PHP thread, and
    // the flag is one byte the engine writes whole (the shim asserts its
    // size); a watch is disarmed before the statement it guards returns.
    (!flag.is_null()).then(|| unsafe { crate::lock::database::InterruptFlag::new(flag) })
}

/// Calls `visit` with every live object of this request (RSHUTDOWN).
/// Lifts a delayed out-of-memory error's refusal of function calls (on
/// builds that have one); returns what [`restore_delayed_oom`] puts back.
pub fn lift_delayed_oom() -> i32 {
    // SAFETY: reads and writes one field of this thread's executor globals.
    unsafe { cronlock_lift_delayed_oom() }
}

pub fn restore_delayed_oom(state: i32) {
    // SAFETY: as above, with the value lift_delayed_oom() returned.
    unsafe { cronlock_restore_delayed_oom(state) }
}

/// An `E_WARNING` with exactly `message` (a NUL byte in it is shown as `\0`).
pub fn warning(message: &str) {
    let message = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    // SAFETY: `message` is NUL-terminated and outlives the call; the shim
    // passes it as a "%s" argument, never as the format.
    unsafe { cronlock_warning(message.as_ptr()) }
}

pub fn each_object(visit: extern "C" fn(*mut zend_object)) {
    // SAFETY: walks the current request's object store, skipping free slots.
    unsafe { cronlock_each_object(visit) }
}

/// Runs `run` once after every module's MINIT (MINIT only).
pub fn on_post_startup(run: extern "C" fn()) {
    // SAFETY: chains the engine's post-startup callback; called in MINIT,
    // which is single-threaded.
    unsafe { cronlock_on_post_startup(run) }
}

/// An internal function of the engine's tables, not a copy of it.
#[derive(Clone, Copy)]
pub struct Function(*mut zend_function);

impl Function {
    pub fn named(name: &str) -> Function {
        let name = CString::new(name).expect("a function name has no NUL");
        // SAFETY: a NUL-terminated name; the table lookup only reads it.
        Function(unsafe { cronlock_function(name.as_ptr()) })
    }

    pub fn method(class: &str, method: &str) -> Function {
        let class = CString::new(class).expect("a class name has no NUL");
        let method = CString::new(method).expect("a method name has no NUL");
        // SAFETY: NUL-terminated names; the table lookups only read them.
        Function(unsafe { cronlock_method(class.as_ptr(), method.as_ptr()) })
    }
}

/// A parameter type that the ext-php-rs macros cannot express.
pub enum ArgType {
    /// `Class`, `Class|string|null` and the like.
    Class {
        name: &'static CStr,
        or_string: bool,
        or_null: bool,
    },
    Float {
        or_null: bool,
    },
    Array,
    StringOrArray,
}

/// Sets the type (and default, given as PHP source) of argument `index`
/// (0-based; -1: the return type). `false` when there is no such argument.
pub fn set_arg(function: Function, index: i32, type_: ArgType, default: &'static CStr) -> bool {
    let default = default.as_ptr();
    // SAFETY: the function (or null, refused in C) comes from the engine's
    // tables; the strings are 'static; only its arginfo slot is written,
    // before any script can read it.
    unsafe {
        match type_ {
            ArgType::Class {
                name,
                or_string,
                or_null,
            } => cronlock_arg_set_class(
                function.0,
                index,
                name.as_ptr(),
                or_string,
                or_null,
                default,
            ),
            ArgType::Float { or_null } => {
                cronlock_arg_set_builtin(function.0, index, true, false, false, or_null, default)
            }
            ArgType::Array => {
                cronlock_arg_set_builtin(function.0, index, false, false, true, false, default)
            }
            ArgType::StringOrArray => {
                cronlock_arg_set_builtin(function.0, index, false, true, true, false, default)
            }
        }
    }
}

/// `#[\SensitiveParameter]` on argument `index` (0-based) where PHP has it
/// (8.2+): stack traces then never show the value.
pub fn mark_sensitive(function: Function, index: u32) -> bool {
    #[cfg(php82)]
    {
        // SAFETY: as for set_arg; adds a persistent attribute to the function.
        unsafe { cronlock_mark_sensitive(function.0, index) }
    }
    #[cfg(not(php82))]
    {
        let _ = (function, index);
        false
    }
}

/// Parses a `float` (`?float` with `allow_null`) argument as the engine does
/// for internal functions. `Err(())`: the engine's TypeError (or an exception
/// from an error handler) is pending.
pub fn parse_float(arg: &mut Zval, allow_null: bool) -> Result<Option<f64>, ()> {
    let mut value = 0.0;
    let mut is_null = false;
    // SAFETY: `arg` is an argument zval of the current internal call.
    if unsafe { cronlock_parse_double(arg, &mut value, &mut is_null, allow_null) } {
        Ok((!is_null).then_some(value))
    } else {
        Err(())
    }
}

/// Parses a `string` (`?string`) argument as the engine does; the bytes as
/// given (not necessarily UTF-8).
pub fn parse_string(arg: &mut Zval, allow_null: bool) -> Result<Option<Vec<u8>>, ()> {
    let mut string: *mut zend_string = std::ptr::null_mut();
    // SAFETY: `arg` is an argument zval of the current internal call; on
    // success `string` is null or borrowed from it (coerced in place).
    if !unsafe { cronlock_parse_str(arg, &mut string, allow_null) } {
        return Err(());
    }
    if string.is_null() {
        return Ok(None);
    }
    // SAFETY: a live zend_string owned by the argument zval.
    Ok(Some(unsafe { zend_string_bytes(string) }.to_vec()))
}

/// Checks a `callable` argument as the engine does. `Err(())`: the engine's
/// TypeError is pending.
pub fn parse_callable(arg: &mut Zval) -> Result<(), ()> {
    // SAFETY: `arg` is an argument zval of the current internal call.
    if unsafe { cronlock_parse_callable(arg) } {
        Ok(())
    } else {
        Err(())
    }
}

/// The current value of an ini setting, every byte of it (a NUL inside
/// included); `None` when there is no such setting or it has no value.
pub fn ini_value(name: &CStr) -> Option<Vec<u8>> {
    let mut len = 0;
    // SAFETY: `name` is valid for its length; the lookup only reads it.
    let value = unsafe { cronlock_ini_value(name.as_ptr(), name.to_bytes().len(), &mut len) };
    if value.is_null() {
        return None;
    }
    // SAFETY: the engine's value string, `len` bytes, alive while the setting
    // keeps this value (we copy at once).
    Some(unsafe { std::slice::from_raw_parts(value.cast::<u8>(), len) }.to_vec())
}

/// `path` made absolute against PHP's current working directory, which
/// under ZTS is not the process's (chdir() moves a per-thread virtual cwd).
/// Unchanged when it is absolute or empty (refused later, as such) or PHP's
/// cwd is unknown.
pub fn absolute(path: &Path) -> PathBuf {
    if path.is_absolute() || path.as_os_str().is_empty() {
        return path.to_owned();
    }
    let mut buf = vec![0u8; 4096];
    // SAFETY: `buf` is a writable buffer of the length passed.
    if !unsafe { cronlock_php_cwd(buf.as_mut_ptr().cast(), buf.len()) } {
        return path.to_owned();
    }
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    buf.truncate(len);
    PathBuf::from(OsString::from_vec(buf)).join(path)
}

/// Checks an `array` argument as the engine does (null is a TypeError in
/// both modes). `Err(())`: the engine's TypeError is pending.
pub fn parse_array(arg: &mut Zval) -> Result<(), ()> {
    // SAFETY: `arg` is an argument zval of the current internal call.
    if unsafe { cronlock_parse_array(arg) } {
        Ok(())
    } else {
        Err(())
    }
}

/// Parses an `array|string` argument as the engine does: `Some` with the
/// string's bytes (coerced in place in weak mode), `None` for an array.
pub fn parse_array_or_string(arg: &mut Zval) -> Result<Option<Vec<u8>>, ()> {
    let mut string: *mut zend_string = std::ptr::null_mut();
    // SAFETY: `arg` is an argument zval of the current internal call.
    match unsafe { cronlock_parse_array_or_str(arg, &mut string) } {
        2 => Ok(None),
        // SAFETY: a live zend_string owned by the argument zval.
        1 => Ok(Some(unsafe { zend_string_bytes(string) }.to_vec())),
        _ => Err(()),
    }
}

/// What a `Class|string(|null)` argument turned out to be.
pub enum ClassOrString {
    /// An instance of the class: the zval itself is it.
    Object,
    String(Vec<u8>),
    Null,
}

/// Parses a `Class|string` (`Class|string|null` with `allow_null`) argument
/// as the engine does; the string coerced in place in weak mode.
pub fn parse_class_or_string(
    arg: &mut Zval,
    class: &CStr,
    allow_null: bool,
) -> Result<ClassOrString, ()> {
    let mut string: *mut zend_string = std::ptr::null_mut();
    // SAFETY: `arg` is an argument zval of the current internal call;
    // `class` is NUL-terminated.
    match unsafe { cronlock_parse_class_or_str(arg, class.as_ptr(), allow_null, &mut string) } {
        3 => Ok(ClassOrString::Object),
        4 => Ok(ClassOrString::Null),
        // SAFETY: a live zend_string owned by the argument zval.
        1 => Ok(ClassOrString::String(
            unsafe { zend_string_bytes(string) }.to_vec(),
        )),
        _ => Err(()),
    }
}

/// Checks the arguments of an `__unserialize(array $data)` call as its
/// parameter parsing would. `Err(())`: the engine's error is pending.
///
/// # Safety
///
/// `frame` must be the frame of that call.
pub unsafe fn parse_unserialize_args(frame: *mut zend_execute_data) -> Result<(), ()> {
    // SAFETY: the caller's promise.
    if unsafe { cronlock_parse_unserialize_args(frame) } {
        Ok(())
    } else {
        Err(())
    }
}

/// # Safety
///
/// `string` must be a live zend_string that outlives the borrow.
unsafe fn zend_string_bytes<'a>(string: *const zend_string) -> &'a [u8] {
    // SAFETY: a zend_string's `len` bytes follow its header in `val`.
    unsafe { std::slice::from_raw_parts((*string).val.as_ptr().cast::<u8>(), (*string).len) }
}

/// For `each_object`'s visitors.
///
/// # Safety
///
/// `object` must be a live object of the store.
pub unsafe fn object<'a>(object: *mut zend_object) -> &'a mut ZendObject {
    // SAFETY: the caller's promise.
    unsafe { &mut *object }
}

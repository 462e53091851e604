//! `cronlock.*` ini settings.

use ext_php_rs::ffi::{zend_ini_entry, zend_string};
use ext_php_rs::flags::IniEntryPermission;
use ext_php_rs::zend::{IniEntryDef, IniEntryDefs};
use std::ffi::{c_int, c_void, CStr};

pub const LOCK_DIR: &CStr = c"cronlock.lock_dir";
/// Where cron_guard()'s skips and records go (see `report.rs`).
pub const LOG: &CStr = c"cronlock.log";
/// `off` | `skips` | `runs`.
pub const RECORD: &CStr = c"cronlock.record";
/// `text` | `json`.
pub const RECORD_FORMAT: &CStr = c"cronlock.record_format";

static ENTRIES: IniEntryDefs<5> = IniEntryDefs::new([
    // Empty: /run/lock when writable, else the system temp directory.
    read_when_used(LOCK_DIR, c""),
    read_when_used(LOG, c"syslog"),
    read_when_used(RECORD, c"off"),
    read_when_used(RECORD_FORMAT, c"text"),
    IniEntryDef::end(),
]);

/// A setting that cronlock reads each time it is used (never cached), so
/// every value is accepted. It still needs a modify handler: without one,
/// PHP's `ini_restore()` refuses to restore the setting at run time
/// (`zend_restore_ini_entry_cb` treats a missing handler as a failure),
/// while `ini_set()` and the end of the request work.
const fn read_when_used(name: &'static CStr, default: &'static CStr) -> IniEntryDef {
    let mut entry = IniEntryDef::new(name, default, IniEntryPermission::All);
    entry.on_modify = Some(accept_any_value);
    entry
}

unsafe extern "C" fn accept_any_value(
    _entry: *mut zend_ini_entry,
    _new_value: *mut zend_string,
    _mh_arg1: *mut c_void,
    _mh_arg2: *mut c_void,
    _mh_arg3: *mut c_void,
    _stage: c_int,
) -> c_int {
    // SUCCESS: the engine stores the new value itself.
    0
}

pub fn register(module_number: i32) {
    IniEntryDef::register(ENTRIES.as_slice(), module_number);
}

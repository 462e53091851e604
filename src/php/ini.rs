//! `cronlock.*` ini settings.

use ext_php_rs::flags::IniEntryPermission;
use ext_php_rs::zend::{IniEntryDef, IniEntryDefs};

pub const LOCK_DIR: &std::ffi::CStr = c"cronlock.lock_dir";

static ENTRIES: IniEntryDefs<2> = IniEntryDefs::new([
    // Empty: /run/lock when writable, else the system temp directory.
    IniEntryDef::new(LOCK_DIR, c"", IniEntryPermission::All),
    IniEntryDef::end(),
]);

pub fn register(module_number: i32) {
    IniEntryDef::register(ENTRIES.as_slice(), module_number);
}

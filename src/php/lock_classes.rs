//! Which lock class of this extension a PHP object is: the one place that
//! lists them. A new class implements [`NativeLock`] and gets one line in
//! each function below.
//!
//! The traps this closes:
//! - a userland `CronLock\Lock` is never mistaken for a native one: it gets
//!   `None`, and its methods are called through PHP;
//! - in a message, an anonymous class's name is shown up to its NUL, as PHP
//!   shows it.

use super::database::Database;
use super::file::File;
use super::native::NativeLock;
use super::redis::Redis;
use ext_php_rs::class::RegisteredClass;
use ext_php_rs::types::{ZendClassObject, ZendObject, Zval};
use ext_php_rs::zend::ClassEntry;

/// The lock classes whose [`NativeLock::set_once_per`] works (for
/// `'once_per'`'s refusal of any other lock).
pub const WITH_TTL: &str = "CronLock\\Redis";

/// `object` as a lock of this extension.
pub fn native(object: &ZendObject) -> Option<&dyn NativeLock> {
    if let Some(file) = ZendClassObject::<File>::from_zend_obj(object) {
        return Some(&**file);
    }
    if let Some(redis) = ZendClassObject::<Redis>::from_zend_obj(object) {
        return Some(&**redis);
    }
    if let Some(db) = ZendClassObject::<Database>::from_zend_obj(object) {
        return Some(&**db);
    }
    None
}

/// [`native`], to change.
pub fn native_mut(object: &mut ZendObject) -> Option<&mut dyn NativeLock> {
    if ZendClassObject::<File>::from_zend_obj(object).is_some() {
        return ZendClassObject::<File>::from_zend_obj_mut(object)
            .map(|file| &mut **file as &mut dyn NativeLock);
    }
    if ZendClassObject::<Redis>::from_zend_obj(object).is_some() {
        return ZendClassObject::<Redis>::from_zend_obj_mut(object)
            .map(|redis| &mut **redis as &mut dyn NativeLock);
    }
    ZendClassObject::<Database>::from_zend_obj_mut(object)
        .map(|db| &mut **db as &mut dyn NativeLock)
}

/// The class entries of the lock classes (for the fixes made at startup).
pub fn class_entries() -> [&'static ClassEntry; 3] {
    [
        File::get_metadata().ce(),
        Redis::get_metadata().ce(),
        Database::get_metadata().ce(),
    ]
}

/// The class of a lock object, as messages name it.
pub fn class_name(lock: &Zval) -> String {
    let mut class = lock
        .object()
        .and_then(|o| o.get_class_name().ok())
        .unwrap_or_default();
    // An anonymous class's name goes on after a NUL, as PHP shows it.
    class.truncate(class.find('\0').unwrap_or(class.len()));
    class
}

/// How log lines name a lock: the path, the Redis key, the name and
/// server, or the class of a userland lock (the whole line is escaped when
/// it is logged).
pub fn describe(lock: &Zval) -> String {
    let object = lock.object();
    match object.and_then(native) {
        Some(native) => native.describe(),
        None => object
            .and_then(|o| o.get_class_name().ok())
            .unwrap_or_default(),
    }
}

//! `CronLock\LockException` and `CronLock\ConnectionException`.
//!
//! Built with `ClassBuilder` extending `RuntimeException` so that PHP code
//! can construct, extend and catch them like any other exception.

use crate::error::Error;
use ext_php_rs::builders::ClassBuilder;
use ext_php_rs::zend::ClassEntry;
use std::sync::atomic::{AtomicPtr, Ordering};

static LOCK_EXCEPTION: AtomicPtr<ClassEntry> = AtomicPtr::new(std::ptr::null_mut());
static CONNECTION_EXCEPTION: AtomicPtr<ClassEntry> = AtomicPtr::new(std::ptr::null_mut());

extern "C" {
    static spl_ce_RuntimeException: *mut ClassEntry;
}

fn runtime_exception() -> &'static ClassEntry {
    // SAFETY: SPL is part of every PHP 8 build and registers the class in
    // its MINIT, which runs before any extension's.
    unsafe { spl_ce_RuntimeException.as_ref() }.expect("SPL registers RuntimeException first")
}

fn get(slot: &AtomicPtr<ClassEntry>) -> &'static ClassEntry {
    // SAFETY: set once in MINIT to a class entry the engine keeps for the
    // life of the process; read only during requests.
    unsafe { slot.load(Ordering::Acquire).as_ref() }.expect("registered in MINIT")
}

pub fn lock_exception() -> &'static ClassEntry {
    get(&LOCK_EXCEPTION)
}

pub fn connection_exception() -> &'static ClassEntry {
    get(&CONNECTION_EXCEPTION)
}

pub fn register() -> ext_php_rs::error::Result<()> {
    ClassBuilder::new("CronLock\\LockException")
        .extends((runtime_exception, "RuntimeException"))
        .registration(|ce, _| LOCK_EXCEPTION.store(ce, Ordering::Release))
        .register()?;
    ClassBuilder::new("CronLock\\ConnectionException")
        .extends((lock_exception, "CronLock\\LockException"))
        .registration(|ce, _| CONNECTION_EXCEPTION.store(ce, Ordering::Release))
        .register()
}

/// Which PHP exception each [`Error`] becomes.
impl From<Error> for ext_php_rs::exception::PhpException {
    fn from(err: Error) -> Self {
        use ext_php_rs::zend::ce;
        let class = match err {
            Error::InvalidValue { .. } => ce::value_error(),
            Error::InvalidType { .. } => ce::type_error(),
            Error::Lock(_) => lock_exception(),
            Error::Connection(_) => connection_exception(),
        };
        Self::new(err.to_string(), 0, class)
    }
}

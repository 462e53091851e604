//! cronlock: stops cron jobs (and any PHP CLI job) from running twice at once.
//!
//! The lock logic lives in [`lock`] as plain Rust; `php` only converts
//! arguments, results and errors for PHP.

pub mod error;
pub mod lock;
mod php;

use ext_php_rs::prelude::*;
use php::lifecycle::{self, startup};

#[php_module]
#[php(startup = "startup")]
pub fn get_module(module: ModuleBuilder) -> ModuleBuilder {
    module
        .interface::<php::lock_interface::PhpInterfaceLock>()
        .class::<php::file::File>()
        .class::<php::redis::Redis>()
        .class::<php::database::Database>()
        .class::<php::guard::Guard>()
        .function(php::guard::cron_guard_function())
        .request_startup_function(lifecycle::request_startup)
        .request_shutdown_function(lifecycle::request_shutdown)
        .shutdown_function(lifecycle::module_shutdown)
        .info_function(php::info::module_info)
}

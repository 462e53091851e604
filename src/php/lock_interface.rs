//! `CronLock\Lock`: what `cron_guard()` and `Guard` need of a lock. PHP
//! classes can implement it too.

use ext_php_rs::prelude::*;

#[allow(dead_code)] // only read by the macro, which builds the PHP interface from it
#[php_interface]
#[php(name = "CronLock\\Lock")]
pub trait Lock {
    #[php(defaults(timeout = 0.0))]
    fn acquire(&mut self, timeout: f64) -> PhpResult<bool>;

    #[php(defaults(ttl = None))]
    fn renew(&mut self, ttl: Option<f64>) -> PhpResult<bool>;

    fn release(&mut self) -> PhpResult<bool>;

    fn is_held(&self) -> bool;
}

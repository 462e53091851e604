//! `php --ri cronlock`.

use super::engine;
use super::ini;
use ext_php_rs::zend::ModuleEntry;
use ext_php_rs::{info_table_end, info_table_row, info_table_start};

pub extern "C" fn module_info(module: *mut ModuleEntry) {
    info_table_start!();
    info_table_row!("cronlock support", "enabled");
    info_table_row!("version", env!("CARGO_PKG_VERSION"));
    let (php_version, php_api, zts) = super::shim::built_for();
    info_table_row!(
        "built for",
        format!(
            "PHP {php_version}, PHP API {php_api}, {}",
            if zts { "ZTS" } else { "NTS" }
        )
        .as_str()
    );
    info_table_row!("file locks", "flock(2)");
    info_table_row!("redis locks", "enabled");
    info_table_row!(
        "redis TLS (rediss://)",
        if crate::lock::redis::tls_supported() {
            "enabled (rustls)"
        } else {
            "disabled"
        }
    );
    let lock_dir =
        crate::lock::dirs::setting(engine::ini_string(ini::LOCK_DIR).unwrap_or_default());
    // cron_guard() throws the refusal it names with a named or script lock
    let effective = crate::lock::dirs::named_lock_dir_summary(&lock_dir);
    info_table_row!("named locks directory", effective.as_str());
    info_table_end!();
    engine::display_ini_entries(module);
}

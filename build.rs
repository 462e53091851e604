//! Compiles the C shim (src/php/shim.c) against the target PHP's headers and
//! tells the Rust side which PHP it is built for.
//!
//! The target PHP is the `php-config` named by `$PHP_CONFIG`, else the one on
//! `PATH`, as ext-php-rs does for its bindings. ext-php-rs reads the version
//! and thread safety from `$PHP` (else `php` on `PATH`): both must name the
//! same PHP, which is checked here, so that the bindings, the shim and the
//! cfgs below never describe three different engines.
//!
//! cfgs: `php82`, `php83`, `php84`, `php85` mean "this PHP or later";
//! `php_zts` a thread-safe build.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const SHIM: &str = "src/php/shim.c";

fn main() {
    println!("cargo::rerun-if-changed={SHIM}");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=PHP_CONFIG");
    println!("cargo::rerun-if-env-changed=PHP");
    println!("cargo::rerun-if-env-changed=PATH");
    println!("cargo::rustc-check-cfg=cfg(php82, php83, php84, php85, php_zts)");

    let php_config = env::var_os("PHP_CONFIG")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("php-config"));
    let vernum: u32 = php_config_output(&php_config, "--vernum")
        .trim()
        .parse()
        .unwrap_or_else(|_| {
            fail(&format!(
                "{} --vernum is not a number",
                php_config.display()
            ))
        });
    let includes = php_config_output(&php_config, "--includes");
    let php = env::var_os("PHP")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("php"));
    check_same_php(&php, &php_config, vernum);

    for (cfg, min) in [
        ("php82", 80200),
        ("php83", 80300),
        ("php84", 80400),
        ("php85", 80500),
    ] {
        if vernum >= min {
            println!("cargo::rustc-cfg={cfg}");
        }
    }
    if php_is_zts(&php) {
        println!("cargo::rustc-cfg=php_zts");
    }

    let mut shim = cc::Build::new();
    shim.file(SHIM).warnings(true).extra_warnings(false);
    for dir in includes.split_whitespace() {
        shim.include(dir.trim_start_matches("-I"));
    }
    shim.compile("cronlock_shim");

    // A PHP extension leaves the engine's symbols to the php binary that
    // loads it; macOS's linker refuses undefined symbols unless told so.
    if env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("macos") {
        println!("cargo::rustc-cdylib-link-arg=-undefined");
        println!("cargo::rustc-cdylib-link-arg=dynamic_lookup");
    }
}

fn php_config_output(php_config: &Path, arg: &str) -> String {
    let output = Command::new(php_config)
        .arg(arg)
        .output()
        .unwrap_or_else(|e| {
            fail(&format!(
                "cannot run {} {arg}: {e}; install PHP's development files (php-dev) \
                 or set PHP_CONFIG to the php-config of the PHP to build for",
                php_config.display()
            ))
        });
    if !output.status.success() {
        fail(&format!("{} {arg} failed", php_config.display()));
    }
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn php_eval(php: &Path, code: &str) -> String {
    let output = Command::new(php)
        .args(["-n", "-r", code])
        .output()
        .unwrap_or_else(|e| {
            fail(&format!(
                "cannot run {}: {e}; set PHP to the php binary of the PHP to build for",
                php.display()
            ))
        });
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn check_same_php(php: &Path, php_config: &Path, vernum: u32) {
    let php_vernum = php_eval(php, "echo PHP_VERSION_ID;");
    if php_vernum.trim() != vernum.to_string() {
        fail(&format!(
            "{} is PHP {} but {} is PHP {vernum}; set PHP and PHP_CONFIG to the same PHP \
             (PHP=\"$(php-config --php-binary)\")",
            php.display(),
            php_vernum.trim(),
            php_config.display(),
        ));
    }
}

fn php_is_zts(php: &Path) -> bool {
    php_eval(php, "echo PHP_ZTS;").trim() == "1"
}

fn fail(message: &str) -> ! {
    eprintln!("cronlock build: {message}");
    std::process::exit(1);
}

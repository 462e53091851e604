//! Signatures the ext-php-rs macros cannot express: the union types
//! `CronLock\Lock|string|null`, `string|array` and `PDO|string`,
//! `array $options = []`, a class return type, `float $timeout = 0.0` parsed
//! by PHP's rules (see args.rs) and `#[\SensitiveParameter]`. They are set in
//! place once, through the shim, so Reflection, IDEs, stack traces and the
//! stub test see the contract's exact signatures.

use super::shim::{self, ArgType, Function};
use std::sync::Once;

static FIXED: Once = Once::new();

/// Runs once (see `super::fix_classes`).
pub fn fix_signatures() {
    FIXED.call_once(|| {
        let array = || ArgType::Array;
        let float = || ArgType::Float { or_null: false };
        let cron_guard = Function::named("cron_guard");
        let lock_or_name = ArgType::Class {
            name: c"CronLock\\Lock",
            or_string: true,
            or_null: true,
        };
        shim::set_arg(cron_guard, 1, lock_or_name, c"null");
        shim::set_arg(cron_guard, 2, array(), c"[]");

        let file = |method| Function::method("CronLock\\File", method);
        shim::set_arg(file("__construct"), 1, array(), c"[]");
        shim::set_arg(file("acquire"), 0, float(), c"0.0");

        let redis = |method| Function::method("CronLock\\Redis", method);
        // One DSN, or a list of them (Redlock). No default: it stays required.
        shim::set_arg(redis("__construct"), 0, ArgType::StringOrArray, c"");
        shim::set_arg(
            redis("__construct"),
            2,
            ArgType::Float { or_null: true },
            c"null",
        );
        shim::set_arg(redis("__construct"), 3, array(), c"[]");
        // A DSN may hold a password, and $options 'sentinel_password'.
        shim::mark_sensitive(redis("__construct"), 0);
        shim::mark_sensitive(redis("__construct"), 3);
        shim::set_arg(redis("acquire"), 0, float(), c"0.0");

        let database = |method| Function::method("CronLock\\Database", method);
        let pdo_or_dsn = ArgType::Class {
            name: c"PDO",
            or_string: true,
            or_null: false,
        };
        // No default: the argument stays required.
        shim::set_arg(database("__construct"), 0, pdo_or_dsn, c"");
        shim::set_arg(database("__construct"), 2, array(), c"[]");
        // A DSN may hold a password, and $options holds 'password'.
        shim::mark_sensitive(database("__construct"), 0);
        shim::mark_sensitive(database("__construct"), 2);
        shim::set_arg(database("acquire"), 0, float(), c"0.0");

        let guard_lock = ArgType::Class {
            name: c"CronLock\\Lock",
            or_string: false,
            or_null: false,
        };
        shim::set_arg(
            Function::method("CronLock\\Guard", "lock"),
            -1,
            guard_lock,
            c"",
        );
    });
}

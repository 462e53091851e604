//! Parameters parsed by PHP's own rules for internal functions
//! (through the shim): the caller's `declare(strict_types=1)`, weak-mode
//! coercion of numeric strings, ints and bools, the version's deprecations
//! (null to a non-nullable parameter) and warnings, and the engine's own
//! TypeError messages ("CronLock\File::acquire(): Argument #1 ($timeout) must
//! be of type float, string given").
//!
//! When parsing fails the engine's exception is already pending; the
//! ext-php-rs wrapper's own "invalid value" exception is then not thrown.

use super::shim::{self, ClassOrString};
use ext_php_rs::convert::FromZvalMut;
use ext_php_rs::flags::DataType;
use ext_php_rs::types::{ZendCallable, ZendHashTable, Zval};

/// `float $x = <default>`: `None` when omitted. Declared nullable to
/// ext-php-rs only so that an explicit null reaches PHP's rules (deprecated
/// in weak mode, a TypeError in strict mode); arginfo.rs sets the real type.
pub struct OptionalFloat(pub Option<f64>);

impl OptionalFloat {
    pub fn or(&self, default: f64) -> f64 {
        self.0.unwrap_or(default)
    }
}

impl FromZvalMut<'_> for OptionalFloat {
    const TYPE: DataType = DataType::Double;
    const NULLABLE: bool = true;

    fn from_zval_mut(zval: &mut Zval) -> Option<Self> {
        shim::parse_float(zval, false).ok().map(OptionalFloat)
    }

    fn from_missing() -> Option<Self> {
        Some(OptionalFloat(None))
    }
}

/// `float $x`, required.
pub struct Float(pub f64);

impl FromZvalMut<'_> for Float {
    const TYPE: DataType = DataType::Double;

    fn from_zval_mut(zval: &mut Zval) -> Option<Self> {
        shim::parse_float(zval, false).ok().flatten().map(Float)
    }
}

/// `?float $x = null`.
pub struct NullableFloat(pub Option<f64>);

impl FromZvalMut<'_> for NullableFloat {
    const TYPE: DataType = DataType::Double;
    const NULLABLE: bool = true;

    fn from_zval_mut(zval: &mut Zval) -> Option<Self> {
        shim::parse_float(zval, true).ok().map(NullableFloat)
    }

    fn from_missing() -> Option<Self> {
        Some(NullableFloat(None))
    }
}

/// `string $x`: the bytes as given (a path need not be UTF-8).
pub struct Bytes(pub Vec<u8>);

impl Bytes {
    /// For strings that must be text (a DSN, a Redis key).
    ///
    /// # Errors
    ///
    /// `\ValueError` naming `arg` when the bytes are not UTF-8.
    pub fn utf8(self, arg: &str) -> crate::error::Result<String> {
        String::from_utf8(self.0)
            .map_err(|_| crate::error::Error::value(arg, "must be valid UTF-8"))
    }
}

impl FromZvalMut<'_> for Bytes {
    const TYPE: DataType = DataType::String;

    fn from_zval_mut(zval: &mut Zval) -> Option<Self> {
        shim::parse_string(zval, false).ok().flatten().map(Bytes)
    }
}

/// `callable $x`, checked as the engine checks it ("must be a valid
/// callback, function \"nope\" not found or invalid function name").
pub struct Callback<'a>(pub ZendCallable<'a>);

impl<'a> FromZvalMut<'a> for Callback<'a> {
    const TYPE: DataType = DataType::Callable;

    fn from_zval_mut(zval: &'a mut Zval) -> Option<Self> {
        shim::parse_callable(zval).ok()?;
        ZendCallable::new(zval).ok().map(Callback)
    }
}

/// `array $options = []`: `None` when omitted. Null and every other
/// non-array are the engine's TypeError, in weak mode too (no scalar
/// coercion applies to array).
pub struct OptionsArray<'a>(pub Option<&'a ZendHashTable>);

impl<'a> FromZvalMut<'a> for OptionsArray<'a> {
    const TYPE: DataType = DataType::Array;
    // so that null reaches PHP's rules instead of ext-php-rs's
    const NULLABLE: bool = true;

    fn from_zval_mut(zval: &'a mut Zval) -> Option<Self> {
        shim::parse_array(zval).ok()?;
        let zval: &'a Zval = zval;
        zval.array().map(|array| OptionsArray(Some(array)))
    }

    fn from_missing() -> Option<Self> {
        Some(OptionsArray(None))
    }
}

/// `CronLock\Redis`'s `string|array $dsn`: one DSN, or a list (Redlock).
pub enum Dsns<'a> {
    One(Vec<u8>),
    List(&'a ZendHashTable),
}

impl<'a> FromZvalMut<'a> for Dsns<'a> {
    const TYPE: DataType = DataType::Mixed;
    const NULLABLE: bool = true;

    fn from_zval_mut(zval: &'a mut Zval) -> Option<Self> {
        match shim::parse_array_or_string(zval).ok()? {
            Some(dsn) => Some(Dsns::One(dsn)),
            None => {
                let zval: &'a Zval = zval;
                zval.array().map(Dsns::List)
            }
        }
    }
}

/// `CronLock\Database`'s `PDO|string $connection`.
pub enum PdoOrDsn<'a> {
    Pdo(&'a Zval),
    Dsn(Vec<u8>),
}

impl<'a> FromZvalMut<'a> for PdoOrDsn<'a> {
    const TYPE: DataType = DataType::Mixed;
    const NULLABLE: bool = true;

    fn from_zval_mut(zval: &'a mut Zval) -> Option<Self> {
        match shim::parse_class_or_string(zval, c"PDO", false).ok()? {
            ClassOrString::Object => Some(PdoOrDsn::Pdo(zval)),
            ClassOrString::String(dsn) => Some(PdoOrDsn::Dsn(dsn)),
            ClassOrString::Null => None, // not allowed: never returned
        }
    }
}

/// `cron_guard()`'s `CronLock\Lock|string|null $lock = null`.
pub enum LockOrName<'a> {
    Lock(&'a Zval),
    Name(Vec<u8>),
    /// null or omitted: the script's own lock
    Script,
}

impl<'a> FromZvalMut<'a> for LockOrName<'a> {
    const TYPE: DataType = DataType::Mixed;
    const NULLABLE: bool = true;

    fn from_zval_mut(zval: &'a mut Zval) -> Option<Self> {
        match shim::parse_class_or_string(zval, c"CronLock\\Lock", true).ok()? {
            ClassOrString::Object => Some(LockOrName::Lock(zval)),
            ClassOrString::String(name) => Some(LockOrName::Name(name)),
            ClassOrString::Null => Some(LockOrName::Script),
        }
    }

    fn from_missing() -> Option<Self> {
        Some(LockOrName::Script)
    }
}

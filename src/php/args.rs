//! Scalar parameters parsed by PHP's own rules for internal functions
//! (through the shim): the caller's `declare(strict_types=1)`, weak-mode
//! coercion of numeric strings, ints and bools, the version's deprecations
//! (null to a non-nullable parameter) and warnings, and the engine's own
//! TypeError messages ("CronLock\File::acquire(): Argument #1 ($timeout) must
//! be of type float, string given").
//!
//! When parsing fails the engine's exception is already pending; the
//! ext-php-rs wrapper's own "invalid value" exception is then not thrown.

use super::shim;
use ext_php_rs::convert::FromZvalMut;
use ext_php_rs::flags::DataType;
use ext_php_rs::types::{ZendCallable, Zval};

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

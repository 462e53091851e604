//! Reading `$options` arrays: unknown keys and wrong types are refused with
//! a message naming the key, never silently ignored.

use crate::error::{Error, Result};
use ext_php_rs::types::{ZendHashTable, Zval};
use std::collections::HashMap;

pub struct Options<'a> {
    arg: &'static str,
    values: HashMap<String, &'a Zval>,
}

impl<'a> Options<'a> {
    /// # Errors
    ///
    /// [`Error::InvalidValue`] naming the first key not in `known`.
    pub fn new(
        arg: &'static str,
        table: Option<&'a ZendHashTable>,
        known: &[&str],
    ) -> Result<Self> {
        let mut values = HashMap::new();
        if let Some(table) = table {
            // next_zval, not the key-converting iterator, which panics on a
            // key that is not UTF-8.
            let mut entries = table.iter();
            while let Some((key, value)) = entries.next_zval() {
                let key = match key.zend_str() {
                    Some(name) => String::from_utf8_lossy(name.as_bytes()).into_owned(),
                    None => key.long().unwrap_or_default().to_string(),
                };
                if !known.contains(&key.as_str()) {
                    // Escaped: a NUL byte cannot go into an exception message.
                    return Err(Error::value(
                        arg,
                        format!(
                            "has an unknown key '{}' (known: {})",
                            key.escape_debug(),
                            known.join(", ")
                        ),
                    ));
                }
                values.insert(key, value);
            }
        }
        Ok(Options { arg, values })
    }

    fn name(&self, key: &str) -> String {
        format!("{}['{key}']", self.arg)
    }

    fn wrong_type(&self, key: &str, expected: &str, given: &Zval) -> Error {
        Error::type_(
            self.name(key),
            format!("must be of type {expected}, {} given", type_name(given)),
        )
    }

    /// `Ok(None)` when the key is absent (or null, where `null` means "default").
    pub fn bool(&self, key: &str) -> Result<Option<bool>> {
        match self.values.get(key) {
            None => Ok(None),
            Some(v) if v.is_bool() => Ok(v.bool()),
            Some(v) => Err(self.wrong_type(key, "bool", v)),
        }
    }

    pub fn int(&self, key: &str) -> Result<Option<i64>> {
        match self.values.get(key) {
            None => Ok(None),
            Some(v) if v.is_null() => Ok(None),
            Some(v) if v.is_long() => Ok(v.long()),
            Some(v) => Err(self.wrong_type(key, "?int", v)),
        }
    }

    /// Accepts int or float, as PHP's float parameters do; NaN is refused.
    pub fn seconds(&self, key: &str) -> Result<Option<f64>> {
        let seconds = match self.values.get(key) {
            None => return Ok(None),
            Some(v) if v.is_null() => return Ok(None),
            Some(v) if v.is_long() => v.long().map(|l| l as f64),
            Some(v) if v.is_double() => v.double(),
            Some(v) => return Err(self.wrong_type(key, "?float", v)),
        };
        match seconds {
            Some(s) if s.is_nan() => {
                Err(Error::value(self.name(key), "must be a number, NaN given"))
            }
            other => Ok(other),
        }
    }

    /// The value as given, for options that keep it (a callable).
    pub fn zval(&self, key: &str) -> Option<&'a Zval> {
        self.values.get(key).copied()
    }

    pub fn has(&self, key: &str) -> bool {
        self.values.contains_key(key)
    }

    pub fn string(&self, key: &str) -> Result<Option<String>> {
        match self.values.get(key) {
            None => Ok(None),
            Some(v) if v.is_null() => Ok(None),
            // A password cut down to "absent" would fail far from its cause.
            Some(v) if v.is_string() => match v.str() {
                Some(text) => Ok(Some(text.to_owned())),
                None => Err(Error::value(self.name(key), "must be valid UTF-8")),
            },
            Some(v) => Err(self.wrong_type(key, "?string", v)),
        }
    }

    pub fn array(&self, key: &str) -> Result<Option<&'a ZendHashTable>> {
        match self.values.get(key) {
            None => Ok(None),
            Some(v) if v.is_null() => Ok(None),
            Some(v) if v.is_array() => Ok(v.array()),
            Some(v) => Err(self.wrong_type(key, "?array", v)),
        }
    }

    pub fn arg_name(&self, key: &str) -> String {
        self.name(key)
    }
}

pub fn type_name(value: &Zval) -> &'static str {
    if value.is_null() {
        "null"
    } else if value.is_bool() {
        "bool"
    } else if value.is_long() {
        "int"
    } else if value.is_double() {
        "float"
    } else if value.is_string() {
        "string"
    } else if value.is_array() {
        "array"
    } else if value.is_object() {
        "object"
    } else {
        "resource"
    }
}

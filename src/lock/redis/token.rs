//! The random part of a lock token, and reading a holder's value.

use super::errors::plain_io;
use crate::error::{Error, Result};
use redis::{FromRedisValue, ParsingError, Value};

/// 128 bits from the OS random source, hex-encoded.
pub(super) fn random_token() -> Result<String> {
    let mut bytes = [0u8; 16];
    crate::lock::sys::random_bytes(&mut bytes).map_err(|err| {
        Error::Lock(format!(
            "cannot read the OS random source: {}",
            plain_io(&err)
        ))
    })?;
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut token = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        token.push(char::from(HEX[usize::from(byte >> 4)]));
        token.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    Ok(token)
}

/// The value of a key someone else holds, as text: any bytes are a valid
/// holder (another client's value, a host name in Latin-1), so bytes that
/// are not UTF-8 are shown as `\xNN` instead of failing the acquire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct HolderValue(pub(super) String);

impl std::ops::Deref for HolderValue {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl FromRedisValue for HolderValue {
    fn from_redis_value(value: Value) -> std::result::Result<Self, ParsingError> {
        match value {
            Value::BulkString(bytes) => Ok(HolderValue(escape_non_utf8(&bytes))),
            other => String::from_redis_value(other).map(HolderValue),
        }
    }
}

fn escape_non_utf8(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        text.push_str(chunk.valid());
        for byte in chunk.invalid() {
            text.push_str(&format!("\\x{byte:02x}"));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::HolderValue;
    use redis::{FromRedisValue, Value};

    fn holder(bytes: &[u8]) -> String {
        HolderValue::from_redis_value(Value::BulkString(bytes.to_vec()))
            .unwrap()
            .0
    }

    #[test]
    fn a_value_that_is_not_utf8_is_shown_escaped() {
        assert_eq!(holder(b"ab:42@web\xe9"), "ab:42@web\\xe9");
        assert_eq!(holder(b"\xff\xfe caf\xc3\xa9"), "\\xff\\xfe caf\u{e9}");
        assert_eq!(holder("ab:42@h\u{f6}st".as_bytes()), "ab:42@h\u{f6}st");
        assert_eq!(holder(b""), "");
    }
}

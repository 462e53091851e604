//! The random part of a lock token.

use super::errors::plain_io;
use crate::error::{Error, Result};

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

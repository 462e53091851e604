//! The random part of a lock token.

use super::errors::plain_io;
use crate::error::{Error, Result};

/// 128 bits from the OS random source, hex-encoded.
pub(super) fn random_token() -> Result<String> {
    let mut bytes = [0u8; 16];
    let mut filled = 0;
    while filled < bytes.len() {
        let rest = &mut bytes[filled..];
        // SAFETY: the pointer and length describe `rest`, a live buffer we
        // borrow mutably for the duration of the call.
        let read = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if read < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(Error::Lock(format!(
                "cannot read the OS random source: {}",
                plain_io(&err)
            )));
        }
        filled += read as usize;
    }
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut token = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        token.push(char::from(HEX[usize::from(byte >> 4)]));
        token.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    Ok(token)
}

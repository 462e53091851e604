//! The holder record File writes into its lock file once it holds it:
//!
//! ```text
//! cronlock pid=41327 host=web1 since=2026-11-30T14:50:00Z
//! ```
//!
//! space-padded to 128 bytes with a final newline, written in place at the
//! start of the file. cronlock/polyfill writes and reads the same record
//! (`tests/vectors.json` holds the records both accept and refuse).
//!
//! The traps this closes:
//! - a fixed size, so rewriting it never changes the file's size, and no
//!   truncate-then-write (a disk flush on ext4);
//! - written only when the file, as it is at that moment, is empty or holds
//!   exactly such a record (checked with fstat and a read, every time):
//!   locking someone's script or data file never writes to it, even after
//!   it was rewritten in place;
//! - anything else, however close (a stray byte, CRLF, a trailer, a host
//!   with a space), is someone's data: never overwritten, its pid never
//!   believed;
//! - formatted once per second per process, not on every acquire.

use crate::lock::sys;
use std::cell::RefCell;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::time::{SystemTime, UNIX_EPOCH};

/// Size of the holder record: fixed, so rewriting it never changes the size.
pub const RECORD_LEN: usize = 128;
const RECORD_MAGIC: &[u8] = b"cronlock pid=";
/// Whether the file is empty or holds exactly one holder record (and so is
/// ours to overwrite). Empty means nothing to read too: procfs and sysfs
/// files (`/proc/self/status`, a sysctl) report size 0 and are not ours to
/// write a line into.
pub(super) fn holds_only_a_record_or_nothing(file: &File) -> bool {
    match sys::file_size(file) {
        Ok(0) => read_at_most(file, &mut [0u8; 1]).is_ok_and(|n| n == 0),
        Ok(len) if len == RECORD_LEN as u64 => {
            let mut record = [0u8; RECORD_LEN];
            read_at_most(file, &mut record).is_ok_and(|n| n == RECORD_LEN)
                && parse_record(&record).is_some()
        }
        _ => false,
    }
}

/// The holder record of this process now, formatted once per second.
pub(super) fn current_record() -> [u8; RECORD_LEN] {
    thread_local! {
        static LAST: RefCell<(u32, u64, [u8; RECORD_LEN])> =
            const { RefCell::new((0, 0, [0; RECORD_LEN])) };
    }
    let now = SystemTime::now();
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let pid = sys::current_pid();
    LAST.with(|last| {
        let mut last = last.borrow_mut();
        if last.0 != pid || last.1 != secs {
            *last = (pid, secs, format_record(pid, sys::hostname(), now));
        }
        last.2
    })
}

pub(super) fn read_at_most(file: &File, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read_at(&mut buf[filled..], filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// `cronlock pid=4242 host=web1 since=2026-11-30T14:50:00Z`, space-padded
/// to [`RECORD_LEN`] with a final newline, so `cat` shows it plainly.
pub(super) fn format_record(pid: u32, host: &str, now: SystemTime) -> [u8; RECORD_LEN] {
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let host: String = host
        .chars()
        .filter(|c| c.is_ascii_graphic())
        .take(64)
        .collect();
    let text = format!("cronlock pid={pid} host={host} since={}", iso8601_utc(secs));
    let mut record = [b' '; RECORD_LEN];
    let len = text.len().min(RECORD_LEN - 1);
    record[..len].copy_from_slice(&text.as_bytes()[..len]);
    record[RECORD_LEN - 1] = b'\n';
    record
}

/// The pid of a holder record, `None` unless `record` has exactly the shape
/// [`format_record`] writes: anything else (however close) is someone's
/// data, never ours to overwrite or to believe.
pub fn parse_record_pid(record: &[u8]) -> Option<u32> {
    parse_record(record).filter(|&pid| pid != 0)
}

fn parse_record(record: &[u8]) -> Option<u32> {
    let text = record
        .strip_suffix(b"\n")
        .filter(|_| record.len() == RECORD_LEN)?;
    let used = text.iter().rposition(|&b| b != b' ').map_or(0, |at| at + 1);
    let rest = text[..used].strip_prefix(RECORD_MAGIC)?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let pid = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
    let rest = rest[digits..].strip_prefix(b" host=")?;
    let host = rest.iter().take_while(|b| b.is_ascii_graphic()).count();
    if host > 64 {
        return None;
    }
    let since = rest[host..].strip_prefix(b" since=")?;
    is_iso8601_utc(since).then_some(pid)
}

/// `YYYY-MM-DDTHH:MM:SSZ`, as [`iso8601_utc`] writes it.
fn is_iso8601_utc(text: &[u8]) -> bool {
    const SHAPE: &[u8; 20] = b"dddd-dd-ddTdd:dd:ddZ";
    text.len() == SHAPE.len()
        && text.iter().zip(SHAPE).all(|(&b, &shape)| match shape {
            b'd' => b.is_ascii_digit(),
            _ => b == shape,
        })
}

fn iso8601_utc(secs: u64) -> String {
    crate::lock::report::iso8601_utc(secs)
}

/// The holder a record names: pid, host and since (Unix seconds); `None`
/// unless `record` is exactly such a record (see [`parse_record_pid`]).
pub fn parse_record_holder(record: &[u8]) -> Option<(u32, String, u64)> {
    let pid = parse_record_pid(record)?;
    let text = std::str::from_utf8(record).ok()?.trim_end();
    let (_, rest) = text.split_once(" host=")?;
    let (host, since) = rest.split_once(" since=")?;
    Some((
        pid,
        host.to_owned(),
        crate::lock::report::parse_iso8601_utc(since)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn record_round_trips_and_dates_are_civil() {
        let rec = format_record(
            4242,
            "web1",
            UNIX_EPOCH + Duration::from_secs(1_764_514_200),
        );
        assert_eq!(parse_record_pid(&rec), Some(4242));
        assert!(std::str::from_utf8(&rec)
            .unwrap()
            .contains("since=2025-11-30T14:50:00Z"));
        assert_eq!(iso8601_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso8601_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(parse_record_pid(b"hello"), None);
        assert_eq!(parse_record_pid(&rec[..RECORD_LEN - 1]), None);
    }
}

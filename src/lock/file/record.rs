//! The record File keeps at the start of its lock file (decision D21): while
//! it holds the lock, who holds it,
//!
//! ```text
//! cronlock pid=41327 host=web1 since=2026-11-30T14:50:00Z
//! ```
//!
//! and once it let go (written just before the unlock), that nobody does:
//!
//! ```text
//! cronlock free since=2026-11-30T14:52:07Z
//! ```
//!
//! each space-padded to 128 bytes with a final newline, written in place.
//! cronlock/polyfill and the `cronlock` command write and read the same
//! records (`tests/vectors.json` holds the records all accept and refuse).
//!
//! The traps this closes:
//! - a fixed size, so rewriting it never changes the file's size, and no
//!   truncate-then-write (a disk flush on ext4);
//! - written only when the file, as one read shows it at that moment, is
//!   empty or holds exactly such a record: locking someone's script or data
//!   file never writes to it, even after it was rewritten in place; one
//!   read of one byte more than a record tells "empty", "exactly one
//!   record" and "something else" apart, so no fstat is needed (and procfs
//!   files, which say size 0 but have content, read as content);
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

/// Size of a record: fixed, so rewriting it never changes the file's size.
pub const RECORD_LEN: usize = 128;
/// The longest host name a record carries.
const HOST_MAX: usize = 64;

/// A record as it is in the file, borrowed from the bytes read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record<'a> {
    /// `cronlock pid=… host=… since=…`: written by the holder once it held
    /// the lock (the process may have died since: only the kernel says
    /// whether it still holds the file).
    Held {
        pid: u32,
        host: &'a str,
        since: &'a str,
    },
    /// `cronlock free since=…`: written by the last holder as it let go.
    Free { since: &'a str },
}

/// The first bytes of a lock file, as one read saw them: enough to tell an
/// empty file, exactly one record and anything else apart.
pub struct Head {
    bytes: [u8; RECORD_LEN + 1],
    len: usize,
}

impl Head {
    /// One pread of one byte more than a record, from the start.
    pub fn read(file: &File) -> io::Result<Head> {
        let mut bytes = [0u8; RECORD_LEN + 1];
        let len = loop {
            match file.read_at(&mut bytes, 0) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        };
        Ok(Head { bytes, len })
    }

    /// Nothing to read: an empty file (not a procfs file of "size 0").
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The record the file holds, and nothing else; `None` for anything
    /// else (an empty file, someone's data).
    pub fn record(&self) -> Option<Record<'_>> {
        parse_record(self.bytes.get(..self.len)?)
    }

    /// Whether the file is empty or holds exactly one record, and so is
    /// ours to overwrite.
    pub fn is_ours_to_write(&self) -> bool {
        self.is_empty() || self.record().is_some()
    }

    /// Whether the file holds exactly these record bytes.
    pub fn holds(&self, record: &[u8; RECORD_LEN]) -> bool {
        self.bytes.get(..self.len) == Some(&record[..])
    }
}

/// The records of this process now (who holds, and free), formatted at
/// most once per second.
pub fn current_records() -> ([u8; RECORD_LEN], [u8; RECORD_LEN]) {
    struct Formatted {
        pid: u32,
        secs: u64,
        held: [u8; RECORD_LEN],
        free: [u8; RECORD_LEN],
    }
    thread_local! {
        static LAST: RefCell<Formatted> = const {
            RefCell::new(Formatted { pid: 0, secs: 0, held: [0; RECORD_LEN], free: [0; RECORD_LEN] })
        };
    }
    let now = SystemTime::now();
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let pid = sys::current_pid();
    LAST.with(|last| {
        let mut last = last.borrow_mut();
        if last.pid != pid || last.secs != secs {
            *last = Formatted {
                pid,
                secs,
                held: format_held(pid, sys::hostname(), secs),
                free: format_free(secs),
            };
        }
        (last.held, last.free)
    })
}

/// `cronlock pid=4242 host=web1 since=2026-11-30T14:50:00Z`, padded to
/// [`RECORD_LEN`] with a final newline, so `cat` shows it plainly. Only the
/// host's printable ASCII is kept (at most 64 characters).
pub fn format_held(pid: u32, host: &str, secs: u64) -> [u8; RECORD_LEN] {
    let host: String = host
        .chars()
        .filter(|c| c.is_ascii_graphic())
        .take(HOST_MAX)
        .collect();
    pad(&format!(
        "cronlock pid={pid} host={host} since={}",
        iso8601_utc(secs)
    ))
}

/// `cronlock free since=2026-11-30T14:52:07Z`, padded as [`format_held`].
pub fn format_free(secs: u64) -> [u8; RECORD_LEN] {
    pad(&format!("cronlock free since={}", iso8601_utc(secs)))
}

fn pad(text: &str) -> [u8; RECORD_LEN] {
    let mut record = [b' '; RECORD_LEN];
    let len = text.len().min(RECORD_LEN - 1);
    record[..len].copy_from_slice(&text.as_bytes()[..len]);
    record[RECORD_LEN - 1] = b'\n';
    record
}

/// The pid a holder record names, `None` unless `record` has exactly the
/// shape [`format_held`] writes (pid 0 names nobody). A free record names
/// nobody either.
pub fn parse_record_pid(record: &[u8]) -> Option<u32> {
    match parse_record(record)? {
        Record::Held { pid, .. } if pid != 0 => Some(pid),
        _ => None,
    }
}

/// `record` as one of the two shapes, `None` unless it is exactly one:
/// anything else (however close) is someone's data, never ours to
/// overwrite or to believe.
pub fn parse_record(record: &[u8]) -> Option<Record<'_>> {
    let text = record
        .strip_suffix(b"\n")
        .filter(|_| record.len() == RECORD_LEN)?;
    let used = text.iter().rposition(|&b| b != b' ').map_or(0, |at| at + 1);
    // Everything up to `used` is printable ASCII in both shapes.
    let text = std::str::from_utf8(&text[..used]).ok()?;
    if let Some(since) = text.strip_prefix("cronlock free since=") {
        return is_iso8601_utc(since).then_some(Record::Free { since });
    }
    let rest = text.strip_prefix("cronlock pid=")?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let pid = rest[..digits].parse().ok()?;
    let rest = rest[digits..].strip_prefix(" host=")?;
    let host_len = rest.bytes().take_while(u8::is_ascii_graphic).count();
    if host_len > HOST_MAX {
        return None;
    }
    let (host, rest) = rest.split_at(host_len);
    let since = rest.strip_prefix(" since=")?;
    is_iso8601_utc(since).then_some(Record::Held { pid, host, since })
}

/// `YYYY-MM-DDTHH:MM:SSZ`, as [`iso8601_utc`] writes it.
fn is_iso8601_utc(text: &str) -> bool {
    const SHAPE: &[u8; 20] = b"dddd-dd-ddTdd:dd:ddZ";
    text.len() == SHAPE.len()
        && text.bytes().zip(SHAPE).all(|(b, &shape)| match shape {
            b'd' => b.is_ascii_digit(),
            _ => b == shape,
        })
}

fn iso8601_utc(secs: u64) -> String {
    crate::lock::report::iso8601_utc(secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_dates_are_civil() {
        let held = format_held(4242, "web1", 1_764_514_200);
        assert_eq!(parse_record_pid(&held), Some(4242));
        assert_eq!(
            parse_record(&held),
            Some(Record::Held {
                pid: 4242,
                host: "web1",
                since: "2025-11-30T14:50:00Z"
            })
        );
        let free = format_free(1_764_514_327);
        assert_eq!(
            parse_record(&free),
            Some(Record::Free {
                since: "2025-11-30T14:52:07Z"
            })
        );
        assert_eq!(parse_record_pid(&free), None, "a free record names nobody");
        assert_eq!(iso8601_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso8601_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(parse_record_pid(b"hello"), None);
        assert_eq!(parse_record_pid(&held[..RECORD_LEN - 1]), None);
    }

    #[test]
    fn one_read_tells_empty_record_and_data_apart() {
        let dir = std::env::temp_dir().join(format!("cronlock-head-{}", sys::current_pid()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a");
        let head = |content: &[u8]| {
            std::fs::write(&path, content).unwrap();
            Head::read(&File::open(&path).unwrap()).unwrap()
        };
        assert!(head(b"").is_empty());
        assert!(head(b"").is_ours_to_write());
        let free = format_free(0);
        assert!(head(&free).is_ours_to_write());
        assert!(head(&free).holds(&free));
        let mut longer = free.to_vec();
        longer.push(b'x');
        assert!(
            !head(&longer).is_ours_to_write(),
            "a record followed by data"
        );
        assert!(!head(&longer).holds(&free));
        assert!(!head(b"x").is_ours_to_write());
        // procfs says size 0, and has content
        let proc = Head::read(&File::open("/proc/self/status").unwrap()).unwrap();
        assert!(!proc.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

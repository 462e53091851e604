//! Who holds a lock file, as an operator asks: the kernel's list of flock(2)
//! holders, named by the record in the file when the two agree.
//!
//! The traps this closes:
//! - nothing here locks or writes (D23): /proc/locks is read, never a probing
//!   flock(LOCK_NB) (which could make a concurrent try-once acquire fail);
//! - a record alone never makes a holder: after `kill -9` it still names the
//!   dead process, so "held" is what the kernel lists, and the record only
//!   adds a host and a since when the kernel lists its very pid;
//! - a listed pid is named only as D12 allows (alive, with this very file
//!   open): a locker that died while a child kept its descriptor is "an
//!   unknown process", never a pid the system may have given to another
//!   process since.

use super::record::Record;
use crate::lock::sys::{self, FileId};
use std::fmt;
use std::io;

/// Who holds a lock file now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// A holder the kernel lists whose record is in the file.
    Recorded {
        pid: u32,
        host: String,
        since: String,
    },
    /// A holder the kernel lists that wrote no record (flock(1), PHP's
    /// `flock()`, a shared holder).
    Pid(u32),
    /// Held, by no process that can be named (see the header).
    Unknown,
}

impl Holder {
    /// The pid, when the holder can be named.
    pub fn pid(&self) -> Option<u32> {
        match self {
            Holder::Recorded { pid, .. } | Holder::Pid(pid) => Some(*pid),
            Holder::Unknown => None,
        }
    }
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Holder::Recorded { pid, host, since } => write!(f, "pid {pid} on {host} since {since}"),
            Holder::Pid(pid) => write!(f, "pid {pid}"),
            Holder::Unknown => f.write_str("an unknown process"),
        }
    }
}

/// The holders of `id` the kernel lists that can be named (D12): alive, with
/// this very file open.
///
/// # Errors
///
/// Why the kernel cannot be asked.
pub(super) fn nameable_holders(id: FileId) -> io::Result<(bool, Vec<u32>)> {
    let listed = sys::kernel_flock_holders(id)?;
    let held = !listed.is_empty();
    let named = listed
        .into_iter()
        .filter(|&pid| sys::holds_file_open(pid, id))
        .collect();
    Ok((held, named))
}

/// Who holds `id`, from the kernel's list and the file's `record` (`None`
/// when the record is not of this file, or there is none).
///
/// # Errors
///
/// Why the kernel cannot be asked.
pub(super) fn holder_of(id: FileId, record: Option<Record<'_>>) -> io::Result<Option<Holder>> {
    let (held, named) = nameable_holders(id)?;
    if !held {
        return Ok(None);
    }
    if let Some(Record::Held { pid, host, since }) = record {
        if named.contains(&pid) {
            return Ok(Some(Holder::Recorded {
                pid,
                host: host.to_owned(),
                since: since.to_owned(),
            }));
        }
    }
    Ok(Some(
        named
            .first()
            .map_or(Holder::Unknown, |&pid| Holder::Pid(pid)),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_read_as_an_operator_writes_them() {
        let recorded = Holder::Recorded {
            pid: 41327,
            host: "web1".into(),
            since: "2026-11-30T14:50:00Z".into(),
        };
        assert_eq!(
            recorded.to_string(),
            "pid 41327 on web1 since 2026-11-30T14:50:00Z"
        );
        assert_eq!(Holder::Pid(7).to_string(), "pid 7");
        assert_eq!(Holder::Unknown.to_string(), "an unknown process");
        assert_eq!(Holder::Unknown.pid(), None);
    }
}

//! "Another object of this thread holds it": the holds the lock objects of
//! one thread have taken, so that a second object on a held lock answers at
//! once (busy for a try once, an error for a wait) instead of waiting for a
//! release that this very thread would have to make (D3). Each backend
//! keeps one [`Registry`] per thread, keyed by what names its lock (File:
//! device and inode; Database: server and lock name; Redis: address and
//! key), and says what conflicts.
//!
//! ```
//! use cronlock::lock::registry::{ObjectId, Registry};
//!
//! thread_local! {
//!     static HELD: Registry<String> = const { Registry::new() };
//! }
//! let (first, second) = (ObjectId::next(), ObjectId::next());
//! HELD.with(|held| held.register(first, "job".to_owned()));
//! assert!(HELD.with(|held| held.held_by_another(second, |key| key == "job")));
//! assert!(!HELD.with(|held| held.held_by_another(first, |key| key == "job")));
//! ```
//!
//! The traps this closes:
//! - per thread, not per process: a ZTS thread may legitimately wait for
//!   another thread;
//! - entries a fork parent registered are copies nobody holds: they never
//!   count in the child, and the child's first registration drops them;
//! - an object never counts as "another object" against itself.

use super::owner::Owner;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Names one lock object for the registry, unique in the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ObjectId(u64);

impl ObjectId {
    pub fn next() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        ObjectId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

#[derive(Debug)]
struct Entry<K> {
    object: ObjectId,
    owner: Owner,
    key: K,
}

/// The holds of one thread, keyed by `K` (see the module docs).
#[derive(Debug)]
pub struct Registry<K> {
    entries: RefCell<Vec<Entry<K>>>,
}

impl<K> Default for Registry<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K> Registry<K> {
    pub const fn new() -> Self {
        Registry {
            entries: RefCell::new(Vec::new()),
        }
    }

    /// Records that `object` of this process holds `key`.
    pub fn register(&self, object: ObjectId, key: K) {
        let mut entries = self.entries.borrow_mut();
        // Entries of a parent process are copies nobody holds.
        entries.retain(|entry| entry.owner.is_this_process());
        entries.push(Entry {
            object,
            owner: Owner::this_process(),
            key,
        });
    }

    /// Forgets every hold of `object`.
    pub fn unregister(&self, object: ObjectId) {
        self.entries
            .borrow_mut()
            .retain(|entry| entry.object != object);
    }

    /// What `found` returns for the first hold of another object of this
    /// process for which it returns something.
    pub fn find_other<R>(&self, object: ObjectId, found: impl Fn(&K) -> Option<R>) -> Option<R> {
        self.entries
            .borrow()
            .iter()
            .filter(|entry| entry.object != object && entry.owner.is_this_process())
            .find_map(|entry| found(&entry.key))
    }

    /// Whether another object of this process holds a key that `conflicts`.
    pub fn held_by_another(&self, object: ObjectId, conflicts: impl Fn(&K) -> bool) -> bool {
        self.find_other(object, |key| conflicts(key).then_some(()))
            .is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fork_parents_entries_do_not_count_in_the_child() {
        let held: Registry<&str> = Registry::new();
        let (parent, other) = (ObjectId::next(), ObjectId::next());
        held.register(parent, "job");
        // SAFETY: the child only asks and _exits.
        let child = unsafe { libc::fork() };
        if child == 0 {
            let seen = held.held_by_another(other, |key| *key == "job");
            held.register(other, "other");
            let kept = held.entries.borrow().len();
            // SAFETY: leaving the forked child without running test harness code.
            unsafe { libc::_exit(i32::from(seen) + 2 * i32::from(kept != 1)) };
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(child, &mut status, 0) };
        assert_eq!(libc::WEXITSTATUS(status), 0);
        assert!(held.held_by_another(other, |key| *key == "job"));
        held.unregister(parent);
        assert!(!held.held_by_another(other, |key| *key == "job"));
    }
}

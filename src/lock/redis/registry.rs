//! The keys this thread holds, so that a second object on a held key never
//! waits for itself (D3).

use super::hold::HoldState;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, Weak};

/// Where a key lives, as far as the DSN tells without asking a server: a
/// single node's address and database; a Redlock's masters as a sorted set
/// of `address/db` (their order does not matter); a Sentinel's master name
/// and its sorted sentinels; a Cluster's sorted seeds. The same name and key
/// is the same lock. Objects that spell the same servers differently (other
/// seeds or sentinels, a host name for an address) are recognised by
/// [`holds_token`] once the server shows them the key's value.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(super) struct LockName {
    pub(super) address: String,
    pub(super) db: i64,
    pub(super) key: String,
}

/// A hold registered by one lock object of this thread.
pub(super) struct Registered {
    lock_id: u64,
    pid: u32,
    token: String,
    state: Weak<HoldState>,
}

thread_local! {
    /// The keys this thread holds, so that a second object on the same key
    /// answers at once instead of waiting for a release that this very
    /// thread would have to make. Per thread: ZTS threads may wait on each
    /// other.
    static HELD_HERE: RefCell<HashMap<LockName, Registered>> = RefCell::new(HashMap::new());
}

/// Records that lock object `lock_id` of this process holds `name` with
/// `token`, for as long as `state` is valid.
pub(super) fn register(
    name: &LockName,
    lock_id: u64,
    pid: u32,
    token: &str,
    state: &Arc<HoldState>,
) {
    let entry = Registered {
        lock_id,
        pid,
        token: token.to_owned(),
        state: Arc::downgrade(state),
    };
    HELD_HERE.with(|held| held.borrow_mut().insert(name.clone(), entry));
}

/// The token of a valid hold on `name` by another object of this thread
/// (and process: a forked child inherits its parent's entries); stale
/// entries are dropped on the way.
pub(super) fn held_by_another(name: &LockName, lock_id: u64) -> Option<String> {
    let pid = crate::lock::sys::current_pid();
    HELD_HERE.with(|held| {
        let mut held = held.borrow_mut();
        let entry = held.get(name)?;
        let live = entry.pid == pid
            && entry.lock_id != lock_id
            && entry.state.upgrade().is_some_and(|state| state.is_valid());
        if live {
            Some(entry.token.clone())
        } else {
            held.remove(name);
            None
        }
    })
}

/// Forgets `name` if object `lock_id` registered it.
pub(super) fn unregister(name: &LockName, lock_id: u64) {
    // try_with: a lock dropped while the thread's locals are torn down.
    let _ = HELD_HERE.try_with(|held| {
        let mut held = held.borrow_mut();
        if held.get(name).is_some_and(|entry| entry.lock_id == lock_id) {
            held.remove(name);
        }
    });
}

/// Whether `holder`, the value of `key` as a server just showed it, is the
/// token of a valid hold of another object of this thread (and process) on
/// a key of that name. Tokens are 128 random bits: a match is the same key
/// on the same servers, however the two objects' DSNs name them.
pub(super) fn holds_token(key: &str, holder: &str, lock_id: u64) -> bool {
    let pid = crate::lock::sys::current_pid();
    HELD_HERE.with(|held| {
        held.borrow().iter().any(|(name, entry)| {
            name.key == key
                && entry.token == holder
                && entry.pid == pid
                && entry.lock_id != lock_id
                && entry.state.upgrade().is_some_and(|state| state.is_valid())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_token_names_the_hold_whatever_the_address_says() {
        let name = LockName {
            address: "cluster:127.0.0.1:7000".into(),
            db: 0,
            key: "job".into(),
        };
        let state = Arc::new(HoldState::new(Instant::now(), Duration::from_secs(60)));
        let pid = crate::lock::sys::current_pid();
        register(&name, 1, pid, "tok:1@h", &state);
        assert!(holds_token("job", "tok:1@h", 2), "another object sees it");
        assert!(!holds_token("job", "tok:1@h", 1), "not the holder itself");
        assert!(!holds_token("other", "tok:1@h", 2), "another key");
        assert!(!holds_token("job", "tok:2@h", 2), "another token");
        drop(state);
        assert!(!holds_token("job", "tok:1@h", 2), "a hold that ended");
        unregister(&name, 1);
    }
}

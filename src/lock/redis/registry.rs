//! The keys this thread holds, so that a second object on a held key never
//! waits for itself (D3): entries of the one `lock::registry::Registry`,
//! which also keeps a fork parent's entries from counting in the child.

use super::ownership::Ownership;
use crate::lock::registry::{ObjectId, Registry};
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

/// A hold of one lock object: its name, its token, and for how long it
/// is ours (an entry whose hold ran out or was lost counts no more).
struct HeldKey {
    name: LockName,
    token: String,
    ownership: Weak<Ownership>,
}

impl HeldKey {
    fn is_valid(&self) -> bool {
        self.ownership
            .upgrade()
            .is_some_and(|ownership| ownership.is_valid())
    }
}

thread_local! {
    /// Per thread: ZTS threads may wait on each other.
    static HELD: Registry<HeldKey> = const { Registry::new() };
}

/// Records that `object` holds `name` with `token` while `ownership` is valid.
pub(super) fn register(name: &LockName, object: ObjectId, token: &str, ownership: &Arc<Ownership>) {
    let entry = HeldKey {
        name: name.clone(),
        token: token.to_owned(),
        ownership: Arc::downgrade(ownership),
    };
    HELD.with(|held| held.register(object, entry));
}

/// The token of a valid hold on `name` by another object of this thread.
pub(super) fn held_by_another(name: &LockName, object: ObjectId) -> Option<String> {
    HELD.with(|held| {
        held.find_other(object, |entry| {
            (entry.name == *name && entry.is_valid()).then(|| entry.token.clone())
        })
    })
}

/// Forgets what `object` registered.
pub(super) fn unregister(object: ObjectId) {
    // try_with: a lock dropped while the thread's locals are torn down.
    let _ = HELD.try_with(|held| held.unregister(object));
}

/// Whether `holder`, the value of `key` as a server just showed it, is the
/// token of a valid hold of another object of this thread on a key of that
/// name. Tokens are 128 random bits: a match is the same key on the same
/// servers, however the two objects' DSNs name them.
pub(super) fn holds_token(key: &str, holder: &str, object: ObjectId) -> bool {
    HELD.with(|held| {
        held.held_by_another(object, |entry| {
            entry.name.key == key && entry.token == holder && entry.is_valid()
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
        let ownership = Arc::new(Ownership::new(Instant::now(), Duration::from_secs(60)));
        let (holder, other) = (ObjectId::next(), ObjectId::next());
        register(&name, holder, "tok:1@h", &ownership);
        assert!(
            holds_token("job", "tok:1@h", other),
            "another object sees it"
        );
        assert!(
            !holds_token("job", "tok:1@h", holder),
            "not the holder itself"
        );
        assert!(!holds_token("other", "tok:1@h", other), "another key");
        assert!(!holds_token("job", "tok:2@h", other), "another token");
        assert_eq!(held_by_another(&name, other).as_deref(), Some("tok:1@h"));
        drop(ownership);
        assert!(!holds_token("job", "tok:1@h", other), "a hold that ended");
        assert_eq!(held_by_another(&name, other), None);
        unregister(holder);
    }
}

//! A Redis lock for one key: a random token stored with `SET NX PX`, that
//! only its holder can extend or delete, and that expires by itself when
//! the holder dies.
//!
//! ```no_run
//! use cronlock::lock::redis::{RedisLock, RedisOptions};
//! use cronlock::lock::Wait;
//! use std::time::Duration;
//!
//! # fn main() -> cronlock::error::Result<()> {
//! let options = RedisOptions { auto_renew: true, ..RedisOptions::default() };
//! let mut lock = RedisLock::new(
//!     "redis://127.0.0.1:6379/0",
//!     "cron:sync-orders",
//!     Duration::from_secs(300),
//!     options,
//! )?;
//! if lock.acquire(Wait::Once)? {
//!     let fence = lock.fencing_token(); // hand this to downstream writes
//!     // ... the job ...
//!     lock.release()?;
//! } // else: the previous run is still going; skip this one
//! # Ok(())
//! # }
//! ```
//!
//! The wire protocol (keys, the token, the scripts and what each command
//! costs), fencing numbers, `holder()` and window claims, leases and
//! signals, why a hold was lost, Sentinel, Cluster and Redlock, DSNs and TLS
//! are described once, for the extension and cronlock/polyfill alike, in
//! `docs/redis.md`; the stub is the contract. In short: the key holds
//! `<32 hex>:<pid>@<host>` with the lock's TTL, every operation is one Lua
//! script (`polyfill/resources/redis/*.lua`, embedded by `scripts`), safe
//! to run twice, so a command whose connection broke is sent once more on a
//! new connection; `<key>:fence` counts acquires and expires long after
//! its last one; one renewal thread per process renews leases and releases
//! every hold on a terminating signal. In a `fork()` child the lock is not
//! held and the parent's sockets are forgotten, never closed. [`shutdown`]
//! ends the renewal thread before the module is unloaded.
//!
//! # Where things are
//!
//! Each module uses only modules below it in this table (no cycles):
//!
//! | module | what |
//! | --- | --- |
//! | `lock` | [`RedisLock`]: acquire (and its wait), renew, release; no topology code |
//! | `renewer` | the process's one renewal thread: renewals, and the release on a terminating signal |
//! | `registry` | the keys this thread holds, on `lock::registry` (a second object never waits on itself) |
//! | `listener` | a waiter's subscription to `<key>:released` |
//! | `pool` | connections kept between commands, one per server and credentials: the thread's locks share one pool, the renewal thread has its own |
//! | `ownership` | until when a key we acquired is ours, shared by the lock, the registry and the renewer |
//! | `topology` | `Topology`: Single, Sentinel, Cluster or Redlock, one file each; what differs between them |
//! | `topology::master` | the `Master` trait every topology but Redlock ends at; attempts and verdicts |
//! | `target` | the key, its settings, and failures in words |
//! | `node` | one server and our connection to it; telling two DSNs of one server apart |
//! | `dsn` | parsing a DSN and the pieces of Sentinel and Cluster DSNs; the passwords kept out of messages |
//! | `connection` | connect + AUTH/SELECT under one deadline; the retry after a broken connection |
//! | `scripts` | the Lua scripts: `polyfill/resources/redis/*.lua`, embedded |
//! | `options` | [`RedisOptions`], TTL and timeout limits and checks |
//! | `errors` | which failures are transient or fatal, and saying them in words |
//! | `token` | the random part of a token |
//! | `tests` | against real redis-servers, Redlock masters and Sentinel setups (`tests/server.rs` starts them) |

mod connection;
mod dsn;
mod errors;
mod listener;
mod lock;
mod node;
mod options;
mod ownership;
mod pool;
mod registry;
mod renewer;
mod scripts;
mod target;
#[cfg(test)]
mod tests;
mod token;
mod topology;

pub use lock::RedisLock;
pub use options::{
    check_timeout, lifetime_from_secs, tls_supported, ttl_from_secs, RedisOptions, LEASE,
    MAX_TIMEOUT, MAX_TTL,
};
pub use ownership::Loss;
pub use renewer::{holds_nothing_now, shutdown};
pub use topology::SentinelAuth;

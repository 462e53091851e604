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
//! # What is stored in Redis
//!
//! | name | kind | what |
//! | --- | --- | --- |
//! | `<key>` | string key | the holder's token, `<32 hex digits>:<pid>@<host>` (128 random bits from `getrandom(2)`, then who holds it, so `GET <key>` answers "who?"), with the lock's TTL |
//! | `<key>:fence` | string key | the fencing counter: `INCR`ed by every successful acquire, never expires, never deleted by cronlock |
//! | `<key>:released` | pub/sub channel | `release()` publishes an empty message here to wake waiters |
//!
//! Every operation is one Lua script, so it is atomic and one round trip
//! (the crate's [`Script`](redis::Script) sends `EVALSHA` and loads the script only when the
//! server answers `NOSCRIPT`):
//!
//! - acquire: `SET <key> <token> NX PX <ttl>`; on success `INCR <key>:fence`
//!   and reply `{1, fence, ''}`. Else, if `GET <key>` is our token,
//!   `PEXPIRE <key> <ttl>` and reply `{1, GET <key>:fence, ''}` (a hold being
//!   confirmed, or a retry whose first reply was lost: nobody else `INCR`s
//!   the fence while we hold the key); otherwise reply `{0, PTTL <key>, GET
//!   <key>}` so a waiter knows when the key expires at the latest. In
//!   confirm mode (acquire on a held lock) the `SET NX` is skipped, so a lost
//!   key is reported, never silently retaken.
//! - renew: `PEXPIRE <key> <ttl>` only if `GET <key>` is still our token.
//! - release: `DEL <key>` and `PUBLISH <key>:released ""` only if `GET <key>`
//!   is still our token; replies 1 (deleted), 0 (someone else's value) or -1
//!   (no key). The publish is a `pcall`, so an ACL user without
//!   channel rights can still release (its waiters then poll).
//!
//! - once per window (`cron_guard`'s `'once_per'`, see
//!   [`RedisLock::set_once_per`]): the acquire script also reads the
//!   server's `TIME`, computes the end of the window (aligned to the Unix
//!   epoch) and `PEXPIREAT`s the key to it if that is later than the key's
//!   expiry; an acquire on a held lock in this mode confirms the hold by
//!   it (never taking a key that is gone, never shortening the key's life),
//!   and the hold is then kept to the latest window's end it was confirmed
//!   in, whoever took it;
//!   renew never shortens the key below it; at the job's end a token-checked
//!   script `PEXPIREAT`s the key to the window's end instead of deleting it
//!   (or deletes and publishes, as release does, once the window is over).
//!   The server's clock is the only one that places windows, so the hosts'
//!   clock skew never lets a window have two runs.
//!
//! All of them are safe to run twice, which is what lets a command whose
//! connection broke be sent again (see below).
//!
//! Any other client that takes `<key>` with `SET NX` excludes cronlock and is
//! excluded by it. Within one thread, a registry of held keys makes a
//! second [`RedisLock`] on a held key busy at once, and refuses to let it
//! wait for a release only this thread could make. It knows a key by what
//! the DSN says (module `registry`) and, for DSNs that name the same servers
//! differently, by its value: a key whose value is the token another object
//! of this thread holds is that object's lock. A key that is no longer ours (expired, then taken by
//! someone else) is never extended or deleted: `renew()`/`release()` report
//! `false` and the lock turns not held. Deleting `<key>:fence` restarts the
//! fencing counter; leave it alone.
//!
//! # Cluster
//!
//! `redis-cluster://seed,seed…` (module `topology::cluster`): commands go to the node
//! that answered last; `MOVED` repoints us, `ASK` sends that one command
//! (with `ASKING`, again after the crate's `NOSCRIPT` reload) to the node it
//! names, an unreachable node sends us back to the seeds, a redirect loop
//! (more than 5 in a row) is followed again after a 20-100 ms pause and,
//! once the budget is spent, is a transient failure; the whole call
//! takes at most `read + connect + read` timeouts however many nodes it
//! walks (`topology::cluster::call_budget`). Companion keys
//! are `<key>:fence` when `<key>` has a hash tag, else `{<key>}:fence`, so the
//! two-key scripts never cross slots. Waiters subscribe with plain
//! `SUBSCRIBE` on the node they talk to: cluster `PUBLISH` reaches every
//! node, and SSUBSCRIBE would tie the listener to the slot's owner, which
//! resharding changes under it; the 50 ms poll covers the rest. The redis
//! crate's `cluster` feature is not used: its client keeps a slot map and
//! connections to every node, where one lock needs one key's node.
//!
//! # Sentinel
//!
//! `redis-sentinel://…/master[/db]`: before every command the lock (and its
//! renewal thread) asks the sentinels, the last that answered first, for the
//! master's address (`topology::sentinel`), and opens a new connection when it moved;
//! a new connection to the master checks `ROLE` (a demoted master is a
//! transient failure). So renew and acquire follow the master the sentinels
//! name now, and a key that did not reach it is reported lost. The DSN's
//! credentials are the master's; [`RedisLock::set_sentinel_auth`] says what
//! the sentinels are sent (`AUTH [user] password`), else nothing. With
//! [`RedisOptions::replicas`] the acquire script is followed by `WAIT` on the
//! same connection; too few acknowledgements give the key back and fail the
//! attempt (transient: a waiter retries).
//!
//! # Redlock
//!
//! [`RedisLock::on_masters`] with several DSNs of independent masters: each
//! operation runs the same script on every master at once (one scoped
//! thread per master, `topology::redlock`; one master runs on the caller's
//! thread), so a master that is down or stopped costs its timeouts once.
//!
//! - acquire: held when a majority (`n/2 + 1`) granted and the attempt took
//!   less than TTL − drift, drift = TTL/100 + 2 ms (the Redlock paper's
//!   allowance for clock drift between the masters and us); the hold then
//!   counts as valid until TTL − drift after the attempt was sent. An attempt
//!   that falls short deletes (token-checked) the grants it got; a master that
//!   did not answer keeps our key until its TTL. A majority busy: `Ok(false)`
//!   (waiters retry after a random part of the poll interval, so two
//!   waiters that split the votes do not retry in step); fewer answering
//!   masters than a majority: the error, naming each master's failure. The
//!   masters are given half the validity to answer (a hold won against a
//!   stalled minority keeps the other half); a majority that granted too
//!   late is the error too, never "busy": nobody else holds the key.
//! - renew, confirm, release, end of a once-per window: yes when a majority
//!   said yes; no (lost) when so many said no that no majority is left;
//!   otherwise the error. No master is awaited past a share of the validity
//!   (a renewal: half of what is left of the hold; a release: what is left,
//!   at least 50 ms), so a stalled minority cannot make the majority's yes
//!   arrive after the hold ran out; a yes that arrives after it ran out
//!   does not revive it (`Ownership::extend`). A release (or window end) counts "no key" on a
//!   master as yes: a minority that never had or lost the key does not make
//!   a held lock "not held".
//! - No server counts twice: [`RedisLock::on_masters`] refuses a list of one
//!   and one whose DSNs name a server twice (`node::Node::server_identity`:
//!   loopback and IPv4-mapped spellings are one, the database is not part
//!   of it); until every master has answered once, each attempt first asks
//!   `INFO server`, and two masters with one `run_id` make it give its
//!   grants back and fail with [`Error::Lock`](crate::error::Error::Lock).
//! - Waiters subscribe to the first master's channel and poll the others.
//! - No fencing number (`fencing_token()` is `None`): no number made from
//!   independent counters is strictly increasing when a master restarts
//!   without its counter or a grant reaches only part of a majority (see
//!   the stub for where cronlock stands between Kleppmann and antirez).
//! - The D3 registry names the lock by its masters' `address/db`, sorted.
//!
//! # DSN
//!
//! Parsed by the redis crate: `redis://[[user]:password@]host[:port][/db]`,
//! `rediss://…` for TLS, `unix:///path/to/redis.sock` (with `?db=N`,
//! `?user=U&pass=P` as query parameters). `?db=N` works on TCP too (the
//! crate reads it only for unix://); module `dsn` refuses what the crate
//! would ignore: other query parameters, one given twice, `/N` and `?db=M`
//! that differ, an empty port, a fragment other than rediss://'s
//! `#insecure`. Percent-encode reserved characters in user names and
//! passwords. No error message ever contains the password.
//!
//! # TLS
//!
//! `rediss://` verifies the server with rustls against the system's CA
//! certificates (`rustls-native-certs`); setting `SSL_CERT_FILE` (a PEM
//! bundle) or `SSL_CERT_DIR` replaces those, e.g. to trust a private CA.
//! The environment is read at each connect. `rediss://host:port/#insecure`
//! turns verification off (certificate and host name): only for testing.
//!
//! # Timeouts and failures
//!
//! [`RedisLock::new`] only parses; the connection is opened on first use,
//! within `connect_timeout` (TCP connect plus AUTH/SELECT; host names are
//! resolved by the system without a timeout). Every reply must arrive
//! within `read_timeout`. Unreachable server, refused authentication or a
//! timeout are [`Error::Connection`](crate::error::Error::Connection); a connection that failed is dropped.
//!
//! A command that failed by I/O (an idle connection closed by the server's
//! `timeout` or a firewall, a reset, no reply within `read_timeout`, as
//! under `CLIENT PAUSE … WRITE` during a `FAILOVER`, or EINTR) is sent once
//! more on a new connection; an error reply is not. A release whose second
//! try finds no key counts as released (the first try most likely deleted
//! it; nobody else holds it). A waiter (`acquire` with a timeout) retries
//! connection failures and LOADING/BUSY/MASTERDOWN/TRYAGAIN replies 20 to
//! 100 ms apart until its deadline, then returns the last failure; a read
//! cut short by a signal for which PHP has a handler ends the wait
//! (`Ok(false)`).
//!
//! Messages say what failed in words: the address, the operation, the key
//! (cut to 200 characters) and the OS or server reason, never Rust's
//! "(os error N)" or the crate's error kinds.
//!
//! - `acquire` failing leaves the lock not held (or, on a held lock, held as
//!   far as we know). If the server executed the script but every reply was
//!   lost, the key stays until its TTL.
//! - `renew` failing keeps the lock held as far as we know: [`RedisLock::is_held`]
//!   stays true until the TTL from the last confirmed acquire or renew has
//!   passed, and a later `renew` may still succeed.
//! - `release` failing forgets the lock: it is not held any more, and the key
//!   expires by its TTL.
//!
//! # TTL
//!
//! Sent in milliseconds, rounded up (so at least 1 ms); at most 10 years
//! ([`MAX_TTL`]) — more is refused as a bad `$ttl`.
//!
//! # Auto-renew, and terminating signals
//!
//! One thread per process (module `renewer`) renews every hold whose lock
//! has [`RedisOptions::auto_renew`] (the PHP layer's default: a [`LEASE`]
//! of 30 s when no `$ttl` is given) every ttl/3, on connections of its own,
//! at most one per server and credentials; a renewal that found a server
//! unreachable makes its other holds wait for the retry rather than each
//! wait out the timeout. A hold stops being renewed when the lock is
//! released or dropped (a renewal in flight is awaited, so none is sent
//! after `release()` returns), or when a renewal finds the key is no longer
//! ours or could not renew before the TTL ran out; the lock is then lost.
//! It always renews to the lock's TTL, also after a one-off
//! `renew(Some(ttl))`.
//!
//! Every hold, renewed or not, is known to that thread: while any exists,
//! `crate::lock::signals` makes a terminating signal whose disposition was
//! the default one release them all (token-checked, a once-per hold left
//! to expire at its window's end, within 2 s) before the process dies of
//! that signal. The thread ends by [`shutdown`], before the module is
//! unloaded.
//!
//! # Fork
//!
//! The lock belongs to the process that acquired it. In a child made by
//! `fork()`, the lock is not held, `renew`/`release` return `false` without
//! sending anything, and dropping it sends nothing: the inherited sockets
//! are forgotten, never closed (closing a TLS session would corrupt the
//! parent's), and the parent's renewal thread, which does not exist in the
//! child, is neither joined nor signalled (its state is forgotten too). The
//! child may `acquire` on its own connection; its first hold starts a
//! renewal thread of its own.
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
    check_timeout, tls_supported, ttl_from_secs, RedisOptions, LEASE, MAX_TIMEOUT, MAX_TTL,
};
pub use renewer::{holds_nothing_now, shutdown};
pub use topology::SentinelAuth;

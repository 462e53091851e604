//! Connections kept between commands, at most one per server and
//! credentials ([`Server::pool_key`]), lent to a topology's connection
//! slots for one operation and taken back after it. The lock objects of a
//! PHP thread share one [`Pool`] (so 300 locks on one server are one
//! connection, and a reconnect after a broken connection serves them all);
//! the renewal thread has its own.
//!
//! Traps it closes:
//! - a connection carries the timeouts of the operation that last used it:
//!   lending sets the borrower's (no `setsockopt` when they are the same,
//!   see [`Conn::time_out_after`]);
//! - in a `fork()` child the kept connections are the parent's sockets (and
//!   TLS sessions): they are forgotten, never closed or used;
//! - an operation that calls another (a confirm that renews) lends and takes
//!   back only at the outermost level ([`Shared::lend`]'s depth);
//! - a pool that kept every connection it was given would grow with every
//!   server, database and user a long-running worker ever locked on, and
//!   would keep passwords revoked since working for new objects: a
//!   connection is kept only while a lock object that used it lives
//!   ([`Shared::forget`] at the object's end; the renewal thread keeps its
//!   own for the holds it renews).

use super::connection::{Conn, Server};
use super::options::RedisOptions;
use super::topology::Topology;
use crate::lock::owner::Owner;
use crate::lock::registry::ObjectId;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::mem;

/// Idle connections by server and credentials. A slot stays in the map
/// while its connection is lent, so that lending and taking back allocate
/// nothing.
pub(super) struct Pool {
    idle: HashMap<String, Slot>,
    /// The process whose sockets `idle` holds.
    owner: Owner,
}

/// One server's connection (`None` while lent) and who has used it.
struct Slot {
    conn: Option<Conn>,
    /// The lock objects (or renewed holds) that took a connection back
    /// here: the slot lasts while one of them does.
    users: Vec<ObjectId>,
}

impl Default for Pool {
    fn default() -> Self {
        Pool {
            idle: HashMap::new(),
            owner: Owner::this_process(),
        }
    }
}

impl Pool {
    /// Fills each empty slot of `topology` with the kept connection to its
    /// server, if any, set to `options`' timeouts.
    pub(super) fn lend(&mut self, topology: &mut Topology, options: &RedisOptions) {
        self.adopt_process();
        topology.for_each_connection(&mut |server: &Server, slot: &mut Option<Conn>| {
            if slot.is_none() {
                let kept = self
                    .idle
                    .get_mut(server.pool_key())
                    .and_then(|slot| slot.conn.take());
                if let Some(mut conn) = kept {
                    if conn.time_out_after(options.read_timeout).is_ok() {
                        *slot = Some(conn);
                    }
                }
            }
        });
    }

    /// Keeps the connections `topology` has now, for `user` and whoever
    /// else uses them (a new one after a reconnect replaces none: a second
    /// one to a server is closed).
    pub(super) fn take_back(&mut self, topology: &mut Topology, user: ObjectId) {
        self.adopt_process();
        topology.for_each_connection(&mut |server: &Server, slot: &mut Option<Conn>| {
            if let Some(conn) = slot.take() {
                match self.idle.get_mut(server.pool_key()) {
                    Some(kept) => {
                        // A second connection to this server is closed.
                        kept.conn.get_or_insert(conn);
                        if !kept.users.contains(&user) {
                            kept.users.push(user);
                        }
                    }
                    None => {
                        let slot = Slot {
                            conn: Some(conn),
                            users: vec![user],
                        };
                        self.idle.insert(server.pool_key().to_owned(), slot);
                    }
                }
            }
        });
    }

    /// Closes the connections that only users for which `alive` is false
    /// used (and forgets their servers' credentials).
    pub(super) fn keep_only_users(&mut self, alive: impl Fn(ObjectId) -> bool) {
        self.adopt_process();
        self.idle.retain(|_, slot| {
            slot.users.retain(|&user| alive(user));
            !slot.users.is_empty()
        });
    }

    fn adopt_process(&mut self) {
        if !self.owner.is_this_process() {
            for (_, slot) in self.idle.drain() {
                mem::forget(slot.conn);
            }
            self.owner = Owner::this_process();
        }
    }
}

thread_local! {
    /// The pool of this thread's lock objects.
    static SHARED: RefCell<Pool> = RefCell::new(Pool::default());
    /// How many lending operations of this thread are running.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// The thread's shared pool, for one operation of a lock.
pub(super) struct Shared;

impl Shared {
    /// Runs `operation` with `topology`'s slots filled from the thread's
    /// pool and emptied into it afterwards; a nested call lends nothing.
    pub(super) fn lend<T, L>(
        lock: &mut L,
        topology: impl Fn(&mut L) -> &mut Topology,
        user: ObjectId,
        options: &RedisOptions,
        operation: impl FnOnce(&mut L) -> T,
    ) -> T {
        let outermost = DEPTH.with(|depth| {
            depth.set(depth.get() + 1);
            depth.get() == 1
        });
        if outermost {
            SHARED.with(|pool| pool.borrow_mut().lend(topology(lock), options));
        }
        let result = operation(lock);
        if outermost {
            SHARED.with(|pool| pool.borrow_mut().take_back(topology(lock), user));
        }
        DEPTH.with(|depth| depth.set(depth.get() - 1));
        result
    }

    /// `user` (a lock object) is gone: the connections no other object of
    /// this thread used are closed.
    pub(super) fn forget(user: ObjectId) {
        // At thread exit the pool may be gone already.
        let _ = SHARED.try_with(|pool| {
            if let Ok(mut pool) = pool.try_borrow_mut() {
                pool.keep_only_users(|other| other != user);
            }
        });
    }
}

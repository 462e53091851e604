//! `CronLock\Database`: a named lock on MySQL/MariaDB or PostgreSQL,
//! through PDO.
//!
//! The server is reached through PDO rather than a Rust client: no TLS
//! stack or async runtime in the extension, and TLS, authentication and
//! driver options are exactly what the user configured for PDO. The lock
//! logic is in `crate::lock::database`; its statements run on a `\PDO`
//! (the user's, or one the lock opens from a DSN and keeps) through
//! [`PdoSession`]. This module converts arguments, results and errors.

use super::args::{Bytes, Float, NullableFloat, OptionalFloat, OptionsArray, PdoOrDsn};
use super::engine;
use super::lock_interface::PhpInterfaceLock;
use super::native::{Acquired, Holder, NativeLock};
use super::options::Options;
use super::pdo::{hook_interrupts, PdoSession};
use crate::error::Error;
use crate::lock::database::{ClaimsTable, DatabaseLock};
use crate::lock::owner::current_pid;
use crate::lock::Wait;
use ext_php_rs::flags::ClassFlags;
use ext_php_rs::prelude::*;
use ext_php_rs::types::ZendHashTable;
use std::cell::RefCell;

#[php_class]
#[php(name = "CronLock\\Database")]
#[php(flags = ClassFlags::Final)]
#[php(implements(PhpInterfaceLock))]
pub struct Database {
    lock: DatabaseLock,
    /// A RefCell so that the busy line of cron_guard() can ask who holds
    /// the lock through a shared reference.
    session: RefCell<PdoSession>,
    /// Where claim() keeps its claims.
    claims_table: ClaimsTable,
}

#[php_impl]
impl Database {
    pub fn __construct(
        connection: PdoOrDsn,
        name: Bytes,
        options: OptionsArray,
    ) -> PhpResult<Self> {
        let name = name.utf8("$name")?;
        super::refuse_second_construct::<Database>()?;
        hook_interrupts();
        let options = Options::new(
            "$options",
            options.0,
            &["user", "password", "pdo_options", "claims_table"],
        )?;
        let claims_table = match options.string("claims_table")? {
            Some(table) => ClaimsTable::new(&options.arg_name("claims_table"), &table)?,
            None => ClaimsTable::default(),
        };
        let session = match connection {
            PdoOrDsn::Dsn(dsn) => {
                let dsn = String::from_utf8(dsn)
                    .map_err(|_| Error::value("$connection", "must be valid UTF-8"))?;
                PdoSession::own(&dsn, &options)?
            }
            PdoOrDsn::Pdo(connection) => {
                for key in ["user", "password", "pdo_options"] {
                    if options.has(key) {
                        return Err(Error::value(
                            options.arg_name(key),
                            "is only used with a DSN; a PDO given is already connected",
                        )
                        .into());
                    }
                }
                PdoSession::user(connection)?
            }
        };
        let lock = DatabaseLock::new(session.dialect(), &name)?;
        super::note_lock_object();
        Ok(Database {
            lock,
            session: RefCell::new(session),
            claims_table,
        })
    }

    pub fn acquire(&mut self, timeout: OptionalFloat) -> PhpResult<bool> {
        self.acquire_waiting(Wait::from_seconds("$timeout", timeout.or(0.0))?)
    }

    /// The lock lives as long as its session: there is no TTL to extend,
    /// renewing asks the server whether this session still holds it.
    pub fn renew(&mut self, ttl: NullableFloat) -> PhpResult<bool> {
        let _ = ttl;
        let renewed = self.lock.renew(self.session.get_mut());
        if engine::exception_pending() {
            return Ok(false);
        }
        Ok(renewed?)
    }

    pub fn release(&mut self) -> PhpResult<bool> {
        let released = self.lock.release(self.session.get_mut());
        if engine::exception_pending() {
            return Ok(false);
        }
        Ok(released?)
    }

    pub fn is_held(&self) -> bool {
        self.lock.is_held()
    }

    pub fn name(&self) -> String {
        self.lock.name().to_owned()
    }

    /// Who holds the lock now, in words; null when it is free.
    pub fn holder(&self) -> PhpResult<Option<String>> {
        let mut session = self.session.borrow_mut();
        let holder = self.lock.holder(&mut *session)?;
        Ok(holder.map(|h| self.lock.dialect().describe_holder(&h)))
    }

    /// Claims `$window` for `$seconds`, exactly once across hosts: true when
    /// this call claimed it. See the stub.
    pub fn claim(&mut self, window: Bytes, seconds: Float) -> PhpResult<bool> {
        let claimed = self.lock.claim(
            self.session.get_mut(),
            &self.claims_table,
            &window.0,
            seconds.0,
        );
        if engine::exception_pending() {
            return Ok(false);
        }
        let claimed = claimed?;
        if let Some(err) = claimed.sweep_failed {
            super::shim::warning(&format!(
                "CronLock\\Database::claim(): cannot delete expired claims from {}: {}",
                self.claims_table.name(),
                err.message
            ));
        }
        Ok(claimed.claimed)
    }

    pub fn __serialize(&self) -> PhpResult<Vec<String>> {
        Err(super::not_serializable("CronLock\\Database"))
    }

    pub fn __unserialize(&mut self, data: &ZendHashTable) -> PhpResult<()> {
        let _ = data;
        Err(super::not_serializable("CronLock\\Database"))
    }
}

impl Database {
    /// `acquire()` with its wait: see the PHP method.
    fn acquire_waiting(&mut self, wait: Wait) -> PhpResult<bool> {
        let session = self.session.get_mut();
        let acquired = self.lock.acquire(session, wait);
        if engine::exception_pending() {
            // A signal handler threw (or called exit()) during a PDO call:
            // that exception propagates; the lock is not taken.
            engine::with_exception_set_aside(|| self.lock.abandon(session));
            return Ok(false);
        }
        Ok(acquired?)
    }
}

impl NativeLock for Database {
    fn held(&self) -> bool {
        self.lock.is_held()
    }

    fn acquire_for_guard(&mut self, wait: Wait) -> PhpResult<Acquired> {
        // Its PDO calls may run a signal handler that throws or exit()s.
        let got = self.acquire_waiting(wait)?;
        if engine::exception_pending() {
            return Ok(Acquired::Threw);
        }
        Ok(if got {
            Acquired::Yes
        } else {
            Acquired::No(self.lock.refusal())
        })
    }

    /// "'x' (MySQL/MariaDB at mysql:host=db)".
    fn describe(&self) -> String {
        self.lock.describe(&*self.session.borrow())
    }

    /// Who holds it, if the server says.
    fn busy_holder(&self) -> Option<Holder> {
        if self.lock.held_by_another_object() {
            return Some(Holder::named(format!(
                "this process (pid {}) through another lock object",
                current_pid()
            )));
        }
        let mut session = self.session.try_borrow_mut().ok()?;
        engine::with_exception_set_aside(|| {
            self.lock
                .holder(&mut *session)
                .ok()
                .flatten()
                .map(|h| Holder::named(self.lock.dialect().describe_holder(&h)))
        })
    }

    fn loss_reason(&self) -> String {
        "the server no longer holds it for this session (the session ended or was killed)"
            .to_owned()
    }

    /// Runs the release with any pending exception set aside (PDO cannot
    /// be called while one is pending).
    fn release_leftover(&mut self) {
        if !self.lock.needs_release() {
            return;
        }
        let session = self.session.get_mut();
        engine::with_exception_set_aside(|| {
            let _ = self.lock.release(session);
        });
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        self.release_leftover();
    }
}

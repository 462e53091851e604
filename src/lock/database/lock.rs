//! The lock state of one `CronLock\Database` object: acquire (a try, then
//! the dialect's sliced wait), confirm, renew, release, and what to do when
//! the session is lost, the user's PDO refuses, or a signal handler cuts a
//! wait short. It talks to the server through [`Session`] and never names
//! a server: the SQL is the [`Dialect`]'s.
//!
//! The traps this closes:
//! - another object of this thread on the same server and name is refused
//!   (busy for a try once, an error for a wait) rather than left to wait
//!   for its own thread (D3);
//! - acquire on a held lock asks the server whether this very session
//!   still holds it, and a reconnected session holds nothing;
//! - a connection of ours that died while idle (server restart,
//!   `wait_timeout`) is reopened once; the user's PDO never is;
//! - a release the user's PDO refuses (an aborted transaction, an open
//!   result set) keeps the hold, as the server does, and says what to do
//!   first; on a connection of ours, closing it frees the lock;
//! - a signal handler that throws in the middle of an acquire leaves no
//!   lock behind that the server may have granted meanwhile ([`DatabaseLock::abandon`]);
//! - in a fork child the parent's hold and session are not the child's
//!   (`lock::owner`), and names and messages are escaped (`lock::shorten`).

use super::claims::{self, Claimed, ClaimsTable};
use super::dialect::{Dialect, Slices, Waited};
use super::errors::{Holder, SqlError};
use super::names::{claim_key, Target};
use super::session::{Session, Value};
use crate::error::{Error, Result};
use crate::lock::owner::{current_pid, Owner};
use crate::lock::registry::{ObjectId, Registry};
use crate::lock::{interrupted, shorten, Refusal, Wait};
use std::rc::Rc;
use std::time::Duration;

/// Longest single blocking wait on the server, so that PHP signal handlers
/// run within about this long.
pub const WAIT_SLICE: Duration = Duration::from_millis(100);

/// What the server says about the connection we talk on.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SessionInfo {
    /// The lock on the server the connection reaches: two objects on the
    /// same server and name in one thread must not wait on each other.
    /// Shared with this thread's [`HELD`] registry while held (no copy per
    /// acquire).
    held_name: Rc<HeldName>,
    /// MySQL `CONNECTION_ID()`, PostgreSQL `pg_backend_pid()`.
    id: i64,
}

/// The session a lock was granted to.
#[derive(Debug)]
struct Granted {
    session: i64,
}

/// What names a held lock in this thread's [`HELD`] registry.
#[derive(Debug, PartialEq, Eq)]
struct HeldName {
    /// Which server (and PostgreSQL database).
    server: String,
    target: Target,
}

thread_local! {
    static HELD: Registry<Rc<HeldName>> = const { Registry::new() };
}

fn held_elsewhere(name: &HeldName, object: ObjectId) -> bool {
    HELD.with(|held| held.held_by_another(object, |held| **held == *name))
}

/// The lock state of one `CronLock\Database` object.
#[derive(Debug)]
pub struct DatabaseLock {
    dialect: &'static dyn Dialect,
    name: String,
    target: Target,
    object: ObjectId,
    /// The process this object's state belongs to (see `adopt_process`).
    owner: Owner,
    info: Option<SessionInfo>,
    granted: Option<Granted>,
    /// Why the last `acquire` returned false.
    refusal: Option<Refusal>,
}

impl DatabaseLock {
    /// # Errors
    ///
    /// [`Error::InvalidValue`] naming `$name` when it is empty or contains a
    /// NUL byte.
    pub fn new(dialect: &'static dyn Dialect, name: &str) -> Result<Self> {
        if name.is_empty() {
            return Err(Error::value("$name", "must not be empty"));
        }
        if name.contains('\0') {
            return Err(Error::value("$name", "must not contain NUL bytes"));
        }
        Ok(DatabaseLock {
            dialect,
            name: name.to_owned(),
            target: dialect.target(name),
            object: ObjectId::next(),
            owner: Owner::this_process(),
            info: None,
            granted: None,
            refusal: None,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn dialect(&self) -> &'static dyn Dialect {
        self.dialect
    }

    /// "'name' (MySQL/MariaDB at mysql:host=db)", for messages: after
    /// "lock" in errors and in the busy line of cron_guard().
    pub fn describe(&self, session: &dyn Session) -> String {
        match self.target.shown() {
            None => format!("'{}' ({})", shorten(&self.name), session.label()),
            Some(shown) => format!("'{}' ({}, {shown})", shorten(&self.name), session.label()),
        }
    }

    /// Whether another object of this thread holds the same lock (as far
    /// as this object has talked to the server), for the busy line.
    pub fn held_by_another_object(&self) -> bool {
        self.info
            .as_ref()
            .is_some_and(|info| held_elsewhere(&info.held_name, self.object))
    }

    /// What this object believes: acquired in this process, not released,
    /// not found lost. No round trip.
    pub fn is_held(&self) -> bool {
        self.owner.is_this_process() && self.granted.is_some()
    }

    /// Takes the lock, waiting as `wait` says, in slices of at most
    /// [`WAIT_SLICE`] on the server's own blocking wait, giving up early
    /// (false) when [`crate::lock::interrupted`] says so. On a lock this object
    /// holds it asks the server whether this session still holds it:
    /// false (and not held any more) when it does not.
    ///
    /// # Errors
    ///
    /// [`Error::Connection`] when the server cannot be reached or the
    /// connection is lost while trying; [`Error::Lock`] for another failure,
    /// and when another object of this thread holds the lock and `wait`
    /// would wait (it would wait for itself).
    pub fn acquire(&mut self, session: &mut dyn Session, wait: Wait) -> Result<bool> {
        self.refusal = None;
        let acquired = self.try_acquire(session, wait)?;
        if !acquired && self.refusal.is_none() {
            self.refusal = Some(Refusal::Contended);
        }
        Ok(acquired)
    }

    /// Why the last [`DatabaseLock::acquire`] returned false; `None` after
    /// one that returned true.
    pub fn refusal(&self) -> Option<Refusal> {
        self.refusal
    }

    fn try_acquire(&mut self, session: &mut dyn Session, wait: Wait) -> Result<bool> {
        self.adopt_process(session);
        if self.granted.is_some() {
            let confirmed = self.confirm(session)?;
            if !confirmed {
                self.refusal = Some(Refusal::Lost);
            }
            return Ok(confirmed);
        }
        let info = match self.session_info(session) {
            Ok(info) => info,
            Err(err)
                if self.dialect.lost_session(&err)
                    && !err.connecting
                    && session.owns_connection() =>
            {
                // A connection of ours that died while idle (server
                // restart, wait_timeout): open a new one, once. (One that
                // could not be opened just now is not tried again.)
                self.forget_session(session);
                self.session_info(session)
                    .map_err(|err| self.error(session, "cannot reach", &err))?
            }
            Err(err) => return Err(self.error(session, "cannot reach", &err)),
        };
        if held_elsewhere(&info.held_name, self.object) {
            if wait == Wait::Once {
                self.refusal = Some(Refusal::HeldByThisThread);
                return Ok(false);
            }
            return Err(Error::Lock(format!(
                "lock {} is already held by this process (pid {}) through another \
                 CronLock\\Database object; waiting for it would deadlock",
                self.describe(session),
                current_pid()
            )));
        }
        session.signal_handled();
        let acquired = self.try_once(session, wait)?;
        if acquired || wait == Wait::Once || self.refusal == Some(Refusal::Interrupted) {
            return Ok(self.finish_acquire(acquired, &info));
        }
        let acquired = self.wait(session, wait)?;
        Ok(self.finish_acquire(acquired, &info))
    }

    fn finish_acquire(&mut self, acquired: bool, info: &SessionInfo) -> bool {
        if acquired {
            self.granted = Some(Granted { session: info.id });
            let name = Rc::clone(&info.held_name);
            HELD.with(|held| held.register(self.object, name));
        }
        acquired
    }

    /// The first try of an acquire; part of the wait (which a pending signal
    /// handler may cut short) unless `wait` is [`Wait::Once`].
    fn try_once(&mut self, session: &mut dyn Session, wait: Wait) -> Result<bool> {
        let query = self.dialect.try_lock(&self.target);
        let row = if wait == Wait::Once {
            query.run(session)
        } else {
            query.run_waiting(session, Duration::ZERO)
        };
        match row {
            Ok(row) => self.lock_result(session, &row),
            Err(err) if self.cut_short_by_signal(session, &err) => Ok(false),
            Err(err) => Err(self.fail(session, "cannot acquire", &err)),
        }
    }

    /// A wait whose connection broke while a PHP signal handler was due (a
    /// signal can break a blocking read of the client library, and a
    /// connection of our own is cut for it): given up like one cut short by
    /// the signal, the connection forgotten.
    fn cut_short_by_signal(&mut self, session: &mut dyn Session, err: &SqlError) -> bool {
        if (interrupted() || session.signal_handled()) && self.dialect.lost_session(err) {
            self.forget_session(session);
            self.refusal = Some(Refusal::Interrupted);
            return true;
        }
        false
    }

    /// A lock statement's answer: 1 acquired, 0 timed out, NULL an error
    /// (e.g. killed).
    fn lock_result(&self, session: &dyn Session, row: &[Value]) -> Result<bool> {
        match row.first().and_then(Value::int) {
            Some(1) => Ok(true),
            Some(0) => Ok(false),
            _ => Err(self.null_answer(session)),
        }
    }

    fn null_answer(&self, session: &dyn Session) -> Error {
        Error::Lock(format!(
            "cannot acquire lock {}: the server answered NULL (was the query killed?)",
            self.describe(session)
        ))
    }

    /// The dialect's wait, in slices of at most [`WAIT_SLICE`], until the
    /// deadline or a PHP signal handler is due.
    fn wait(&mut self, session: &mut dyn Session, wait: Wait) -> Result<bool> {
        let mut slices = WaitSlices {
            wait,
            interrupted: false,
        };
        let waited = self.dialect.wait(session, &self.target, &mut slices);
        if slices.interrupted {
            self.refusal = Some(Refusal::Interrupted);
        }
        match waited {
            Waited::Granted => Ok(true),
            Waited::NotGranted => Ok(false),
            Waited::Null => Err(self.null_answer(session)),
            Waited::Failed(err) if self.cut_short_by_signal(session, &err) => Ok(false),
            Waited::Failed(err) | Waited::SettingsFailed(err) => {
                Err(self.fail(session, "cannot acquire", &err))
            }
        }
    }

    /// acquire() on a held lock: does this session still hold it?
    fn confirm(&mut self, session: &mut dyn Session) -> Result<bool> {
        match self.still_held(session) {
            Ok(true) => Ok(true),
            Ok(false) => {
                self.drop_hold();
                Ok(false)
            }
            Err(err) if self.dialect.lost_session(&err) => {
                self.drop_hold();
                self.forget_session(session);
                Ok(false)
            }
            Err(err) => Err(self.error(session, "cannot check", &err)),
        }
    }

    fn still_held(&self, session: &mut dyn Session) -> std::result::Result<bool, SqlError> {
        let row = self
            .dialect
            .held_by_this_session(&self.target)
            .run(session)?;
        let held = row.first().and_then(Value::int).unwrap_or(0) > 0;
        // The same connection as at acquire: a reconnected session holds nothing.
        let same = match (&self.info, &self.granted) {
            (Some(info), Some(granted)) => info.id == granted.session,
            _ => false,
        };
        Ok(held && same)
    }

    /// Asks the server whether this connection still holds the lock; false
    /// (and not held any more) when it does not or the session is gone.
    /// `ttl` has no meaning here: the lock lives as long as the session.
    ///
    /// # Errors
    ///
    /// [`Error::Lock`] / [`Error::Connection`] for a failure that says
    /// nothing about the session (the lock then stays held as far as we
    /// know).
    pub fn renew(&mut self, session: &mut dyn Session) -> Result<bool> {
        self.adopt_process(session);
        if self.granted.is_none() {
            return Ok(false);
        }
        self.confirm(session)
    }

    /// Releases the lock. `Ok(false)` when this object did not hold it
    /// (never acquired, released, lost with its session, or in a fork child,
    /// which sends nothing).
    ///
    /// # Errors
    ///
    /// [`Error::Lock`] / [`Error::Connection`] when the server refuses. A
    /// connection of the lock's own is then closed, which frees the lock on
    /// the server, so it is not held afterwards. On the user's PDO nothing
    /// can free it but a statement that works, so the lock stays held (as
    /// it is on the server) and the message says what to do first; the next
    /// release(), the destructor or the request's end try again.
    pub fn release(&mut self, session: &mut dyn Session) -> Result<bool> {
        self.adopt_process(session);
        if self.granted.is_none() {
            return Ok(false);
        }
        match self.unlock(session) {
            Ok(released) => {
                self.drop_hold();
                Ok(released)
            }
            Err(err) if self.dialect.lost_session(&err) => {
                self.drop_hold();
                self.forget_session(session);
                Ok(false)
            }
            Err(err) if session.owns_connection() => {
                // Closing our own session is the sure way to free the lock.
                self.drop_hold();
                self.forget_session(session);
                Err(self.error(session, "cannot release", &err))
            }
            Err(err) => Err(Error::Lock(format!(
                "cannot release lock {}: {}. The lock is still held on this PDO's connection: \
                 {}, then call release() again (closing the PDO also frees it)",
                self.describe(session),
                err.message.trim_end_matches('.'),
                self.dialect.advice_before_release(&err)
            ))),
        }
    }

    fn unlock(&self, session: &mut dyn Session) -> std::result::Result<bool, SqlError> {
        let row = self.dialect.unlock(&self.target).run(session)?;
        Ok(row.first().and_then(Value::int) == Some(1))
    }

    /// Who holds the lock now, as the server tells (`None`: nobody, or the
    /// server does not say).
    ///
    /// # Errors
    ///
    /// As for [`DatabaseLock::acquire`].
    pub fn holder(&self, session: &mut dyn Session) -> Result<Option<Holder>> {
        let row = self
            .dialect
            .holder(&self.target)
            .run(session)
            .map_err(|err| self.error(session, "cannot look up the holder of", &err))?;
        let Some(id) = row.first().and_then(Value::int) else {
            return Ok(None);
        };
        Ok(Some(Holder {
            session: id,
            client: row.get(1).and_then(Value::text),
            application: row.get(2).and_then(Value::text),
        }))
    }

    fn session_info(
        &mut self,
        session: &mut dyn Session,
    ) -> std::result::Result<SessionInfo, SqlError> {
        if let Some(info) = &self.info {
            return Ok(info.clone());
        }
        let row = session.query(self.dialect.session_info_sql(), &[])?;
        let info = SessionInfo {
            held_name: Rc::new(HeldName {
                server: row.first().and_then(Value::text).unwrap_or_default(),
                target: self.target.clone(),
            }),
            id: row.get(1).and_then(Value::int).unwrap_or(-1),
        };
        if !session.owns_connection() {
            self.dialect.protect_users_connection(&row);
        }
        self.info = Some(info.clone());
        Ok(info)
    }

    fn drop_hold(&mut self) {
        self.granted = None;
        HELD.with(|held| held.unregister(self.object));
    }

    fn forget_session(&mut self, session: &mut dyn Session) {
        self.info = None;
        session.disconnect();
    }

    /// In a fork child: the parent's hold and session are not ours.
    fn adopt_process(&mut self, session: &mut dyn Session) {
        if !self.owner.is_this_process() {
            self.owner = Owner::this_process();
            self.granted = None;
            self.info = None;
            session.disconnect();
        }
    }

    /// A failed statement while trying to lock: a lost connection is a
    /// [`Error::Connection`], and our own connection is dropped for a new
    /// one next time.
    fn fail(&mut self, session: &mut dyn Session, what: &str, err: &SqlError) -> Error {
        let error = self.error(session, what, err);
        if self.dialect.lost_session(err) {
            self.forget_session(session);
        }
        error
    }

    fn error(&self, session: &dyn Session, what: &str, err: &SqlError) -> Error {
        let message = format!(
            "{what} lock {}: {}",
            self.describe(session),
            err.clone().explain_connect_failure().message
        );
        if self.dialect.lost_session(err) {
            Error::Connection(message)
        } else {
            Error::Lock(message)
        }
    }

    /// After a PHP exception (or `exit()`) thrown by a signal handler in the
    /// middle of an acquire: the server may have granted the lock in the
    /// statement whose answer was lost. A connection of our own is closed
    /// (which frees it); on the user's PDO it is unlocked if held.
    pub fn abandon(&mut self, session: &mut dyn Session) {
        if self.granted.is_some() {
            return;
        }
        if session.owns_connection() {
            self.forget_session(session);
            return;
        }
        let granted = match self.dialect.granted_before_abandon(&self.target) {
            None => true,
            Some(query) => query
                .run(session)
                .is_ok_and(|row| row.first().and_then(Value::int) == Some(1)),
        };
        if granted {
            let _ = self.unlock(session);
        }
    }

    /// Claims `window` for `seconds` in `table` (see `claims.rs`): true
    /// when this call claimed it, false when another call's claim of it
    /// still runs. Needs no hold of the lock. A connection of ours that died
    /// while idle is reopened and the claim asked once more (with the same
    /// holder token: a claim the server took before the answer was lost is
    /// still this call's).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidValue`] for a window or length `claims.rs` refuses;
    /// [`Error::Lock`] inside a transaction of the PDO given, when the table
    /// is missing (with its CREATE TABLE) or the server refuses;
    /// [`Error::Connection`] when the server cannot be reached.
    pub fn claim(
        &mut self,
        session: &mut dyn Session,
        table: &ClaimsTable,
        window: &[u8],
        seconds: f64,
    ) -> Result<Claimed> {
        let window = claims::check_window(window)?;
        let seconds = claims::check_seconds(seconds)?;
        self.adopt_process(session);
        let what = format!("cannot claim window '{}' of", shorten(window));
        if !session.owns_connection() && session.in_transaction() {
            return Err(Error::Lock(format!(
                "{what} lock {}: the PDO given is inside a transaction (or has autocommit off), \
                 where a claim would be seen by other hosts only at its COMMIT and undone by a \
                 rollback; claim outside it",
                self.describe(session)
            )));
        }
        let key = claim_key(self.name.as_bytes(), window);
        let holder = claims::holder_token();
        let claimed = match claims::claim_once(self.dialect, session, table, &key, seconds, &holder)
        {
            Err(err)
                if self.dialect.lost_session(&err)
                    && !err.connecting
                    && session.owns_connection() =>
            {
                self.forget_session(session);
                claims::claim_once(self.dialect, session, table, &key, seconds, &holder)
            }
            other => other,
        };
        claimed.map_err(|err| {
            if self.dialect.lost_session(&err) {
                self.forget_session(session);
            }
            if self.dialect.missing_table(&err) {
                Error::Lock(format!(
                    "{what} lock {}: {}",
                    self.describe(session),
                    claims::missing_table_advice(self.dialect, table)
                ))
            } else {
                self.error(session, &what, &err)
            }
        })
    }

    /// For the drop of the PHP object: whether a release is due.
    pub fn needs_release(&self) -> bool {
        self.is_held()
    }
}

impl Drop for DatabaseLock {
    fn drop(&mut self) {
        if self.owner.is_this_process() {
            let _ = HELD.try_with(|held| held.unregister(self.object));
        }
    }
}

/// The slices of one wait (see [`Slices`]).
struct WaitSlices {
    wait: Wait,
    /// Set when the wait stopped because a PHP signal handler is due.
    interrupted: bool,
}

impl Slices for WaitSlices {
    fn next(&mut self, session: &mut dyn Session) -> Option<Duration> {
        if interrupted() || session.signal_handled() {
            self.interrupted = true;
            return None;
        }
        match self.wait.remaining() {
            None => Some(WAIT_SLICE),
            Some(Duration::ZERO) => None,
            Some(left) => Some(left.min(WAIT_SLICE)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::for_driver;
    use super::super::mysql::MySql;
    use super::super::postgres::Postgres;
    use super::*;
    use std::collections::VecDeque;

    #[test]
    fn names_are_validated_and_messages_cut() {
        assert!(matches!(
            DatabaseLock::new(&MySql, ""),
            Err(Error::InvalidValue { .. })
        ));
        assert!(DatabaseLock::new(&MySql, "a\0b")
            .unwrap_err()
            .to_string()
            .contains("$name"));
        let long = "é".repeat(300);
        assert_eq!(shorten(&long).chars().count(), 201);
        assert!(shorten(&long).ends_with('…'));
        assert!(for_driver("sqlite")
            .unwrap_err()
            .to_string()
            .contains("'sqlite'"));
    }

    /// A scripted session: each query pops the next answer.
    struct Script {
        answers: VecDeque<std::result::Result<Vec<Value>, SqlError>>,
        sent: Vec<String>,
        owns: bool,
        disconnects: usize,
    }

    impl Script {
        fn new(owns: bool, answers: Vec<std::result::Result<Vec<Value>, SqlError>>) -> Self {
            Script {
                answers: answers.into(),
                sent: Vec::new(),
                owns,
                disconnects: 0,
            }
        }
    }

    impl Session for Script {
        fn query(
            &mut self,
            sql: &str,
            params: &[&str],
        ) -> std::result::Result<Vec<Value>, SqlError> {
            self.sent.push(format!("{sql} {params:?}"));
            // Out of script: the lock is busy.
            self.answers.pop_front().unwrap_or_else(|| one(0))
        }
        fn execute(&mut self, sql: &str, params: &[&str]) -> std::result::Result<u64, SqlError> {
            let row = self.query(sql, params)?;
            Ok(row.first().and_then(Value::int).unwrap_or(0) as u64)
        }
        fn in_transaction(&mut self) -> bool {
            false
        }
        fn owns_connection(&self) -> bool {
            self.owns
        }
        fn disconnect(&mut self) {
            self.disconnects += 1;
        }
        fn signal_handled(&mut self) -> bool {
            false
        }
        fn label(&self) -> String {
            "MySQL/MariaDB at mysql:host=db".to_owned()
        }
    }

    fn info(id: i64) -> std::result::Result<Vec<Value>, SqlError> {
        Ok(vec![Value::Text("db:3306".into()), Value::Int(id)])
    }

    fn one(v: i64) -> std::result::Result<Vec<Value>, SqlError> {
        Ok(vec![Value::Int(v)])
    }

    fn gone() -> std::result::Result<Vec<Value>, SqlError> {
        Err(SqlError {
            sqlstate: "HY000".into(),
            code: Some(2006),
            message: "MySQL server has gone away".into(),
            connecting: false,
        })
    }

    #[test]
    fn acquire_on_held_asks_the_server_and_drops_a_lost_hold() {
        let mut lock = DatabaseLock::new(&MySql, "job").unwrap();
        let mut s = Script::new(true, vec![info(7), one(1), one(1), one(0)]);
        assert!(lock.acquire(&mut s, Wait::Once).unwrap());
        assert!(lock.acquire(&mut s, Wait::Once).unwrap(), "still ours");
        assert!(
            !lock.acquire(&mut s, Wait::Once).unwrap(),
            "server says lost"
        );
        assert!(!lock.is_held());
        assert!(s.sent[2].contains("IS_USED_LOCK"));
        assert_eq!(s.sent.len(), 4);
    }

    #[test]
    fn renew_is_false_when_the_session_is_gone_and_a_dsn_lock_reconnects() {
        let mut lock = DatabaseLock::new(&MySql, "job").unwrap();
        let mut s = Script::new(true, vec![info(7), one(1), gone(), info(8), one(1)]);
        assert!(lock.acquire(&mut s, Wait::Once).unwrap());
        assert!(!lock.renew(&mut s).unwrap());
        assert!(!lock.is_held());
        assert_eq!(s.disconnects, 1);
        assert!(!lock.release(&mut s).unwrap(), "nothing to release");
        assert!(lock.acquire(&mut s, Wait::Once).unwrap(), "new session");
        assert_eq!(lock.granted.as_ref().unwrap().session, 8);
    }

    fn refused(
        sqlstate: &str,
        code: i64,
        message: &str,
    ) -> std::result::Result<Vec<Value>, SqlError> {
        Err(SqlError {
            sqlstate: sqlstate.into(),
            code: Some(code),
            message: message.into(),
            connecting: false,
        })
    }

    #[test]
    fn a_release_the_users_pdo_refuses_keeps_the_hold_for_the_next_try() {
        let mut lock = DatabaseLock::new(&Postgres, "job").unwrap();
        let aborted =
            "current transaction is aborted, commands ignored until end of transaction block";
        let mut s = Script::new(
            false,
            vec![info(7), one(1), refused("25P02", 7, aborted), one(1)],
        );
        assert!(lock.acquire(&mut s, Wait::Once).unwrap());
        let err = lock.release(&mut s).unwrap_err();
        assert!(matches!(err, Error::Lock(_)));
        let text = err.to_string();
        assert!(
            text.contains(aborted) && text.contains("still held"),
            "{text}"
        );
        assert!(text.contains("roll back the transaction"), "{text}");
        assert!(
            lock.is_held(),
            "the server still holds it: so does the object"
        );
        assert!(lock.needs_release(), "the destructor tries again");
        assert_eq!(s.disconnects, 0, "the user's connection is left alone");
        assert!(lock.release(&mut s).unwrap(), "the next release() frees it");
        assert!(!lock.is_held());

        let mut lock = DatabaseLock::new(&MySql, "job").unwrap();
        let busy = "Cannot execute queries while other unbuffered queries are active.";
        let mut s = Script::new(false, vec![info(7), one(1), refused("HY000", 2014, busy)]);
        assert!(lock.acquire(&mut s, Wait::Once).unwrap());
        let text = lock.release(&mut s).unwrap_err().to_string();
        assert!(
            text.contains("closeCursor()") && !text.contains("active.."),
            "{text}"
        );
        assert!(lock.is_held());
    }

    #[test]
    fn a_release_our_own_connection_refuses_closes_it_which_frees_the_lock() {
        let mut lock = DatabaseLock::new(&Postgres, "job").unwrap();
        let mut s = Script::new(
            true,
            vec![info(7), one(1), refused("XX000", 1, "internal error")],
        );
        assert!(lock.acquire(&mut s, Wait::Once).unwrap());
        assert!(lock.release(&mut s).is_err());
        assert!(!lock.is_held());
        assert_eq!(s.disconnects, 1);
    }

    #[test]
    fn a_lost_idle_connection_of_ours_is_reopened_once_but_a_users_is_an_error() {
        let mut lock = DatabaseLock::new(&MySql, "job").unwrap();
        let mut s = Script::new(true, vec![gone(), info(9), one(1)]);
        assert!(lock.acquire(&mut s, Wait::Once).unwrap());
        let mut lock = DatabaseLock::new(&MySql, "job2").unwrap();
        let mut s = Script::new(false, vec![gone()]);
        assert!(matches!(
            lock.acquire(&mut s, Wait::Once),
            Err(Error::Connection(_))
        ));
    }

    #[test]
    fn two_objects_in_one_thread_never_wait_on_each_other() {
        let mut a = DatabaseLock::new(&MySql, "same").unwrap();
        let mut b = DatabaseLock::new(&MySql, "same").unwrap();
        let mut s = Script::new(false, vec![info(7), one(1), info(7)]);
        assert!(a.acquire(&mut s, Wait::Once).unwrap());
        assert!(
            !b.acquire(&mut s, Wait::Once).unwrap(),
            "busy, no GET_LOCK sent"
        );
        let err = b.acquire(&mut s, Wait::Forever).unwrap_err().to_string();
        assert!(
            err.contains("through another CronLock\\Database object"),
            "{err}"
        );
        assert_eq!(s.sent.len(), 3);
        let mut s = Script::new(false, vec![one(1), one(1)]);
        assert!(a.release(&mut s).unwrap());
        assert!(b.acquire(&mut s, Wait::Forever).unwrap());
    }

    #[test]
    fn waits_in_slices_of_at_most_100_ms_until_the_deadline() {
        let mut lock = DatabaseLock::new(&MySql, "slices").unwrap();
        let mut s = Script::new(true, vec![info(7)]);
        let started = std::time::Instant::now();
        let wait = Wait::from_seconds("$timeout", 0.2).unwrap();
        assert!(!lock.acquire(&mut s, wait).unwrap());
        assert!(started.elapsed() >= Duration::from_millis(200));
        // the name as a hex literal, which the process list shows
        assert!(s.sent[1].starts_with("SELECT GET_LOCK(X'736c69636573', 0) []"));
        for query in &s.sent[2..] {
            let seconds: f64 = query
                .rsplit('"')
                .nth(1)
                .and_then(|s| s.parse().ok())
                .expect("a timeout parameter");
            assert!(
                query.starts_with("SELECT GET_LOCK(X'736c69636573', ?) [\"") && seconds <= 0.1,
                "{query}"
            );
        }
    }

    /// Issue 17 item 3: a name with a line break stays one line in every
    /// message, escaped as File and Redis messages escape it.
    #[test]
    fn a_name_with_a_line_break_is_escaped_in_every_message() {
        let name = "nightly\nreport\u{1b}";
        let mut lock = DatabaseLock::new(&MySql, name).unwrap();
        let mut s = Script::new(
            false,
            vec![Err(SqlError {
                sqlstate: "HY000".into(),
                code: Some(2002),
                message: "Connection refused".into(),
                connecting: true,
            })],
        );
        let refused = lock.acquire(&mut s, Wait::Once).unwrap_err();
        assert!(matches!(refused, Error::Connection(_)));
        let mut a = DatabaseLock::new(&Postgres, name).unwrap();
        let mut b = DatabaseLock::new(&Postgres, name).unwrap();
        let mut s = Script::new(false, vec![info(7), one(1), info(7)]);
        assert!(a.acquire(&mut s, Wait::Once).unwrap());
        let deadlock = b.acquire(&mut s, Wait::Forever).unwrap_err();
        assert!(matches!(deadlock, Error::Lock(_)));
        for message in [refused.to_string(), deadlock.to_string()] {
            assert!(
                !message.contains('\n') && !message.contains('\u{1b}'),
                "{message}"
            );
            assert!(message.contains("'nightly\\nreport\\u{1b}'"), "{message}");
        }
    }

    #[test]
    fn errors_name_the_lock_and_classify_lost_sessions() {
        let mut lock = DatabaseLock::new(&Postgres, "pg-job").unwrap();
        let mut s = Script::new(
            true,
            vec![
                Err(SqlError {
                    sqlstate: "08006".into(),
                    code: Some(7),
                    message:
                        "connection to server at \"127.0.0.1\", port 1 failed: Connection refused"
                            .into(),
                    connecting: true,
                }),
                Err(SqlError {
                    sqlstate: "08006".into(),
                    code: Some(7),
                    message: "Connection refused".into(),
                    connecting: true,
                }),
            ],
        );
        let err = lock.acquire(&mut s, Wait::Once).unwrap_err();
        assert!(matches!(err, Error::Connection(_)));
        let text = err.to_string();
        assert!(
            text.contains("'pg-job'") && text.contains("advisory key"),
            "{text}"
        );
        let denied = SqlError {
            sqlstate: "42501".into(),
            code: None,
            message: "permission denied".into(),
            connecting: false,
        };
        assert!(!Postgres.lost_session(&denied));
    }
}

//! The PDO session of `CronLock\Database`: runs the lock's statements on a
//! `\PDO`, the user's or one the lock opens from a DSN and keeps, and
//! turns PDO's errors into [`SqlError`]s.
//!
//! The traps this closes:
//! - statements run with PDO in silent error mode, read back through
//!   errorInfo(): an exception from a PDO call makes the engine drop a
//!   signal handler due when the call returns, and PostgreSQL waits end in
//!   an error every slice; the user's error mode is put back;
//! - a statement's first run on a connection is one round trip, whatever
//!   the driver's default; statements are kept prepared between runs
//!   (`pdo/statements.rs`);
//! - a statement on the lock's own connection is watched
//!   (`lock::database::watch_statement`): a server that stops answering
//!   cannot block it for ever; the user's PDO is never cut;
//! - the lock's own connection: never persistent (it would outlive the
//!   object, and so would the lock), its sockets tracked so that a fork
//!   child never talks over them or ends the session, its idle limits
//!   lifted, and mysqlnd's read timeout bounding the handshake;
//! - an exception thrown by a signal handler during a PDO call is left
//!   pending for PHP, never taken for a PDO error;
//! - no message shows a password: the DSN's and the option's are blotted
//!   out of every driver message.

mod statements;

use super::engine;
use super::options::Options;
use crate::error::Error;
use crate::lock::database::{self, Dialect, Session, SqlError, Value};
use crate::lock::owner::Owner;
use ext_php_rs::convert::IntoZval;
use ext_php_rs::prelude::*;
use ext_php_rs::types::{ZendHashTable, ZendObject, Zval};
use ext_php_rs::zend::{ClassEntry, ExecutorGlobals};
use statements::{call, exception_message, long, sql_error, Statements};

const PDO_ATTR_ERRMODE: i64 = 3;
const PDO_ERRMODE_SILENT: i64 = 0;
const PDO_ERRMODE_EXCEPTION: i64 = 2;
const PDO_ATTR_EMULATE_PREPARES: i64 = 20;
const PDO_ATTR_DRIVER_NAME: i64 = 16;
const PDO_ATTR_PERSISTENT: i64 = 12;
const PDO_ATTR_AUTOCOMMIT: i64 = 0;
const PDO_MYSQL_ATTR_USE_BUFFERED_QUERY: i64 = 1000;
const PDO_MYSQL_ATTR_FOUND_ROWS: i64 = 1005;
const MYSQLND_READ_TIMEOUT: &str = "mysqlnd.net_read_timeout";

/// The connection of a lock: the user's PDO, or one of its own.
enum Connection {
    User(UserPdo),
    Own(OwnConnection),
}

/// The user's PDO and the statements kept on it (emulated: nothing on its
/// server).
struct UserPdo {
    statements: Statements,
    pdo: Zval,
}

struct OwnConnection {
    dsn: String,
    user: Option<String>,
    password: Option<String>,
    /// The password option and any password in the DSN: cut out of
    /// every message.
    secrets: Vec<String>,
    pdo_options: Vec<(i64, Zval)>,
    /// Statements may be prepared on the server: not when the user asked
    /// for emulated prepares (`PDO::ATTR_EMULATE_PREPARES`, say for a proxy
    /// that has no server-side statements).
    server_statements: bool,
    open: Option<OpenPdo>,
}

/// A PDO the lock opened, with the socket descriptors it made, which a
/// fork child must never use (its PDO's destructor would end our session),
/// and the statements kept on it (dropped first: they hold the PDO).
struct OpenPdo {
    statements: Statements,
    pdo: Zval,
    fds: Vec<i32>,
    opened_by: Owner,
}

impl Drop for OpenPdo {
    fn drop(&mut self) {
        if self.opened_by.is_this_process() {
            // pdo_pgsql deallocates each statement prepared on the server, a
            // round trip each: watched like any statement.
            let watch = database::watch_statement(&self.fds, None, None);
            self.statements = Statements::own(false);
            drop(watch);
            for &fd in &self.fds {
                database::untrack_connection_fd(fd);
            }
        }
    }
}

pub struct PdoSession {
    dialect: &'static dyn Dialect,
    connection: Connection,
    label: String,
}

impl PdoSession {
    /// On the user's PDO.
    ///
    /// # Errors
    ///
    /// `CronLock\LockException` when the PDO cannot be asked its driver, or
    /// it has no dialect.
    pub fn user(pdo: &Zval) -> PhpResult<Self> {
        let driver = pdo
            .try_call_method("getAttribute", vec![&PDO_ATTR_DRIVER_NAME])
            .ok()
            .and_then(|d| d.str().map(str::to_owned));
        if let Some(exception) = ExecutorGlobals::take_exception() {
            let message = exception_message(&exception);
            return Err(Error::Lock(format!("cannot use the PDO given: {message}")).into());
        }
        let dialect = database::for_driver(&driver.unwrap_or_default())?;
        Ok(PdoSession {
            dialect,
            connection: Connection::User(UserPdo {
                statements: Statements::users(),
                pdo: pdo.shallow_clone(),
            }),
            label: format!("{}, the PDO given", dialect.product()),
        })
    }

    /// On a connection of the lock's own, opened at the first statement.
    ///
    /// # Errors
    ///
    /// `\ValueError` for a DSN or `'pdo_options'` it refuses,
    /// `CronLock\LockException` for a driver without a dialect.
    pub fn own(dsn: &str, options: &Options) -> PhpResult<Self> {
        if dsn.contains('\0') {
            return Err(Error::value("$connection", "must not contain NUL bytes").into());
        }
        let driver = dsn.split_once(':').map_or("", |(driver, _)| driver);
        if driver.is_empty() {
            return Err(Error::value(
                "$connection",
                "must be a PDO or a PDO DSN such as 'mysql:host=db;dbname=app' or 'pgsql:host=db;dbname=app'",
            )
            .into());
        }
        let dialect = database::for_driver(driver)?;
        let pdo_options = match options.array("pdo_options")? {
            None => Vec::new(),
            Some(table) => {
                let mut list = Vec::new();
                let mut entries = table.iter();
                while let Some((key, value)) = entries.next_zval() {
                    let Some(attribute) = key.long() else {
                        return Err(Error::value(
                            options.arg_name("pdo_options"),
                            "must have PDO::ATTR_* constants (integers) as keys",
                        )
                        .into());
                    };
                    if attribute == PDO_ATTR_PERSISTENT && value.bool() != Some(false) {
                        // A persistent connection outlives the object and is
                        // shared with other PDOs of the process: the lock
                        // would too.
                        return Err(Error::value(
                            options.arg_name("pdo_options"),
                            "must not make the lock's own connection persistent (PDO::ATTR_PERSISTENT)",
                        )
                        .into());
                    }
                    list.push((attribute, value.shallow_clone()));
                }
                list
            }
        };
        let server_statements = !pdo_options.iter().any(|(attribute, value)| {
            *attribute == PDO_ATTR_EMULATE_PREPARES && value.bool() == Some(true)
        });
        let password = options.string("password")?;
        let mut secrets = database::dsn_secrets(dsn);
        secrets.extend(password.clone());
        Ok(PdoSession {
            dialect,
            connection: Connection::Own(OwnConnection {
                dsn: dsn.to_owned(),
                user: options.string("user")?,
                password,
                secrets,
                pdo_options,
                server_statements,
                open: None,
            }),
            label: format!("{} at {}", dialect.product(), database::dsn_label(dsn)),
        })
    }

    pub fn dialect(&self) -> &'static dyn Dialect {
        self.dialect
    }

    /// The connection to run a statement on, opened first when it is one
    /// of the lock's own and none is open.
    fn link(&mut self) -> Result<Link<'_>, SqlError> {
        let dialect = self.dialect;
        match &mut self.connection {
            Connection::User(user) => Ok(Link {
                pdo: &user.pdo,
                statements: &mut user.statements,
                secrets: &[],
                watched: None,
            }),
            Connection::Own(own) => {
                if own
                    .open
                    .as_ref()
                    .is_some_and(|open| !open.opened_by.is_this_process())
                {
                    // A fork child: the parent's connection was detached at
                    // fork; never talk over it.
                    std::mem::forget(own.open.take());
                }
                if own.open.is_none() {
                    own.open = Some(connect(own, dialect)?);
                }
                let open = own.open.as_mut().expect("just opened");
                Ok(Link {
                    pdo: &open.pdo,
                    statements: &mut open.statements,
                    secrets: &own.secrets,
                    watched: Some(&open.fds),
                })
            }
        }
    }
}

impl Session for PdoSession {
    fn query(&mut self, sql: &str, params: &[&str]) -> Result<Vec<Value>, SqlError> {
        self.run(None, |statements, pdo, secrets| {
            statements.run(pdo, sql, params, secrets)
        })
    }

    fn wait_query(
        &mut self,
        sql: &str,
        params: &[&str],
        slice: std::time::Duration,
    ) -> Result<Vec<Value>, SqlError> {
        self.run(Some(slice), |statements, pdo, secrets| {
            statements.run(pdo, sql, params, secrets)
        })
    }

    fn execute(&mut self, sql: &str, params: &[&str]) -> Result<u64, SqlError> {
        self.run(None, |statements, pdo, secrets| {
            statements.count(pdo, sql, params, secrets)
        })
    }

    fn in_transaction(&mut self) -> bool {
        let mysql = self.dialect.driver() == "mysql";
        let Ok(link) = self.link() else {
            return false;
        };
        let asked = |method: &str, args: &[Zval]| {
            call(link.pdo, method, args, link.secrets)
                .ok()
                .and_then(|answer| answer.bool().or_else(|| answer.long().map(|n| n != 0)))
        };
        // Only pdo_mysql knows autocommit (pdo_pgsql has no such attribute).
        asked("intransaction", &[]).unwrap_or(false)
            || (mysql && asked("getattribute", &[long(PDO_ATTR_AUTOCOMMIT)]) == Some(false))
    }

    fn owns_connection(&self) -> bool {
        matches!(self.connection, Connection::Own(_))
    }

    fn disconnect(&mut self) {
        if let Connection::Own(own) = &mut self.connection {
            match own.open.take() {
                Some(open) if !open.opened_by.is_this_process() => std::mem::forget(open),
                // Dropping the last reference closes the connection.
                other => drop(other),
            }
        }
    }

    fn signal_handled(&mut self) -> bool {
        INTERRUPTS_DISPATCHED.with(|seen| seen.replace(false))
    }

    fn label(&self) -> String {
        self.label.clone()
    }
}

impl PdoSession {
    /// One statement (`statement`, run on the connection's kept
    /// statements); on a connection of the lock's own it is watched (see
    /// [`database::watch_statement`]), so a server that stops answering
    /// cannot block it for ever: the connection is then cut and closed.
    /// The user's PDO is never cut. `slice`: how long the statement waits
    /// on the server.
    fn run<T>(
        &mut self,
        slice: Option<std::time::Duration>,
        statement: impl FnOnce(&mut Statements, &Zval, &[String]) -> Result<T, SqlError>,
    ) -> Result<T, SqlError> {
        let dialect = self.dialect;
        let link = self.link()?;
        let watch = link
            .watched
            .map(|fds| database::watch_statement(fds, slice, super::shim::vm_interrupt_flag()));
        // PDO cannot be called while an exception is pending (the
        // request-shutdown sweep, cron_guard()'s way out of a throwing job).
        let result = if engine::exception_pending() {
            engine::with_exception_set_aside(|| silently(link, statement))
        } else {
            silently(link, statement)
        };
        if let Some(Err(cut)) = watch.map(|watch| watch.finish(dialect)) {
            self.disconnect();
            return Err(cut);
        }
        result
    }
}

/// One connection as a statement needs it (see [`PdoSession::link`]).
struct Link<'a> {
    pdo: &'a Zval,
    statements: &'a mut Statements,
    /// Cut out of every message.
    secrets: &'a [String],
    /// The sockets of a connection of the lock's own, whose statements are
    /// watched; `None` for the user's PDO, which is never cut.
    watched: Option<&'a [i32]>,
}

/// One statement with PDO in silent error mode, read back through
/// errorInfo(): an exception thrown by a PDO call makes the engine drop a
/// signal handler that is due when the call returns (it cannot call PHP
/// code while an exception is pending), and PostgreSQL waits end in an
/// error (55P03) every slice. The user's error mode is put back.
fn silently<T>(
    link: Link<'_>,
    statement: impl FnOnce(&mut Statements, &Zval, &[String]) -> Result<T, SqlError>,
) -> Result<T, SqlError> {
    let Link {
        pdo,
        statements,
        secrets,
        watched,
    } = link;
    // A connection of our own is always in silent mode.
    let user_mode = if watched.is_none() {
        let mode = call(pdo, "getattribute", &[long(PDO_ATTR_ERRMODE)], secrets)?
            .long()
            .unwrap_or(PDO_ERRMODE_EXCEPTION);
        if mode != PDO_ERRMODE_SILENT {
            call(
                pdo,
                "setattribute",
                &[long(PDO_ATTR_ERRMODE), long(PDO_ERRMODE_SILENT)],
                secrets,
            )?;
        }
        Some(mode)
    } else {
        None
    };
    let result = statement(statements, pdo, secrets);
    if let Some(mode) = user_mode.filter(|&mode| mode != PDO_ERRMODE_SILENT) {
        let restore = || {
            call(
                pdo,
                "setattribute",
                &[long(PDO_ATTR_ERRMODE), long(mode)],
                secrets,
            )
        };
        let restored = if engine::exception_pending() {
            engine::with_exception_set_aside(restore)
        } else {
            restore()
        };
        restored?;
    }
    result
}

thread_local! {
    /// Set whenever the engine runs its interrupt function (pending signal
    /// handlers, through pcntl) on this thread.
    static INTERRUPTS_DISPATCHED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

type InterruptFunction = unsafe extern "C" fn(*mut ext_php_rs::ffi::zend_execute_data);
static PREVIOUS_INTERRUPT: std::sync::OnceLock<Option<InterruptFunction>> =
    std::sync::OnceLock::new();

unsafe extern "C" fn note_interrupt(execute_data: *mut ext_php_rs::ffi::zend_execute_data) {
    INTERRUPTS_DISPATCHED.with(|seen| seen.set(true));
    if let Some(Some(previous)) = PREVIOUS_INTERRUPT.get() {
        // SAFETY: the function pcntl (or another extension) installed,
        // called as the engine would have.
        unsafe { previous(execute_data) };
    }
}

/// Wraps the engine's interrupt function, once, at the first
/// `new CronLock\Database` (after every extension's MINIT, so pcntl's is
/// there to wrap).
pub fn hook_interrupts() {
    PREVIOUS_INTERRUPT.get_or_init(|| {
        // SAFETY: a function pointer the engine reads at interrupts; swapped
        // once, from the PHP thread, before any wait of ours.
        unsafe {
            let previous = ext_php_rs::ffi::zend_interrupt_function;
            ext_php_rs::ffi::zend_interrupt_function = Some(note_interrupt);
            previous
        }
    });
}

fn connect(own: &OwnConnection, dialect: &dyn Dialect) -> Result<OpenPdo, SqlError> {
    let fail = |message: String| SqlError {
        sqlstate: "HY000".to_owned(),
        code: None,
        message,
        connecting: true,
    };
    let class = ClassEntry::try_find("PDO")
        .ok_or_else(|| fail("the PHP pdo extension is not loaded".to_owned()))?;
    let mut options = ZendHashTable::new();
    for (attribute, value) in &own.pdo_options {
        let _ = options.insert_at_index(*attribute, value.shallow_clone());
    }
    // Ours whatever the user passed: errors are read from errorInfo() (see
    // silently()).
    let _ = options.insert_at_index(PDO_ATTR_ERRMODE, PDO_ERRMODE_SILENT);
    // Emulated (one round trip per statement) unless a statement asks for
    // the server's (pdo/statements.rs).
    let _ = options.insert_at_index(PDO_ATTR_EMULATE_PREPARES, true);
    if dialect.driver() == "mysql" {
        // Buffered whatever the user passed: a kept statement's result is
        // not closed after its row is read (pdo/statements.rs). Changed rows
        // counted, not found ones: a claim's answer (mysql.rs).
        let _ = options.insert_at_index(PDO_MYSQL_ATTR_USE_BUFFERED_QUERY, true);
        let _ = options.insert_at_index(PDO_MYSQL_ATTR_FOUND_ROWS, false);
    }
    let pdo = ZendObject::new(class)
        .into_zval(false)
        .map_err(|err| fail(format!("cannot create a PDO: {err}")))?;
    let before = database::open_sockets();
    let user = own
        .user
        .as_deref()
        .map_or(Zval::null(), |u| u.into_zval(false).unwrap_or_default());
    let password = own
        .password
        .as_deref()
        .map_or(Zval::null(), |p| p.into_zval(false).unwrap_or_default());
    // mysqlnd bounds each read of a connection by the read timeout it had
    // when it was opened: the bound for platforms without the statement
    // watch, and for the handshake (the watch needs the connection's socket).
    let read_timeout = (dialect.driver() == "mysql").then(|| {
        let seconds = (database::ANSWER_GRACE.as_secs() + 2).to_string();
        engine::ini_set_for_now(MYSQLND_READ_TIMEOUT, &seconds)
    });
    let constructed =
        pdo.try_call_method("__construct", vec![&own.dsn, &user, &password, &options]);
    if let Some(Some(previous)) = read_timeout {
        engine::ini_set_for_now(MYSQLND_READ_TIMEOUT, &previous);
    }
    if let Some(exception) = ExecutorGlobals::take_exception() {
        return Err(sql_error(&exception, true, &own.secrets));
    }
    constructed.map_err(|err| fail(format!("PDO::__construct() could not be called: {err}")))?;
    let fds: Vec<i32> = database::open_sockets()
        .into_iter()
        .filter(|fd| !before.contains(fd))
        .collect();
    for &fd in &fds {
        database::track_connection_fd(fd);
    }
    let open = OpenPdo {
        statements: Statements::own(own.server_statements),
        pdo,
        fds,
        opened_by: Owner::this_process(),
    };
    let watch = database::watch_statement(&open.fds, None, None);
    set_up_own_connection(&open.pdo, dialect);
    watch.finish(dialect).map_err(|cut| SqlError {
        connecting: true,
        ..cut
    })?;
    Ok(open)
}

/// The dialect's statements for a connection of the lock's own (its idle
/// limits lifted, its session named), best effort: a server that refuses
/// a setting keeps its own.
fn set_up_own_connection(pdo: &Zval, dialect: &dyn Dialect) {
    for query in dialect.own_connection_setup(&database::application_name()) {
        if query.params.is_empty() {
            let _ = pdo.try_call_method("exec", vec![&query.sql]);
        } else if let Ok(statement) =
            pdo.try_call_method("prepare", vec![&query.sql, &statements::emulated()])
        {
            if ExecutorGlobals::take_exception().is_none() {
                let _ = statement.try_call_method("execute", vec![&query.params]);
            }
        }
        let _ = ExecutorGlobals::take_exception();
    }
}

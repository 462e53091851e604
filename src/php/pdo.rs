//! The PDO session of `CronLock\Database`: runs the lock's statements on a
//! `\PDO`, the user's or one the lock opens from a DSN and keeps, and
//! turns PDO's errors into [`SqlError`]s.
//!
//! The traps this closes:
//! - statements run with PDO in silent error mode, read back through
//!   errorInfo(): an exception from a PDO call makes the engine drop a
//!   signal handler due when the call returns, and PostgreSQL waits end in
//!   an error every slice; the user's error mode is put back;
//! - emulated prepares: one round trip per statement, whatever the
//!   driver's default;
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

use super::engine;
use super::options::Options;
use crate::error::Error;
use crate::lock::database::{self, Dialect, Session, SqlError, Value};
use crate::lock::owner::Owner;
use ext_php_rs::convert::{IntoZval, IntoZvalDyn};
use ext_php_rs::prelude::*;
use ext_php_rs::types::{ZendHashTable, ZendObject, Zval};
use ext_php_rs::zend::{ClassEntry, ExecutorGlobals};

const PDO_ATTR_ERRMODE: i64 = 3;
const PDO_ERRMODE_SILENT: i64 = 0;
const PDO_ERRMODE_EXCEPTION: i64 = 2;
const PDO_ATTR_EMULATE_PREPARES: i64 = 20;
const PDO_ATTR_DRIVER_NAME: i64 = 16;
const PDO_ATTR_PERSISTENT: i64 = 12;
const PDO_FETCH_NUM: i64 = 3;
const MYSQLND_READ_TIMEOUT: &str = "mysqlnd.net_read_timeout";

/// The connection of a lock: the user's PDO, or one of its own.
enum Connection {
    User(Zval),
    Own(OwnConnection),
}

struct OwnConnection {
    dsn: String,
    user: Option<String>,
    password: Option<String>,
    /// The password option and any password in the DSN: cut out of
    /// every message.
    secrets: Vec<String>,
    pdo_options: Vec<(i64, Zval)>,
    open: Option<OpenPdo>,
}

/// A PDO the lock opened, with the socket descriptors it made, which a
/// fork child must never use (its PDO's destructor would end our session).
struct OpenPdo {
    pdo: Zval,
    fds: Vec<i32>,
    opened_by: Owner,
}

impl Drop for OpenPdo {
    fn drop(&mut self) {
        if self.opened_by.is_this_process() {
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
            connection: Connection::User(pdo.shallow_clone()),
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
                open: None,
            }),
            label: format!("{} at {}", dialect.product(), database::dsn_label(dsn)),
        })
    }

    pub fn dialect(&self) -> &'static dyn Dialect {
        self.dialect
    }

    fn secrets(&self) -> &[String] {
        match &self.connection {
            Connection::Own(own) => &own.secrets,
            Connection::User(_) => &[],
        }
    }

    fn pdo(&mut self) -> Result<&Zval, SqlError> {
        let dialect = self.dialect;
        match &mut self.connection {
            Connection::User(pdo) => Ok(pdo),
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
                Ok(&own.open.as_ref().expect("just opened").pdo)
            }
        }
    }

    fn error(&self, exception: &ZendObject, connecting: bool) -> SqlError {
        sql_error(exception, connecting, self.secrets())
    }
}

impl Session for PdoSession {
    fn query(&mut self, sql: &str, params: &[&str]) -> Result<Vec<Value>, SqlError> {
        self.run(sql, params, None)
    }

    fn wait_query(
        &mut self,
        sql: &str,
        params: &[&str],
        slice: std::time::Duration,
    ) -> Result<Vec<Value>, SqlError> {
        self.run(sql, params, Some(slice))
    }

    fn in_transaction(&mut self) -> bool {
        let Ok(pdo) = self.pdo().map(Zval::shallow_clone) else {
            return false;
        };
        self.call(&pdo, "inTransaction", vec![])
            .ok()
            .and_then(|t| t.bool())
            .unwrap_or(false)
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
    /// One statement; on a connection of the lock's own it is watched (see
    /// [`database::watch_statement`]), so a server that stops answering
    /// cannot block it for ever: the connection is then cut and closed.
    /// The user's PDO is never cut.
    fn run(
        &mut self,
        sql: &str,
        params: &[&str],
        slice: Option<std::time::Duration>,
    ) -> Result<Vec<Value>, SqlError> {
        let pdo = self.pdo()?.shallow_clone();
        let watch = match &self.connection {
            Connection::Own(OwnConnection {
                open: Some(open), ..
            }) => Some(database::watch_statement(
                &open.fds,
                slice,
                super::shim::vm_interrupt_flag(),
            )),
            _ => None,
        };
        // PDO cannot be called while an exception is pending (the
        // request-shutdown sweep, cron_guard()'s way out of a throwing job).
        let result = if ExecutorGlobals::has_exception() {
            engine::with_exception_set_aside(|| self.query_silently(&pdo, sql, params))
        } else {
            self.query_silently(&pdo, sql, params)
        };
        if let Some(watch) = watch {
            if let Err(cut) = watch.finish(self.dialect) {
                self.disconnect();
                return Err(cut);
            }
        }
        result
    }

    /// One statement with PDO in silent error mode, read back through
    /// errorInfo(): an exception thrown by a PDO call makes the engine drop
    /// a signal handler that is due when the call returns (it cannot call
    /// PHP code while an exception is pending), and PostgreSQL waits end in
    /// an error (55P03) every slice. The user's error mode is put back.
    fn query_silently(
        &self,
        pdo: &Zval,
        sql: &str,
        params: &[&str],
    ) -> Result<Vec<Value>, SqlError> {
        let user_mode = match &self.connection {
            Connection::User(_) => {
                let mode = self
                    .call(pdo, "getAttribute", vec![&PDO_ATTR_ERRMODE])?
                    .long()
                    .unwrap_or(PDO_ERRMODE_EXCEPTION);
                if mode != PDO_ERRMODE_SILENT {
                    self.call(
                        pdo,
                        "setAttribute",
                        vec![&PDO_ATTR_ERRMODE, &PDO_ERRMODE_SILENT],
                    )?;
                }
                Some(mode)
            }
            Connection::Own(_) => None,
        };
        let result = self.run_statement(pdo, sql, params);
        if let Some(mode) = user_mode.filter(|&mode| mode != PDO_ERRMODE_SILENT) {
            let restored = if ExecutorGlobals::has_exception() {
                engine::with_exception_set_aside(|| {
                    self.call(pdo, "setAttribute", vec![&PDO_ATTR_ERRMODE, &mode])
                })
            } else {
                self.call(pdo, "setAttribute", vec![&PDO_ATTR_ERRMODE, &mode])
            };
            restored?;
        }
        result
    }

    fn run_statement(
        &self,
        pdo: &Zval,
        sql: &str,
        params: &[&str],
    ) -> Result<Vec<Value>, SqlError> {
        // Emulated: one round trip (a native prepare costs one more, on
        // every statement, with a PDO whose driver defaults to it).
        let statement = self.call(pdo, "prepare", vec![&sql, &emulated_prepare()])?;
        if !statement.is_object() {
            return Err(self.error_info(pdo));
        }
        let params: Vec<String> = params.iter().map(|p| (*p).to_owned()).collect();
        let executed = self.call(&statement, "execute", vec![&params])?;
        if executed.bool() != Some(true) {
            return Err(self.error_info(&statement));
        }
        let row = self.call(&statement, "fetch", vec![&PDO_FETCH_NUM])?;
        let Some(row) = row.array() else {
            // false: no row, or an error
            let error = self.error_info(&statement);
            return if error.sqlstate == "00000" || error.sqlstate.is_empty() {
                Ok(Vec::new())
            } else {
                Err(error)
            };
        };
        Ok(row
            .values()
            .map(|value| {
                if let Some(i) = value.long() {
                    Value::Int(i)
                } else if let Some(b) = value.bool() {
                    Value::Int(i64::from(b))
                } else if let Some(s) = value.str() {
                    Value::Text(s.to_owned())
                } else if let Some(d) = value.double() {
                    Value::Text(d.to_string())
                } else {
                    Value::Null
                }
            })
            .collect())
    }

    /// errorInfo() of a PDO or PDOStatement: [SQLSTATE, driver code, text].
    fn error_info(&self, object: &Zval) -> SqlError {
        let info = self.call(object, "errorInfo", vec![]).ok();
        let info = info.as_ref().and_then(Zval::array);
        let sqlstate = info
            .and_then(|i| i.get_index(0))
            .and_then(|s| s.str().map(str::to_owned))
            .unwrap_or_default();
        let code = info.and_then(|i| i.get_index(1)).and_then(Zval::long);
        let text = info
            .and_then(|i| i.get_index(2))
            .and_then(|s| s.str().map(str::to_owned))
            .unwrap_or_else(|| format!("SQLSTATE {sqlstate}"));
        SqlError {
            sqlstate,
            code,
            message: clean_message(&text, self.secrets()),
            connecting: false,
        }
    }

    /// A method call on a PDO or PDOStatement. The engine reports an
    /// exception the callee threw only through EG(exception): a
    /// PDOException is taken here and turned into an [`SqlError`]; any other
    /// (thrown by a signal handler, or `exit()`) is left pending for PHP.
    fn call(
        &self,
        object: &Zval,
        method: &str,
        args: Vec<&dyn IntoZvalDyn>,
    ) -> Result<Zval, SqlError> {
        let result = object.try_call_method(method, args);
        if let Some(exception) = ExecutorGlobals::get().exception() {
            if !is_pdo_exception(exception) {
                return Err(SqlError {
                    sqlstate: "HY000".to_owned(),
                    code: None,
                    message: "interrupted by a PHP exception".to_owned(),
                    connecting: false,
                });
            }
            let exception = ExecutorGlobals::take_exception().expect("pending");
            return Err(self.error(&exception, false));
        }
        result.map_err(|err| SqlError {
            sqlstate: "HY000".to_owned(),
            code: None,
            message: format!("PDO::{method}() could not be called: {err}"),
            connecting: false,
        })
    }
}

fn emulated_prepare() -> Zval {
    let mut options = ZendHashTable::new();
    let _ = options.insert_at_index(PDO_ATTR_EMULATE_PREPARES, true);
    options.into_zval(false).unwrap_or_default()
}

fn is_pdo_exception(exception: &ZendObject) -> bool {
    ClassEntry::try_find("PDOException").is_some_and(|class| exception.instance_of(class))
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
    // query_silently), and one round trip per statement.
    let _ = options.insert_at_index(PDO_ATTR_ERRMODE, PDO_ERRMODE_SILENT);
    if !own
        .pdo_options
        .iter()
        .any(|(a, _)| *a == PDO_ATTR_EMULATE_PREPARES)
    {
        let _ = options.insert_at_index(PDO_ATTR_EMULATE_PREPARES, true);
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
        } else if let Ok(statement) = pdo.try_call_method("prepare", vec![&query.sql]) {
            if ExecutorGlobals::take_exception().is_none() {
                let _ = statement.try_call_method("execute", vec![&query.params]);
            }
        }
        let _ = ExecutorGlobals::take_exception();
    }
}

fn exception_message(exception: &ZendObject) -> String {
    exception
        .try_call_method("getMessage", vec![])
        .ok()
        .and_then(|m| m.str().map(str::to_owned))
        .unwrap_or_default()
}

/// A PDOException (or any exception PDO threw) as an [`SqlError`]:
/// SQLSTATE and driver code from `errorInfo` or from PDO's message prefix
/// ("SQLSTATE[HY000] [2002] …", "SQLSTATE[08006]: …: 7 …"), the server's
/// words without the prefix, the password (if any) blotted out.
fn sql_error(exception: &ZendObject, connecting: bool, secrets: &[String]) -> SqlError {
    let message = exception_message(exception);
    let info = exception
        .get_property::<&Zval>("errorInfo")
        .ok()
        .and_then(Zval::array);
    let mut sqlstate = info
        .and_then(|i| i.get_index(0))
        .and_then(|s| s.str().map(str::to_owned));
    let mut code = info.and_then(|i| i.get_index(1)).and_then(Zval::long);
    let mut text = info
        .and_then(|i| i.get_index(2))
        .and_then(|s| s.str().map(str::to_owned));
    if let Some(rest) = message.strip_prefix("SQLSTATE[") {
        if let Some((state, rest)) = rest.split_once(']') {
            sqlstate.get_or_insert_with(|| state.to_owned());
            let rest = rest.trim_start_matches(':').trim_start();
            // "[2002] Connection refused" (connect errors)
            if let Some(rest) = rest.strip_prefix('[') {
                if let Some((number, words)) = rest.split_once(']') {
                    code = code.or_else(|| number.parse().ok());
                    text.get_or_insert_with(|| words.trim().to_owned());
                }
            }
            text.get_or_insert_with(|| rest.to_owned());
        }
    }
    SqlError {
        sqlstate: sqlstate.unwrap_or_else(|| "HY000".to_owned()),
        code,
        message: clean_message(&text.unwrap_or(message), secrets),
        connecting,
    }
}

/// The server's words: without libpq's "ERROR:  " prefixes and trailing
/// newlines, and the password (if any) blotted out.
fn clean_message(text: &str, secrets: &[String]) -> String {
    let mut text = text
        .replace("ERROR:  ", "")
        .replace("FATAL:  ", "")
        .trim()
        .replace('\n', " ");
    for secret in secrets.iter().filter(|s| s.len() >= 3) {
        text = text.replace(secret.as_str(), "***");
    }
    if text.is_empty() {
        text = "unknown error".to_owned();
    }
    text
}

//! `CronLock\Database`: a named lock on MySQL/MariaDB or PostgreSQL,
//! through PDO.
//!
//! The server is reached through PDO rather than a Rust client: no TLS
//! stack or async runtime in the extension, and TLS, authentication and
//! driver options are exactly what the user configured for PDO. The lock
//! logic is in `crate::lock::database`; this module runs its statements on
//! a `\PDO` (the user's, or one the lock opens from a DSN and keeps).

use super::args::{Bytes, NullableFloat, OptionalFloat, OptionsArray, PdoOrDsn};
use super::engine;
use super::lock_interface::PhpInterfaceLock;
use super::options::Options;
use crate::error::Error;
use crate::lock::database::{self, DatabaseLock, Flavor, Session, SqlError, Value};
use crate::lock::Wait;
use ext_php_rs::convert::{IntoZval, IntoZvalDyn};
use ext_php_rs::flags::ClassFlags;
use ext_php_rs::prelude::*;
use ext_php_rs::types::{ZendHashTable, ZendObject, Zval};
use ext_php_rs::zend::{ClassEntry, ExecutorGlobals};
use std::cell::RefCell;

const PDO_ATTR_ERRMODE: i64 = 3;
const PDO_ERRMODE_SILENT: i64 = 0;
const PDO_ERRMODE_EXCEPTION: i64 = 2;
const PDO_ATTR_EMULATE_PREPARES: i64 = 20;
const PDO_ATTR_DRIVER_NAME: i64 = 16;
const PDO_ATTR_PERSISTENT: i64 = 12;
const PDO_FETCH_NUM: i64 = 3;
const MYSQLND_READ_TIMEOUT: &str = "mysqlnd.net_read_timeout";

#[php_class]
#[php(name = "CronLock\\Database")]
#[php(flags = ClassFlags::Final)]
#[php(implements(PhpInterfaceLock))]
pub struct Database {
    lock: DatabaseLock,
    /// A RefCell so that the busy line of cron_guard() can ask who holds
    /// the lock through a shared reference.
    session: RefCell<PdoSession>,
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
        let options = Options::new("$options", options.0, &["user", "password", "pdo_options"])?;
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
        let lock = DatabaseLock::new(session.flavor, &name)?;
        super::note_lock_object();
        Ok(Database {
            lock,
            session: RefCell::new(session),
        })
    }

    pub fn acquire(&mut self, timeout: OptionalFloat) -> PhpResult<bool> {
        let wait = Wait::from_seconds("$timeout", timeout.or(0.0))?;
        let session = self.session.get_mut();
        let acquired = self.lock.acquire(session, wait);
        if ExecutorGlobals::has_exception() {
            // A signal handler threw (or called exit()) during a PDO call:
            // that exception propagates; the lock is not taken.
            engine::with_exception_set_aside(|| self.lock.abandon(session));
            return Ok(false);
        }
        Ok(acquired?)
    }

    /// The lock lives as long as its session: there is no TTL to extend,
    /// renewing asks the server whether this session still holds it.
    pub fn renew(&mut self, ttl: NullableFloat) -> PhpResult<bool> {
        let _ = ttl;
        let renewed = self.lock.renew(self.session.get_mut());
        if ExecutorGlobals::has_exception() {
            return Ok(false);
        }
        Ok(renewed?)
    }

    pub fn release(&mut self) -> PhpResult<bool> {
        let released = self.lock.release(self.session.get_mut());
        if ExecutorGlobals::has_exception() {
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
        Ok(holder.map(|h| h.describe(self.lock.flavor())))
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
    /// Why the last acquire() returned false (interrupted, held by another
    /// object of this thread, ...), for cron_guard()'s log line.
    pub fn refusal(&self) -> Option<crate::lock::Refusal> {
        self.lock.refusal()
    }

    /// "'x' (MySQL/MariaDB at mysql:host=db)", for the busy line.
    pub fn describe(&self) -> String {
        self.lock.describe(&*self.session.borrow())
    }

    /// For the busy line of cron_guard(): who holds it, if the server says.
    pub fn holder_for_message(&self) -> Option<String> {
        if self.lock.held_by_another_object() {
            return Some(format!(
                "this process (pid {}) through another lock object",
                database::current_pid()
            ));
        }
        let mut session = self.session.try_borrow_mut().ok()?;
        engine::with_exception_set_aside(|| {
            self.lock
                .holder(&mut *session)
                .ok()
                .flatten()
                .map(|h| h.describe(self.lock.flavor()))
        })
    }

    /// For the request-shutdown sweep and cron_guard()'s way out: runs the
    /// release with any pending exception set aside (PDO cannot be called
    /// while one is pending); errors have nowhere to go there.
    pub fn release_leftover(&mut self) {
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
    opened_by: u32,
}

impl Drop for OpenPdo {
    fn drop(&mut self) {
        if self.opened_by == database::current_pid() {
            for &fd in &self.fds {
                database::untrack_connection_fd(fd);
            }
        }
    }
}

struct PdoSession {
    flavor: Flavor,
    connection: Connection,
    label: String,
}

impl PdoSession {
    fn user(pdo: &Zval) -> PhpResult<Self> {
        let driver = pdo
            .try_call_method("getAttribute", vec![&PDO_ATTR_DRIVER_NAME])
            .ok()
            .and_then(|d| d.str().map(str::to_owned));
        if let Some(exception) = ExecutorGlobals::take_exception() {
            let message = exception_message(&exception);
            return Err(Error::Lock(format!("cannot use the PDO given: {message}")).into());
        }
        let flavor = Flavor::from_driver(&driver.unwrap_or_default())?;
        Ok(PdoSession {
            flavor,
            connection: Connection::User(pdo.shallow_clone()),
            label: format!("{}, the PDO given", flavor.product()),
        })
    }

    fn own(dsn: &str, options: &Options) -> PhpResult<Self> {
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
        let flavor = Flavor::from_driver(driver)?;
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
            flavor,
            connection: Connection::Own(OwnConnection {
                dsn: dsn.to_owned(),
                user: options.string("user")?,
                password,
                secrets,
                pdo_options,
                open: None,
            }),
            label: format!("{} at {}", flavor.product(), database::dsn_label(dsn)),
        })
    }

    fn secrets(&self) -> &[String] {
        match &self.connection {
            Connection::Own(own) => &own.secrets,
            Connection::User(_) => &[],
        }
    }

    fn pdo(&mut self) -> Result<&Zval, SqlError> {
        let flavor = self.flavor;
        match &mut self.connection {
            Connection::User(pdo) => Ok(pdo),
            Connection::Own(own) => {
                if own
                    .open
                    .as_ref()
                    .is_some_and(|open| open.opened_by != database::current_pid())
                {
                    // A fork child: the parent's connection was detached at
                    // fork; never talk over it.
                    std::mem::forget(own.open.take());
                }
                if own.open.is_none() {
                    own.open = Some(connect(own, flavor)?);
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
                Some(open) if open.opened_by != database::current_pid() => std::mem::forget(open),
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
            if let Err(cut) = watch.finish(self.flavor) {
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
fn hook_interrupts() {
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

fn connect(own: &OwnConnection, flavor: Flavor) -> Result<OpenPdo, SqlError> {
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
    let read_timeout = (flavor == Flavor::MySql).then(|| {
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
        opened_by: database::current_pid(),
    };
    let watch = database::watch_statement(&open.fds, None, None);
    if flavor == Flavor::Postgres {
        // Lets the busy line of another host name this process.
        name_postgres_session(&open.pdo);
    }
    keep_session_while_idle(&open.pdo, flavor);
    watch.finish(flavor).map_err(|cut| SqlError {
        connecting: true,
        ..cut
    })?;
    Ok(open)
}

/// The lock lives exactly as long as its session, and a job may leave its
/// own connection idle for long: the server's idle limits (MySQL's
/// `wait_timeout`, often 60-300 s on shared hosts; PostgreSQL's
/// `idle_session_timeout`) must not end it and so free the lock mid-job.
/// Best effort: a server that refuses a setting keeps its own.
fn keep_session_while_idle(pdo: &Zval, flavor: Flavor) {
    let statements: &[&str] = match flavor {
        // 31536000 s (a year) is the largest value MySQL and MariaDB accept.
        Flavor::MySql => &["SET SESSION wait_timeout = 31536000"],
        // One statement each: idle_session_timeout is PostgreSQL 14+.
        Flavor::Postgres => &[
            "SET idle_session_timeout = 0",
            "SET idle_in_transaction_session_timeout = 0",
        ],
    };
    for sql in statements {
        let _ = pdo.try_call_method("exec", vec![sql]);
        let _ = ExecutorGlobals::take_exception();
    }
}

/// `application_name` = "cronlock pid N on HOST", unless the DSN set one.
fn name_postgres_session(pdo: &Zval) {
    let name = format!(
        "cronlock pid {} on {}",
        database::current_pid(),
        database::hostname()
    );
    let sql = "SELECT CASE WHEN current_setting('application_name') = '' \
               THEN set_config('application_name', ?, false) END";
    if let Ok(statement) = pdo.try_call_method("prepare", vec![&sql]) {
        if ExecutorGlobals::take_exception().is_none() {
            let _ = statement.try_call_method("execute", vec![&vec![name]]);
        }
    }
    let _ = ExecutorGlobals::take_exception();
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

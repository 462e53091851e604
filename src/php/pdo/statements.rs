//! The statements a Database lock runs on one PDO connection: kept
//! prepared between runs, executed, their first row read, and PDO's errors
//! turned into [`SqlError`]s. A lock taken again and again on one
//! connection then costs what a loop over two prepared statements costs by
//! hand (decision D26; see docs/benchmarks.md, "Database").
//!
//! The traps this closes:
//! - a statement's first run on a connection is emulated by PDO: one round
//!   trip, which is all a cron job that takes its lock once ever sends
//!   (pdo_mysql reads only the PDO's own `ATTR_EMULATE_PREPARES`, so it is
//!   set for the prepare and put back);
//! - on a connection of the lock's own, a statement run a second time is
//!   prepared on the server, which then skips parsing and planning it on
//!   every later run (one more round trip, once); a server that refuses
//!   (MySQL's `max_prepared_stmt_count`) leaves the connection on emulated
//!   statements, which always work;
//! - the user's PDO never gets a statement on its server (their pooler,
//!   their `DISCARD ALL`, their statement limit): its statements stay
//!   emulated, kept as PHP objects only;
//! - parameters are sent again only when they change (an `execute()`
//!   without arguments reuses the ones bound), and after a failed execute
//!   always;
//! - on the user's PDO every result is closed after its row is read, so an
//!   unbuffered MySQL connection is free for their next query (the lock's
//!   own connection is always buffered);
//! - the kept statements live and die with their connection (their owner
//!   drops them before the PDO), and a PHP exception that is not PDO's
//!   (thrown by a signal handler, or `exit()`) is left pending for PHP.

use crate::lock::database::{SqlError, Value};
use crate::php::engine;
use ext_php_rs::convert::IntoZval;
use ext_php_rs::ffi;
use ext_php_rs::types::{ZendHashTable, ZendObject, Zval};
use ext_php_rs::zend::{ClassEntry, ExecutorGlobals};

const PDO_ATTR_EMULATE_PREPARES: i64 = 20;
const PDO_FETCH_NUM: i64 = 3;

/// At most this many statements are kept per connection (a dialect runs
/// about ten different ones); the oldest goes first.
const KEPT_MAX: usize = 16;

/// The statements kept on one connection.
pub struct Statements {
    kept: Vec<Kept>,
    /// A statement run again may be prepared on the server: a connection of
    /// the lock's own that has not refused one.
    on_server: bool,
    /// Results are closed after their row is read: the user's PDO, which
    /// may be unbuffered (the lock's own connection is buffered).
    close_cursors: bool,
}

struct Kept {
    sql: String,
    statement: Zval,
    /// The parameters its last successful bind left on it: the same again
    /// need not be sent.
    bound: Option<Vec<String>>,
    /// Prepared on the server (otherwise emulated by PDO).
    on_server: bool,
    /// Its class's `execute()` and `fetch()`, looked up once.
    execute: Method,
    fetch: Method,
}

impl Kept {
    fn new(sql: &str, statement: Zval, on_server: bool) -> Option<Kept> {
        Some(Kept {
            execute: Method::of(&statement, "execute")?,
            fetch: Method::of(&statement, "fetch")?,
            sql: sql.to_owned(),
            statement,
            bound: None,
            on_server,
        })
    }
}

impl Statements {
    /// On the user's PDO: emulated statements only, results closed.
    pub fn users() -> Self {
        Statements {
            kept: Vec::new(),
            on_server: false,
            close_cursors: true,
        }
    }

    /// On a connection of the lock's own (buffered): `on_server`, whether
    /// statements run again may be prepared on the server.
    pub fn own(on_server: bool) -> Self {
        Statements {
            kept: Vec::new(),
            on_server,
            close_cursors: false,
        }
    }

    /// Runs `sql` with `params` on `pdo`, which is in silent error mode:
    /// its first row (empty when it has none).
    ///
    /// # Errors
    ///
    /// The statement's [`SqlError`], its message without `secrets`.
    pub fn run(
        &mut self,
        pdo: &Zval,
        sql: &str,
        params: &[&str],
        secrets: &[String],
    ) -> Result<Vec<Value>, SqlError> {
        let close = self.close_cursors;
        let kept = self.executed(pdo, sql, params, secrets)?;
        let row = invoke(&kept.statement, kept.fetch, &[long(PDO_FETCH_NUM)], secrets)?;
        if close {
            // An unbuffered MySQL result holds the connection until read to
            // its end.
            call(&kept.statement, "closecursor", &[], secrets)?;
        }
        match row.array() {
            // FETCH_NUM: keys 0, 1, ... (faster than iterating the hash).
            Some(row) => Ok((0..row.len())
                .map(|at| row.get_index(at as i64).map_or(Value::Null, value))
                .collect()),
            None => {
                // false: no row, or an error.
                let error = error_info(&kept.statement, secrets);
                if error.sqlstate == "00000" || error.sqlstate.is_empty() {
                    Ok(Vec::new())
                } else {
                    Err(error)
                }
            }
        }
    }

    /// Runs `sql`, which returns no rows, with `params` on `pdo` (in silent
    /// error mode): how many rows it changed (`rowCount()`).
    ///
    /// # Errors
    ///
    /// As for [`Statements::run`].
    pub fn count(
        &mut self,
        pdo: &Zval,
        sql: &str,
        params: &[&str],
        secrets: &[String],
    ) -> Result<u64, SqlError> {
        let kept = self.executed(pdo, sql, params, secrets)?;
        let count = call(&kept.statement, "rowcount", &[], secrets)?;
        Ok(count.long().map_or(0, |n| u64::try_from(n).unwrap_or(0)))
    }

    /// The kept statement for `sql`, executed with `params`.
    fn executed(
        &mut self,
        pdo: &Zval,
        sql: &str,
        params: &[&str],
        secrets: &[String],
    ) -> Result<&Kept, SqlError> {
        let at = self.statement_for(pdo, sql, secrets)?;
        let kept = &mut self.kept[at];
        let unchanged = kept
            .bound
            .as_ref()
            .is_some_and(|bound| bound.iter().map(String::as_str).eq(params.iter().copied()));
        let executed = if unchanged {
            invoke(&kept.statement, kept.execute, &[], secrets)
        } else {
            let owned: Vec<String> = params.iter().map(|p| (*p).to_owned()).collect();
            let array = owned.clone().into_zval(false).unwrap_or_default();
            let executed = invoke(&kept.statement, kept.execute, &[array], secrets);
            kept.bound = Some(owned);
            executed
        };
        match executed {
            Ok(done) if done.bool() == Some(true) => Ok(kept),
            Ok(_) => {
                kept.bound = None;
                Err(error_info(&kept.statement, secrets))
            }
            Err(err) => {
                kept.bound = None;
                Err(err)
            }
        }
    }

    /// The kept statement for `sql` (prepared now when there is none, or
    /// on the server when it runs again and may be).
    fn statement_for(
        &mut self,
        pdo: &Zval,
        sql: &str,
        secrets: &[String],
    ) -> Result<usize, SqlError> {
        if let Some(at) = self.kept.iter().position(|kept| kept.sql == sql) {
            if self.on_server && !self.kept[at].on_server {
                match prepare(pdo, sql, false, secrets) {
                    Ok(kept) => self.kept[at] = kept,
                    Err(err) if engine::exception_pending() => return Err(err),
                    // Refused: the emulated statement still works (and
                    // reports a lost connection itself).
                    Err(_) => self.on_server = false,
                }
            }
            return Ok(at);
        }
        let kept = prepare(pdo, sql, true, secrets)?;
        if self.kept.len() == KEPT_MAX {
            self.kept.remove(0);
        }
        self.kept.push(kept);
        Ok(self.kept.len() - 1)
    }
}

/// `$pdo->prepare($sql, [PDO::ATTR_EMULATE_PREPARES => $emulated])`, kept,
/// with the PDO's own `ATTR_EMULATE_PREPARES` set so for the call (pdo_mysql
/// reads only that one; pdo_pgsql the option) and put back.
fn prepare(pdo: &Zval, sql: &str, emulated: bool, secrets: &[String]) -> Result<Kept, SqlError> {
    let attribute = || long(PDO_ATTR_EMULATE_PREPARES);
    let was = call(pdo, "getattribute", &[attribute()], secrets)
        .ok()
        .and_then(|was| was.bool().or_else(|| was.long().map(|n| n != 0)));
    let switch = was.is_some_and(|was| was != emulated);
    let set = |value: bool| {
        let mut zval = Zval::new();
        zval.set_bool(value);
        call(pdo, "setattribute", &[attribute(), zval], secrets)
    };
    if switch {
        set(emulated)?;
    }
    let text = sql.into_zval(false).unwrap_or_default();
    let statement = call(pdo, "prepare", &[text, prepare_options(emulated)], secrets);
    if switch {
        set(!emulated)?;
    }
    let statement = statement?;
    if !statement.is_object() {
        return Err(error_info(pdo, secrets));
    }
    Kept::new(sql, statement, !emulated).ok_or_else(|| SqlError {
        sqlstate: "HY000".to_owned(),
        code: None,
        message: "PDO::prepare() made no PDOStatement".to_owned(),
        connecting: false,
    })
}

/// `prepare()`'s options for an emulated statement (one round trip, nothing
/// kept on the server).
pub fn emulated() -> Zval {
    prepare_options(true)
}

fn prepare_options(emulated: bool) -> Zval {
    let mut options = ZendHashTable::new();
    let _ = options.insert_at_index(PDO_ATTR_EMULATE_PREPARES, emulated);
    options.into_zval(false).unwrap_or_default()
}

/// A value of a result row, as the lock reads it.
fn value(zval: &Zval) -> Value {
    if let Some(i) = zval.long() {
        Value::Int(i)
    } else if let Some(b) = zval.bool() {
        Value::Int(i64::from(b))
    } else if let Some(s) = zval.str() {
        Value::Text(s.to_owned())
    } else if let Some(d) = zval.double() {
        Value::Text(d.to_string())
    } else {
        Value::Null
    }
}

/// A method of a PDO or PDOStatement's class, looked up once.
#[derive(Clone, Copy)]
struct Method(*mut ffi::zend_function);

impl Method {
    /// `name` in lower case (the engine's function tables are keyed so).
    fn of(object: &Zval, name: &str) -> Option<Method> {
        let target = object.object()?;
        // SAFETY: the class entry of a live object, its function table read
        // with the key the engine stores.
        unsafe {
            let found = ffi::zend_hash_str_find(
                &raw const (*target.ce).function_table,
                name.as_ptr().cast(),
                name.len(),
            );
            (!found.is_null()).then(|| Method((*found).value.ptr.cast()))
        }
    }
}

/// A method call on a PDO or PDOStatement: `method` is its name in lower
/// case (the engine's function tables are keyed so), `args` its arguments.
/// (ext-php-rs's `try_call_method` lowercases the name and copies the
/// arguments into two vectors on every call: a tenth of a lock cycle.)
///
/// # Errors
///
/// As for [`invoke`], and when there is no such method.
pub fn call(
    object: &Zval,
    method: &str,
    args: &[Zval],
    secrets: &[String],
) -> Result<Zval, SqlError> {
    match Method::of(object, method) {
        Some(found) => invoke(object, found, args, secrets),
        None => Err(SqlError {
            sqlstate: "HY000".to_owned(),
            code: None,
            message: format!("PDO::{method}() could not be called"),
            connecting: false,
        }),
    }
}

/// Calls `method`, found on `object`'s class. The engine reports an
/// exception the callee threw only through EG(exception): a PDOException is
/// taken here and turned into an [`SqlError`]; any other (thrown by a
/// signal handler, or `exit()`) is left pending for PHP.
///
/// # Errors
///
/// The PDOException as an [`SqlError`].
fn invoke(
    object: &Zval,
    method: Method,
    args: &[Zval],
    secrets: &[String],
) -> Result<Zval, SqlError> {
    let mut retval = Zval::new();
    if let Some(target) = object.object() {
        // SAFETY: a method of the object's own class (`Method::of`, on this
        // object or one of the same class that the caller keeps alive),
        // called on it as the engine calls one, with initialised zvals that
        // outlive the call (the engine copies them into the frame) and a
        // fresh return value. At most a handful of arguments.
        unsafe {
            ffi::zend_call_known_function(
                method.0,
                std::ptr::from_ref(target).cast_mut(),
                target.ce,
                &raw mut retval,
                args.len() as u32,
                args.as_ptr().cast_mut(),
                std::ptr::null_mut(),
            );
        }
    }
    if !engine::exception_pending() {
        return Ok(retval);
    }
    if let Some(exception) = ExecutorGlobals::get().exception() {
        if !is_pdo_exception(exception) {
            return Err(SqlError {
                sqlstate: "HY000".to_owned(),
                code: None,
                message: "interrupted by a PHP exception".to_owned(),
                connecting: false,
            });
        }
    }
    let exception = ExecutorGlobals::take_exception().expect("pending");
    Err(sql_error(&exception, false, secrets))
}

/// An integer argument.
pub fn long(value: i64) -> Zval {
    let mut zval = Zval::new();
    zval.set_long(value);
    zval
}

/// errorInfo() of a PDO or PDOStatement: [SQLSTATE, driver code, text].
pub fn error_info(object: &Zval, secrets: &[String]) -> SqlError {
    let info = call(object, "errorinfo", &[], secrets).ok();
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
        message: clean_message(&text, secrets),
        connecting: false,
    }
}

fn is_pdo_exception(exception: &ZendObject) -> bool {
    ClassEntry::try_find("PDOException").is_some_and(|class| exception.instance_of(class))
}

pub fn exception_message(exception: &ZendObject) -> String {
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
pub fn sql_error(exception: &ZendObject, connecting: bool, secrets: &[String]) -> SqlError {
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

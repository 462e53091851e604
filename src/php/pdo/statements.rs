//! The statements a Database lock runs on one PDO connection: kept
//! prepared between runs, executed, their first row read, and PDO's errors
//! turned into [`SqlError`]s. A lock taken again and again on one
//! connection then costs what a loop over two prepared statements costs by
//! hand (see docs/benchmarks.md, "Database").
//!
//! The traps this closes:
//! - a statement's first run on a connection is emulated by PDO: one round
//!   trip, which is all a cron job that takes its lock once ever sends;
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
//! - every result is read to its end (`fetchAll`), so an unbuffered MySQL
//!   connection is free for the user's next query;
//! - the kept statements live and die with their connection (their owner
//!   drops them before the PDO), and a PHP exception that is not PDO's
//!   (thrown by a signal handler, or `exit()`) is left pending for PHP.

use crate::lock::database::{SqlError, Value};
use ext_php_rs::convert::{IntoZval, IntoZvalDyn};
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
}

struct Kept {
    sql: String,
    statement: Zval,
    /// The parameters its last successful bind left on it: the same again
    /// need not be sent.
    bound: Option<Vec<String>>,
    /// Prepared on the server (otherwise emulated by PDO).
    on_server: bool,
}

impl Statements {
    /// `on_server`: whether statements run again may be prepared on the
    /// server (only on a connection of the lock's own).
    pub fn new(on_server: bool) -> Self {
        Statements {
            kept: Vec::new(),
            on_server,
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
        let at = self.statement_for(pdo, sql, secrets)?;
        let kept = &mut self.kept[at];
        let unchanged = kept
            .bound
            .as_ref()
            .is_some_and(|bound| bound.iter().map(String::as_str).eq(params.iter().copied()));
        let executed = if unchanged {
            call(&kept.statement, "execute", vec![], secrets)
        } else {
            let owned: Vec<String> = params.iter().map(|p| (*p).to_owned()).collect();
            let executed = call(&kept.statement, "execute", vec![&owned], secrets);
            kept.bound = Some(owned);
            executed
        };
        match executed {
            Ok(done) if done.bool() == Some(true) => {}
            Ok(_) => {
                kept.bound = None;
                return Err(error_info(&kept.statement, secrets));
            }
            Err(err) => {
                kept.bound = None;
                return Err(err);
            }
        }
        let rows = call(&kept.statement, "fetchAll", vec![&PDO_FETCH_NUM], secrets)?;
        match rows
            .array()
            .and_then(|rows| rows.values().next())
            .and_then(Zval::array)
        {
            Some(row) => Ok(row.values().map(value).collect()),
            None => {
                // No row, or an error.
                let error = error_info(&kept.statement, secrets);
                if error.sqlstate == "00000" || error.sqlstate.is_empty() {
                    Ok(Vec::new())
                } else {
                    Err(error)
                }
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
                    Ok(statement) => {
                        self.kept[at] = Kept {
                            sql: sql.to_owned(),
                            statement,
                            bound: None,
                            on_server: true,
                        };
                    }
                    Err(err) if ExecutorGlobals::has_exception() => return Err(err),
                    // Refused: the emulated statement still works (and
                    // reports a lost connection itself).
                    Err(_) => self.on_server = false,
                }
            }
            return Ok(at);
        }
        let statement = prepare(pdo, sql, true, secrets)?;
        if self.kept.len() == KEPT_MAX {
            self.kept.remove(0);
        }
        self.kept.push(Kept {
            sql: sql.to_owned(),
            statement,
            bound: None,
            on_server: false,
        });
        Ok(self.kept.len() - 1)
    }
}

/// `$pdo->prepare($sql, [PDO::ATTR_EMULATE_PREPARES => $emulated])`.
fn prepare(pdo: &Zval, sql: &str, emulated: bool, secrets: &[String]) -> Result<Zval, SqlError> {
    let statement = call(
        pdo,
        "prepare",
        vec![&sql, &prepare_options(emulated)],
        secrets,
    )?;
    if statement.is_object() {
        Ok(statement)
    } else {
        Err(error_info(pdo, secrets))
    }
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

/// A method call on a PDO or PDOStatement. The engine reports an exception
/// the callee threw only through EG(exception): a PDOException is taken
/// here and turned into an [`SqlError`]; any other (thrown by a signal
/// handler, or `exit()`) is left pending for PHP.
///
/// # Errors
///
/// The PDOException as an [`SqlError`], or the call's own failure.
pub fn call(
    object: &Zval,
    method: &str,
    args: Vec<&dyn IntoZvalDyn>,
    secrets: &[String],
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
        return Err(sql_error(&exception, false, secrets));
    }
    result.map_err(|err| SqlError {
        sqlstate: "HY000".to_owned(),
        code: None,
        message: format!("PDO::{method}() could not be called: {err}"),
        connecting: false,
    })
}

/// errorInfo() of a PDO or PDOStatement: [SQLSTATE, driver code, text].
pub fn error_info(object: &Zval, secrets: &[String]) -> SqlError {
    let info = call(object, "errorInfo", vec![], secrets).ok();
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

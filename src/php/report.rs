//! Where `cron_guard()`'s lines go: `'log'` (`$CRONLOCK_LOG`,
//! `cronlock.log`) for skips and records, PHP's error log for failures,
//! and the `'logger'` for every line. The sentences are made in
//! `php::guard` (durations, clock times and the record in `lock::report`);
//! cronlock/polyfill's `Polyfill\Report` sends the same lines the same way.
//!
//! The traps this closes:
//! - a skip is the normal case, not an alert (D19): by default it goes to
//!   syslog, so a crontab line's busy run prints nothing and cron mails
//!   nothing; a failure (a lost hold, a failing release) still reaches the
//!   error log, which in the CLI is stderr, so cron mails it;
//! - syslog through PHP's own `syslog()`, never `openlog()`: the ident and
//!   facility stay the user's (their own `openlog()`; else the C library's
//!   default, the binary's name as it was run, `php8.2` or `php`, and
//!   `user`: PHP's `syslog.ident` counts only for `error_log = syslog`);
//! - a log file gets one `write(2)` per line with `O_APPEND`, so lines of
//!   concurrent runs never interleave; one that cannot be written says so
//!   in the error log, with the line;
//! - a logger that throws changes nothing about the run: its exception is
//!   logged, never propagated, and a job's pending exception or `exit()` is
//!   set aside around the call and goes on unchanged.

use super::engine;
use super::ini;
use super::options::{type_name, Options};
use crate::error::Error;
use crate::lock::one_line;
use crate::lock::report::{iso8601_utc, unix_secs, Outcome, RunRecord};
use ext_php_rs::prelude::*;
use ext_php_rs::types::{ZendCallable, ZendHashTable, Zval};
use ext_php_rs::zend::ExecutorGlobals;
use std::ffi::CStr;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

/// Where skips and records go.
enum Destination {
    Syslog,
    ErrorLog,
    Stderr,
    File(PathBuf),
    Nowhere,
}

/// A line's level: PSR-3's name and syslog's priority.
#[derive(Clone, Copy)]
pub enum Level {
    Error,
    Warning,
    Notice,
    Info,
}

impl Level {
    fn name(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warning => "warning",
            Level::Notice => "notice",
            Level::Info => "info",
        }
    }

    /// LOG_ERR, LOG_WARNING, LOG_NOTICE, LOG_INFO.
    fn priority(self) -> i64 {
        match self {
            Level::Error => 3,
            Level::Warning => 4,
            Level::Notice => 5,
            Level::Info => 6,
        }
    }
}

#[derive(PartialEq, Eq)]
enum RecordMode {
    Off,
    Skips,
    Runs,
}

/// What one run knows of itself, for the record and the logger's context.
pub struct RunFields {
    pub lock: String,
    pub outcome: Outcome,
    pub waited: Duration,
    pub held: Duration,
    pub holder: Option<String>,
}

pub struct Report {
    destination: Destination,
    record: RecordMode,
    json: bool,
    logger: Option<Zval>,
}

/// One setting: the option, else `$ENV` (unless empty), else the ini
/// setting, else its default; with the name it was read from.
fn setting(
    options: &Options,
    key: &str,
    env: &str,
    ini_name: &CStr,
) -> PhpResult<(String, String)> {
    if let Some(value) = options.string(key)? {
        return Ok((value, options.arg_name(key)));
    }
    if let Some(value) = std::env::var_os(env).filter(|v| !v.is_empty()) {
        return Ok((value.to_string_lossy().into_owned(), format!("${env}")));
    }
    let value = engine::ini_string(ini_name).unwrap_or_default();
    Ok((
        value.to_string_lossy().into_owned(),
        ini_name.to_string_lossy().into_owned(),
    ))
}

impl Report {
    /// `'log'`, `'record'`, `'record_format'`, `'logger'`.
    ///
    /// # Errors
    ///
    /// `\ValueError` naming the option or setting with a value it does
    /// not know; `\TypeError` for a logger that is neither callable nor
    /// has a `log()` method.
    pub fn read(options: &Options) -> PhpResult<Report> {
        let (log, name) = setting(options, "log", "CRONLOCK_LOG", ini::LOG)?;
        let destination = match log.as_str() {
            "" | "syslog" => Destination::Syslog,
            "error_log" => Destination::ErrorLog,
            "stderr" => Destination::Stderr,
            "none" => Destination::Nowhere,
            path if path.starts_with('/') => Destination::File(PathBuf::from(path)),
            other => {
                return Err(Error::value(
                    name,
                    format!(
                        "must be 'syslog', 'error_log', 'stderr', 'none' or an absolute file path, '{}' given",
                        crate::lock::shorten(other)
                    ),
                )
                .into())
            }
        };
        let (record, name) = setting(options, "record", "CRONLOCK_RECORD", ini::RECORD)?;
        let record = match record.as_str() {
            "" | "off" => RecordMode::Off,
            "skips" => RecordMode::Skips,
            "runs" => RecordMode::Runs,
            other => {
                return Err(Error::value(
                    name,
                    format!(
                        "must be 'off', 'skips' or 'runs', '{}' given",
                        crate::lock::shorten(other)
                    ),
                )
                .into())
            }
        };
        let (format, name) = setting(
            options,
            "record_format",
            "CRONLOCK_RECORD_FORMAT",
            ini::RECORD_FORMAT,
        )?;
        let json = match format.as_str() {
            "" | "text" => false,
            "json" => true,
            other => {
                return Err(Error::value(
                    name,
                    format!(
                        "must be 'text' or 'json', '{}' given",
                        crate::lock::shorten(other)
                    ),
                )
                .into())
            }
        };
        let logger = match options.zval("logger") {
            None => None,
            Some(logger) if logger.is_null() => None,
            Some(logger) if logger.is_callable() || has_log_method(logger) => {
                Some(logger.shallow_clone())
            }
            Some(other) => {
                return Err(Error::type_(
                    options.arg_name("logger"),
                    format!(
                        "must be a callable or an object with a log($level, $message, array $context) method (PSR-3), {} given",
                        type_name(other)
                    ),
                )
                .into())
            }
        };
        Ok(Report {
            destination,
            record,
            json,
            logger,
        })
    }

    /// A skip or a stuck holder: to the destination and the logger.
    pub fn note(&self, level: Level, event: &str, line: &str, fields: &RunFields) {
        self.send(level, line, true);
        self.tell_logger(level, event, line, fields);
    }

    /// A failure (a lost hold, a failing release): to PHP's error log
    /// always, also to syslog or the log file when that is the
    /// destination, and to the logger.
    pub fn failure(&self, event: &str, line: &str, fields: &RunFields) {
        engine::with_exception_set_aside(|| engine::error_log(line));
        if matches!(self.destination, Destination::Syslog | Destination::File(_)) {
            self.send(Level::Error, line, true);
        }
        self.tell_logger(Level::Error, event, line, fields);
    }

    /// The run's record, when `'record'` asks for it.
    pub fn record(&self, fields: &RunFields) {
        let wanted = match self.record {
            RecordMode::Off => false,
            RecordMode::Skips => fields.outcome.is_skip(),
            RecordMode::Runs => true,
        };
        if !wanted {
            return;
        }
        let record = RunRecord {
            time: SystemTime::now(),
            lock: &fields.lock,
            outcome: &fields.outcome,
            waited: fields.waited,
            held: fields.held,
            holder: fields.holder.as_deref(),
        };
        let line = if self.json {
            record.json()
        } else {
            record.text()
        };
        // A JSON line stays one JSON object: no time before it in a file.
        self.send(Level::Info, &line, !self.json);
        self.tell_logger(Level::Info, "record", &line, fields);
    }

    fn send(&self, level: Level, line: &str, stamp: bool) {
        let line = one_line(line);
        engine::with_exception_set_aside(|| match &self.destination {
            Destination::Nowhere => {}
            Destination::ErrorLog => engine::error_log(&line),
            Destination::Syslog => {
                if let Ok(syslog) = ZendCallable::try_from_name("syslog") {
                    let _ = syslog.try_call(vec![&level.priority(), &line]);
                }
            }
            Destination::Stderr => {
                let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
            }
            Destination::File(path) => {
                let text = if stamp {
                    format!("{} {line}\n", iso8601_utc(unix_secs(SystemTime::now())))
                } else {
                    format!("{line}\n")
                };
                let written = std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(path)
                    .and_then(|mut file| file.write_all(text.as_bytes()));
                if let Err(e) = written {
                    engine::error_log(&format!(
                        "cron_guard: cannot write to log file {}: {}; the line was: {line}",
                        crate::lock::shorten(&path.display().to_string()),
                        os_reason(&e)
                    ));
                }
            }
        });
    }

    fn tell_logger(&self, level: Level, event: &str, line: &str, fields: &RunFields) {
        let Some(logger) = &self.logger else {
            return;
        };
        let line = one_line(line);
        engine::with_exception_set_aside(|| {
            let Ok(context) = context(event, fields) else {
                return;
            };
            let level = level.name();
            let called = if logger.is_callable() {
                ZendCallable::new(logger)
                    .and_then(|logger| logger.try_call(vec![&level, &line, &context]))
            } else {
                logger.try_call_method("log", vec![&level, &line, &context])
            };
            let failure = match (ExecutorGlobals::take_exception(), called) {
                (Some(thrown), _) => {
                    let class = thrown.get_class_name().unwrap_or_default();
                    let message = thrown
                        .try_call_method("getMessage", vec![])
                        .ok()
                        .and_then(|m| m.string())
                        .unwrap_or_default();
                    Some(format!("{class}: {message}"))
                }
                (None, Err(e)) => Some(e.to_string()),
                (None, Ok(_)) => None,
            };
            if let Some(failure) = failure {
                engine::error_log(&format!("cron_guard: the logger failed: {failure}"));
            }
        });
    }
}

/// The logger's context: the run's fields, with `event` (`busy`,
/// `stuck`, `interrupted`, `lost`, `release_failed`, `record`).
fn context(event: &str, fields: &RunFields) -> PhpResult<Zval> {
    let mut table = ZendHashTable::new();
    table.insert("event", event)?;
    table.insert("time", iso8601_utc(unix_secs(SystemTime::now())))?;
    table.insert("lock", one_line(&fields.lock))?;
    table.insert("outcome", fields.outcome.words())?;
    table.insert("waited_ms", millis(fields.waited))?;
    table.insert("held_ms", millis(fields.held))?;
    match &fields.holder {
        Some(holder) => table.insert("holder", one_line(holder))?,
        None => table.insert("holder", ())?,
    }
    let mut zval = Zval::new();
    zval.set_hashtable(table);
    Ok(zval)
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

fn has_log_method(value: &Zval) -> bool {
    value.is_object()
        && ZendCallable::try_from_name("method_exists")
            .ok()
            .and_then(|exists| exists.try_call(vec![value, &"log"]).ok())
            .and_then(|found| found.bool())
            .unwrap_or(false)
}

/// `Permission denied`: the OS's words, without Rust's `(os error 13)`.
fn os_reason(err: &std::io::Error) -> String {
    let text = err.to_string();
    match text.rfind(" (os error ") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}

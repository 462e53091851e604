//! PostgreSQL: a session-level advisory lock on a bigint key.
//!
//! The traps this closes:
//! - a wait is `pg_advisory_lock()` under a `lock_timeout` of one slice (at
//!   most 100 ms, so PHP signal handlers run during it), catching 55P03;
//!   the user's `lock_timeout` is put back afterwards, and a lock granted
//!   while that fails is unlocked again;
//! - inside the user's transaction each slice runs under a savepoint, so a
//!   timed-out slice does not abort it, and the slice's `lock_timeout` is
//!   local to it: a `SET LOCAL` of the user's never becomes the session's;
//! - advisory locks are per database: "held by this session" and "who
//!   holds it" ask pg_locks for this database only;
//! - a connection of the lock's own outlives `idle_session_timeout` and
//!   `idle_in_transaction_session_timeout`, and names itself (unless the DSN
//!   did) so that the busy line of another host names this process;
//! - a claim is `INSERT … ON CONFLICT … DO UPDATE … WHERE … RETURNING`:
//!   a row comes back exactly when this call took the window; its times
//!   are `timestamptz`, absolute whatever a session's `TimeZone`.

use super::dialect::{Dialect, Query, Slices, Waited};
use super::errors::SqlError;
use super::names::{postgres_key, split_key, Target};
use super::session::{Session, Value};

#[derive(Debug)]
pub struct Postgres;

/// pg_locks' classid and objid of the key, as query parameters.
fn key_params(target: &Target) -> Vec<String> {
    let (classid, objid) = split_key(target.param().parse().unwrap_or_default());
    vec![classid.to_string(), objid.to_string()]
}

impl Dialect for Postgres {
    fn driver(&self) -> &'static str {
        "pgsql"
    }

    fn product(&self) -> &'static str {
        "PostgreSQL"
    }

    fn target(&self, name: &str) -> Target {
        let key = postgres_key(name.as_bytes());
        Target::new(key.to_string(), Some(format!("advisory key {key}")))
    }

    fn session_info_sql(&self) -> &'static str {
        // Port, database and start time: advisory locks are per database.
        "SELECT concat(current_setting('port'), '/', current_database(), '@', \
         pg_postmaster_start_time()), pg_backend_pid()"
    }

    fn try_lock(&self, target: &Target) -> Query {
        Query::new(
            "SELECT pg_try_advisory_lock(?::bigint)",
            vec![target.param().to_owned()],
        )
    }

    fn wait(&self, session: &mut dyn Session, target: &Target, slices: &mut dyn Slices) -> Waited {
        let saved = match session.query("SELECT current_setting('lock_timeout')", &[]) {
            Ok(row) => row
                .first()
                .and_then(Value::text)
                .unwrap_or_else(|| "0".to_owned()),
            Err(err) => return Waited::SettingsFailed(err),
        };
        let in_transaction = session.in_transaction();
        let param = target.param();
        let outcome = loop {
            let Some(slice) = slices.next(session) else {
                break Ok(false);
            };
            let timeout = format!("{}ms", slice.as_millis().max(1));
            if in_transaction {
                if let Err(err) = session.query("SAVEPOINT cronlock_wait", &[]) {
                    break Err(err);
                }
            }
            let attempt = session.wait_query(
                if in_transaction {
                    "SELECT set_config('lock_timeout', ?, true), pg_advisory_lock(?::bigint)"
                } else {
                    "SELECT set_config('lock_timeout', ?, false), pg_advisory_lock(?::bigint)"
                },
                &[&timeout, param],
                slice,
            );
            match attempt {
                Ok(_) => {
                    if in_transaction {
                        let _ = session.query("RELEASE SAVEPOINT cronlock_wait", &[]);
                    }
                    break Ok(true);
                }
                Err(err) if err.sqlstate == "55P03" => {
                    if in_transaction {
                        if let Err(err) = session.query("ROLLBACK TO SAVEPOINT cronlock_wait", &[])
                        {
                            break Err(err);
                        }
                    }
                }
                Err(err) => break Err(err),
            }
        };
        let acquired = match outcome {
            Ok(acquired) => acquired,
            Err(err) => return Waited::Failed(err),
        };
        // Inside a transaction the rollbacks above already put it back.
        let restore = if in_transaction {
            "SELECT set_config('lock_timeout', ?, true)"
        } else {
            "SELECT set_config('lock_timeout', ?, false)"
        };
        if let Err(err) = session.query(restore, &[&saved]) {
            if acquired {
                let _ = self.unlock(target).run(session);
            }
            return Waited::SettingsFailed(err);
        }
        if acquired {
            Waited::Granted
        } else {
            Waited::NotGranted
        }
    }

    fn unlock(&self, target: &Target) -> Query {
        Query::new(
            "SELECT pg_advisory_unlock(?::bigint)",
            vec![target.param().to_owned()],
        )
    }

    fn held_by_this_session(&self, target: &Target) -> Query {
        Query::new(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' \
             AND pid = pg_backend_pid() AND granted AND objsubid = 1 \
             AND classid = ?::oid AND objid = ?::oid \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            key_params(target),
        )
    }

    fn granted_before_abandon(&self, _target: &Target) -> Option<Query> {
        // pg_advisory_unlock() of a key this session does not hold answers
        // false (with a warning): nothing to ask first.
        None
    }

    fn holder(&self, target: &Target) -> Query {
        Query::new(
            "SELECT l.pid, host(a.client_addr), a.application_name FROM pg_locks l \
             LEFT JOIN pg_stat_activity a ON a.pid = l.pid \
             WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
             AND l.classid = ?::oid AND l.objid = ?::oid \
             AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
             LIMIT 1",
            key_params(target),
        )
    }

    fn holder_session(&self, id: i64) -> String {
        format!("PostgreSQL backend pid {id}")
    }

    fn lost_connection(&self, err: &SqlError) -> bool {
        err.sqlstate.starts_with("08")
            || matches!(err.sqlstate.as_str(), "57P01" | "57P02" | "57P03")
            || err.message.contains("server closed the connection")
            || err.message.contains("no connection to the server")
            || err.message.contains("terminating connection")
    }

    fn release_advice(&self, err: &SqlError) -> Option<&'static str> {
        // 25P02: "current transaction is aborted, commands ignored until
        // end of transaction block".
        (err.sqlstate == "25P02").then_some("roll back the transaction ($pdo->rollBack())")
    }

    fn lost_connection_error(&self, message: String) -> SqlError {
        // 08006: connection_failure.
        SqlError {
            sqlstate: "08006".to_owned(),
            code: None,
            message,
            connecting: false,
        }
    }

    fn claim(
        &self,
        session: &mut dyn Session,
        table: &str,
        key: &str,
        seconds: f64,
        holder: &str,
    ) -> Result<bool, SqlError> {
        let sql = format!(
            "INSERT INTO {table} AS claim (name, expires_at, holder) \
             VALUES (?, now() + make_interval(secs => ?::float8), ?) \
             ON CONFLICT (name) DO UPDATE SET expires_at = EXCLUDED.expires_at, \
             holder = EXCLUDED.holder \
             WHERE claim.expires_at <= now() OR claim.holder = EXCLUDED.holder \
             RETURNING 1"
        );
        let seconds = format!("{seconds:.6}");
        Ok(!session.query(&sql, &[key, &seconds, holder])?.is_empty())
    }

    fn sweep_claims_sql(&self, table: &str) -> String {
        format!(
            "DELETE FROM {table} WHERE name IN \
             (SELECT name FROM {table} WHERE expires_at <= now() LIMIT {})",
            super::claims::SWEEP_ROWS
        )
    }

    fn claims_table_sql(&self, table: &str) -> String {
        format!(
            "CREATE TABLE {table} (name varchar(255) COLLATE \"C\" PRIMARY KEY, \
             expires_at timestamptz NOT NULL, holder varchar(255) NOT NULL); \
             CREATE INDEX ON {table} (expires_at)"
        )
    }

    fn missing_table(&self, err: &SqlError) -> bool {
        // 42P01: undefined_table.
        err.sqlstate == "42P01"
    }

    fn own_connection_setup(&self, application: &str) -> Vec<Query> {
        vec![
            Query::new(
                "SELECT CASE WHEN current_setting('application_name') = '' \
                 THEN set_config('application_name', ?, false) END",
                vec![application.to_owned()],
            ),
            // One statement each: idle_session_timeout is PostgreSQL 14+.
            Query::new("SET idle_session_timeout = 0", Vec::new()),
            Query::new("SET idle_in_transaction_session_timeout = 0", Vec::new()),
        ]
    }
}

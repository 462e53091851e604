//! MySQL and MariaDB: `GET_LOCK()`, a named lock of the session.
//!
//! The traps this closes:
//! - every statement names the lock by a hex literal of its bytes
//!   (`GET_LOCK(X'6e69…', 0)`, `name_sql`), never by a parameter: the
//!   process list (INFO) of a statement prepared on the server shows
//!   `GET_LOCK(?, ?)`, and on MariaDB that is the only place that says
//!   which lock a session waits for (METADATA_LOCK_INFO lists granted
//!   locks only, performance_schema's mdl instrument is off by default), so
//!   `cronlock status` counted no waiter; it is the very lock a hand-written
//!   `GET_LOCK('name', 0)` takes (a lock name is always ASCII, see
//!   `names.rs`, so the literal's binary charset changes nothing);
//! - a wait is `GET_LOCK(name, slice)` slices of at most 100 ms, so PHP
//!   signal handlers run during it; GET_LOCK's NULL (the statement was
//!   killed) is an error, never "busy";
//! - a session is asked whether it still holds the lock with
//!   `IS_USED_LOCK(name) = CONNECTION_ID()`: a lock of another session of
//!   the same name is not ours;
//! - mysqlnd leaves its socket inheritable: on the user's PDO, the socket of
//!   the session is found (our own process-list row's client port over
//!   TCP, the server's `@@socket` as the peer over its Unix socket) and
//!   made close-on-exec, so a program the job exec()s cannot keep the
//!   session, and the lock, alive after the job is killed;
//! - a connection of the lock's own outlives `wait_timeout` (often
//!   60-300 s on shared hosts) while the job leaves it idle;
//! - a claim is `INSERT … ON DUPLICATE KEY UPDATE` whose affected rows
//!   say what happened (1 new, 2 taken, 0 held by another); on the PDO given,
//!   which may count found rows (`PDO::MYSQL_ATTR_FOUND_ROWS`: 1 for held
//!   too), a 1 is confirmed by reading the holder; claim times are UTC
//!   (`UTC_TIMESTAMP(6)`), whatever a session's `time_zone`.

use super::dialect::{Dialect, Query, Slices, Waited};
use super::errors::SqlError;
use super::names::{mysql_lock_name, Target};
use super::session::{Session, Value};
use crate::lock::shorten;
use crate::lock::sys;
use std::fmt::Write as _;

#[derive(Debug)]
pub struct MySql;

/// The lock's name as every statement spells it: `X'…'`, the hex of its
/// bytes (hex digits only: no name can change the statement).
fn name_sql(target: &Target) -> String {
    let name = target.param();
    let mut sql = String::with_capacity(3 + 2 * name.len());
    sql.push_str("X'");
    for byte in name.bytes() {
        let _ = write!(sql, "{byte:02x}");
    }
    sql.push('\'');
    sql
}

impl Dialect for MySql {
    fn driver(&self) -> &'static str {
        "mysql"
    }

    fn product(&self) -> &'static str {
        "MySQL/MariaDB"
    }

    fn target(&self, name: &str) -> Target {
        let server_name = mysql_lock_name(name.as_bytes());
        let shown =
            (server_name != name).then(|| format!("GET_LOCK name '{}'", shorten(&server_name)));
        Target::new(server_name, shown)
    }

    fn session_info_sql(&self) -> &'static str {
        // Our own process-list row needs no privilege: its HOST has the
        // client port, which names the socket of a user's PDO.
        "SELECT CONCAT(@@hostname, ':', @@port), CONNECTION_ID(), \
         (SELECT HOST FROM information_schema.PROCESSLIST WHERE ID = CONNECTION_ID()), \
         @@socket"
    }

    fn protect_users_connection(&self, row: &[Value]) {
        // Over TCP our own process-list row names the client port; over the
        // server's Unix socket (HOST 'localhost') the socket is found by its
        // peer, the server's @@socket.
        let host = row.get(2).and_then(Value::text).unwrap_or_default();
        if let Some(port) = host
            .rsplit_once(':')
            .and_then(|(_, port)| port.parse::<u16>().ok())
        {
            sys::close_on_exec_sockets(sys::SocketMatch::LocalPort(port));
        } else if let Some(socket) = row.get(3).and_then(Value::text).filter(|s| !s.is_empty()) {
            sys::close_on_exec_sockets(sys::SocketMatch::UnixPeer(std::path::Path::new(&socket)));
        }
    }

    fn try_lock(&self, target: &Target) -> Query {
        Query::new(
            format!("SELECT GET_LOCK({}, 0)", name_sql(target)),
            Vec::new(),
        )
    }

    fn wait(&self, session: &mut dyn Session, target: &Target, slices: &mut dyn Slices) -> Waited {
        // The seconds stay a parameter: one statement for every slice.
        let sql = format!("SELECT GET_LOCK({}, ?)", name_sql(target));
        loop {
            let Some(slice) = slices.next(session) else {
                return Waited::NotGranted;
            };
            let seconds = format!("{:.3}", slice.as_secs_f64());
            match session.wait_query(&sql, &[&seconds], slice) {
                Ok(row) => match row.first().and_then(Value::int) {
                    Some(1) => return Waited::Granted,
                    Some(0) => {}
                    _ => return Waited::Null,
                },
                Err(err) => return Waited::Failed(err),
            }
        }
    }

    fn unlock(&self, target: &Target) -> Query {
        Query::new(
            format!("SELECT RELEASE_LOCK({})", name_sql(target)),
            Vec::new(),
        )
    }

    fn held_by_this_session(&self, target: &Target) -> Query {
        Query::new(
            format!(
                "SELECT IS_USED_LOCK({}) = CONNECTION_ID()",
                name_sql(target)
            ),
            Vec::new(),
        )
    }

    fn granted_before_abandon(&self, target: &Target) -> Option<Query> {
        Some(self.held_by_this_session(target))
    }

    fn holder(&self, target: &Target) -> Query {
        Query::new(
            format!(
                "SELECT l.id, CONCAT(p.USER, '@', p.HOST), NULL FROM (SELECT IS_USED_LOCK({}) AS id) l \
                 LEFT JOIN information_schema.PROCESSLIST p ON p.ID = l.id",
                name_sql(target)
            ),
            Vec::new(),
        )
    }

    fn holder_session(&self, id: i64) -> String {
        format!("MySQL connection {id}")
    }

    fn lost_connection(&self, err: &SqlError) -> bool {
        // 2006 gone away, 2013 lost during query, 2055 lost at reading,
        // 1927 connection killed (MariaDB), 1053 server shutdown,
        // 4031 disconnected for inactivity (MySQL 8).
        matches!(err.code, Some(2006 | 2013 | 2055 | 1927 | 1053 | 4031))
    }

    fn release_advice(&self, err: &SqlError) -> Option<&'static str> {
        // 2014: "Cannot execute queries while other unbuffered queries
        // are active" (the driver's words carry no code of their own).
        (err.code == Some(2014) || err.message.contains("unbuffered queries")).then_some(
            "fetch the rest of the open result set or close it ($statement->closeCursor())",
        )
    }

    fn lost_connection_error(&self, message: String) -> SqlError {
        // 2013: CR_SERVER_LOST, "Lost connection to server during query".
        SqlError {
            sqlstate: "HY000".to_owned(),
            code: Some(2013),
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
        // `holder` is assigned first, from the row's old expiry; the
        // expiry then follows the holder: only a taken row gets ours.
        let sql = format!(
            "INSERT INTO {table} (name, expires_at, holder) \
             VALUES (?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, ?) \
             ON DUPLICATE KEY UPDATE \
             holder = IF(expires_at <= UTC_TIMESTAMP(6) OR holder = VALUES(holder), \
             VALUES(holder), holder), \
             expires_at = IF(holder = VALUES(holder), VALUES(expires_at), expires_at)"
        );
        let micros = format!("{:.0}", seconds * 1e6);
        match session.execute(&sql, &[key, &micros, holder])? {
            0 => Ok(false),
            // The lock's own connection never counts found rows.
            1 if session.owns_connection() => Ok(true),
            1 => {
                let mine = format!("SELECT COUNT(*) FROM {table} WHERE name = ? AND holder = ?");
                let row = session.query(&mine, &[key, holder])?;
                Ok(row.first().and_then(Value::int) == Some(1))
            }
            _ => Ok(true),
        }
    }

    fn sweep_claims_sql(&self, table: &str) -> String {
        format!(
            "DELETE FROM {table} WHERE expires_at <= UTC_TIMESTAMP(6) LIMIT {}",
            super::claims::SWEEP_ROWS
        )
    }

    fn claims_table_sql(&self, table: &str) -> String {
        format!(
            "CREATE TABLE {table} (name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin \
             NOT NULL PRIMARY KEY, expires_at DATETIME(6) NOT NULL, holder VARCHAR(255) NOT NULL, \
             INDEX (expires_at))"
        )
    }

    fn missing_table(&self, err: &SqlError) -> bool {
        // 1146: ER_NO_SUCH_TABLE.
        err.code == Some(1146) || err.sqlstate == "42S02"
    }

    fn own_connection_setup(&self, _application: &str) -> Vec<Query> {
        // 31536000 s (a year) is the largest value MySQL and MariaDB accept.
        vec![Query::new(
            "SET SESSION wait_timeout = 31536000",
            Vec::new(),
        )]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_is_a_hex_literal_of_the_server_names_bytes() {
        // SELECT GET_LOCK(X'69742773', 0) is SELECT GET_LOCK('it''s', 0)
        assert_eq!(name_sql(&MySql.target("it's")), "X'69742773'");
        let hashed = name_sql(&MySql.target("Nightly Report"));
        let sha1 = sha1_smol::Sha1::from("Nightly Report").digest().to_string();
        let hex: String = sha1.bytes().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hashed, format!("X'63726f6e6c6f636b3a{hex}'"));
    }
}

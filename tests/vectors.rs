//! tests/vectors.json, the formats cronlock and cronlock/polyfill must
//! agree on, against the extension's public functions
//! (php-tests/VectorsTest.php checks the same file on both implementations,
//! through their PHP API).

use cronlock::error::Error;
use cronlock::lock::database::{mysql_lock_name, postgres_key};
use cronlock::lock::file::{parse_record, parse_record_pid, Record, RECORD_LEN};
use cronlock::lock::named::script_lock_name;
use cronlock::lock::redis::{RedisLock, RedisOptions};
use cronlock::lock::shorten;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

fn vectors() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn list<'a>(value: &'a Value, key: &str) -> &'a Vec<Value> {
    value[key]
        .as_array()
        .unwrap_or_else(|| panic!("{key} is a list"))
}

fn text<'a>(value: &'a Value, key: &str) -> &'a str {
    value[key]
        .as_str()
        .unwrap_or_else(|| panic!("{key} in {value}"))
}

/// A record's file content: `text` padded to 127 bytes and a newline, or
/// `exact` as it is.
fn record_bytes(vector: &Value) -> Vec<u8> {
    if let Some(exact) = vector["exact"].as_str() {
        return exact.as_bytes().to_vec();
    }
    let mut bytes = text(vector, "text").as_bytes().to_vec();
    assert!(bytes.len() < RECORD_LEN, "{vector}");
    bytes.resize(RECORD_LEN - 1, b' ');
    bytes.push(b'\n');
    bytes
}

#[test]
fn holder_records_accepted_and_refused() {
    let records = &vectors()["holder_records"];
    for vector in list(records, "accepted") {
        let bytes = record_bytes(vector);
        let pid = vector["pid"].as_u64().map(|pid| pid as u32);
        assert_eq!(parse_record_pid(&bytes), pid, "{vector}");
        let free = vector["free"].as_bool().unwrap_or(false);
        match parse_record(&bytes) {
            Some(Record::Free { .. }) => assert!(free, "{vector}"),
            Some(Record::Held { .. }) => assert!(!free, "{vector}"),
            None => panic!("{vector} is a record"),
        }
    }
    for vector in list(records, "refused") {
        assert_eq!(parse_record(&record_bytes(vector)), None, "{vector}");
    }
}

#[test]
fn script_lock_names_from_main_script_paths() {
    for vector in list(&vectors(), "script_lock_names") {
        let name = script_lock_name(Path::new(text(vector, "path")));
        assert_eq!(name, text(vector, "name"), "{vector}");
    }
}

#[test]
fn escapes_of_names_and_paths_in_messages() {
    for vector in list(&vectors(), "escapes") {
        assert_eq!(
            shorten(text(vector, "text")),
            text(vector, "shown"),
            "{vector}"
        );
    }
}

#[test]
fn database_name_mappings() {
    for vector in list(&vectors(), "database_names") {
        let name = text(vector, "name").as_bytes();
        assert_eq!(mysql_lock_name(name), text(vector, "mysql"), "{vector}");
        assert_eq!(
            Some(postgres_key(name)),
            vector["postgres"].as_i64(),
            "{vector}"
        );
    }
}

#[test]
fn redis_dsns_accepted_and_refused() {
    let dsns = &vectors()["redis_dsns"];
    let new =
        |dsn: &str| RedisLock::new(dsn, "k", Duration::from_secs(60), RedisOptions::default());
    for dsn in list(dsns, "accepted") {
        let dsn = dsn.as_str().unwrap();
        if let Err(err) = new(dsn) {
            panic!("{dsn:?} refused: {err}");
        }
    }
    for vector in list(dsns, "refused") {
        let err = new(text(vector, "dsn"))
            .err()
            .unwrap_or_else(|| panic!("{vector} accepted"));
        assert_eq!(text(vector, "error"), "ValueError", "{vector}");
        assert!(
            matches!(err, Error::InvalidValue { .. }),
            "{vector}: {err:?}"
        );
        assert_eq!(err.to_string(), text(vector, "message"), "{vector}");
    }
}

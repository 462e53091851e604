//! Tests against real redis-servers started per test (see [`server`]).

mod cluster;
mod redlock;
mod sentinel;
mod server;

use super::dsn::Secrets;
use super::options::ttl_ms;
use super::*;
use crate::error::{Error, Result};
use crate::lock::{sys, Wait};
use redis::{Connection, IntoConnectionInfo};
use server::{raw_client, Listen, TestServer, ENV_LOCK};
use std::collections::HashSet;
use std::net::TcpListener;
use std::thread;
use std::time::{Duration, Instant};

fn new_lock(dsn: &str, key: &str, ttl: Duration) -> RedisLock {
    RedisLock::new(dsn, key, ttl, RedisOptions::default()).unwrap()
}

fn auto_renewing(dsn: &str, key: &str, ttl: Duration) -> RedisLock {
    let options = RedisOptions {
        auto_renew: true,
        ..RedisOptions::default()
    };
    RedisLock::new(dsn, key, ttl, options).unwrap()
}

fn within(timeout: Duration) -> Wait {
    Wait::Until(Instant::now() + timeout)
}

fn get(raw: &mut Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(raw).unwrap()
}

fn pttl(raw: &mut Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(raw).unwrap()
}

fn subscribers(raw: &mut Connection) -> i64 {
    let (_, count): (String, i64) = redis::cmd("PUBSUB")
        .arg(&["NUMSUB", "job:released"])
        .query(raw)
        .unwrap();
    count
}

fn evalsha_calls(raw: &mut Connection) -> u64 {
    let stats: String = redis::cmd("INFO").arg("commandstats").query(raw).unwrap();
    stats
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
        .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
}

fn connection_error(result: Result<bool>) -> String {
    match result {
        Err(Error::Connection(message)) => message,
        other => panic!("expected a connection error, got {other:?}"),
    }
}

fn bad_argument(result: Result<RedisLock>) -> (String, String) {
    match result {
        Err(Error::InvalidValue { arg, reason }) => (arg, reason),
        Err(other) => panic!("expected a bad value, got {other:?}"),
        Ok(_) => panic!("expected a bad value, got a lock"),
    }
}

#[test]
fn new_validates_arguments_without_connecting() {
    let dsn = "redis://127.0.0.1:1";
    let ttl = Duration::from_secs(1);
    let options = RedisOptions::default();
    assert_eq!(
        bad_argument(RedisLock::new(dsn, "", ttl, options)).0,
        "$key"
    );
    assert_eq!(
        bad_argument(RedisLock::new(dsn, "a\0b", ttl, options)).0,
        "$key"
    );
    assert_eq!(
        bad_argument(RedisLock::new(dsn, "k", Duration::ZERO, options)).0,
        "$ttl"
    );
    let too_long = MAX_TTL + Duration::from_nanos(1);
    assert_eq!(
        bad_argument(RedisLock::new(dsn, "k", too_long, options)).0,
        "$ttl"
    );
    let no_connect = RedisOptions {
        connect_timeout: Duration::ZERO,
        ..options
    };
    let (arg, _) = bad_argument(RedisLock::new(dsn, "k", ttl, no_connect));
    assert_eq!(arg, "$options['connect_timeout']");
    let no_read = RedisOptions {
        read_timeout: Duration::ZERO,
        ..options
    };
    let (arg, _) = bad_argument(RedisLock::new(dsn, "k", ttl, no_read));
    assert_eq!(arg, "$options['read_timeout']");
    let endless = RedisOptions {
        connect_timeout: MAX_TIMEOUT + Duration::from_secs(1),
        ..options
    };
    let (arg, _) = bad_argument(RedisLock::new(dsn, "k", ttl, endless));
    assert_eq!(
        arg, "$options['connect_timeout']",
        "no deadline may overflow"
    );
    assert!(RedisLock::new(
        dsn,
        "k",
        ttl,
        RedisOptions {
            read_timeout: MAX_TIMEOUT,
            ..options
        }
    )
    .is_ok());

    for bad_dsn in [
        "",
        "localhost:6379",
        "http://:Sup3r-S3cret@127.0.0.1",
        "redis://:Sup3r-S3cret@127.0.0.1/notadb",
        "redis://user:Sup3r-S3cret@127.0.0.1:99999",
        "redis://:Sup3r%2DS3cret@127.0.0.1/x",
        "rediss://:Sup3r-S3cret@127.0.0.1/#verify",
        "redis://:Sup3r-S3cret@0.0.0.0",
        "unix:///tmp/redis.sock?pass=Sup3r-S3cret&db=x",
        "redis://:Sup3r-S3cret@127.0.0.1:6379\0",
        "\0redis://:Sup3r-S3cret@127.0.0.1",
        "unix:///tmp/cronlock\0.sock",
        "redis://:Sup3r-S3cret@127.0.0.1\t/0",
        " redis://:Sup3r-S3cret@127.0.0.1",
        "redis://:Sup3r-S3cret@127.0.0.1/-1",
    ] {
        let (arg, reason) = bad_argument(RedisLock::new(bad_dsn, "k", ttl, options));
        assert_eq!(arg, "$dsn", "{bad_dsn}");
        assert!(!reason.contains("S3cret"), "{bad_dsn}: {reason}");
        assert!(
            !reason.contains("InvalidClientConfig"),
            "{bad_dsn}: {reason}"
        );
    }

    // Lazy: nothing listens on port 1, yet nothing fails before acquire.
    let started = Instant::now();
    let mut lock = new_lock("redis://127.0.0.1:1", "k", ttl);
    assert_eq!(lock.release(), Ok(false));
    assert_eq!(lock.renew(None), Ok(false));
    assert!(!lock.is_held());
    assert_eq!((lock.token(), lock.fencing_token()), (None, None));
    assert_eq!((lock.key(), lock.target.ttl), ("k", ttl));
    drop(lock);
    assert!(started.elapsed() < Duration::from_millis(100));
    assert!(tls_supported());
}

#[test]
fn ttl_conversions() {
    assert_eq!(ttl_from_secs(1.5), Ok(Duration::from_millis(1500)));
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e10] {
        assert!(
            matches!(ttl_from_secs(bad), Err(Error::InvalidValue { arg, .. }) if arg == "$ttl")
        );
    }
    // Finite, but more than a Duration holds: the message says "too long".
    for huge in [1e10, 1e20, 1e300, f64::MAX] {
        let Err(Error::InvalidValue { reason, .. }) = ttl_from_secs(huge) else {
            panic!("{huge} accepted");
        };
        assert!(
            reason.contains("at most 315360000 seconds"),
            "{huge}: {reason}"
        );
    }
    assert_eq!(ttl_ms(Duration::from_nanos(1)), 1);
    assert_eq!(ttl_ms(Duration::from_millis(1)), 1);
    assert_eq!(ttl_ms(Duration::from_micros(1001)), 2);
    assert_eq!(ttl_ms(MAX_TTL), MAX_TTL.as_secs() * 1000);
}

#[test]
fn scrub_removes_every_form_of_the_password() {
    let dsn = "redis://user:p%40ss@127.0.0.1/0";
    let mut secrets = Secrets::in_dsn(dsn);
    let info = dsn.into_connection_info().unwrap();
    secrets.add(info.redis_settings().password());
    assert_eq!(
        secrets.scrub("a p%40ss b p@ss c".to_owned()),
        "a *** b *** c"
    );
    let unix = Secrets::in_dsn("unix:///run/redis.sock?pass=a%2Bb&db=1");
    assert_eq!(unix.scrub("a%2Bb a+b".to_owned()), "*** ***");
}

#[test]
fn acquire_contention_release() {
    let server = TestServer::start();
    let mut raw = server.raw();
    let dsn = server.raw_dsn();
    let mut a = new_lock(&dsn, "job", Duration::from_secs(10));
    let mut b = new_lock(&dsn, "job", Duration::from_secs(10));

    assert_eq!(a.acquire(Wait::Once), Ok(true));
    assert!(a.is_held());
    let token = a.token().unwrap().to_owned();
    let fence = a.fencing_token();
    let _: i64 = redis::cmd("PEXPIRE")
        .arg("job")
        .arg(2_000)
        .query(&mut raw)
        .unwrap();
    let before = evalsha_calls(&mut raw);
    assert_eq!(a.acquire(Wait::Once), Ok(true), "holding again: still ours");
    assert_eq!(evalsha_calls(&mut raw), before + 1, "asks the server, once");
    assert!(
        (9_000..=10_000).contains(&pttl(&mut raw, "job")),
        "and extends the TTL to the lock's"
    );
    assert_eq!(
        (a.token(), a.fencing_token()),
        (Some(token.as_str()), fence)
    );
    assert_eq!(get(&mut raw, "job").as_deref(), Some(token.as_str()));

    // Another object of this thread on the same key: busy at once,
    // without a round trip; a wait would deadlock and is refused.
    let before = evalsha_calls(&mut raw);
    assert_eq!(b.acquire(Wait::Once), Ok(false));
    assert!(b.busy_in_this_process());
    assert_eq!(evalsha_calls(&mut raw), before);
    match b.acquire(within(Duration::from_secs(5))) {
        Err(Error::Lock(message)) => assert!(
            message.contains("redis key 'job' at 127.0.0.1:")
                && message.contains("is already held by this process")
                && message.contains("waiting for it would deadlock"),
            "{message}"
        ),
        other => panic!("expected a LockException, got {other:?}"),
    }
    assert!(!b.is_held());
    assert_eq!(
        b.last_holder(),
        Some((sys::current_pid(), sys::hostname())),
        "the busy reply names the holder"
    );
    assert_eq!((b.token(), b.fencing_token()), (None, None));
    assert_eq!(b.release(), Ok(false));
    assert_eq!(get(&mut raw, "job").as_deref(), Some(token.as_str()));

    assert_eq!(a.renew(Some(Duration::from_secs(30))), Ok(true));
    assert!((29_000..=30_000).contains(&pttl(&mut raw, "job")));
    assert_eq!(a.renew(None), Ok(true));
    assert!(pttl(&mut raw, "job") <= 10_000);
    assert!(matches!(
        a.renew(Some(Duration::ZERO)),
        Err(Error::InvalidValue { .. })
    ));

    assert_eq!(a.release(), Ok(true));
    assert!(!a.is_held());
    assert_eq!(a.token(), None);
    assert_eq!(get(&mut raw, "job"), None);
    assert_eq!(a.release(), Ok(false), "release is idempotent");

    assert_eq!(b.acquire(Wait::Once), Ok(true));
    drop(b);
    assert_eq!(get(&mut raw, "job"), None, "drop releases");
}

#[test]
fn tokens_are_random_and_fencing_increases_across_holders() {
    let server = TestServer::start();
    let mut raw = server.raw();
    let dsn = server.raw_dsn();
    let mut locks = [
        new_lock(&dsn, "job", Duration::from_secs(10)),
        new_lock(&dsn, "job", Duration::from_secs(10)),
    ];
    let mut tokens = HashSet::new();
    let mut last_fence = 0;
    for round in 0..6 {
        let lock = &mut locks[round % 2];
        assert_eq!(lock.acquire(Wait::Once), Ok(true));
        let token = lock.token().unwrap().to_owned();
        let (random, holder) = token.split_once(':').unwrap();
        assert_eq!(random.len(), 32, "128 bits in hex");
        assert!(random.bytes().all(|b| b.is_ascii_hexdigit()));
        let pid = sys::current_pid();
        assert_eq!(holder, format!("{pid}@{}", sys::hostname()));
        assert!(tokens.insert(token));
        let fence = lock.fencing_token().unwrap();
        assert!(fence > last_fence);
        last_fence = fence;
        let counter: i64 = redis::cmd("GET").arg("job:fence").query(&mut raw).unwrap();
        assert_eq!(counter, fence);
        assert_eq!(lock.release(), Ok(true));
    }
}

/// Every key of ours left after a release has a TTL; the fence counter's
/// lasts 7 days (or 100 TTLs) from its last use, and a counter made anew
/// (expired, or lost in a restart without persistence) starts at the
/// server's clock in microseconds, above every number handed out before.
#[test]
fn no_key_is_left_without_a_ttl_and_fencing_increases_across_the_counters_expiry_and_a_restart() {
    const WEEK_MS: i64 = 7 * 24 * 3600 * 1000;
    let mut server = TestServer::start();
    let dsn = server.raw_dsn();
    let mut fences: Vec<i64> = Vec::new();
    let cycle = |raw: &mut Connection, fences: &mut Vec<i64>, ttl: Duration| {
        let mut lock = new_lock(&dsn, "job", ttl);
        assert_eq!(lock.acquire(Wait::Once), Ok(true));
        fences.push(lock.fencing_token().unwrap());
        assert_eq!(lock.release(), Ok(true));
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(raw).unwrap();
        assert_eq!(keys, vec!["job:fence".to_owned()], "only the counter stays");
        pttl(raw, "job:fence")
    };
    let mut raw = server.raw();
    let left = cycle(&mut raw, &mut fences, Duration::from_secs(10));
    assert!(left > WEEK_MS - 60_000 && left <= WEEK_MS, "{left}");
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(&mut raw).unwrap();
    assert!(
        fences[0] <= secs * 1_000_000 + micros && fences[0] > (secs - 60) * 1_000_000,
        "a new counter starts at the server's clock in µs: {}",
        fences[0]
    );
    cycle(&mut raw, &mut fences, Duration::from_secs(10));
    assert_eq!(fences[1], fences[0] + 1, "then counts by one");
    let long = cycle(&mut raw, &mut fences, Duration::from_secs(7200));
    assert!(
        long > 7200 * 100 * 1000 - 60_000,
        "100 TTLs when longer: {long}"
    );

    // The counter expires: its next one starts above it.
    let _: () = redis::cmd("PEXPIRE")
        .arg(&["job:fence", "1"])
        .query(&mut raw)
        .unwrap();
    thread::sleep(Duration::from_millis(20));
    cycle(&mut raw, &mut fences, Duration::from_secs(10));
    // A restart without persistence loses it: the same.
    server.restart();
    let mut raw = server.raw();
    assert_eq!(get(&mut raw, "job:fence"), None, "lost in the restart");
    cycle(&mut raw, &mut fences, Duration::from_secs(10));
    for pair in fences.windows(2) {
        assert!(pair[1] > pair[0], "strictly increasing: {fences:?}");
    }
}

#[test]
fn expired_lock_taken_over_is_left_alone() {
    let server = TestServer::start();
    let mut raw = server.raw();
    let dsn = server.raw_dsn();
    let mut old = new_lock(&dsn, "job", Duration::from_millis(150));
    let mut new = new_lock(&dsn, "job", Duration::from_secs(10));
    assert_eq!(old.acquire(Wait::Once), Ok(true));
    thread::sleep(Duration::from_millis(300));
    assert!(!old.is_held(), "the TTL ran out");
    assert_eq!(old.token(), None);
    assert_eq!(new.acquire(Wait::Once), Ok(true));
    let token = new.token().unwrap().to_owned();

    assert_eq!(old.renew(None), Ok(false));
    assert_eq!(old.release(), Ok(false));
    assert!(!old.is_held());
    assert_eq!(get(&mut raw, "job").as_deref(), Some(token.as_str()));
    assert!(
        pttl(&mut raw, "job") > 9_000,
        "not shortened by the old holder"
    );
    assert!(new.is_held());
}

#[test]
fn excludes_and_respects_plain_set_nx_clients() {
    let server = TestServer::start();
    let mut raw = server.raw();
    let dsn = server.raw_dsn();
    let mut lock = new_lock(&dsn, "job", Duration::from_secs(10));
    let set_nx = |raw: &mut Connection, ttl: Option<u64>| -> bool {
        let mut cmd = redis::cmd("SET");
        cmd.arg("job").arg("other").arg("NX");
        if let Some(ttl) = ttl {
            cmd.arg("PX").arg(ttl);
        }
        cmd.query::<Option<String>>(raw).unwrap().is_some()
    };

    assert!(set_nx(&mut raw, Some(10_000)));
    assert_eq!(lock.acquire(Wait::Once), Ok(false));
    assert_eq!(
        lock.last_holder(),
        None,
        "another client's value names nobody"
    );
    assert_eq!(lock.release(), Ok(false));
    assert_eq!(get(&mut raw, "job").as_deref(), Some("other"));
    let _: i64 = redis::cmd("DEL").arg("job").query(&mut raw).unwrap();

    assert_eq!(lock.acquire(Wait::Once), Ok(true));
    assert!(!set_nx(&mut raw, None));
    assert_eq!(lock.release(), Ok(true));
    assert!(set_nx(&mut raw, None), "a key without TTL");

    // A waiter gives up at its deadline...
    let started = Instant::now();
    assert_eq!(lock.acquire(within(Duration::from_millis(300))), Ok(false));
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(300) && waited < Duration::from_millis(900));

    // ...and notices a DEL that publishes nothing by polling.
    let waiter = thread::spawn(move || {
        let acquired = lock.acquire(within(Duration::from_secs(5)));
        (acquired, Instant::now())
    });
    thread::sleep(Duration::from_millis(200));
    let deleted = Instant::now();
    let _: i64 = redis::cmd("DEL").arg("job").query(&mut raw).unwrap();
    let (acquired, at) = waiter.join().unwrap();
    assert_eq!(acquired, Ok(true));
    let latency = at.saturating_duration_since(deleted);
    println!("plain DEL -> waiter holds: {latency:?}");
    assert!(latency < Duration::from_millis(500));
}

#[test]
fn waiter_takes_over_on_release_and_on_expiry() {
    let server = TestServer::start();
    let mut raw = server.raw();
    let dsn = server.raw_dsn();
    let mut holder = new_lock(&dsn, "job", Duration::from_secs(10));
    let mut waiter = new_lock(&dsn, "job", Duration::from_secs(10));
    assert_eq!(holder.acquire(Wait::Once), Ok(true));

    let waiting = thread::spawn(move || {
        let acquired = waiter.acquire(within(Duration::from_secs(5)));
        (acquired, Instant::now(), waiter)
    });
    thread::sleep(Duration::from_millis(300));
    assert_eq!(
        subscribers(&mut raw),
        1,
        "the waiter listens for the release"
    );
    let released = Instant::now();
    assert_eq!(holder.release(), Ok(true));
    let (acquired, at, mut waiter) = waiting.join().unwrap();
    assert_eq!(acquired, Ok(true));
    let latency = at.saturating_duration_since(released);
    println!("release -> waiter holds: {latency:?}");
    assert!(latency < Duration::from_millis(500));
    assert_eq!(subscribers(&mut raw), 0);
    assert_eq!(get(&mut raw, "job").as_deref(), waiter.token());
    assert_eq!(waiter.release(), Ok(true));

    // A holder that died: the key's PTTL bounds the wait.
    let _: () = redis::cmd("SET")
        .arg("job")
        .arg("crashed")
        .arg("PX")
        .arg(300)
        .query(&mut raw)
        .unwrap();
    let started = Instant::now();
    assert_eq!(waiter.acquire(Wait::Forever), Ok(true));
    let waited = started.elapsed();
    println!("expiry -> waiter holds after {waited:?}");
    assert!(waited >= Duration::from_millis(200) && waited < Duration::from_secs(1));
}

#[test]
fn authenticates_with_password_and_acl_user() {
    let server = TestServer::start_with(
        Listen::Tcp,
        ":Master-Pw-7x@",
        &["--requirepass", "Master-Pw-7x"],
    );
    let mut raw = server.raw();
    // Redis 7 gives new users no channel rights: PUBLISH is refused.
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "cron", "on", ">Cron-Pw-9z", "~*", "+@all"])
        .query(&mut raw)
        .unwrap();
    let address = format!("127.0.0.1:{}", server.port);
    let user_dsn = format!("redis://cron:Cron-Pw-9z@{address}");
    let mut as_user = raw_client(&user_dsn);
    assert!(redis::cmd("PUBLISH")
        .arg("c")
        .arg("m")
        .query::<i64>(&mut as_user)
        .is_err());

    let mut lock = new_lock(
        &format!("redis://:Master-Pw-7x@{address}"),
        "job",
        Duration::from_secs(10),
    );
    assert_eq!(lock.acquire(Wait::Once), Ok(true));
    assert_eq!(lock.release(), Ok(true));

    let mut holder = new_lock(&user_dsn, "job", Duration::from_secs(10));
    let mut waiter = new_lock(&user_dsn, "job", Duration::from_secs(10));
    assert_eq!(holder.acquire(Wait::Once), Ok(true));
    let waiting = thread::spawn(move || {
        let acquired = waiter.acquire(within(Duration::from_secs(5)));
        (acquired, Instant::now(), waiter)
    });
    thread::sleep(Duration::from_millis(200));
    let released = Instant::now();
    assert_eq!(
        holder.release(),
        Ok(true),
        "release works without PUBLISH rights"
    );
    let (acquired, at, mut waiter) = waiting.join().unwrap();
    assert_eq!(acquired, Ok(true));
    assert!(at.saturating_duration_since(released) < Duration::from_millis(500));
    assert_eq!(waiter.release(), Ok(true));

    for dsn in [
        format!("redis://:Wrong-Pw-1x@{address}"),
        format!("redis://cron:Wrong-Pw-1x@{address}"),
        format!("redis://nobody:Wrong-Pw-1x@{address}"),
        format!("redis://{address}"),
    ] {
        let mut lock = new_lock(&dsn, "job", Duration::from_secs(10));
        let started = Instant::now();
        let message = connection_error(lock.acquire(Wait::Once));
        assert!(started.elapsed() < Duration::from_secs(1));
        println!("{message}");
        for password in ["Wrong-Pw-1x", "Master-Pw-7x", "Cron-Pw-9z"] {
            assert!(!message.contains(password), "{message}");
        }
        assert!(!lock.is_held());
    }
}

#[test]
fn selects_the_database() {
    let server = TestServer::start();
    let dsn = server.raw_dsn();
    let mut lock = new_lock(&format!("{dsn}/3"), "job", Duration::from_secs(10));
    assert_eq!(lock.acquire(Wait::Once), Ok(true));
    let mut db3 = raw_client(&format!("{dsn}/3"));
    assert_eq!(get(&mut db3, "job").as_deref(), lock.token());
    assert!(get(&mut db3, "job:fence").is_some());
    assert_eq!(get(&mut server.raw(), "job"), None);
    assert_eq!(lock.release(), Ok(true));
}

#[test]
fn connects_over_a_unix_socket() {
    let server = TestServer::start_with(Listen::Unix, "", &["--unixsocketperm", "700"]);
    let dsn = server.raw_dsn();
    let mut a = new_lock(&dsn, "job", Duration::from_secs(10));
    let mut b = new_lock(&dsn, "job", Duration::from_secs(10));
    assert_eq!(a.acquire(Wait::Once), Ok(true));
    assert_eq!(b.acquire(Wait::Once), Ok(false));
    assert_eq!(a.release(), Ok(true));

    let mut in_db2 = new_lock(&format!("{dsn}?db=2"), "job", Duration::from_secs(10));
    assert_eq!(in_db2.acquire(Wait::Once), Ok(true));
    let mut db2 = raw_client(&format!("{dsn}?db=2"));
    assert_eq!(get(&mut db2, "job").as_deref(), in_db2.token());
    assert_eq!(b.acquire(Wait::Once), Ok(true), "db 0 is another key");
}

#[test]
fn tls_verifies_with_ssl_cert_file_unless_insecure() {
    let _env = ENV_LOCK.lock();
    let server = TestServer::start_with(Listen::Tls, "", &[]);
    let verified = format!("rediss://127.0.0.1:{}", server.port);
    let previous = std::env::var_os("SSL_CERT_FILE");

    std::env::set_var("SSL_CERT_FILE", server.dir.join("ca.crt"));
    let mut a = new_lock(&verified, "job", Duration::from_secs(10));
    let mut b = new_lock(&verified, "job", Duration::from_secs(10));
    assert_eq!(a.acquire(Wait::Once), Ok(true));
    assert_eq!(b.acquire(Wait::Once), Ok(false));
    assert_eq!(a.release(), Ok(true));

    std::env::set_var("SSL_CERT_FILE", server.dir.join("other-ca.crt"));
    let mut untrusted = new_lock(&verified, "job", Duration::from_secs(10));
    // Another thread: this one's verified connection is kept, and shared.
    let message = thread::spawn(move || connection_error(untrusted.acquire(Wait::Once)))
        .join()
        .unwrap();
    println!("{message}");
    let mut insecure = new_lock(
        &format!("{verified}/#insecure"),
        "job",
        Duration::from_secs(10),
    );
    assert_eq!(insecure.acquire(Wait::Once), Ok(true));
    assert_eq!(insecure.release(), Ok(true));

    match previous {
        Some(value) => std::env::set_var("SSL_CERT_FILE", value),
        None => std::env::remove_var("SSL_CERT_FILE"),
    }
}

#[test]
fn dead_server_fails_fast_and_forgets_on_release() {
    let mut server = TestServer::start();
    let dsn = server.raw_dsn();
    let mut released = new_lock(&dsn, "a", Duration::from_secs(10));
    let mut renewed = new_lock(&dsn, "b", Duration::from_secs(10));
    let mut expired = new_lock(&dsn, "c", Duration::from_millis(100));
    assert_eq!(released.acquire(Wait::Once), Ok(true));
    assert_eq!(renewed.acquire(Wait::Once), Ok(true));
    assert_eq!(expired.acquire(Wait::Once), Ok(true));
    server.kill();
    thread::sleep(Duration::from_millis(150));
    assert_eq!(
        expired.release(),
        Ok(false),
        "past its TTL the key is not ours: nothing to send to a dead server"
    );

    let started = Instant::now();
    connection_error(released.release());
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(!released.is_held(), "the key expires by its TTL");
    assert_eq!(released.release(), Ok(false));

    connection_error(renewed.renew(None));
    assert!(renewed.is_held(), "still ours until the TTL runs out");

    let started = Instant::now();
    let message = connection_error(released.acquire(Wait::Once));
    println!("{message}");
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[test]
fn unresponsive_server_times_out() {
    // Accepts TCP connections (the kernel does) but never answers.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let options = RedisOptions {
        connect_timeout: Duration::from_millis(200),
        ..RedisOptions::default()
    };
    // AUTH and SELECT share the one connect deadline.
    for dsn in [
        format!("redis://127.0.0.1:{port}"),
        format!("redis://cron:pw@127.0.0.1:{port}/3"),
    ] {
        let mut lock = RedisLock::new(&dsn, "job", Duration::from_secs(10), options).unwrap();
        let started = Instant::now();
        let message = connection_error(lock.acquire(Wait::Once));
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(150) && waited < Duration::from_millis(600),
            "{dsn}: {waited:?}"
        );
        assert!(
            message.contains("cannot connect to Redis at 127.0.0.1:")
                && message.contains("no answer within 200 ms"),
            "{message}"
        );
    }

    let server = TestServer::start();
    let options = RedisOptions {
        read_timeout: Duration::from_millis(300),
        ..RedisOptions::default()
    };
    let mut lock =
        RedisLock::new(&server.raw_dsn(), "job", Duration::from_secs(10), options).unwrap();
    assert_eq!(lock.acquire(Wait::Once), Ok(true));
    let _: () = redis::cmd("CLIENT")
        .arg(&["PAUSE", "1500", "ALL"])
        .query(&mut server.raw())
        .unwrap();
    let paused = Instant::now();
    // No answer within read_timeout, then none to the reconnect's PING
    // within connect_timeout.
    let message = connection_error(lock.renew(None));
    let waited = paused.elapsed();
    assert!(
        waited >= Duration::from_millis(1250) && waited < Duration::from_millis(2500),
        "{waited:?}"
    );
    assert!(message.contains("no answer within 1000 ms"), "{message}");
    assert!(lock.is_held());
    thread::sleep(Duration::from_millis(1600).saturating_sub(paused.elapsed()));
    assert_eq!(lock.renew(None), Ok(true), "reconnects");
}

#[test]
fn auto_renew_keeps_the_lock_until_release() {
    let server = TestServer::start();
    let mut raw = server.raw();
    let dsn = server.raw_dsn();
    let mut lock = auto_renewing(&dsn, "job", Duration::from_millis(300));
    assert_eq!(lock.acquire(Wait::Once), Ok(true));
    let token = lock.token().unwrap().to_owned();
    for _ in 0..15 {
        thread::sleep(Duration::from_millis(100));
        assert!(lock.is_held());
        assert_eq!(get(&mut raw, "job").as_deref(), Some(token.as_str()));
    }
    assert_eq!(lock.release(), Ok(true));
    let calls = evalsha_calls(&mut raw);
    thread::sleep(Duration::from_millis(350));
    assert_eq!(evalsha_calls(&mut raw), calls, "the renewer stopped");

    // A renewer sleeping for 10 s is woken at once by release and drop.
    let mut lock = auto_renewing(&dsn, "job", Duration::from_secs(30));
    assert_eq!(lock.acquire(Wait::Once), Ok(true));
    let started = Instant::now();
    assert_eq!(lock.release(), Ok(true));
    assert!(started.elapsed() < Duration::from_millis(300));
    assert_eq!(lock.acquire(Wait::Once), Ok(true));
    let started = Instant::now();
    drop(lock);
    assert!(started.elapsed() < Duration::from_millis(300));
    assert_eq!(get(&mut raw, "job"), None);
}

/// Connections to the server, ours (`raw`) left out.
fn clients(raw: &mut Connection) -> usize {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(raw).unwrap();
    list.lines()
        .filter(|line| !line.contains("cmd=client|list"))
        .count()
}

#[test]
fn many_renewing_locks_share_one_renewal_connection_per_server() {
    let (first, second) = (TestServer::start(), TestServer::start());
    let (mut raw_first, mut raw_second) = (first.raw(), second.raw());
    let mut locks = Vec::new();
    for index in 0..40 {
        let server = if index % 2 == 0 { &first } else { &second };
        let mut lock = auto_renewing(
            &server.raw_dsn(),
            &format!("many:{index}"),
            Duration::from_millis(600),
        );
        assert_eq!(lock.acquire(Wait::Once), Ok(true));
        locks.push(lock);
    }
    let renewed = |raw: &mut Connection, after: u64| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while evalsha_calls(raw) < after && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(20));
        }
        evalsha_calls(raw) >= after
    };
    let (calls_first, calls_second) = (
        evalsha_calls(&mut raw_first),
        evalsha_calls(&mut raw_second),
    );
    // Every lock renewed twice: the renewal connections are open and reused.
    assert!(renewed(&mut raw_first, calls_first + 40));
    assert!(renewed(&mut raw_second, calls_second + 40));
    assert_eq!(
        clients(&mut raw_first),
        1 + 1,
        "the 20 locks' one shared connection and one renewal connection"
    );
    assert_eq!(
        clients(&mut raw_second),
        1 + 1,
        "the 20 locks' one shared connection and one renewal connection"
    );
    assert!(locks.iter().all(RedisLock::is_held));
    for lock in &mut locks {
        assert_eq!(lock.release(), Ok(true));
    }
}

#[test]
fn auto_renew_notices_a_lost_lock() {
    let server = TestServer::start();
    let mut raw = server.raw();
    let mut lock = auto_renewing(&server.raw_dsn(), "job", Duration::from_millis(300));
    assert_eq!(lock.acquire(Wait::Once), Ok(true));
    let _: () = redis::cmd("SET")
        .arg("job")
        .arg("intruder")
        .query(&mut raw)
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(2);
    while lock.is_held() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    assert!(!lock.is_held());
    assert_eq!(lock.renew(None), Ok(false));
    assert_eq!(lock.release(), Ok(false));
    assert_eq!(get(&mut raw, "job").as_deref(), Some("intruder"));
}

#[test]
fn fence_counter_of_the_wrong_type_leaves_no_lock_behind() {
    let server = TestServer::start();
    let mut raw = server.raw();
    let _: i64 = redis::cmd("HSET")
        .arg(&["job:fence", "f", "v"])
        .query(&mut raw)
        .unwrap();
    let mut lock = new_lock(&server.raw_dsn(), "job", Duration::from_secs(10));
    assert!(matches!(lock.acquire(Wait::Once), Err(Error::Lock(_))));
    assert!(!lock.is_held());
    assert_eq!(get(&mut raw, "job"), None);
}

/// Waits for a forked child; kills it if it hangs.
fn exit_status(pid: libc::pid_t) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut status = 0;
    loop {
        // SAFETY: `pid` is our child and `status` a live c_int.
        let done = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if done == pid {
            return if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else {
                -1
            };
        }
        if Instant::now() > deadline {
            // SAFETY: signalling our own child, then reaping it.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return -2;
        }
        thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn forked_child_never_touches_the_parents_lock() {
    let _env = ENV_LOCK.lock();
    // TLS: had the child written to or closed the shared session, the
    // parent's next command on it would fail.
    let server = TestServer::start_with(Listen::Tls, "", &[]);
    let mut raw = server.raw();
    let mut lock = auto_renewing(&server.raw_dsn(), "job", Duration::from_secs(5));
    assert_eq!(lock.acquire(Wait::Once), Ok(true));
    let token = lock.token().unwrap().to_owned();

    for uses_the_lock in [false, true] {
        // SAFETY: the child only runs the lock's fork-aware code and
        // leaves by _exit, without running the test harness's code.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let inert = !uses_the_lock
                || (!lock.is_held()
                    && lock.token().is_none()
                    && lock.renew(None) == Ok(false)
                    && lock.release() == Ok(false)
                    && lock.acquire(Wait::Once) == Ok(false));
            drop(lock);
            // SAFETY: ends the child without unwinding or atexit handlers.
            unsafe { libc::_exit(if inert { 0 } else { 1 }) }
        }
        assert_eq!(exit_status(pid), 0);
        assert_eq!(get(&mut raw, "job").as_deref(), Some(token.as_str()));
        assert!(lock.is_held());
        assert_eq!(lock.renew(None), Ok(true), "the TLS session is intact");
    }
    assert_eq!(lock.release(), Ok(true));
}

#[test]
fn acquire_on_a_held_lock_asks_the_server() {
    let server = TestServer::start();
    let mut raw = server.raw();
    let dsn = server.raw_dsn();
    let mut a = new_lock(&dsn, "job", Duration::from_secs(10));
    assert_eq!(a.acquire(Wait::Once), Ok(true));
    let _: i64 = redis::cmd("DEL").arg("job").query(&mut raw).unwrap();
    assert_eq!(
        a.acquire(Wait::Once),
        Ok(false),
        "the key is gone: the hold is lost"
    );
    assert!(!a.is_held());
    assert_eq!(get(&mut raw, "job"), None, "and not silently retaken");
    assert_eq!(a.acquire(Wait::Once), Ok(true), "a new acquire takes it");

    let _: () = redis::cmd("SET")
        .arg(&["job", "intruder"])
        .query(&mut raw)
        .unwrap();
    assert_eq!(a.acquire(within(Duration::from_secs(1))), Ok(false));
    assert!(!a.is_held());
    assert_eq!(get(&mut raw, "job").as_deref(), Some("intruder"));
    assert_eq!(a.release(), Ok(false));

    // A second object may take the key once the first lost it.
    let _: i64 = redis::cmd("DEL").arg("job").query(&mut raw).unwrap();
    let mut b = new_lock(&dsn, "job", Duration::from_secs(10));
    assert_eq!(a.acquire(Wait::Once), Ok(true));
    let _: i64 = redis::cmd("DEL").arg("job").query(&mut raw).unwrap();
    assert_eq!(a.acquire(Wait::Once), Ok(false));
    assert_eq!(b.acquire(Wait::Once), Ok(true));
    assert!(!b.busy_in_this_process());
}

#[test]
fn a_connection_the_server_dropped_is_retried_once() {
    let server = TestServer::start_with(Listen::Tcp, "", &["--timeout", "1"]);
    let dsn = server.raw_dsn();
    let mut lock = auto_renewing(&dsn, "job", Duration::from_secs(30));
    let mut renewed = new_lock(&dsn, "other", Duration::from_secs(30));
    assert_eq!(lock.acquire(Wait::Once), Ok(true));
    assert_eq!(renewed.acquire(Wait::Once), Ok(true));
    // Idle for longer than the server's timeout: it closes both.
    thread::sleep(Duration::from_millis(2_500));
    assert_eq!(renewed.renew(None), Ok(true));
    assert_eq!(renewed.acquire(Wait::Once), Ok(true));
    assert_eq!(lock.release(), Ok(true));
    assert_eq!(get(&mut server.raw(), "job"), None);
    thread::sleep(Duration::from_millis(2_500));
    assert_eq!(renewed.release(), Ok(true));
    assert_eq!(get(&mut server.raw(), "other"), None);
}

#[test]
fn a_waiter_rides_out_a_server_restart() {
    let mut server = TestServer::start();
    let dsn = server.raw_dsn();
    let _: () = redis::cmd("SET")
        .arg(&["job", "other"])
        .query(&mut server.raw())
        .unwrap();
    let mut waiter = new_lock(&dsn, "job", Duration::from_secs(10));
    let waiting = thread::spawn(move || {
        let acquired = waiter.acquire(within(Duration::from_secs(20)));
        (acquired, waiter)
    });
    thread::sleep(Duration::from_millis(300));
    server.kill();
    thread::sleep(Duration::from_millis(700));
    server.restart();
    let (acquired, waiter) = waiting.join().unwrap();
    assert_eq!(acquired, Ok(true));
    assert_eq!(get(&mut server.raw(), "job").as_deref(), waiter.token());
}

#[test]
fn messages_say_what_happened_in_words() {
    let mut server = TestServer::start();
    let dsn = server.raw_dsn();
    let long_key = "k".repeat(1_000);
    let mut lock = new_lock(&dsn, &long_key, Duration::from_secs(10));
    let mut raw = server.raw();
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "maxmemory", "1"])
        .query(&mut raw)
        .unwrap();
    let message = connection_error(lock.acquire(Wait::Once));
    assert!(
        message.contains("refused to acquire key 'kkk")
            && message.contains("…': out of memory (maxmemory reached)")
            && !message.contains(&"k".repeat(201)),
        "{message}"
    );
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "maxmemory", "0"])
        .query(&mut raw)
        .unwrap();
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER", "cron", "on", ">pw", "~*", "+@all", "-evalsha", "-eval",
        ])
        .query(&mut raw)
        .unwrap();
    let mut denied = new_lock(
        &format!("redis://cron:pw@127.0.0.1:{}", server.port),
        "job",
        Duration::from_secs(10),
    );
    let message = connection_error(denied.acquire(Wait::Once));
    assert!(
        message.contains(": permission denied by ACL ("),
        "{message}"
    );
    let _: () = redis::cmd("REPLICAOF")
        .arg(&["127.0.0.1", "1"])
        .query(&mut raw)
        .unwrap();
    let message =
        connection_error(new_lock(&dsn, "job", Duration::from_secs(1)).acquire(Wait::Once));
    assert!(
        message.ends_with(": it is a read-only replica"),
        "{message}"
    );
    server.kill();
    let message = connection_error(lock.acquire(Wait::Once));
    assert!(
        message.starts_with("cannot connect to Redis at 127.0.0.1:")
            && message.ends_with(": Connection refused"),
        "{message}"
    );
    assert!(!message.contains("os error"), "{message}");
}

fn pexpiretime(raw: &mut Connection, key: &str) -> i64 {
    redis::cmd("PEXPIRETIME").arg(key).query(raw).unwrap()
}

fn server_ms(raw: &mut Connection) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(raw).unwrap();
    secs * 1000 + micros / 1000
}

#[test]
fn once_per_window_leaves_the_key_to_expire_at_the_windows_end() {
    let server = TestServer::start();
    let mut raw = server.raw();
    let dsn = server.raw_dsn();
    let window = Duration::from_secs(3);
    // A TTL far shorter than the window: the key still lives to its end.
    let mut a = new_lock(&dsn, "job", Duration::from_millis(200));
    a.set_once_per(Some(window));
    // Not too close to a window's end, so the job "ends" in its window.
    while server_ms(&mut raw) % 3_000 > 2_000 {
        thread::sleep(Duration::from_millis(50));
    }
    let started = server_ms(&mut raw);
    let window_end = (started / 3_000 + 1) * 3_000;
    assert_eq!(a.acquire(Wait::Once), Ok(true));
    assert_eq!(pexpiretime(&mut raw, "job"), window_end);
    let a_fence = a.fencing_token().unwrap();
    assert_eq!(a.renew(None), Ok(true));
    assert_eq!(
        pexpiretime(&mut raw, "job"),
        window_end,
        "renew never shortens the key's life below its window's end"
    );
    let token = a.token().unwrap().to_owned();
    assert_eq!(a.release(), Ok(true));
    assert!(!a.is_held());
    assert_eq!(a.release(), Ok(false), "nothing left to release");
    assert_eq!(get(&mut raw, "job").as_deref(), Some(token.as_str()));
    assert_eq!(pexpiretime(&mut raw, "job"), window_end);

    let mut b = new_lock(&dsn, "job", Duration::from_secs(10));
    b.set_once_per(Some(window));
    assert_eq!(b.acquire(Wait::Once), Ok(false), "the window is used up");
    assert!(b.acquire(within(Duration::from_secs(5))).unwrap());
    assert!(
        server_ms(&mut raw) >= window_end,
        "taken in the next window"
    );
    assert_eq!(b.fencing_token(), Some(a_fence + 1));
    let token = b.token().unwrap().to_owned();
    assert_eq!(b.release(), Ok(true));
    assert_eq!(
        get(&mut raw, "job").as_deref(),
        Some(token.as_str()),
        "a hold taken in a window is released by leaving it to the window's end"
    );
    assert_eq!(pexpiretime(&mut raw, "job") % 3_000, 0);
}

#[test]
fn once_per_a_job_that_outlasts_its_window_releases() {
    let server = TestServer::start();
    let mut raw = server.raw();
    let dsn = server.raw_dsn();
    let mut a = new_lock(&dsn, "job", Duration::from_secs(10));
    a.set_once_per(Some(Duration::from_millis(100)));
    assert_eq!(a.acquire(Wait::Once), Ok(true));
    assert!(pttl(&mut raw, "job") > 9_000, "the TTL outlasts the window");
    thread::sleep(Duration::from_millis(250));
    let mut listener = raw_client(&dsn);
    let _: () = redis::cmd("SUBSCRIBE")
        .arg("job:released")
        .query(&mut listener)
        .unwrap();
    assert_eq!(a.release(), Ok(true));
    assert_eq!(get(&mut raw, "job"), None, "deleted as by release()");
    let message = listener.recv_response().unwrap();
    assert!(
        format!("{message:?}").contains("job:released"),
        "waiters are woken"
    );

    // A hold taken without a window: release() deletes the key.
    let mut plain = new_lock(&dsn, "job", Duration::from_secs(10));
    assert_eq!(plain.acquire(Wait::Once), Ok(true));
    assert_eq!(plain.release(), Ok(true));
    assert_eq!(get(&mut raw, "job"), None);

    // Not ours any more: left alone.
    let mut lost = new_lock(&dsn, "job", Duration::from_secs(10));
    lost.set_once_per(Some(Duration::from_secs(60)));
    assert_eq!(lost.acquire(Wait::Once), Ok(true));
    let _: () = redis::cmd("SET")
        .arg("job")
        .arg("other")
        .query(&mut raw)
        .unwrap();
    assert_eq!(lost.release(), Ok(false));
    assert_eq!(get(&mut raw, "job").as_deref(), Some("other"));
    assert_eq!(pttl(&mut raw, "job"), -1);
}

/// Review R5 F01: a once-per acquire on a hold taken without a window (an
/// outer plain guard, the caller's own acquire) keeps the key to the
/// window's end through renewals and the release, whoever makes it.
#[test]
fn once_per_confirming_a_plain_hold_keeps_the_key_to_the_windows_end() {
    let server = TestServer::start();
    let mut raw = server.raw();
    let dsn = server.raw_dsn();
    while server_ms(&mut raw) % 60_000 > 50_000 {
        thread::sleep(Duration::from_millis(50));
    }
    let window_end = (server_ms(&mut raw) / 60_000 + 1) * 60_000;
    let mut a = auto_renewing(&dsn, "job", Duration::from_millis(150));
    assert_eq!(a.acquire(Wait::Once), Ok(true));
    let first_fence = a.fencing_token();
    a.set_once_per(Some(Duration::from_secs(60)));
    assert_eq!(a.acquire(Wait::Once), Ok(true), "confirmed");
    a.set_once_per(None);
    assert_eq!(a.fencing_token(), first_fence, "confirmed, not taken again");
    assert_eq!(pexpiretime(&mut raw, "job"), window_end);
    thread::sleep(Duration::from_millis(500));
    assert!(a.is_held(), "held to the window's end whatever the TTL");
    assert_eq!(
        pexpiretime(&mut raw, "job"),
        window_end,
        "the renewal thread never shortens the key's life below its window's end"
    );
    assert_eq!(a.acquire(Wait::Once), Ok(true), "a plain confirm");
    assert_eq!(a.renew(None), Ok(true));
    assert_eq!(pexpiretime(&mut raw, "job"), window_end, "nor do they");
    let token = a.token().unwrap().to_owned();
    assert_eq!(a.release(), Ok(true));
    assert_eq!(get(&mut raw, "job").as_deref(), Some(token.as_str()));
    assert_eq!(
        pexpiretime(&mut raw, "job"),
        window_end,
        "left to the window's end"
    );

    // Confirming in once-per mode never retakes a key that is gone.
    let _: () = redis::cmd("DEL").arg("job").query(&mut raw).unwrap();
    let mut b = new_lock(&dsn, "job", Duration::from_secs(10));
    assert_eq!(b.acquire(Wait::Once), Ok(true));
    let _: () = redis::cmd("DEL").arg("job").query(&mut raw).unwrap();
    b.set_once_per(Some(Duration::from_secs(60)));
    assert_eq!(b.acquire(Wait::Once), Ok(false), "lost, not retaken");
    assert!(!b.is_held());
    assert_eq!(get(&mut raw, "job"), None);
    let fence: i64 = redis::cmd("GET").arg("job:fence").query(&mut raw).unwrap();
    assert_eq!(
        Some(fence),
        first_fence.map(|f| f + 1),
        "no fencing number drawn by the confirm"
    );
}

/// The lock error a key of the wrong type must give (never "busy").
fn wrong_type_error(result: Result<bool>, kind: &str) {
    match result {
        Err(Error::Lock(message)) => assert!(
            message.contains("key 'job'")
                && message.contains(&format!("the key holds a {kind} value, not a string")),
            "{message}"
        ),
        other => panic!("{kind}: {other:?}"),
    }
}

#[test]
fn a_key_of_the_wrong_type_is_an_error_not_busy() {
    let server = TestServer::start();
    let mut raw = server.raw();
    let dsn = server.raw_dsn();
    for (kind, make) in [
        ("list", ["RPUSH", "job", "x"]),
        ("hash", ["HSET", "job", "f"]),
    ] {
        let _: () = redis::cmd("DEL").arg("job").query(&mut raw).unwrap();
        let mut command = redis::cmd(make[0]);
        command.arg(&make[1..]);
        if kind == "hash" {
            command.arg("v");
        }
        let _: i64 = command.query(&mut raw).unwrap();
        let mut lock = new_lock(&dsn, "job", Duration::from_secs(10));
        wrong_type_error(lock.acquire(Wait::Once), kind);
        let started = Instant::now();
        wrong_type_error(lock.acquire(within(Duration::from_secs(5))), kind);
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "a waiter does not wait"
        );
        assert!(!lock.is_held());
    }
    // A held key replaced by another type: acquire() on the hold says so too.
    let _: () = redis::cmd("DEL").arg("job").query(&mut raw).unwrap();
    let mut lock = new_lock(&dsn, "job", Duration::from_secs(10));
    assert_eq!(lock.acquire(Wait::Once), Ok(true));
    let _: () = redis::cmd("DEL").arg("job").query(&mut raw).unwrap();
    let _: i64 = redis::cmd("RPUSH")
        .arg(&["job", "x"])
        .query(&mut raw)
        .unwrap();
    wrong_type_error(lock.acquire(Wait::Once), "list");
}

/// Stops `server` for 1.5 s while `lock` acquires: the acquire gets no
/// answer, and the script runs once the server resumes. Returns the value
/// the key holds then: the token of the unanswered acquire.
fn acquire_through_a_stall(server: &TestServer, lock: &mut RedisLock) -> String {
    let signal = |signal| server.signal(signal);
    // Connected: the acquire's script is sent before the stall shows.
    assert_eq!(lock.acquire(Wait::Once), Ok(true));
    assert_eq!(lock.release(), Ok(true));
    signal(libc::SIGSTOP);
    let resumed = Instant::now() + Duration::from_millis(1500);
    let error = connection_error(lock.acquire(Wait::Once));
    assert!(error.contains("no answer within"), "{error}");
    assert!(!lock.is_held());
    thread::sleep(resumed.saturating_duration_since(Instant::now()));
    signal(libc::SIGCONT);
    let mut raw = server.raw();
    let deadline = Instant::now() + Duration::from_secs(5);
    let stalled = loop {
        match get(&mut raw, "job") {
            Some(value) => break value,
            None if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
            None => panic!("the stalled script did not run on resume"),
        }
    };
    assert!(stalled.contains(&format!(":{}@", sys::current_pid())));
    stalled
}

#[test]
fn an_unanswered_acquire_is_taken_over_or_cleaned_up_by_its_object() {
    let server = TestServer::start();
    let mut raw = server.raw();
    let options = RedisOptions {
        read_timeout: Duration::from_millis(300),
        connect_timeout: Duration::from_millis(300),
        ..RedisOptions::default()
    };
    let ttl = Duration::from_secs(60);
    let new = || RedisLock::new(&server.raw_dsn(), "job", ttl, options).unwrap();

    // The next acquire() takes the key over as ours, with the same token.
    let mut lock = new();
    let stalled = acquire_through_a_stall(&server, &mut lock);
    assert_eq!(lock.acquire(Wait::Once), Ok(true));
    assert_eq!(lock.token(), Some(stalled.as_str()));
    assert!(pttl(&mut raw, "job") > 50_000);
    assert_eq!(lock.release(), Ok(true));
    assert_eq!(get(&mut raw, "job"), None);

    // release() deletes it.
    let mut lock = new();
    acquire_through_a_stall(&server, &mut lock);
    assert_eq!(lock.release(), Ok(true));
    assert_eq!(get(&mut raw, "job"), None);
    assert_eq!(lock.release(), Ok(false), "only once");

    // So does dropping the object.
    let mut lock = new();
    acquire_through_a_stall(&server, &mut lock);
    drop(lock);
    assert_eq!(get(&mut raw, "job"), None);

    // A key someone else took meanwhile is left alone.
    let mut lock = new();
    acquire_through_a_stall(&server, &mut lock);
    let _: () = redis::cmd("SET")
        .arg(&["job", "other"])
        .query(&mut raw)
        .unwrap();
    assert_eq!(lock.acquire(Wait::Once), Ok(false));
    drop(lock);
    assert_eq!(get(&mut raw, "job").as_deref(), Some("other"));
}

#[test]
fn a_forked_child_forgets_the_parents_unanswered_acquire() {
    let _env = ENV_LOCK.lock();
    let server = TestServer::start();
    let mut raw = server.raw();
    let options = RedisOptions {
        read_timeout: Duration::from_millis(300),
        connect_timeout: Duration::from_millis(300),
        ..RedisOptions::default()
    };
    let mut lock =
        RedisLock::new(&server.raw_dsn(), "job", Duration::from_secs(60), options).unwrap();
    let stalled = acquire_through_a_stall(&server, &mut lock);

    // SAFETY: the child only runs the lock's fork-aware code and leaves by
    // _exit, without running the test harness's code.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let forgot = lock.release() == Ok(false) && lock.acquire(Wait::Once) == Ok(false);
        drop(lock);
        // SAFETY: ends the child without unwinding or atexit handlers.
        unsafe { libc::_exit(if forgot { 0 } else { 1 }) }
    }
    assert_eq!(exit_status(pid), 0);
    assert_eq!(get(&mut raw, "job").as_deref(), Some(stalled.as_str()));
    assert_eq!(lock.release(), Ok(true), "still the parent's to clean up");
    assert_eq!(get(&mut raw, "job"), None);
}

/// Lock objects of one thread on one server and credentials share one
/// connection, and a reconnect after it broke serves them all; other
/// credentials (another database) are another connection.
#[test]
fn locks_of_one_thread_share_one_connection_per_server_and_credentials() {
    let server = TestServer::start();
    let mut raw = server.raw();
    let dsn = server.raw_dsn();
    let before = clients(&mut raw);
    thread::spawn(move || {
        let mut locks: Vec<RedisLock> = (0..20)
            .map(|n| new_lock(&dsn, &format!("shared:{n}"), Duration::from_secs(10)))
            .collect();
        for lock in &mut locks {
            assert_eq!(lock.acquire(Wait::Once), Ok(true));
        }
        let mut raw = raw_client(&dsn);
        assert_eq!(clients(&mut raw), before + 1, "one connection for 20 locks");
        let _: () = redis::cmd("CLIENT")
            .arg(&["KILL", "TYPE", "normal", "SKIPME", "yes"])
            .query(&mut raw)
            .unwrap();
        for lock in &mut locks {
            assert_eq!(lock.renew(None), Ok(true), "sent again on a new connection");
        }
        assert_eq!(clients(&mut raw), before + 1, "reconnected together");
        let mut other_db = new_lock(&format!("{dsn}/3"), "shared:0", Duration::from_secs(10));
        assert_eq!(other_db.acquire(Wait::Once), Ok(true));
        assert_eq!(
            clients(&mut raw),
            before + 2,
            "another database: another connection"
        );
        for lock in &mut locks {
            assert_eq!(lock.release(), Ok(true));
        }
        assert_eq!(other_db.release(), Ok(true));
    })
    .join()
    .unwrap();
}

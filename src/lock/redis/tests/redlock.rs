//! Redlock against three (or more) independent redis-servers.

use super::server::{masters, TestServer};
use super::*;

fn dsns(servers: &[TestServer]) -> Vec<String> {
    servers.iter().map(TestServer::raw_dsn).collect()
}

fn redlock(dsns: &[String], ttl: Duration, options: RedisOptions) -> RedisLock {
    let dsns: Vec<&str> = dsns.iter().map(String::as_str).collect();
    RedisLock::on_masters(&dsns, "job", ttl, options).unwrap()
}

fn quick() -> RedisOptions {
    RedisOptions {
        connect_timeout: Duration::from_millis(300),
        read_timeout: Duration::from_millis(300),
        ..RedisOptions::default()
    }
}

fn signal(server: &TestServer, signal: libc::c_int) {
    server.signal(signal);
}

#[test]
fn a_majority_holds_the_lock_and_a_minority_down_does_not_stop_it() {
    let mut servers = masters(3);
    let dsns = dsns(&servers);
    let mut a = redlock(&dsns, Duration::from_secs(10), quick());
    let mut b = redlock(&dsns, Duration::from_secs(10), quick());
    assert_eq!(a.acquire(Wait::Once), Ok(true));
    let token = a.token().unwrap().to_owned();
    for server in &servers {
        assert_eq!(
            get(&mut server.raw(), "job").as_deref(),
            Some(token.as_str())
        );
    }
    assert_eq!(a.fencing_token(), None, "no fencing number across masters");
    assert!(a.describe().contains(", 127.0.0.1:"), "{}", a.describe());

    // Another process's view: contention on a majority is plain false.
    let mut c = redlock(&dsns, Duration::from_secs(10), quick());
    let child = thread::spawn(move || (c.acquire(Wait::Once), c.last_holder().map(|h| h.0)));
    let (busy, holder) = child.join().unwrap();
    assert_eq!(busy, Ok(false));
    assert_eq!(holder, Some(sys::current_pid()));

    servers[2].kill();
    assert_eq!(a.renew(None), Ok(true), "two of three renew");
    assert_eq!(a.acquire(Wait::Once), Ok(true), "and confirm");
    assert_eq!(a.release(), Ok(true), "released whatever the third said");
    assert_eq!(get(&mut servers[0].raw(), "job"), None);
    assert_eq!(b.acquire(Wait::Once), Ok(true), "two of three grant");
    assert_eq!(b.release(), Ok(true));

    servers[1].kill();
    let message = connection_error(b.acquire(Wait::Once));
    assert!(
        message.contains("2 of the 3 Redis masters did not answer, and a majority (2) must")
            && message.contains("Connection refused"),
        "{message}"
    );
    assert!(!b.is_held());
    assert_eq!(
        get(&mut servers[0].raw(), "job"),
        None,
        "the one grant was undone"
    );
}

#[test]
fn a_failed_attempt_undoes_its_grants_and_a_waiter_gets_the_lock() {
    let servers = masters(3);
    let dsns = dsns(&servers);
    let _: () = redis::cmd("SET")
        .arg("job")
        .arg("other")
        .arg("PX")
        .arg(400)
        .query(&mut servers[0].raw())
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("job")
        .arg("other")
        .arg("PX")
        .arg(400)
        .query(&mut servers[2].raw())
        .unwrap();
    let mut a = redlock(&dsns, Duration::from_secs(10), quick());
    assert_eq!(a.acquire(Wait::Once), Ok(false));
    assert_eq!(
        get(&mut servers[1].raw(), "job"),
        None,
        "its one grant was undone"
    );
    assert_eq!(
        a.acquire(within(Duration::from_secs(5))),
        Ok(true),
        "after the other's TTL"
    );
    assert_eq!(a.release(), Ok(true));

    // Two waiters and a holder: one at a time, the waiters never split the
    // votes for good.
    let mut holder = redlock(&dsns, Duration::from_secs(10), quick());
    assert_eq!(holder.acquire(Wait::Once), Ok(true));
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let mut lock = redlock(&dsns, Duration::from_secs(10), quick());
            thread::spawn(move || {
                let got = lock.acquire(within(Duration::from_secs(10)));
                thread::sleep(Duration::from_millis(100));
                (got, lock.release())
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(200));
    assert_eq!(holder.release(), Ok(true));
    for waiter in waiters {
        assert_eq!(waiter.join().unwrap(), (Ok(true), Ok(true)));
    }
}

#[test]
fn a_stopped_master_is_outvoted_and_a_stopped_majority_is_an_error() {
    let servers = masters(3);
    let dsns = dsns(&servers);
    let mut a = redlock(&dsns, Duration::from_secs(10), quick());
    signal(&servers[2], libc::SIGSTOP);
    let started = Instant::now();
    assert_eq!(a.acquire(Wait::Once), Ok(true));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(a.renew(None), Ok(true));
    assert_eq!(a.release(), Ok(true));

    signal(&servers[1], libc::SIGSTOP);
    let message = connection_error(a.acquire(Wait::Once));
    assert!(message.contains("no answer within 300 ms"), "{message}");
    signal(&servers[1], libc::SIGCONT);
    signal(&servers[2], libc::SIGCONT);
    assert_eq!(a.acquire(Wait::Once), Ok(true), "back to normal");
    assert_eq!(a.release(), Ok(true));
}

#[test]
fn auto_renew_keeps_a_redlock_and_a_lost_majority_is_reported() {
    let servers = masters(3);
    let dsns = dsns(&servers);
    let options = RedisOptions {
        auto_renew: true,
        ..quick()
    };
    let mut a = redlock(&dsns, Duration::from_millis(600), options);
    assert_eq!(a.acquire(Wait::Once), Ok(true));
    thread::sleep(Duration::from_millis(1500));
    assert!(a.is_held(), "renewed on all masters");
    for server in &servers {
        assert!(pttl(&mut server.raw(), "job") > 0);
    }
    // The key lost on two masters: the renewer finds it not ours.
    for server in &servers[..2] {
        let _: () = redis::cmd("DEL")
            .arg("job")
            .query(&mut server.raw())
            .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while a.is_held() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    assert!(!a.is_held(), "the renewer reported the loss");
    assert_eq!(a.renew(None), Ok(false));
    assert_eq!(a.release(), Ok(false));
    let _: () = redis::cmd("DEL")
        .arg("job")
        .query(&mut servers[2].raw())
        .unwrap();

    let mut plain = redlock(&dsns, Duration::from_secs(10), quick());
    assert_eq!(plain.acquire(Wait::Once), Ok(true));
    for server in &servers[1..] {
        let _: () = redis::cmd("DEL")
            .arg("job")
            .query(&mut server.raw())
            .unwrap();
    }
    assert_eq!(
        plain.renew(None),
        Ok(false),
        "a majority says it is not ours"
    );
    assert!(!plain.is_held());
}

#[test]
fn redlock_arguments_are_checked_and_messages_keep_passwords_out() {
    let ttl = Duration::from_secs(1);
    let options = RedisOptions::default();
    let (arg, reason) = bad_argument(RedisLock::on_masters(&[], "job", ttl, options));
    assert_eq!(arg, "$dsn");
    assert!(reason.contains("non-empty list"), "{reason}");
    let (arg, reason) = bad_argument(RedisLock::on_masters(
        &["redis://127.0.0.1:1", "redis://:pw@127.0.0.1:1/0"],
        "job",
        ttl,
        options,
    ));
    assert_eq!(arg, "$dsn");
    assert!(
        reason.contains("names the Redis master 127.0.0.1:1 twice"),
        "{reason}"
    );
    let (arg, _) = bad_argument(RedisLock::on_masters(
        &["redis://127.0.0.1:1", "nope://:sekrit@x"],
        "job",
        ttl,
        options,
    ));
    assert_eq!(arg, "$dsn[1]");
    for dsn in [
        "redis-sentinel://h:26379/mymaster",
        "REDIS-CLUSTER://h:7000",
    ] {
        let (arg, reason) = bad_argument(RedisLock::on_masters(
            &["redis://127.0.0.1:1", dsn],
            "job",
            ttl,
            options,
        ));
        assert_eq!(arg, "$dsn[1]");
        assert!(
            reason.contains("Redlock needs independent masters"),
            "{reason}"
        );
    }

    let mut dead = RedisLock::on_masters(
        &[
            "redis://:sekrit1@127.0.0.1:1",
            "redis://u:sekrit2@127.0.0.1:2",
            "redis://127.0.0.1:3",
        ],
        "job",
        ttl,
        quick(),
    )
    .unwrap();
    let message = connection_error(dead.acquire(Wait::Once));
    assert!(!message.contains("sekrit"), "{message}");
    assert!(message.contains("3 of the 3 Redis masters"), "{message}");
}

/// The journal check under faults: four contenders in a loop while one
/// master at a time is stopped (SIGSTOP) or paused (CLIENT PAUSE): never two
/// holders at once, and a holder that lost the lock is told by renew().
#[test]
fn no_two_holders_while_masters_are_stopped_and_paused_in_turn() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    let servers = masters(3);
    let dsns = dsns(&servers);
    let inside = Arc::new(AtomicBool::new(false));
    let turns = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let contenders: Vec<_> = (0..4)
        .map(|_| {
            let (dsns, inside, turns, done) =
                (dsns.clone(), inside.clone(), turns.clone(), done.clone());
            thread::spawn(move || {
                // A TTL far above the slowest attempt (a stopped master
                // costs about 1 s): every hold is valid while inside.
                let mut lock = redlock(&dsns, Duration::from_secs(5), quick());
                let mut lost = 0;
                while !done.load(Ordering::Acquire) {
                    match lock.acquire(within(Duration::from_secs(3))) {
                        Ok(true) => {}
                        // A stopped master and a waiter's deadline: try again.
                        Ok(false) | Err(Error::Connection(_)) => continue,
                        Err(other) => panic!("{other:?}"),
                    }
                    assert!(!inside.swap(true, Ordering::AcqRel), "two holders at once");
                    thread::sleep(Duration::from_millis(5));
                    // Out before renewing: a renewal slowed by a stopped
                    // master must not stretch the checked stretch past
                    // the validity.
                    inside.store(false, Ordering::Release);
                    let still = lock.renew(None);
                    match still {
                        Ok(true) => turns.fetch_add(1, Ordering::Relaxed),
                        Ok(false) => {
                            lost += 1; // reported, as it must be
                            0
                        }
                        Err(_) => 0,
                    };
                    let _ = lock.release();
                }
                lost
            })
        })
        .collect();
    for round in 0..6 {
        let victim = &servers[round % 3];
        if round % 2 == 0 {
            signal(victim, libc::SIGSTOP);
            thread::sleep(Duration::from_millis(600));
            signal(victim, libc::SIGCONT);
        } else {
            let _: () = redis::cmd("CLIENT")
                .arg(&["PAUSE", "600", "ALL"])
                .query(&mut victim.raw())
                .unwrap();
            thread::sleep(Duration::from_millis(600));
        }
        thread::sleep(Duration::from_millis(200));
    }
    done.store(true, Ordering::Release);
    let lost: usize = contenders.into_iter().map(|c| c.join().unwrap()).sum();
    let turns = turns.load(Ordering::Relaxed);
    assert!(
        turns > 20,
        "the lock kept changing hands: {turns} turns ({lost} losses reported)"
    );
}

#[test]
fn an_unanswered_redlock_acquire_is_taken_over_or_cleaned_up_on_every_master() {
    let servers = masters(3);
    let dsns = dsns(&servers);
    let ttl = Duration::from_secs(60);
    // Masters 1 and 2 get the script but stall: no majority answers, and
    // once they resume they set the key to the token of the failed acquire.
    let through_a_stall = |lock: &mut RedisLock| -> String {
        assert_eq!(lock.acquire(Wait::Once), Ok(true), "connected");
        assert_eq!(lock.release(), Ok(true));
        signal(&servers[1], libc::SIGSTOP);
        signal(&servers[2], libc::SIGSTOP);
        let message = connection_error(lock.acquire(Wait::Once));
        assert!(message.contains("no answer within 300 ms"), "{message}");
        assert!(!lock.is_held());
        thread::sleep(Duration::from_millis(1000));
        signal(&servers[1], libc::SIGCONT);
        signal(&servers[2], libc::SIGCONT);
        let values: Vec<Option<String>> = servers[1..]
            .iter()
            .map(|server| {
                let mut raw = server.raw();
                let deadline = Instant::now() + Duration::from_secs(5);
                loop {
                    match get(&mut raw, "job") {
                        None if Instant::now() < deadline => {
                            thread::sleep(Duration::from_millis(10));
                        }
                        value => break value,
                    }
                }
            })
            .collect();
        assert_eq!(values[0], values[1]);
        assert_eq!(get(&mut servers[0].raw(), "job"), None, "undone");
        values[0].clone().expect("the stalled script ran on resume")
    };
    let keys_left = || {
        servers
            .iter()
            .filter(|server| get(&mut server.raw(), "job").is_some())
            .count()
    };

    let mut lock = redlock(&dsns, ttl, quick());
    let stalled = through_a_stall(&mut lock);
    assert_eq!(lock.acquire(Wait::Once), Ok(true), "taken over");
    assert_eq!(lock.token(), Some(stalled.as_str()));
    assert_eq!(lock.release(), Ok(true));
    assert_eq!(keys_left(), 0);

    let mut lock = redlock(&dsns, ttl, quick());
    through_a_stall(&mut lock);
    assert_eq!(lock.release(), Ok(true));
    assert_eq!(keys_left(), 0);
    assert_eq!(lock.release(), Ok(false), "only once");

    let mut lock = redlock(&dsns, ttl, quick());
    through_a_stall(&mut lock);
    drop(lock);
    assert_eq!(keys_left(), 0);
}

/// A once-per confirm of a plain Redlock hold keeps the key to the window's
/// end on every master, and the release leaves it there (review R5 F01).
#[test]
fn a_once_per_confirm_keeps_a_redlock_to_the_windows_end() {
    let servers = masters(3);
    let dsns = dsns(&servers);
    let mut raw = servers[0].raw();
    while server_ms(&mut raw) % 60_000 > 50_000 {
        thread::sleep(Duration::from_millis(50));
    }
    let mut a = redlock(&dsns, Duration::from_secs(2), quick());
    assert_eq!(a.acquire(Wait::Once), Ok(true));
    a.set_once_per(Some(Duration::from_secs(60)));
    assert_eq!(a.acquire(Wait::Once), Ok(true));
    a.set_once_per(None);
    assert_eq!(a.release(), Ok(true));
    for server in &servers {
        let mut raw = server.raw();
        let window_end = (server_ms(&mut raw) / 60_000 + 1) * 60_000;
        assert_eq!(pexpiretime(&mut raw, "job"), window_end);
    }
}

/// With every master's connection kept, a command is written to all of
/// them before any reply is read (`topology/fanout.rs`): a master that lost
/// the scripts (`SCRIPT FLUSH`, a restart) answers NOSCRIPT and gets them
/// loaded, and a master killed under its kept connection is tried once more
/// on a new one and outvoted.
#[test]
fn kept_connections_reload_flushed_scripts_and_outvote_a_killed_master() {
    let mut servers = masters(3);
    let dsns = dsns(&servers);
    let mut a = redlock(&dsns, Duration::from_secs(10), quick());
    assert_eq!(a.acquire(Wait::Once), Ok(true), "connects, on threads");
    assert_eq!(a.release(), Ok(true), "on the kept connections");
    for server in &servers {
        redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query::<()>(&mut server.raw())
            .unwrap();
    }
    assert_eq!(a.acquire(Wait::Once), Ok(true), "the scripts loaded again");
    let token = a.token().unwrap().to_owned();
    for server in &servers {
        assert_eq!(
            get(&mut server.raw(), "job").as_deref(),
            Some(token.as_str())
        );
    }
    servers[1].kill();
    assert_eq!(a.renew(None), Ok(true), "two of three renew");
    assert_eq!(a.release(), Ok(true), "and release");
    assert_eq!(get(&mut servers[0].raw(), "job"), None);
    assert_eq!(get(&mut servers[2].raw(), "job"), None);
}

//! Sentinel: a master, a replica and three sentinels of our own.

use super::server::{SentinelSetup, TestServer};
use super::*;

/// Generous: WAIT gets 4/5 of read_timeout, and a loaded 2-core machine
/// has been seen to need more than 400 ms for one replica's acknowledgement.
fn with_replicas(replicas: u32) -> RedisOptions {
    RedisOptions {
        replicas,
        connect_timeout: Duration::from_millis(500),
        read_timeout: Duration::from_secs(5),
        ..RedisOptions::default()
    }
}

#[test]
fn the_lock_follows_the_master_through_a_failover_and_a_lost_key_is_reported() {
    let setup = SentinelSetup::start(1);
    let dsn = setup.dsn();
    let ttl = Duration::from_secs(30);
    let mut a = RedisLock::new(&dsn, "job", ttl, with_replicas(1)).unwrap();
    assert_eq!(a.acquire(Wait::Once), Ok(true));
    let token = a.token().unwrap().to_owned();
    let fence = a.fencing_token().unwrap();
    let old = setup.master_port();
    let replica = setup.servers.iter().find(|s| s.port != old).unwrap();
    assert_eq!(
        get(&mut replica.raw(), "job").as_deref(),
        Some(token.as_str()),
        "'replicas' => 1: the replica has the key before acquire returns"
    );
    assert!(
        a.describe()
            .contains("master 'mymaster' (sentinels 127.0.0.1:"),
        "{}",
        a.describe()
    );

    let new = setup.fail_over();
    assert_ne!(new, old);
    assert_eq!(a.renew(None), Ok(true), "renewed on the new master");
    assert_eq!(
        get(&mut setup.server_on(new).raw(), "job").as_deref(),
        Some(token.as_str())
    );
    let mut b = RedisLock::new(&dsn, "job", ttl, with_replicas(0)).unwrap();
    let busy = thread::spawn(move || b.acquire(Wait::Once)).join().unwrap();
    assert_eq!(
        busy,
        Ok(false),
        "another process finds it held on the new master"
    );

    // A key that did not reach the new master is lost, never kept.
    let _: () = redis::cmd("DEL")
        .arg("job")
        .query(&mut setup.server_on(new).raw())
        .unwrap();
    assert_eq!(a.renew(None), Ok(false));
    assert!(!a.is_held());
    let mut c = RedisLock::new(&dsn, "job", ttl, with_replicas(0)).unwrap();
    assert_eq!(
        c.acquire(Wait::Once),
        Ok(true),
        "taken again, on the new master"
    );
    assert!(
        c.fencing_token() > Some(fence),
        "the fence counter reached the new master: {:?}",
        c.fencing_token()
    );
    assert_eq!(c.release(), Ok(true));
    assert_eq!(get(&mut setup.server_on(new).raw(), "job"), None);
}

#[test]
fn sentinel_dsns_are_checked_and_failures_say_which_sentinels() {
    let ttl = Duration::from_secs(1);
    let options = with_replicas(0);
    for bad in [
        "redis-sentinel://127.0.0.1:26379",
        "redis-sentinel://127.0.0.1:26379/",
        "redis-sentinel:///mymaster",
        "redis-sentinel://127.0.0.1:26379/mymaster/x",
    ] {
        let (arg, reason) = bad_argument(RedisLock::new(bad, "job", ttl, options));
        assert_eq!(arg, "$dsn", "{bad}");
        assert!(
            reason.contains("redis-sentinel://[[user]:password@]host"),
            "{reason}"
        );
    }
    let lock = RedisLock::new("redis-sentinel://127.0.0.1/mymaster", "job", ttl, options).unwrap();
    assert!(
        lock.describe().contains("127.0.0.1:26379"),
        "the default port"
    );

    let mut dead = RedisLock::new(
        "redis-sentinel://:pw-s3cret@127.0.0.1:1,127.0.0.1:2/mymaster/2",
        "job",
        ttl,
        options,
    )
    .unwrap();
    let message = connection_error(dead.acquire(Wait::Once));
    assert!(
        message.contains("no sentinel named the master 'mymaster'")
            && message.contains("127.0.0.1:1: Connection refused; 127.0.0.1:2: Connection refused"),
        "{message}"
    );
    assert!(!message.contains("pw-s3cret"), "{message}");

    // A server that is no sentinel.
    let plain = TestServer::start();
    let mut wrong = RedisLock::new(
        &format!("redis-sentinel://127.0.0.1:{}/mymaster", plain.port),
        "job",
        ttl,
        options,
    )
    .unwrap();
    let message = connection_error(wrong.acquire(Wait::Once));
    assert!(message.contains("no sentinel named"), "{message}");
}

#[test]
fn replicas_that_do_not_acknowledge_fail_the_acquire_and_give_the_key_back() {
    let server = TestServer::start();
    let options = RedisOptions {
        read_timeout: Duration::from_millis(500),
        ..with_replicas(1)
    };
    let mut lock =
        RedisLock::new(&server.raw_dsn(), "job", Duration::from_secs(10), options).unwrap();
    let message = connection_error(lock.acquire(Wait::Once));
    assert!(
        message.contains("only 0 of the 1 replicas asked for acknowledged it within 400 ms"),
        "{message}"
    );
    assert!(!lock.is_held());
    assert_eq!(get(&mut server.raw(), "job"), None, "given back");
    let err = RedisLock::on_masters(
        &["redis://127.0.0.1:1", "redis://127.0.0.1:2"],
        "job",
        Duration::from_secs(1),
        with_replicas(1),
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("$options['replicas']"), "{err}");
}

#[test]
fn kill_9_of_the_master_while_held_and_waited_for() {
    let mut setup = SentinelSetup::start(1);
    let dsn = setup.dsn();
    let ttl = Duration::from_secs(30);
    let mut holder = RedisLock::new(&dsn, "job", ttl, with_replicas(1)).unwrap();
    assert_eq!(holder.acquire(Wait::Once), Ok(true));
    let mut waiter = RedisLock::new(&dsn, "job", ttl, with_replicas(0)).unwrap();
    let waiting = thread::spawn(move || {
        let got = waiter.acquire(within(Duration::from_secs(40)));
        (got, waiter.fencing_token(), waiter.release())
    });
    thread::sleep(Duration::from_millis(300));
    let old = setup.master_port();
    let index = setup.servers.iter().position(|s| s.port == old).unwrap();
    setup.servers[index].kill();
    let new = setup.await_new_master(old);
    assert_ne!(new, old);
    assert_eq!(
        holder.renew(None),
        Ok(true),
        "the acknowledged key survived"
    );
    let fence = holder.fencing_token().unwrap();
    assert!(!waiting.is_finished(), "the waiter still waits");
    assert_eq!(holder.release(), Ok(true));
    let (got, waiter_fence, released) = waiting.join().unwrap();
    assert_eq!(got, Ok(true), "the waiter rode out the failover");
    assert!(waiter_fence > Some(fence));
    assert_eq!(released, Ok(true));
}

/// While the master answers as master, no call asks a sentinel first:
/// with every sentinel stopped (SIGSTOP), renewals, a release and an
/// acquire still go through; a failover makes the next call ask and follow
/// (the old master answers READONLY, or its connection broke).
#[test]
fn no_sentinel_round_trip_per_call_while_the_master_answers_as_master() {
    let setup = SentinelSetup::start(1);
    let options = with_replicas(0);
    let mut lock = RedisLock::new(&setup.dsn(), "job", Duration::from_secs(30), options).unwrap();
    assert_eq!(lock.acquire(Wait::Once), Ok(true), "asks once, on connect");
    setup.pause_sentinels(true);
    for _ in 0..20 {
        assert_eq!(lock.renew(None), Ok(true), "no sentinel needed");
    }
    assert_eq!(lock.release(), Ok(true));
    assert_eq!(lock.acquire(Wait::Once), Ok(true));
    setup.pause_sentinels(false);

    let old = setup.master_port();
    let new = setup.fail_over();
    assert_ne!(new, old);
    let _ = lock.renew(None); // the key may not have reached the replica
    let mut again =
        RedisLock::new(&setup.dsn(), "other", Duration::from_secs(30), options).unwrap();
    assert_eq!(again.acquire(Wait::Once), Ok(true));
    assert_eq!(
        get(&mut setup.server_on(new).raw(), "other").as_deref(),
        again.token(),
        "followed to the new master"
    );
    assert_eq!(again.release(), Ok(true));
}

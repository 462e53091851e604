//! Redis Cluster: three masters of our own.

use super::server::ClusterSetup;
use super::*;

fn quick() -> RedisOptions {
    RedisOptions {
        connect_timeout: Duration::from_millis(500),
        read_timeout: Duration::from_millis(500),
        ..RedisOptions::default()
    }
}

fn cmd_ok(conn: &mut Connection, args: &[&str]) {
    let mut command = redis::cmd(args[0]);
    for arg in &args[1..] {
        command.arg(*arg);
    }
    let _: redis::Value = command.query(conn).unwrap();
}

#[test]
fn the_lock_and_its_companions_share_a_slot_and_redirections_are_followed() {
    let cluster = ClusterSetup::start();
    let ttl = Duration::from_secs(10);
    let slot = cluster.slot("job");
    assert_eq!(cluster.slot("{job}:fence"), slot);
    assert_eq!(cluster.slot("{job}:released"), slot);
    // From each node as the only seed: two of them answer MOVED.
    let mut last_fence = 0;
    for seed in 0..3 {
        let dsn = cluster.dsn(&[seed]);
        let mut a = RedisLock::new(&dsn, "job", ttl, quick()).unwrap();
        let mut b = RedisLock::new(&cluster.dsn(&[(seed + 1) % 3]), "job", ttl, quick()).unwrap();
        assert_eq!(a.acquire(Wait::Once), Ok(true), "seed {seed}");
        let owner = &cluster.nodes[cluster.owner_of("job")];
        assert_eq!(get(&mut owner.raw(), "job").as_deref(), a.token());
        assert_eq!(
            thread::spawn(move || b.acquire(Wait::Once)).join().unwrap(),
            Ok(false)
        );
        assert_eq!(a.renew(None), Ok(true));
        let fence = a.fencing_token().unwrap();
        assert!(
            fence > last_fence,
            "seed {seed}: {fence} after {last_fence}"
        );
        last_fence = fence;
        assert_eq!(a.release(), Ok(true));
        assert_eq!(get(&mut owner.raw(), "job"), None);
    }
    // A hash tag of the user's is kept.
    let mut tagged = RedisLock::new(&cluster.dsn(&[0, 1, 2]), "{cron}:job", ttl, quick()).unwrap();
    assert_eq!(tagged.acquire(Wait::Once), Ok(true));
    let owner = &cluster.nodes[cluster.owner_of("{cron}:job")];
    assert_eq!(
        get(&mut owner.raw(), "{cron}:job:fence"),
        tagged.fencing_token().map(|f| f.to_string())
    );
    assert_eq!(tagged.release(), Ok(true));
    let (arg, reason) = bad_argument(RedisLock::new(&cluster.dsn(&[0]), "a}b", ttl, quick()));
    assert_eq!(arg, "$key");
    assert!(reason.contains("use a hash tag"), "{reason}");
}

#[test]
fn resharding_the_keys_slot_while_held_and_a_waiter_woken_on_release() {
    let cluster = ClusterSetup::start();
    let ttl = Duration::from_secs(10);
    let dsn = cluster.dsn(&[0, 1, 2]);
    let mut a = RedisLock::new(&dsn, "job", ttl, quick()).unwrap();
    assert_eq!(a.acquire(Wait::Once), Ok(true));
    let a_fence = a.fencing_token();
    let slot = cluster.slot("job").to_string();
    let source = cluster.owner_of("job");
    let target = (source + 1) % 3;
    let (source_id, target_id) = (cluster.id(source), cluster.id(target));
    let mut src = cluster.nodes[source].raw();
    let mut dst = cluster.nodes[target].raw();
    cmd_ok(
        &mut dst,
        &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &source_id],
    );
    cmd_ok(
        &mut src,
        &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &target_id],
    );
    assert_eq!(
        a.renew(None),
        Ok(true),
        "migrating, the key still on the source"
    );
    let port = cluster.nodes[target].port.to_string();
    cmd_ok(
        &mut src,
        &[
            "MIGRATE",
            "127.0.0.1",
            &port,
            "",
            "0",
            "5000",
            "KEYS",
            "job",
            "{job}:fence",
        ],
    );
    assert_eq!(a.renew(None), Ok(true), "ASK followed to the target");
    for node in &cluster.nodes {
        cmd_ok(
            &mut node.raw(),
            &["CLUSTER", "SETSLOT", &slot, "NODE", &target_id],
        );
    }
    assert_eq!(a.renew(None), Ok(true), "MOVED followed");
    assert_eq!(
        get(&mut cluster.nodes[target].raw(), "job").as_deref(),
        a.token()
    );

    let mut waiter = RedisLock::new(&dsn, "job", ttl, quick()).unwrap();
    let waiting = thread::spawn(move || {
        let started = Instant::now();
        let got = waiter.acquire(within(Duration::from_secs(10)));
        (got, started.elapsed(), waiter.fencing_token())
    });
    thread::sleep(Duration::from_millis(300));
    assert_eq!(a.release(), Ok(true));
    let (got, waited, fence) = waiting.join().unwrap();
    assert_eq!(got, Ok(true));
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    assert_eq!(
        fence,
        a_fence.map(|f| f + 1),
        "the fence counter moved with the slot"
    );
}

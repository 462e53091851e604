//! Redis servers of our own, started by `tests/redis-harness` (the one
//! harness the Rust tests, the PHPUnit suite and the torture suite share),
//! and a plain client for checks.

use crate::lock::sys;
use parking_lot::Mutex;
use redis::{Client, Connection};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// Serializes the tests that set `SSL_CERT_FILE` or fork: a child forked
/// while another thread holds std's environment lock would deadlock.
pub(super) static ENV_LOCK: Mutex<()> = Mutex::new(());

#[derive(Clone, Copy)]
pub(super) enum Listen {
    Tcp,
    Unix,
    Tls,
}

/// One topology the harness started in a temp dir of its own; the harness
/// stops every node by pid and removes the dir when the last handle goes.
struct Harness {
    dir: PathBuf,
}

/// A node line of the harness's facts: `node NAME ROLE PORT PID NODEDIR`.
struct NodeFact {
    name: String,
    port: u16,
    pid: libc::pid_t,
    node_dir: PathBuf,
}

impl Harness {
    /// `tests/redis-harness start KIND… DIR OPTIONS…`: the handle and the
    /// node lines of the facts it printed.
    fn start(kind: &[&str], options: &[&str]) -> (Arc<Harness>, Vec<NodeFact>) {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        // scripts/test reaps what a crashed run left under CRONLOCK_TEST_TMP.
        let base = std::env::var_os("CRONLOCK_TEST_TMP")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let dir = base.join(format!(
            "cronlock-redis-test-{}-{}",
            sys::current_pid(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let mut args: Vec<&str> = vec!["start"];
        args.extend_from_slice(kind);
        let dir_arg = dir.to_str().expect("a UTF-8 temp dir");
        args.push(dir_arg);
        args.extend_from_slice(options);
        let facts = run_harness(&args);
        let harness = Arc::new(Harness {
            dir: facts
                .lines()
                .find_map(|line| line.strip_prefix("dir "))
                .map(PathBuf::from)
                .unwrap_or(dir),
        });
        (harness, node_facts(&facts))
    }

    fn run(&self, command: &str, node: Option<&str>) -> String {
        let dir = self.dir.to_str().unwrap();
        let mut args = vec![command, dir];
        args.extend(node);
        run_harness(&args)
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        let dir = self.dir.to_str().unwrap();
        let stopped = Command::new(harness_path())
            .args(["stop", dir])
            .stdin(Stdio::null())
            .status();
        if !matches!(stopped, Ok(status) if status.success()) && !thread::panicking() {
            panic!("tests/redis-harness stop {dir} failed");
        }
    }
}

fn harness_path() -> &'static str {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/redis-harness")
}

/// Runs the harness; its stdout, or a panic with its stderr.
fn run_harness(args: &[&str]) -> String {
    let output = Command::new(harness_path())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("tests/redis-harness needs php on PATH");
    assert!(
        output.status.success(),
        "tests/redis-harness {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn node_facts(facts: &str) -> Vec<NodeFact> {
    facts
        .lines()
        .filter_map(|line| {
            let words: Vec<&str> = line.split(' ').collect();
            match words.as_slice() {
                ["node", name, _role, port, pid, node_dir] => Some(NodeFact {
                    name: (*name).to_owned(),
                    port: port.parse().unwrap(),
                    pid: pid.parse().unwrap(),
                    node_dir: PathBuf::from(node_dir),
                }),
                _ => None,
            }
        })
        .collect()
}

/// A redis-server of our own on a free loopback port, stopped by pid when
/// the last handle on its topology goes.
pub(super) struct TestServer {
    harness: Arc<Harness>,
    name: String,
    node_dir: PathBuf,
    /// The topology's dir: TLS servers have `ca.crt` and `other-ca.crt` in it.
    pub(super) dir: PathBuf,
    pub(super) port: u16,
    pub(super) pid: libc::pid_t,
    pub(super) listen: Listen,
    /// `user:password@` or empty, for the raw client.
    pub(super) auth: String,
}

impl TestServer {
    pub(super) fn start() -> Self {
        Self::start_with(Listen::Tcp, "", &[])
    }

    /// `extra`: redis-server arguments; a `--requirepass PW` among them is
    /// told to the harness, which must authenticate to see the server up.
    pub(super) fn start_with(listen: Listen, auth: &str, extra: &[&str]) -> Self {
        let mut options: Vec<String> = match listen {
            Listen::Tcp => vec![],
            Listen::Unix => vec!["--unix".into()],
            Listen::Tls => vec!["--tls".into()],
        };
        let mut rest = Vec::new();
        let mut args = extra.iter();
        while let Some(&arg) = args.next() {
            match (arg, args.as_slice().first()) {
                ("--requirepass", Some(password)) => {
                    options.push(format!("--requirepass={password}"));
                    args.next();
                }
                _ => rest.push(arg.to_owned()),
            }
        }
        options.push("--".into());
        options.extend(rest);
        let options: Vec<&str> = options.iter().map(String::as_str).collect();
        let (harness, nodes) = Harness::start(&["single"], &options);
        Self::nodes(&harness, nodes, listen, auth).remove(0)
    }

    fn nodes(
        harness: &Arc<Harness>,
        facts: Vec<NodeFact>,
        listen: Listen,
        auth: &str,
    ) -> Vec<TestServer> {
        facts
            .into_iter()
            .map(|fact| TestServer {
                harness: Arc::clone(harness),
                name: fact.name,
                node_dir: fact.node_dir,
                dir: harness.dir.clone(),
                port: fact.port,
                pid: fact.pid,
                listen,
                auth: auth.to_owned(),
            })
            .collect()
    }

    /// The address, credentials and database of the raw client; TLS
    /// without verification.
    pub(super) fn raw_dsn(&self) -> String {
        match self.listen {
            Listen::Tcp => format!("redis://{}127.0.0.1:{}", self.auth, self.port),
            Listen::Unix => format!("unix://{}", self.socket().display()),
            Listen::Tls => format!("rediss://{}127.0.0.1:{}/#insecure", self.auth, self.port),
        }
    }

    fn socket(&self) -> PathBuf {
        self.node_dir.join("redis.sock")
    }

    pub(super) fn raw(&self) -> Connection {
        raw_client(&self.raw_dsn())
    }

    /// SIGKILL, like a crash; returns once the process is gone.
    pub(super) fn kill(&mut self) {
        self.harness.run("kill", Some(&self.name));
    }

    /// Starts the server again on the same port, empty.
    pub(super) fn restart(&mut self) {
        let facts = self.harness.run("restart", Some(&self.name));
        self.pid = node_facts(&facts)[0].pid;
    }

    /// kill(2) on the server (SIGSTOP, SIGCONT…).
    pub(super) fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on the pid of a redis-server this test started
        // (the harness reported it and it is not stopped yet).
        assert_eq!(unsafe { libc::kill(self.pid, signal) }, 0);
    }
}

pub(super) fn raw_client(dsn: &str) -> Connection {
    Client::open(dsn)
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(2))
        .unwrap()
}

/// `count` independent masters, for Redlock.
pub(super) fn masters(count: usize) -> Vec<TestServer> {
    let (harness, nodes) = Harness::start(&["redlock", &count.to_string()], &[]);
    TestServer::nodes(&harness, nodes, Listen::Tcp, "")
}

/// A redis-server in sentinel mode.
pub(super) struct SentinelProcess {
    pub(super) port: u16,
}

impl SentinelProcess {
    pub(super) fn raw(&self) -> Connection {
        raw_client(&format!("redis://127.0.0.1:{}", self.port))
    }
}

/// A master, `replicas` replicas and three sentinels watching the master as
/// `mymaster` (quorum 2, down after 1 s).
pub(super) struct SentinelSetup {
    harness: Arc<Harness>,
    pub(super) servers: Vec<TestServer>,
    pub(super) sentinels: Vec<SentinelProcess>,
}

impl SentinelSetup {
    pub(super) fn start(replicas: usize) -> Self {
        let (harness, nodes) = Harness::start(&["sentinel"], &[&format!("--replicas={replicas}")]);
        let (sentinels, data): (Vec<NodeFact>, Vec<NodeFact>) =
            nodes.into_iter().partition(|n| n.name.starts_with('s'));
        SentinelSetup {
            servers: TestServer::nodes(&harness, data, Listen::Tcp, ""),
            sentinels: sentinels
                .into_iter()
                .map(|n| SentinelProcess { port: n.port })
                .collect(),
            harness,
        }
    }

    pub(super) fn dsn(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!("redis-sentinel://{}/mymaster", hosts.join(","))
    }

    /// SIGSTOP (`paused`) or SIGCONT to every sentinel.
    pub(super) fn pause_sentinels(&self, paused: bool) {
        for index in 0..self.sentinels.len() {
            let name = format!("s{index}");
            self.harness
                .run(if paused { "pause" } else { "resume" }, Some(&name));
        }
    }

    /// The port the sentinels name as the master now.
    pub(super) fn master_port(&self) -> u16 {
        let (_, port): (String, u16) = redis::cmd("SENTINEL")
            .arg(&["get-master-addr-by-name", "mymaster"])
            .query(&mut self.sentinels[0].raw())
            .unwrap();
        port
    }

    pub(super) fn server_on(&self, port: u16) -> &TestServer {
        self.servers.iter().find(|s| s.port == port).unwrap()
    }

    /// `SENTINEL FAILOVER`, then waits until every sentinel names another
    /// master, it answers as one and the other nodes replicate it.
    pub(super) fn fail_over(&self) -> u16 {
        node_facts(&self.harness.run("failover", None))[0].port
    }

    /// After a kill of the master on `old`: waits until every sentinel names
    /// another master and it answers as one.
    pub(super) fn await_new_master(&self, old: u16) -> u16 {
        let dir = self.harness.dir.to_str().unwrap();
        let old = &self.server_on(old).name;
        node_facts(&run_harness(&["await-master", dir, old]))[0].port
    }
}

/// Three masters made a Redis Cluster by `redis-cli --cluster create`.
pub(super) struct ClusterSetup {
    pub(super) nodes: Vec<TestServer>,
}

impl ClusterSetup {
    pub(super) fn start() -> Self {
        let (harness, nodes) = Harness::start(&["cluster"], &[]);
        ClusterSetup {
            nodes: TestServer::nodes(&harness, nodes, Listen::Tcp, ""),
        }
    }

    pub(super) fn dsn(&self, seeds: &[usize]) -> String {
        let hosts: Vec<String> = seeds
            .iter()
            .map(|&i| format!("127.0.0.1:{}", self.nodes[i].port))
            .collect();
        format!("redis-cluster://{}", hosts.join(","))
    }

    pub(super) fn slot(&self, key: &str) -> u16 {
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.nodes[0].raw())
            .unwrap()
    }

    pub(super) fn id(&self, node: usize) -> String {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut self.nodes[node].raw())
            .unwrap()
    }

    /// The index of the node serving `key` (the one that answers without
    /// `MOVED`).
    pub(super) fn owner_of(&self, key: &str) -> usize {
        self.nodes
            .iter()
            .position(|node| {
                redis::cmd("EXISTS")
                    .arg(key)
                    .query::<i64>(&mut node.raw())
                    .is_ok()
            })
            .expect("some node serves every slot")
    }
}

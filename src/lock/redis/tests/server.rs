//! A redis-server of our own per test, and a plain client for checks.

use crate::lock::sys;
use parking_lot::Mutex;
use redis::{Client, Connection};
use std::fs;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// Serializes the tests that set `SSL_CERT_FILE` or fork: a child forked
/// while another thread holds std's environment lock would deadlock.
pub(super) static ENV_LOCK: Mutex<()> = Mutex::new(());

#[derive(Clone, Copy)]
pub(super) enum Listen {
    Tcp,
    Unix,
    Tls,
}

/// A redis-server of our own on a free port, killed by pid on drop.
pub(super) struct TestServer {
    pub(super) child: Child,
    pub(super) dir: PathBuf,
    pub(super) port: u16,
    pub(super) listen: Listen,
    /// `user:password@` or empty, for the raw client.
    pub(super) auth: String,
}

impl TestServer {
    pub(super) fn start() -> Self {
        Self::start_with(Listen::Tcp, "", &[])
    }

    pub(super) fn start_with(listen: Listen, auth: &str, extra: &[&str]) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        // Another process may take the free port before redis binds it.
        for _ in 0..5 {
            let dir = std::env::temp_dir().join(format!(
                "cronlock-redis-test-{}-{}",
                sys::current_pid(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            fs::create_dir_all(&dir).unwrap();
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|listener| listener.local_addr())
                .unwrap()
                .port()
                .to_string();
            let mut command = Command::new("redis-server");
            command
                .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(&dir)
                .arg("--logfile")
                .arg(dir.join("redis.log"));
            match listen {
                Listen::Tcp => command.args(["--port", &port]),
                Listen::Unix => command
                    .args(["--port", "0", "--unixsocket"])
                    .arg(dir.join("redis.sock")),
                Listen::Tls => {
                    make_certificates(&dir);
                    command
                        .args(["--port", "0", "--tls-port", &port])
                        .args(["--tls-auth-clients", "no"])
                        .arg("--tls-cert-file")
                        .arg(dir.join("server.crt"))
                        .arg("--tls-key-file")
                        .arg(dir.join("server.key"))
                        .arg("--tls-ca-cert-file")
                        .arg(dir.join("ca.crt"))
                }
            };
            let child = command
                .args(extra)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server must be installed");
            let mut server = TestServer {
                child,
                dir,
                port: port.parse().unwrap(),
                listen,
                auth: auth.to_owned(),
            };
            if server.wait_until_ready() {
                return server;
            }
        }
        panic!("redis-server did not start");
    }

    pub(super) fn wait_until_ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.child.try_wait().unwrap().is_some() {
                return false;
            }
            let client = Client::open(self.raw_dsn()).unwrap();
            if let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_secs(1)) {
                if redis::cmd("PING").query::<String>(&mut conn).is_ok() {
                    return true;
                }
            }
            thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// The address, credentials and database of the raw client; TLS
    /// without verification.
    pub(super) fn raw_dsn(&self) -> String {
        match self.listen {
            Listen::Tcp => format!("redis://{}127.0.0.1:{}", self.auth, self.port),
            Listen::Unix => format!("unix://{}", self.dir.join("redis.sock").display()),
            Listen::Tls => format!("rediss://{}127.0.0.1:{}/#insecure", self.auth, self.port),
        }
    }

    pub(super) fn raw(&self) -> Connection {
        raw_client(&self.raw_dsn())
    }

    pub(super) fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

pub(super) fn raw_client(dsn: &str) -> Connection {
    Client::open(dsn)
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(2))
        .unwrap()
}

/// A private CA (`ca.crt`), a server certificate it signed for
/// 127.0.0.1 and localhost, and an unrelated CA (`other-ca.crt`).
fn make_certificates(dir: &std::path::Path) {
    let openssl = |args: &[&str]| {
        let status = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("the TLS tests need the openssl CLI (apt-get install -y openssl)");
        assert!(status.success(), "openssl {args:?} failed");
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    for ca in ["ca", "other-ca"] {
        let (key, crt, subject) = (
            format!("{ca}.key"),
            format!("{ca}.crt"),
            format!("/CN={ca}"),
        );
        openssl(
            &[
                &["req", "-x509", "-days", "2", "-subj", &subject][..],
                &ec,
                &[
                    "-keyout",
                    &key,
                    "-out",
                    &crt,
                    "-addext",
                    "basicConstraints=critical,CA:TRUE",
                    "-addext",
                    "keyUsage=critical,keyCertSign,cRLSign",
                ],
            ]
            .concat(),
        );
    }
    openssl(
        &[
            &["req", "-subj", "/CN=localhost"][..],
            &ec,
            &["-keyout", "server.key", "-out", "server.csr"],
        ]
        .concat(),
    );
    fs::write(
        dir.join("server.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n\
         basicConstraints=critical,CA:FALSE\n\
         keyUsage=critical,digitalSignature\n\
         extendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-set_serial",
        "2",
        "-days",
        "2",
        "-extfile",
        "server.ext",
        "-out",
        "server.crt",
    ]);
}

/// A redis-server in sentinel mode, from a config file of its own (sentinels
/// rewrite it), killed by pid on drop.
pub(super) struct SentinelProcess {
    child: Child,
    dir: PathBuf,
    pub(super) port: u16,
}

impl SentinelProcess {
    pub(super) fn raw(&self) -> Connection {
        raw_client(&format!("redis://127.0.0.1:{}", self.port))
    }
}

impl Drop for SentinelProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A master, `replicas` replicas and three sentinels watching the master as
/// `mymaster` (quorum 2, down after 1 s).
pub(super) struct SentinelSetup {
    pub(super) servers: Vec<TestServer>,
    pub(super) sentinels: Vec<SentinelProcess>,
}

impl SentinelSetup {
    pub(super) fn start(replicas: usize) -> Self {
        let master = TestServer::start();
        let master_port = master.port.to_string();
        let mut servers = vec![master];
        for _ in 0..replicas {
            servers.push(TestServer::start_with(
                Listen::Tcp,
                "",
                &["--replicaof", "127.0.0.1", &master_port],
            ));
        }
        let sentinels = (0..3).map(|_| start_sentinel(&master_port)).collect();
        let setup = SentinelSetup { servers, sentinels };
        // Until every sentinel knows the replicas (failover needs them).
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let ready = setup.sentinels.iter().all(|sentinel| {
                let replicas: Vec<redis::Value> = redis::cmd("SENTINEL")
                    .arg(&["replicas", "mymaster"])
                    .query(&mut sentinel.raw())
                    .unwrap_or_default();
                replicas.len() >= setup.servers.len() - 1
            });
            let linked = setup.servers[1..].iter().all(|replica| {
                let info: String = redis::cmd("INFO")
                    .arg("replication")
                    .query(&mut replica.raw())
                    .unwrap_or_default();
                info.contains("master_link_status:up")
            });
            if ready && linked {
                return setup;
            }
            thread::sleep(Duration::from_millis(100));
        }
        panic!("the sentinels did not see the replicas");
    }

    pub(super) fn dsn(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!("redis-sentinel://{}/mymaster", hosts.join(","))
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
    /// master and it answers as one.
    pub(super) fn fail_over(&self) -> u16 {
        let old = self.master_port();
        let _: () = redis::cmd("SENTINEL")
            .arg(&["failover", "mymaster"])
            .query(&mut self.sentinels[0].raw())
            .unwrap();
        self.await_new_master(old)
    }

    pub(super) fn await_new_master(&self, old: u16) -> u16 {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let named: Vec<u16> = self
                .sentinels
                .iter()
                .filter_map(|s| {
                    redis::cmd("SENTINEL")
                        .arg(&["get-master-addr-by-name", "mymaster"])
                        .query::<(String, u16)>(&mut s.raw())
                        .ok()
                        .map(|(_, port)| port)
                })
                .collect();
            if named.len() == 3 && named.iter().all(|&p| p != old && p == named[0]) {
                let role: Vec<redis::Value> = redis::cmd("ROLE")
                    .query(&mut self.server_on(named[0]).raw())
                    .unwrap_or_default();
                if matches!(role.first(), Some(redis::Value::BulkString(r)) if r == b"master") {
                    return named[0];
                }
            }
            thread::sleep(Duration::from_millis(100));
        }
        panic!("no failover within 30 s");
    }
}

fn start_sentinel(master_port: &str) -> SentinelProcess {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    for _ in 0..5 {
        let dir = std::env::temp_dir().join(format!(
            "cronlock-sentinel-test-{}-{}",
            sys::current_pid(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir_all(&dir).unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .unwrap()
            .port();
        let conf = dir.join("sentinel.conf");
        fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\nlogfile {}\n\
                 sentinel monitor mymaster 127.0.0.1 {master_port} 2\n\
                 sentinel down-after-milliseconds mymaster 1000\n\
                 sentinel failover-timeout mymaster 5000\n",
                dir.display(),
                dir.join("sentinel.log").display()
            ),
        )
        .unwrap();
        let child = Command::new("redis-server")
            .arg(&conf)
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed");
        let mut sentinel = SentinelProcess { child, dir, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if sentinel.child.try_wait().unwrap().is_some() {
                break;
            }
            let client = Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
            if let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_secs(1)) {
                if redis::cmd("PING").query::<String>(&mut conn).is_ok() {
                    return sentinel;
                }
            }
            thread::sleep(Duration::from_millis(10));
        }
        drop(sentinel);
    }
    panic!("redis-sentinel did not start");
}

/// Three masters made a Redis Cluster by `redis-cli --cluster create`.
pub(super) struct ClusterSetup {
    pub(super) nodes: Vec<TestServer>,
}

impl ClusterSetup {
    pub(super) fn start() -> Self {
        let nodes: Vec<TestServer> = (0..3)
            .map(|_| {
                TestServer::start_with(
                    Listen::Tcp,
                    "",
                    &[
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                        "--cluster-node-timeout",
                        "2000",
                    ],
                )
            })
            .collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let status = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli must be installed");
        assert!(status.success(), "redis-cli --cluster create failed");
        let setup = ClusterSetup { nodes };
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let ok = setup.nodes.iter().all(|node| {
                redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query::<String>(&mut node.raw())
                    .is_ok_and(|info| info.contains("cluster_state:ok"))
            });
            if ok {
                return setup;
            }
            thread::sleep(Duration::from_millis(100));
        }
        panic!("the cluster did not become ok");
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

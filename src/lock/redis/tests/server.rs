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

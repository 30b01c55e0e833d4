//! Shared harness of the end-to-end tests: the real `capstan server` binary on a temporary data
//! directory and a free loopback port (on SQLite, or on a real etcd started for the test), and
//! stock kubectl of several versions.

#![allow(dead_code, clippy::expect_used, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub use capstan_testkit::{EtcdServer, free_port};

pub mod cluster;
pub mod extension;
pub mod https;
pub mod node;
pub mod prometheus;
pub mod python;
pub mod webhook;

pub struct Server {
    child: Child,
    /// The address it is reached at: its `--bind-address` when that is a specific one, else
    /// loopback.
    host: String,
    port: u16,
    data_dir: PathBuf,
}

impl Server {
    pub fn start(data_dir: &Path, port: u16) -> Server {
        Self::start_with(data_dir, port, &[])
    }

    /// A control plane without a node agent (most tests use simulated nodes or none).
    pub fn start_with(data_dir: &Path, port: u16, extra: &[&str]) -> Server {
        let mut args = vec!["--disable-agent"];
        args.extend_from_slice(extra);
        Self::launch(data_dir, port, &args)
    }

    /// A server with its node agent (containerd, real containers).
    pub fn start_node(data_dir: &Path, port: u16, extra: &[&str]) -> Server {
        Self::launch(data_dir, port, extra)
    }

    /// A server with its node agent listening on `bind` rather than loopback only (pods reach
    /// the API server through the `kubernetes` Service at its advertised address).
    pub fn start_node_on(data_dir: &Path, port: u16, bind: &str, extra: &[&str]) -> Server {
        let mut args = vec!["--bind-address", bind];
        args.extend_from_slice(extra);
        Self::launch(data_dir, port, &args)
    }

    fn launch(data_dir: &Path, port: u16, extra: &[&str]) -> Server {
        let bind = if extra.contains(&"--bind-address") {
            &[][..]
        } else {
            &["--bind-address", "127.0.0.1"][..]
        };
        let child = Command::new(env!("CARGO_BIN_EXE_capstan"))
            .arg("server")
            .args(bind)
            .args(["--https-listen-port"])
            .arg(port.to_string())
            // The cluster DNS on a free port: servers of parallel tests must not clash on 53.
            .args(["--dns-port", "0"])
            .arg("--data-dir")
            .arg(data_dir)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start capstan server");
        let host = extra
            .iter()
            .position(|a| *a == "--bind-address")
            .and_then(|at| extra.get(at + 1))
            .filter(|bind| !["0.0.0.0", "::"].contains(bind))
            .map_or_else(|| "127.0.0.1".to_owned(), |bind| (*bind).to_owned());
        let server = Server {
            child,
            host,
            port,
            data_dir: data_dir.to_owned(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            // Ready once /readyz says so, or, with anonymous requests refused
            // (`--anonymous-auth=false`), once it answers them 401: the server answers only
            // after its defaults exist.
            let ready = server.kubeconfig().exists()
                && curl(&server.url("/readyz"))
                    .is_some_and(|body| body == "ok" || body.contains("\"code\":401"));
            if ready {
                return server;
            }
            assert!(Instant::now() < deadline, "server did not become ready");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.data_dir.join("kubeconfig.yaml")
    }

    pub fn url(&self, path: &str) -> String {
        format!("https://{}:{}{path}", self.host, self.port)
    }

    /// Kills the server with SIGKILL, as a crash: nothing is cleaned up.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn stop(mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let status = self.child.wait().expect("wait for the server");
        assert!(status.success(), "SIGTERM is a clean shutdown: {status}");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An anonymous HTTPS GET (not verifying the server); the body, if the request got an answer.
pub fn curl(url: &str) -> Option<String> {
    curl_with(url, &[])
}

pub fn curl_with(url: &str, extra: &[&str]) -> Option<String> {
    let output = Command::new("curl")
        .args(["-sk", "--max-time", "5"])
        .args(extra)
        .arg(url)
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The folder holding `kubectl` and its versioned siblings (`kubectl.1.27` ...).
pub fn kubectl_dir() -> PathBuf {
    let path = std::env::var_os("PATH").expect("PATH");
    let kubectl = std::env::split_paths(&path)
        .map(|dir| dir.join("kubectl"))
        .find(|candidate| candidate.exists())
        .expect("kubectl on PATH");
    std::fs::canonicalize(kubectl)
        .expect("resolve kubectl")
        .parent()
        .expect("kubectl's folder")
        .to_owned()
}

pub fn kubectl(version: &str, kubeconfig: &Path, args: &[&str]) -> Output {
    let binary = kubectl_dir().join(format!("kubectl.{version}"));
    Command::new(&binary)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", binary.display()))
}

/// The kubectl versions every end-to-end scenario runs with: the oldest and newest supported and
/// the machine's default.
pub const KUBECTL_VERSIONS: [&str; 3] = ["1.27", "1.33", "default"];

/// Runs kubectl `version` ("default" for the machine's `kubectl`), asserting success; stdout.
#[track_caller]
pub fn kubectl_ok(version: &str, kubeconfig: &Path, args: &[&str]) -> String {
    succeeded(version, args, &kubectl_any(version, kubeconfig, args))
}

/// Asserts that kubectl `version` with `args` succeeded; its stdout.
#[track_caller]
fn succeeded(version: &str, args: &[&str], output: &Output) -> String {
    assert!(
        output.status.success(),
        "kubectl {version} {}: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr),
        String::from_utf8_lossy(&output.stdout)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The kubectl of `version` ("default" for the machine's `kubectl`).
pub fn kubectl_binary(version: &str) -> PathBuf {
    if version == "default" {
        kubectl_dir().join("kubectl")
    } else {
        kubectl_dir().join(format!("kubectl.{version}"))
    }
}

/// Runs kubectl `version` and returns what it did, success or not.
pub fn kubectl_any(version: &str, kubeconfig: &Path, args: &[&str]) -> Output {
    let binary = kubectl_binary(version);
    Command::new(&binary)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", binary.display()))
}

/// Runs kubectl with `stdin` as its input.
pub fn kubectl_stdin(version: &str, kubeconfig: &Path, args: &[&str], stdin: &str) -> Output {
    use std::io::Write;
    let binary = kubectl_binary(version);
    let mut child = Command::new(&binary)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {}: {e}", binary.display()));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// Runs kubectl with `stdin` as its input, asserting success; stdout.
#[track_caller]
pub fn kubectl_stdin_ok(version: &str, kubeconfig: &Path, args: &[&str], stdin: &str) -> String {
    succeeded(
        version,
        args,
        &kubectl_stdin(version, kubeconfig, args, stdin),
    )
}

/// Asserts that a command (kubectl, mostly) was refused, exiting non-zero, and that its stderr
/// says each of `expected`; the stderr, for further checks.
#[track_caller]
pub fn assert_refused(output: &Output, expected: &[&str]) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        !output.status.success(),
        "the command succeeded where it must be refused: {}{stderr}",
        String::from_utf8_lossy(&output.stdout)
    );
    for message in expected {
        assert!(
            stderr.contains(message),
            "the error lacks {message:?}:\n{stderr}"
        );
    }
    stderr
}

/// Where a test server keeps its data.
pub enum Datastore {
    /// The embedded SQLite store.
    Sqlite,
    /// A real etcd, started for the test.
    Etcd(EtcdServer),
}

impl Datastore {
    /// `sqlite` or `etcd`: the datastores every end-to-end scenario runs on.
    pub fn start(kind: &str) -> Datastore {
        match kind {
            "sqlite" => Datastore::Sqlite,
            "etcd" => Datastore::Etcd(EtcdServer::start().expect("start etcd")),
            other => panic!("unknown datastore {other}"),
        }
    }

    /// The server flags that select this datastore.
    pub fn flags(&self) -> Vec<String> {
        match self {
            Datastore::Sqlite => Vec::new(),
            Datastore::Etcd(etcd) => vec!["--datastore-endpoint".into(), etcd.endpoint()],
        }
    }
}

/// A `capstan sim` process, killed when dropped.
pub struct Sim(Child);

impl Sim {
    pub fn start(kubeconfig: &Path, args: &[&str]) -> Sim {
        let child = Command::new(env!("CARGO_BIN_EXE_capstan"))
            .arg("sim")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start capstan sim");
        Sim(child)
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Polls `probe` until it returns `Some`, for up to 30 s.
pub fn eventually<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A kube-rs client from a kubeconfig file.
pub async fn kube_client(kubeconfig: &Path) -> kube::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig).expect("read the kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .expect("a kube config from the kubeconfig");
    kube::Client::try_from(config).expect("a kube client")
}

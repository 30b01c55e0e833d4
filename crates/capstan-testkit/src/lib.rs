//! Test harness shared by Capstan's test suites: starts real components (etcd today, one member
//! or a cluster of several; the API server, containerd and test images as later issues add
//! them) in temporary directories on loopback ports, and tears them down when the test ends;
//! and the input generators of the fuzz targets ([`fuzz`]).

pub mod fuzz;

use std::collections::{HashSet, VecDeque};
use std::fmt;
use std::io::{self, BufRead, BufReader};
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long [`EtcdServer::start`] waits for etcd to serve clients.
const ETCD_READY_TIMEOUT: Duration = Duration::from_secs(30);
/// What etcd logs once it accepts client requests: "ready to serve client requests" with its
/// default logger in 3.4, "serving client traffic" (insecurely or not) with zap.
const ETCD_READY_LINES: [&str; 2] = ["ready to serve client requests", "serving client traffic"];
/// How many of etcd's last log lines an error message quotes.
const LOG_TAIL_LINES: usize = 40;
/// How many times a start is retried when a port turned out to be taken.
const START_ATTEMPTS: usize = 5;

/// `go` on PATH, else the newest of Debian's `/usr/lib/go-*/bin/go` (`golang-go` installs it
/// there without a link on PATH): the Go toolchain the benchmarks' client-go-like load and the
/// profiling tests' `go tool pprof` run on.
pub fn find_go() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("go"))
            .find(|go| go.is_file())
    });
    on_path.or_else(|| {
        let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib")
            .ok()?
            .filter_map(Result::ok)
            .filter(|entry| entry.file_name().to_string_lossy().starts_with("go-"))
            .map(|entry| entry.path().join("bin/go"))
            .filter(|go| go.is_file())
            .collect();
        found.sort();
        found.pop()
    })
}

/// A free TCP port on 127.0.0.1: the OS picks one, which is released at once. No port is handed
/// out twice by one process, so concurrent tests do not race each other for the same one.
pub fn free_port() -> u16 {
    static HANDED_OUT: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    let handed_out = HANDED_OUT.get_or_init(|| Mutex::new(HashSet::new()));
    let mut last = 0;
    for _ in 0..100 {
        let port = match TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).and_then(|l| l.local_addr()) {
            Ok(addr) => addr.port(),
            Err(_) => continue,
        };
        last = port;
        let mut seen = handed_out.lock().unwrap_or_else(|e| e.into_inner());
        if seen.insert(port) {
            return port;
        }
    }
    last
}

/// A real single-member etcd (the `etcd` binary of the Debian package `etcd-server`) listening on
/// loopback, with its data in a temporary directory. Dropping it kills the server and removes
/// the directory.
pub struct EtcdServer {
    /// The member name (`--name`).
    name: String,
    /// `--initial-cluster` and `--initial-cluster-token` for a member of an [`EtcdCluster`];
    /// `None` for a single-member etcd.
    cluster: Option<(String, String)>,
    child: Option<Child>,
    log: Arc<Mutex<VecDeque<String>>>,
    drain: Option<JoinHandle<()>>,
    client_port: u16,
    peer_port: u16,
    // Declared last so the directory is removed after the process is gone.
    data_dir: tempfile::TempDir,
}

impl fmt::Debug for EtcdServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdServer")
            .field("endpoint", &self.endpoint())
            .field("peer_port", &self.peer_port)
            .field("pid", &self.child.as_ref().map(Child::id))
            .field("data_dir", &self.data_dir.path())
            .finish()
    }
}

/// Why one attempt to launch etcd failed.
enum LaunchError {
    /// A port was taken meanwhile: worth another attempt on other ports.
    PortClash(io::Error),
    Other(io::Error),
}

impl EtcdServer {
    /// Starts etcd on free loopback ports with a fresh data directory and waits until it serves
    /// clients. Requests up to 2 MiB are accepted, so values of the store's 1.5 MiB limit fit.
    pub fn start() -> io::Result<EtcdServer> {
        Self::start_with(temp_data_dir()?)
    }

    /// Like [`EtcdServer::start`], with the data directory created under `parent` (so that a
    /// benchmark can put etcd on the same file system as what it is compared with).
    pub fn start_in(parent: &Path) -> io::Result<EtcdServer> {
        Self::start_with(
            tempfile::Builder::new()
                .prefix("capstan-etcd-")
                .tempdir_in(parent)?,
        )
    }

    fn start_with(data_dir: tempfile::TempDir) -> io::Result<EtcdServer> {
        let mut server = EtcdServer {
            name: "capstan-test".to_owned(),
            cluster: None,
            child: None,
            log: Arc::new(Mutex::new(VecDeque::new())),
            drain: None,
            client_port: free_port(),
            peer_port: free_port(),
            data_dir,
        };
        let mut attempts = 1;
        loop {
            match server.launch() {
                Ok(()) => return Ok(server),
                Err(LaunchError::PortClash(_)) if attempts < START_ATTEMPTS => {
                    attempts += 1;
                    server.stop();
                    // The failed attempt may have written a member directory; start clean.
                    clear_dir(server.data_dir.path())?;
                    server.client_port = free_port();
                    server.peer_port = free_port();
                }
                Err(LaunchError::PortClash(error) | LaunchError::Other(error)) => {
                    return Err(error);
                }
            }
        }
    }

    /// The member name (`--name`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The process id of the running etcd, if it is running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(std::process::Child::id)
    }

    /// The client URL, `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        self.data_dir.path()
    }

    /// Kills the server abruptly (SIGKILL) and waits for it, as a crash or a dropped connection
    /// would look to clients. The data directory stays; [`EtcdServer::restart`] resumes from it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(drain) = self.drain.take() {
            let _ = drain.join();
        }
    }

    /// Starts the server again on the same ports and data directory (stopping it first if it
    /// still runs), and waits until it serves clients.
    pub fn restart(&mut self) -> io::Result<()> {
        self.stop();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.launch() {
                Ok(()) => return Ok(()),
                // The killed process's sockets may take a moment to be released.
                Err(LaunchError::PortClash(_)) if Instant::now() < deadline => {
                    self.stop();
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(LaunchError::PortClash(error) | LaunchError::Other(error)) => {
                    return Err(error);
                }
            }
        }
    }

    fn launch(&mut self) -> Result<(), LaunchError> {
        let ready = self.spawn()?;
        self.wait_ready(&ready)
    }

    /// The peer URL, `http://127.0.0.1:PORT`.
    fn peer_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.peer_port)
    }

    /// Starts the process; the receiver hears once it logs that it serves clients.
    fn spawn(&mut self) -> Result<mpsc::Receiver<()>, LaunchError> {
        let client_url = self.endpoint();
        let peer_url = self.peer_url();
        let (initial_cluster, token) = match &self.cluster {
            Some((initial_cluster, token)) => (initial_cluster.clone(), token.clone()),
            None => (
                format!("{}={peer_url}", self.name),
                "etcd-cluster".to_owned(),
            ),
        };
        let mut child = Command::new("etcd")
            .arg(format!("--name={}", self.name))
            .arg(format!(
                "--data-dir={}",
                self.data_dir.path().join("etcd").display()
            ))
            .arg(format!("--listen-client-urls={client_url}"))
            .arg(format!("--advertise-client-urls={client_url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster={initial_cluster}"))
            .arg(format!("--initial-cluster-token={token}"))
            // Ignored when the data directory already holds a member (a restart).
            .arg("--initial-cluster-state=new")
            .arg("--max-request-bytes=2097152")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|error| {
                LaunchError::Other(if error.kind() == io::ErrorKind::NotFound {
                    io::Error::new(
                        io::ErrorKind::NotFound,
                        "the `etcd` binary is not on PATH: install the Debian package \
                         `etcd-server` (apt-get install etcd-server)",
                    )
                } else {
                    io::Error::new(error.kind(), format!("cannot run etcd: {error}"))
                })
            })?;
        let Some(stderr) = child.stderr.take() else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(LaunchError::Other(io::Error::other(
                "etcd's stderr was not captured",
            )));
        };
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clear();
        let (ready_tx, ready_rx) = mpsc::channel::<()>();
        let log = self.log.clone();
        // Reads the log for the ready line, then keeps draining it so the pipe never fills.
        let drain = std::thread::Builder::new()
            .name(format!("etcd-log-{}", self.client_port))
            .spawn(move || {
                let mut ready = Some(ready_tx);
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    if ready.is_some()
                        && ETCD_READY_LINES.iter().any(|l| line.contains(l))
                        && let Some(tx) = ready.take()
                    {
                        let _ = tx.send(());
                    }
                    let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
                    if log.len() == LOG_TAIL_LINES {
                        log.pop_front();
                    }
                    log.push_back(line);
                }
            })
            .map_err(LaunchError::Other)?;
        self.child = Some(child);
        self.drain = Some(drain);
        Ok(ready_rx)
    }

    /// Waits until the process spawned last serves clients, or fails with its log's tail.
    fn wait_ready(&mut self, ready_rx: &mpsc::Receiver<()>) -> Result<(), LaunchError> {
        let deadline = Instant::now() + ETCD_READY_TIMEOUT;
        loop {
            match ready_rx.recv_timeout(Duration::from_millis(100)) {
                Ok(()) => return Ok(()),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    // The log ended: etcd exited before becoming ready.
                    self.stop();
                    let tail = self.log_tail();
                    let error = io::Error::other(format!(
                        "etcd exited before serving clients; its log ends with:\n{tail}"
                    ));
                    return Err(if tail.contains("address already in use") {
                        LaunchError::PortClash(error)
                    } else {
                        LaunchError::Other(error)
                    });
                }
                Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() >= deadline => {
                    self.stop();
                    return Err(LaunchError::Other(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "etcd did not serve clients within {ETCD_READY_TIMEOUT:?}; its log \
                             ends with:\n{}",
                            self.log_tail()
                        ),
                    )));
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
        }
    }

    fn log_tail(&self) -> String {
        let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        log.iter().cloned().collect::<Vec<_>>().join("\n")
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A real etcd cluster of several members (the `etcd` binary, as [`EtcdServer`]), all on
/// loopback with their own ports and data directories, so that tests can kill a member and
/// restart it. Dropping the cluster kills every member and removes their directories.
pub struct EtcdCluster {
    members: Vec<EtcdServer>,
}

impl fmt::Debug for EtcdCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.members).finish()
    }
}

impl EtcdCluster {
    /// Starts a new cluster of `size` members and waits until every one serves clients.
    pub fn start(size: usize) -> io::Result<EtcdCluster> {
        if size == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "an etcd cluster needs at least one member",
            ));
        }
        let mut attempts = 1;
        loop {
            match Self::launch(size) {
                Ok(cluster) => return Ok(cluster),
                Err(LaunchError::PortClash(_)) if attempts < START_ATTEMPTS => attempts += 1,
                Err(LaunchError::PortClash(error) | LaunchError::Other(error)) => {
                    return Err(error);
                }
            }
        }
    }

    /// One attempt on fresh ports and directories; the members started are killed on failure
    /// (when the half-built cluster is dropped).
    fn launch(size: usize) -> Result<EtcdCluster, LaunchError> {
        let mut cluster = EtcdCluster {
            members: Vec::with_capacity(size),
        };
        for i in 0..size {
            cluster.members.push(EtcdServer {
                name: format!("capstan-test-{i}"),
                cluster: None,
                child: None,
                log: Arc::new(Mutex::new(VecDeque::new())),
                drain: None,
                client_port: free_port(),
                peer_port: free_port(),
                data_dir: temp_data_dir().map_err(LaunchError::Other)?,
            });
        }
        let initial_cluster = cluster
            .members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer_url()))
            .collect::<Vec<_>>()
            .join(",");
        // Unique per cluster, so that members of clusters of other tests never talk to these.
        let token = format!("capstan-test-{}", cluster.members[0].client_port);
        for member in &mut cluster.members {
            member.cluster = Some((initial_cluster.clone(), token.clone()));
        }
        // A member of a new cluster serves clients only once a quorum has formed: start them
        // all, then wait for each.
        let mut ready = Vec::with_capacity(size);
        for member in &mut cluster.members {
            ready.push(member.spawn()?);
        }
        for (member, ready) in cluster.members.iter_mut().zip(&ready) {
            member.wait_ready(ready)?;
        }
        Ok(cluster)
    }

    /// How many members the cluster has.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the cluster has no members (never, once started).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The client URLs of all members, in member order.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(EtcdServer::endpoint).collect()
    }

    /// The member at `index` (panics when there is none).
    pub fn member(&self, index: usize) -> &EtcdServer {
        &self.members[index]
    }

    /// Kills the member at `index` with SIGKILL and waits for it; its data directory stays.
    pub fn kill(&mut self, index: usize) {
        self.members[index].stop();
    }

    /// Starts the member at `index` again on its ports and data directory and waits until it
    /// has rejoined the cluster and serves clients.
    pub fn restart(&mut self, index: usize) -> io::Result<()> {
        self.members[index].restart()
    }
}

/// A temporary directory for etcd's data: in `/dev/shm` when it is there (etcd fsyncs every
/// write, which costs nothing on tmpfs), else in the system's temporary directory.
fn temp_data_dir() -> io::Result<tempfile::TempDir> {
    let shm = PathBuf::from("/dev/shm");
    if shm.is_dir()
        && let Ok(dir) = tempfile::Builder::new()
            .prefix("capstan-etcd-")
            .tempdir_in(&shm)
    {
        return Ok(dir);
    }
    tempfile::Builder::new().prefix("capstan-etcd-").tempdir()
}

fn clear_dir(dir: &Path) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            std::fs::remove_dir_all(path)?;
        } else {
            std::fs::remove_file(path)?;
        }
    }
    Ok(())
}

//! The joined node agent's client-side load balancer over the API servers, as k3s's agent load
//! balancer: a TCP proxy on `127.0.0.1:<port>` that every client of the agent (the kubelet, its
//! Lease and status, its certificate requests, the service proxy, the local-path provisioner,
//! the join itself) is pointed at instead of `--server`, and that forwards each connection to
//! one of the cluster's live API servers.
//!
//! - **The server list.** It starts with the `--server` address (the *default*), adds the
//!   addresses a restarted agent saved (only if saved for the same `--server`), and then
//!   follows the `default/kubernetes` Endpoints, which the servers' lease reconciler keeps to
//!   the servers that are alive ([`LoadBalancer::follow`], a GET every 10 s as the node: nodes
//!   may get Endpoints, not watch them). An empty list is ignored, so a hiccup never leaves the
//!   agent without servers. Learned servers are tried in a random order of their own on each
//!   agent, so agents spread over the servers; the default is kept as the last resort when it
//!   is not among them (a name or a virtual IP in front of the servers, or a server gone).
//! - **Failover.** A connection goes to the server the last one reached (the *current*); when
//!   it cannot be dialled (refused, or no answer within 5 s) the next is tried, around the
//!   list, and the first that answers becomes current. When every server fails, the client's
//!   connection is closed and its own retry tries again. A server that dies closes its
//!   connections (the kernel answers for a killed process), which the proxy passes on, so
//!   watches and pooled connections reconnect through the next server.
//! - **Removal.** When a server drops out of the list, the connections through it are closed,
//!   so that clients stuck on it move to a listed one.
//! - **Persistence.** Each change of the list is saved to
//!   `<data-dir>/agent/etc/capstan-agent-load-balancer.json` (`serverURL`, `serverAddresses`), so
//!   that a restarted agent can join through a surviving server when `--server` is gone.
//!
//! TLS passes through untouched: clients verify the server's certificate for `127.0.0.1`, which
//! every API server's serving certificate names, so any server answers for the address the
//! agent dials. Health is judged only by dialling: a server that accepts connections but
//! answers badly keeps them (k3s's later health checks are not done here).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use k8s_openapi::api::core::v1::Endpoints;
use rand::seq::SliceRandom as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// How often the server list is read from the `default/kubernetes` Endpoints.
pub const REFRESH: Duration = Duration::from_secs(10);
/// How long a server may take to accept a connection before the next is tried.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(5);
/// The file, under the agent's data directory, the learned servers are saved in.
pub const STATE_FILE: &str = "agent/etc/capstan-agent-load-balancer.json";

/// Why the load balancer could not start.
#[derive(Debug, thiserror::Error)]
pub enum LoadBalancerError {
    /// The server URL names no host and port.
    #[error("invalid server URL {0:?}: expected https://host[:port]")]
    Url(String),
    /// The local port could not be listened on.
    #[error("cannot listen on 127.0.0.1:{port}: {source}")]
    Listen {
        /// The port asked for.
        port: u16,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The `host:port` an `https://` URL names (port 443 when it names none), as dialled.
pub fn server_address(url: &str) -> Result<String, LoadBalancerError> {
    let invalid = || LoadBalancerError::Url(url.to_owned());
    let rest = url.strip_prefix("https://").ok_or_else(invalid)?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.is_empty() || authority.contains('@') {
        return Err(invalid());
    }
    // An IPv6 literal is bracketed; its colons are not the port's.
    let (host, port) = match authority.strip_prefix('[') {
        Some(bracketed) => {
            let (host, after) = bracketed.split_once(']').ok_or_else(invalid)?;
            (format!("[{host}]"), after.strip_prefix(':'))
        }
        None => match authority.split_once(':') {
            Some((host, port)) => (host.to_owned(), Some(port)),
            None => (authority.to_owned(), None),
        },
    };
    let port: u16 = match port {
        Some(port) => port.parse().map_err(|_| invalid())?,
        None => 443,
    };
    if host.is_empty() || host == "[]" || port == 0 {
        return Err(invalid());
    }
    Ok(format!("{host}:{port}"))
}

/// The servers the `default/kubernetes` Endpoints list, as `address:port`: every address of
/// every subset at the subset's `https` port (its first port if none is named so).
pub fn endpoint_addresses(endpoints: &Endpoints) -> Vec<String> {
    let mut servers = Vec::new();
    for subset in endpoints.subsets.iter().flatten() {
        let ports = subset.ports.as_deref().unwrap_or_default();
        let Some(port) = ports
            .iter()
            .find(|p| p.name.as_deref() == Some("https"))
            .or_else(|| ports.first())
            .map(|p| p.port)
        else {
            continue;
        };
        for address in subset.addresses.iter().flatten() {
            let server = match address.ip.parse::<std::net::IpAddr>() {
                Ok(std::net::IpAddr::V6(ip)) => format!("[{ip}]:{port}"),
                _ => format!("{}:{port}", address.ip),
            };
            if !servers.contains(&server) {
                servers.push(server);
            }
        }
    }
    servers
}

/// The servers a connection may go to and which it tries first; no I/O.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Servers {
    /// `--server`'s address: the last resort when it is not among the learned ones.
    default: String,
    /// The learned servers, in the order this agent tries them.
    learned: Vec<String>,
    /// The server the last connection reached, tried first.
    current: String,
}

impl Servers {
    /// A list of the default server alone, current.
    pub fn new(default: String) -> Servers {
        Servers {
            current: default.clone(),
            default,
            learned: Vec::new(),
        }
    }

    /// The default server (`--server`'s address).
    pub fn default_server(&self) -> &str {
        &self.default
    }

    /// The learned servers, in the order they are tried.
    pub fn learned(&self) -> &[String] {
        &self.learned
    }

    /// The server tried first.
    pub fn current(&self) -> &str {
        &self.current
    }

    /// Every server a connection may go to, in the order it tries them: the current one first,
    /// then around the list (the learned servers in their order, then the default unless it is
    /// one of them).
    pub fn order(&self) -> Vec<String> {
        let mut ring = self.learned.clone();
        if !ring.contains(&self.default) {
            ring.push(self.default.clone());
        }
        let start = ring.iter().position(|s| *s == self.current).unwrap_or(0);
        ring.rotate_left(start);
        ring
    }

    /// Replaces the learned servers by `learned` (in the order to try them). Nothing changes
    /// when it is empty or the same servers in any order: `None`. Otherwise the servers no
    /// longer learned (whose connections should close), and the current server stays if it is
    /// still learned, else the first learned one becomes current.
    pub fn update(&mut self, learned: Vec<String>) -> Option<Vec<String>> {
        let mut new: Vec<String> = Vec::with_capacity(learned.len());
        for server in learned {
            if !new.contains(&server) {
                new.push(server);
            }
        }
        if new.is_empty() {
            return None;
        }
        let same = new.len() == self.learned.len() && new.iter().all(|s| self.learned.contains(s));
        if same {
            return None;
        }
        let removed: Vec<String> = self
            .learned
            .iter()
            .filter(|s| !new.contains(s))
            .cloned()
            .collect();
        if !new.contains(&self.current) {
            self.current = new[0].clone();
        }
        self.learned = new;
        Some(removed)
    }

    /// A connection reached `server`: it is tried first from now on.
    pub fn connected(&mut self, server: &str) {
        if self.current != server {
            self.current = server.to_owned();
        }
    }
}

/// The saved list: what `--server` was, and the servers learned from it.
#[derive(Debug, PartialEq, Eq)]
struct Saved {
    server_url: String,
    addresses: Vec<String>,
}

impl Saved {
    fn to_json(&self) -> String {
        serde_json::json!({"serverURL": self.server_url, "serverAddresses": self.addresses})
            .to_string()
    }

    fn from_json(text: &str) -> Option<Saved> {
        let value: serde_json::Value = serde_json::from_str(text).ok()?;
        Some(Saved {
            server_url: value["serverURL"].as_str()?.to_owned(),
            addresses: value["serverAddresses"]
                .as_array()?
                .iter()
                .filter_map(|a| a.as_str().map(str::to_owned))
                .collect(),
        })
    }
}

/// What the proxy's connections and the refresher share.
struct State {
    servers: Servers,
    /// Per server with open connections: dropping its sender closes them.
    closers: HashMap<String, watch::Sender<()>>,
}

struct Shared {
    state: Mutex<State>,
    server_url: String,
    state_file: PathBuf,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Dials the servers in order; the first that answers, and the receiver that says when its
    /// connections must close.
    async fn dial(&self) -> Option<(String, TcpStream, watch::Receiver<()>)> {
        let order = self.state().servers.order();
        for server in &order {
            match tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(server.as_str())).await {
                Ok(Ok(stream)) => {
                    let mut state = self.state();
                    if state.servers.current() != server {
                        tracing::info!(%server, "the agent load balancer switched server");
                    }
                    state.servers.connected(server);
                    let closer = state
                        .closers
                        .entry(server.clone())
                        .or_insert_with(|| watch::channel(()).0)
                        .subscribe();
                    return Some((server.clone(), stream, closer));
                }
                Ok(Err(error)) => {
                    tracing::debug!(%server, %error, "the agent load balancer cannot dial a server");
                }
                Err(_) => {
                    tracing::debug!(%server, "the agent load balancer timed out dialling a server");
                }
            }
        }
        tracing::warn!(servers = ?order, "the agent load balancer reached no API server");
        None
    }

    /// Saves the list, unless it is the default alone.
    fn save(&self, learned: &[String]) {
        let saved = Saved {
            server_url: self.server_url.clone(),
            addresses: learned.to_vec(),
        };
        if let Err(error) =
            crate::credentials::write_file(&self.state_file, &saved.to_json(), 0o600)
        {
            tracing::warn!(file = %self.state_file.display(), %error, "cannot save the API servers");
        }
    }
}

/// Aborts the accept loop when the last handle of the load balancer goes.
struct Accepting(tokio::task::AbortHandle);

impl Drop for Accepting {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The running load balancer; clones share it.
#[derive(Clone)]
pub struct LoadBalancer {
    shared: Arc<Shared>,
    local: SocketAddr,
    _accepting: Arc<Accepting>,
}

impl std::fmt::Debug for LoadBalancer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadBalancer")
            .field("local", &self.local)
            .field("servers", &self.shared.state().servers)
            .finish()
    }
}

impl LoadBalancer {
    /// Starts balancing over `server_url`'s server and those saved in `state_file` for the
    /// same URL, listening on `127.0.0.1:port` (0: a free port).
    pub async fn start(
        state_file: &Path,
        server_url: &str,
        port: u16,
    ) -> Result<LoadBalancer, LoadBalancerError> {
        let default = server_address(server_url)?;
        let mut servers = Servers::new(default);
        if let Some(saved) = std::fs::read_to_string(state_file)
            .ok()
            .and_then(|text| Saved::from_json(&text))
            .filter(|saved| saved.server_url == server_url)
        {
            servers.update(shuffled(saved.addresses));
        }
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .map_err(|source| LoadBalancerError::Listen { port, source })?;
        let local = listener
            .local_addr()
            .map_err(|source| LoadBalancerError::Listen { port, source })?;
        tracing::info!(%local, servers = ?servers.order(), "agent load balancer started");
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                servers,
                closers: HashMap::new(),
            }),
            server_url: server_url.to_owned(),
            state_file: state_file.to_owned(),
        });
        let task = tokio::spawn(accept(listener, shared.clone()));
        Ok(LoadBalancer {
            shared,
            local,
            _accepting: Arc::new(Accepting(task.abort_handle())),
        })
    }

    /// The URL clients use: `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://{}", self.local)
    }

    /// The local address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The servers as they stand.
    pub fn servers(&self) -> Servers {
        self.shared.state().servers.clone()
    }

    /// Balances over `learned` from now on (in a random order of this agent's); saves the list
    /// and closes the connections to servers that left it when it changed.
    pub fn update(&self, learned: Vec<String>) {
        let (removed, now) = {
            let mut state = self.shared.state();
            let Some(removed) = state.servers.update(shuffled(learned)) else {
                return;
            };
            for server in &removed {
                // Dropping the sender ends its connections.
                state.closers.remove(server);
            }
            (removed, state.servers.learned().to_vec())
        };
        tracing::info!(servers = ?now, ?removed, "the agent load balancer's API servers changed");
        self.shared.save(&now);
    }

    /// Keeps the list current from the `default/kubernetes` Endpoints, read through `client`
    /// every [`REFRESH`]; runs until dropped.
    pub async fn follow(self, client: kube::Client) {
        let api: kube::Api<Endpoints> = kube::Api::namespaced(client, "default");
        loop {
            match api.get_opt("kubernetes").await {
                Ok(Some(endpoints)) => self.update(endpoint_addresses(&endpoints)),
                Ok(None) => tracing::debug!("no default/kubernetes Endpoints yet"),
                Err(error) => {
                    tracing::debug!(%error, "cannot read the default/kubernetes Endpoints");
                }
            }
            tokio::time::sleep(REFRESH).await;
        }
    }
}

fn shuffled(mut servers: Vec<String>) -> Vec<String> {
    servers.shuffle(&mut rand::rng());
    servers
}

/// Accepts local connections and proxies each to a server.
async fn accept(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let (client, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "the agent load balancer cannot accept");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let Some((server, upstream, mut closer)) = shared.dial().await else {
                return;
            };
            drop(shared);
            let (mut client, mut upstream) = (client, upstream);
            tokio::select! {
                result = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {
                    if let Err(error) = result {
                        tracing::debug!(%server, %error, "an agent load balancer connection ended");
                    }
                }
                // The server left the list (its sender was dropped).
                _ = closer.changed() => {
                    tracing::debug!(%server, "closing a connection to a server no longer listed");
                }
            }
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{EndpointAddress, EndpointPort, EndpointSubset};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    fn list(servers: &[&str]) -> Vec<String> {
        servers.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn server_addresses_come_from_https_urls() {
        assert_eq!(
            server_address("https://10.0.0.1:6443").unwrap(),
            "10.0.0.1:6443"
        );
        assert_eq!(
            server_address("https://cp.example").unwrap(),
            "cp.example:443"
        );
        assert_eq!(
            server_address("https://cp.example:6443/").unwrap(),
            "cp.example:6443"
        );
        assert_eq!(
            server_address("https://[fd00::1]:6443").unwrap(),
            "[fd00::1]:6443"
        );
        assert_eq!(
            server_address("https://[fd00::1]").unwrap(),
            "[fd00::1]:443"
        );
        for bad in [
            "http://10.0.0.1:6443",
            "10.0.0.1:6443",
            "https://",
            "https://:6443",
            "https://host:port",
            "https://host:0",
            "https://[fd00::1",
            "https://user@host:6443",
        ] {
            assert!(server_address(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn endpoints_give_every_address_at_the_https_port() {
        let endpoints = Endpoints {
            subsets: Some(vec![
                EndpointSubset {
                    addresses: Some(vec![
                        EndpointAddress {
                            ip: "10.0.0.1".into(),
                            ..Default::default()
                        },
                        EndpointAddress {
                            ip: "fd00::2".into(),
                            ..Default::default()
                        },
                    ]),
                    ports: Some(vec![
                        EndpointPort {
                            name: Some("metrics".into()),
                            port: 9000,
                            ..Default::default()
                        },
                        EndpointPort {
                            name: Some("https".into()),
                            port: 6443,
                            ..Default::default()
                        },
                    ]),
                    ..Default::default()
                },
                // No port named https: the first one. Repeated addresses once.
                EndpointSubset {
                    addresses: Some(vec![
                        EndpointAddress {
                            ip: "10.0.0.3".into(),
                            ..Default::default()
                        },
                        EndpointAddress {
                            ip: "10.0.0.3".into(),
                            ..Default::default()
                        },
                    ]),
                    ports: Some(vec![EndpointPort {
                        port: 7443,
                        ..Default::default()
                    }]),
                    ..Default::default()
                },
                // No port at all: nothing to dial.
                EndpointSubset {
                    addresses: Some(vec![EndpointAddress {
                        ip: "10.0.0.4".into(),
                        ..Default::default()
                    }]),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        assert_eq!(
            endpoint_addresses(&endpoints),
            ["10.0.0.1:6443", "[fd00::2]:6443", "10.0.0.3:7443"]
        );
        assert!(endpoint_addresses(&Endpoints::default()).is_empty());
    }

    #[test]
    fn the_default_server_is_the_last_resort_unless_learned() {
        let mut servers = Servers::new("a:1".into());
        assert_eq!(servers.order(), ["a:1"]);
        // Learned servers without the default: it goes last, and a learned one is current.
        assert_eq!(servers.update(list(&["b:1", "c:1"])), Some(vec![]));
        assert_eq!(servers.current(), "b:1");
        assert_eq!(servers.order(), ["b:1", "c:1", "a:1"]);
        // Learned with the default: it takes its place among them.
        let mut servers = Servers::new("a:1".into());
        assert_eq!(servers.update(list(&["b:1", "a:1"])), Some(vec![]));
        assert_eq!(
            servers.current(),
            "a:1",
            "the current server stays while learned"
        );
        assert_eq!(servers.order(), ["a:1", "b:1"]);
    }

    #[test]
    fn connections_fail_over_around_the_list_and_stick() {
        let mut servers = Servers::new("a:1".into());
        servers.update(list(&["a:1", "b:1", "c:1"]));
        assert_eq!(servers.order(), ["a:1", "b:1", "c:1"]);
        // a failed, b answered: b is tried first from now on, a last.
        servers.connected("b:1");
        assert_eq!(servers.order(), ["b:1", "c:1", "a:1"]);
        servers.connected("a:1");
        assert_eq!(servers.order(), ["a:1", "b:1", "c:1"]);
        // Falling back to an unlisted default, and back.
        let mut servers = Servers::new("vip:1".into());
        servers.update(list(&["b:1", "c:1"]));
        servers.connected("vip:1");
        assert_eq!(servers.order(), ["vip:1", "b:1", "c:1"]);
    }

    #[test]
    fn updates_change_only_what_changed() {
        let mut servers = Servers::new("a:1".into());
        servers.update(list(&["a:1", "b:1"]));
        servers.connected("b:1");
        // The same servers in another order, or none, change nothing.
        assert_eq!(servers.update(list(&["b:1", "a:1", "b:1"])), None);
        assert_eq!(servers.update(vec![]), None);
        assert_eq!(servers.learned(), ["a:1", "b:1"]);
        assert_eq!(servers.current(), "b:1");
        // b leaves: its connections close, the first learned becomes current.
        assert_eq!(servers.update(list(&["c:1", "a:1"])), Some(list(&["b:1"])));
        assert_eq!(servers.current(), "c:1");
        assert_eq!(servers.order(), ["c:1", "a:1"]);
        // The default leaves the list: still the last resort, but its connections close.
        assert_eq!(servers.update(list(&["c:1"])), Some(list(&["a:1"])));
        assert_eq!(servers.order(), ["c:1", "a:1"]);
        assert_eq!(servers.default_server(), "a:1");
    }

    #[test]
    fn the_saved_list_reads_back() {
        let saved = Saved {
            server_url: "https://10.0.0.1:6443".into(),
            addresses: list(&["10.0.0.1:6443", "10.0.0.2:6443"]),
        };
        assert_eq!(Saved::from_json(&saved.to_json()), Some(saved));
        assert_eq!(Saved::from_json("{}"), None);
        assert_eq!(Saved::from_json("not json"), None);
    }

    /// A server that answers each connection with its name, then echoes.
    async fn named_server(name: &'static str) -> (String, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let task = tokio::spawn(async move {
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    stream.write_all(name.as_bytes()).await.unwrap();
                    let mut buf = [0u8; 64];
                    while let Ok(n) = stream.read(&mut buf).await {
                        if n == 0 || stream.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        (address, task)
    }

    /// Connects through the load balancer; the name of the server reached, and the stream.
    async fn through(lb: &LoadBalancer) -> (String, TcpStream) {
        let mut stream = TcpStream::connect(lb.local_addr()).await.unwrap();
        let mut name = [0u8; 2];
        stream.read_exact(&mut name).await.unwrap();
        (String::from_utf8_lossy(&name).into_owned(), stream)
    }

    /// A free local port nothing listens on.
    async fn dead_address() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap().to_string()
    }

    #[tokio::test]
    async fn the_proxy_fails_over_closes_removed_servers_and_saves_the_list() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("agent/etc/lb.json");
        let (s1, task1) = named_server("s1").await;
        let (s2, _task2) = named_server("s2").await;
        let url = format!("https://{s1}");
        let lb = LoadBalancer::start(&file, &url, 0).await.unwrap();
        assert!(lb.url().starts_with("https://127.0.0.1:"));
        assert_eq!(through(&lb).await.0, "s1");
        assert!(!file.exists(), "nothing learned, nothing saved");

        // Both learned; data passes both ways.
        lb.update(vec![s1.clone(), s2.clone()]);
        let (first, mut stream) = through(&lb).await;
        stream.write_all(b"ping").await.unwrap();
        let mut echo = [0u8; 4];
        stream.read_exact(&mut echo).await.unwrap();
        assert_eq!(&echo, b"ping");
        let saved = Saved::from_json(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(saved.server_url, url);
        let mut addresses = saved.addresses;
        addresses.sort();
        let mut expected = vec![s1.clone(), s2.clone()];
        expected.sort();
        assert_eq!(addresses, expected);

        // The server reached stops listening: the next connection goes to the other.
        let other = if first == "s1" { "s2" } else { "s1" };
        if first == "s1" {
            task1.abort();
            let _ = task1.await;
        } else {
            lb.update(vec![s1.clone()]);
            // s2 left the list: its open connection is closed.
            let mut rest = Vec::new();
            let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest));
            assert!(
                read.await.is_ok(),
                "the connection to a removed server closes"
            );
        }
        assert_eq!(through(&lb).await.0, other);

        // A restarted load balancer for the same URL starts from the saved list: with the
        // first server dead, it reaches the second.
        drop(lb);
        let (dead, (s3, _task3)) = (dead_address().await, named_server("s3").await);
        let url = format!("https://{dead}");
        let lb = LoadBalancer::start(&file, &url, 0).await.unwrap();
        assert!(lb.servers().learned().is_empty(), "saved for another URL");
        lb.update(vec![dead.clone(), s3.clone()]);
        drop(lb);
        let lb = LoadBalancer::start(&file, &url, 0).await.unwrap();
        assert_eq!(through(&lb).await.0, "s3");
        assert_eq!(lb.servers().current(), s3);
    }

    #[tokio::test]
    async fn all_servers_down_closes_the_client_connection() {
        let dir = tempfile::tempdir().unwrap();
        let dead = dead_address().await;
        let lb = LoadBalancer::start(&dir.path().join("lb.json"), &format!("https://{dead}"), 0)
            .await
            .unwrap();
        let mut stream = TcpStream::connect(lb.local_addr()).await.unwrap();
        let mut rest = Vec::new();
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest))
            .await
            .expect("closed promptly")
            .unwrap_or(0);
        assert_eq!(n, 0);
    }
}

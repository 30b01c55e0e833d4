//! Cluster DNS: the names of Services and pods answered as CoreDNS's `kubernetes` plugin
//! answers them (the Kubernetes DNS specification), every other name forwarded to the host's
//! resolvers, over UDP and TCP on one port.
//!
//! - [`records`]: Services, EndpointSlices and Namespaces reduced to what DNS needs, and the
//!   immutable [`Snapshot`] of them that every query reads.
//! - [`answer`]: names to answers without I/O ([`Zone::answer`]), the whole of the
//!   specification: A/AAAA, headless Services, endpoint host names, SRV, ExternalName CNAMEs,
//!   PTR, pod names, NXDOMAIN versus NODATA with the zone's SOA.
//! - [`handler`]: hickory's request handler: the snapshot's answers, the rest forwarded through
//!   hickory's resolver (with its cache); SERVFAIL when the upstream fails.
//! - [`watch`]: kube-rs watchers (through the API, as any client) that rebuild the snapshot
//!   and swap it in atomically.
//! - [`register`]: the `kube-system/kube-dns` Service and this server's Lease, from which the
//!   API server writes the Service's endpoints.
//!
//! [`start`] composes them; `capstan server` runs it unless `--disable-dns`.

pub mod answer;
pub mod handler;
mod metrics;
pub mod records;
pub mod register;
pub mod watch;

#[cfg(test)]
mod tests;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use hickory_proto::rr::Name;
use hickory_server::Server;
use tokio::net::{TcpListener, UdpSocket};
use tokio::task::JoinHandle;

pub use answer::{DEFAULT_TTL, Zone};
pub use handler::{Forwarder, Handler};
pub use records::Snapshot;

/// How long a TCP connection may stay idle between queries.
const TCP_IDLE: Duration = Duration::from_secs(10);

/// Where forwarded queries go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Upstream {
    /// The name servers of a resolv.conf file (CoreDNS's `forward . /etc/resolv.conf`), read
    /// once at start.
    ResolvConf(PathBuf),
    /// These servers.
    Servers(Vec<SocketAddr>),
}

impl Default for Upstream {
    fn default() -> Self {
        Upstream::ResolvConf(PathBuf::from("/etc/resolv.conf"))
    }
}

/// The DNS server's settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// The cluster domain (`cluster.local`).
    pub cluster_domain: String,
    /// The address to listen on, UDP and TCP (port 0: a free port, the same for both).
    pub listen: SocketAddr,
    /// The cluster DNS IP: the `kube-dns` Service's cluster IP, created with it, and the
    /// zone's name server address.
    pub cluster_dns: Option<IpAddr>,
    /// Where other names are forwarded.
    pub upstream: Upstream,
    /// The TTL of the cluster's records.
    pub ttl: u32,
    /// Also answer on the loopback address (127.0.0.1, or ::1 for an IPv6 `listen`) at the
    /// same port, for the host's own processes, when that address and port are free (a local
    /// resolver already there is left alone, with a warning).
    pub loopback: bool,
}

impl Config {
    /// Defaults for the cluster DNS IP `cluster_dns`, listening on `listen`.
    pub fn new(listen: SocketAddr, cluster_dns: Option<IpAddr>) -> Config {
        Config {
            cluster_domain: "cluster.local".to_owned(),
            listen,
            cluster_dns,
            upstream: Upstream::default(),
            ttl: DEFAULT_TTL,
            loopback: true,
        }
    }
}

/// Errors at start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration is invalid.
    #[error("invalid DNS settings: {0}")]
    Config(String),
    /// A socket could not be bound.
    #[error("cannot listen for DNS on {address}: {source}")]
    Listen {
        /// The address.
        address: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The upstream resolvers could not be set up.
    #[error("cannot set up the upstream resolvers: {0}")]
    Upstream(String),
}

/// A running DNS server.
pub struct RunningDns {
    address: SocketAddr,
    snapshot: Arc<ArcSwap<Snapshot>>,
    client: Option<kube::Client>,
    _watchers: Option<watch::Watchers>,
    tasks: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for RunningDns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningDns")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl RunningDns {
    /// The address it answers on (UDP and TCP).
    pub fn local_addr(&self) -> SocketAddr {
        self.address
    }

    /// The records it answers from now.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.load_full()
    }

    /// Replaces the records answered from (tests and benchmarks without a cluster; with a
    /// client, the watchers replace them again at the next change).
    pub fn replace_snapshot(&self, snapshot: Snapshot) {
        self.snapshot.store(Arc::new(snapshot));
    }

    /// Stops answering and gives up this server's Lease.
    pub async fn stop(self) {
        for task in &self.tasks {
            task.abort();
        }
        if let Some(client) = &self.client
            && let Err(error) = register::release_lease(client, self.address).await
        {
            tracing::warn!(%error, "cannot release the DNS server's Lease");
        }
    }
}

impl Drop for RunningDns {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// The name servers a resolv.conf file lists (port 53).
pub fn resolv_conf_servers(path: &std::path::Path) -> Result<Vec<SocketAddr>, String> {
    let data = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let (config, _) = hickory_resolver::system_conf::parse_resolv_conf(data)
        .map_err(|e| format!("cannot parse {}: {e}", path.display()))?;
    let mut servers: Vec<SocketAddr> = config
        .name_servers()
        .iter()
        .map(|ns| SocketAddr::new(ns.ip, 53))
        .collect();
    servers.dedup();
    Ok(servers)
}

/// Binds UDP and TCP on the same address; port 0 picks a port free for both.
async fn bind(address: SocketAddr) -> Result<(UdpSocket, TcpListener), StartError> {
    let error = |source| StartError::Listen { address, source };
    let mut last = None;
    for _ in 0..if address.port() == 0 { 20 } else { 1 } {
        let udp = UdpSocket::bind(address).await.map_err(error)?;
        let bound = udp.local_addr().map_err(error)?;
        match TcpListener::bind(bound).await {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(e) => last = Some(e),
        }
    }
    Err(error(
        last.unwrap_or_else(|| std::io::Error::other("no free port")),
    ))
}

/// Starts the server: binds `config.listen`, and with a `client`, watches the cluster,
/// ensures the `kube-dns` Service and holds this server's Lease. Without a client it answers
/// from an empty, unsynced snapshot (tests).
pub async fn start(config: Config, client: Option<kube::Client>) -> Result<RunningDns, StartError> {
    let nameservers = match config.cluster_dns {
        Some(ip) => {
            let zone = Zone::new(&config.cluster_domain, config.ttl, Vec::new())
                .map_err(StartError::Config)?;
            let name: Name = zone
                .kube_dns_name()
                .ok_or_else(|| StartError::Config("cluster domain too long".to_owned()))?;
            vec![(name, ip)]
        }
        None => Vec::new(),
    };
    let zone = Arc::new(
        Zone::new(&config.cluster_domain, config.ttl, nameservers).map_err(StartError::Config)?,
    );
    let servers = match &config.upstream {
        Upstream::Servers(servers) => servers.clone(),
        Upstream::ResolvConf(path) => resolv_conf_servers(path).unwrap_or_else(|error| {
            tracing::warn!(%error, "no upstream resolvers: names outside the cluster get SERVFAIL");
            Vec::new()
        }),
    };
    let forwarder = Forwarder::new(&servers).map_err(|e| StartError::Upstream(e.to_string()))?;
    let snapshot = Arc::new(ArcSwap::from_pointee(Snapshot::default()));
    let handler = Handler::new(zone, snapshot.clone(), forwarder).with_port(config.listen.port());
    let loopback = match config.listen.ip() {
        IpAddr::V4(_) => IpAddr::from(std::net::Ipv4Addr::LOCALHOST),
        IpAddr::V6(_) => IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
    };
    let also_loopback = config.loopback && !config.listen.ip().is_loopback();
    // With port 0 the port must be free on loopback too: another process may hold it there.
    let attempts = if also_loopback && config.listen.port() == 0 {
        20
    } else {
        1
    };
    let mut bound = None;
    for attempt in 1..=attempts {
        let (udp, tcp) = bind(config.listen).await?;
        let address = udp.local_addr().map_err(|source| StartError::Listen {
            address: config.listen,
            source,
        })?;
        let on_loopback = if also_loopback {
            match bind(SocketAddr::new(loopback, address.port())).await {
                Ok(sockets) => Some(sockets),
                Err(error) if attempt < attempts => {
                    tracing::debug!(%error, "port taken on loopback; another");
                    continue;
                }
                Err(error) => {
                    tracing::warn!(%error, "DNS server not answering on loopback");
                    None
                }
            }
        } else {
            None
        };
        bound = Some((udp, tcp, address, on_loopback));
        break;
    }
    let Some((udp, tcp, address, on_loopback)) = bound else {
        return Err(StartError::Listen {
            address: config.listen,
            source: std::io::Error::other("no port free on both addresses"),
        });
    };
    let mut server = Server::new(handler);
    server.register_socket(udp);
    server.register_listener(tcp, TCP_IDLE, 64);
    if let Some((udp, tcp)) = on_loopback {
        server.register_socket(udp);
        server.register_listener(tcp, TCP_IDLE, 64);
        tracing::info!(address = %SocketAddr::new(loopback, address.port()), "DNS server also answering on loopback");
    }
    let mut tasks = vec![tokio::spawn(async move {
        if let Err(error) = server.block_until_done().await {
            tracing::error!(%error, "the DNS server stopped");
        }
    })];
    let watchers = client.as_ref().map(|client| {
        tasks.push(tokio::spawn(register::run(
            client.clone(),
            config.cluster_dns,
            address,
        )));
        watch::start(client.clone(), snapshot.clone())
    });
    tracing::info!(
        %address, domain = %config.cluster_domain, upstream = ?servers,
        "DNS server listening (UDP and TCP)"
    );
    Ok(RunningDns {
        address,
        snapshot,
        client,
        _watchers: watchers,
        tasks,
    })
}

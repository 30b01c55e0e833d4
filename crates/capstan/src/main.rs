//! `capstan`: Kubernetes in one binary.
//!
//! This crate only composes components: it parses flags, installs the tracing subscriber and
//! starts what a subcommand asks for. `capstan server` runs the control plane of a cluster on
//! this machine; `capstan agent` joins a machine to a cluster as a node.
//!
//! `capstan server` brings up the datastore (embedded SQLite, or etcd for several servers) and
//! its compaction, the API server, the scheduler, the controllers, the cluster DNS server and
//! the node agent, each component an API client of the server like any other. `capstan image` builds and imports
//! images without a registry.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use capstan_client::informer::SharedInformers;
use capstan_store::Endpoint;
use clap::{Args, Parser, Subcommand};

mod certificate;
mod endpoints;
mod server_join;
mod token;

/// mimalloc instead of the system allocator: under request load glibc's malloc spent about a
/// quarter of the API server's CPU consolidating and unlinking free chunks (see BENCHMARKS.md).
/// Built with `no_thp`: where transparent huge pages are always on, mimalloc's eagerly committed
/// arenas were backed by huge pages and the idle server's RSS doubled (41 MiB instead of 25).
/// Wrapped by the heap profiler, which samples allocations once `--profiling` starts it
/// (`/debug/pprof/heap`).
#[global_allocator]
static ALLOCATOR: capstan_pprof::Sampled<mimalloc::MiMalloc> =
    capstan_pprof::Sampled::new(mimalloc::MiMalloc);

#[derive(Debug, Parser)]
#[command(name = "capstan", version, about = "Kubernetes in one binary")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the control plane of a cluster on this machine.
    Server(Box<ServerArgs>),
    /// Join this machine to a cluster as a node.
    Agent(Box<AgentArgs>),
    /// Run a scheduler on its own against a cluster (as kube-scheduler), e.g. a second
    /// profile set beside the server's.
    Scheduler(Box<SchedulerArgs>),
    /// Run the controllers on their own against a cluster (as kube-controller-manager).
    ControllerManager(Box<ControllerManagerArgs>),
    /// Register simulated nodes (like kwok) that run pods bound to them without containers,
    /// to measure the scheduler and controllers at scale.
    Sim(SimArgs),
    /// Build and import container images without a registry.
    #[command(subcommand)]
    Image(ImageCommand),
    /// Rotate the join token, or create bootstrap tokens.
    #[command(subcommand)]
    Token(token::TokenCommand),
    /// Check or rotate the server's certificates.
    #[command(subcommand)]
    Certificate(certificate::CertificateCommand),
    /// Print the Kubernetes API level this binary serves.
    Version,
}

#[derive(Debug, Args)]
struct ServerArgs {
    /// Directory that holds the server's state (database, certificates, kubeconfig).
    #[arg(long, env = "CAPSTAN_DATA_DIR", default_value_os_t = default_data_dir())]
    data_dir: PathBuf,
    /// Datastore: empty for SQLite under the data dir, `sqlite://PATH`, or
    /// `http://HOST:2379[,http://HOST:2379...]` for etcd.
    #[arg(long, env = "CAPSTAN_DATASTORE_ENDPOINT", default_value = "")]
    datastore_endpoint: String,
    /// How often history older than the previous interval is discarded from the datastore
    /// (Go duration syntax, as kube-apiserver's flag of the same name).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    etcd_compaction_interval: Duration,
    /// The address the API server listens on.
    #[arg(long, default_value = "0.0.0.0")]
    bind_address: IpAddr,
    /// The address pods and other machines reach the API server at, listed as the
    /// `kubernetes` Service's endpoint (default: the bind address when it is a specific
    /// non-loopback one, else the default route's source address).
    #[arg(long)]
    advertise_address: Option<IpAddr>,
    /// The API server's HTTPS port.
    #[arg(long, default_value_t = 6443)]
    https_listen_port: u16,
    /// Additional host names or IP addresses for the serving certificate (repeatable, or
    /// comma-separated).
    #[arg(long, value_delimiter = ',')]
    tls_san: Vec<String>,
    /// The lowest TLS version served: VersionTLS12 (default) or VersionTLS13 (TLS 1.0 and 1.1
    /// are never served).
    #[arg(long)]
    tls_min_version: Option<String>,
    /// The TLS 1.2 cipher suites served, by upstream's (Go's) names, comma-separated (default:
    /// every AEAD suite with ECDHE; TLS 1.3's are not configurable).
    #[arg(long, value_delimiter = ',')]
    tls_cipher_suites: Vec<String>,
    /// Encrypt resources at rest as this `EncryptionConfiguration` file says (upstream's
    /// format: aescbc, aesgcm, secretbox, identity); the file is re-read when it changes.
    #[arg(long)]
    encryption_provider_config: Option<PathBuf>,
    /// Encrypt Secrets at rest with a generated key (`<data-dir>/cred/encryption-config.json`,
    /// k3s's switch), unless --encryption-provider-config is given.
    #[arg(long)]
    secrets_encryption: bool,
    /// The audit policy (upstream's `audit.k8s.io/v1` Policy); with --audit-log-path or
    /// --audit-webhook-config-file, requests are audited as it says.
    #[arg(long)]
    audit_policy_file: Option<PathBuf>,
    /// Where audit events are written, one JSON line each (`-`: standard output).
    #[arg(long)]
    audit_log_path: Option<PathBuf>,
    /// Rotate the audit log once it passes this many megabytes (0: never).
    #[arg(long, default_value_t = 0)]
    audit_log_maxsize: u64,
    /// Rotated audit logs kept (0: all).
    #[arg(long, default_value_t = 0)]
    audit_log_maxbackup: usize,
    /// Days rotated audit logs are kept (0: forever).
    #[arg(long, default_value_t = 0)]
    audit_log_maxage: u64,
    #[command(flatten)]
    webhooks: WebhookFlags,
    /// Where to write the admin kubeconfig (default: `<data-dir>/kubeconfig.yaml`).
    #[arg(long)]
    write_kubeconfig: Option<PathBuf>,
    /// Run no node agent in this process (k3s's flag): a control plane without a node.
    #[arg(long)]
    disable_agent: bool,
    #[command(flatten)]
    agent: AgentFlags,
    /// The admission configuration file (kube-apiserver's flag of the same name): an
    /// `AdmissionConfiguration` (`apiserver.config.k8s.io/v1`) configuring the PodSecurity
    /// plugin's defaults and exemptions (`PodSecurityConfiguration`).
    #[arg(long)]
    admission_control_config_file: Option<PathBuf>,
    /// Static bearer tokens, in kube-apiserver's CSV format `token,user,uid,"group1,group2"`.
    #[arg(long)]
    token_auth_file: Option<PathBuf>,
    #[command(flatten)]
    authn: AuthnFlags,
    /// The join secret agents present (`capstan agent --token`); default: the one saved in
    /// `<data-dir>/token` by an earlier start, or a new one. The full token is written there.
    /// With --server: the running server's token (`K10<ca-hash>::server:<secret>`).
    #[arg(long, env = "CAPSTAN_TOKEN")]
    token: Option<String>,
    /// Join the cluster of the server at this URL (k3s's `--server`), e.g.
    /// https://10.0.0.1:6443: fetch the secrets servers share (CAs, service account key,
    /// encryption key) with --token and start with them. Needs that server's
    /// --datastore-endpoint (etcd).
    #[arg(long, env = "CAPSTAN_URL")]
    server: Option<String>,
    /// The kubeconfig's file mode, in octal.
    #[arg(long, default_value = "0600", value_parser = parse_mode)]
    write_kubeconfig_mode: u32,
    /// The range service cluster IPs are allocated from; its first address is the
    /// `kubernetes` service's.
    #[arg(long, default_value = "10.43.0.0/16", value_parser = parse_cidr)]
    service_cidr: String,
    /// How often the allocation repair loop looks for leaked or missing cluster IPs and node
    /// ports (a Go duration). Upstream's is fixed; this is for tests.
    #[arg(long, default_value = "30s", value_parser = parse_duration, hide = true)]
    allocation_repair_interval: Duration,
    /// How old an IPAddress without its Service must be before the repair loop releases it
    /// (upstream's fixed 60 s; a Service being created holds its address before it is stored).
    #[arg(long, default_value = "60s", value_parser = parse_duration, hide = true)]
    allocation_leak_grace: Duration,
    /// Run no scheduler in this process.
    #[arg(long)]
    disable_scheduler: bool,
    /// The scheduler's configuration (a `KubeSchedulerConfiguration` file, as kube-scheduler's
    /// `--config`); upstream's default profile when absent.
    #[arg(long)]
    scheduler_config: Option<PathBuf>,
    /// Run no controllers in this process (k3s's flag), e.g. to run `capstan
    /// controller-manager` on its own.
    #[arg(long)]
    disable_controller_manager: bool,
    #[command(flatten)]
    controllers: ControllerFlags,
    /// Run no cluster DNS server in this process.
    #[arg(long)]
    disable_dns: bool,
    /// Do not create the default `local-path` StorageClass when the cluster is made.
    #[arg(long)]
    disable_default_storageclass: bool,
    /// Serve no built-in Metrics API (`metrics.k8s.io`), so that an extension API server
    /// (metrics-server) can be registered for it through API aggregation.
    #[arg(long)]
    disable_metrics_server: bool,
    /// How often the built-in Metrics API scrapes each node's resource metrics (a Go
    /// duration, as metrics-server's flag).
    #[arg(long, default_value = "15s", value_parser = parse_metric_resolution)]
    metric_resolution: Duration,
    /// Do not serve the web dashboard at `/dashboard/`.
    #[arg(long)]
    disable_dashboard: bool,
    /// Serve the process's CPU and heap profiles at `/debug/pprof/` to users authorized for
    /// that non-resource path (upstream's `--profiling`; `--profiling=false` turns it off,
    /// and with it the heap sampling).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    profiling: bool,
    /// The port the DNS server answers on at the advertise address, UDP and TCP (0: a free
    /// port); the kube-dns Service's endpoints name it.
    #[arg(long, default_value_t = 53)]
    dns_port: u16,
    /// Where the DNS server forwards names outside the cluster, `IP` or `IP:PORT`
    /// (repeatable, comma-separated; default: the name servers of /etc/resolv.conf).
    #[arg(long, value_delimiter = ',', value_parser = parse_upstream)]
    dns_upstream: Vec<std::net::SocketAddr>,
}

/// The controllers' settings, shared by `capstan server` and `capstan controller-manager`.
#[derive(Debug, Args)]
struct ControllerFlags {
    /// The range pod IPs come from: each node gets a /24 of it as its `podCIDR`.
    #[arg(long, default_value = "10.42.0.0/16", value_parser = parse_cidr)]
    cluster_cidr: String,
    /// Controllers not to run, by their upstream names (comma-separated, repeatable), e.g.
    /// `--disable-controllers=replicaset,deployment`.
    #[arg(long, value_delimiter = ',')]
    disable_controllers: Vec<String>,
    /// How long a node may stay silent (no status heartbeat, no Lease renewal) before it is
    /// marked unreachable (Go duration, kube-controller-manager's flag).
    #[arg(long, default_value = "50s", value_parser = parse_duration)]
    node_monitor_grace_period: Duration,
    /// How many terminated pods are kept before the oldest are deleted.
    #[arg(long, default_value_t = 12500)]
    terminated_pod_gc_threshold: usize,
    /// The CA bundle published to every namespace as the `kube-root-ca.crt` ConfigMap
    /// (default: the certificate authority of the controllers' kubeconfig).
    #[arg(long)]
    root_ca_file: Option<PathBuf>,
    /// The CA certificate the CSR signer issues cluster-scoped certificates with (PEM; in
    /// `capstan server` the default is the cluster CA, `<data-dir>/tls/ca.crt`).
    #[arg(long)]
    cluster_signing_cert_file: Option<PathBuf>,
    /// The CA key matching `--cluster-signing-cert-file` (PEM; in `capstan server` the default
    /// is `<data-dir>/tls/ca.key`).
    #[arg(long)]
    cluster_signing_key_file: Option<PathBuf>,
    /// The CA certificate of the `kubernetes.io/kubelet-serving` signer when it is not the
    /// cluster signing CA (PEM; in `capstan server` the default is the kubelet serving CA,
    /// `<data-dir>/tls/kubelet-serving-ca.crt`).
    #[arg(long)]
    cluster_signing_kubelet_serving_cert_file: Option<PathBuf>,
    /// The key matching `--cluster-signing-kubelet-serving-cert-file`.
    #[arg(long)]
    cluster_signing_kubelet_serving_key_file: Option<PathBuf>,
    /// The longest certificate the CSR signer issues (Go duration); a request's
    /// `spec.expirationSeconds` may ask for less.
    #[arg(long, default_value = "8760h0m0s", value_parser = parse_duration)]
    cluster_signing_duration: Duration,
    /// Run each controller as its own service account in kube-system (tokens from the
    /// TokenRequest API, upstream's `system:controller:*` roles); `false` runs them all as the
    /// controller manager's user, which `capstan server` then binds to cluster-admin.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    use_service_account_credentials: bool,
    /// How often each HorizontalPodAutoscaler is synced (Go duration).
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    horizontal_pod_autoscaler_sync_period: Duration,
    /// How far from 1 the ratio of a metric to its target must be before the autoscaler
    /// changes the replica count.
    #[arg(long, default_value_t = 0.1)]
    horizontal_pod_autoscaler_tolerance: f64,
    /// How long the autoscaler looks back for a higher recommendation before scaling down
    /// (autoscalers without a `behavior.scaleDown.stabilizationWindowSeconds`; Go duration).
    #[arg(long, default_value = "5m0s", value_parser = parse_duration)]
    horizontal_pod_autoscaler_downscale_stabilization: Duration,
    /// How long after a pod starts its CPU samples are used only once it is ready and a
    /// full metric window has passed since (Go duration).
    #[arg(long, default_value = "5m0s", value_parser = parse_duration)]
    horizontal_pod_autoscaler_cpu_initialization_period: Duration,
    /// How long after a pod starts a readiness change still means it has never been ready
    /// (Go duration).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    horizontal_pod_autoscaler_initial_readiness_delay: Duration,
}

impl ControllerFlags {
    fn config(&self) -> anyhow::Result<capstan_controllers::Config> {
        let config = capstan_controllers::Config {
            disabled: self.disable_controllers.iter().cloned().collect(),
            cluster_cidr: self.cluster_cidr.clone(),
            node_monitor_grace_period: self.node_monitor_grace_period,
            terminated_pod_gc_threshold: self.terminated_pod_gc_threshold,
            root_ca: None,
            signing_ca: None,
            kubelet_serving_ca: None,
            signing_duration: self.cluster_signing_duration,
            credentials: capstan_controllers::clientbuilder::Credentials::Shared,
            horizontal_pod_autoscaler: capstan_controllers::podautoscaler::Settings {
                sync_period: self.horizontal_pod_autoscaler_sync_period,
                tolerance: self.horizontal_pod_autoscaler_tolerance,
                downscale_stabilization: self.horizontal_pod_autoscaler_downscale_stabilization,
                cpu_initialization_period: self.horizontal_pod_autoscaler_cpu_initialization_period,
                initial_readiness_delay: self.horizontal_pod_autoscaler_initial_readiness_delay,
            },
        };
        config
            .validate()
            .map_err(|e| anyhow::anyhow!("invalid controller settings: {e}"))?;
        Ok(config)
    }

    /// The CSR signer's CA: the files given, else those in `default_dir` (the server's own
    /// `tls` directory), else none (the signer then does not run).
    fn signing_ca(
        &self,
        default_dir: Option<&std::path::Path>,
    ) -> anyhow::Result<Option<capstan_controllers::certificates::SigningCa>> {
        signing_ca_files(
            (
                &self.cluster_signing_cert_file,
                &self.cluster_signing_key_file,
            ),
            default_dir,
            "ca",
            "--cluster-signing-cert-file and --cluster-signing-key-file go together",
        )
    }

    /// The kubelet serving signer's own CA: the files given, else the kubelet serving CA in
    /// `default_dir`, else none (it signs with the cluster signing CA).
    fn kubelet_serving_ca(
        &self,
        default_dir: Option<&std::path::Path>,
    ) -> anyhow::Result<Option<capstan_controllers::certificates::SigningCa>> {
        signing_ca_files(
            (
                &self.cluster_signing_kubelet_serving_cert_file,
                &self.cluster_signing_kubelet_serving_key_file,
            ),
            default_dir,
            "kubelet-serving-ca",
            "--cluster-signing-kubelet-serving-cert-file and \
             --cluster-signing-kubelet-serving-key-file go together",
        )
    }
}

/// A signing CA from the `files` given (certificate, key), else `<default_dir>/<stem>.crt` and
/// `.key`, else none.
fn signing_ca_files(
    files: (&Option<PathBuf>, &Option<PathBuf>),
    default_dir: Option<&std::path::Path>,
    stem: &str,
    mismatch: &str,
) -> anyhow::Result<Option<capstan_controllers::certificates::SigningCa>> {
    let (cert, key) = match (files.0, files.1, default_dir) {
        (Some(cert), Some(key), _) => (cert.clone(), key.clone()),
        (None, None, Some(dir)) => (
            dir.join(format!("{stem}.crt")),
            dir.join(format!("{stem}.key")),
        ),
        (None, None, None) => return Ok(None),
        _ => anyhow::bail!("{mismatch}"),
    };
    let read = |path: &std::path::Path| {
        std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the signing CA file {}", path.display()))
    };
    Ok(Some(capstan_controllers::certificates::SigningCa {
        cert_pem: read(&cert)?,
        key_pem: read(&key)?,
    }))
}

/// External identities and anonymous requests, as kube-apiserver's flags of the same names.
#[derive(Debug, Args)]
struct AuthnFlags {
    /// An `AuthenticationConfiguration` file (`apiserver.config.k8s.io/v1beta1`): JWT issuers
    /// with claim mappings and CEL rules, and which paths anonymous requests reach; re-read
    /// when it changes. Excludes the `--oidc-*` flags.
    #[arg(long)]
    authentication_config: Option<PathBuf>,
    /// The URL of an OpenID Connect issuer whose ID tokens authenticate (HTTPS).
    #[arg(long)]
    oidc_issuer_url: Option<String>,
    /// The audience the issuer's tokens must name (with --oidc-issuer-url).
    #[arg(long)]
    oidc_client_id: Option<String>,
    /// The CA the issuer's HTTPS certificate is checked against (default: the host's roots).
    #[arg(long)]
    oidc_ca_file: Option<PathBuf>,
    /// The claim naming the user.
    #[arg(long, default_value = "sub")]
    oidc_username_claim: String,
    /// Prefixed to usernames (default: the issuer URL and `#` unless the claim is `email`;
    /// `-` for none).
    #[arg(long)]
    oidc_username_prefix: Option<String>,
    /// The claim listing the user's groups (a string or a list of strings).
    #[arg(long)]
    oidc_groups_claim: Option<String>,
    /// Prefixed to groups.
    #[arg(long)]
    oidc_groups_prefix: Option<String>,
    /// The signing algorithms accepted (comma-separated; default RS256).
    #[arg(long, value_delimiter = ',')]
    oidc_signing_algs: Vec<String>,
    /// A claim the ID token must carry with this value, `claim=value` (repeatable).
    #[arg(long, value_delimiter = ',')]
    oidc_required_claim: Vec<String>,
    /// Whether requests without credentials are served as `system:anonymous` (default: true);
    /// `--anonymous-auth=false` answers them 401, health checks included.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    anonymous_auth: Option<bool>,
}

impl AuthnFlags {
    fn options(&self) -> anyhow::Result<capstan_apiserver::AuthenticationOptions> {
        let mut required_claims = std::collections::BTreeMap::new();
        for pair in &self.oidc_required_claim {
            let Some((claim, value)) = pair.split_once('=') else {
                bail!("--oidc-required-claim {pair:?}: must be formatted as key=value");
            };
            required_claims.insert(claim.trim().to_owned(), value.trim().to_owned());
        }
        let mut oidc = capstan_apiserver::OidcFlags {
            issuer_url: self.oidc_issuer_url.clone().unwrap_or_default(),
            client_id: self.oidc_client_id.clone().unwrap_or_default(),
            ca_file: self.oidc_ca_file.clone(),
            username_prefix: self.oidc_username_prefix.clone().unwrap_or_default(),
            groups_claim: self.oidc_groups_claim.clone().unwrap_or_default(),
            groups_prefix: self.oidc_groups_prefix.clone().unwrap_or_default(),
            signing_algs: self.oidc_signing_algs.clone(),
            required_claims,
            ..Default::default()
        };
        // The claim's default counts as a given flag only beside the others.
        if oidc.any() || self.oidc_username_claim != "sub" {
            oidc.username_claim = self.oidc_username_claim.clone();
        }
        Ok(capstan_apiserver::AuthenticationOptions {
            oidc,
            config_file: self.authentication_config.clone(),
            anonymous_auth: self.anonymous_auth,
        })
    }
}

#[derive(Debug, Args)]
struct ControllerManagerArgs {
    /// The kubeconfig to reach the API server with (default: `$KUBECONFIG`, then
    /// `~/.kube/config`).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Take the `kube-system/kube-controller-manager` Lease before working, as
    /// kube-controller-manager does.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    leader_elect: bool,
    #[command(flatten)]
    controllers: ControllerFlags,
    #[command(flatten)]
    serving: endpoints::SecureServingFlags,
}

#[derive(Debug, Args)]
struct SchedulerArgs {
    /// The kubeconfig to reach the API server with (default: `$KUBECONFIG`, then
    /// `~/.kube/config`).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// A `KubeSchedulerConfiguration` file; upstream's default profile when absent.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Take the `kube-system/kube-scheduler` Lease before scheduling, as kube-scheduler does.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    leader_elect: bool,
    #[command(flatten)]
    serving: endpoints::SecureServingFlags,
}

#[derive(Debug, Args)]
struct SimArgs {
    /// The kubeconfig to reach the API server with (default: `$KUBECONFIG`, then
    /// `~/.kube/config`).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// How many nodes to simulate.
    #[arg(long, default_value_t = 10)]
    nodes: usize,
    /// Node `i` is called `<prefix><i>`.
    #[arg(long, default_value = "sim-node-")]
    name_prefix: String,
    /// CPU per node.
    #[arg(long, default_value = "32")]
    cpu: String,
    /// Memory per node.
    #[arg(long, default_value = "256Gi")]
    memory: String,
    /// Pods per node.
    #[arg(long, default_value = "110")]
    pods: String,
    /// Extra node labels, `key=value` (repeatable, comma-separated).
    #[arg(long, value_delimiter = ',')]
    label: Vec<String>,
    /// How often each node renews its Lease (Go duration; the kubelet's default is 10s).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    lease_interval: Duration,
    /// The most API writes in flight at once.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
}

/// The node agent's settings, shared by `capstan server` and `capstan agent`.
#[derive(Debug, Args)]
struct AgentFlags {
    /// The node's name (default: the host name).
    #[arg(long, env = "CAPSTAN_NODE_NAME")]
    node_name: Option<String>,
    /// The node's address (default: the source address of the default route).
    #[arg(long)]
    node_ip: Option<IpAddr>,
    /// Labels to register the node with, `key=value` (repeatable, comma-separated).
    #[arg(long, value_delimiter = ',')]
    node_label: Vec<String>,
    /// A CRI socket to use (e.g. `unix:///run/containerd/containerd.sock`) instead of the
    /// containerd the agent starts itself.
    #[arg(long)]
    container_runtime_endpoint: Option<PathBuf>,
    /// The kubelet root directory (pod volumes), default `<data-dir>/agent/kubelet`.
    #[arg(long)]
    root_dir: Option<PathBuf>,
    /// Where the CNI plugins are (Debian's `containernetworking-plugins`).
    #[arg(long, default_value = "/usr/lib/cni")]
    cni_bin_dir: PathBuf,
    /// The Linux bridge pods attach to.
    #[arg(long, default_value = "cni0")]
    cni_bridge: String,
    /// The most pods this node runs.
    #[arg(long, default_value_t = 110)]
    max_pods: u32,
    /// The kubelet API's HTTPS port (logs, exec, attach, port-forward).
    #[arg(long, default_value_t = 10250)]
    kubelet_port: u16,
    /// The cluster's DNS domain.
    #[arg(long, default_value = "cluster.local")]
    cluster_domain: String,
    /// The cluster DNS servers pods with `dnsPolicy: ClusterFirst` use (comma-separated);
    /// default: the cluster IP of the `kube-system/kube-dns` Service. On `capstan server` the
    /// first is also that Service's cluster IP (default: the 10th address of
    /// `--service-cidr`, e.g. 10.43.0.10).
    #[arg(long, value_delimiter = ',')]
    cluster_dns: Vec<IpAddr>,
    /// The resolver configuration `dnsPolicy: Default` pods get and other pods' search lists
    /// extend.
    #[arg(long, default_value = "/etc/resolv.conf")]
    resolv_conf: PathBuf,
    /// Run no service proxy with the node agent (k3s's flag): Services' cluster IPs and node
    /// ports are then left to another proxy.
    #[arg(long)]
    disable_kube_proxy: bool,
    /// Where the local-path provisioner makes the directories of this node's volumes
    /// (default `<data-dir>/agent/storage`).
    #[arg(long)]
    local_storage_dir: Option<PathBuf>,
}

impl AgentFlags {
    fn config(&self, agent_dir: PathBuf) -> anyhow::Result<capstan_kubelet::Config> {
        let hostname = capstan_kubelet::node::hostname();
        let mut config =
            capstan_kubelet::Config::new(self.node_name.as_deref().unwrap_or(&hostname), agent_dir);
        config.labels = parse_labels(&self.node_label)?;
        config.node_ip = self.node_ip;
        config.runtime_endpoint = self.container_runtime_endpoint.clone();
        if let Some(root) = &self.root_dir {
            config.root_dir = root.clone();
        }
        config.cni_bin_dir = self.cni_bin_dir.clone();
        config.cni_bridge = self.cni_bridge.clone();
        config.max_pods = self.max_pods;
        config.kubelet_port = self.kubelet_port;
        config.cluster_domain = self.cluster_domain.clone();
        config.cluster_dns = self.cluster_dns.clone();
        config.resolv_conf = self.resolv_conf.clone();
        Ok(config)
    }
}

impl AgentFlags {
    /// The service proxy's settings for node `node`: upstream's table name on the default
    /// bridge; a table per bridge otherwise, so that nodes sharing a machine (tests) keep
    /// apart.
    fn proxy_config(&self, node: &str) -> capstan_proxy::Config {
        let mut config = capstan_proxy::Config::new(node);
        if self.cni_bridge != "cni0" {
            config.table = format!("kube-proxy-{}", self.cni_bridge);
        }
        config
    }
}

impl AgentFlags {
    /// The local-path provisioner's settings for node `node` whose agent keeps its state in
    /// `agent_dir`.
    fn storage_config(
        &self,
        node: &str,
        agent_dir: &std::path::Path,
    ) -> capstan_kubelet::volumes::local_path::Config {
        capstan_kubelet::volumes::local_path::Config {
            node_name: node.to_owned(),
            dir: self
                .local_storage_dir
                .clone()
                .unwrap_or_else(|| agent_dir.join("storage")),
        }
    }
}

/// Runs the local-path provisioner as `client`; it stops when the task is aborted (it keeps
/// nothing that needs cleaning up).
fn spawn_local_path(
    client: kube::Client,
    config: capstan_kubelet::volumes::local_path::Config,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let dir = config.dir.clone();
        let result =
            capstan_kubelet::volumes::local_path::run(client, config, std::future::pending()).await;
        if let Err(e) = result {
            tracing::error!(error = %e, dir = %dir.display(), "the local-path provisioner stopped");
        }
    })
}

/// Runs the service proxy as `client` until the returned sender fires or is dropped; the task
/// ends once the proxy has removed its table.
fn spawn_proxy(
    client: kube::Client,
    config: capstan_proxy::Config,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let result = capstan_proxy::run(client, config, async {
            let _ = stopped.await;
        })
        .await;
        if let Err(e) = result {
            tracing::error!(error = %e, "the service proxy stopped");
        }
    });
    (stop, task)
}

/// Stops a proxy started by [`spawn_proxy`] and waits (a while) for its table to go.
async fn stop_proxy(
    proxy: Option<(
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    )>,
) {
    if let Some((stop, task)) = proxy {
        let _ = stop.send(());
        let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
    }
}

fn parse_labels(list: &[String]) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    let mut labels = std::collections::BTreeMap::new();
    for label in list {
        let Some((key, value)) = label.split_once('=') else {
            bail!("invalid label {label:?}: expected key=value");
        };
        labels.insert(key.to_owned(), value.to_owned());
    }
    Ok(labels)
}

/// An upstream DNS server: `IP` (port 53) or `IP:PORT` (`[IPv6]:PORT`).
fn parse_upstream(text: &str) -> Result<std::net::SocketAddr, String> {
    text.parse::<std::net::SocketAddr>()
        .or_else(|_| {
            text.parse::<IpAddr>()
                .map(|ip| std::net::SocketAddr::new(ip, 53))
        })
        .map_err(|_| format!("invalid DNS server {text:?}: expected IP or IP:PORT"))
}

fn parse_cidr(text: &str) -> Result<String, String> {
    capstan_apiserver::services::Cidr::parse(text).map(|_| text.to_owned())
}

#[derive(Debug, Subcommand)]
enum ImageCommand {
    /// Pack Debian's static busybox (package `busybox-static`) as a runnable image archive,
    /// e.g. into `<data-dir>/agent/images/` to be imported when the node starts.
    Busybox {
        /// The archive to write.
        #[arg(long)]
        output: PathBuf,
        /// The image name (default: `docker.io/library/busybox:<busybox's version>`).
        #[arg(long)]
        name: Option<String>,
        /// The busybox binary to pack.
        #[arg(long, default_value = "/bin/busybox")]
        busybox: PathBuf,
    },
    /// Import an image archive (OCI or docker format) into a running node's containerd.
    Import {
        /// The archive.
        file: PathBuf,
        /// The node's data directory (its containerd socket is under `agent/containerd/`).
        #[arg(long, env = "CAPSTAN_DATA_DIR", default_value_os_t = default_data_dir())]
        data_dir: PathBuf,
        /// A containerd socket to import into instead.
        #[arg(long)]
        address: Option<PathBuf>,
    },
}

/// The image name for Debian's busybox: `docker.io/library/busybox:<version>`, the version
/// read from the binary's banner (`BusyBox v1.35.0 (...)`).
fn busybox_name(busybox: &std::path::Path) -> String {
    let banner = std::process::Command::new(busybox)
        .arg("--help")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let version = banner
        .split_whitespace()
        .find_map(|word| word.strip_prefix('v'))
        .filter(|v| v.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .unwrap_or("latest");
    format!("docker.io/library/busybox:{version}")
}

async fn image(command: ImageCommand) -> anyhow::Result<()> {
    match command {
        ImageCommand::Busybox {
            output,
            name,
            busybox,
        } => {
            let name = name.unwrap_or_else(|| busybox_name(&busybox));
            let archive = capstan_kubelet::images::busybox_image(&busybox, &name)?;
            if let Some(parent) = output.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("cannot create {}", parent.display()))?;
            }
            std::fs::write(&output, archive)
                .with_context(|| format!("cannot write {}", output.display()))?;
            println!("{name} written to {}", output.display());
        }
        ImageCommand::Import {
            file,
            data_dir,
            address,
        } => {
            let address = address.unwrap_or_else(|| {
                capstan_kubelet::containerd::Layout::new(&data_dir.join("agent")).socket()
            });
            for name in capstan_kubelet::images::import_file(&address, &file).await? {
                println!("imported {name}");
            }
        }
    }
    Ok(())
}

#[derive(Debug, Args)]
struct AgentArgs {
    /// The server to join, e.g. https://10.0.0.1:6443.
    #[arg(long, env = "CAPSTAN_URL")]
    server: String,
    /// The join token, as the server wrote it to `<data-dir>/token` (`K10<ca-hash>::...`;
    /// the hash pins the server's CA).
    #[arg(long, env = "CAPSTAN_TOKEN")]
    token: String,
    /// Accept a bare secret that pins no CA (trusts whatever CA the server presents).
    #[arg(long)]
    insecure_unpinned_token: bool,
    /// The local port of the agent's load balancer over the API servers (k3s's flag): every
    /// client of the agent reaches the servers through `https://127.0.0.1:<port>`, which fails
    /// over among the servers the `default/kubernetes` Endpoints list (0: a free port).
    #[arg(long, default_value_t = 6444)]
    lb_server_port: u16,
    /// Directory that holds the agent's state (its containerd, pod volumes and logs under
    /// `agent/`, its credentials under `cred/`).
    #[arg(
        long,
        env = "CAPSTAN_DATA_DIR",
        default_value = "/var/lib/capstan/agent"
    )]
    data_dir: PathBuf,
    /// Where the service proxy serves `/metrics` and `/healthz` over plain HTTP (kube-proxy's
    /// `--metrics-bind-address`); empty serves none.
    #[arg(long, default_value = "127.0.0.1:10249")]
    proxy_metrics_bind_address: String,
    /// Serve the process's CPU and heap profiles at the kubelet API's `/debug/pprof/` (to the
    /// API server and `system:masters`, as `nodes/proxy`), as upstream's
    /// `enableProfilingHandler`; `--profiling=false` serves none and samples no allocations.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    profiling: bool,
    #[command(flatten)]
    agent: AgentFlags,
}

fn parse_mode(text: &str) -> Result<u32, String> {
    u32::from_str_radix(text.trim_start_matches("0o"), 8)
        .ok()
        .filter(|mode| *mode <= 0o777)
        .ok_or_else(|| format!("invalid file mode {text:?}: expected octal such as 0600"))
}

/// kube-apiserver's webhook flags: token authentication, authorization and the audit backend,
/// each reaching a service named by a kubeconfig file.
#[derive(clap::Args, Debug, Clone)]
struct WebhookFlags {
    /// A kubeconfig file naming the token review webhook: bearer tokens no other
    /// authenticator knows are sent to it as TokenReviews.
    #[arg(long)]
    authentication_token_webhook_config_file: Option<PathBuf>,
    /// How long the webhook's answers about a token are remembered (Go duration).
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    authentication_token_webhook_cache_ttl: Duration,
    /// The TokenReview version spoken to the webhook (v1 or v1beta1).
    #[arg(long, default_value = "v1")]
    authentication_token_webhook_version: String,
    /// The authorizers, in order, comma-separated: Node, RBAC, Webhook, AlwaysAllow,
    /// AlwaysDeny.
    #[arg(long, default_value = "Node,RBAC")]
    authorization_mode: String,
    /// A kubeconfig file naming the authorization webhook (mode Webhook): requests are
    /// described to it as SubjectAccessReviews.
    #[arg(long)]
    authorization_webhook_config_file: Option<PathBuf>,
    /// How long the webhook's allowances are remembered (Go duration).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    authorization_webhook_cache_authorized_ttl: Duration,
    /// How long the webhook's refusals are remembered (Go duration).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    authorization_webhook_cache_unauthorized_ttl: Duration,
    /// The SubjectAccessReview version spoken to the webhook (v1 or v1beta1).
    #[arg(long, default_value = "v1")]
    authorization_webhook_version: String,
    /// A kubeconfig file naming the audit webhook: audit events are posted to it as
    /// `audit.k8s.io/v1` EventLists.
    #[arg(long)]
    audit_webhook_config_file: Option<PathBuf>,
    /// batch (buffered, sent asynchronously), blocking (each event sent before the request
    /// goes on) or blocking-strict (and a request whose first event fails fails).
    #[arg(long, default_value = "batch")]
    audit_webhook_mode: String,
    /// Events buffered before they are dropped (batch mode).
    #[arg(long, default_value_t = 10_000)]
    audit_webhook_batch_buffer_size: usize,
    /// The most events in one batch (batch mode).
    #[arg(long, default_value_t = 400)]
    audit_webhook_batch_max_size: usize,
    /// The longest an event waits for its batch (batch mode; Go duration).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    audit_webhook_batch_max_wait: Duration,
    /// Whether batches are throttled (batch mode).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    audit_webhook_batch_throttle_enable: bool,
    /// Batches a second at most (batch mode).
    #[arg(long, default_value_t = 10.0)]
    audit_webhook_batch_throttle_qps: f64,
    /// Batches sent at once before the throttle applies (batch mode).
    #[arg(long, default_value_t = 15)]
    audit_webhook_batch_throttle_burst: u32,
    /// The wait before the first retry of a failed webhook request (Go duration).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    audit_webhook_initial_backoff: Duration,
}

impl WebhookFlags {
    fn token_webhook(&self) -> Option<capstan_apiserver::TokenWebhookConfig> {
        let config_file = self.authentication_token_webhook_config_file.clone()?;
        Some(capstan_apiserver::TokenWebhookConfig {
            config_file,
            cache_ttl: self.authentication_token_webhook_cache_ttl,
            version: self.authentication_token_webhook_version.clone(),
        })
    }

    fn authorization(&self) -> anyhow::Result<capstan_apiserver::AuthorizationConfig> {
        Ok(capstan_apiserver::AuthorizationConfig {
            modes: capstan_apiserver::AuthorizationMode::parse_list(&self.authorization_mode)
                .map_err(anyhow::Error::msg)?,
            webhook: self
                .authorization_webhook_config_file
                .clone()
                .map(
                    |config_file| capstan_apiserver::AuthorizationWebhookConfig {
                        config_file,
                        version: self.authorization_webhook_version.clone(),
                        authorized_ttl: self.authorization_webhook_cache_authorized_ttl,
                        unauthorized_ttl: self.authorization_webhook_cache_unauthorized_ttl,
                    },
                ),
        })
    }

    fn audit_webhook(&self) -> anyhow::Result<Option<capstan_apiserver::AuditWebhookConfig>> {
        let Some(config_file) = self.audit_webhook_config_file.clone() else {
            return Ok(None);
        };
        Ok(Some(capstan_apiserver::AuditWebhookConfig {
            config_file,
            mode: capstan_apiserver::AuditWebhookMode::parse(&self.audit_webhook_mode)
                .map_err(anyhow::Error::msg)?,
            batching: capstan_apiserver::AuditWebhookBatching {
                buffer_size: self.audit_webhook_batch_buffer_size,
                max_size: self.audit_webhook_batch_max_size,
                max_wait: self.audit_webhook_batch_max_wait,
                throttle: self.audit_webhook_batch_throttle_enable.then_some((
                    self.audit_webhook_batch_throttle_qps,
                    self.audit_webhook_batch_throttle_burst,
                )),
            },
            initial_backoff: self.audit_webhook_initial_backoff,
        }))
    }
}

fn default_data_dir() -> PathBuf {
    PathBuf::from("/var/lib/capstan/server")
}

/// Parses the flag's Go duration (`5m`, `1h30m`, `250ms`; `0` disables).
/// `--metric-resolution`: a duration of at least 10 s, as metrics-server requires.
fn parse_metric_resolution(text: &str) -> Result<Duration, String> {
    let resolution = parse_duration(text)?;
    if resolution < Duration::from_secs(10) {
        return Err(format!(
            "metric-resolution should be a time duration at least 10s, but value {text} provided"
        ));
    }
    Ok(resolution)
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    capstan_api::parse_go_duration(text)
        .ok_or_else(|| format!("invalid duration {text:?}: expected e.g. 5m, 1h30m or 0"))
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                // hickory's server logs every DNS query at info: only its warnings by default.
                .unwrap_or_else(|_| {
                    tracing_subscriber::EnvFilter::new(
                        "info,hickory_server=warn,hickory_net=warn,hickory_resolver=warn,\
                         hickory_proto=warn",
                    )
                }),
        )
        .with_writer(std::io::stderr)
        .init();
    match cli.command {
        Command::Version => {
            println!(
                "capstan {} (Kubernetes {})",
                env!("CARGO_PKG_VERSION"),
                capstan_api::kubernetes_version()
            );
            Ok(())
        }
        Command::Server(args) => runtime()?.block_on(server(*args)),
        Command::Scheduler(args) => runtime()?.block_on(scheduler(*args)),
        Command::ControllerManager(args) => runtime()?.block_on(controller_manager(*args)),
        Command::Sim(args) => runtime()?.block_on(sim(args)),
        Command::Image(command) => runtime()?.block_on(image(command)),
        Command::Token(command) => runtime()?.block_on(token::run(command)),
        Command::Certificate(command) => certificate::run(command),
        Command::Agent(args) => runtime()?.block_on(agent(*args)),
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// A client from a kubeconfig file (or the usual `$KUBECONFIG` / `~/.kube/config` search).
/// A client of the API server for `component`, which names it in its User-Agent (upstream's
/// API server takes the field manager of its writes from there, e.g. `kube-scheduler`).
async fn client_from(
    kubeconfig: Option<&std::path::Path>,
    component: &str,
) -> anyhow::Result<kube::Client> {
    let config = kube_config(kubeconfig, component).await?;
    kube::Client::try_from(config).context("cannot build an API client")
}

/// The client settings of `kubeconfig` (or the inferred one), identifying as `component`.
async fn kube_config(
    kubeconfig: Option<&std::path::Path>,
    component: &str,
) -> anyhow::Result<kube::Config> {
    let mut config = match kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
                .await
                .with_context(|| format!("invalid kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer().await.context("no kubeconfig found")?,
    };
    let agent = format!(
        "{component}/v1.33.0 (linux/amd64) capstan/{}",
        env!("CARGO_PKG_VERSION")
    );
    if let Ok(value) = http::HeaderValue::from_str(&agent) {
        config.headers.push((http::header::USER_AGENT, value));
    }
    Ok(config)
}

/// The controllers' client, and the CA bundle they publish: `--root-ca-file` when given, else
/// the certificate authority the kubeconfig trusts (as kube-controller-manager falls back to).
/// With `service_accounts`, each controller gets its own client from the same settings.
async fn controller_client(
    kubeconfig: Option<&std::path::Path>,
    config: &mut capstan_controllers::Config,
    flags: &ControllerFlags,
) -> anyhow::Result<kube::Client> {
    let (root_ca_file, service_accounts) = (
        flags.root_ca_file.as_deref(),
        flags.use_service_account_credentials,
    );
    let client_config = kube_config(kubeconfig, "kube-controller-manager").await?;
    config.root_ca = match root_ca_file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("cannot read --root-ca-file {}", path.display()))?,
        ),
        None => root_ca_pem(&client_config)?,
    };
    if service_accounts {
        config.credentials = capstan_controllers::clientbuilder::Credentials::ServiceAccounts(
            Box::new(client_config.clone()),
        );
    }
    kube::Client::try_from(client_config).context("cannot build an API client")
}

/// The PEM form of the certificate authorities a client configuration trusts.
fn root_ca_pem(config: &kube::Config) -> anyhow::Result<Option<String>> {
    use base64::Engine as _;
    if let Some(path) = &config.root_cert_file {
        return std::fs::read_to_string(path)
            .map(Some)
            .with_context(|| format!("cannot read {}", path.display()));
    }
    Ok(config.root_cert.as_ref().map(|certs| {
        let mut pem = String::new();
        for der in certs {
            let encoded = base64::engine::general_purpose::STANDARD.encode(der);
            pem.push_str("-----BEGIN CERTIFICATE-----\n");
            for line in encoded.as_bytes().chunks(64) {
                pem.push_str(&String::from_utf8_lossy(line));
                pem.push('\n');
            }
            pem.push_str("-----END CERTIFICATE-----\n");
        }
        pem
    }))
}

fn scheduler_config(path: Option<&std::path::Path>) -> anyhow::Result<capstan_scheduler::Config> {
    match path {
        None => Ok(capstan_scheduler::Config::default_config()),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            capstan_scheduler::Config::parse(&text)
                .with_context(|| format!("invalid scheduler configuration {}", path.display()))
        }
    }
}

/// This process's identity in leader elections: the host name and a random suffix, as
/// upstream's components use.
fn leader_identity() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "capstan".to_owned());
    let suffix: u64 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or_default()
        ^ u64::from(std::process::id());
    format!("{host}_{suffix:016x}")
}

/// Runs `work` until the process stops; with `leader_elect`, only while holding the
/// `kube-system/<lease>` Lease (`work`'s future is dropped when leadership is lost).
async fn run_elected<F, Fut>(client: kube::Client, lease: &str, leader_elect: bool, work: F)
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let identity = leader_identity();
    if leader_elect {
        let election = capstan_client::leader::LeaderElection::new(
            client,
            "kube-system",
            lease,
            &identity,
            capstan_client::leader::Timing::default(),
        );
        election.run(|| work(identity.clone())).await
    } else {
        work(identity).await
    }
}

/// Runs the scheduler (as kube-scheduler, under its Lease when electing), reading the
/// process's shared `informers`.
async fn run_scheduler(
    client: kube::Client,
    config: capstan_scheduler::Config,
    leader_elect: bool,
    informers: SharedInformers,
) {
    run_elected(client.clone(), "kube-scheduler", leader_elect, |identity| {
        let (client, config) = (client.clone(), config.clone());
        let informers = informers.clone();
        async move {
            let _scheduler =
                capstan_scheduler::Scheduler::start(client, config, identity, &informers);
            std::future::pending::<()>().await;
        }
    })
    .await
}

/// Runs the controllers (as kube-controller-manager, under its Lease when electing), reading
/// the process's shared `informers`.
async fn run_controllers(
    client: kube::Client,
    config: capstan_controllers::Config,
    leader_elect: bool,
    informers: SharedInformers,
) {
    run_elected(
        client.clone(),
        "kube-controller-manager",
        leader_elect,
        |identity| {
            let (client, config) = (client.clone(), config.clone());
            let informers = informers.clone();
            async move {
                let _manager = capstan_controllers::start(client, &config, &identity, &informers);
                std::future::pending::<()>().await;
            }
        },
    )
    .await
}

async fn scheduler(args: SchedulerArgs) -> anyhow::Result<()> {
    let config = scheduler_config(args.config.as_deref())?;
    let client = client_from(args.kubeconfig.as_deref(), "kube-scheduler").await?;
    endpoints::serve_secure(&args.serving, 10259, client.clone(), "kube-scheduler").await?;
    let shutdown = shutdown_signal()?;
    tokio::select! {
        _ = run_scheduler(client, config, args.leader_elect, SharedInformers::default()) => {}
        result = shutdown => result?,
    }
    Ok(())
}

async fn controller_manager(args: ControllerManagerArgs) -> anyhow::Result<()> {
    let mut config = args.controllers.config()?;
    config.signing_ca = args.controllers.signing_ca(None)?;
    config.kubelet_serving_ca = args.controllers.kubelet_serving_ca(None)?;
    let client =
        controller_client(args.kubeconfig.as_deref(), &mut config, &args.controllers).await?;
    endpoints::serve_secure(
        &args.serving,
        10257,
        client.clone(),
        "kube-controller-manager",
    )
    .await?;
    let shutdown = shutdown_signal()?;
    tokio::select! {
        _ = run_controllers(client, config, args.leader_elect, SharedInformers::default()) => {}
        result = shutdown => result?,
    }
    Ok(())
}

async fn sim(args: SimArgs) -> anyhow::Result<()> {
    let labels = parse_labels(&args.label)?;
    let config = capstan_sim::SimConfig {
        nodes: args.nodes,
        name_prefix: args.name_prefix,
        cpu: args.cpu,
        memory: args.memory,
        pods: args.pods,
        labels,
        lease_interval: args.lease_interval,
        concurrency: args.concurrency,
        ..capstan_sim::SimConfig::default()
    };
    let client = client_from(args.kubeconfig.as_deref(), "capstan-sim").await?;
    let shutdown = shutdown_signal()?;
    capstan_sim::run(client, config, async move {
        let _ = shutdown.await;
    })
    .await
    .context("simulated nodes stopped")
}

async fn server(args: ServerArgs) -> anyhow::Result<()> {
    if args.profiling {
        capstan_pprof::heap::start(capstan_pprof::heap::DEFAULT_RATE);
    }
    let scheduler_settings = if args.disable_scheduler {
        None
    } else {
        Some(scheduler_config(args.scheduler_config.as_deref())?)
    };
    let controllers = args.controllers.config()?;
    let endpoint = Endpoint::parse(&args.datastore_endpoint, &args.data_dir)
        .context("invalid --datastore-endpoint")?;
    // Joining another server's cluster: its secrets are fetched before anything is written.
    let joining = match &args.server {
        Some(server) => {
            server_join::fetch(
                server,
                args.token.as_deref(),
                &endpoint,
                &args.data_dir,
                server_join::EncryptionFlags {
                    provider_config: args.encryption_provider_config.as_deref(),
                    secrets_encryption: args.secrets_encryption,
                },
            )
            .await?
        }
        None => None,
    };
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("cannot create data dir {}", args.data_dir.display()))?;
    let store = endpoint
        .open()
        .await
        .with_context(|| format!("cannot open the datastore at {endpoint}"))?;
    if let Some(fetched) = joining {
        server_join::install(fetched, &store, &args.data_dir).await?;
    }
    let revision = store.current_revision().await?;
    let _compactor = (!args.etcd_compaction_interval.is_zero())
        .then(|| store.spawn_compactor(args.etcd_compaction_interval));
    tracing::info!(
        datastore = %endpoint,
        revision,
        compaction_interval = ?args.etcd_compaction_interval,
        "datastore ready"
    );
    capstan_apiserver::set_build_info(capstan_apiserver::BuildInfo {
        git_commit: env!("CAPSTAN_GIT_COMMIT").to_owned(),
        git_tree_state: env!("CAPSTAN_GIT_TREE_STATE").to_owned(),
        build_date: env!("CAPSTAN_BUILD_DATE").to_owned(),
    });
    let advertise_address = args.advertise_address.unwrap_or_else(|| {
        if args.bind_address.is_unspecified() || args.bind_address.is_loopback() {
            capstan_kubelet::node::default_ip()
        } else {
            args.bind_address
        }
    });
    let dns_settings = (!args.disable_dns)
        .then(|| dns_config(&args, advertise_address))
        .transpose()?;
    let config = capstan_apiserver::Config {
        kubeconfig_path: args
            .write_kubeconfig
            .clone()
            .unwrap_or_else(|| args.data_dir.join("kubeconfig.yaml")),
        kubeconfig_mode: args.write_kubeconfig_mode,
        data_dir: args.data_dir,
        bind_address: args.bind_address,
        port: args.https_listen_port,
        tls_sans: args.tls_san,
        tls: capstan_client::tls::TlsPolicy::parse(
            args.tls_min_version.as_deref(),
            &args.tls_cipher_suites,
        )
        .map_err(anyhow::Error::msg)?,
        encryption_provider_config: args.encryption_provider_config.clone(),
        secrets_encryption: args.secrets_encryption,
        audit: match (
            &args.audit_policy_file,
            &args.audit_log_path,
            args.webhooks.audit_webhook()?,
        ) {
            (Some(policy_file), log_path, webhook) if log_path.is_some() || webhook.is_some() => {
                Some(capstan_apiserver::AuditConfig {
                    policy_file: policy_file.clone(),
                    log_path: log_path.clone(),
                    webhook,
                    max_size_mb: args.audit_log_maxsize,
                    max_backups: args.audit_log_maxbackup,
                    max_age_days: args.audit_log_maxage,
                })
            }
            (None, None, None) => None,
            _ => bail!(
                "--audit-policy-file goes with --audit-log-path or --audit-webhook-config-file"
            ),
        },
        token_auth_file: args.token_auth_file,
        authentication: args.authn.options()?,
        authentication_token_webhook: args.webhooks.token_webhook(),
        authorization: args.webhooks.authorization()?,
        join_token: args.token.clone(),
        service_cidr: args.service_cidr.clone(),
        allocation_repair: capstan_apiserver::RepairTiming {
            interval: args.allocation_repair_interval,
            grace: args.allocation_leak_grace,
        },
        advertise_address: Some(advertise_address),
        default_storage_class: !args.disable_default_storageclass,
        metrics_server: (!args.disable_metrics_server).then_some(args.metric_resolution),
        admission_control_config_file: args.admission_control_config_file.clone(),
        node_cert_lifetime: args.controllers.cluster_signing_duration,
        controller_credentials: args.controllers.use_service_account_credentials,
        dashboard: !args.disable_dashboard,
        profiling: args.profiling,
    };
    // Listen for SIGTERM before anything can report ready, so a prompt stop is always clean.
    let shutdown = shutdown_signal()?;
    let data_dir = config.data_dir.clone();
    let leader_elect = !matches!(endpoint, Endpoint::Sqlite(_));
    let mut apiserver = capstan_apiserver::start(config, store)
        .await
        .context("cannot start the API server")?;
    // The scheduler and the controllers read one set of informers: pods and nodes are watched,
    // decoded and cached once for both.
    let informers = SharedInformers::default();
    // The scheduler reaches the API server like any client: over HTTPS, as its own user.
    let _scheduler = match scheduler_settings {
        Some(settings) => {
            let kubeconfig = data_dir.join("cred").join("scheduler.kubeconfig");
            apiserver
                .write_component_kubeconfig("scheduler", "system:kube-scheduler", &kubeconfig)
                .context("cannot write the scheduler's kubeconfig")?;
            let client = client_from(Some(&kubeconfig), "kube-scheduler").await?;
            Some(tokio::spawn(run_scheduler(
                client,
                settings,
                leader_elect,
                informers.clone(),
            )))
        }
        None => None,
    };
    // So do the controllers, as user system:kube-controller-manager (and, with
    // --use-service-account-credentials, each as its own service account).
    let _controllers = if args.disable_controller_manager {
        None
    } else {
        let kubeconfig = data_dir.join("cred").join("controller.kubeconfig");
        apiserver
            .write_component_kubeconfig("controller", "system:kube-controller-manager", &kubeconfig)
            .context("cannot write the controller manager's kubeconfig")?;
        let mut controllers = controllers;
        let tls = data_dir.join("tls");
        controllers.signing_ca = args.controllers.signing_ca(Some(&tls))?;
        // Kubelet serving certificates come from the CA the API server checks kubelets against
        // (made on first use), never from the cluster CA clients trust.
        capstan_apiserver::pki::kubelet_ca(&tls).context("cannot make the kubelet serving CA")?;
        controllers.kubelet_serving_ca = args.controllers.kubelet_serving_ca(Some(&tls))?;
        let client =
            controller_client(Some(&kubeconfig), &mut controllers, &args.controllers).await?;
        Some(tokio::spawn(run_controllers(
            client,
            controllers,
            leader_elect,
            informers,
        )))
    };
    // The cluster DNS server, as user system:kube-dns, answering on the advertise address.
    let dns = match dns_settings {
        Some(settings) => {
            let kubeconfig = data_dir.join("cred").join("dns.kubeconfig");
            apiserver
                .write_component_kubeconfig("dns", "system:kube-dns", &kubeconfig)
                .context("cannot write the DNS server's kubeconfig")?;
            let client = client_from(Some(&kubeconfig), "capstan-dns").await?;
            let listen = settings.listen;
            Some(
                capstan_dns::start(settings, Some(client))
                    .await
                    .with_context(|| {
                        format!(
                            "cannot start the DNS server on {listen} \
                             (choose another --dns-port, or --disable-dns)"
                        )
                    })?,
            )
        }
        None => None,
    };
    // The node agent, as system:node:<name> like any kubelet.
    let agent = if args.disable_agent {
        None
    } else {
        let mut config = args.agent.config(data_dir.join("agent"))?;
        config.profiling = args.profiling;
        // The kubelet API serves with a certificate from the cluster CA, for the node's
        // address and name (its Node's `Hostname` address).
        let ip = *config
            .node_ip
            .get_or_insert_with(capstan_kubelet::node::default_ip);
        let mut names = vec![
            ip.to_string(),
            config.node_name.clone(),
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
        ];
        names.sort();
        names.dedup();
        let (serving, _) = apiserver
            .kubelet_serving(&config.node_name, &names)
            .context("cannot issue the kubelet's serving certificate")?;
        let proxy = if args.agent.disable_kube_proxy {
            None
        } else {
            let kubeconfig = data_dir.join("cred").join("proxy.kubeconfig");
            apiserver
                .write_component_kubeconfig("proxy", "system:kube-proxy", &kubeconfig)
                .context("cannot write the service proxy's kubeconfig")?;
            let client = client_from(Some(&kubeconfig), "kube-proxy").await?;
            Some(spawn_proxy(
                client,
                args.agent.proxy_config(&config.node_name),
            ))
        };
        let storage_kubeconfig = data_dir.join("cred").join("storage.kubeconfig");
        apiserver
            .write_component_kubeconfig(
                "storage",
                capstan_apiserver::STORAGE_USER,
                &storage_kubeconfig,
            )
            .context("cannot write the local-path provisioner's kubeconfig")?;
        let storage = spawn_local_path(
            client_from(Some(&storage_kubeconfig), "local-path-provisioner").await?,
            args.agent
                .storage_config(&config.node_name, &config.agent_dir),
        );
        let kubeconfig = data_dir.join("cred").join("node.kubeconfig");
        let node = apiserver
            .write_node_kubeconfig(&config.node_name, &kubeconfig)
            .context("cannot write the node agent's kubeconfig")?;
        let (node_name, cert_dir) = (config.node_name.clone(), config.agent_dir.join("pki"));
        let serving_names = node_names(&node_name, ip);
        let client = node_certificates(
            &mut config,
            capstan_kubelet::node::certificate::Given {
                node: &node_name,
                cert_dir: &cert_dir,
                kubeconfig: &kubeconfig,
                server: &node.server,
                ca_pem: &node.ca_pem,
                client: (node.client.cert_pem, node.client.key_pem),
                serving: (serving.cert_pem, serving.key_pem),
                serving_names: &serving_names,
            },
        )
        .await?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let result = capstan_kubelet::run(client, config, async {
                let _ = stopped.await;
            })
            .await;
            if let Err(e) = result {
                tracing::error!(error = %format!("{:#}", anyhow::Error::from(e)), "the node agent stopped");
            }
        });
        Some((stop, task, proxy, storage))
    };
    shutdown.await?;
    tracing::info!("shutting down");
    // Out of the kubernetes Service's endpoints first, as upstream's pre-shutdown hook, so
    // that clients following them (agents, pods) stop choosing this server now rather than
    // when its master lease would have expired.
    if tokio::time::timeout(Duration::from_secs(5), apiserver.leave())
        .await
        .is_err()
    {
        tracing::warn!("leaving the kubernetes service's endpoints took over 5 s; left to expire");
    }
    if let Some(dns) = dns {
        let _ = tokio::time::timeout(Duration::from_secs(5), dns.stop()).await;
    }
    if let Some((stop, task, proxy, storage)) = agent {
        storage.abort();
        stop_proxy(proxy).await;
        let _ = stop.send(());
        let _ = tokio::time::timeout(Duration::from_secs(15), task).await;
        log_pods_outlive_stop(&data_dir);
    }
    Ok(())
}

/// The DNS server's settings: the cluster DNS IP (`--cluster-dns`, else the 10th address of
/// `--service-cidr`), the advertise address at `--dns-port`, the cluster domain and upstreams.
fn dns_config(args: &ServerArgs, advertise: IpAddr) -> anyhow::Result<capstan_dns::Config> {
    let cluster_dns = match args.agent.cluster_dns.first() {
        Some(ip) => *ip,
        None => capstan_apiserver::services::Cidr::parse(&args.service_cidr)
            .map_err(|e| anyhow::anyhow!("invalid --service-cidr: {e}"))?
            .nth(10)
            .map(IpAddr::V4)
            .context("--service-cidr has no 10th address for the cluster DNS")?,
    };
    // The advertise address may not be this machine's (a NAT's, or made up in tests): then the
    // DNS server answers on the node's own address, which its Lease, and so the kube-dns
    // endpoints, name instead.
    let listen = if std::net::UdpSocket::bind((advertise, 0)).is_ok() {
        advertise
    } else {
        let local = capstan_kubelet::node::default_ip();
        tracing::warn!(
            %advertise, %local,
            "the advertise address is not this machine's; the DNS server answers on {local}"
        );
        local
    };
    let mut config = capstan_dns::Config::new(
        std::net::SocketAddr::new(listen, args.dns_port),
        Some(cluster_dns),
    );
    config.cluster_domain = args.agent.cluster_domain.clone();
    if !args.dns_upstream.is_empty() {
        config.upstream = capstan_dns::Upstream::Servers(args.dns_upstream.clone());
    }
    Ok(config)
}

/// A client of a component that runs beside a joined node agent with a certificate the server
/// issued at join (`pair`), reaching the servers at `server` (the agent's load balancer): its
/// kubeconfig is written to `<data-dir>/cred/<file>.kubeconfig`.
async fn joined_client(
    args: &AgentArgs,
    server: &str,
    ca: &str,
    pair: &capstan_kubelet::join::Pair,
    file: &str,
    user_agent: &str,
) -> anyhow::Result<kube::Client> {
    let kubeconfig = args
        .data_dir
        .join("cred")
        .join(format!("{file}.kubeconfig"));
    capstan_client::credentials::Kubeconfig {
        server,
        ca_pem: ca,
        cert_pem: &pair.cert,
        key_pem: &pair.key,
    }
    .write(&kubeconfig, 0o600)
    .with_context(|| format!("cannot write {}", kubeconfig.display()))?;
    client_from(Some(&kubeconfig), user_agent).await
}

/// The names a node's renewed serving certificates are asked for: its name (also its Node's
/// `Hostname` address) and address, what its Node reports and the CSR approver checks them
/// against.
fn node_names(node: &str, ip: IpAddr) -> Vec<String> {
    let mut names = vec![node.to_owned(), ip.to_string()];
    names.sort();
    names.dedup();
    names
}

/// The node agent's API client and kubelet API TLS from the certificates it was `given`,
/// both renewed through CertificateSigningRequests while it runs (`config.rotations`).
async fn node_certificates(
    config: &mut capstan_kubelet::Config,
    given: capstan_kubelet::node::certificate::Given<'_>,
) -> anyhow::Result<kube::Client> {
    let client_config = kube_config(Some(given.kubeconfig), "kubelet").await?;
    let certs = capstan_kubelet::node::certificate::NodeCertificates::start(given, &client_config)
        .context("cannot set up the node's certificates")?;
    config.tls = Some(certs.tls);
    config.rotations = certs.rotations;
    Ok(certs.client)
}

/// `capstan agent`: joins the cluster at `--server` with `--token` (the server's CA pinned by
/// the token, the node's credentials issued by the server), then runs the node agent.
async fn agent(args: AgentArgs) -> anyhow::Result<()> {
    let shutdown = shutdown_signal()?;
    if args.profiling {
        capstan_pprof::heap::start(capstan_pprof::heap::DEFAULT_RATE);
    }
    let mut config = args.agent.config(args.data_dir.join("agent"))?;
    config.profiling = args.profiling;
    let ip = *config
        .node_ip
        .get_or_insert_with(capstan_kubelet::node::default_ip);
    let mut names = vec![ip.to_string(), config.node_name.clone()];
    names.sort();
    names.dedup();
    let password_file = args.data_dir.join("node-password");
    let password = capstan_kubelet::join::node_password(&password_file)
        .with_context(|| format!("cannot read or write {}", password_file.display()))?;
    // Every client of the agent, the join first, reaches the servers through the load
    // balancer, which starts from --server and the servers a previous run learned.
    let lb = capstan_client::loadbalancer::LoadBalancer::start(
        &args.data_dir.join(capstan_client::loadbalancer::STATE_FILE),
        &args.server,
        args.lb_server_port,
    )
    .await
    .context("cannot start the agent load balancer")?;
    let server = lb.url();
    let credentials = capstan_kubelet::join::join(
        &server,
        &args.token,
        &config.node_name,
        &names,
        &password,
        args.insecure_unpinned_token,
    )
    .await
    .with_context(|| format!("cannot join the cluster at {}", args.server))?;
    tracing::info!(server = %args.server, node = %config.node_name, "joined the cluster");
    let kubeconfig = args.data_dir.join("cred").join("node.kubeconfig");
    capstan_kubelet::join::write_kubeconfig(&kubeconfig, &server, &credentials)
        .with_context(|| format!("cannot write {}", kubeconfig.display()))?;
    let proxy = match (&credentials.proxy, args.agent.disable_kube_proxy) {
        (_, true) => None,
        (None, false) => {
            tracing::warn!("the server issued no service proxy credentials: no service proxy runs");
            None
        }
        (Some(pair), false) => {
            let client =
                joined_client(&args, &server, &credentials.ca, pair, "proxy", "kube-proxy").await?;
            if !args.proxy_metrics_bind_address.is_empty() {
                let address = args
                    .proxy_metrics_bind_address
                    .parse()
                    .context("--proxy-metrics-bind-address")?;
                endpoints::serve_plain_metrics(address).await;
            }
            Some(spawn_proxy(
                client,
                args.agent.proxy_config(&config.node_name),
            ))
        }
    };
    let storage = match &credentials.storage {
        None => {
            tracing::warn!(
                "the server issued no local-path provisioner credentials: this node provisions no volumes"
            );
            None
        }
        Some(pair) => {
            let client = joined_client(
                &args,
                &server,
                &credentials.ca,
                pair,
                "storage",
                "local-path-provisioner",
            )
            .await?;
            Some(spawn_local_path(
                client,
                args.agent
                    .storage_config(&config.node_name, &config.agent_dir),
            ))
        }
    };
    let (node_name, cert_dir) = (config.node_name.clone(), config.agent_dir.join("pki"));
    let serving_names = node_names(&node_name, ip);
    let client = node_certificates(
        &mut config,
        capstan_kubelet::node::certificate::Given {
            node: &node_name,
            cert_dir: &cert_dir,
            kubeconfig: &kubeconfig,
            server: &server,
            ca_pem: &credentials.ca,
            client: (
                credentials.client.cert.clone(),
                credentials.client.key.clone(),
            ),
            serving: (
                credentials.serving.cert.clone(),
                credentials.serving.key.clone(),
            ),
            serving_names: &serving_names,
        },
    )
    .await?;
    // The server list follows the live servers, read as the node.
    let follow = tokio::spawn(lb.clone().follow(client.clone()));
    let result = capstan_kubelet::run(client, config, async {
        let _ = shutdown.await;
    })
    .await;
    if let Some(storage) = storage {
        storage.abort();
    }
    stop_proxy(proxy).await;
    follow.abort();
    drop(lb);
    log_pods_outlive_stop(&args.data_dir);
    result.map_err(|e| anyhow::Error::from(e).context("the node agent stopped"))
}

/// Says, as the node agent stops, that its pods do not stop with it and how to stop them.
fn log_pods_outlive_stop(data_dir: &std::path::Path) {
    tracing::info!(
        data_dir = %data_dir.display(),
        "the node's pods keep running after capstan stops (a restart takes them over); \
         to stop them, run scripts/killall --data-dir <data_dir> \
         (with --bridge <name> for a --cni-bridge other than cni0)"
    );
}

/// Installs the SIGTERM and Ctrl-C handlers now; the returned future ends at the first signal.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = anyhow::Result<()>>> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot listen for SIGTERM")?;
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .context("cannot listen for SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_modes_are_octal() {
        assert_eq!(parse_mode("0600").ok(), Some(0o600));
        assert_eq!(parse_mode("644").ok(), Some(0o644));
        assert!(parse_mode("0999").is_err());
        assert!(parse_mode("1777").is_err());
    }

    #[test]
    fn the_command_line_parses() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from([
            "capstan",
            "server",
            "--data-dir",
            "/tmp/x",
            "--datastore-endpoint",
            "http://127.0.0.1:2379",
        ])
        .ok();
        assert!(matches!(
            cli,
            Some(Cli { command: Command::Server(ref args) })
                if args.datastore_endpoint == "http://127.0.0.1:2379"
        ));
    }
}

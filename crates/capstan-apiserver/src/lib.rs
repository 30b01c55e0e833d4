//! The Capstan API server.
//!
//! Today it serves HTTPS with certificates it generates on first start ([`pki`]), authenticates
//! clients by x509 client certificate (user = CN, groups = O, as upstream), by a static bearer
//! token (`--token-auth-file`) or by a service account token it issued, writes an admin
//! kubeconfig, and answers `/healthz`, `/livez`, `/readyz` (with `?verbose`), `/version` and
//! `/metrics`; the web dashboard's static assets (`capstan-dashboard`) are served at
//! `/dashboard/` before authentication. Requests go through one chain (authentication, request info, authorization,
//! handler, metrics). Every other path is refused in upstream's `Status` shape (401 for
//! anonymous users, 403 for users outside `system:masters`, 404 otherwise) until the generic
//! registry serves the API.
//!
//! This is the only crate that touches `capstan-store`.

mod admission;
mod aggregator;
mod audit;
mod authn;
mod authz;
mod bootstrap;
mod conversion;
mod crds;
pub mod encryption;
mod endpoint_reconciler;
mod flowcontrol;
#[cfg(test)]
mod fuzz;
mod handlers;
mod identity;
mod impersonate;
mod join;
mod kubeconfig;
mod metrics;
pub mod pki;
mod registry;
mod remote;

mod serve;
pub mod server_join;
mod status;
#[cfg(test)]
mod test_support;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use capstan_store::Store;

pub use audit::webhook::{Batching as AuditWebhookBatching, Mode as AuditWebhookMode};
pub use authn::jwt::OidcFlags;
pub use authn::{AuthenticationOptions, TokenFile, TokenFileError, User};
pub use authz::Mode as AuthorizationMode;
pub use authz::controllers::controller_accounts;
pub use handlers::health::{BuildInfo, set_build_info};
pub use join::{STORAGE_USER, rotate_token, token as join_token};
pub use registry::services;
pub use registry::services::repair::RepairTiming;
pub use serve::{NodeCredentials, RunningServer};

/// How to run the API server.
#[derive(Clone, Debug)]
pub struct Config {
    /// The server's state directory; certificates go to `<data_dir>/tls`.
    pub data_dir: PathBuf,
    /// The address to listen on.
    pub bind_address: IpAddr,
    /// The HTTPS port (0 picks a free one).
    pub port: u16,
    /// Extra names and addresses for the serving certificate.
    pub tls_sans: Vec<String>,
    /// The TLS versions and cipher suites served (`--tls-min-version`, `--tls-cipher-suites`).
    pub tls: capstan_client::tls::TlsPolicy,
    /// Encryption at rest: an `EncryptionConfiguration` file (`--encryption-provider-config`).
    pub encryption_provider_config: Option<PathBuf>,
    /// Encrypt Secrets with a generated configuration (`<data-dir>/cred/encryption-config.json`)
    /// when no file is given (`--secrets-encryption`).
    pub secrets_encryption: bool,
    /// Auditing (`--audit-policy-file` with `--audit-log-path`).
    pub audit: Option<AuditConfig>,
    /// Where to write the admin kubeconfig.
    pub kubeconfig_path: PathBuf,
    /// The file mode of the kubeconfig.
    pub kubeconfig_mode: u32,
    /// Static bearer tokens (`--token-auth-file`).
    pub token_auth_file: Option<PathBuf>,
    /// External identities and anonymous requests (`--oidc-*`, `--authentication-config`,
    /// `--anonymous-auth`).
    pub authentication: AuthenticationOptions,
    /// The token review webhook (`--authentication-token-webhook-*`).
    pub authentication_token_webhook: Option<TokenWebhookConfig>,
    /// The authorizers (`--authorization-mode`, `--authorization-webhook-*`).
    pub authorization: AuthorizationConfig,
    /// The range service cluster IPs come from (`--service-cidr`).
    pub service_cidr: String,
    /// How the allocation repair loop runs (hidden flags, for tests; upstream's are fixed).
    pub allocation_repair: RepairTiming,
    /// The join secret (`--token`: a bare secret or a full `K10...` token); without one the
    /// secret saved by an earlier start, or a new one, is used.
    pub join_token: Option<String>,
    /// The address other machines and pods reach this server at (`--advertise-address`), which
    /// the `kubernetes` Service's endpoints list; none keeps them unwritten.
    pub advertise_address: Option<IpAddr>,
    /// Whether a new cluster gets the default `local-path` StorageClass (not with
    /// `--disable-default-storageclass`).
    pub default_storage_class: bool,
    /// The built-in Metrics API (`metrics.k8s.io`) scraping nodes at this period (metrics-server's
    /// `--metric-resolution`); `None` with `--disable-metrics-server`.
    pub metrics_server: Option<std::time::Duration>,
    /// The admission configuration file (`--admission-control-config-file`): upstream's
    /// `AdmissionConfiguration`, read at start (the PodSecurity plugin's defaults and
    /// exemptions).
    pub admission_control_config_file: Option<PathBuf>,
    /// How long the certificates the server issues to nodes directly last (a joining agent's,
    /// the server's own node's): `--cluster-signing-duration`, as those the CSR signer issues
    /// when the kubelet renews them.
    pub node_cert_lifetime: std::time::Duration,
    /// Whether the controller manager runs each controller under its own service account
    /// (`--use-service-account-credentials`): its user then has upstream's
    /// `system:kube-controller-manager` role only; otherwise it is also bound to
    /// `cluster-admin` (`capstan:controller-manager`).
    pub controller_credentials: bool,
    /// Whether `/dashboard/` serves the web dashboard (not with `--disable-dashboard`).
    pub dashboard: bool,
    /// Whether `/debug/pprof/` serves the process's profiles to users authorized for it
    /// (`--profiling`, on by default as upstream).
    pub profiling: bool,
}

/// The token review webhook (`--authentication-token-webhook-config-file`).
#[derive(Clone, Debug)]
pub struct TokenWebhookConfig {
    /// The kubeconfig file naming the service.
    pub config_file: PathBuf,
    /// `--authentication-token-webhook-cache-ttl` (2 m).
    pub cache_ttl: std::time::Duration,
    /// `--authentication-token-webhook-version` (`v1`, or `v1beta1`).
    pub version: String,
}

/// The authorizers asked, in order, after the `system:masters` group.
#[derive(Clone, Debug)]
pub struct AuthorizationConfig {
    /// `--authorization-mode` (default `Node,RBAC`).
    pub modes: Vec<AuthorizationMode>,
    /// The webhook, for mode `Webhook` (`--authorization-webhook-config-file`).
    pub webhook: Option<AuthorizationWebhookConfig>,
}

impl Default for AuthorizationConfig {
    fn default() -> Self {
        AuthorizationConfig {
            modes: vec![AuthorizationMode::Node, AuthorizationMode::Rbac],
            webhook: None,
        }
    }
}

/// The authorization webhook (`--authorization-webhook-*`).
#[derive(Clone, Debug)]
pub struct AuthorizationWebhookConfig {
    /// The kubeconfig file naming the service.
    pub config_file: PathBuf,
    /// `--authorization-webhook-version` (`v1`, or `v1beta1`).
    pub version: String,
    /// `--authorization-webhook-cache-authorized-ttl` (5 m).
    pub authorized_ttl: std::time::Duration,
    /// `--authorization-webhook-cache-unauthorized-ttl` (30 s).
    pub unauthorized_ttl: std::time::Duration,
}

/// The audit webhook (`--audit-webhook-*`).
#[derive(Clone, Debug)]
pub struct AuditWebhookConfig {
    /// The kubeconfig file naming the service.
    pub config_file: PathBuf,
    /// `--audit-webhook-mode`.
    pub mode: AuditWebhookMode,
    /// `--audit-webhook-batch-*`.
    pub batching: AuditWebhookBatching,
    /// `--audit-webhook-initial-backoff` (10 s).
    pub initial_backoff: std::time::Duration,
}

/// Where audit events go and which requests they record.
#[derive(Clone, Debug)]
pub struct AuditConfig {
    /// The `audit.k8s.io/v1` Policy.
    pub policy_file: PathBuf,
    /// The log file (`-`: standard output); none without `--audit-log-path`.
    pub log_path: Option<PathBuf>,
    /// The webhook backend.
    pub webhook: Option<AuditWebhookConfig>,
    /// `--audit-log-maxsize`: rotate past this many megabytes (0: never).
    pub max_size_mb: u64,
    /// `--audit-log-maxbackup`: rotated files kept (0: all).
    pub max_backups: usize,
    /// `--audit-log-maxage`: days rotated files are kept (0: forever).
    pub max_age_days: u64,
}

/// Why the API server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Certificates could not be read or created.
    #[error("certificates: {0}")]
    Pki(#[from] pki::PkiError),
    /// The token file could not be used.
    #[error(transparent)]
    TokenFile(#[from] TokenFileError),
    /// The TLS configuration was rejected.
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
    /// The serving TLS configuration could not be built.
    #[error("TLS configuration: {0}")]
    ServingTls(#[from] capstan_client::tls::TlsError),
    /// A setting is malformed.
    #[error("configuration: {0}")]
    Config(String),
    /// The default objects (system namespaces) could not be written.
    #[error("creating the default objects: {0}")]
    Defaults(String),
    /// The listening socket could not be opened.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// Starts the API server; it runs until the returned handle is dropped or shut down.
pub async fn start(config: Config, store: Store) -> Result<RunningServer, StartError> {
    start_with(config, store, |_| {}).await
}

/// [`start`], calling `bound` with the port once the admin kubeconfig is written and before
/// any request is answered.
pub(crate) async fn start_with(
    config: Config,
    store: Store,
    bound: impl FnOnce(u16),
) -> Result<RunningServer, StartError> {
    let encryption = match (
        &config.encryption_provider_config,
        config.secrets_encryption,
    ) {
        (Some(path), _) => Some(encryption::Encryption::load(path)),
        (None, true) => Some(encryption::Encryption::load_or_generate(
            &server_join::generated_encryption_config(&config.data_dir),
        )),
        (None, false) => None,
    }
    .transpose()
    .map_err(StartError::Config)?;
    let shared_datastore = store.backend_name() != "sqlite";
    let store = match &encryption {
        Some(encryption) => store.with_transformer(encryption.clone()),
        None => store,
    };
    let hostname = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_owned());
    let cidr = services::Cidr::parse(&config.service_cidr).map_err(StartError::Config)?;
    // In-cluster clients reach the server at the `kubernetes` Service's cluster IP (the first
    // of the range), so the serving certificate names it, as upstream's does.
    let mut sans = vec![cidr.first().to_string()];
    // Also the addresses it is reached at directly: the one it advertises (the `kubernetes`
    // endpoints, which agents learn and dial) and a specific bind address, as upstream's
    // self-signed certificate names its public address and k3s's its node addresses.
    sans.extend(config.advertise_address.map(|a| a.to_string()));
    if !config.bind_address.is_unspecified() {
        sans.push(config.bind_address.to_string());
    }
    sans.extend(config.tls_sans.iter().cloned());
    let names = pki::serving_names(hostname.as_deref(), &sans);
    let pki = pki::load_or_create(&config.data_dir.join("tls"), &names)?;
    let tokens = match &config.token_auth_file {
        Some(path) => TokenFile::load(path)?,
        None => TokenFile::default(),
    };
    let tls_dir = config.data_dir.join("tls");
    let kubelet_client = pki::component_client(
        &tls_dir,
        "kubelet-client",
        "kube-apiserver-kubelet-client",
        Some("system:masters"),
    )?;
    let kubelets = handlers::kubelets::Kubelets::new(&pki::kubelet_ca(&tls_dir)?, &kubelet_client)?;
    let signing_key =
        authn::serviceaccount::jws::SigningKey::from_pem(&pki::service_account_key(&tls_dir)?)
            .map_err(|e| StartError::Config(format!("{}: {e}", pki::SERVICE_ACCOUNT_KEY)))?;
    let front_proxy = pki::front_proxy(&tls_dir)?;
    let admission_config = match &config.admission_control_config_file {
        Some(path) => admission::config::load(path).map_err(StartError::Config)?,
        None => admission::config::AdmissionConfig::default(),
    };
    let mut api = handlers::resource::Api::with_services(&store, cidr)
        .with_admission_config(&admission_config)
        .with_kubelets(kubelets)
        .with_signing_key(signing_key);
    let metrics_api = match (config.metrics_server, api.kubelets()) {
        (Some(resolution), Some(kubelets)) => Some(handlers::resourcemetrics::MetricsApi::new(
            api.registries().clone(),
            kubelets.clone(),
            resolution,
        )),
        _ => None,
    };
    if let Some(metrics_api) = &metrics_api {
        api = api.with_metrics_api(metrics_api.clone());
    }
    let aggregator = std::sync::Arc::new(
        aggregator::Aggregator::new(api.registries().clone(), front_proxy.clone())
            .with_builtin_metrics(metrics_api.is_some()),
    );
    let api = std::sync::Arc::new(api);
    let registered = match aggregator::ensure_local(api.registries()).await {
        Ok(()) => aggregator::ensure_metrics(api.registries(), metrics_api.is_some()).await,
        Err(error) => Err(error),
    };
    let registered = match registered {
        Ok(()) => {
            aggregator::publish_authentication(api.registries(), &pki.ca_cert_pem, &front_proxy)
                .await
        }
        Err(error) => Err(error),
    };
    registered.map_err(|e| StartError::Defaults(e.status().to_json().to_string()))?;
    let join = join::Join::load_or_create(
        &config.data_dir,
        &tls_dir,
        &pki.ca_cert_pem,
        config.join_token.as_deref(),
    )?
    .with_node_lifetime(config.node_cert_lifetime);
    // A joining node never gets a certificate for a name of the API server's own.
    let mut reserved = vec![cidr.first().to_string()];
    reserved.extend(config.tls_sans.iter().cloned());
    let join = match (
        api.registries().core("secrets"),
        api.registries().core("nodes"),
    ) {
        (Some(secrets), Some(nodes)) => {
            join.with_objects(reserved, join::Objects { secrets, nodes })
        }
        _ => join,
    };
    let join = join.with_server_bootstrap(server_join::Source {
        tls_dir: tls_dir.clone(),
        encryption: match (
            &config.encryption_provider_config,
            config.secrets_encryption,
        ) {
            (Some(path), _) => server_join::Encryption::File(path.clone()),
            (None, true) => server_join::Encryption::Generated(
                server_join::generated_encryption_config(&config.data_dir),
            ),
            (None, false) => server_join::Encryption::None,
        },
        shared_datastore,
        namespaces: api.registries().core("namespaces"),
    });
    // The admin kubeconfig is written once the port is bound and before any request is
    // answered, so whoever sees the server ready can read it.
    let write_kubeconfig = |port: u16| {
        let host = if config.bind_address.is_unspecified() {
            "127.0.0.1".to_owned()
        } else {
            match config.bind_address {
                IpAddr::V6(ip) => format!("[{ip}]"),
                IpAddr::V4(ip) => ip.to_string(),
            }
        };
        let url = format!("https://{host}:{port}");
        kubeconfig::write_admin(&config.kubeconfig_path, config.kubeconfig_mode, &url, &pki)?;
        tracing::info!(%url, kubeconfig = %config.kubeconfig_path.display(), "API server listening");
        bound(port);
        Ok(())
    };
    let advertise = config.advertise_address;
    let port_of = |server: &RunningServer| server.local_addr().port();
    let identity_hostname = identity::os_hostname().map_err(StartError::Config)?;
    let master_leases = store.clone();
    let mut server = serve::listen(
        &config,
        &pki,
        tokens,
        store,
        api.clone(),
        aggregator.clone(),
        join,
        write_kubeconfig,
    )
    .await?;
    server
        .background
        .push(crds::start(api.registries().clone()));
    server.background.push(registry::services::repair::start(
        api.registries().clone(),
        api.allocators().clone(),
        config.allocation_repair,
    ));
    server
        .background
        .push(aggregator::available::start(aggregator));
    if let Some(metrics_api) = &metrics_api {
        server.background.push(metrics_api.run());
    }
    if let Some(encryption) = &encryption {
        server.background.push(encryption.watch_file());
    }
    let timing = identity::Timing::default();
    server.background.push(
        identity::IdentityLease::new(api.registries().clone(), &identity_hostname, timing).start(),
    );
    server.background.push(identity::start_gc(
        api.registries().clone(),
        timing.gc_period,
    ));
    if let Some(address) = advertise {
        let port = port_of(&server);
        server.endpoints = Some(endpoint_reconciler::Reconciler::start(
            api.registries().clone(),
            master_leases,
            address,
            port,
        ));
    }
    Ok(server)
}

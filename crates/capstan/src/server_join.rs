//! `capstan server --server URL --token TOKEN`: a server joining a running server's cluster,
//! as k3s servers join. Before anything is written, the joining server checks that it can
//! share the cluster (an etcd datastore, a token that pins the CA), fetches the secrets servers
//! share from `GET /v1-capstan/server-bootstrap` ([`capstan_kubelet::join::server_bootstrap`]),
//! checks that its encryption at rest matches the running server's and, once its datastore is
//! open, that the datastore holds that server's cluster; only then are the secrets written
//! under its data directory ([`capstan_apiserver::server_join::install`]). A data directory
//! that joined before restarts from its own files, without the first server.

use std::path::Path;

use anyhow::{Context, bail};
use capstan_apiserver::server_join::{self, ServerSecrets};
use capstan_store::{Endpoint, Store};

/// The secrets fetched from the running server, to be written once the datastore is checked.
pub(crate) struct Fetched {
    secrets: ServerSecrets,
    /// The CA bundle the token pinned.
    ca: String,
    /// The server they came from.
    server: String,
}

/// The server's encryption-at-rest flags, which must match the running server's.
pub(crate) struct EncryptionFlags<'a> {
    /// `--encryption-provider-config`.
    pub provider_config: Option<&'a Path>,
    /// `--secrets-encryption`.
    pub secrets_encryption: bool,
}

/// Prepares joining the cluster of the server at `server` with `token`: `None` when
/// `data_dir` joined it before (its own files are used), else the secrets to install with
/// [`install`]. Nothing is written here.
pub(crate) async fn fetch(
    server: &str,
    token: Option<&str>,
    endpoint: &Endpoint,
    data_dir: &Path,
    encryption: EncryptionFlags<'_>,
) -> anyhow::Result<Option<Fetched>> {
    let Some(token) = token.map(str::trim).filter(|t| !t.is_empty()) else {
        bail!(
            "--server needs --token: the server token of the running server (its \
             <data-dir>/token, K10<ca-hash>::server:<secret>)"
        );
    };
    if matches!(endpoint, Endpoint::Sqlite(_)) {
        bail!(
            "--server joins a cluster whose servers share an etcd: give this server the running \
             server's --datastore-endpoint (http://...), not SQLite"
        );
    }
    let parsed = capstan_kubelet::join::Token::parse(token);
    let Some(ca_hash) = parsed.ca_hash else {
        bail!(
            "--token must pin the running server's CA (K10<ca-hash>::server:<secret>, as in its \
             <data-dir>/token): the join fetches the cluster's CA keys"
        );
    };
    if server_join::joined(data_dir, &ca_hash)? {
        tracing::info!(
            data_dir = %data_dir.display(),
            "this data directory joined the cluster before: starting with its own secrets"
        );
        return Ok(None);
    }
    let (ca, body) = capstan_kubelet::join::server_bootstrap(server, token)
        .await
        .with_context(|| format!("cannot join the cluster of the server at {server}"))?;
    let secrets: ServerSecrets = serde_json::from_slice(&body)
        .with_context(|| format!("unreadable bootstrap answer from {server}"))?;
    server_join::check_encryption(
        &secrets,
        encryption.provider_config,
        encryption.secrets_encryption,
    )
    .context("this server cannot join")?;
    Ok(Some(Fetched {
        secrets,
        ca,
        server: server.to_owned(),
    }))
}

/// Checks that `store` holds the cluster `fetched` came from, then writes its secrets under
/// `data_dir`.
pub(crate) async fn install(
    fetched: Fetched,
    store: &Store,
    data_dir: &Path,
) -> anyhow::Result<()> {
    server_join::check_datastore(&fetched.secrets, store)
        .await
        .context("this server cannot join")?;
    server_join::install(data_dir, &fetched.secrets, &fetched.ca)
        .context("this server cannot join")?;
    tracing::info!(
        server = %fetched.server,
        data_dir = %data_dir.display(),
        "joined the cluster: wrote the secrets servers share"
    );
    Ok(())
}

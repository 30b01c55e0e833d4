//! `capstan token`: the join token's rotation and bootstrap tokens, as k3s's and kubeadm's
//! `token` commands. `rotate` rewrites `<data-dir>/token` (a running server accepts the new
//! secret at its next join, and no longer the old one); `create` makes a bootstrap token
//! Secret (`kube-system/bootstrap-token-<id>`) through the API and prints the join token that
//! carries it, pinned to the cluster CA.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use k8s_openapi::api::core::v1::Secret;

#[derive(Debug, Subcommand)]
pub(crate) enum TokenCommand {
    /// Replace the server's join token; prints the new token. Agents that joined keep their
    /// credentials; joining (and an agent's restart) needs the new token.
    Rotate(RotateArgs),
    /// Create a bootstrap token (`<id>.<secret>`) that authenticates as
    /// `system:bootstrap:<id>` and joins agents until it expires; prints the join token.
    Create(CreateArgs),
}

#[derive(Debug, Args)]
pub(crate) struct RotateArgs {
    /// The server's data directory.
    #[arg(long, env = "CAPSTAN_DATA_DIR", default_value_os_t = crate::default_data_dir())]
    data_dir: PathBuf,
    /// The new token or secret (default: a random one).
    #[arg(long)]
    new_token: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct CreateArgs {
    /// The server's data directory (its admin kubeconfig and CA are used).
    #[arg(long, env = "CAPSTAN_DATA_DIR", default_value_os_t = crate::default_data_dir())]
    data_dir: PathBuf,
    /// The kubeconfig to create the token with (default: `<data-dir>/kubeconfig.yaml`).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// How long the token is valid (`0`: forever), a Go duration.
    #[arg(long, default_value = "24h", value_parser = crate::parse_duration)]
    ttl: Duration,
    /// The extra groups the token authenticates with (each `system:bootstrappers:...`).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "system:bootstrappers:capstan:default-node-token"
    )]
    groups: Vec<String>,
    /// A description kept in the Secret.
    #[arg(long)]
    description: Option<String>,
}

fn random(len: usize) -> String {
    use capstan_client::credentials::{LOWER_ALPHANUMERIC, random_secret};
    random_secret(len, LOWER_ALPHANUMERIC)
}

pub(crate) async fn run(command: TokenCommand) -> anyhow::Result<()> {
    match command {
        TokenCommand::Rotate(args) => {
            let token = capstan_apiserver::rotate_token(&args.data_dir, args.new_token.as_deref())
                .context("cannot rotate the join token")?;
            println!("{token}");
            Ok(())
        }
        TokenCommand::Create(args) => create(args).await,
    }
}

async fn create(args: CreateArgs) -> anyhow::Result<()> {
    let ca_file = args.data_dir.join("tls").join("ca.crt");
    let ca = std::fs::read_to_string(&ca_file)
        .with_context(|| format!("cannot read the cluster CA {}", ca_file.display()))?;
    let kubeconfig = args
        .kubeconfig
        .unwrap_or_else(|| args.data_dir.join("kubeconfig.yaml"));
    let client = crate::client_from(Some(&kubeconfig), "capstan-token").await?;
    let (id, secret) = (random(6), random(16));
    let mut data = std::collections::BTreeMap::from([
        ("token-id".to_owned(), id.clone()),
        ("token-secret".to_owned(), secret.clone()),
        (
            "usage-bootstrap-authentication".to_owned(),
            "true".to_owned(),
        ),
        ("usage-bootstrap-signing".to_owned(), "true".to_owned()),
    ]);
    if !args.groups.is_empty() {
        data.insert("auth-extra-groups".to_owned(), args.groups.join(","));
    }
    if let Some(description) = args.description {
        data.insert("description".to_owned(), description);
    }
    if !args.ttl.is_zero() {
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        let seconds = i64::try_from(args.ttl.as_secs()).unwrap_or(i64::MAX / 2);
        let expiration = k8s_openapi::jiff::Timestamp::from_second(now.saturating_add(seconds))
            .context("--ttl is too long")?;
        data.insert("expiration".to_owned(), expiration.to_string());
    }
    let object = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(format!("bootstrap-token-{id}")),
            namespace: Some("kube-system".to_owned()),
            ..Default::default()
        },
        type_: Some("bootstrap.kubernetes.io/token".to_owned()),
        string_data: Some(data),
        ..Default::default()
    };
    kube::Api::<Secret>::namespaced(client, "kube-system")
        .create(&Default::default(), &object)
        .await
        .context("cannot create the bootstrap token Secret")?;
    let full = capstan_apiserver::join_token(&ca, &format!("{id}.{secret}"));
    // The join token's credentials part is the bare bootstrap token (no user name).
    println!("{}", full.replacen("::server:", "::", 1));
    Ok(())
}

//! An example operator written with kube-rs, as an operator author would write one, that runs
//! against `capstan server` unchanged.
//!
//! It serves the `Echo` kind (`example.capstan.dev/v1`, a CRD derived from the Rust type with
//! `kube::CustomResource`). For each Echo it
//! - keeps a finalizer (`echoes.example.capstan.dev/cleanup`) on it;
//! - applies (server-side apply, field manager `echo-operator`) a child ConfigMap
//!   `<name>-echo` holding the message `copies` times, owned by the Echo;
//! - records the Echo in a ledger ConfigMap (`echo-ledger` in the operator's namespace);
//! - reports `status.observedGeneration`, `status.configMap` and `status.ready` through the
//!   status subresource.
//!
//! When an Echo is deleted its finalizer holds it until the operator has taken it out of the
//! ledger (the child goes with its owner, by the garbage collector).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{Event, finalizer};
use kube::runtime::watcher;
use kube::{Client, CustomResource, Resource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The finalizer the operator keeps on every Echo.
pub const FINALIZER: &str = "echoes.example.capstan.dev/cleanup";
/// The field manager of the operator's writes.
pub const MANAGER: &str = "echo-operator";
/// The ledger of the Echoes the operator looks after, in its namespace.
pub const LEDGER: &str = "echo-ledger";

/// What an Echo asks for: a message, repeated.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "example.capstan.dev",
    version = "v1",
    kind = "Echo",
    namespaced,
    status = "EchoStatus",
    plural = "echoes",
    shortname = "ec",
    printcolumn = r#"{"name":"Message","type":"string","jsonPath":".spec.message"}"#,
    printcolumn = r#"{"name":"Ready","type":"boolean","jsonPath":".status.ready"}"#
)]
pub struct EchoSpec {
    /// The message.
    pub message: String,
    /// How many times the child ConfigMap repeats it.
    #[serde(default = "one")]
    pub copies: u32,
}

fn one() -> u32 {
    1
}

/// What the operator reports.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EchoStatus {
    /// The generation of the spec last acted on.
    pub observed_generation: Option<i64>,
    /// The child ConfigMap.
    pub config_map: Option<String>,
    /// Whether the child is up to date.
    pub ready: bool,
}

/// Why a reconciliation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("API: {0}")]
    Api(#[from] kube::Error),
    #[error("finalizer: {0}")]
    Finalizer(#[from] Box<kube::runtime::finalizer::Error<Error>>),
    #[error("the Echo has no namespace")]
    NoNamespace,
}

/// What reconciliations share.
struct Context {
    client: Client,
    /// The operator's own namespace, where the ledger is.
    namespace: String,
}

/// The child ConfigMap of `echo`, owned by it.
pub fn child(echo: &Echo) -> serde_json::Value {
    let owner = echo.controller_owner_ref(&());
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": format!("{}-echo", echo.name_any()),
            "ownerReferences": owner.into_iter().collect::<Vec<_>>(),
        },
        "data": {"message": vec![echo.spec.message.as_str(); echo.spec.copies as usize].join("\n")},
    })
}

/// The ledger's key for `echo`.
fn ledger_key(echo: &Echo) -> String {
    format!(
        "{}.{}",
        echo.namespace().unwrap_or_default(),
        echo.name_any()
    )
}

async fn apply(echo: Arc<Echo>, ctx: &Context) -> Result<Action, Error> {
    let namespace = echo.namespace().ok_or(Error::NoNamespace)?;
    let name = echo.name_any();
    let apply = PatchParams::apply(MANAGER).force();
    let children: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &namespace);
    let child = child(&echo);
    let child_name = child["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    children
        .patch(&child_name, &apply, &Patch::Apply(&child))
        .await?;
    let ledgers: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let entry = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": LEDGER},
                       "data": {ledger_key(&echo): echo.spec.message}});
    // Each Echo owns its own key of the ledger.
    let manager = PatchParams::apply(&format!("{MANAGER}-{}", ledger_key(&echo))).force();
    ledgers
        .patch(LEDGER, &manager, &Patch::Apply(&entry))
        .await?;
    let status = json!({"status": EchoStatus {
        observed_generation: echo.metadata.generation,
        config_map: Some(child_name),
        ready: true,
    }});
    let echoes: Api<Echo> = Api::namespaced(ctx.client.clone(), &namespace);
    echoes
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(Action::requeue(Duration::from_secs(300)))
}

async fn cleanup(echo: Arc<Echo>, ctx: &Context) -> Result<Action, Error> {
    let ledgers: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let manager = format!("{MANAGER}-{}", ledger_key(&echo));
    // Applying nothing as the Echo's manager takes its key out of the ledger.
    let empty = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": LEDGER}});
    ledgers
        .patch(
            LEDGER,
            &PatchParams::apply(&manager).force(),
            &Patch::Apply(&empty),
        )
        .await?;
    Ok(Action::await_change())
}

async fn reconcile(echo: Arc<Echo>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = echo.namespace().ok_or(Error::NoNamespace)?;
    let echoes: Api<Echo> = Api::namespaced(ctx.client.clone(), &namespace);
    finalizer(&echoes, FINALIZER, echo, |event| async {
        match event {
            Event::Apply(echo) => apply(echo, &ctx).await,
            Event::Cleanup(echo) => cleanup(echo, &ctx).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

fn error_policy(_: Arc<Echo>, error: &Error, _: Arc<Context>) -> Action {
    tracing::warn!(%error, "reconcile failed");
    Action::requeue(Duration::from_secs(1))
}

/// Runs the operator with `client` until the stream of reconciliations ends, keeping its
/// ledger in `namespace`.
pub async fn run(client: Client, namespace: &str) {
    let echoes: Api<Echo> = Api::all(client.clone());
    let children: Api<ConfigMap> = Api::all(client.clone());
    let ctx = Arc::new(Context {
        client,
        namespace: namespace.to_owned(),
    });
    Controller::new(echoes, watcher::Config::default())
        .owns(children, watcher::Config::default())
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok((echo, _)) => tracing::info!(echo = %echo.name, "reconciled"),
                Err(error) => tracing::debug!(%error, "reconcile error"),
            }
        })
        .await;
}

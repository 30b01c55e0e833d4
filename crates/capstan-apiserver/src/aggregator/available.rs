//! Upstream's APIService availability controller: the `Available` condition of every
//! APIService, checked when APIServices, Services or Endpoints change and every
//! [`RESYNC`] (the discovery request itself at most once per period while it succeeds). A local APIService is always available; one backed by a Service is available
//! once the Service exists (an ExternalName one as it is), listens on the APIService's port,
//! has a ready endpoint behind it, and answers a discovery request for the group-version with
//! a success (what it lists is kept for discovery). Each failure has upstream's reason and
//! message.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use capstan_api::apiregistration::APIService;
use capstan_api::field::go_quote;
use http_body_util::BodyExt as _;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{APIResource, APIResourceList, Time};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::{Aggregator, Remote};
use crate::registry::{Changes, ListOptions, Registry, WriteOptions};
use crate::status::ApiError;

/// How often every APIService is checked again without a change.
const RESYNC: Duration = Duration::from_secs(30);
/// How long a discovery check may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// An `Available` condition: status, reason, message.
type Verdict = (&'static str, &'static str, String);

/// Starts the controller.
pub(crate) fn start(aggregator: Arc<Aggregator>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let registries = aggregator.registries().clone();
        let Some(services) = registries.get("apiregistration.k8s.io", "v1", "apiservices") else {
            return;
        };
        let watched: Vec<Arc<Registry>> = [
            Some(services.clone()),
            registries.core("services"),
            registries.core("endpoints"),
        ]
        .into_iter()
        .flatten()
        .collect();
        let mut changes = Changes::new(watched);
        loop {
            if let Err(error) = check_all(&aggregator, &services).await {
                tracing::warn!(error = %error.status().to_json(), "cannot check APIServices");
            }
            changes.changed(RESYNC).await;
        }
    })
}

/// One pass over every APIService.
async fn check_all(aggregator: &Aggregator, services: &Registry) -> Result<(), ApiError> {
    let listed = services.list(None, &ListOptions::default()).await?;
    let remotes = aggregator.remotes().await;
    for item in &listed.items {
        let object = item.object();
        let Ok(service) = serde_json::from_value::<APIService>(object.clone()) else {
            continue;
        };
        let name = service.metadata.name.clone().unwrap_or_default();
        let remote = remotes.iter().find(|r| r.name == name);
        let verdict = check(aggregator, &service, remote.map(Arc::as_ref)).await;
        write(services, &name, object, verdict).await?;
    }
    Ok(())
}

/// Writes the `Available` condition when it changed (its transition time only when its
/// status did).
async fn write(
    services: &Registry,
    name: &str,
    mut object: Value,
    (status, reason, message): Verdict,
) -> Result<(), ApiError> {
    let conditions = object["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let current = conditions.iter().find(|c| c["type"] == "Available");
    if let Some(current) = current
        && current["status"] == status
        && current["reason"] == reason
        && current["message"] == message.as_str()
    {
        return Ok(());
    }
    let since = match current {
        Some(current) if current["status"] == status => current["lastTransitionTime"].clone(),
        _ => serde_json::to_value(Time(Timestamp::now())).unwrap_or(Value::Null),
    };
    let mut updated: Vec<Value> = conditions
        .into_iter()
        .filter(|c| c["type"] != "Available")
        .collect();
    updated.push(
        json!({"type": "Available", "status": status, "lastTransitionTime": since,
                        "reason": reason, "message": message}),
    );
    object["status"] = json!({"conditions": updated});
    match services
        .update(None, name, object, Some("status"), &WriteOptions::default())
        .await
    {
        Ok(_) => Ok(()),
        // Changed or removed meanwhile: the next pass sees it.
        Err(error) if matches!(error.status().code(), 404 | 409) => Ok(()),
        Err(error) => Err(error),
    }
}

/// The `Available` condition of one APIService (`remote`: how to reach it, unless local or
/// served here).
async fn check(aggregator: &Aggregator, service: &APIService, remote: Option<&Remote>) -> Verdict {
    let spec = service.spec.clone().unwrap_or_default();
    let Some(reference) = spec.service else {
        return (
            "True",
            "Local",
            "Local APIServices are always available".to_owned(),
        );
    };
    let Some(remote) = remote else {
        // A group-version this server serves itself: its own handlers answer.
        return (
            "True",
            "Local",
            "Local APIServices are always available".to_owned(),
        );
    };
    let (namespace, name) = (
        reference.namespace.unwrap_or_default(),
        reference.name.unwrap_or_default(),
    );
    let registries = aggregator.registries();
    let Some(found) = (match registries.core("services") {
        Some(services) => services.get(Some(&namespace), &name).await.ok(),
        None => None,
    }) else {
        aggregator.record(remote, None);
        return (
            "False",
            "ServiceNotFound",
            format!("service/{name} in {} is not present", go_quote(&namespace)),
        );
    };
    if found["spec"]["type"] != "ExternalName"
        && let Err(verdict) =
            endpoints_ready(aggregator, &found, &namespace, &name, remote.port).await
    {
        aggregator.record(remote, None);
        return verdict;
    }
    // Every Service and Endpoints change in the cluster wakes this controller: a server that
    // answered within the resync period is not asked again for it.
    if aggregator.answered_within(remote, RESYNC) {
        return ("True", "Passed", "all checks passed".to_owned());
    }
    match discover(aggregator, remote).await {
        Ok(resources) => {
            aggregator.record(remote, Some(resources));
            ("True", "Passed", "all checks passed".to_owned())
        }
        Err(why) => {
            aggregator.record(remote, None);
            ("False", "FailedDiscoveryCheck", why)
        }
    }
}

/// Whether the Service listens on `port` and has a ready endpoint for it.
async fn endpoints_ready(
    aggregator: &Aggregator,
    service: &Value,
    namespace: &str,
    name: &str,
    port: i32,
) -> Result<(), Verdict> {
    let quoted = go_quote(namespace);
    let Some(declared) = service["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["port"].as_i64() == Some(port.into()))
    else {
        return Err((
            "False",
            "ServicePortError",
            format!("service/{name} in {quoted} is not listening on port {port}"),
        ));
    };
    let port_name = declared["name"].as_str().unwrap_or_default();
    let endpoints = match aggregator.registries().core("endpoints") {
        Some(registry) => registry.get(Some(namespace), name).await.ok(),
        None => None,
    };
    let Some(endpoints) = endpoints else {
        return Err((
            "False",
            "EndpointsNotFound",
            format!("cannot find endpoints for service/{name} in {quoted}"),
        ));
    };
    let ready = endpoints["subsets"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|subset| {
            subset["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|p| p["name"].as_str().unwrap_or_default() == port_name)
                && subset["addresses"]
                    .as_array()
                    .is_some_and(|a| !a.is_empty())
        });
    if ready {
        Ok(())
    } else {
        Err((
            "False",
            "MissingEndpoints",
            format!(
                "endpoints for service/{name} in {quoted} have no addresses with port name {}",
                go_quote(port_name)
            ),
        ))
    }
}

/// Asks the extension API server for its resources of the group-version, as the aggregator
/// (`system:kube-aggregator` in `system:masters`): what it lists, or upstream's words for
/// why it did not answer.
async fn discover(aggregator: &Aggregator, remote: &Remote) -> Result<Vec<APIResource>, String> {
    let path = format!("/apis/{}/{}", remote.group, remote.version);
    let attempt = async {
        let (stream, address) = super::proxy::connect(aggregator, remote)
            .await
            .map_err(|why| {
                format!(
                    "failing or missing response from https://{}:{}{path}: {why}",
                    remote.server_name(),
                    remote.port
                )
            })?;
        let url = format!("https://{address}{path}");
        let failing = |why: String| format!("failing or missing response from {url}: {why}");
        let request = Request::builder()
            .uri(path.as_str())
            .header("host", format!("{}:{}", remote.server_name(), remote.port))
            .header("accept", "application/json")
            .header("x-remote-user", "system:kube-aggregator")
            .header("x-remote-group", "system:masters")
            .body(Body::empty())
            .map_err(|e| failing(e.to_string()))?;
        let response = crate::handlers::proxy::forward::send(Box::new(stream), request)
            .await
            .map_err(failing)?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| failing(e.to_string()))?
            .to_bytes();
        if !status.is_success() {
            return Err(failing(format!(
                "bad status from {url}: {}",
                status.as_u16()
            )));
        }
        let list: APIResourceList =
            serde_json::from_slice(&body).map_err(|e| failing(e.to_string()))?;
        Ok(list.resources)
    };
    match tokio::time::timeout(CHECK_TIMEOUT, attempt).await {
        Ok(answer) => answer,
        Err(_) => Err(format!(
            "failing or missing response from https://{}.{}.svc:{}{path}: context deadline exceeded",
            remote.service, remote.namespace, remote.port
        )),
    }
}

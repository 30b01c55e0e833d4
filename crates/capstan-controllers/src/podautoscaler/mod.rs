//! The HorizontalPodAutoscaler controller (upstream's `horizontalpodautoscaling`,
//! `pkg/controller/podautoscaler`): every `--horizontal-pod-autoscaler-sync-period` (and as soon
//! as an autoscaler is created or its spec changes) each `autoscaling/v2` autoscaler's target is
//! read through its scale subresource (any kind: the resource is found by discovery), its
//! metrics are read from the resource, custom and external metrics APIs, and the target is
//! scaled to what they ask for within the autoscaler's bounds and behavior.
//!
//! - [`sync`]: one sync (conditions, events, status), over [`sync::Access`].
//! - [`calculator`]: the replica calculator (ready, unready, missing pods; tolerance).
//! - [`behavior`]: stabilization windows and scaling policies, and what each autoscaler
//!   remembers between syncs.
//! - [`metrics`]: reading PodMetrics, custom and external metric values.
//! - [`monitor`]: the controller's own metrics (reconciliations, metric computations).
//!
//! Here: the controller's wiring, and [`Live`], the `Access` over the API.

pub mod behavior;
pub mod calculator;
pub mod metrics;
pub mod monitor;
pub mod sync;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use capstan_client::events::{EventRecorder, object_reference};
use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::Value;

use crate::runtime::{self, Change, Error, Queue, Setup, Task};
pub use sync::{Access, Autoscaler, Settings, Target};

use self::metrics::{CustomValue, ExternalValue, RawPodMetrics};

/// How long a group's discovered resources are trusted before being asked for again.
const DISCOVERY_TTL: Duration = Duration::from_secs(30);

/// The controller's shared state.
struct Context {
    autoscaler: Autoscaler,
    live: Live,
    pods: Store<Pod>,
    recorder: EventRecorder,
}

/// Registers the informer handlers and returns the controller's run future.
pub fn start(mut setup: Setup<'_>) -> Task {
    let hpas = setup.watch::<HorizontalPodAutoscaler>();
    let pods = setup.watch::<Pod>();
    let (queue, rx) = Queue::<HorizontalPodAutoscaler>::new();
    let settings = setup.config().horizontal_pod_autoscaler;
    let ctx = Arc::new(Context {
        autoscaler: Autoscaler::new(settings),
        live: Live::new(setup.client()),
        pods: pods.store(),
        recorder: setup.recorder("horizontal-pod-autoscaler"),
    });
    {
        // A new autoscaler, or a changed spec, is synced at once; then every sync period.
        let queue = queue.clone();
        let ctx = ctx.clone();
        hpas.on_change(move |change| match change {
            Change::Applied { old, new } => {
                let changed = old.as_ref().is_none_or(|old| {
                    old.metadata.generation != new.metadata.generation
                        || old.metadata.uid != new.metadata.uid
                });
                if changed {
                    queue.add(ObjectRef::from_obj(*new));
                }
            }
            Change::Deleted(gone) => ctx.autoscaler.forget(
                gone.metadata.namespace.as_deref().unwrap_or_default(),
                gone.metadata.name.as_deref().unwrap_or_default(),
            ),
        });
    }
    setup.run("horizontalpodautoscaler", &hpas, rx, ctx, reconcile)
}

/// One sync of an autoscaler; errors are reported and the autoscaler is synced again after the
/// sync period (upstream's fixed-interval queue), never sooner.
async fn reconcile(hpa: Arc<HorizontalPodAutoscaler>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = hpa.metadata.namespace.clone().unwrap_or_default();
    let name = hpa.metadata.name.clone().unwrap_or_default();
    let period = ctx.autoscaler.settings().sync_period;
    let pods = ctx
        .pods
        .state_filter(|p| p.metadata.namespace.as_deref() == Some(namespace.as_str()));
    let began = Instant::now();
    let outcome = ctx
        .autoscaler
        .sync(&ctx.live, &hpa, &pods, k8s_openapi::jiff::Timestamp::now())
        .await;
    monitor::reconciliation(outcome.action, outcome.failed(), began.elapsed());
    let reference = object_reference(&*hpa);
    for event in &outcome.events {
        ctx.recorder.record(
            reference.clone(),
            event.kind,
            event.reason,
            event.message.clone(),
        );
    }
    let before = serde_json::to_value(hpa.status.clone().unwrap_or_default()).unwrap_or_default();
    let after = serde_json::to_value(&outcome.status).unwrap_or_default();
    if before != after {
        let mut object = (*hpa).clone();
        object.status = Some(outcome.status);
        let api: Api<HorizontalPodAutoscaler> =
            Api::namespaced(ctx.live.client.clone(), &namespace);
        match api
            .replace_status(&name, &PostParams::default(), &object)
            .await
        {
            Ok(_) => {}
            Err(error) if runtime::is_not_found(&error) => return Ok(Action::await_change()),
            Err(error) => {
                let message = runtime::error_message(&error);
                ctx.recorder.record(
                    reference,
                    capstan_client::events::EventType::Warning,
                    "FailedUpdateStatus",
                    message.clone(),
                );
                tracing::warn!(hpa = %format!("{namespace}/{name}"), error = %message, "failed to update status");
            }
        }
    }
    if let Some(error) = outcome.error {
        tracing::warn!(hpa = %format!("{namespace}/{name}"), %error, "horizontal pod autoscaler sync failed");
    }
    Ok(Action::requeue(period))
}

/// A group's resources with their kinds, and when they were discovered.
type Discovered = (Instant, Vec<(Target, String)>);

/// The [`Access`] of a running controller: the API through its client, with a cache of
/// discovered groups (upstream's deferred discovery REST mapper).
pub struct Live {
    client: Client,
    groups: Mutex<HashMap<String, Discovered>>,
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Live").finish_non_exhaustive()
    }
}

impl Live {
    /// An access through `client`.
    pub fn new(client: Client) -> Live {
        Live {
            client,
            groups: Mutex::new(HashMap::new()),
        }
    }

    /// Every resource of `group` with its kind, the preferred version first; from the cache
    /// unless it is old or `fresh`.
    async fn group(&self, group: &str, fresh: bool) -> Result<Vec<(Target, String)>, String> {
        if !fresh {
            let cached = self
                .groups
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(group)
                .cloned();
            if let Some((at, resources)) = cached
                && at.elapsed() < DISCOVERY_TTL
            {
                return Ok(resources);
            }
        }
        let discovered = match kube::discovery::group(&self.client, group).await {
            Ok(discovered) => discovered,
            // A group not served: no resources (the caller says which kind it looked for).
            Err(kube::Error::Discovery(_)) => return Ok(Vec::new()),
            Err(other) => return Err(runtime::error_message(&other)),
        };
        let mut versions: Vec<String> = discovered.versions().map(str::to_owned).collect();
        if let Some(preferred) = discovered.preferred_version() {
            versions.retain(|v| v != preferred);
            versions.insert(0, preferred.to_owned());
        }
        let mut resources = Vec::new();
        for version in versions {
            for (resource, _) in discovered.versioned_resources(&version) {
                if resource.plural.contains('/') {
                    continue;
                }
                resources.push((
                    Target {
                        group: resource.group.clone(),
                        version: resource.version.clone(),
                        plural: resource.plural.clone(),
                    },
                    resource.kind.clone(),
                ));
            }
        }
        self.groups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(group.to_owned(), (Instant::now(), resources.clone()));
        Ok(resources)
    }

    fn dynamic(&self, target: &Target, namespace: &str) -> Api<DynamicObject> {
        let resource = ApiResource {
            group: target.group.clone(),
            version: target.version.clone(),
            api_version: if target.group.is_empty() {
                target.version.clone()
            } else {
                format!("{}/{}", target.group, target.version)
            },
            kind: String::new(),
            plural: target.plural.clone(),
        };
        Api::namespaced_with(self.client.clone(), namespace, &resource)
    }

    /// GETs `path` (with `query` pairs) and returns the JSON answer's `items`.
    async fn get_items(&self, path: &str, query: &[(&str, &str)]) -> Result<Vec<Value>, String> {
        let mut url = path.to_owned();
        let query: Vec<String> = query
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| format!("{k}={}", encode(v)))
            .collect();
        if !query.is_empty() {
            url.push('?');
            url.push_str(&query.join("&"));
        }
        let request = http::Request::get(url)
            .body(Vec::new())
            .map_err(|e| e.to_string())?;
        let answer: Value = self
            .client
            .request(request)
            .await
            .map_err(|e| runtime::error_message(&e))?;
        Ok(answer["items"].as_array().cloned().unwrap_or_default())
    }
}

/// Percent-encodes a query value.
fn encode(value: &str) -> String {
    let mut out = String::new();
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A path segment, percent-encoded.
fn segment(value: &str) -> String {
    encode(value)
}

impl Access for Live {
    async fn resources(&self, group: &str, kind: &str) -> Result<Vec<Target>, String> {
        let find = |resources: &[(Target, String)]| -> Vec<Target> {
            resources
                .iter()
                .filter(|(_, k)| k == kind)
                .map(|(t, _)| t.clone())
                .collect()
        };
        let found = find(&self.group(group, false).await?);
        if !found.is_empty() {
            return Ok(found);
        }
        // A kind just added (a new custom resource): discover again before giving up.
        let found = find(&self.group(group, true).await?);
        if found.is_empty() {
            return Err(format!("no matches for kind {kind:?} in group {group:?}"));
        }
        Ok(found)
    }

    async fn get_scale(
        &self,
        target: &Target,
        namespace: &str,
        name: &str,
    ) -> Result<Scale, String> {
        self.dynamic(target, namespace)
            .get_scale(name)
            .await
            .map_err(|e| runtime::error_message(&e))
    }

    async fn update_scale(
        &self,
        target: &Target,
        namespace: &str,
        scale: &Scale,
    ) -> Result<(), String> {
        let name = scale.metadata.name.clone().unwrap_or_default();
        self.dynamic(target, namespace)
            .replace_scale(&name, &PostParams::default(), scale)
            .await
            .map(|_| ())
            .map_err(|e| runtime::error_message(&e))
    }

    async fn pod_metrics(
        &self,
        namespace: &str,
        selector: &str,
    ) -> Result<Vec<RawPodMetrics>, String> {
        let resource = ApiResource {
            group: "metrics.k8s.io".into(),
            version: "v1beta1".into(),
            api_version: "metrics.k8s.io/v1beta1".into(),
            kind: "PodMetrics".into(),
            plural: "pods".into(),
        };
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &resource);
        let listed = api
            .list(&ListParams::default().labels(selector))
            .await
            .map_err(|e| runtime::error_message(&e))?;
        listed
            .items
            .iter()
            .map(|item| {
                let value = serde_json::to_value(item).map_err(|e| e.to_string())?;
                RawPodMetrics::from_json(&value)
            })
            .collect()
    }

    async fn pods_custom_metric(
        &self,
        namespace: &str,
        metric: &str,
        selector: &str,
        metric_selector: &str,
    ) -> Result<Vec<CustomValue>, String> {
        let path = format!(
            "/apis/custom.metrics.k8s.io/v1beta2/namespaces/{}/pods/*/{}",
            segment(namespace),
            segment(metric)
        );
        let items = self
            .get_items(
                &path,
                &[
                    ("labelSelector", selector),
                    ("metricLabelSelector", metric_selector),
                ],
            )
            .await?;
        items.iter().map(CustomValue::from_json).collect()
    }

    async fn object_custom_metric(
        &self,
        namespace: &str,
        resource: Option<&str>,
        name: &str,
        metric: &str,
        metric_selector: &str,
    ) -> Result<Vec<CustomValue>, String> {
        let path = match resource {
            Some(resource) => format!(
                "/apis/custom.metrics.k8s.io/v1beta2/namespaces/{}/{}/{}/{}",
                segment(namespace),
                segment(resource),
                segment(name),
                segment(metric)
            ),
            None => format!(
                "/apis/custom.metrics.k8s.io/v1beta2/namespaces/{}/metrics/{}",
                segment(namespace),
                segment(metric)
            ),
        };
        let items = self
            .get_items(&path, &[("metricLabelSelector", metric_selector)])
            .await?;
        items.iter().map(CustomValue::from_json).collect()
    }

    async fn external_metric(
        &self,
        namespace: &str,
        metric: &str,
        metric_selector: &str,
    ) -> Result<Vec<ExternalValue>, String> {
        let path = format!(
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/{}/{}",
            segment(namespace),
            segment(metric)
        );
        let items = self
            .get_items(&path, &[("labelSelector", metric_selector)])
            .await?;
        items.iter().map(ExternalValue::from_json).collect()
    }
}

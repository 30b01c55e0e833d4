//! The resource Metrics API built in: `metrics.k8s.io/v1beta1` `nodes` (NodeMetrics) and `pods`
//! (PodMetrics), as metrics-server serves them, so that `kubectl top` and the
//! HorizontalPodAutoscaler work without an add-on (`--disable-metrics-server` leaves the group
//! to an extension API server registered through aggregation).
//!
//! Every `--metric-resolution` (15 s, metrics-server's default) [`MetricsApi::run`] scrapes
//! each Ready node's kubelet at `/metrics/resource` (the API server's kubelet client
//! certificate, as the node proxy dials) and keeps the last two scrapes
//! (`capstan_api::resourcemetrics::Storage`); a request reads the usage between them for the
//! nodes or pods it names, listed (with its label and field selectors) from the watch cache.
//! The group's discovery is listed as an aggregated group-version with metrics-server's
//! priorities, and its requests come here after authentication and authorization
//! (`serve.rs`).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use capstan_api::printers::{self, IncludeObject, TableOptions};
use capstan_api::resourcemetrics::{self as metrics, Batch, List, Storage};
use capstan_api::{GroupResource, RequestInfo, StatusError};
use http_body_util::{BodyExt, Empty, Limited};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource;
use serde::Serialize;
use serde_json::Value;

use crate::handlers::kubelets::Kubelets;
use crate::handlers::resource::Output;
use crate::registry::{ListOptions, Registries};
use crate::status::ApiError;

/// The most a kubelet's answer may hold.
const MAX_SCRAPE_BYTES: usize = 16 << 20;

/// The group and version priorities of metrics-server's APIService.
pub(crate) const PRIORITY: (i32, i32) = (100, 100);

/// The built-in Metrics API: the last scrapes and what serves them.
pub(crate) struct MetricsApi {
    storage: RwLock<Storage>,
    registries: Arc<Registries>,
    kubelets: Arc<Kubelets>,
    resolution: Duration,
}

impl std::fmt::Debug for MetricsApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsApi")
            .field("resolution", &self.resolution)
            .finish_non_exhaustive()
    }
}

/// Unix nanoseconds now.
fn now_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// Whether a Node's `Ready` condition is `True`.
fn is_ready(node: &Value) -> bool {
    node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// An object's labels.
fn labels(object: &Value) -> BTreeMap<String, String> {
    object["metadata"]["labels"]
        .as_object()
        .map(|labels| {
            labels
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect()
        })
        .unwrap_or_default()
}

impl MetricsApi {
    /// The Metrics API over `registries`, scraping kubelets through `kubelets` every
    /// `resolution`.
    pub(crate) fn new(
        registries: Arc<Registries>,
        kubelets: Arc<Kubelets>,
        resolution: Duration,
    ) -> Arc<Self> {
        Arc::new(MetricsApi {
            storage: RwLock::new(Storage::new(
                i64::try_from(resolution.as_nanos()).unwrap_or(i64::MAX),
            )),
            registries,
            kubelets,
            resolution,
        })
    }

    /// The discovery entry of `metrics.k8s.io/v1beta1`, as metrics-server lists its resources.
    pub(crate) fn discovery() -> crate::handlers::discovery::RemoteVersion {
        let resource = |name: &str, kind: &str, namespaced: bool| APIResource {
            name: name.to_owned(),
            kind: kind.to_owned(),
            namespaced,
            singular_name: String::new(),
            verbs: vec!["get".to_owned(), "list".to_owned()],
            ..APIResource::default()
        };
        crate::handlers::discovery::RemoteVersion {
            group: metrics::GROUP,
            version: metrics::VERSION,
            group_priority: PRIORITY.0,
            version_priority: PRIORITY.1,
            resources: Some(vec![
                resource("nodes", "NodeMetrics", false),
                resource("pods", "PodMetrics", true),
            ]),
        }
    }

    /// Scrapes every resolution until the server stops.
    pub(crate) fn run(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let api = self.clone();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(api.resolution);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let batch = api.scrape_all().await;
                api.storage
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .store(batch);
            }
        })
    }

    /// One scrape of every Ready node, at once; a node that fails is left out (and logged).
    async fn scrape_all(&self) -> Batch {
        let Some(nodes) = self.registries.core("nodes") else {
            return Batch::default();
        };
        let cached = ListOptions {
            resource_version: Some("0".to_owned()),
            ..ListOptions::default()
        };
        let nodes = match nodes.list(None, &cached).await {
            Ok(list) => list.items,
            Err(error) => {
                tracing::warn!(error = %error.status().to_json(), "metrics: cannot list nodes");
                return Batch::default();
            }
        };
        // A little less than the period, so that one slow node does not delay the next scrape.
        let timeout = self.resolution.mul_f64(0.9);
        let scrapes = nodes.iter().map(|node| {
            let node = node.object();
            async move {
                let name = node["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                if !is_ready(&node) {
                    return None;
                }
                match tokio::time::timeout(timeout, self.scrape(&node, &name)).await {
                    Ok(Ok(batch)) => Some(batch),
                    Ok(Err(error)) => {
                        tracing::warn!(node = %name, %error, "metrics: failed to scrape node");
                        None
                    }
                    Err(_) => {
                        tracing::warn!(node = %name, ?timeout, "metrics: scraping node timed out");
                        None
                    }
                }
            }
        });
        let mut merged = Batch::default();
        for batch in futures::future::join_all(scrapes)
            .await
            .into_iter()
            .flatten()
        {
            merged.merge(batch);
        }
        merged
    }

    /// One node's `/metrics/resource`.
    async fn scrape(&self, node: &Value, name: &str) -> Result<Batch, String> {
        let (io, authority) = self.kubelets.dial(node).await?;
        let request = axum::http::Request::get("/metrics/resource")
            .header(header::HOST, authority)
            .header(header::ACCEPT, "text/plain;version=0.0.4")
            .body(Empty::<Bytes>::new())
            .map_err(|e| e.to_string())?;
        let response = capstan_stream::upgrade::send(io, request)
            .await
            .map_err(|e| format!("request failed: {e}"))?;
        let status = response.status();
        let body = Limited::new(response.into_body(), MAX_SCRAPE_BYTES)
            .collect()
            .await
            .map_err(|e| format!("reading the answer: {e}"))?
            .to_bytes();
        if !status.is_success() {
            return Err(format!(
                "request failed, status: {status}: {}",
                String::from_utf8_lossy(&body).trim()
            ));
        }
        let text = std::str::from_utf8(&body).map_err(|e| format!("not text: {e}"))?;
        metrics::parse(text, name, now_nanos() / 1_000_000)
    }

    /// A request under `/apis/metrics.k8s.io/v1beta1` (authenticated and authorized).
    pub(crate) async fn serve(&self, info: &RequestInfo, request: Request<Body>) -> Response {
        let (request, _) = request.into_parts();
        self.answer(info, &request)
            .await
            .unwrap_or_else(IntoResponse::into_response)
    }

    async fn answer(
        &self,
        info: &RequestInfo,
        request: &axum::http::request::Parts,
    ) -> Result<Response, ApiError> {
        let nodes = match info.resource.as_str() {
            "nodes" if info.namespace.is_empty() => true,
            "pods" => false,
            _ => return Err(ApiError::not_found()),
        };
        if !info.subresource.is_empty() {
            return Err(ApiError::not_found());
        }
        let resource = GroupResource::new(metrics::GROUP, &info.resource);
        if !matches!(info.verb.as_str(), "get" | "list") {
            return Err(StatusError::method_not_supported(resource, &info.verb).into());
        }
        let output = match crate::handlers::resource::negotiate(&request.headers)? {
            Output::Metadata { .. } => {
                return Err(
                    StatusError::not_acceptable(&["application/json", "application/yaml"]).into(),
                );
            }
            output => output,
        };
        let query = capstan_api::query::parse(request.uri.query());
        let table = TableOptions {
            include_object: IncludeObject::from_query(capstan_api::query::first(
                &query,
                "includeObject",
            ))
            .map_err(|e| ApiError::from(*e))?,
            no_headers: false,
        };
        let objects = self
            .registries
            .core(if nodes { "nodes" } else { "pods" })
            .ok_or_else(ApiError::not_found)?;
        let namespace = (!info.namespace.is_empty()).then_some(info.namespace.as_str());
        let now = now_nanos();
        if info.verb == "get" {
            // The node or pod must exist (its NotFound is the core one, as metrics-server's
            // listers answer), then have usage to report.
            let object = objects.read(namespace, &info.name, None).await?.object();
            let not_found = || {
                let name = match namespace {
                    Some(namespace) => format!("{namespace}/{}", info.name),
                    None => info.name.clone(),
                };
                ApiError::from(StatusError::not_found(resource, &name))
            };
            let found = self.usage_of(nodes, &object, now).ok_or_else(not_found)?;
            return Ok(match found {
                Metrics::Node(node) => respond(output, &node, |v| {
                    printers::object_table(Some(&metrics::PRINTER), v, &table, timestamp(now))
                }),
                Metrics::Pod(pod) => respond(output, &pod, |v| {
                    printers::object_table(Some(&metrics::PRINTER), v, &table, timestamp(now))
                }),
            });
        }
        let options = ListOptions {
            selectors: crate::registry::selectors::Selectors::parse(
                capstan_api::query::first(&query, "labelSelector"),
                capstan_api::query::first(&query, "fieldSelector"),
            )?,
            resource_version: Some("0".to_owned()),
            ..ListOptions::default()
        };
        let listed = objects.list(namespace, &options).await?;
        // In key order: by namespace, then name, as metrics-server sorts its lists.
        let found = listed
            .items
            .iter()
            .filter_map(|item| self.usage_of(nodes, &item.object(), now));
        let print = |items: &[Value]| {
            printers::list_table(
                Some(&metrics::PRINTER),
                &items.iter().collect::<Vec<_>>(),
                &printers::ListMeta::default(),
                &table,
                timestamp(now),
            )
        };
        Ok(if nodes {
            let items = found.filter_map(Metrics::node).collect();
            respond(output, &List::new("NodeMetricsList", items), |list| {
                print(list["items"].as_array().map_or(&[][..], Vec::as_slice))
            })
        } else {
            let items = found.filter_map(Metrics::pod).collect();
            respond(output, &List::new("PodMetricsList", items), |list| {
                print(list["items"].as_array().map_or(&[][..], Vec::as_slice))
            })
        })
    }

    /// The metrics of `object` (a Node when `node`, else a Pod), if it has usage to report.
    fn usage_of(&self, node: bool, object: &Value, now: i64) -> Option<Metrics> {
        let storage = self.storage.read().unwrap_or_else(|e| e.into_inner());
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        if node {
            let usage = storage.node(name)?;
            return Some(Metrics::Node(metrics::node_metrics(
                name,
                labels(object),
                &usage,
                now,
            )));
        }
        let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
        let usage = storage.pod(namespace, name)?;
        Some(Metrics::Pod(metrics::pod_metrics(
            namespace,
            name,
            labels(object),
            &usage,
            now,
        )))
    }
}

/// A node's or a pod's metrics.
enum Metrics {
    Node(metrics::NodeMetrics),
    Pod(metrics::PodMetrics),
}

impl Metrics {
    fn node(self) -> Option<metrics::NodeMetrics> {
        match self {
            Metrics::Node(node) => Some(node),
            Metrics::Pod(_) => None,
        }
    }

    fn pod(self) -> Option<metrics::PodMetrics> {
        match self {
            Metrics::Pod(pod) => Some(pod),
            Metrics::Node(_) => None,
        }
    }
}

/// The time `nanos` for printing.
fn timestamp(nanos: i64) -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::from_nanosecond(i128::from(nanos))
        .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
}

/// `object` as the client asked: JSON in upstream's field order, YAML, or the Table `table`
/// prints from its JSON value.
fn respond<T: Serialize>(
    output: Output,
    object: &T,
    table: impl FnOnce(&Value) -> Value,
) -> Response {
    let (content_type, body) = match output {
        Output::Yaml => (
            "application/yaml",
            serde_saphyr::to_string(object)
                .map(String::into_bytes)
                .unwrap_or_default(),
        ),
        Output::Table => {
            let value = serde_json::to_value(object).unwrap_or(Value::Null);
            let mut body = capstan_api::gojson::to_vec(&table(&value));
            body.push(b'\n');
            ("application/json", body)
        }
        _ => {
            let mut body = serde_json::to_vec(object).unwrap_or_default();
            body.push(b'\n');
            ("application/json", body)
        }
    };
    (StatusCode::OK, [(header::CONTENT_TYPE, content_type)], body).into_response()
}

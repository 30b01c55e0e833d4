//! `/metrics`: request counts and latencies under upstream's names and labels
//! (`apiserver_request_total`, `apiserver_request_duration_seconds`) and the objects stored per
//! resource (`apiserver_storage_objects`), followed by the process's other components'
//! (`capstan_client::metrics`), in the text format 0.0.4 or OpenMetrics as the client's
//! `Accept` asks (`capstan_client::prometheus`).

use std::sync::Arc;
use std::time::Duration;

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use capstan_api::RequestInfo;
use capstan_client::prometheus::{self, MetricFamily, MetricType, Sample};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

/// Upstream's request-duration buckets, in seconds.
const DURATION_BUCKETS: [f64; 23] = [
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0,
    10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    verb: String,
    dry_run: String,
    group: String,
    version: String,
    resource: String,
    subresource: String,
    scope: String,
    component: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CountLabels {
    #[prometheus(flatten)]
    request: RequestLabels,
    code: String,
}

/// The API server's metrics.
#[derive(Debug)]
pub(crate) struct Metrics {
    registry: Registry,
    requests: Family<CountLabels, Counter>,
    durations: Family<RequestLabels, Histogram, fn() -> Histogram>,
}

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

/// The verb as upstream's metrics report it: the HTTP method, except `LIST`, `WATCH` and `APPLY`.
fn metric_verb(info: &RequestInfo, method: &str, content_type: Option<&str>) -> String {
    let verb = match info.verb.as_str() {
        "list" => "LIST",
        "watch" => "WATCH",
        "patch" if content_type.is_some_and(|c| c.starts_with("application/apply-patch")) => {
            "APPLY"
        }
        "proxy" => "CONNECT",
        _ => match method {
            "HEAD" => "GET",
            "GET" | "POST" | "PUT" | "PATCH" | "DELETE" => method,
            _ => "other",
        },
    };
    verb.to_owned()
}

impl Metrics {
    pub(crate) fn new() -> Arc<Self> {
        let mut registry = Registry::default();
        let requests = Family::<CountLabels, Counter>::default();
        let durations = Family::<RequestLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            duration_histogram,
        );
        registry.register(
            "apiserver_request",
            "[STABLE] Counter of apiserver requests broken out for each verb, dry run value, group, \
             version, resource, scope, component, and HTTP response code",
            requests.clone(),
        );
        registry.register_with_unit(
            "apiserver_request_duration",
            "[STABLE] Response latency distribution in seconds for each verb, dry run value, group, \
             version, resource, subresource, scope and component",
            Unit::Seconds,
            durations.clone(),
        );
        Arc::new(Metrics {
            registry,
            requests,
            durations,
        })
    }

    /// Records one finished request.
    pub(crate) fn observe(
        &self,
        info: &RequestInfo,
        method: &str,
        content_type: Option<&str>,
        dry_run: bool,
        code: StatusCode,
        elapsed: Duration,
    ) {
        let request = RequestLabels {
            verb: metric_verb(info, method, content_type),
            dry_run: if dry_run { "All" } else { "" }.to_owned(),
            group: info.api_group.clone(),
            version: info.api_version.clone(),
            resource: info.resource.clone(),
            subresource: info.subresource.clone(),
            scope: info.scope().to_owned(),
            component: "apiserver".to_owned(),
        };
        self.durations
            .get_or_create(&request)
            .observe(elapsed.as_secs_f64());
        self.requests
            .get_or_create(&CountLabels {
                request,
                code: code.as_u16().to_string(),
            })
            .inc();
    }

    /// The metrics in the format the client accepts (`accept`: text 0.0.4 unless it asks for
    /// OpenMetrics): the server's own, then the process's (scheduler, controllers' queues), then
    /// the objects stored per resource (`counts`, upstream's `apiserver_storage_objects`).
    pub(crate) fn render(&self, accept: Option<&str>, counts: &[(String, i64)]) -> Response {
        let format = prometheus::negotiate(accept);
        let mut storage = MetricFamily::new(
            "apiserver_storage_objects",
            "[STABLE] Number of stored objects at the time of last check split by kind. In case of a fetching error, the value will be -1.",
            MetricType::Gauge,
        );
        storage.samples = counts
            .iter()
            .map(|(resource, count)| Sample::new(&[("resource", resource)], *count as f64))
            .collect();
        let body =
            prometheus::encode_registry(&self.registry, format, false).and_then(|mut body| {
                let process = capstan_client::metrics::registry();
                body.push_str(&prometheus::encode_registry(&process, format, false)?);
                body.push_str(&prometheus::encode_families(&[storage], format, true));
                Ok(body)
            });
        match body {
            Ok(body) => (
                StatusCode::OK,
                [(header::CONTENT_TYPE, format.content_type())],
                body,
            )
                .into_response(),
            Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_are_reported_as_upstream_reports_them() {
        let verb = |method: &str, path: &str, query: &str, ct: Option<&str>| {
            metric_verb(&RequestInfo::new(method, path, query), method, ct)
        };
        assert_eq!(verb("GET", "/api/v1/pods", "", None), "LIST");
        assert_eq!(verb("GET", "/api/v1/pods", "watch=true", None), "WATCH");
        assert_eq!(verb("GET", "/api/v1/namespaces/a/pods/x", "", None), "GET");
        assert_eq!(verb("POST", "/api/v1/namespaces/a/pods", "", None), "POST");
        assert_eq!(
            verb(
                "PATCH",
                "/api/v1/namespaces/a/pods/x",
                "",
                Some("application/apply-patch+yaml")
            ),
            "APPLY"
        );
        assert_eq!(
            verb("DELETE", "/api/v1/namespaces/a/pods", "", None),
            "DELETE"
        );
        assert_eq!(verb("GET", "/healthz", "", None), "GET");
        assert_eq!(verb("BREW", "/coffee", "", None), "other");
    }

    #[test]
    fn observed_requests_appear_under_upstream_names() {
        let metrics = Metrics::new();
        let info = RequestInfo::new("GET", "/api/v1/namespaces/a/pods", "");
        metrics.observe(
            &info,
            "GET",
            None,
            false,
            StatusCode::OK,
            Duration::from_millis(3),
        );
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &metrics.registry).unwrap();
        assert!(
            text.contains(
                "apiserver_request_total{verb=\"LIST\",dry_run=\"\",group=\"\",version=\"v1\",\
                 resource=\"pods\",subresource=\"\",scope=\"namespace\",component=\"apiserver\",\
                 code=\"200\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("apiserver_request_duration_seconds_bucket{le=\"0.005\",verb=\"LIST\""),
            "{text}"
        );
    }
}

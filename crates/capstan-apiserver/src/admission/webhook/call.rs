//! One webhook, compiled from its configuration, and calling it: the AdmissionReview it is
//! sent, where it is sent (a URL, or a Service resolved through its endpoints), and what its
//! answer means.

use std::sync::Arc;
use std::time::Duration;

use capstan_api::StatusError;
use capstan_api::field::go_quote;
use capstan_api::selector::LabelSelector;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, RuleWithOperations, ValidatingWebhook, WebhookClientConfig,
};
use rustls::pki_types::ServerName;
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::super::{Attributes, Operation};
use super::matching::{Rule, operation_name};
use crate::registry::Registries;
use crate::status::ApiError;

/// The largest answer read from a webhook.
const MAX_ANSWER: usize = 3 * 1024 * 1024;

/// Where a webhook is reached.
#[derive(Debug)]
pub(crate) enum Target {
    /// `https://host[:port][/path]`: the URL, and the host and port it names.
    Url {
        url: String,
        host: String,
        port: u16,
    },
    /// A port of a Service.
    Service {
        namespace: String,
        name: String,
        port: i32,
        path: String,
    },
}

/// One webhook, ready to match and call.
#[derive(Debug)]
pub(crate) struct Hook {
    /// The configuration it belongs to.
    pub configuration: String,
    pub name: String,
    pub rules: Vec<Rule>,
    pub namespace_selector: LabelSelector,
    pub object_selector: LabelSelector,
    /// `failurePolicy: Ignore`.
    pub ignore_failures: bool,
    pub timeout: Duration,
    /// `sideEffects`.
    pub side_effects: String,
    /// `reinvocationPolicy: IfNeeded`.
    pub reinvoke: bool,
    /// The AdmissionReview version it is sent (the first of its list the server speaks).
    pub review_version: Option<&'static str>,
    pub target: Target,
    /// Its TLS client, trusting its `caBundle`.
    tls: Result<Arc<rustls::ClientConfig>, String>,
    /// Connections kept between calls.
    idle: Idle,
    /// Its `matchConditions`: each one's name and compiled expression (or why it does not
    /// compile).
    pub conditions: Vec<(String, Result<capstan_api::cel::Expression, String>)>,
}

/// What a webhook answered.
#[derive(Debug)]
pub(crate) enum Called {
    /// Allowed, with a JSON patch for mutating webhooks.
    Allowed { patch: Option<Vec<u8>> },
    /// Refused, with the Status it gave.
    Refused { result: Option<Value> },
}

impl Called {
    /// The refusal, as upstream reports it.
    pub(crate) fn refusal(self, webhook: &str) -> ApiError {
        match self {
            Called::Refused { result } => super::refusal(webhook, result),
            Called::Allowed { .. } => super::refusal(webhook, None),
        }
    }
}

/// Why a review went unanswered: the transport failed, or what came back is no answer.
enum Why {
    Transport(String),
    Answer(String),
}

/// Why a webhook could not be called (upstream's `ErrCallingWebhook`, or a dry run it does
/// not support).
#[derive(Debug)]
pub(crate) enum Failure {
    Calling(String),
    DryRunUnsupported,
}

fn rules(rules: Option<&Vec<RuleWithOperations>>) -> Vec<Rule> {
    rules
        .into_iter()
        .flatten()
        .map(|rule| Rule {
            operations: rule.operations.clone().unwrap_or_default(),
            groups: rule.api_groups.clone().unwrap_or_default(),
            versions: rule.api_versions.clone().unwrap_or_default(),
            resources: rule.resources.clone().unwrap_or_default(),
            scope: rule.scope.clone().unwrap_or_else(|| "*".to_owned()),
        })
        .collect()
}

fn selector(
    selector: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
) -> LabelSelector {
    // Stored selectors were validated; one that no longer parses matches nothing.
    LabelSelector::from_api(selector).unwrap_or_else(|_| LabelSelector::nothing())
}

fn target(config: &WebhookClientConfig) -> Target {
    if let Some(service) = &config.service {
        return Target::Service {
            namespace: service.namespace.clone(),
            name: service.name.clone(),
            port: service.port.unwrap_or(443),
            path: service.path.clone().unwrap_or_default(),
        };
    }
    let url = config.url.clone().unwrap_or_default();
    let rest = url.strip_prefix("https://").unwrap_or(&url);
    let authority = rest.split('/').next().unwrap_or_default();
    let (host, port) = split_host_port(authority);
    Target::Url {
        url: url.clone(),
        host,
        port,
    }
}

/// `host[:port]`, IPv6 literals in brackets; 443 by default.
fn split_host_port(authority: &str) -> (String, u16) {
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']').unwrap_or((rest, ""));
        let port = after.strip_prefix(':').and_then(|p| p.parse().ok());
        return (host.to_owned(), port.unwrap_or(443));
    }
    match authority.rsplit_once(':') {
        Some((host, port)) => (host.to_owned(), port.parse().unwrap_or(443)),
        None => (authority.to_owned(), 443),
    }
}

fn tls(config: &WebhookClientConfig) -> Result<Arc<rustls::ClientConfig>, String> {
    let bundle = config
        .ca_bundle
        .as_ref()
        .map(|b| b.0.clone())
        .unwrap_or_default();
    capstan_client::tls::client_config_trusting(&bundle).map(Arc::new)
}

fn conditions(
    conditions: Option<&[k8s_openapi::api::admissionregistration::v1::MatchCondition]>,
) -> Vec<(String, Result<capstan_api::cel::Expression, String>)> {
    conditions
        .unwrap_or_default()
        .iter()
        .map(|c| {
            (
                c.name.clone(),
                capstan_api::cel::Expression::compile(&c.expression),
            )
        })
        .collect()
}

fn review_version(versions: &[String]) -> Option<&'static str> {
    versions.iter().find_map(|v| match v.as_str() {
        "v1" => Some("v1"),
        "v1beta1" => Some("v1beta1"),
        _ => None,
    })
}

impl Hook {
    /// A validating webhook of `configuration`, compiled.
    pub(crate) fn validating(configuration: &str, hook: &ValidatingWebhook) -> Self {
        Hook {
            configuration: configuration.to_owned(),
            name: hook.name.clone(),
            rules: rules(hook.rules.as_ref()),
            namespace_selector: selector(hook.namespace_selector.as_ref()),
            object_selector: selector(hook.object_selector.as_ref()),
            ignore_failures: hook.failure_policy.as_deref() == Some("Ignore"),
            timeout: Duration::from_secs(hook.timeout_seconds.unwrap_or(10).clamp(1, 30) as u64),
            side_effects: hook.side_effects.clone(),
            reinvoke: false,
            review_version: review_version(&hook.admission_review_versions),
            target: target(&hook.client_config),
            tls: tls(&hook.client_config),
            idle: Idle::default(),
            conditions: conditions(hook.match_conditions.as_deref()),
        }
    }

    /// A mutating webhook: its fields are a validating webhook's and the reinvocation policy.
    pub(crate) fn mutating(configuration: &str, hook: &MutatingWebhook) -> Self {
        let shared = serde_json::to_value(hook)
            .and_then(serde_json::from_value::<ValidatingWebhook>)
            .unwrap_or_default();
        Hook {
            reinvoke: hook.reinvocation_policy.as_deref() == Some("IfNeeded"),
            ..Hook::validating(configuration, &shared)
        }
    }

    /// What a failure to call this webhook means: a refusal under `Fail`, nothing under
    /// `Ignore` (but a dry run it does not support is refused either way).
    pub(crate) fn failed(&self, failure: Failure) -> Result<(), ApiError> {
        match failure {
            Failure::DryRunUnsupported => Err(StatusError::bad_request(&format!(
                "admission webhook {} does not support dry run",
                go_quote(&self.name)
            ))
            .into()),
            Failure::Calling(reason) => {
                let message = format!("failed calling webhook {}: {reason}", go_quote(&self.name));
                if self.ignore_failures {
                    tracing::warn!(configuration = %self.configuration, webhook = %self.name, %reason, "failed calling webhook, failing open");
                    Ok(())
                } else {
                    tracing::warn!(configuration = %self.configuration, webhook = %self.name, %reason, "failed calling webhook, failing closed");
                    Err(StatusError::internal(&message).into())
                }
            }
        }
    }

    /// The URL the webhook is called at, with the timeout it is told of.
    fn url(&self) -> String {
        let timeout = format!("?timeout={}s", self.timeout.as_secs());
        match &self.target {
            Target::Url { url, .. } => format!("{url}{timeout}"),
            Target::Service {
                namespace,
                name,
                port,
                path,
            } => format!("https://{name}.{namespace}.svc:{port}{path}{timeout}"),
        }
    }

    /// Sends the AdmissionReview of this request; the webhook's answer, checked.
    pub(crate) async fn call(
        &self,
        table: &Arc<Registries>,
        attrs: &Attributes<'_>,
        object: Option<&Value>,
        old: Option<&Value>,
        mutating: bool,
    ) -> Result<Called, Failure> {
        if attrs.dry_run && !matches!(self.side_effects.as_str(), "None" | "NoneOnDryRun") {
            return Err(Failure::DryRunUnsupported);
        }
        let Some(version) = self.review_version else {
            return Err(Failure::Calling(
                "webhook does not accept known AdmissionReview versions (v1, v1beta1)".to_owned(),
            ));
        };
        let uid = crate::registry::object::new_uid();
        let review = review(version, &uid, attrs, object, old);
        let url = self.url();
        let answer = tokio::time::timeout(self.timeout, self.post(table, &url, &review))
            .await
            .unwrap_or_else(|_| Err(Why::Transport("context deadline exceeded".to_owned())))
            .map_err(|why| {
                Failure::Calling(match why {
                    // Go's url.Error names the request.
                    Why::Transport(why) => {
                        format!("failed to call webhook: Post {}: {why}", go_quote(&url))
                    }
                    Why::Answer(why) => format!("failed to call webhook: {why}"),
                })
            })?;
        let called = verify(version, &uid, &answer, mutating).map_err(Failure::Calling)?;
        if let Some(sink) = attrs.warnings {
            for warning in answer["response"]["warnings"]
                .as_array()
                .into_iter()
                .flatten()
            {
                sink.add(warning.as_str().unwrap_or_default());
            }
        }
        Ok(called)
    }

    /// Where to connect, and the name the webhook's certificate must carry.
    async fn resolve(&self, table: &Arc<Registries>) -> Result<(String, String), String> {
        match &self.target {
            Target::Url { host, port, .. } => Ok((join(host, *port), host.clone())),
            Target::Service {
                namespace,
                name,
                port,
                ..
            } => {
                let server_name = format!("{name}.{namespace}.svc");
                let address = resolve_service(table, namespace, name, *port).await?;
                Ok((address, server_name))
            }
        }
    }

    async fn post(&self, table: &Arc<Registries>, url: &str, review: &Value) -> Result<Value, Why> {
        self.exchange(table, url, review)
            .await
            .map_err(Why::Transport)?
            .map_err(Why::Answer)
    }

    /// Sends the review; the transport's failure, or the answer (its body, or why it is not
    /// an answer).
    async fn exchange(
        &self,
        table: &Arc<Registries>,
        url: &str,
        review: &Value,
    ) -> Result<Result<Value, String>, String> {
        let (address, server_name) = self.resolve(table).await?;
        let idle = self.idle.take(&address);
        let reused = idle.is_some();
        let mut sender = match idle {
            Some(sender) => sender,
            None => self.connect(&address, server_name.clone()).await?,
        };
        // What follows the authority: the path (at least `/`) and the timeout query.
        let rest = url.strip_prefix("https://").unwrap_or(url);
        let (host, path_and_query) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
        let path_and_query = if path_and_query.starts_with('/') {
            path_and_query.to_owned()
        } else {
            format!("/{path_and_query}")
        };
        let host = host.to_owned();
        let body = serde_json::to_vec(review).map_err(|e| e.to_string())?;
        let request = http::Request::post(path_and_query)
            .header(http::header::HOST, host)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json, */*")
            .header(http::header::USER_AGENT, "capstan-apiserver")
            .body(Full::new(bytes::Bytes::from(body)))
            .map_err(|e| e.to_string())?;
        let response = match sender.send_request(request.clone()).await {
            Ok(response) => response,
            // A kept connection the webhook closed meanwhile: once more on a new one.
            Err(_) if reused => {
                sender = self.connect(&address, server_name).await?;
                sender
                    .send_request(request)
                    .await
                    .map_err(|e| e.to_string())?
            }
            Err(e) => return Err(e.to_string()),
        };
        let status = response.status();
        let bytes = Limited::new(response.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        self.idle.keep(address, sender);
        if !status.is_success() {
            return Ok(Err(answer_error(status.as_u16(), &bytes)));
        }
        Ok(serde_json::from_slice(&bytes).map_err(|e| format!("json parse error: {e}")))
    }
}

impl Hook {
    /// A new connection to the webhook at `address`, its certificate checked for `server_name`.
    async fn connect(&self, address: &str, server_name: String) -> Result<Sender, String> {
        let tls = TlsConnector::from(self.tls.clone()?);
        let tcp = TcpStream::connect(address)
            .await
            .map_err(|e| crate::status::dial_error(address, &e))?;
        let _ = tcp.set_nodelay(true);
        let name = ServerName::try_from(server_name).map_err(|e| e.to_string())?;
        let stream = tls
            .connect(name, tcp)
            .await
            .map_err(|e| format!("tls: {e}"))?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(sender)
    }
}

/// An HTTP/1.1 connection to a webhook.
type Sender = hyper::client::conn::http1::SendRequest<Full<bytes::Bytes>>;

/// How many idle connections to one webhook are kept.
const IDLE_CONNECTIONS: usize = 32;

/// A webhook's idle connections, by address, reused by later calls (as Go's transport keeps
/// them), so that a call does not pay a TLS handshake each time.
#[derive(Default)]
struct Idle(std::sync::Mutex<Vec<(String, Sender)>>);

impl std::fmt::Debug for Idle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Idle").finish_non_exhaustive()
    }
}

impl Idle {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(String, Sender)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An idle connection to `address` that is still open.
    fn take(&self, address: &str) -> Option<Sender> {
        let mut idle = self.lock();
        idle.retain(|(_, sender)| !sender.is_closed());
        let at = idle.iter().rposition(|(a, _)| a == address)?;
        Some(idle.swap_remove(at).1)
    }

    /// Keeps a connection whose exchange is over, while there is room.
    fn keep(&self, address: String, sender: Sender) {
        let mut idle = self.lock();
        if idle.len() < IDLE_CONNECTIONS && sender.is_ready() {
            idle.push((address, sender));
        }
    }
}

fn join(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// What client-go makes of an answer that is not a success: its Status's message if it is
/// one, else upstream's generic words.
fn answer_error(code: u16, body: &[u8]) -> String {
    if let Ok(status) = serde_json::from_slice::<Value>(body)
        && status["kind"] == "Status"
        && let Some(message) = status["message"].as_str()
    {
        return message.to_owned();
    }
    match code {
        404 => "the server could not find the requested resource".to_owned(),
        _ => format!(
            "an error on the server ({}) has prevented the request from succeeding",
            go_quote(String::from_utf8_lossy(body).trim())
        ),
    }
}

/// An address of a ready endpoint behind `port` of a Service (an ExternalName's host and that
/// port), as upstream's endpoint service resolver finds one.
async fn resolve_service(
    table: &Arc<Registries>,
    namespace: &str,
    name: &str,
    port: i32,
) -> Result<String, String> {
    let not_found = || format!("service {} not found", go_quote(name));
    let services = table.core("services").ok_or_else(not_found)?;
    let service = services
        .get(Some(namespace), name)
        .await
        .map_err(|_| not_found())?;
    let spec = &service["spec"];
    if spec["type"] == "ExternalName" {
        let host = spec["externalName"].as_str().unwrap_or_default();
        return Ok(join(host, port as u16));
    }
    let declared = spec["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["port"].as_i64() == Some(port.into()))
        .ok_or_else(|| {
            format!(
                "no service port {port} found for service {}",
                go_quote(name)
            )
        })?;
    let port_name = declared["name"].as_str().unwrap_or_default();
    let no_endpoints = || format!("no endpoints available for service {}", go_quote(name));
    let endpoints = table
        .core("endpoints")
        .ok_or_else(no_endpoints)?
        .get(Some(namespace), name)
        .await
        .map_err(|_| no_endpoints())?;
    let mut candidates = Vec::new();
    for subset in endpoints["subsets"].as_array().into_iter().flatten() {
        let Some(number) = subset["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"].as_str().unwrap_or_default() == port_name)
            .and_then(|p| p["port"].as_u64())
        else {
            continue;
        };
        for address in subset["addresses"].as_array().into_iter().flatten() {
            if let Some(ip) = address["ip"].as_str() {
                candidates.push(join(ip, number as u16));
            }
        }
    }
    if candidates.is_empty() {
        return Err(no_endpoints());
    }
    Ok(candidates.swap_remove(rand::random_range(0..candidates.len())))
}

/// The user a request is admitted as; the server's own writes are the API server's.
fn user_info(attrs: &Attributes<'_>) -> Value {
    match attrs.user {
        Some(user) => {
            let mut info = json!({"username": user.name, "groups": user.groups});
            if !user.uid.is_empty() {
                info["uid"] = user.uid.clone().into();
            }
            if !user.extra.is_empty() {
                info["extra"] = json!(user.extra);
            }
            info
        }
        None => {
            json!({"username": "system:apiserver", "groups": ["system:authenticated", "system:masters"]})
        }
    }
}

/// The AdmissionReview of a request, in `version`.
pub(crate) fn review(
    version: &str,
    uid: &str,
    attrs: &Attributes<'_>,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Value {
    let resource = attrs.resource;
    // A subresource's body (a Scale, connect options) is its own kind.
    let own_kind = object
        .filter(|_| !attrs.subresource.is_empty())
        .and_then(|o| Some((o["apiVersion"].as_str()?, o["kind"].as_str()?)))
        .filter(|(_, kind)| *kind != resource.kind);
    let kind = match own_kind {
        Some((api_version, kind)) => {
            let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
            json!({"group": group, "version": version, "kind": kind})
        }
        None => {
            json!({"group": resource.group, "version": resource.version, "kind": resource.kind})
        }
    };
    let gvr =
        json!({"group": resource.group, "version": resource.version, "resource": resource.plural});
    let options = match attrs.operation {
        Operation::Create => Some("CreateOptions"),
        Operation::Update => Some("UpdateOptions"),
        Operation::Delete => Some("DeleteOptions"),
        // Upstream sends connect requests without options.
        Operation::Connect => None,
    }
    .map(|kind| {
        let mut options = json!({"kind": kind, "apiVersion": "meta.k8s.io/v1"});
        if attrs.dry_run {
            options["dryRun"] = json!(["All"]);
        }
        options
    });
    let mut request = json!({
        "uid": uid,
        "kind": kind,
        "resource": gvr,
        "requestKind": kind,
        "requestResource": gvr,
        "name": attrs.name,
        "namespace": attrs.namespace,
        "operation": operation_name(attrs.operation),
        "userInfo": user_info(attrs),
        "object": object.cloned().unwrap_or(Value::Null),
        "oldObject": old.cloned().unwrap_or(Value::Null),
        "dryRun": attrs.dry_run,
        "options": options,
    });
    if options.is_none() {
        request.as_object_mut().map(|r| r.remove("options"));
    }
    if !attrs.subresource.is_empty() {
        request["subResource"] = attrs.subresource.into();
        request["requestSubResource"] = attrs.subresource.into();
    }
    if attrs.name.is_empty() {
        request.as_object_mut().map(|r| r.remove("name"));
    }
    if attrs.namespace.is_empty() {
        request.as_object_mut().map(|r| r.remove("namespace"));
    }
    json!({
        "apiVersion": format!("admission.k8s.io/{version}"),
        "kind": "AdmissionReview",
        "request": request,
    })
}

/// Upstream's `VerifyAdmissionResponse`: the answer of a `version` review with `uid`.
pub(crate) fn verify(
    version: &str,
    uid: &str,
    answer: &Value,
    mutating: bool,
) -> Result<Called, String> {
    let response = &answer["response"];
    if !response.is_object() {
        return Err("webhook response was absent".to_owned());
    }
    let patch = response["patch"].as_str().filter(|p| !p.is_empty());
    let patch_type = &response["patchType"];
    if version == "v1" {
        let got = response["uid"].as_str().unwrap_or_default();
        if got != uid {
            return Err(format!(
                "expected response.uid={}, got {}",
                go_quote(uid),
                go_quote(got)
            ));
        }
        let (api_version, kind) = (
            answer["apiVersion"].as_str().unwrap_or_default(),
            answer["kind"].as_str().unwrap_or_default(),
        );
        if api_version != "admission.k8s.io/v1" || kind != "AdmissionReview" {
            let (group, gv_version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
            return Err(format!(
                "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {group}/{gv_version}, Kind={kind}"
            ));
        }
        if mutating {
            if patch.is_some() && patch_type.is_null() {
                return Err("webhook returned response.patch but not response.patchType".to_owned());
            }
            if patch.is_none() && !patch_type.is_null() {
                return Err("webhook returned response.patchType but not response.patch".to_owned());
            }
            if let Some(kind) = patch_type.as_str()
                && kind != "JSONPatch"
            {
                return Err(if kind.is_empty() {
                    format!(
                        "webhook returned invalid response.patchType of {}",
                        go_quote(kind)
                    )
                } else {
                    format!("unsupported patch type {}", go_quote(kind))
                });
            }
        } else {
            if patch.is_some() {
                return Err("validating webhook may not return response.patch".to_owned());
            }
            if !patch_type.is_null() {
                return Err("validating webhook may not return response.patchType".to_owned());
            }
        }
    }
    if response["allowed"].as_bool() != Some(true) {
        let result = response.get("status").filter(|s| s.is_object()).cloned();
        return Ok(Called::Refused { result });
    }
    let patch = match patch.filter(|_| mutating) {
        Some(patch) => Some(super::decode_patch(patch)?),
        None => None,
    };
    Ok(Called::Allowed { patch })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(response: Value) -> Value {
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
    }

    #[test]
    fn answers_are_checked_as_upstream_checks_them() {
        let ok = verify(
            "v1",
            "u",
            &answer(json!({"uid": "u", "allowed": true})),
            false,
        )
        .unwrap();
        assert!(matches!(ok, Called::Allowed { patch: None }));
        assert_eq!(
            verify(
                "v1",
                "u",
                &answer(json!({"uid": "x", "allowed": true})),
                false
            )
            .unwrap_err(),
            "expected response.uid=\"u\", got \"x\""
        );
        assert_eq!(
            verify(
                "v1",
                "u",
                &json!({"apiVersion": "v1", "kind": "Pod", "response": {"uid": "u"}}),
                false
            )
            .unwrap_err(),
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got /v1, Kind=Pod"
        );
        assert_eq!(
            verify("v1", "u", &json!({}), false).unwrap_err(),
            "webhook response was absent"
        );
        assert_eq!(
            verify(
                "v1",
                "u",
                &answer(json!({"uid": "u", "allowed": true, "patch": "W10="})),
                false
            )
            .unwrap_err(),
            "validating webhook may not return response.patch"
        );
        assert_eq!(
            verify(
                "v1",
                "u",
                &answer(json!({"uid": "u", "allowed": true, "patch": "W10="})),
                true
            )
            .unwrap_err(),
            "webhook returned response.patch but not response.patchType"
        );
        let patched = verify(
            "v1",
            "u",
            &answer(
                json!({"uid": "u", "allowed": true, "patch": "W10=", "patchType": "JSONPatch"}),
            ),
            true,
        )
        .unwrap();
        assert!(matches!(patched, Called::Allowed { patch: Some(p) } if p == b"[]"));
        // v1beta1 answers are not checked for their uid or kind.
        let old = verify(
            "v1beta1",
            "u",
            &json!({"response": {"allowed": false}}),
            false,
        )
        .unwrap();
        assert!(matches!(old, Called::Refused { result: None }));
    }

    #[test]
    fn refusals_read_as_upstreams() {
        let status = |e: ApiError| e.status().to_json();
        let denied = status(super::super::refusal(
            "deny.example.com",
            Some(json!({"code": 403, "message": "no pods named bad"})),
        ));
        assert_eq!(denied["code"], 403);
        assert_eq!(
            denied["message"],
            "admission webhook \"deny.example.com\" denied the request: no pods named bad"
        );
        let bare = status(super::super::refusal("deny.example.com", None));
        assert_eq!(bare["code"], 400);
        assert_eq!(
            bare["message"],
            "admission webhook \"deny.example.com\" denied the request without explanation"
        );
    }

    #[test]
    fn mutating_webhooks_keep_every_field_and_their_reinvocation() {
        let hook: MutatingWebhook = serde_json::from_value(json!({
            "name": "m.example.com", "sideEffects": "None", "admissionReviewVersions": ["v1beta1"],
            "failurePolicy": "Ignore", "timeoutSeconds": 3, "reinvocationPolicy": "IfNeeded",
            "clientConfig": {"service": {"namespace": "ns", "name": "svc", "port": 8443, "path": "/m"}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "objectSelector": {"matchLabels": {"a": "b"}},
            "matchConditions": [{"name": "c", "expression": "true"}],
        }))
        .unwrap();
        let hook = Hook::mutating("conf", &hook);
        assert!(hook.reinvoke && hook.ignore_failures);
        assert_eq!(hook.timeout, Duration::from_secs(3));
        assert_eq!(hook.review_version, Some("v1beta1"));
        assert_eq!(hook.rules.len(), 1);
        assert_eq!(hook.conditions.len(), 1);
        assert_eq!(hook.url(), "https://svc.ns.svc:8443/m?timeout=3s");
        assert!(!hook.object_selector.is_empty());
    }

    #[test]
    fn urls_split_into_host_and_port() {
        let config = |url: &str| WebhookClientConfig {
            url: Some(url.to_owned()),
            ..WebhookClientConfig::default()
        };
        let Target::Url { host, port, .. } = target(&config("https://127.0.0.1:8443/v")) else {
            panic!()
        };
        assert_eq!((host.as_str(), port), ("127.0.0.1", 8443));
        let Target::Url { host, port, .. } = target(&config("https://[::1]")) else {
            panic!()
        };
        assert_eq!((host.as_str(), port), ("::1", 443));
    }
}

//! The REST surface of the API: resource requests routed by their [`RequestInfo`] to the
//! generic registry of the resource, query parameters read as upstream reads them, request
//! bodies decoded (JSON or YAML, with size and depth limits), patches applied, and responses
//! written (objects, lists, watch streams, `Status`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use capstan_api::catalog::{Resource, Serves, Stream};
use capstan_api::printers::{self, IncludeObject, TableOptions};
use capstan_api::{GroupResource, RequestInfo, StatusError};
use capstan_store::Store;
use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use crate::admission::{Attributes, Operation};
use crate::authn::User;
use crate::registry::object::meta_str;
use crate::registry::selectors::Selectors;
use crate::registry::services::Cidr;
use crate::registry::strict::{self, Source};
use crate::registry::{
    DeleteOptions, Deleted, FieldValidation, ListOptions, Registries, Registry, WatchOptions,
    WriteOptions, Written,
};
use crate::status::ApiError;

/// The largest request body accepted, as upstream (3 MiB).
pub(crate) const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// The resource handlers: every request for a resource, routed to its registry.
pub(crate) struct Api {
    registries: Arc<Registries>,
    service_cidr: Cidr,
    /// The Service allocators (the `services` registry's write hooks; their repair loop runs
    /// beside the server).
    allocators: Arc<crate::registry::services::Allocators>,
    /// The admission chain (NamespaceLifecycle, LimitRanger, ServiceAccount, NodeRestriction,
    /// Priority, DefaultTolerationSeconds, ResourceQuota).
    admission: Arc<crate::admission::Chain>,
    /// Connections to kubelets, for the pod subresources served by nodes; without them those
    /// subresources are unavailable.
    kubelets: Option<Arc<crate::handlers::kubelets::Kubelets>>,
    /// The built-in Metrics API, unless turned off.
    metrics_api: Option<Arc<crate::handlers::resourcemetrics::MetricsApi>>,
    /// Issues (`serviceaccounts/token`) and checks service account tokens.
    tokens: Arc<crate::authn::serviceaccount::TokenAuthority>,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("registries", &self.registries)
            .finish()
    }
}

/// The query parameters of a request, first value of each.
pub(crate) struct Query(HashMap<String, String>);

impl Query {
    pub(crate) fn parse(query: &str) -> Self {
        let mut map = HashMap::new();
        for (k, v) in form_urlencoded::parse(query.as_bytes()) {
            map.entry(k.into_owned()).or_insert_with(|| v.into_owned());
        }
        Query(map)
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    fn flag(&self, key: &str) -> bool {
        self.get(key)
            .is_some_and(|v| matches!(v, "true" | "1" | "True" | "TRUE"))
    }

    fn int(&self, key: &str) -> Result<Option<i64>, ApiError> {
        match self.get(key).filter(|v| !v.is_empty()) {
            None => Ok(None),
            Some(text) => text.parse().map(Some).map_err(|_| {
                StatusError::bad_request(&format!(
                    "invalid value {text:?} for query parameter {key}"
                ))
                .into()
            }),
        }
    }

    fn dry_run(&self) -> Result<bool, ApiError> {
        match self.get("dryRun") {
            None | Some("") => Ok(false),
            Some("All") => Ok(true),
            Some(other) => Err(StatusError::invalid(
                "meta.k8s.io",
                "CreateOptions",
                "",
                &[capstan_api::field::FieldError::not_supported(
                    &capstan_api::field::Path::new("dryRun"),
                    other,
                    &["All"],
                )],
            )
            .into()),
        }
    }

    fn field_validation(&self) -> Result<FieldValidation, ApiError> {
        match self.get("fieldValidation") {
            None | Some("") | Some("Warn") => Ok(FieldValidation::Warn),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some(other) => Err(StatusError::bad_request(&format!(
                "fieldValidation parameter unsupported: {other}. Supported values: Ignore, Warn, Strict"
            ))
            .into()),
        }
    }

    fn write_options(&self) -> Result<WriteOptions, ApiError> {
        Ok(WriteOptions {
            dry_run: self.dry_run()?,
            field_validation: self.field_validation()?,
            source: Source::Opaque,
            writer: None,
            force_allow_create: false,
            below_strategy: false,
            admission: None,
        })
    }

    /// The options of a create, update or patch, with the field manager that records it:
    /// `fieldManager` (at most 128 printable characters; required for an apply), or else the
    /// `User-Agent` up to its first `/`. `options_kind` names the options type in errors
    /// (`CreateOptions`, `UpdateOptions`, `PatchOptions`); `apply` is set for patches.
    fn recorded_write_options(
        &self,
        headers: &HeaderMap,
        options_kind: &str,
        apply: Option<bool>,
    ) -> Result<WriteOptions, ApiError> {
        use capstan_api::field::{FieldError, Path};
        let mut options = self.write_options()?;
        let manager = self.get("fieldManager").unwrap_or_default();
        let path = Path::new("fieldManager");
        let mut errors = Vec::new();
        match apply {
            Some(true) if manager.is_empty() => {
                errors.push(FieldError::required(&path, "is required for apply patch"));
            }
            Some(false) if self.get("force").is_some() => {
                errors.push(FieldError::forbidden(
                    &Path::new("force"),
                    "may not be specified for non-apply patch",
                ));
            }
            _ => {}
        }
        if manager.len() > 128 {
            errors.push(FieldError::too_long(&path, 128));
        }
        for (i, c) in manager.chars().enumerate() {
            if c.is_control() {
                errors.push(FieldError::invalid(
                    &path,
                    manager,
                    &format!("invalid character U+{:04X} (at position {i})", u32::from(c)),
                ));
            }
        }
        if !errors.is_empty() {
            return Err(StatusError::invalid("meta.k8s.io", options_kind, "", &errors).into());
        }
        let manager = if manager.is_empty() {
            let agent = headers
                .get(header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            let prefix = agent.split('/').next().unwrap_or_default();
            let mut out = String::new();
            for c in prefix.chars().filter(|c| !c.is_control()) {
                if out.len() + c.len_utf8() > 128 {
                    break;
                }
                out.push(c);
            }
            out
        } else {
            manager.to_owned()
        };
        options.writer = Some(crate::registry::fields::Writer {
            manager,
            force: self.flag("force"),
        });
        Ok(options)
    }

    fn selectors(&self) -> Result<Selectors, ApiError> {
        Selectors::parse(self.get("labelSelector"), self.get("fieldSelector"))
    }
}

/// The current time for printing ages.
fn now() -> Timestamp {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Timestamp::new(i64::try_from(since.as_secs()).unwrap_or(i64::MAX), 0)
        .unwrap_or(Timestamp::UNIX_EPOCH)
}

/// What the client accepts in a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Output {
    Json,
    Yaml,
    /// A `meta.k8s.io` Table (JSON), rows printed for the resource.
    Table,
    /// Only the metadata: `PartialObjectMetadata` (`list: false`) or `PartialObjectMetadataList`
    /// of `meta.k8s.io` `version` (JSON), as metadata-only informers ask for.
    Metadata {
        /// Whether the list kind was asked for.
        list: bool,
        /// `v1` or `v1beta1`.
        version: &'static str,
    },
}

impl Output {
    /// The form for objects that have no table (subresource kinds, statuses): JSON or YAML.
    fn plain(self) -> Output {
        match self {
            Output::Table => Output::Json,
            other => other,
        }
    }

    /// The output of an endpoint that cannot print a Table at all (reviews, bindings,
    /// evictions, token requests: upstream's REST handlers without a table convertor, whose
    /// content negotiation refuses the Table media type with 406 before anything is done).
    fn untabled(self) -> Result<Output, ApiError> {
        match self {
            Output::Table => {
                Err(StatusError::not_acceptable(&["application/json", "application/yaml"]).into())
            }
            other => Ok(other),
        }
    }
}

/// Reads the `Accept` header: the first media type served wins, as upstream negotiates.
pub(crate) fn negotiate(headers: &HeaderMap) -> Result<Output, ApiError> {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return Ok(Output::Json);
    };
    for media in accept.split(',') {
        let mut params = media.split(';').map(str::trim);
        let mime = params.next().unwrap_or_default();
        let params: Vec<&str> = params.collect();
        let has = |p: &str| params.contains(&p);
        if has("as=Table") {
            if mime == "application/json"
                && has("g=meta.k8s.io")
                && (has("v=v1") || has("v=v1beta1"))
            {
                return Ok(Output::Table);
            }
            continue;
        }
        let partial = has("as=PartialObjectMetadata");
        if partial || has("as=PartialObjectMetadataList") {
            if matches!(mime, "application/json" | "*/*" | "application/*") && has("g=meta.k8s.io")
            {
                if has("v=v1") {
                    return Ok(Output::Metadata {
                        list: !partial,
                        version: "v1",
                    });
                }
                if has("v=v1beta1") {
                    return Ok(Output::Metadata {
                        list: !partial,
                        version: "v1beta1",
                    });
                }
            }
            continue;
        }
        if params.iter().any(|p| p.starts_with("as=")) {
            // Other conversions (discovery kinds) are not served here.
            continue;
        }
        match mime {
            "application/json" | "*/*" | "application/*" | "" => return Ok(Output::Json),
            "application/yaml" => return Ok(Output::Yaml),
            _ => {}
        }
    }
    Err(StatusError::not_acceptable(&["application/json", "application/yaml"]).into())
}

fn table_options(query: &Query) -> Result<TableOptions, ApiError> {
    Ok(TableOptions {
        include_object: IncludeObject::from_query(query.get("includeObject"))
            .map_err(|e| ApiError::from(*e))?,
        no_headers: false,
    })
}

/// One object as the client asked for it: itself, or a Table of one row.
fn respond_object(
    code: StatusCode,
    resource: &Resource,
    object: &Value,
    output: Output,
    query: &Query,
    warnings: &[String],
) -> Result<Response, ApiError> {
    if let Output::Metadata { list, version } = output
        && object["kind"] != "Status"
    {
        if list {
            return Err(metadata_arity_error(resource, true));
        }
        return Ok(respond(
            code,
            &partial_metadata(object, version),
            output,
            warnings,
        ));
    }
    if output == Output::Table && object["kind"] != "Status" {
        let table = printers::object_table(
            resource.printer.as_ref(),
            object,
            &table_options(query)?,
            now(),
        );
        return Ok(respond(code, &table, Output::Json, warnings));
    }
    Ok(respond(code, object, output, warnings))
}

/// The `PartialObjectMetadata` of an object.
fn partial_metadata(object: &Value, version: &str) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": format!("meta.k8s.io/{version}"),
        "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// Upstream's 406 for metadata asked for in the wrong arity: a list kind for one object, or
/// the reverse.
fn metadata_arity_error(resource: &Resource, asked_list: bool) -> ApiError {
    let go_type = format!("*{}.{}", resource.version, resource.kind);
    let message = if asked_list {
        format!(
            "you requested PartialObjectMetadataList, but the requested object is not a list ({go_type})"
        )
    } else {
        format!(
            "you requested PartialObjectMetadata, but the requested object is a list ({go_type}List)"
        )
    };
    StatusError::not_acceptable_because(&message).into()
}

fn respond(code: StatusCode, value: &Value, output: Output, warnings: &[String]) -> Response {
    match output {
        Output::Json | Output::Table | Output::Metadata { .. } => {
            respond_bytes(code, &capstan_api::gojson::to_vec(value), warnings)
        }
        Output::Yaml => with_warnings(
            (
                code,
                [(header::CONTENT_TYPE, "application/yaml")],
                serde_saphyr::to_string(value)
                    .map(String::into_bytes)
                    .unwrap_or_default(),
            )
                .into_response(),
            warnings,
        ),
    }
}

/// A JSON body already serialised, ended with a newline as upstream's encoder ends it.
fn respond_bytes(code: StatusCode, json: &[u8], warnings: &[String]) -> Response {
    let mut body = Vec::with_capacity(json.len() + 1);
    body.extend_from_slice(json);
    body.push(b'\n');
    with_warnings(
        (code, [(header::CONTENT_TYPE, "application/json")], body).into_response(),
        warnings,
    )
}

fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    for warning in warnings {
        let text = format!("299 - \"{}\"", warning.replace('"', "\\\""));
        if let Ok(value) = HeaderValue::from_str(&text) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    response
}

/// Reads a request body, refusing bodies over the limit.
async fn read_bytes(body: Body) -> Result<bytes::Bytes, ApiError> {
    axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|_| {
            ApiError::from(StatusError::request_entity_too_large(&format!(
                "limit is {MAX_BODY_BYTES}"
            )))
        })
}

/// Reads a request body, refusing bodies over the limit and malformed documents. Returns the
/// document and what strict field validation needs to know of it.
async fn read_body(body: Body, content_type: Option<&str>) -> Result<(Value, Source), ApiError> {
    parse_body(read_bytes(body).await?, content_type)
}

/// Parses a document whose strictness nobody checks (options, a `Scale`).
fn parse_document(bytes: &bytes::Bytes, content_type: Option<&str>) -> Result<Value, ApiError> {
    parse_body(bytes.clone(), content_type).map(|(value, _)| value)
}

pub(crate) fn parse_body(
    bytes: bytes::Bytes,
    content_type: Option<&str>,
) -> Result<(Value, Source), ApiError> {
    let mime = content_type
        .unwrap_or("application/json")
        .split(';')
        .next()
        .unwrap_or_default()
        .trim();
    match mime {
        "application/json" | "" => match strict::parse_json(&bytes) {
            Ok((value, repeats)) => Ok((value, Source::Json { bytes, repeats })),
            Err(e) => Err(StatusError::bad_request(&format!(
                "couldn't get version/kind; json parse error: {e}"
            ))
            .into()),
        },
        "application/yaml" => {
            let text = std::str::from_utf8(&bytes).map_err(|_| {
                ApiError::from(StatusError::bad_request("the YAML body is not UTF-8"))
            })?;
            let (value, repeats) = strict::parse_yaml(text).map_err(|e| {
                ApiError::from(StatusError::bad_request(&format!(
                    "error converting YAML to JSON: {e}"
                )))
            })?;
            Ok((value, Source::Yaml { repeats }))
        }
        // What kubectl 1.32+ and client-go's typed clients send for built-in kinds.
        capstan_api::protobuf::MEDIA_TYPE => capstan_api::protobuf::decode(&bytes)
            .map(|(_, _, object)| (object, Source::Opaque))
            .map_err(|e| {
                StatusError::bad_request(&format!("error decoding protobuf body: {e}")).into()
            }),
        _ => Err(StatusError::unsupported_media_type(&[
            "application/json",
            "application/yaml",
            capstan_api::protobuf::MEDIA_TYPE,
        ])
        .into()),
    }
}

/// Adds the warnings the write's admission gave to the response's.
fn admission_warnings(options: &crate::registry::WriteOptions, warnings: &mut Vec<String>) {
    if let Some(admission) = &options.admission {
        warnings.extend(admission.take_warnings());
    }
}

/// Who opens a connect request and its query, taken from the request (whose body may not be
/// held across an await).
fn connect_request(request: &Request<Body>) -> (Option<crate::authn::User>, String) {
    (
        request.extensions().get::<crate::authn::User>().cloned(),
        request.uri().query().unwrap_or_default().to_owned(),
    )
}

/// The options object of a connect request, as upstream decodes it from the query (and for
/// proxies the path after the subresource): `PodExecOptions`, `PodAttachOptions`,
/// `PodPortForwardOptions`, or `Pod`/`Service`/`NodeProxyOptions`.
fn connect_options(plural: &str, subresource: &str, query: &str, parts: &[String]) -> Value {
    let values = capstan_api::query::parse(Some(query));
    let all = |key: &str| values.get(key).cloned().unwrap_or_default();
    // A malformed flag is the streaming handler's to refuse; here it reads as unset.
    let flag = |key: &str| crate::handlers::streaming::boolean(&values, key).unwrap_or(false);
    let text = |key: &str| capstan_api::query::first(&values, key).map(str::to_owned);
    let mut options = serde_json::Map::new();
    let kind = match (plural, subresource) {
        (_, "exec" | "attach") => {
            for key in ["stdin", "stdout", "stderr", "tty"] {
                if flag(key) {
                    options.insert(key.to_owned(), true.into());
                }
            }
            if let Some(container) = text("container") {
                options.insert("container".to_owned(), container.into());
            }
            if subresource == "exec" {
                let command: Vec<Value> = all("command").into_iter().map(Value::from).collect();
                options.insert("command".to_owned(), command.into());
                "PodExecOptions"
            } else {
                "PodAttachOptions"
            }
        }
        (_, "portforward") => {
            let ports: Vec<Value> = all("ports")
                .iter()
                .flat_map(|p| p.split(',').map(str::to_owned).collect::<Vec<_>>())
                .filter_map(|p| p.trim().parse::<i64>().ok())
                .map(Value::from)
                .collect();
            if !ports.is_empty() {
                options.insert("ports".to_owned(), ports.into());
            }
            "PodPortForwardOptions"
        }
        (plural, _) => {
            // /api/v1/namespaces/ns/pods/name/proxy/<path>: what follows the subresource.
            let after = parts
                .iter()
                .position(|p| p == subresource)
                .map(|i| parts[i + 1..].join("/"))
                .unwrap_or_default();
            let path = text("path").unwrap_or(after);
            if !path.is_empty() {
                options.insert(
                    "path".to_owned(),
                    format!("/{}", path.trim_start_matches('/')).into(),
                );
            }
            match plural {
                "services" => "ServiceProxyOptions",
                "nodes" => "NodeProxyOptions",
                _ => "PodProxyOptions",
            }
        }
    };
    options.insert("kind".to_owned(), kind.into());
    options.insert("apiVersion".to_owned(), "v1".into());
    Value::Object(options)
}

/// An object as a list item: upstream's typed lists do not repeat kind and apiVersion.
fn as_item(mut object: Value) -> Value {
    if let Some(map) = object.as_object_mut() {
        map.remove("kind");
        map.remove("apiVersion");
    }
    object
}

impl Api {
    /// The API over `store`, allocating service IPs from `service_cidr`.
    pub(crate) fn with_services(store: &Store, service_cidr: Cidr) -> Self {
        let allocators = Arc::new(crate::registry::services::Allocators::new(
            service_cidr,
            store.clone(),
        ));
        let registries = Arc::new_cyclic(|me| {
            allocators.bind(me.clone());
            Registries::new(
                store,
                &crate::registry::services::write_hooks_for(allocators.clone()),
                me.clone(),
            )
        });
        let admission = Arc::new(crate::admission::Chain::new(
            crate::admission::Registries::from_table(&registries),
        ));
        let lookups = crate::authn::serviceaccount::Lookups::from_table(&registries);
        // A key in memory until the server's own is given (`with_signing_key`).
        let key = crate::authn::serviceaccount::jws::SigningKey::generate()
            .map_err(|error| tracing::warn!(%error, "cannot make a service account key"))
            .ok();
        let tokens = Arc::new(crate::authn::serviceaccount::TokenAuthority::new(
            key, lookups,
        ));
        Api {
            registries,
            service_cidr,
            allocators,
            admission,
            kubelets: None,
            metrics_api: None,
            tokens,
        }
    }

    /// This API signing service account tokens with `key` (the server's persistent key).
    pub(crate) fn with_signing_key(
        mut self,
        key: crate::authn::serviceaccount::jws::SigningKey,
    ) -> Self {
        self.tokens = Arc::new(self.tokens.with_key(key));
        self
    }

    /// The Service allocators.
    pub(crate) fn allocators(&self) -> &Arc<crate::registry::services::Allocators> {
        &self.allocators
    }

    /// What issues and checks service account tokens.
    pub(crate) fn tokens(&self) -> &Arc<crate::authn::serviceaccount::TokenAuthority> {
        &self.tokens
    }

    pub(crate) fn registry(
        &self,
        group: &str,
        version: &str,
        resource: &str,
    ) -> Option<Arc<Registry>> {
        self.registries.get(group, version, resource)
    }

    /// Every resource's registry.
    pub(crate) fn registries(&self) -> &Arc<Registries> {
        &self.registries
    }

    /// The range service cluster IPs come from.
    pub(crate) fn service_cidr(&self) -> Cidr {
        self.service_cidr
    }

    /// This API with its admission plugins configured by `config` (the admission
    /// configuration file's).
    pub(crate) fn with_admission_config(
        mut self,
        config: &crate::admission::config::AdmissionConfig,
    ) -> Self {
        self.admission = Arc::new(crate::admission::Chain::configured(
            crate::admission::Registries::from_table(&self.registries),
            config,
        ));
        self
    }

    /// This API reaching kubelets through `kubelets`.
    pub(crate) fn with_kubelets(mut self, kubelets: crate::handlers::kubelets::Kubelets) -> Self {
        self.kubelets = Some(Arc::new(kubelets));
        self
    }

    /// The connections to kubelets, when this API reaches them.
    pub(crate) fn kubelets(&self) -> Option<&Arc<crate::handlers::kubelets::Kubelets>> {
        self.kubelets.as_ref()
    }

    /// This API serving `metrics.k8s.io` from `metrics_api`.
    pub(crate) fn with_metrics_api(
        mut self,
        metrics_api: Arc<crate::handlers::resourcemetrics::MetricsApi>,
    ) -> Self {
        self.metrics_api = Some(metrics_api);
        self
    }

    /// The built-in Metrics API, if served.
    pub(crate) fn metrics_api(&self) -> Option<&Arc<crate::handlers::resourcemetrics::MetricsApi>> {
        self.metrics_api.as_ref()
    }

    /// `pods/log`, `exec`, `attach` and `portforward`, proxied to the pod's kubelet. Upgrade
    /// requests may be GETs (WebSockets must be), but opening a session needs `create` on the
    /// subresource whatever the method, as upstream checks since 1.30.
    async fn stream_from_node(
        &self,
        pods: &Registry,
        info: &RequestInfo,
        subresource: &str,
        request: Request<Body>,
    ) -> Result<Response, ApiError> {
        let allowed = match subresource {
            "log" => &[Method::GET][..],
            _ => &[Method::GET, Method::POST][..],
        };
        if !allowed.contains(request.method()) {
            return Err(StatusError::method_not_supported(
                GroupResource::new("", &format!("pods/{subresource}")),
                info.verb.as_str(),
            )
            .into());
        }
        if subresource != "log" && info.verb != "create" {
            let user = request
                .extensions()
                .get::<crate::authn::User>()
                .cloned()
                .unwrap_or_else(crate::authn::User::anonymous);
            let authorizer = request
                .extensions()
                .get::<Arc<crate::authz::Authorizer>>()
                .cloned()
                .unwrap_or_default();
            let mut create = info.clone();
            create.verb = "create".to_owned();
            let decision = authorizer
                .authorize(&user, &crate::authz::Attributes::from(&create))
                .await;
            if !decision.allowed {
                return Err(ApiError::forbidden_because(
                    &create,
                    &user.name,
                    &decision.reason,
                ));
            }
        }
        let (Some(kubelets), Some(nodes)) = (&self.kubelets, self.registry("", "v1", "nodes"))
        else {
            return Err(StatusError::service_unavailable(
                "this API server does not reach kubelets",
            )
            .into());
        };
        let context = crate::handlers::streaming::Context {
            pods,
            nodes: &nodes,
            kubelets,
        };
        crate::handlers::streaming::serve(
            &context,
            subresource,
            &info.namespace,
            &info.name,
            request,
        )
        .await
    }

    /// Admits opening a session through a connect subresource (upstream's CONNECT), with the
    /// request's options as the object.
    async fn admit_connect(
        &self,
        resource: &'static capstan_api::catalog::Resource,
        info: &RequestInfo,
        user: Option<crate::authn::User>,
        query: String,
    ) -> Result<(), ApiError> {
        let options = connect_options(resource.plural, &info.subresource, &query, &info.parts);
        let user = user.as_ref();
        let attrs = Attributes {
            resource,
            request_resource: None,
            subresource: &info.subresource,
            operation: Operation::Connect,
            namespace: &info.namespace,
            name: &info.name,
            user,
            dry_run: false,
            warnings: None,
            audit: None,
            authorizer: None,
        };
        self.admission.admit(&attrs, Some(&options)).await
    }

    /// `pods/proxy`, `services/proxy` and `nodes/proxy`: the request passed on to the pod,
    /// the service's endpoint or the node ([`crate::handlers::proxy`]).
    async fn proxy(
        &self,
        info: &RequestInfo,
        request: Request<Body>,
    ) -> Result<Response, ApiError> {
        let registry = |plural| self.registry("", "v1", plural);
        let (Some(pods), Some(services), Some(endpoints), Some(nodes)) = (
            registry("pods"),
            registry("services"),
            registry("endpoints"),
            registry("nodes"),
        ) else {
            return Err(ApiError::not_found());
        };
        let context = crate::handlers::proxy::Context {
            pods: &pods,
            services: &services,
            endpoints: &endpoints,
            nodes: &nodes,
            kubelets: self.kubelets.as_deref(),
        };
        crate::handlers::proxy::serve(&context, info, request).await
    }

    /// Serves a resource request.
    pub(crate) async fn serve(&self, info: &RequestInfo, request: Request<Body>) -> Response {
        let Some(registry) = self.registry(&info.api_group, &info.api_version, &info.resource)
        else {
            return ApiError::not_found().into_response();
        };
        let response = match self.serve_inner(&registry, info, request).await {
            Ok(response) => response,
            Err(error) => error.into_response(),
        };
        // A deprecated version warns on every request, as upstream's deprecation filter.
        match registry.deprecation() {
            Some(warning) => with_warnings(response, &[warning.to_owned()]),
            None => response,
        }
    }

    async fn serve_inner(
        &self,
        registry: &Arc<Registry>,
        info: &RequestInfo,
        request: Request<Body>,
    ) -> Result<Response, ApiError> {
        let resource = registry.resource;
        // A namespace-scoped path for a cluster-scoped resource serves nothing.
        let namespace = if resource.namespaced {
            (!info.namespace.is_empty()).then_some(info.namespace.as_str())
        } else if info.namespace_scoped_path {
            return Err(ApiError::not_found());
        } else {
            None
        };
        // A named object of a namespaced resource needs its namespace; a list or watch across
        // namespaces may still name one (`fieldSelector=metadata.name=x`), as upstream's
        // filtered informers do.
        if resource.namespaced
            && namespace.is_none()
            && !info.name.is_empty()
            && !matches!(info.verb.as_str(), "list" | "watch")
        {
            return Err(ApiError::not_found());
        }
        let subresource = (!info.subresource.is_empty()).then_some(info.subresource.as_str());
        // What the subresource does (`None`: the object itself): the dispatch below reads this,
        // never the subresource's name.
        let serves = match subresource {
            Some(sub) => match resource.subresource(sub) {
                Some(declared) => Some(declared.serves),
                None => return Err(ApiError::not_found()),
            },
            None => None,
        };
        if serves == Some(Serves::Stream(Stream::Proxy)) {
            let (user, query) = connect_request(&request);
            self.admit_connect(resource, info, user, query).await?;
            return self.proxy(info, request).await;
        }
        if subresource.is_some() && info.parts.len() > 3 {
            return Err(ApiError::not_found());
        }
        let query = Query::parse(request.uri().query().unwrap_or_default());
        let output = negotiate(request.headers())?;
        let content_type = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let name = info.name.as_str();
        let verb = info.verb.as_str();
        // Who asks (none in process, as the server's own calls): NodeRestriction narrows nodes.
        let user = request.extensions().get::<User>().cloned();
        let user = user.as_ref();
        let authorizer = request
            .extensions()
            .get::<Arc<crate::authz::Authorizer>>()
            .cloned();
        let audit = request
            .extensions()
            .get::<crate::audit::Annotations>()
            .cloned();
        // The object a create or update carries names it in the audit events.
        let audit_object = request
            .extensions()
            .get::<crate::audit::RequestObject>()
            .cloned();
        // Reads a create's or update's body, noting the object for the audit events.
        let read_noted = async |body: Body| {
            let (object, source) = read_body(body, content_type.as_deref()).await?;
            if let Some(noted) = &audit_object {
                noted.note(&object);
            }
            Ok::<_, ApiError>((object, source))
        };
        let write_admission = |subresource: Option<&str>| {
            self.admission.for_request(
                resource,
                subresource,
                user,
                authorizer.as_ref(),
                name,
                audit.clone(),
            )
        };
        // The admission of what the registry does not admit inside its writes: deletes, and
        // bodies of subresources that are not stored.
        let admitted_warnings = crate::admission::Warnings::default();
        let attributes = |operation| Attributes {
            resource,
            request_resource: None,
            subresource: subresource.unwrap_or_default(),
            operation,
            namespace: namespace.unwrap_or_default(),
            name,
            user,
            dry_run: false,
            warnings: Some(&admitted_warnings),
            audit: audit.as_ref(),
            authorizer: authorizer.as_ref(),
        };
        if !resource.supports(verb) && subresource.is_none() {
            return Err(StatusError::method_not_supported(
                GroupResource::new(resource.group, resource.plural),
                verb,
            )
            .into());
        }
        // The subresources the pod's node serves (`log`, `exec`, `attach`, `portforward`).
        if let (Some(sub), Some(Serves::Stream(Stream::Read { .. } | Stream::Connect))) =
            (subresource, serves)
        {
            if sub != "log" {
                let (user, query) = connect_request(&request);
                self.admit_connect(resource, info, user, query).await?;
            }
            return self.stream_from_node(registry, info, sub, request).await;
        }
        // A subresource serves only its own verbs (`finalize` is only updated).
        let subresource_allows = |verb: &str| {
            subresource
                .and_then(|s| resource.subresource(s))
                .is_none_or(|s| s.verbs.contains(&verb))
        };
        match (verb, serves) {
            ("get", Some(Serves::Scale(paths))) => {
                let scale = crate::handlers::scale::get(registry, &paths, namespace, name).await?;
                Ok(respond(StatusCode::OK, &scale, output.plain(), &[]))
            }
            ("update" | "patch", Some(Serves::Scale(paths))) => {
                let mut options = if verb == "update" {
                    query.recorded_write_options(request.headers(), "UpdateOptions", None)?
                } else {
                    let apply = crate::handlers::patch::is_apply(content_type.as_deref());
                    query.recorded_write_options(request.headers(), "PatchOptions", Some(apply))?
                };
                options.admission = write_admission(subresource);
                let bytes = read_bytes(request.into_body()).await?;
                let change = if verb == "update" {
                    crate::handlers::scale::ScaleChange::Replace(parse_document(
                        &bytes,
                        content_type.as_deref(),
                    )?)
                } else {
                    crate::handlers::scale::ScaleChange::Patch {
                        content_type: content_type.as_deref(),
                        body: &bytes,
                    }
                };
                let (scale, mut warnings) = crate::handlers::scale::update(
                    registry, &paths, namespace, name, change, &options,
                )
                .await?;
                admission_warnings(&options, &mut warnings);
                Ok(respond(StatusCode::OK, &scale, output.plain(), &warnings))
            }
            ("create", Some(Serves::Binding)) => {
                let output = output.untabled()?;
                let options = query.write_options()?;
                let (body, _) = read_noted(request.into_body()).await?;
                self.admission
                    .admit(&attributes(Operation::Create), Some(&body))
                    .await?;
                crate::handlers::pods::bind(registry, namespace, name, &body, &options).await?;
                Ok(respond(
                    StatusCode::CREATED,
                    &crate::handlers::pods::success(201),
                    output.plain(),
                    &[],
                ))
            }
            ("create", Some(Serves::TokenRequest)) => {
                // `serviceaccounts/token`: a TokenRequest answers with a token; nothing is stored.
                let output = output.untabled()?;
                let (body, _) = read_noted(request.into_body()).await?;
                self.admission
                    .admit(&attributes(Operation::Create), Some(&body))
                    .await?;
                let answer = self
                    .tokens
                    .request(namespace.unwrap_or_default(), name, &body)
                    .await?;
                Ok(respond(StatusCode::CREATED, &answer, output.plain(), &[]))
            }
            ("create", Some(Serves::Eviction)) => {
                let output = output.untabled()?;
                let (body, _) = read_noted(request.into_body()).await?;
                self.admission
                    .admit(&attributes(Operation::Create), Some(&body))
                    .await?;
                let pdbs = self.registry("policy", "v1", "poddisruptionbudgets");
                crate::handlers::pods::evict(
                    registry,
                    pdbs.as_deref(),
                    namespace,
                    name,
                    &body,
                    query.dry_run()?,
                )
                .await?;
                Ok(respond(
                    StatusCode::CREATED,
                    &crate::handlers::pods::success(201),
                    output.plain(),
                    &[],
                ))
            }
            ("get", None) | ("get", Some(Serves::Object)) if subresource_allows("get") => {
                let object = registry
                    .read(namespace, name, query.get("resourceVersion"))
                    .await?;
                if output == Output::Json {
                    // Serialised once, when the cache took it in.
                    return Ok(respond_bytes(StatusCode::OK, &object.json, &[]));
                }
                respond_object(
                    StatusCode::OK,
                    resource,
                    &object.object(),
                    output,
                    &query,
                    &[],
                )
            }
            ("list", None) => self.list(registry, namespace, &query, output).await,
            ("watch", None) => self.watch(registry, namespace, &query, output).await,
            ("create", None) if resource.review => {
                // A review answers; nothing is stored.
                let output = output.untabled()?;
                let user = user.cloned().unwrap_or_else(crate::authn::User::anonymous);
                let authorizer = request
                    .extensions()
                    .get::<Arc<crate::authz::Authorizer>>()
                    .cloned()
                    .unwrap_or_default();
                let authenticator = request
                    .extensions()
                    .get::<Arc<crate::authn::Authenticator>>()
                    .cloned()
                    .unwrap_or_default();
                let (body, _) = read_noted(request.into_body()).await?;
                let answer = crate::authz::reviews::answer(
                    resource.kind,
                    &body,
                    &user,
                    &authorizer,
                    &authenticator,
                )
                .await?;
                Ok(respond(StatusCode::CREATED, &answer, output.plain(), &[]))
            }
            ("create", None) => {
                if request.method() != Method::POST {
                    return Err(ApiError::not_found());
                }
                let mut options =
                    query.recorded_write_options(request.headers(), "CreateOptions", None)?;
                let (body, source) = read_noted(request.into_body()).await?;
                options.source = source;
                options.admission = write_admission(None);
                let mut written = registry.create(namespace, body, &options).await?;
                admission_warnings(&options, &mut written.warnings);
                respond_object(
                    StatusCode::CREATED,
                    resource,
                    &written.object,
                    output,
                    &query,
                    &written.warnings,
                )
            }
            ("update", None) | ("update", Some(Serves::Object)) if subresource_allows("update") => {
                let mut options =
                    query.recorded_write_options(request.headers(), "UpdateOptions", None)?;
                let (body, source) = read_noted(request.into_body()).await?;
                options.source = source;
                options.admission = write_admission(subresource);
                let mut written = registry
                    .update(namespace, name, body, subresource, &options)
                    .await?;
                admission_warnings(&options, &mut written.warnings);
                written_response(resource, written, output, &query)
            }
            ("patch", None) | ("patch", Some(Serves::Object)) if subresource_allows("patch") => {
                let ct = content_type.as_deref();
                let apply = crate::handlers::patch::is_apply(ct);
                let mut options =
                    query.recorded_write_options(request.headers(), "PatchOptions", Some(apply))?;
                options.admission = write_admission(subresource);
                let bytes = read_bytes(request.into_body()).await?;
                let body = crate::handlers::patch::PatchBody {
                    content_type: ct,
                    bytes: &bytes,
                };
                let mut written = crate::handlers::patch::patch(
                    registry,
                    namespace,
                    name,
                    subresource,
                    body,
                    &options,
                )
                .await?;
                admission_warnings(&options, &mut written.warnings);
                written_response(resource, written, output, &query)
            }
            ("delete", None) => {
                let options =
                    delete_options(&query, request.into_body(), content_type.as_deref()).await?;
                let attrs = Attributes {
                    dry_run: options.dry_run,
                    ..attributes(Operation::Delete)
                };
                self.admission.admit(&attrs, None).await?;
                let deleted = registry.delete(namespace, name, &options).await?;
                let object = match deleted {
                    Deleted::Pending(object) => object,
                    Deleted::Gone(object) if registry.strategy().returns_deleted_object() => object,
                    Deleted::Gone(object) => success_status(resource, &object),
                };
                respond_object(
                    StatusCode::OK,
                    resource,
                    &object,
                    output,
                    &query,
                    &admitted_warnings.take(),
                )
            }
            ("deletecollection", None) => {
                let options =
                    delete_options(&query, request.into_body(), content_type.as_deref()).await?;
                let list = registry
                    .list(
                        namespace,
                        &ListOptions {
                            selectors: query.selectors()?,
                            ..ListOptions::default()
                        },
                    )
                    .await?;
                let mut items = Vec::new();
                for object in list.items.iter().map(|item| item.object()) {
                    let object = &object;
                    let ns = (!meta_str(object, "namespace").is_empty())
                        .then(|| meta_str(object, "namespace"));
                    // Upstream admits each object of a collection's delete on its own.
                    let each = Attributes {
                        namespace: ns.unwrap_or_default(),
                        name: meta_str(object, "name"),
                        dry_run: options.dry_run,
                        ..attributes(Operation::Delete)
                    };
                    self.admission.admit(&each, None).await?;
                    match registry
                        .delete(ns, meta_str(object, "name"), &options)
                        .await
                    {
                        Ok(Deleted::Gone(object) | Deleted::Pending(object)) => {
                            items.push(as_item(object))
                        }
                        Err(error) if error.status().code() == 404 => {}
                        Err(error) => return Err(error),
                    }
                }
                let body = json!({
                    "kind": resource.list_kind(),
                    "apiVersion": resource.api_version(),
                    "metadata": {"resourceVersion": list.resource_version.to_string()},
                    "items": items,
                });
                Ok(respond(StatusCode::OK, &body, output, &[]))
            }
            _ => Err(StatusError::method_not_supported(
                GroupResource::new(resource.group, resource.plural),
                verb,
            )
            .into()),
        }
    }

    async fn list(
        &self,
        registry: &Registry,
        namespace: Option<&str>,
        query: &Query,
        output: Output,
    ) -> Result<Response, ApiError> {
        let limit = query
            .int("limit")?
            .filter(|l| *l > 0)
            .map(|l| usize::try_from(l).unwrap_or(usize::MAX));
        let options = ListOptions {
            selectors: query.selectors()?,
            limit,
            continue_token: query
                .get("continue")
                .filter(|c| !c.is_empty())
                .map(str::to_owned),
            resource_version: query.get("resourceVersion").map(str::to_owned),
            resource_version_match: query.get("resourceVersionMatch").map(str::to_owned),
        };
        let resource = registry.resource;
        if let Output::Metadata { list: false, .. } = output {
            return Err(metadata_arity_error(resource, false));
        }
        let list = registry.list(namespace, &options).await?;
        if output == Output::Table {
            let meta = printers::ListMeta {
                resource_version: Some(list.resource_version.to_string()),
                continue_token: list.continue_token.clone(),
                remaining_item_count: list.remaining_item_count,
            };
            let objects: Vec<Value> = list.items.iter().map(|item| item.object()).collect();
            let table = printers::list_table(
                resource.printer.as_ref(),
                &objects.iter().collect::<Vec<_>>(),
                &meta,
                &table_options(query)?,
                now(),
            );
            return Ok(respond(StatusCode::OK, &table, Output::Json, &[]));
        }
        let mut metadata = json!({"resourceVersion": list.resource_version.to_string()});
        if let Some(token) = &list.continue_token {
            metadata["continue"] = token.clone().into();
        }
        if let Some(remaining) = list.remaining_item_count {
            metadata["remainingItemCount"] = remaining.into();
        }
        if let Output::Metadata { version, .. } = output {
            let body = json!({
                "kind": "PartialObjectMetadataList",
                "apiVersion": format!("meta.k8s.io/{version}"),
                "metadata": metadata,
                "items": list
                    .items
                    .iter()
                    .map(|item| partial_metadata(&item.object(), version))
                    .collect::<Vec<_>>(),
            });
            return Ok(respond(StatusCode::OK, &body, output, &[]));
        }
        if output == Output::Yaml {
            let body = json!({
                "kind": resource.list_kind(),
                "apiVersion": resource.api_version(),
                "metadata": metadata,
                "items": list.items.iter().map(|item| as_item(item.object())).collect::<Vec<_>>(),
            });
            return Ok(respond(StatusCode::OK, &body, output, &[]));
        }
        // The items were serialised once, when they were cached or read; the list only joins them.
        let items_len: usize = list.items.iter().map(|item| item.json.len() + 1).sum();
        let mut body = Vec::with_capacity(items_len + 256);
        body.extend_from_slice(br#"{"kind":"#);
        let _ = serde_json::to_writer(&mut body, &resource.list_kind());
        body.extend_from_slice(br#","apiVersion":"#);
        let _ = serde_json::to_writer(&mut body, &resource.api_version());
        body.extend_from_slice(br#","metadata":"#);
        body.extend_from_slice(&capstan_api::gojson::to_vec_meta("ListMeta", &metadata));
        body.extend_from_slice(br#","items":["#);
        for (i, item) in list.items.iter().enumerate() {
            if i > 0 {
                body.push(b',');
            }
            item.write_item(&mut body);
        }
        body.extend_from_slice(b"]}");
        Ok(respond_bytes(StatusCode::OK, &body, &[]))
    }

    async fn watch(
        &self,
        registry: &Arc<Registry>,
        namespace: Option<&str>,
        query: &Query,
        output: Output,
    ) -> Result<Response, ApiError> {
        let mut table = match output {
            Output::Table => Some(table_options(query)?),
            _ => None,
        };
        let resource = registry.resource;
        let metadata_only = match output {
            Output::Metadata { list: true, .. } => {
                return Err(metadata_arity_error(resource, true));
            }
            Output::Metadata { version, .. } => Some(version),
            _ => None,
        };
        let timeout = match query.int("timeoutSeconds")? {
            Some(seconds) if seconds > 0 => Duration::from_secs(seconds.unsigned_abs()),
            // Upstream spreads watch lifetimes between the minimum request timeout and twice it.
            _ => Duration::from_secs(1800 + rand::random_range(0..1800)),
        };
        let send_initial_events = match query.get("sendInitialEvents") {
            None | Some("") => None,
            Some(v) => Some(matches!(v, "true" | "1")),
        };
        let options = WatchOptions {
            selectors: query.selectors()?,
            resource_version: query.get("resourceVersion").map(str::to_owned),
            resource_version_match: query.get("resourceVersionMatch").map(str::to_owned),
            allow_bookmarks: query.flag("allowWatchBookmarks"),
            send_initial_events,
            timeout,
        };
        let events = registry.watch(namespace, options).await?;
        let body = events.map(move |event| {
            let mut line = Vec::with_capacity(event.object.json.len() + 32);
            line.extend_from_slice(b"{\"type\":\"");
            line.extend_from_slice(event.kind.as_bytes());
            line.extend_from_slice(b"\",\"object\":");
            match table.as_mut() {
                Some(options) if event.kind != "ERROR" => {
                    let converted = if event.kind == "BOOKMARK" {
                        printers::list_table(
                            resource.printer.as_ref(),
                            &[],
                            &printers::ListMeta {
                                resource_version: Some(
                                    meta_str(&event.object.object(), "resourceVersion").to_owned(),
                                ),
                                ..printers::ListMeta::default()
                            },
                            options,
                            now(),
                        )
                    } else {
                        printers::object_table(
                            resource.printer.as_ref(),
                            &event.object.object(),
                            options,
                            now(),
                        )
                    };
                    // Column definitions come once, with the first event.
                    options.no_headers = true;
                    line.extend_from_slice(&capstan_api::gojson::to_vec(&converted));
                }
                _ if event.kind != "ERROR"
                    && let Some(version) = metadata_only =>
                {
                    let partial = partial_metadata(&event.object.object(), version);
                    line.extend_from_slice(&capstan_api::gojson::to_vec(&partial));
                }
                // The object's JSON, serialised once for every watcher.
                _ => line.extend_from_slice(&event.object.json),
            }
            line.extend_from_slice(b"}\n");
            Ok::<_, std::convert::Infallible>(bytes::Bytes::from(line))
        });
        Ok(Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::CACHE_CONTROL, "no-cache, private")
            .body(Body::from_stream(body))
            .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response()))
    }
}

fn written_response(
    resource: &Resource,
    written: Written,
    output: Output,
    query: &Query,
) -> Result<Response, ApiError> {
    let code = if written.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    respond_object(
        code,
        resource,
        &written.object,
        output,
        query,
        &written.warnings,
    )
}

/// The `Status` upstream answers a completed delete with, for kinds that do not return the
/// object.
fn success_status(resource: &Resource, object: &Value) -> Value {
    let mut details = json!({
        "name": meta_str(object, "name"),
        "kind": resource.plural,
        "uid": meta_str(object, "uid"),
    });
    if !resource.group.is_empty() {
        details["group"] = resource.group.into();
    }
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    })
}

/// Reads `DeleteOptions` from the body (if any) and the query, the query winning as upstream.
async fn delete_options(
    query: &Query,
    body: Body,
    content_type: Option<&str>,
) -> Result<DeleteOptions, ApiError> {
    let bytes = read_bytes(body).await?;
    let body = if bytes.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else {
        parse_document(&bytes, content_type)?
    };
    delete_options_from(query, &body)
}

/// Reads `DeleteOptions` from a decoded body (or `null`) and the query, the query winning.
fn delete_options_from(query: &Query, body: &Value) -> Result<DeleteOptions, ApiError> {
    let mut options = DeleteOptions::from_body(body);
    options.dry_run |= query.dry_run()?;
    if let Some(grace) = query.int("gracePeriodSeconds")? {
        options.grace_period_seconds = Some(grace);
    }
    if let Some(policy) = query.get("propagationPolicy").filter(|p| !p.is_empty()) {
        options.propagation_policy = Some(policy.to_owned());
    }
    if let Some(orphan) = query.get("orphanDependents") {
        options.orphan_dependents = Some(matches!(orphan, "true" | "1"));
    }
    options.validated()
}

#[cfg(test)]
#[path = "resource_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "../admission/api_tests.rs"]
mod admission_tests;

#[cfg(test)]
#[path = "../admission/policy/api_tests.rs"]
mod policy_tests;

#[cfg(test)]
#[path = "../admission/podsecurity_tests.rs"]
mod podsecurity_tests;

#[cfg(test)]
#[path = "../authn/serviceaccount/api_tests.rs"]
mod serviceaccount_tests;

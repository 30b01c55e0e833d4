//! `pods/proxy`, `services/proxy` and `nodes/proxy`: upstream's proxy connecters. The object's
//! name may carry a scheme and a port (`[scheme:]name[:port]`); the request's path after
//! `proxy` is the backend's path and its query goes along. The backend is resolved as
//! upstream's `ResourceLocation` functions resolve it:
//!
//! - a pod: its first IP (which must be a global unicast address), and the port asked for or
//!   else the first port of its first container that declares one;
//! - a service: a ready address of its Endpoints, whose port is named as the service port asked
//!   for (by name, or by number through the service), and whose target pod has that IP;
//! - a node: its kubelet (the API server's kubelet client credentials) when no port, or the
//!   kubelet's, is asked for; another port of the node's address otherwise.
//!
//! [`forward`] passes the request on. The API server reaches pod IPs directly: it runs on the
//! node's host, as upstream's reaches them through the node's network.

pub(crate) mod forward;
mod html;
pub(crate) mod location;

use std::net::IpAddr;

use axum::body::Body;
use axum::http::{Method, Request};
use axum::response::Response;
use capstan_api::field::go_quote;
use capstan_api::{RequestInfo, StatusError};
use serde_json::Value;

use self::forward::{Dial, Proxied, Target};
use self::location::{
    is_global_unicast, join_host_port, join_preserving_trailing_slash, split_scheme_name_port,
    unescape_lossy,
};
use crate::handlers::kubelets::Kubelets;
use crate::registry::Registry;
use crate::status::ApiError;

/// What the proxy subresources read and reach.
pub(crate) struct Context<'a> {
    pub pods: &'a Registry,
    pub services: &'a Registry,
    pub endpoints: &'a Registry,
    pub nodes: &'a Registry,
    /// Connections to kubelets; without them nodes cannot be proxied to.
    pub kubelets: Option<&'a Kubelets>,
}

/// The methods the proxy subresources pass on.
const METHODS: [Method; 7] = [
    Method::GET,
    Method::POST,
    Method::PUT,
    Method::PATCH,
    Method::DELETE,
    Method::HEAD,
    Method::OPTIONS,
];

/// Serves `<resource>/<id>/proxy[/<path>]` for pods, services and nodes.
pub(crate) async fn serve(
    context: &Context<'_>,
    info: &RequestInfo,
    request: Request<Body>,
) -> Result<Response, ApiError> {
    if !METHODS.contains(request.method()) {
        return Err(StatusError::new_with_reason(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
        .into());
    }
    let query = capstan_api::query::parse(request.uri().query());
    if query.contains_key("dryRun") {
        return Err(StatusError::bad_request("dryRun is not supported").into());
    }
    let id = unescape_lossy(&info.name);
    let kind = match info.resource.as_str() {
        "pods" => "pod",
        "services" => "service",
        _ => "node",
    };
    let Some((scheme, name, port)) = split_scheme_name_port(&id) else {
        return Err(
            StatusError::bad_request(&format!("invalid {kind} request {}", go_quote(&id))).into(),
        );
    };
    let (location_path, request_path) = subpath(info, request.uri().path());
    let namespace = info.namespace.as_str();
    let target = match kind {
        "pod" => {
            let pod = context.pods.get(Some(namespace), name).await?;
            pod_target(&pod, scheme, port)?
        }
        "service" => service_target(context, namespace, &id, scheme, name, port).await?,
        _ => node_target(context, scheme, name, port).await?,
    };
    let proxied = Proxied {
        location_path,
        request_path,
        kubelets: context.kubelets,
    };
    forward::serve(target, proxied, request).await
}

/// The backend's path (upstream's `location.Path`) and the request's path, both unescaped:
/// the path segments after `proxy` joined as upstream's `getRequestOptions` joins them (with a
/// leading slash, and a trailing one when the request has one), then cleaned as
/// `JoinPreservingTrailingSlash` cleans them.
fn subpath(info: &RequestInfo, raw_path: &str) -> (String, String) {
    let request_path = unescape_lossy(raw_path);
    let raw_segments = raw_path.trim_matches('/').split('/').count();
    let before = (raw_segments + 3).saturating_sub(info.parts.len());
    let segments: Vec<&str> = request_path.trim_matches('/').split('/').collect();
    let mut path = segments.get(before..).unwrap_or_default().join("/");
    if !path.is_empty() && !path.starts_with('/') {
        path.insert(0, '/');
    }
    if request_path.ends_with('/') && !path.ends_with('/') {
        path.push('/');
    }
    (join_preserving_trailing_slash(&["", &path]), request_path)
}

/// A pod's backend, as upstream's pod `ResourceLocation`: its first IP, which must be global
/// unicast, and `port`, or else the first port of the first container that declares one, or
/// else the scheme's.
fn pod_target(pod: &Value, scheme: &str, port: &str) -> Result<Target, ApiError> {
    let port = if port.is_empty() {
        pod["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .find_map(|c| c["ports"].as_array().and_then(|ports| ports.first()))
            .and_then(|p| p["containerPort"].as_i64())
            .map(|p| p.to_string())
            .unwrap_or_default()
    } else {
        port.to_owned()
    };
    let ip = pod["status"]["podIPs"][0]["ip"]
        .as_str()
        .or_else(|| pod["status"]["podIP"].as_str())
        .unwrap_or_default();
    let allowed = ip.parse::<IpAddr>().is_ok_and(is_global_unicast);
    if !allowed {
        return Err(StatusError::bad_request("address not allowed").into());
    }
    let host = if port.is_empty() {
        if ip.contains(':') {
            format!("[{ip}]")
        } else {
            ip.to_owned()
        }
    } else {
        join_host_port(ip, &port)
    };
    Ok(Target {
        scheme: scheme_of(scheme),
        host,
        dial: Dial::Direct,
    })
}

/// `http` unless `https` was asked for.
fn scheme_of(scheme: &str) -> &'static str {
    if scheme == "https" { "https" } else { "http" }
}

/// A service's backend, as upstream's service `ResourceLocation`.
async fn service_target(
    context: &Context<'_>,
    namespace: &str,
    id: &str,
    scheme: &str,
    name: &str,
    port: &str,
) -> Result<Target, ApiError> {
    let mut port_name = port.to_owned();
    if let Ok(number) = port.parse::<i64>() {
        let service = context.services.get(Some(namespace), name).await?;
        let declared = service["spec"]["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["port"].as_i64() == Some(number));
        match declared {
            Some(declared) => {
                port_name = declared["name"].as_str().unwrap_or_default().to_owned();
            }
            None => {
                return Err(StatusError::service_unavailable(&format!(
                    "no service port {number} found for service {}",
                    go_quote(name)
                ))
                .into());
            }
        }
    }
    let endpoints = context.endpoints.get(Some(namespace), name).await?;
    let subsets = endpoints["subsets"].as_array().cloned().unwrap_or_default();
    if subsets.is_empty() {
        return Err(StatusError::service_unavailable(&format!(
            "no endpoints available for service {}",
            go_quote(name)
        ))
        .into());
    }
    let subset_seed = rand::random_range(0..subsets.len());
    for n in 0..subsets.len() {
        let subset = &subsets[(subset_seed + n) % subsets.len()];
        let addresses = subset["addresses"].as_array().cloned().unwrap_or_default();
        if addresses.is_empty() {
            continue;
        }
        let ports = subset["ports"].as_array().cloned().unwrap_or_default();
        for endpoint_port in ports
            .iter()
            .filter(|p| p["name"].as_str().unwrap_or_default() == port_name)
        {
            let address_seed = rand::random_range(0..addresses.len());
            for m in 0..addresses.len() {
                let address = &addresses[(address_seed + m) % addresses.len()];
                if let Err(why) = address_of_pod(context, namespace, address).await {
                    tracing::debug!(service = %name, %why, "endpoint address skipped");
                    continue;
                }
                let ip = address["ip"].as_str().unwrap_or_default();
                let number = endpoint_port["port"].as_i64().unwrap_or_default();
                return Ok(Target {
                    scheme: scheme_of(scheme),
                    host: join_host_port(ip, &number.to_string()),
                    dial: Dial::Direct,
                });
            }
        }
    }
    Err(StatusError::service_unavailable(&format!(
        "no endpoints available for service {}",
        go_quote(id)
    ))
    .into())
}

/// Whether an endpoint address is a pod's (upstream's `isValidAddress`): it names a pod of
/// the request's namespace that has the address's IP.
async fn address_of_pod(
    context: &Context<'_>,
    namespace: &str,
    address: &Value,
) -> Result<(), String> {
    let target = &address["targetRef"];
    if !target.is_object() {
        return Err("the address has no target reference".to_owned());
    }
    if target["namespace"].as_str().unwrap_or_default() != namespace {
        return Err("the address's namespace is not the request's".to_owned());
    }
    let name = target["name"].as_str().unwrap_or_default();
    let pod = context
        .pods
        .get(Some(namespace), name)
        .await
        .map_err(|e| e.status().to_json()["message"].to_string())?;
    let ip = address["ip"].as_str().unwrap_or_default();
    let ips: Vec<&str> = pod["status"]["podIPs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["ip"].as_str())
        .collect();
    if ips.contains(&ip) {
        Ok(())
    } else {
        Err(format!(
            "pod ip(s) {ips:?} do not match the endpoint ip {ip}"
        ))
    }
}

/// A node's backend, as upstream's node `ResourceLocation`: its address must resolve to global
/// unicast addresses only; no port or the kubelet's goes to the kubelet (HTTPS, the kubelet
/// client credentials), another port to that port of the address.
async fn node_target(
    context: &Context<'_>,
    scheme: &str,
    name: &str,
    port: &str,
) -> Result<Target, ApiError> {
    let node = context.nodes.get(None, name).await?;
    let (host, kubelet_port) = crate::handlers::kubelets::address(&node).map_err(|e| {
        StatusError::not_a_status(e.status().to_json()["message"].as_str().unwrap_or_default())
    })?;
    proxyable_host(&host)
        .await
        .map_err(|why| StatusError::bad_request(&why))?;
    if port.is_empty() || port == kubelet_port.to_string() {
        return Ok(Target {
            scheme: "https",
            host: join_host_port(&host, &kubelet_port.to_string()),
            dial: Dial::Kubelet(Box::new(node)),
        });
    }
    Ok(Target {
        scheme: scheme_of(scheme),
        host: join_host_port(&host, port),
        dial: Dial::Direct,
    })
}

/// Whether a node's address may be proxied to (upstream's `isProxyableHostname` since 1.33):
/// every address it resolves to is global unicast.
async fn proxyable_host(host: &str) -> Result<(), String> {
    let addresses: Vec<IpAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![ip],
        Err(_) => tokio::net::lookup_host((host, 0))
            .await
            .map_err(|e| format!("lookup {host}: {e}"))?
            .map(|a| a.ip())
            .collect(),
    };
    if addresses.is_empty() {
        return Err("no addresses for hostname".to_owned());
    }
    if addresses.into_iter().all(is_global_unicast) {
        Ok(())
    } else {
        Err("address not allowed".to_owned())
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;

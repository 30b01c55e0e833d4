//! A container's environment, as the kubelet builds it: the service variables of the pod's
//! namespace (and of the `kubernetes` service), then `envFrom` sources, then `env` entries, each
//! value able to refer to earlier ones with `$(NAME)`. A missing ConfigMap, Secret or key that
//! is not optional stops the container with `CreateContainerConfigError`.

use std::collections::{BTreeMap, HashMap};

use capstan_api::quantity::Quantity;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret, Service};
use kube::Api;

use crate::spec::expand;

/// Resolves references against the cluster (ConfigMaps, Secrets, Services).
#[derive(Clone)]
pub struct Sources<'a> {
    /// The API client.
    pub client: &'a kube::Client,
    /// The pod's sandbox address.
    pub pod_ip: &'a str,
    /// The node's addresses.
    pub host_ips: &'a [String],
    /// The node's allocatable, for resource fields of containers without limits.
    pub allocatable: &'a BTreeMap<String, String>,
}

impl std::fmt::Debug for Sources<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sources")
            .field("pod_ip", &self.pod_ip)
            .field("host_ips", &self.host_ips)
            .finish_non_exhaustive()
    }
}

async fn config_map(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Option<ConfigMap>, String> {
    Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(|e| format!("cannot read configmap {name:?}: {e}"))
}

async fn secret(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Option<BTreeMap<String, String>>, String> {
    let secret: Option<Secret> = Api::<Secret>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(|e| format!("cannot read secret {name:?}: {e}"))?;
    Ok(secret.map(|s| {
        let mut data: BTreeMap<String, String> = s
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
            .collect();
        data.extend(s.string_data.unwrap_or_default());
        data
    }))
}

/// The service variables (`<NAME>_SERVICE_HOST`, `<NAME>_PORT_<port>_TCP`, …) of `service`,
/// docker-links style as the kubelet writes them.
pub fn service_variables(service: &Service) -> Vec<(String, String)> {
    let Some(spec) = &service.spec else {
        return Vec::new();
    };
    let ip = spec.cluster_ip.clone().unwrap_or_default();
    if ip.is_empty() || ip == "None" {
        return Vec::new();
    }
    let name = service
        .metadata
        .name
        .clone()
        .unwrap_or_default()
        .to_uppercase()
        .replace('-', "_");
    let ports = spec.ports.clone().unwrap_or_default();
    let mut vars = vec![(format!("{name}_SERVICE_HOST"), ip.clone())];
    if let Some(first) = ports.first() {
        vars.push((format!("{name}_SERVICE_PORT"), first.port.to_string()));
    }
    for port in &ports {
        if let Some(port_name) = &port.name {
            vars.push((
                format!(
                    "{name}_SERVICE_PORT_{}",
                    port_name.to_uppercase().replace('-', "_")
                ),
                port.port.to_string(),
            ));
        }
    }
    if let Some(first) = ports.first() {
        let protocol = first.protocol.clone().unwrap_or_else(|| "TCP".to_owned());
        vars.push((
            format!("{name}_PORT"),
            format!("{}://{ip}:{}", protocol.to_lowercase(), first.port),
        ));
    }
    for port in &ports {
        let protocol = port.protocol.clone().unwrap_or_else(|| "TCP".to_owned());
        let prefix = format!("{name}_PORT_{}_{}", port.port, protocol.to_uppercase());
        vars.push((
            prefix.clone(),
            format!("{}://{ip}:{}", protocol.to_lowercase(), port.port),
        ));
        vars.push((format!("{prefix}_PROTO"), protocol.to_lowercase()));
        vars.push((format!("{prefix}_PORT"), port.port.to_string()));
        vars.push((format!("{prefix}_ADDR"), ip.clone()));
    }
    vars
}

async fn service_env(client: &kube::Client, pod: &Pod) -> Result<Vec<(String, String)>, String> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let links = pod
        .spec
        .as_ref()
        .and_then(|s| s.enable_service_links)
        .unwrap_or(true);
    let mut services: BTreeMap<String, Service> = BTreeMap::new();
    if links {
        let list = Api::<Service>::namespaced(client.clone(), namespace)
            .list(&Default::default())
            .await
            .map_err(|e| format!("cannot list services: {e}"))?;
        for service in list.items {
            services.insert(service.metadata.name.clone().unwrap_or_default(), service);
        }
    }
    // The API server's own service, from the default namespace, always.
    if let Some(kubernetes) = Api::<Service>::namespaced(client.clone(), "default")
        .get_opt("kubernetes")
        .await
        .map_err(|e| format!("cannot read the kubernetes service: {e}"))?
    {
        services.insert("kubernetes".to_owned(), kubernetes);
    }
    Ok(services.values().flat_map(service_variables).collect())
}

/// A label or annotation map as the kubelet writes it into a downward API file: one
/// `key="value"` line per key, sorted by key, the value quoted as Go's `%q` quotes it, no
/// newline after the last line.
pub fn format_map(map: Option<&BTreeMap<String, String>>) -> String {
    map.into_iter()
        .flatten()
        .map(|(key, value)| format!("{key}={}", capstan_api::field::go_quote(value)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The value of a `fieldRef`.
pub fn field_value(
    pod: &Pod,
    path: &str,
    pod_ip: &str,
    host_ips: &[String],
) -> Result<String, String> {
    let meta = &pod.metadata;
    let in_map = |map: &Option<BTreeMap<String, String>>, prefix: &str| {
        let key = path
            .strip_prefix(prefix)?
            .strip_prefix("['")?
            .strip_suffix("']")?;
        Some(map.as_ref()?.get(key).cloned().unwrap_or_default())
    };
    let spec = pod.spec.clone().unwrap_or_default();
    Ok(match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        // Only downward API volumes may name the whole maps.
        "metadata.labels" => format_map(meta.labels.as_ref()),
        "metadata.annotations" => format_map(meta.annotations.as_ref()),
        "spec.nodeName" => spec.node_name.unwrap_or_default(),
        "spec.serviceAccountName" => spec.service_account_name.unwrap_or_default(),
        "status.hostIP" => host_ips.first().cloned().unwrap_or_default(),
        "status.hostIPs" => host_ips.join(","),
        "status.podIP" => pod_ip.to_owned(),
        "status.podIPs" => pod_ip.to_owned(),
        _ => {
            if let Some(value) = in_map(&meta.labels, "metadata.labels") {
                value
            } else if let Some(value) = in_map(&meta.annotations, "metadata.annotations") {
                value
            } else {
                return Err(format!("unsupported fieldRef path {path:?}"));
            }
        }
    })
}

/// The value of a `resourceFieldRef` (rounded up in units of `divisor`, the node's
/// allocatable standing in for a missing limit).
pub fn resource_value(
    container: &Container,
    resource: &str,
    divisor: Option<&str>,
    allocatable: &BTreeMap<String, String>,
) -> Result<String, String> {
    let (kind, name) = resource
        .split_once('.')
        .ok_or_else(|| format!("unsupported resourceFieldRef {resource:?}"))?;
    let requirements = container.resources.clone().unwrap_or_default();
    let list = match kind {
        "limits" => requirements.limits,
        "requests" => requirements.requests,
        _ => return Err(format!("unsupported resourceFieldRef {resource:?}")),
    };
    let text = list
        .as_ref()
        .and_then(|l| l.get(name))
        .map(|q| q.0.clone())
        .or_else(|| {
            (kind == "limits")
                .then(|| allocatable.get(name).cloned())
                .flatten()
        })
        .unwrap_or_else(|| "0".to_owned());
    let value = Quantity::parse(&text).map_err(|e| format!("invalid quantity {text:?}: {e}"))?;
    // Go clients always send a divisor (a zero Quantity is written as "0"); zero means one unit.
    let divisor = match divisor {
        Some(divisor) => Quantity::parse(divisor).map_err(|e| format!("invalid divisor: {e}"))?,
        None => Quantity::parse("1").map_err(|e| format!("invalid divisor: {e}"))?,
    };
    let one = Quantity::parse("1").map_err(|e| format!("invalid divisor: {e}"))?;
    let divisor = if divisor.is_zero() { one } else { divisor };
    // CPU counts in thousandths of a core, everything else in whole units; both round up.
    let (amount, unit) = if name == "cpu" {
        (value.milli_value(), divisor.milli_value())
    } else {
        (value.value(), divisor.value())
    };
    let unit = i128::from(unit.max(1));
    let units = (i128::from(amount) + unit - 1).div_euclid(unit);
    Ok(units.to_string())
}

/// The environment of `container` in `pod`.
pub async fn resolve(
    sources: &Sources<'_>,
    pod: &Pod,
    container: &Container,
) -> Result<Vec<(String, String)>, String> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let client = sources.client;
    let mut env: Vec<(String, String)> = service_env(client, pod).await?;
    let set = |env: &mut Vec<(String, String)>, key: String, value: String| {
        env.retain(|(k, _)| *k != key);
        env.push((key, value));
    };
    for source in container.env_from.iter().flatten() {
        let prefix = source.prefix.clone().unwrap_or_default();
        if let Some(reference) = &source.config_map_ref {
            match config_map(client, namespace, &reference.name).await? {
                Some(map) => {
                    for (k, v) in map.data.unwrap_or_default() {
                        set(&mut env, format!("{prefix}{k}"), v);
                    }
                }
                None if reference.optional == Some(true) => {}
                None => return Err(format!("configmap \"{}\" not found", reference.name)),
            }
        }
        if let Some(reference) = &source.secret_ref {
            match secret(client, namespace, &reference.name).await? {
                Some(data) => {
                    for (k, v) in data {
                        set(&mut env, format!("{prefix}{k}"), v);
                    }
                }
                None if reference.optional == Some(true) => {}
                None => return Err(format!("secret \"{}\" not found", reference.name)),
            }
        }
    }
    for var in container.env.iter().flatten() {
        let value = if let Some(value) = &var.value {
            let known: HashMap<&str, &str> =
                env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            expand(value, &known)
        } else if let Some(from) = &var.value_from {
            if let Some(field) = &from.field_ref {
                field_value(pod, &field.field_path, sources.pod_ip, sources.host_ips)?
            } else if let Some(resource) = &from.resource_field_ref {
                let target = match resource.container_name.as_deref() {
                    Some(name) if !name.is_empty() => pod
                        .spec
                        .iter()
                        .flat_map(|s| s.init_containers.iter().flatten().chain(&s.containers))
                        .find(|c| c.name == name)
                        .unwrap_or(container),
                    _ => container,
                };
                resource_value(
                    target,
                    &resource.resource,
                    resource.divisor.as_ref().map(|d| d.0.as_str()),
                    sources.allocatable,
                )?
            } else if let Some(key) = &from.config_map_key_ref {
                let map = config_map(client, namespace, &key.name).await?;
                match map.and_then(|m| m.data.unwrap_or_default().get(&key.key).cloned()) {
                    Some(value) => value,
                    None if key.optional == Some(true) => continue,
                    None => {
                        return Err(format!(
                            "couldn't find key {} in ConfigMap {namespace}/{}",
                            key.key, key.name
                        ));
                    }
                }
            } else if let Some(key) = &from.secret_key_ref {
                let data = secret(client, namespace, &key.name).await?;
                match data.and_then(|d| d.get(&key.key).cloned()) {
                    Some(value) => value,
                    None if key.optional == Some(true) => continue,
                    None => {
                        return Err(format!(
                            "couldn't find key {} in Secret {namespace}/{}",
                            key.key, key.name
                        ));
                    }
                }
            } else {
                String::new()
            }
        } else {
            String::new()
        };
        set(&mut env, var.name.clone(), value);
    }
    Ok(env)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ResourceRequirements, ServicePort, ServiceSpec};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as Q;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn services_become_docker_link_variables() {
        let service = Service {
            metadata: ObjectMeta {
                name: Some("my-db".to_owned()),
                ..ObjectMeta::default()
            },
            spec: Some(ServiceSpec {
                cluster_ip: Some("10.43.0.9".to_owned()),
                ports: Some(vec![ServicePort {
                    name: Some("sql".to_owned()),
                    port: 5432,
                    protocol: Some("TCP".to_owned()),
                    ..ServicePort::default()
                }]),
                ..ServiceSpec::default()
            }),
            status: None,
        };
        let vars: BTreeMap<String, String> = service_variables(&service).into_iter().collect();
        assert_eq!(vars["MY_DB_SERVICE_HOST"], "10.43.0.9");
        assert_eq!(vars["MY_DB_SERVICE_PORT"], "5432");
        assert_eq!(vars["MY_DB_SERVICE_PORT_SQL"], "5432");
        assert_eq!(vars["MY_DB_PORT"], "tcp://10.43.0.9:5432");
        assert_eq!(vars["MY_DB_PORT_5432_TCP_ADDR"], "10.43.0.9");
        assert_eq!(vars["MY_DB_PORT_5432_TCP_PROTO"], "tcp");
    }

    #[test]
    fn maps_are_formatted_as_go_quotes_them() {
        for (raw, quoted) in [
            ("plain", r#""plain""#),
            ("a\"b\\c", r#""a\"b\\c""#),
            ("\u{7}\u{8}\u{c}\n\r\t\u{b}", r#""\a\b\f\n\r\t\v""#),
            ("\u{1}\u{7f}", r#""\x01\x7f""#),
            ("é ü 日本 😀", r#""é ü 日本 😀""#),
            (
                "\u{a0}\u{200b}\u{2028}\u{feff}",
                r#""\u00a0\u200b\u2028\ufeff""#,
            ),
            ("\u{85}", r#""\u0085""#),
            ("\u{f0000}", r#""\U000f0000""#),
        ] {
            assert_eq!(capstan_api::field::go_quote(raw), quoted, "{raw:?}");
        }
        assert_eq!(format_map(None), "");
        let map = BTreeMap::from([
            ("b".to_owned(), "2".to_owned()),
            ("a".to_owned(), "x\"y".to_owned()),
        ]);
        assert_eq!(format_map(Some(&map)), "a=\"x\\\"y\"\nb=\"2\"");
    }

    #[test]
    fn field_and_resource_references_resolve() {
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("p".to_owned()),
                namespace: Some("ns".to_owned()),
                labels: Some(BTreeMap::from([("app".to_owned(), "web".to_owned())])),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        };
        let hosts = ["10.0.0.2".to_owned()];
        assert_eq!(
            field_value(&pod, "metadata.name", "", &hosts)
                .ok()
                .as_deref(),
            Some("p")
        );
        assert_eq!(
            field_value(&pod, "metadata.labels['app']", "", &hosts)
                .ok()
                .as_deref(),
            Some("web")
        );
        assert_eq!(
            field_value(&pod, "status.podIP", "10.42.0.5", &hosts)
                .ok()
                .as_deref(),
            Some("10.42.0.5")
        );
        assert_eq!(
            field_value(&pod, "status.hostIP", "", &hosts)
                .ok()
                .as_deref(),
            Some("10.0.0.2")
        );
        assert!(field_value(&pod, "spec.bogus", "", &hosts).is_err());
        let container = Container {
            resources: Some(ResourceRequirements {
                limits: Some(BTreeMap::from([
                    ("cpu".to_owned(), Q("250m".to_owned())),
                    ("memory".to_owned(), Q("64Mi".to_owned())),
                ])),
                ..ResourceRequirements::default()
            }),
            ..Container::default()
        };
        let allocatable = BTreeMap::from([("cpu".to_owned(), "4".to_owned())]);
        for (resource, divisor, expected) in [
            ("limits.cpu", None, "1"),
            ("limits.cpu", Some("1m"), "250"),
            ("limits.memory", Some("1Mi"), "64"),
            ("limits.memory", None, "67108864"),
            ("requests.cpu", None, "0"),
            // Go clients send a zero divisor for "none": one core, one byte.
            ("limits.cpu", Some("0"), "1"),
            ("limits.memory", Some("0"), "67108864"),
            ("requests.memory", Some("0"), "0"),
        ] {
            assert_eq!(
                resource_value(&container, resource, divisor, &allocatable)
                    .ok()
                    .as_deref(),
                Some(expected),
                "{resource} {divisor:?}"
            );
        }
        assert_eq!(
            resource_value(&Container::default(), "limits.cpu", None, &allocatable)
                .ok()
                .as_deref(),
            Some("4")
        );
    }
}

//! Service allocation: cluster IPs from the service CIDR and node ports from their range,
//! allocated on create (and node ports on a type change), checked when asked for, as upstream's
//! service storage does in its `BeginCreate`/`BeginUpdate` hooks: [`begin_write_for`] gives the
//! services registry its write hook ([`crate::registry::BeginWrite`]), so every write through
//! the main endpoint (create, PUT, patch, apply, the server's own) allocates, whoever makes it.
//! Also the `kubernetes` service every cluster has in `default`.
//!
//! Allocations are read from the services that exist (through the watch cache's consistent
//! view), under one lock, so one server never hands out an address twice. Several servers on
//! one etcd could race; upstream keeps a bitmap object in storage for that, which remains to be
//! done here.

use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::sync::Arc;

use capstan_api::catalog::Resource;

use capstan_api::StatusError;
use capstan_api::field::{FieldError, Path};
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::registry::object::meta_str;
use crate::registry::{BeginWrite, ListOptions, Registry};
use crate::status::ApiError;

/// An IPv4 CIDR such as `10.43.0.0/16`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    base: u32,
    prefix: u8,
}

impl Cidr {
    /// Parses `a.b.c.d/n`.
    pub fn parse(text: &str) -> Result<Cidr, String> {
        let (ip, prefix) = text
            .split_once('/')
            .ok_or_else(|| format!("{text:?} is not a CIDR"))?;
        let ip: Ipv4Addr = ip.parse().map_err(|e| format!("{text:?}: {e}"))?;
        let prefix: u8 = prefix.parse().map_err(|e| format!("{text:?}: {e}"))?;
        if !(8..=30).contains(&prefix) {
            return Err(format!(
                "{text:?}: the prefix length must be between 8 and 30"
            ));
        }
        let mask = u32::MAX << (32 - prefix);
        Ok(Cidr {
            base: u32::from(ip) & mask,
            prefix,
        })
    }

    fn size(self) -> u32 {
        1 << (32 - self.prefix)
    }

    fn contains(self, ip: Ipv4Addr) -> bool {
        let ip = u32::from(ip);
        ip >= self.base && ip - self.base < self.size()
    }

    /// The first usable address: upstream gives it to the `kubernetes` service.
    pub fn first(self) -> Ipv4Addr {
        Ipv4Addr::from(self.base + 1)
    }

    /// The `n`th address after the network's (the 10th is the cluster DNS's by convention,
    /// 10.43.0.10 in 10.43.0.0/16); `None` past the range's last usable address.
    pub fn nth(self, n: u32) -> Option<Ipv4Addr> {
        (n >= 1 && n < self.size() - 1).then(|| Ipv4Addr::from(self.base + n))
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", Ipv4Addr::from(self.base), self.prefix)
    }
}

/// The cluster IPs and node ports other services hold.
#[derive(Debug, Default)]
struct InUse(HashSet<u32>, HashSet<u16>);

/// The service address ranges.
#[derive(Debug)]
struct Allocator {
    cidr: Cidr,
    node_ports: (u16, u16),
    lock: Arc<Mutex<()>>,
}

/// The node port range upstream uses by default.
const NODE_PORTS: (u16, u16) = (30000, 32767);

fn wants_cluster_ip(svc: &Value) -> bool {
    svc["spec"]["type"].as_str().unwrap_or("ClusterIP") != "ExternalName"
}

fn wants_node_ports(svc: &Value) -> bool {
    matches!(
        svc["spec"]["type"].as_str(),
        Some("NodePort" | "LoadBalancer")
    )
}

impl Allocator {
    fn new(cidr: Cidr, node_ports: (u16, u16)) -> Self {
        Allocator {
            cidr,
            node_ports,
            lock: Arc::new(Mutex::new(())),
        }
    }

    /// What every existing service (but `except`) holds.
    async fn in_use(
        &self,
        services: &Registry,
        except: Option<(&str, &str)>,
    ) -> Result<InUse, ApiError> {
        let list = services.list(None, &ListOptions::default()).await?;
        let mut ips = HashSet::new();
        let mut ports = HashSet::new();
        for svc in list.items.iter().map(|item| item.object()) {
            let svc = &svc;
            if except.is_some_and(|(ns, name)| {
                meta_str(svc, "namespace") == ns && meta_str(svc, "name") == name
            }) {
                continue;
            }
            for ip in svc["spec"]["clusterIPs"]
                .as_array()
                .into_iter()
                .flatten()
                .chain(std::iter::once(&svc["spec"]["clusterIP"]))
            {
                if let Some(ip) = ip.as_str().and_then(|s| s.parse::<Ipv4Addr>().ok()) {
                    ips.insert(u32::from(ip));
                }
            }
            for port in svc["spec"]["ports"].as_array().into_iter().flatten() {
                if let Some(p) = port["nodePort"]
                    .as_u64()
                    .and_then(|p| u16::try_from(p).ok())
                {
                    ports.insert(p);
                }
            }
        }
        Ok(InUse(ips, ports))
    }

    /// Fills in and checks the cluster IP and node ports of a service being created (`old` is
    /// `None`) or updated (what the new one leaves out carried from `old` first), under the
    /// allocation lock, which the returned guard holds until the write is stored.
    async fn begin_write(
        &self,
        services: &Registry,
        svc: &mut Value,
        old: Option<&Value>,
    ) -> Result<tokio::sync::OwnedMutexGuard<()>, ApiError> {
        let guard = self.lock.clone().lock_owned().await;
        if let Some(old) = old {
            carry_allocations(svc, old);
        }
        let except = (meta_str(svc, "namespace"), meta_str(svc, "name"));
        let used = self.in_use(services, Some(except)).await?;
        self.assign(svc, old, &used)?;
        Ok(guard)
    }

    /// Fills in and checks the addresses of `svc` against what other services hold; `old` is
    /// the stored service on an update.
    fn assign(&self, svc: &mut Value, old: Option<&Value>, used: &InUse) -> Result<(), ApiError> {
        if let Some(old) = old {
            drop_type_dependent_fields(svc, old);
        }
        let mut errors = Vec::new();
        if wants_cluster_ip(svc)
            && old.is_none_or(|o| !wants_cluster_ip(o) || o["spec"]["clusterIP"].is_null())
        {
            self.assign_ip(svc, &used.0, &mut errors);
        }
        if wants_node_ports(svc) {
            self.assign_node_ports(svc, old, &used.1, &mut errors);
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(StatusError::invalid("", "Service", meta_str(svc, "name"), &errors).into())
        }
    }

    fn assign_ip(&self, svc: &mut Value, used: &HashSet<u32>, errors: &mut Vec<FieldError>) {
        let asked = svc["spec"]["clusterIP"]
            .as_str()
            .or_else(|| svc["spec"]["clusterIPs"][0].as_str())
            .unwrap_or_default()
            .to_owned();
        let path = Path::new("spec").child("clusterIPs").index(0);
        let ip = match asked.as_str() {
            "None" => {
                // Headless: upstream mirrors clusterIP into clusterIPs.
                svc["spec"]["clusterIP"] = "None".into();
                svc["spec"]["clusterIPs"] = json!(["None"]);
                return;
            }
            "" => {
                // Random, as upstream, so addresses are not reused at once after a delete.
                let size = self.cidr.size();
                let start = rand::random_range(1..size - 1);
                let found = (0..size - 2)
                    .map(|i| self.cidr.base + 1 + (start - 1 + i) % (size - 2))
                    .find(|ip| !used.contains(ip));
                match found {
                    Some(ip) => Ipv4Addr::from(ip),
                    None => {
                        errors.push(FieldError::internal(
                            &path,
                            "failed to allocate a serviceIP: range is full",
                        ));
                        return;
                    }
                }
            }
            text => match text.parse::<Ipv4Addr>() {
                Ok(ip) if !self.cidr.contains(ip) => {
                    errors.push(FieldError::invalid(
                        &path,
                        text,
                        &format!("failed to allocate IP {text}: provided IP is not in the valid range. The range of valid IPs is {}", self.cidr),
                    ));
                    return;
                }
                Ok(ip) if used.contains(&u32::from(ip)) => {
                    errors.push(FieldError::invalid(
                        &path,
                        text,
                        &format!("failed to allocate IP {text}: provided IP is already allocated"),
                    ));
                    return;
                }
                Ok(ip) => ip,
                // Malformed addresses are the validation's to report.
                Err(_) => return,
            },
        };
        svc["spec"]["clusterIP"] = ip.to_string().into();
        svc["spec"]["clusterIPs"] = json!([ip.to_string()]);
        if svc["spec"].get("ipFamilies").is_none_or(Value::is_null) {
            svc["spec"]["ipFamilies"] = json!(["IPv4"]);
        }
        if svc["spec"].get("ipFamilyPolicy").is_none_or(Value::is_null) {
            svc["spec"]["ipFamilyPolicy"] = "SingleStack".into();
        }
    }

    fn assign_node_ports(
        &self,
        svc: &mut Value,
        old: Option<&Value>,
        used: &HashSet<u16>,
        errors: &mut Vec<FieldError>,
    ) {
        let (low, high) = self.node_ports;
        let mut taken: HashSet<u16> = used.clone();
        let Some(ports) = svc["spec"]["ports"].as_array_mut() else {
            return;
        };
        for (i, port) in ports.iter_mut().enumerate() {
            let path = Path::new("spec").child("ports").index(i).child("nodePort");
            match port["nodePort"]
                .as_u64()
                .and_then(|p| u16::try_from(p).ok())
                .filter(|p| *p != 0)
            {
                Some(p) => {
                    // A port the service already held is its own.
                    let held = old.is_some_and(|o| {
                        o["spec"]["ports"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .any(|q| q["nodePort"].as_u64() == Some(u64::from(p)))
                    });
                    if !(low..=high).contains(&p) {
                        errors.push(FieldError::invalid(
                            &path,
                            i64::from(p),
                            &format!("provided port is not in the valid range. The range of valid ports is {low}-{high}"),
                        ));
                    } else if !held && taken.contains(&p) {
                        errors.push(FieldError::invalid(
                            &path,
                            i64::from(p),
                            "provided port is already allocated",
                        ));
                    } else {
                        taken.insert(p);
                    }
                }
                None => {
                    let span = u32::from(high - low) + 1;
                    let start = rand::random_range(0..span);
                    let found = (0..span)
                        .filter_map(|i| u16::try_from(u32::from(low) + (start + i) % span).ok())
                        .find(|p| !taken.contains(p));
                    match found {
                        Some(p) => {
                            taken.insert(p);
                            port["nodePort"] = p.into();
                        }
                        None => errors.push(FieldError::internal(
                            &path,
                            "failed to allocate a nodePort: range is full",
                        )),
                    }
                }
            }
        }
    }
}

/// The write hook of the core `services` registry, allocating from `cidr` and upstream's default
/// node port range; no other resource has one.
pub(crate) fn begin_write_for(cidr: Cidr) -> impl Fn(&'static Resource) -> Option<BeginWrite> {
    let allocator = Arc::new(Allocator::new(cidr, NODE_PORTS));
    move |resource| {
        if !(resource.group.is_empty() && resource.plural == "services") {
            return None;
        }
        let allocator = allocator.clone();
        Some(crate::registry::begin_write(move |services, svc, old| {
            let allocator = allocator.clone();
            Box::pin(async move {
                let guard = allocator.begin_write(services, svc, old).await?;
                Ok(Box::new(guard) as Box<dyn std::any::Any + Send>)
            })
        }))
    }
}

/// What a write that leaves them out keeps from the stored service: its cluster IPs and the node
/// ports of ports it still has (upstream's `patchAllocatedValues`).
fn carry_allocations(new: &mut Value, old: &Value) {
    let empty = |v: &Value| v.is_null() || v.as_str() == Some("");
    if wants_cluster_ip(new)
        && wants_cluster_ip(old)
        && empty(&new["spec"]["clusterIP"])
        && !empty(&old["spec"]["clusterIP"])
    {
        for field in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            if !old["spec"][field].is_null() {
                new["spec"][field] = old["spec"][field].clone();
            }
        }
    }
    if !wants_node_ports(new) {
        return;
    }
    let old_ports: Vec<Value> = old["spec"]["ports"].as_array().cloned().unwrap_or_default();
    if let Some(ports) = new["spec"]["ports"].as_array_mut() {
        for port in ports {
            if port["nodePort"].as_u64().unwrap_or(0) != 0 {
                continue;
            }
            let same = old_ports.iter().find(|o| {
                o["port"] == port["port"]
                    && o["protocol"].as_str().unwrap_or("TCP")
                        == port["protocol"].as_str().unwrap_or("TCP")
            });
            if let Some(node_port) = same.map(|o| o["nodePort"].clone()).filter(|p| !p.is_null()) {
                port["nodePort"] = node_port;
            }
        }
    }
}

/// On an update that changes the type, clears what the new type does not use and the client
/// left as it was (upstream's `dropTypeDependentFields`): the cluster IPs and IP families when
/// the type becomes ExternalName, node ports when it leaves NodePort/LoadBalancer, and the
/// fields only a load balancer or external traffic has. A field the client changed stays, for
/// validation to judge.
fn drop_type_dependent_fields(new: &mut Value, old: &Value) {
    let spec_same = |field: &str, new: &Value| new["spec"][field] == old["spec"][field];
    if wants_cluster_ip(old) && !wants_cluster_ip(new) {
        if spec_same("clusterIP", new) && spec_same("clusterIPs", new) {
            remove_spec(new, "clusterIP");
            remove_spec(new, "clusterIPs");
        }
        for field in ["ipFamilies", "ipFamilyPolicy"] {
            if spec_same(field, new) {
                remove_spec(new, field);
            }
        }
    }
    let node_ports = |svc: &Value| -> Vec<Value> {
        svc["spec"]["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| p["nodePort"].clone())
            .collect()
    };
    if wants_node_ports(old) && !wants_node_ports(new) && node_ports(old) == node_ports(new) {
        for port in new["spec"]["ports"].as_array_mut().into_iter().flatten() {
            if let Some(port) = port.as_object_mut() {
                port.remove("nodePort");
            }
        }
    }
    let is_lb = |svc: &Value| svc["spec"]["type"].as_str() == Some("LoadBalancer");
    if is_lb(old) && !is_lb(new) {
        for field in [
            "healthCheckNodePort",
            "allocateLoadBalancerNodePorts",
            "loadBalancerClass",
        ] {
            if spec_same(field, new) {
                remove_spec(new, field);
            }
        }
    }
    if wants_node_ports(old) && !wants_node_ports(new) && spec_same("externalTrafficPolicy", new) {
        remove_spec(new, "externalTrafficPolicy");
    }
    if !is_lb(new)
        && let Some(status) = new.get_mut("status").and_then(Value::as_object_mut)
        && status.contains_key("loadBalancer")
    {
        status.insert("loadBalancer".into(), json!({}));
    }
}

fn remove_spec(svc: &mut Value, field: &str) {
    if let Some(spec) = svc.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove(field);
    }
}

/// The `kubernetes` service in `default`, pointing at the API server's port.
pub(crate) fn kubernetes_service(cidr: Cidr, port: u16) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "kubernetes", "namespace": "default",
                     "labels": {"component": "apiserver", "provider": "kubernetes"}},
        "spec": {
            "type": "ClusterIP",
            "clusterIP": cidr.first().to_string(),
            "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}],
            "sessionAffinity": "None",
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs_parse_and_contain() {
        let cidr = Cidr::parse("10.43.7.9/16").unwrap();
        assert_eq!(cidr.to_string(), "10.43.0.0/16");
        assert_eq!(cidr.first(), Ipv4Addr::new(10, 43, 0, 1));
        assert!(cidr.contains(Ipv4Addr::new(10, 43, 255, 254)));
        assert!(!cidr.contains(Ipv4Addr::new(10, 44, 0, 1)));
        assert!(Cidr::parse("10.43.0.0").is_err());
        assert!(Cidr::parse("10.43.0.0/33").is_err());
    }
}

//! Service allocation, as upstream 1.33's service storage does it in its `BeginCreate`/
//! `BeginUpdate`/`AfterDelete` hooks: [`write_hooks_for`] gives the core `services` registry its
//! write hooks ([`crate::registry::WriteHooks`]), so every write through the main endpoint
//! (create, PUT, patch, apply, the server's own) allocates, whoever makes it. A Service's cluster
//! IP is reserved by creating its `IPAddress` object ([`ips`]), its node ports by one
//! conditional write of the stored bitmap ([`ports`]): never by reading what others hold and
//! then writing, so several servers on one datastore never hand out an address or port twice.
//! A write that fails gives back what it took; a stored update lets go of what the old Service
//! held and the new one does not (a type change); a deleted Service lets go of everything.
//! [`repair`] finds and fixes what a crash leaves behind, as upstream's repair controllers.
//! Also the `kubernetes` Service every cluster has in `default`, and the default ServiceCIDR
//! (`kubernetes`, the configured range).

mod ips;
mod ports;
pub(crate) mod repair;

use std::net::Ipv4Addr;
use std::sync::{Arc, Weak};

use capstan_api::StatusError;
use capstan_api::catalog::Resource;
use capstan_api::field::{BadValue, FieldError, Path};
use capstan_api::validation::meta::go_string_slice;
use capstan_store::Store;
use futures::future::BoxFuture;
use serde_json::{Value, json};

pub(crate) use ips::{IP_FAMILY, IpAllocator, IpError, MANAGED_BY, Reserved};
pub(crate) use ports::PortAllocator;

use crate::registry::object::meta_str;
use crate::registry::{Held, Registries, Registry, WriteHooks};
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

    /// How many addresses can be handed out: all but the network's and the broadcast one.
    pub(crate) fn usable(self) -> u32 {
        self.size() - 2
    }

    /// Whether `ip` may be handed out: in the range, neither its network nor broadcast address.
    pub(crate) fn is_usable(self, ip: Ipv4Addr) -> bool {
        let ip = u32::from(ip);
        ip > self.base && ip - self.base < self.size() - 1
    }

    pub(crate) fn contains(self, ip: Ipv4Addr) -> bool {
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

/// The name of the default ServiceCIDR, which holds the configured range.
pub(crate) const DEFAULT_SERVICE_CIDR: &str = "kubernetes";

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

/// Whether a Service needs a health check node port (upstream's `needsHCNodePort`): a load
/// balancer keeping external traffic on the node it arrives at.
fn needs_health_check(svc: &Value) -> bool {
    svc["spec"]["type"] == "LoadBalancer" && svc["spec"]["externalTrafficPolicy"] == "Local"
}

/// The health check node port a Service asks for or holds (0: none).
fn health_check_port(svc: &Value) -> u16 {
    svc["spec"]["healthCheckNodePort"]
        .as_u64()
        .and_then(|p| u16::try_from(p).ok())
        .unwrap_or(0)
}

/// The cluster IPs a Service holds (not `None`, not malformed).
pub(crate) fn cluster_ips(svc: &Value) -> Vec<Ipv4Addr> {
    let mut ips: Vec<Ipv4Addr> = svc["spec"]["clusterIPs"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(std::iter::once(&svc["spec"]["clusterIP"]))
        .filter_map(|ip| ip.as_str()?.parse().ok())
        .collect();
    ips.dedup();
    ips
}

/// The node ports a Service holds, its health check node port included.
pub(crate) fn node_ports(svc: &Value) -> Vec<u16> {
    let mut ports: Vec<u16> = svc["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|port| u16::try_from(port["nodePort"].as_u64()?).ok())
        .chain(std::iter::once(health_check_port(svc)))
        .filter(|p| *p != 0)
        .collect();
    ports.sort_unstable();
    ports.dedup();
    ports
}

/// The Service allocators of one server: cluster IPs as IPAddress objects ([`ips`]), node
/// ports in the stored bitmap ([`ports`]). They are the core `services` registry's write hooks.
#[derive(Debug)]
pub(crate) struct Allocators {
    pub ips: IpAllocator,
    pub ports: PortAllocator,
}

/// Why the node ports of a Service could not be had.
enum PortsFailed {
    Invalid(Vec<FieldError>),
    /// Upstream's internal error for a health check node port it cannot have.
    Internal(String),
    Api(ApiError),
}

impl From<ApiError> for PortsFailed {
    fn from(error: ApiError) -> Self {
        PortsFailed::Api(error)
    }
}

/// What one write of a Service took, and what it will let go once stored.
struct Allocation {
    allocators: Arc<Allocators>,
    namespace: String,
    name: String,
    /// The cluster IP this write reserved.
    reserved_ip: Option<Reserved>,
    /// The node ports this write took.
    taken_ports: Vec<u16>,
    /// The cluster IPs of the stored Service that the new one no longer has.
    dropped_ips: Vec<Ipv4Addr>,
    /// Likewise its node ports.
    dropped_ports: Vec<u16>,
}

impl Held for Allocation {
    fn finish(self: Box<Self>, stored: bool) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let allocators = &self.allocators;
            if stored {
                for ip in &self.dropped_ips {
                    allocators
                        .ips
                        .release(*ip, &self.namespace, &self.name)
                        .await;
                }
                allocators.ports.release(&self.dropped_ports).await;
            } else {
                if let Some(reserved) = &self.reserved_ip {
                    allocators.ips.undo(reserved).await;
                }
                allocators.ports.release(&self.taken_ports).await;
            }
        })
    }
}

impl Allocators {
    /// The allocators of `cidr` and the default node port range over `store`, to be bound to
    /// the registries they write IPAddresses through ([`Allocators::bind`]).
    pub(crate) fn new(cidr: Cidr, store: Store) -> Self {
        Allocators {
            ips: IpAllocator::new(cidr),
            ports: PortAllocator::new(store, NODE_PORTS),
        }
    }

    /// Binds the allocators to the registry table (made after them, as it holds their hooks).
    pub(crate) fn bind(&self, registries: Weak<Registries>) {
        self.ips.bind(registries);
    }

    /// Fills in and reserves the cluster IP and node ports of a Service being created (`old`
    /// is `None`) or updated (what the new one leaves out carried from `old` first); on a dry
    /// run only checks.
    async fn begin_write(
        self: &Arc<Self>,
        svc: &mut Value,
        old: Option<&Value>,
        dry_run: bool,
    ) -> Result<Allocation, ApiError> {
        if let Some(old) = old {
            carry_allocations(svc, old);
            drop_type_dependent_fields(svc, old);
        }
        let namespace = meta_str(svc, "namespace").to_owned();
        let name = meta_str(svc, "name").to_owned();
        let mut allocation = Allocation {
            allocators: self.clone(),
            namespace,
            name,
            reserved_ip: None,
            taken_ports: Vec::new(),
            dropped_ips: Vec::new(),
            dropped_ports: Vec::new(),
        };
        if wants_cluster_ip(svc)
            && old.is_none_or(|o| !wants_cluster_ip(o) || o["spec"]["clusterIP"].is_null())
        {
            allocation.reserved_ip = self.assign_ip(svc, &allocation, dry_run).await?;
        }
        if wants_node_ports(svc) || needs_health_check(svc) {
            match self.assign_node_ports(svc, old, dry_run).await {
                Ok(taken) => allocation.taken_ports = taken,
                Err(error) => {
                    if let Some(reserved) = &allocation.reserved_ip {
                        self.ips.undo(reserved).await;
                    }
                    return Err(match error {
                        PortsFailed::Api(error) => error,
                        PortsFailed::Invalid(errors) => {
                            StatusError::invalid("", "Service", &allocation.name, &errors).into()
                        }
                        PortsFailed::Internal(message) => StatusError::internal(&message).into(),
                    });
                }
            }
        }
        if let Some(old) = old {
            let (kept_ips, kept_ports) = (cluster_ips(svc), node_ports(svc));
            allocation.dropped_ips = cluster_ips(old)
                .into_iter()
                .filter(|ip| !kept_ips.contains(ip))
                .collect();
            allocation.dropped_ports = node_ports(old)
                .into_iter()
                .filter(|p| !kept_ports.contains(p))
                .collect();
        }
        Ok(allocation)
    }

    /// Fills in and reserves the cluster IP of `svc`: the one asked for, or a free one.
    async fn assign_ip(
        &self,
        svc: &mut Value,
        allocation: &Allocation,
        dry_run: bool,
    ) -> Result<Option<Reserved>, ApiError> {
        let asked = svc["spec"]["clusterIP"]
            .as_str()
            .or_else(|| svc["spec"]["clusterIPs"][0].as_str())
            .unwrap_or_default()
            .to_owned();
        let (namespace, name) = (&allocation.namespace, &allocation.name);
        let (ip, reserved) = match asked.as_str() {
            "None" => {
                // Headless: upstream mirrors clusterIP into clusterIPs.
                svc["spec"]["clusterIP"] = "None".into();
                svc["spec"]["clusterIPs"] = json!(["None"]);
                return Ok(None);
            }
            "" => match self.ips.allocate_next(namespace, name, dry_run).await {
                Ok(allocated) => allocated,
                Err(IpError::Api(error)) => return Err(error),
                Err(_) => {
                    return Err(StatusError::internal(
                        "failed to allocate a serviceIP: range is full",
                    )
                    .into());
                }
            },
            text => {
                // Malformed addresses are the validation's to report.
                let Ok(ip) = text.parse::<Ipv4Addr>() else {
                    return Ok(None);
                };
                let why = match self.ips.allocate(ip, namespace, name, dry_run).await {
                    Ok(reserved) => return Ok(self.fill_ip(svc, ip, reserved)),
                    Err(IpError::Api(error)) => return Err(error),
                    Err(IpError::Taken) => "provided IP is already allocated".to_owned(),
                    Err(IpError::OutOfRange | IpError::Full) => {
                        "the provided network does not match the current range".to_owned()
                    }
                    Err(IpError::Reserved) => format!(
                        "the provided IP ({ip}) is not in the valid range. The range of valid IPs is {}",
                        self.ips.cidr
                    ),
                };
                let shown: Vec<String> = match svc["spec"]["clusterIPs"].as_array() {
                    Some(ips) if !ips.is_empty() => ips
                        .iter()
                        .map(|ip| ip.as_str().unwrap_or_default().to_owned())
                        .collect(),
                    _ => vec![text.to_owned()],
                };
                let error = FieldError::invalid(
                    &Path::new("spec").child("clusterIPs"),
                    BadValue::Other(go_string_slice(&shown)),
                    &format!("failed to allocate IP {text}: {why}"),
                );
                return Err(StatusError::invalid("", "Service", name, &[error]).into());
            }
        };
        Ok(self.fill_ip(svc, ip, reserved))
    }

    /// Writes the allocated `ip` into `svc`.
    fn fill_ip(
        &self,
        svc: &mut Value,
        ip: Ipv4Addr,
        reserved: Option<Reserved>,
    ) -> Option<Reserved> {
        svc["spec"]["clusterIP"] = ip.to_string().into();
        svc["spec"]["clusterIPs"] = json!([ip.to_string()]);
        if svc["spec"].get("ipFamilies").is_none_or(Value::is_null) {
            svc["spec"]["ipFamilies"] = json!(["IPv4"]);
        }
        if svc["spec"].get("ipFamilyPolicy").is_none_or(Value::is_null) {
            svc["spec"]["ipFamilyPolicy"] = "SingleStack".into();
        }
        reserved
    }

    /// Fills in and takes the node ports of `svc` in one change of the bitmap: the ports asked
    /// for (those `old` held stay its own), a free one for each port without one (ports with
    /// the same number share one, as upstream's), and the health check node port of a load
    /// balancer with the `Local` external traffic policy; all or none. Returns the ports taken.
    async fn assign_node_ports(
        &self,
        svc: &mut Value,
        old: Option<&Value>,
        dry_run: bool,
    ) -> Result<Vec<u16>, PortsFailed> {
        let (low, high) = (self.ports.low, self.ports.high);
        let original = svc["spec"]["ports"].as_array().cloned().unwrap_or_default();
        let own: Vec<u16> = old
            .filter(|o| wants_node_ports(o))
            .map(node_ports)
            .unwrap_or_default();
        let health = needs_health_check(svc).then(|| health_check_port(svc));
        let (ports, health, taken) = self
            .ports
            .change(dry_run, |bitmap| {
                let mut ports = original.clone();
                let mut taken: Vec<u16> = Vec::new();
                let mut errors = Vec::new();
                let mut by_number: Vec<(Value, u16)> = Vec::new();
                for (i, port) in ports.iter_mut().enumerate() {
                    let path = Path::new("spec").child("ports").index(i).child("nodePort");
                    let asked = port["nodePort"]
                        .as_u64()
                        .and_then(|p| u16::try_from(p).ok())
                        .filter(|p| *p != 0);
                    let chosen = match asked {
                        Some(p) if !bitmap.in_range(p) => {
                            errors.push(FieldError::invalid(
                                &path,
                                i64::from(p),
                                &format!("provided port is not in the valid range. The range of valid ports is {low}-{high}"),
                            ));
                            continue;
                        }
                        Some(p) if own.contains(&p) || taken.contains(&p) => p,
                        Some(p) if bitmap.has(p) => {
                            errors.push(FieldError::invalid(
                                &path,
                                i64::from(p),
                                "provided port is already allocated",
                            ));
                            continue;
                        }
                        Some(p) => {
                            bitmap.set(p);
                            taken.push(p);
                            p
                        }
                        None => {
                            let same = by_number
                                .iter()
                                .find(|(number, _)| *number == port["port"])
                                .map(|(_, p)| *p);
                            match same.or_else(|| bitmap.random_free()) {
                                Some(p) => {
                                    if !taken.contains(&p) {
                                        bitmap.set(p);
                                        taken.push(p);
                                    }
                                    port["nodePort"] = p.into();
                                    p
                                }
                                None => {
                                    errors.push(FieldError::internal(
                                        &path,
                                        "failed to allocate a nodePort: range is full",
                                    ));
                                    continue;
                                }
                            }
                        }
                    };
                    by_number.push((port["port"].clone(), chosen));
                }
                if !errors.is_empty() {
                    return Err(PortsFailed::Invalid(errors));
                }
                // Upstream's `allocHealthCheckNodePort`, in the same change.
                let health = match health {
                    None => None,
                    Some(p) if p != 0 && own.contains(&p) => Some(p),
                    Some(p) if p != 0 => {
                        if !bitmap.in_range(p) {
                            return Err(PortsFailed::Internal(format!("failed to allocate requested HealthCheck NodePort {p}: provided port is not in the valid range. The range of valid ports is {low}-{high}")));
                        }
                        if bitmap.has(p) || taken.contains(&p) {
                            return Err(PortsFailed::Internal(format!("failed to allocate requested HealthCheck NodePort {p}: provided port is already allocated")));
                        }
                        bitmap.set(p);
                        taken.push(p);
                        Some(p)
                    }
                    Some(_) => {
                        let p = bitmap.random_free().ok_or_else(|| {
                            PortsFailed::Internal(
                                "failed to allocate a HealthCheck NodePort 0: range is full"
                                    .to_owned(),
                            )
                        })?;
                        bitmap.set(p);
                        taken.push(p);
                        Some(p)
                    }
                };
                Ok((ports, health, taken))
            })
            .await?;
        if !original.is_empty() {
            svc["spec"]["ports"] = Value::Array(ports);
        }
        if let Some(health) = health {
            svc["spec"]["healthCheckNodePort"] = health.into();
        }
        Ok(if dry_run { Vec::new() } else { taken })
    }

    /// Lets go of what a deleted Service held.
    async fn release_all(&self, svc: &Value) {
        let (namespace, name) = (meta_str(svc, "namespace"), meta_str(svc, "name"));
        for ip in cluster_ips(svc) {
            self.ips.release(ip, namespace, name).await;
        }
        self.ports.release(&node_ports(svc)).await;
    }
}

/// The allocators as the `services` registry's hooks.
struct Hooks(Arc<Allocators>);

impl WriteHooks for Hooks {
    fn begin_write<'a>(
        &'a self,
        _services: &'a Registry,
        svc: &'a mut Value,
        old: Option<&'a Value>,
        dry_run: bool,
    ) -> BoxFuture<'a, Result<Box<dyn Held>, ApiError>> {
        Box::pin(async move {
            let allocation = self.0.begin_write(svc, old, dry_run).await?;
            Ok(Box::new(allocation) as Box<dyn Held>)
        })
    }

    fn deleted<'a>(&'a self, svc: &'a Value) -> BoxFuture<'a, ()> {
        Box::pin(self.0.release_all(svc))
    }
}

/// The write hooks of the core `services` registry, allocating with `allocators`; no other
/// resource has any.
pub(crate) fn write_hooks_for(
    allocators: Arc<Allocators>,
) -> impl Fn(&'static Resource) -> Option<Arc<dyn WriteHooks>> {
    move |resource| {
        (resource.group.is_empty() && resource.plural == "services")
            .then(|| Arc::new(Hooks(allocators.clone())) as Arc<dyn WriteHooks>)
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
    if needs_health_check(new) && needs_health_check(old) && health_check_port(new) == 0 {
        let held = old["spec"]["healthCheckNodePort"].clone();
        if !held.is_null() {
            new["spec"]["healthCheckNodePort"] = held;
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
    if needs_health_check(old) && !needs_health_check(new) && spec_same("healthCheckNodePort", new)
    {
        remove_spec(new, "healthCheckNodePort");
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

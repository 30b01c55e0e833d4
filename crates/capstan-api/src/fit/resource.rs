//! Resource amounts as the scheduler and the kubelet count them: what a pod requests (upstream's
//! `resource.PodRequests` from component-helpers) and what a node can hold.

use std::collections::BTreeMap;

use crate::quantity::Quantity;
use k8s_openapi::api::core::v1::{Container, Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;

/// The CPU a container without a CPU request counts as when scoring (upstream's
/// `DefaultMilliCPURequest`, 0.1 core).
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// The memory a container without a memory request counts as when scoring (upstream's
/// `DefaultMemoryRequest`, 200 MB).
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// Resource names with fields of their own in [`Resource`].
pub const CPU: &str = "cpu";
/// Memory, in bytes.
pub const MEMORY: &str = "memory";
/// Local ephemeral storage, in bytes.
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
/// The number of pods a node can run.
pub const PODS: &str = "pods";

/// An amount of every resource the scheduler accounts for (upstream's `framework.Resource`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resource {
    /// CPU in thousandths of a core.
    pub milli_cpu: i64,
    /// Memory in bytes.
    pub memory: i64,
    /// Ephemeral storage in bytes.
    pub ephemeral_storage: i64,
    /// How many pods (meaningful for allocatable only).
    pub allowed_pod_number: i64,
    /// Extended resources, hugepages and attachable volumes, by name, in whole units.
    pub scalar: BTreeMap<String, i64>,
}

fn parse(quantity: &ApiQuantity) -> Option<Quantity> {
    Quantity::parse(&quantity.0).ok()
}

impl Resource {
    /// The amounts of a resource list (`requests`, `limits`, `allocatable`); unparsable
    /// quantities count as zero (validation keeps them out of the API).
    pub fn from_list(list: Option<&BTreeMap<String, ApiQuantity>>) -> Resource {
        let mut resource = Resource::default();
        for (name, quantity) in list.into_iter().flatten() {
            resource.add_named(name, quantity);
        }
        resource
    }

    fn add_named(&mut self, name: &str, quantity: &ApiQuantity) {
        let Some(q) = parse(quantity) else { return };
        match name {
            CPU => self.milli_cpu += q.milli_value(),
            MEMORY => self.memory += q.value(),
            EPHEMERAL_STORAGE => self.ephemeral_storage += q.value(),
            PODS => self.allowed_pod_number += q.value(),
            _ if is_scalar(name) => *self.scalar.entry(name.to_owned()).or_default() += q.value(),
            _ => {}
        }
    }

    /// Adds `other` to this amount.
    pub fn add(&mut self, other: &Resource) {
        self.milli_cpu += other.milli_cpu;
        self.memory += other.memory;
        self.ephemeral_storage += other.ephemeral_storage;
        self.allowed_pod_number += other.allowed_pod_number;
        for (name, value) in &other.scalar {
            *self.scalar.entry(name.clone()).or_default() += value;
        }
    }

    /// Subtracts `other` from this amount.
    pub fn sub(&mut self, other: &Resource) {
        self.milli_cpu -= other.milli_cpu;
        self.memory -= other.memory;
        self.ephemeral_storage -= other.ephemeral_storage;
        self.allowed_pod_number -= other.allowed_pod_number;
        for (name, value) in &other.scalar {
            *self.scalar.entry(name.clone()).or_default() -= value;
        }
    }

    /// Raises each amount to at least `other`'s.
    pub fn set_max(&mut self, other: &Resource) {
        self.milli_cpu = self.milli_cpu.max(other.milli_cpu);
        self.memory = self.memory.max(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(other.ephemeral_storage);
        self.allowed_pod_number = self.allowed_pod_number.max(other.allowed_pod_number);
        for (name, value) in &other.scalar {
            let entry = self.scalar.entry(name.clone()).or_default();
            *entry = (*entry).max(*value);
        }
    }

    /// The amount of a resource by its API name (0 when absent).
    pub fn get(&self, name: &str) -> i64 {
        match name {
            CPU => self.milli_cpu,
            MEMORY => self.memory,
            EPHEMERAL_STORAGE => self.ephemeral_storage,
            PODS => self.allowed_pod_number,
            _ => self.scalar.get(name).copied().unwrap_or(0),
        }
    }

    /// Whether every amount is zero.
    pub fn is_zero(&self) -> bool {
        self.milli_cpu == 0
            && self.memory == 0
            && self.ephemeral_storage == 0
            && self.scalar.values().all(|v| *v == 0)
    }
}

/// Whether a resource name is one upstream keeps among the scalar resources: extended
/// resources (a domain-qualified name outside `kubernetes.io/`, and not `requests.`-prefixed),
/// hugepages, native `kubernetes.io/` resources and attachable volumes.
pub fn is_scalar(name: &str) -> bool {
    !matches!(name, CPU | MEMORY | EPHEMERAL_STORAGE | PODS)
        && (name.starts_with("hugepages-")
            || name.starts_with("attachable-volumes-")
            || name.contains('/'))
}

/// Whether a resource is an extended resource (upstream's `IsExtendedResourceName`): a
/// domain-qualified name outside `kubernetes.io`, not starting with `requests.`.
pub fn is_extended(name: &str) -> bool {
    match name.split_once('/') {
        Some((domain, _)) => {
            !(domain == "kubernetes.io"
                || domain.ends_with(".kubernetes.io")
                || name.starts_with("requests."))
        }
        None => false,
    }
}

fn container_requests(container: &Container) -> Resource {
    Resource::from_list(
        container
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref()),
    )
}

/// What a container counts as when scoring: its requests, with upstream's non-zero defaults for
/// a CPU or memory request it does not make.
fn container_non_zero(container: &Container) -> Resource {
    let requests = container
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref());
    let mut resource = container_requests(container);
    if !requests.is_some_and(|r| r.contains_key(CPU)) {
        resource.milli_cpu = DEFAULT_MILLI_CPU_REQUEST;
    }
    if !requests.is_some_and(|r| r.contains_key(MEMORY)) {
        resource.memory = DEFAULT_MEMORY_REQUEST;
    }
    resource
}

fn is_sidecar(container: &Container) -> bool {
    container.restart_policy.as_deref() == Some("Always")
}

/// A pod's effective request, as upstream's `PodRequests` computes it: the sum of its app
/// containers and sidecars (restartable init containers), or, if larger, what each ordinary
/// init container needs together with the sidecars started before it; plus the pod overhead.
/// `per_container` gives the amount one container counts for.
fn pod_amount(pod: &Pod, per_container: fn(&Container) -> Resource) -> Resource {
    let Some(spec) = pod.spec.as_ref() else {
        return Resource::default();
    };
    let mut total = Resource::default();
    for container in &spec.containers {
        total.add(&per_container(container));
    }
    let mut sidecars = Resource::default();
    let mut init_max = Resource::default();
    for container in spec.init_containers.iter().flatten() {
        let amount = per_container(container);
        if is_sidecar(container) {
            sidecars.add(&amount);
            total.add(&amount);
            init_max.set_max(&sidecars);
        } else {
            let mut with_sidecars = amount;
            with_sidecars.add(&sidecars);
            init_max.set_max(&with_sidecars);
        }
    }
    total.set_max(&init_max);
    if let Some(overhead) = spec.overhead.as_ref() {
        total.add(&Resource::from_list(Some(overhead)));
    }
    total
}

/// What a pod requests, for fit.
pub fn pod_requests(pod: &Pod) -> Resource {
    pod_amount(pod, container_requests)
}

/// What a pod counts as for scoring: its requests with upstream's non-zero CPU and memory
/// defaults for containers that request none.
pub fn pod_non_zero_requests(pod: &Pod) -> Resource {
    pod_amount(pod, container_non_zero)
}

/// What a node offers to pods: `status.allocatable`, or `status.capacity` where it has no
/// allocatable (as the node controller treats such nodes).
pub fn node_allocatable(node: &Node) -> Resource {
    let status = node.status.as_ref();
    let list = status
        .and_then(|s| s.allocatable.as_ref())
        .filter(|a| !a.is_empty())
        .or_else(|| status.and_then(|s| s.capacity.as_ref()));
    Resource::from_list(list)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap_or_default()
    }

    fn check(spec: serde_json::Value, milli_cpu: i64, memory: i64) {
        let requests = pod_requests(&pod(spec));
        assert_eq!((requests.milli_cpu, requests.memory), (milli_cpu, memory));
    }

    #[test]
    fn pod_requests_follow_upstream() {
        // Containers add up.
        check(
            json!({"containers": [
                {"name": "a", "resources": {"requests": {"cpu": "100m", "memory": "1Gi"}}},
                {"name": "b", "resources": {"requests": {"cpu": "1", "memory": "512Mi"}}}]}),
            1100,
            1536 * 1024 * 1024,
        );
        // An init container larger than the app containers sets the request.
        check(
            json!({"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}],
                   "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2"}}}]}),
            2000,
            0,
        );
        // A sidecar adds to the app containers and to later init containers.
        check(
            json!({"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}],
                   "initContainers": [
                       {"name": "s", "restartPolicy": "Always",
                        "resources": {"requests": {"cpu": "500m"}}},
                       {"name": "i", "resources": {"requests": {"cpu": "1200m"}}}]}),
            1700,
            0,
        );
        // Overhead is added last.
        check(
            json!({"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}],
                   "overhead": {"cpu": "250m", "memory": "120Mi"}}),
            1250,
            120 * 1024 * 1024,
        );
    }

    #[test]
    fn scoring_counts_non_zero_defaults() {
        let p = pod(json!({"containers": [
            {"name": "a"},
            {"name": "b", "resources": {"requests": {"cpu": "300m"}}}]}));
        let amount = pod_non_zero_requests(&p);
        assert_eq!(amount.milli_cpu, 400);
        assert_eq!(amount.memory, 2 * DEFAULT_MEMORY_REQUEST);
        assert_eq!(pod_requests(&p).memory, 0);
    }

    #[test]
    fn extended_and_scalar_names() {
        assert!(is_extended("example.com/gpu"));
        assert!(!is_extended("kubernetes.io/something"));
        assert!(!is_extended("cpu"));
        assert!(is_scalar("hugepages-2Mi"));
        assert!(is_scalar("example.com/gpu"));
        assert!(!is_scalar("pods"));
        let node: Node = serde_json::from_value(json!({"status": {
            "capacity": {"cpu": "4", "pods": "110"},
            "allocatable": {"cpu": "3500m", "memory": "8Gi", "pods": "100",
                            "example.com/gpu": "2"}}}))
        .unwrap_or_default();
        let allocatable = node_allocatable(&node);
        assert_eq!(allocatable.milli_cpu, 3500);
        assert_eq!(allocatable.allowed_pod_number, 100);
        assert_eq!(allocatable.get("example.com/gpu"), 2);
    }
}

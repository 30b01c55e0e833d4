//! ResourceQuota accounting, as upstream's quota evaluators (`pkg/quota/v1`) and the checks of
//! its ResourceQuota admission plugin: what an object uses of each quota resource name, which
//! quotas an object falls under (resource names and scopes), the usage a quota's status should
//! show, and whether a new object fits.
//!
//! Shared by the API server (admission) and the controller manager (status); no I/O. Quantities
//! are [`Quantity`] values keyed by resource name ([`ResourceList`]).
//!
//! Evaluators: pods (`pods`, `count/pods`, compute requests and limits with extended resources
//! and hugepages; the `Terminating`, `NotTerminating`, `BestEffort`, `NotBestEffort`,
//! `PriorityClass` and `CrossNamespacePodAffinity` scopes), services (`services`,
//! `services.loadbalancers`, `services.nodeports`), persistent volume claims (per storage class
//! too) and the generic object count (`count/<resource>.<group>` and the legacy `configmaps`,
//! `secrets`, `replicationcontrollers`, `resourcequotas`). Not covered: the
//! `VolumeAttributesClass` scope (its feature gate is off in 1.33), pod-level resources (alpha),
//! in-place resize status and the `resize` subresource, and the admission configuration's
//! limited resources.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    Container, PersistentVolumeClaim, Pod, PodAffinityTerm, PodSpec, ResourceQuota,
    ResourceQuotaStatus, ScopedResourceSelectorRequirement, Service,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use k8s_openapi::jiff::Timestamp;

use crate::quantity::Quantity;

/// Quantities by resource name (upstream's `ResourceList`), in name order.
pub type ResourceList = BTreeMap<String, Quantity>;

/// The annotation a claim's storage class may still be named in (upstream reads it first).
pub const BETA_STORAGE_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";

const STORAGE_CLASS_SUFFIX: &str = ".storageclass.storage.k8s.io/";
const REQUESTS_PREFIX: &str = "requests.";
const HUGEPAGES_PREFIX: &str = "hugepages-";
const REQUESTS_HUGEPAGES_PREFIX: &str = "requests.hugepages-";

/// The resource names the pod evaluator tracks (besides prefixed and extended ones).
const POD_RESOURCES: &[&str] = &[
    "count/pods",
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
];

/// Resources a quota on which makes every container state them (upstream's historical
/// `validationSet`).
const MUST_SPECIFY: &[&str] = &[
    "cpu",
    "memory",
    "requests.cpu",
    "requests.memory",
    "limits.cpu",
    "limits.memory",
];

const SERVICE_RESOURCES: &[&str] = &[
    "count/services",
    "services",
    "services.loadbalancers",
    "services.nodeports",
];

const CLAIM_RESOURCES: &[&str] = &["persistentvolumeclaims", "requests.storage"];

/// Resources whose object count also has a legacy name (upstream's `legacyObjectCountAliases`).
const LEGACY_COUNT_NAMES: &[(&str, &str)] = &[
    ("configmaps", "configmaps"),
    ("resourcequotas", "resourcequotas"),
    ("replicationcontrollers", "replicationcontrollers"),
    ("secrets", "secrets"),
];

/// Resources quota never counts (upstream's `ignoredResources`): virtual ones and events.
const IGNORED: &[(&str, &str)] = &[
    ("", "bindings"),
    ("", "componentstatuses"),
    ("", "events"),
    ("events.k8s.io", "events"),
    ("authentication.k8s.io", "tokenreviews"),
    ("authentication.k8s.io", "selfsubjectreviews"),
    ("authorization.k8s.io", "subjectaccessreviews"),
    ("authorization.k8s.io", "selfsubjectaccessreviews"),
    ("authorization.k8s.io", "localsubjectaccessreviews"),
    ("authorization.k8s.io", "selfsubjectrulesreviews"),
];

// ---------------------------------------------------------------------------------------------
// Resource lists (upstream's quota/v1 resources.go)
// ---------------------------------------------------------------------------------------------

/// A list from the API's form; values that are not quantities are left out.
pub fn parse_list(list: Option<&BTreeMap<String, ApiQuantity>>) -> ResourceList {
    list.into_iter()
        .flatten()
        .filter_map(|(name, q)| Some((name.clone(), Quantity::parse(&q.0).ok()?)))
        .collect()
}

/// A list in the API's form, each quantity as upstream prints it.
pub fn to_api(list: &ResourceList) -> BTreeMap<String, ApiQuantity> {
    list.iter()
        .map(|(name, q)| (name.clone(), ApiQuantity(q.canonical())))
        .collect()
}

/// `a + b`, key by key (keys of either).
pub fn add(a: &ResourceList, b: &ResourceList) -> ResourceList {
    let mut out = a.clone();
    add_into(&mut out, b);
    out
}

/// Adds `b` into `a` (upstream's `addResourceList`: a missing key takes `b`'s value as it is).
fn add_into(a: &mut ResourceList, b: &ResourceList) {
    for (name, q) in b {
        match a.get_mut(name) {
            Some(sum) => *sum = sum.add(q),
            None => {
                a.insert(name.clone(), q.clone());
            }
        }
    }
}

/// Raises each of `a`'s values to `b`'s where `b`'s is larger (upstream's `maxResourceList`).
fn max_into(a: &mut ResourceList, b: &ResourceList) {
    for (name, q) in b {
        match a.get_mut(name) {
            Some(current) if *q > *current => *current = q.clone(),
            Some(_) => {}
            None => {
                a.insert(name.clone(), q.clone());
            }
        }
    }
}

/// `a - b` for `a`'s keys, never below zero (upstream's `SubtractWithNonNegativeResult`).
pub fn subtract_non_negative(a: &ResourceList, b: &ResourceList) -> ResourceList {
    a.iter()
        .map(|(name, q)| {
            let diff = match b.get(name) {
                Some(other) => q.sub(other),
                None => q.clone(),
            };
            let diff = if diff.is_negative() {
                Quantity::from_i64(0)
            } else {
                diff
            };
            (name.clone(), diff)
        })
        .collect()
}

/// The entries of `list` whose names are in `names`.
pub fn mask(list: &ResourceList, names: &[String]) -> ResourceList {
    list.iter()
        .filter(|(name, _)| names.contains(name))
        .map(|(name, q)| (name.clone(), q.clone()))
        .collect()
}

/// Whether every value of `a` named in `b` is at most `b`'s; otherwise the names exceeded
/// (upstream's `LessThanOrEqual`).
pub fn less_than_or_equal(a: &ResourceList, b: &ResourceList) -> Result<(), Vec<String>> {
    let exceeded: Vec<String> = b
        .iter()
        .filter(|(name, limit)| a.get(*name).is_some_and(|value| value > limit))
        .map(|(name, _)| name.clone())
        .collect();
    if exceeded.is_empty() {
        Ok(())
    } else {
        Err(exceeded)
    }
}

/// Whether both lists have the same names with equal values.
pub fn equals(a: &ResourceList, b: &ResourceList) -> bool {
    a.len() == b.len() && a.iter().all(|(name, q)| b.get(name) == Some(q))
}

/// The list without its zero values.
pub fn remove_zeros(list: &ResourceList) -> ResourceList {
    list.iter()
        .filter(|(_, q)| !q.is_zero())
        .map(|(name, q)| (name.clone(), q.clone()))
        .collect()
}

/// The names of negative values.
pub fn negative_names(list: &ResourceList) -> Vec<String> {
    list.iter()
        .filter(|(_, q)| q.is_negative())
        .map(|(name, _)| name.clone())
        .collect()
}

/// `name=value` pairs in name order, comma-joined, as upstream's admission messages show them.
pub fn pretty_print(list: &ResourceList) -> String {
    list.iter()
        .map(|(name, q)| format!("{name}={}", q.canonical()))
        .collect::<Vec<_>>()
        .join(",")
}

/// Names sorted and comma-joined.
pub fn pretty_print_names(names: &[String]) -> String {
    let mut names: Vec<&str> = names.iter().map(String::as_str).collect();
    names.sort_unstable();
    names.dedup();
    names.join(",")
}

// ---------------------------------------------------------------------------------------------
// Pod resource arithmetic (upstream's PodRequests and PodLimits)
// ---------------------------------------------------------------------------------------------

fn container_list(container: &Container, limits: bool) -> ResourceList {
    let resources = container.resources.as_ref();
    let list = if limits {
        resources.and_then(|r| r.limits.as_ref())
    } else {
        resources.and_then(|r| r.requests.as_ref())
    };
    parse_list(list)
}

fn is_sidecar(container: &Container) -> bool {
    container.restart_policy.as_deref() == Some("Always")
}

/// What a pod's containers need together (requests, or with `limits` limits), without the pod
/// overhead: the containers' sum, or what init containers need if more (each ordinary init
/// container with the sidecars started before it, and the sidecars all together). This is what
/// upstream's LimitRanger compares with `Pod` limits.
pub fn aggregate(spec: &PodSpec, limits: bool) -> ResourceList {
    let mut total = ResourceList::new();
    for container in &spec.containers {
        add_into(&mut total, &container_list(container, limits));
    }
    let mut sidecars = ResourceList::new();
    let mut init = ResourceList::new();
    for container in spec.init_containers.iter().flatten() {
        let own = container_list(container, limits);
        if is_sidecar(container) {
            add_into(&mut total, &own);
            add_into(&mut sidecars, &own);
            max_into(&mut init, &sidecars);
        } else {
            let mut with_sidecars = own;
            add_into(&mut with_sidecars, &sidecars);
            max_into(&mut init, &with_sidecars);
        }
    }
    max_into(&mut total, &init);
    total
}

/// A pod's effective requests (upstream's `PodRequests`): the larger of its containers' sum and
/// its init containers' needs, plus the pod overhead.
pub fn pod_requests(spec: &PodSpec) -> ResourceList {
    let mut requests = aggregate(spec, false);
    add_into(&mut requests, &parse_list(spec.overhead.as_ref()));
    requests
}

/// A pod's effective limits (upstream's `PodLimits`): as requests, with the overhead added only
/// to resources that are limited.
pub fn pod_limits(spec: &PodSpec) -> ResourceList {
    let mut limits = aggregate(spec, true);
    for (name, overhead) in parse_list(spec.overhead.as_ref()) {
        if let Some(limit) = limits.get_mut(&name) {
            *limit = limit.add(&overhead);
        }
    }
    limits
}

/// Whether a resource name is one of Kubernetes' own (no domain, or a `kubernetes.io` one).
fn is_native_resource(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

/// Whether a container resource name is an extended resource (upstream's
/// `IsExtendedResourceName`).
fn is_extended_resource(name: &str) -> bool {
    if is_native_resource(name) || name.starts_with(REQUESTS_PREFIX) {
        return false;
    }
    crate::validation::names::is_qualified_name(&format!("{REQUESTS_PREFIX}{name}")).is_empty()
}

/// Whether a quota resource name is an extended resource's request (`requests.example.com/gpu`).
fn is_extended_quota_name(name: &str) -> bool {
    !is_native_resource(name) && name.starts_with(REQUESTS_PREFIX)
}

/// What requests and limits amount to in quota names (upstream's `podComputeUsageHelper`).
fn compute_usage(requests: &ResourceList, limits: &ResourceList) -> ResourceList {
    let mut out = ResourceList::new();
    out.insert("pods".into(), Quantity::from_i64(1));
    for name in ["cpu", "memory", "ephemeral-storage"] {
        if let Some(request) = requests.get(name) {
            out.insert(name.into(), request.clone());
            out.insert(format!("{REQUESTS_PREFIX}{name}"), request.clone());
        }
        if let Some(limit) = limits.get(name) {
            out.insert(format!("limits.{name}"), limit.clone());
        }
    }
    for (name, request) in requests {
        if name.starts_with(HUGEPAGES_PREFIX) {
            out.insert(name.clone(), request.clone());
            out.insert(format!("{REQUESTS_PREFIX}{name}"), request.clone());
        }
        if is_extended_resource(name) {
            out.insert(format!("{REQUESTS_PREFIX}{name}"), request.clone());
        }
    }
    out
}

/// Upstream's QoS class: the one in the pod's status, else computed from its containers.
fn is_best_effort(pod: &Pod) -> bool {
    let recorded = pod
        .status
        .as_ref()
        .and_then(|s| s.qos_class.as_deref())
        .filter(|c| !c.is_empty());
    match (recorded, pod.spec.as_ref()) {
        (Some(class), _) => class == "BestEffort",
        (None, Some(spec)) => crate::defaults::pod::pod_qos_class(spec) == "BestEffort",
        (None, None) => true,
    }
}

fn is_terminating(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.active_deadline_seconds)
        .is_some_and(|d| d >= 0)
}

fn cross_namespace_term(term: &PodAffinityTerm) -> bool {
    term.namespaces.as_ref().is_some_and(|n| !n.is_empty()) || term.namespace_selector.is_some()
}

fn uses_cross_namespace_affinity(pod: &Pod) -> bool {
    let Some(affinity) = pod.spec.as_ref().and_then(|s| s.affinity.as_ref()) else {
        return false;
    };
    let affinity_terms = affinity.pod_affinity.as_ref().map(|a| {
        (
            a.required_during_scheduling_ignored_during_execution
                .as_ref(),
            a.preferred_during_scheduling_ignored_during_execution
                .as_ref(),
        )
    });
    let anti_terms = affinity.pod_anti_affinity.as_ref().map(|a| {
        (
            a.required_during_scheduling_ignored_during_execution
                .as_ref(),
            a.preferred_during_scheduling_ignored_during_execution
                .as_ref(),
        )
    });
    affinity_terms
        .into_iter()
        .chain(anti_terms)
        .any(|(required, preferred)| {
            required.into_iter().flatten().any(cross_namespace_term)
                || preferred
                    .into_iter()
                    .flatten()
                    .any(|w| cross_namespace_term(&w.pod_affinity_term))
        })
}

/// Whether a pod still counts against compute quota (upstream's `QuotaV1Pod`): not terminal,
/// and not deleted longer ago than its grace period.
pub fn pod_counts(pod: &Pod, now: Timestamp) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return false;
    }
    if let (Some(deleted), Some(grace)) = (
        pod.metadata.deletion_timestamp.as_ref(),
        pod.metadata.deletion_grace_period_seconds,
    ) {
        let deadline = deleted.0.as_nanosecond() + i128::from(grace) * 1_000_000_000;
        if now.as_nanosecond() > deadline {
            return false;
        }
    }
    true
}

/// Matches a `PriorityClass` scope requirement as a label requirement on
/// `{PriorityClass: <class>}` (upstream's `ScopedResourceSelectorRequirementsAsSelector`).
fn priority_class_matches(
    selector: &ScopedResourceSelectorRequirement,
    class: Option<&str>,
) -> Result<bool, String> {
    let values = selector.values.as_deref().unwrap_or_default();
    match selector.operator.as_str() {
        "In" | "NotIn" if values.is_empty() => {
            Err("for 'in', 'notin' operators, values set can't be empty".into())
        }
        "In" => Ok(class.is_some_and(|c| values.iter().any(|v| v == c))),
        "NotIn" => Ok(!class.is_some_and(|c| values.iter().any(|v| v == c))),
        "Exists" => Ok(class.is_some()),
        "DoesNotExist" => Ok(class.is_none()),
        other => Err(format!("{other:?} is not a valid pod selector operator")),
    }
}

// ---------------------------------------------------------------------------------------------
// Evaluators
// ---------------------------------------------------------------------------------------------

/// The operation being admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// A new object.
    Create,
    /// A change to a stored object.
    Update,
}

/// An object as quota sees it: the kinds with their own evaluator, or any other object (which
/// only counts).
#[derive(Clone, Copy, Debug)]
pub enum Item<'a> {
    /// A pod.
    Pod(&'a Pod),
    /// A service.
    Service(&'a Service),
    /// A persistent volume claim.
    Claim(&'a PersistentVolumeClaim),
    /// An object of any other kind.
    Object,
}

/// How usage of one resource type is measured (upstream's `quota.Evaluator`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Evaluator {
    /// Pods: their count and compute resources.
    Pods,
    /// Services: their count, load balancers and node ports.
    Services,
    /// Persistent volume claims: their count and storage, also per storage class.
    Claims,
    /// Any other resource: the number of objects.
    Objects {
        /// The API group (empty for the core group).
        group: String,
        /// The resource (plural).
        resource: String,
    },
}

/// The object count name of a resource (`count/pods`, `count/deployments.apps`).
pub fn object_count_name(group: &str, resource: &str) -> String {
    if group.is_empty() {
        format!("count/{resource}")
    } else {
        format!("count/{resource}.{group}")
    }
}

impl Evaluator {
    /// The evaluator of objects of `group`/`resource`; `None` for resources quota ignores.
    pub fn for_resource(group: &str, resource: &str) -> Option<Evaluator> {
        if IGNORED.contains(&(group, resource)) {
            return None;
        }
        Some(match (group, resource) {
            ("", "pods") => Evaluator::Pods,
            ("", "services") => Evaluator::Services,
            ("", "persistentvolumeclaims") => Evaluator::Claims,
            _ => Evaluator::Objects {
                group: group.into(),
                resource: resource.into(),
            },
        })
    }

    /// The evaluator that tracks a quota resource name, if any: `count/...` names, the legacy
    /// object counts and every name the pod, service and claim evaluators track.
    pub fn for_quota_name(name: &str) -> Option<Evaluator> {
        let names = [name.to_owned()];
        for evaluator in [Evaluator::Pods, Evaluator::Services, Evaluator::Claims] {
            if !evaluator.matching_resources(&names).is_empty() {
                return Some(evaluator);
            }
        }
        if let Some((resource, _)) = LEGACY_COUNT_NAMES.iter().find(|(_, alias)| *alias == name) {
            return Evaluator::for_resource("", resource);
        }
        let counted = name.strip_prefix("count/")?;
        let (resource, group) = counted.split_once('.').unwrap_or((counted, ""));
        if resource.is_empty() {
            return None;
        }
        Evaluator::for_resource(group, resource)
    }

    /// The group and resource measured.
    pub fn group_resource(&self) -> (&str, &str) {
        match self {
            Evaluator::Pods => ("", "pods"),
            Evaluator::Services => ("", "services"),
            Evaluator::Claims => ("", "persistentvolumeclaims"),
            Evaluator::Objects { group, resource } => (group, resource),
        }
    }

    /// Whether an operation on the main resource can change usage: creates always; updates of
    /// services (their type) and claims (their size).
    pub fn handles(&self, operation: Operation) -> bool {
        match self {
            Evaluator::Services | Evaluator::Claims => true,
            Evaluator::Pods | Evaluator::Objects { .. } => operation == Operation::Create,
        }
    }

    /// The object count names of this resource (with its legacy alias).
    fn count_names(&self) -> Vec<String> {
        let (group, resource) = self.group_resource();
        let mut names = vec![object_count_name(group, resource)];
        if group.is_empty()
            && let Some((_, alias)) = LEGACY_COUNT_NAMES.iter().find(|(r, _)| *r == resource)
        {
            names.push((*alias).to_owned());
        }
        names
    }

    /// The names among `names` this evaluator tracks (upstream's `MatchingResources`).
    pub fn matching_resources(&self, names: &[String]) -> Vec<String> {
        match self {
            Evaluator::Pods => names
                .iter()
                .filter(|name| {
                    POD_RESOURCES.contains(&name.as_str())
                        || name.starts_with(HUGEPAGES_PREFIX)
                        || name.starts_with(REQUESTS_HUGEPAGES_PREFIX)
                        || is_extended_quota_name(name)
                })
                .cloned()
                .collect(),
            Evaluator::Services => names
                .iter()
                .filter(|name| SERVICE_RESOURCES.contains(&name.as_str()))
                .cloned()
                .collect(),
            Evaluator::Claims => names
                .iter()
                .filter(|name| {
                    name.as_str() == "count/persistentvolumeclaims"
                        || CLAIM_RESOURCES.contains(&name.as_str())
                        || CLAIM_RESOURCES
                            .iter()
                            .any(|r| name.ends_with(&format!("{STORAGE_CLASS_SUFFIX}{r}")))
                })
                .cloned()
                .collect(),
            Evaluator::Objects { .. } => {
                let counts = self.count_names();
                names
                    .iter()
                    .filter(|name| counts.contains(name))
                    .cloned()
                    .collect()
            }
        }
    }

    /// Whether `item` satisfies one scope requirement. Only pods have scopes: every other
    /// resource matches none (so a scoped quota never counts it).
    pub fn matches_scope(
        &self,
        selector: &ScopedResourceSelectorRequirement,
        item: Item<'_>,
    ) -> Result<bool, String> {
        let (Evaluator::Pods, Item::Pod(pod)) = (self, item) else {
            return Ok(false);
        };
        let class = pod
            .spec
            .as_ref()
            .and_then(|s| s.priority_class_name.as_deref())
            .filter(|c| !c.is_empty());
        Ok(match selector.scope_name.as_str() {
            "Terminating" => is_terminating(pod),
            "NotTerminating" => !is_terminating(pod),
            "BestEffort" => is_best_effort(pod),
            "NotBestEffort" => !is_best_effort(pod),
            "PriorityClass" if selector.operator == "Exists" => class.is_some(),
            "PriorityClass" => priority_class_matches(selector, class)?,
            "CrossNamespacePodAffinity" => uses_cross_namespace_affinity(pod),
            _ => false,
        })
    }

    fn matches_scopes(
        &self,
        selectors: &[ScopedResourceSelectorRequirement],
        item: Item<'_>,
    ) -> Result<bool, String> {
        let mut all = true;
        for selector in selectors {
            all &= self.matches_scope(selector, item)?;
        }
        Ok(all)
    }

    /// Whether `quota` constrains `item`: it limits (in `status.hard`) a resource this
    /// evaluator tracks, and the item is in all its scopes (upstream's `generic.Matches`).
    pub fn matches(&self, quota: &ResourceQuota, item: Item<'_>) -> Result<bool, String> {
        let hard = status_hard_names(quota);
        if self.matching_resources(&hard).is_empty() {
            return Ok(false);
        }
        self.matches_scopes(&scope_selectors(quota), item)
    }

    /// Checks what a quota on `required` demands of the item itself: a pod's every container
    /// must state the cpu and memory requests and limits such a quota tracks.
    pub fn constraints(&self, required: &[String], item: Item<'_>) -> Result<(), String> {
        let (Evaluator::Pods, Item::Pod(pod)) = (self, item) else {
            return Ok(());
        };
        let required: BTreeSet<&str> = required
            .iter()
            .map(String::as_str)
            .filter(|r| MUST_SPECIFY.contains(r))
            .collect();
        if required.is_empty() {
            return Ok(());
        }
        let mut missing: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        let containers = pod.spec.iter().flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        });
        for container in containers {
            let usage = compute_usage(
                &container_list(container, false),
                &container_list(container, true),
            );
            for resource in &required {
                if !usage.contains_key(*resource) {
                    missing
                        .entry(resource)
                        .or_default()
                        .insert(container.name.as_str());
                }
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        let parts: Vec<String> = missing
            .iter()
            .map(|(resource, containers)| {
                let names: Vec<&str> = containers.iter().copied().collect();
                format!("{resource} for: {}", names.join(","))
            })
            .collect();
        Err(format!("must specify {}", parts.join("; ")))
    }

    /// What `item` uses (upstream's `Usage`). `now` decides whether a deleted pod's grace
    /// period is over.
    pub fn usage(&self, item: Item<'_>, now: Timestamp) -> ResourceList {
        let mut out = ResourceList::new();
        match (self, item) {
            (Evaluator::Pods, Item::Pod(pod)) => {
                // Every stored pod counts as an object; only live ones use compute resources.
                out.insert("count/pods".into(), Quantity::from_i64(1));
                if pod_counts(pod, now)
                    && let Some(spec) = pod.spec.as_ref()
                {
                    add_into(
                        &mut out,
                        &compute_usage(&pod_requests(spec), &pod_limits(spec)),
                    );
                }
            }
            (Evaluator::Services, Item::Service(service)) => {
                let spec = service.spec.as_ref();
                let ports = spec.and_then(|s| s.ports.as_ref());
                let port_count = ports.map_or(0, Vec::len) as i64;
                out.insert("count/services".into(), Quantity::from_i64(1));
                out.insert("services".into(), Quantity::from_i64(1));
                out.insert("services.loadbalancers".into(), Quantity::from_i64(0));
                out.insert("services.nodeports".into(), Quantity::from_i64(0));
                match spec.and_then(|s| s.type_.as_deref()) {
                    Some("NodePort") => {
                        out.insert("services.nodeports".into(), Quantity::from_i64(port_count));
                    }
                    Some("LoadBalancer") => {
                        // Without node ports allocated, only the ports that name one count.
                        let node_ports = if spec.and_then(|s| s.allocate_load_balancer_node_ports)
                            == Some(false)
                        {
                            ports
                                .into_iter()
                                .flatten()
                                .filter(|p| p.node_port.unwrap_or(0) != 0)
                                .count() as i64
                        } else {
                            port_count
                        };
                        out.insert("services.nodeports".into(), Quantity::from_i64(node_ports));
                        out.insert("services.loadbalancers".into(), Quantity::from_i64(1));
                    }
                    _ => {}
                }
            }
            (Evaluator::Claims, Item::Claim(claim)) => {
                out.insert("persistentvolumeclaims".into(), Quantity::from_i64(1));
                out.insert("count/persistentvolumeclaims".into(), Quantity::from_i64(1));
                let class = claim_class(claim);
                if !class.is_empty() {
                    out.insert(
                        format!("{class}{STORAGE_CLASS_SUFFIX}persistentvolumeclaims"),
                        Quantity::from_i64(1),
                    );
                }
                if let Some(storage) = claim_storage(claim) {
                    if !class.is_empty() {
                        out.insert(
                            format!("{class}{STORAGE_CLASS_SUFFIX}requests.storage"),
                            storage.clone(),
                        );
                    }
                    out.insert("requests.storage".into(), storage);
                }
            }
            (Evaluator::Objects { .. }, _) => {
                for name in self.count_names() {
                    out.insert(name, Quantity::from_i64(1));
                }
            }
            // An object of another kind than the evaluator's uses nothing of it.
            _ => {}
        }
        out
    }
}

/// A claim's storage class: the beta annotation first, then `spec.storageClassName`.
fn claim_class(claim: &PersistentVolumeClaim) -> &str {
    if let Some(class) = claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(BETA_STORAGE_CLASS_ANNOTATION))
    {
        return class;
    }
    claim
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref())
        .unwrap_or_default()
}

/// The storage a claim is charged for: its request in whole bytes, or what was allocated if
/// more (upstream's `getStorageUsage`).
fn claim_storage(claim: &PersistentVolumeClaim) -> Option<Quantity> {
    let whole_bytes = |q: &Quantity| {
        let mut rounded = q.clone();
        rounded.round_up(0);
        rounded
    };
    let requested = crate::fit::volume::storage_request(claim).map(|q| whole_bytes(&q))?;
    let allocated = claim
        .status
        .as_ref()
        .and_then(|s| s.allocated_resources.as_ref())
        .and_then(|r| r.get("storage"))
        .and_then(|q| Quantity::parse(&q.0).ok());
    Some(match allocated {
        Some(allocated) if allocated > requested => whole_bytes(&allocated),
        _ => requested,
    })
}

/// A quota's scopes as selector requirements: each of `spec.scopes` as `Exists`, then
/// `spec.scopeSelector`'s expressions.
pub fn scope_selectors(quota: &ResourceQuota) -> Vec<ScopedResourceSelectorRequirement> {
    let spec = quota.spec.as_ref();
    let scopes = spec
        .and_then(|s| s.scopes.as_ref())
        .into_iter()
        .flatten()
        .map(|scope| ScopedResourceSelectorRequirement {
            scope_name: scope.clone(),
            operator: "Exists".into(),
            values: None,
        });
    let expressions = spec
        .and_then(|s| s.scope_selector.as_ref())
        .and_then(|s| s.match_expressions.clone())
        .into_iter()
        .flatten();
    scopes.chain(expressions).collect()
}

fn status_hard_names(quota: &ResourceQuota) -> Vec<String> {
    quota
        .status
        .as_ref()
        .and_then(|s| s.hard.as_ref())
        .map(|h| h.keys().cloned().collect())
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// The controller's side: usage a quota's status should show
// ---------------------------------------------------------------------------------------------

/// The evaluators a quota with these hard resource names needs to measure its usage, each with
/// the names it measures.
pub fn evaluators_for(hard: &[String]) -> Vec<(Evaluator, Vec<String>)> {
    let mut out: BTreeMap<Evaluator, Vec<String>> = BTreeMap::new();
    for name in hard {
        if let Some(evaluator) = Evaluator::for_quota_name(name) {
            out.entry(evaluator).or_default().push(name.clone());
        }
    }
    out.into_iter().collect()
}

/// The usage of `items` for a quota (upstream's `CalculateUsageStats`): every tracked name
/// starts at zero, and each item in all of the quota's scopes adds what it uses.
pub fn usage_of<'a>(
    evaluator: &Evaluator,
    quota: &ResourceQuota,
    tracked: &[String],
    items: impl IntoIterator<Item = Item<'a>>,
    now: Timestamp,
) -> ResourceList {
    let selectors = scope_selectors(quota);
    let mut used: ResourceList = tracked
        .iter()
        .map(|name| (name.clone(), Quantity::from_i64(0)))
        .collect();
    for item in items {
        // An item a scope cannot be decided for is not counted, as upstream.
        if evaluator.matches_scopes(&selectors, item) == Ok(true) {
            add_into(&mut used, &evaluator.usage(item, now));
        }
    }
    mask(&used, tracked)
}

/// The status a quota should have given the usage just measured (upstream's
/// `syncResourceQuota`): `hard` from the spec, `used` for every hard name, measured where it
/// could be and as it was otherwise. `None` when the status already says so.
pub fn next_status(quota: &ResourceQuota, measured: &ResourceList) -> Option<ResourceQuotaStatus> {
    let spec_hard = parse_list(quota.spec.as_ref().and_then(|s| s.hard.as_ref()));
    let status = quota.status.as_ref();
    let status_hard = status.and_then(|s| s.hard.as_ref());
    let status_used = status.and_then(|s| s.used.as_ref());
    let old_used = parse_list(status_used);
    let mut dirty = status_hard.is_none()
        || status_used.is_none()
        || !equals(&spec_hard, &parse_list(status_hard));
    let mut used = old_used.clone();
    for (name, q) in measured {
        used.insert(name.clone(), q.clone());
    }
    let names: Vec<String> = spec_hard.keys().cloned().collect();
    let used = mask(&used, &names);
    dirty |= !equals(&used, &old_used);
    dirty.then(|| ResourceQuotaStatus {
        hard: Some(to_api(&spec_hard)),
        used: Some(to_api(&used)),
    })
}

// ---------------------------------------------------------------------------------------------
// The admission side: does a request fit
// ---------------------------------------------------------------------------------------------

/// Why a request is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Denial {
    /// Refused by quota: upstream's Forbidden, with this reason after `... is forbidden: `.
    Forbidden(String),
    /// Quota could not be evaluated (a scope selector that cannot be read).
    Error(String),
}

/// One admission request as the quota check reads it.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// The evaluator of the object's resource.
    pub evaluator: &'a Evaluator,
    /// Create or update.
    pub operation: Operation,
    /// The new object.
    pub item: Item<'a>,
    /// The stored object, for an update.
    pub old: Option<Item<'a>>,
    /// The time deleted pods' grace periods are judged at.
    pub now: Timestamp,
}

/// Checks a request against the namespace's quotas (upstream's `CheckRequest`). On success,
/// for each quota (by index) whose usage the request raises, the new `status.used`; the caller
/// records those before storing the object.
pub fn check_request(
    quotas: &[ResourceQuota],
    request: &Request<'_>,
) -> Result<BTreeMap<usize, ResourceList>, Denial> {
    let evaluator = request.evaluator;
    if !evaluator.handles(request.operation) {
        return Ok(BTreeMap::new());
    }
    let mut interesting = Vec::new();
    for (index, quota) in quotas.iter().enumerate() {
        let name = quota.metadata.name.as_deref().unwrap_or_default();
        let matched = evaluator.matches(quota, request.item).map_err(|e| {
            Denial::Error(format!("error matching scopes of quota {name}, err: {e}"))
        })?;
        if !matched {
            continue;
        }
        let restricted = evaluator.matching_resources(&status_hard_names(quota));
        evaluator
            .constraints(&restricted, request.item)
            .map_err(|e| Denial::Forbidden(format!("failed quota: {name}: {e}")))?;
        let used = quota.status.as_ref().and_then(|s| s.used.as_ref());
        if restricted
            .iter()
            .any(|r| !used.is_some_and(|u| u.contains_key(r)))
        {
            return Err(Denial::Forbidden(format!(
                "status unknown for quota: {name}, resources: {}",
                pretty_print_names(&restricted)
            )));
        }
        interesting.push(index);
    }
    if interesting.is_empty() {
        return Ok(BTreeMap::new());
    }
    let input = evaluator.usage(request.item, request.now);
    let negative = negative_names(&input);
    if !negative.is_empty() {
        return Err(Denial::Forbidden(format!(
            "quota usage is negative for resource(s): {}",
            pretty_print_names(&negative)
        )));
    }
    let mut deltas: BTreeMap<usize, ResourceList> =
        interesting.iter().map(|&i| (i, input.clone())).collect();
    if request.operation == Operation::Update
        && let Some(old) = request.old
    {
        // Charged only for the growth, by the quotas the old object was already under.
        let delta = subtract_non_negative(&input, &evaluator.usage(old, request.now));
        for &index in &interesting {
            if evaluator.matches(&quotas[index], old).unwrap_or(false) {
                deltas.insert(index, delta.clone());
            }
        }
    }
    let mut out = BTreeMap::new();
    for (index, delta) in deltas {
        let delta = remove_zeros(&delta);
        if delta.is_empty() {
            continue;
        }
        let quota = &quotas[index];
        let status = quota.status.as_ref();
        let hard = parse_list(status.and_then(|s| s.hard.as_ref()));
        let used = parse_list(status.and_then(|s| s.used.as_ref()));
        let hard_names: Vec<String> = hard.keys().cloned().collect();
        let requested = mask(&delta, &hard_names);
        let new_used = add(&used, &requested);
        let requested_names: Vec<String> = requested.keys().cloned().collect();
        if let Err(exceeded) = less_than_or_equal(&mask(&new_used, &requested_names), &hard) {
            return Err(Denial::Forbidden(format!(
                "exceeded quota: {}, requested: {}, used: {}, limited: {}",
                quota.metadata.name.as_deref().unwrap_or_default(),
                pretty_print(&mask(&requested, &exceeded)),
                pretty_print(&mask(&used, &exceeded)),
                pretty_print(&mask(&hard, &exceeded)),
            )));
        }
        if !equals(&new_used, &used) {
            out.insert(index, new_used);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;

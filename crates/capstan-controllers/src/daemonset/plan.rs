//! The DaemonSet controller's decisions as pure functions of the DaemonSet, its pods, the
//! nodes, the current revision's hash and the time (upstream's `manage`, `podsShouldBeOnNode`,
//! `rollingUpdate` and `updateDaemonSetStatus`): which nodes need a pod, which pods go, which
//! old pods a rolling update replaces within maxUnavailable and maxSurge, and the status.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec, DaemonSetStatus};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;

use super::eligibility;
use crate::deployment::util::scaled_value;
use crate::history::HASH_LABEL;
use crate::pods;

/// The label carrying the template generation a daemon pod was made from.
pub const GENERATION_LABEL: &str = "pod-template-generation";
/// The annotation in which the API server keeps a DaemonSet's template generation.
pub const GENERATION_ANNOTATION: &str = "deprecated.daemonset.template.generation";

/// What a sync looks at.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    /// The DaemonSet.
    pub ds: &'a DaemonSet,
    /// Every node.
    pub nodes: &'a [&'a Node],
    /// The DaemonSet's pods (claimed), terminal ones included.
    pub pods: &'a [&'a Pod],
    /// The current revision's hash.
    pub hash: &'a str,
    /// The time of the sync.
    pub now: Timestamp,
}

/// The pods to delete and the nodes to create pods on.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Nodes that need a daemon pod.
    pub create_on: Vec<String>,
    /// Names of pods to delete.
    pub delete: Vec<String>,
    /// Failed pods to delete (after the per-node backoff): (pod name, node).
    pub failed: Vec<(String, String)>,
}

impl Plan {
    /// Nothing to do.
    pub fn is_empty(&self) -> bool {
        self.create_on.is_empty() && self.delete.is_empty() && self.failed.is_empty()
    }
}

fn spec(ds: &DaemonSet) -> std::borrow::Cow<'_, DaemonSetSpec> {
    match &ds.spec {
        Some(spec) => std::borrow::Cow::Borrowed(spec),
        None => std::borrow::Cow::Owned(DaemonSetSpec::default()),
    }
}

/// The spec's minReadySeconds.
pub fn min_ready_seconds(ds: &DaemonSet) -> i32 {
    spec(ds).min_ready_seconds.unwrap_or(0)
}

/// The template generation: the API server's annotation, else the object's generation.
pub fn template_generation(ds: &DaemonSet) -> Option<i64> {
    ds.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(GENERATION_ANNOTATION))
        .and_then(|g| g.parse().ok())
        .or(ds.metadata.generation)
}

/// Whether `pod` runs the current template (upstream's `IsPodUpdated`).
pub fn is_updated(pod: &Pod, hash: &str, generation: Option<i64>) -> bool {
    let labels = pod.metadata.labels.as_ref();
    let label = |key: &str| labels.and_then(|l| l.get(key)).map(String::as_str);
    let template_matches =
        generation.is_some_and(|g| label(GENERATION_LABEL) == Some(g.to_string().as_str()));
    let hash_matches = !hash.is_empty() && label(HASH_LABEL) == Some(hash);
    hash_matches || template_matches
}

fn is_rolling(ds: &DaemonSet) -> bool {
    let strategy = spec(ds).update_strategy.clone().unwrap_or_default();
    strategy.type_.as_deref().unwrap_or("RollingUpdate") == "RollingUpdate"
}

/// maxSurge against `n` nodes, rounded up; 0 unless rolling with a surge (upstream's `SurgeCount`).
pub fn surge_count(ds: &DaemonSet, n: i32) -> Result<i32, String> {
    if !is_rolling(ds) {
        return Ok(0);
    }
    let rolling = spec(ds)
        .update_strategy
        .clone()
        .unwrap_or_default()
        .rolling_update;
    match rolling.and_then(|r| r.max_surge) {
        Some(value) => scaled_value(&value, n, true),
        None => Ok(0),
    }
}

/// maxUnavailable against `n` nodes, rounded up (upstream's `UnavailableCount`; the API's
/// default of 1 when unset).
pub fn unavailable_count(ds: &DaemonSet, n: i32) -> Result<i32, String> {
    if !is_rolling(ds) {
        return Ok(0);
    }
    let rolling = spec(ds)
        .update_strategy
        .clone()
        .unwrap_or_default()
        .rolling_update;
    match rolling {
        None => Ok(0),
        Some(r) => scaled_value(&r.max_unavailable.unwrap_or(IntOrString::Int(1)), n, true),
    }
}

/// Whether a rolling update may put a second pod on a node (upstream's `AllowsSurge`).
pub fn allows_surge(ds: &DaemonSet) -> bool {
    surge_count(ds, 1).is_ok_and(|s| s != 0)
}

fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref().and_then(|s| s.phase.as_deref())
}

/// Scheduled pods first, then the oldest, then by name (upstream's
/// `podByCreationTimestampAndPhase`).
pub fn by_creation(a: &Pod, b: &Pod) -> Ordering {
    let scheduled = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty())
    };
    let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
    scheduled(b)
        .cmp(&scheduled(a))
        .then_with(|| created(a).cmp(&created(b)))
        .then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

/// The pods by the node they are bound or pinned to (upstream's `getNodesToDaemonPods`);
/// pods both terminal and being deleted are left out unless asked for.
pub fn nodes_to_pods<'a>(
    pods: &[&'a Pod],
    include_deleted_terminal: bool,
) -> BTreeMap<String, Vec<&'a Pod>> {
    let mut map: BTreeMap<String, Vec<&Pod>> = BTreeMap::new();
    for pod in pods.iter().copied() {
        let terminal = matches!(phase(pod), Some("Succeeded" | "Failed"));
        if !include_deleted_terminal && terminal && pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(node) = pod.spec.as_ref().and_then(eligibility::target_node) else {
            continue;
        };
        map.entry(node.to_owned()).or_default().push(pod);
    }
    map
}

fn name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

/// What to do on one node (upstream's `podsShouldBeOnNode`).
pub fn pods_should_be_on_node(
    view: &View<'_>,
    node: &Node,
    by_node: &BTreeMap<String, Vec<&Pod>>,
    plan: &mut Plan,
) {
    let ds = view.ds;
    let template = spec(ds).template.spec.clone();
    let (should_run, should_continue) = eligibility::should_run(template.as_ref(), node);
    let node_name = node.metadata.name.clone().unwrap_or_default();
    let pods_here = by_node.get(&node_name);
    if should_run && pods_here.is_none_or(Vec::is_empty) {
        plan.create_on.push(node_name);
        return;
    }
    let pods_here: Vec<&Pod> = pods_here.cloned().unwrap_or_default();
    if !should_continue {
        plan.delete.extend(
            pods_here
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .map(|p| name(p)),
        );
        return;
    }
    let mut running: Vec<&Pod> = Vec::new();
    for pod in pods_here
        .iter()
        .copied()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        match phase(pod) {
            Some("Failed") => plan.failed.push((name(pod), node_name.clone())),
            Some("Succeeded") => plan.delete.push(name(pod)),
            _ => running.push(pod),
        }
    }
    running.sort_by(|a, b| by_creation(a, b));
    if !allows_surge(ds) {
        plan.delete.extend(running.iter().skip(1).map(|p| name(p)));
        return;
    }
    if running.is_empty() {
        if should_run {
            plan.create_on.push(node_name);
        }
        return;
    }
    if running.len() == 1 {
        return;
    }
    // Surging: keep the oldest new pod and the oldest old one; the old one goes once it is
    // not ready or the new one is available.
    let (mut oldest_new, mut oldest_old): (Option<&Pod>, Option<&Pod>) = (None, None);
    for pod in running {
        let is_new = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(HASH_LABEL))
            .map(String::as_str)
            == Some(view.hash);
        let slot = if is_new {
            &mut oldest_new
        } else {
            &mut oldest_old
        };
        if slot.is_none() {
            *slot = Some(pod);
        } else {
            plan.delete.push(name(pod));
        }
    }
    if let (Some(new), Some(old)) = (oldest_new, oldest_old)
        && (!pods::is_ready(old) || pods::is_available(new, min_ready_seconds(ds), view.now))
    {
        plan.delete.push(name(old));
    }
}

/// Creations and deletions to have one daemon pod on each eligible node (upstream's `manage`),
/// including unscheduled pods pinned to nodes that no longer exist.
pub fn manage(view: &View<'_>) -> Plan {
    let by_node = nodes_to_pods(view.pods, false);
    let mut plan = Plan::default();
    for node in view.nodes {
        pods_should_be_on_node(view, node, &by_node, &mut plan);
    }
    let known: BTreeSet<&str> = view
        .nodes
        .iter()
        .filter_map(|n| n.metadata.name.as_deref())
        .collect();
    for (node, pods_there) in &by_node {
        if known.contains(node.as_str()) {
            continue;
        }
        for pod in pods_there {
            let unscheduled = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_none_or(str::is_empty);
            if unscheduled && !plan.delete.contains(&name(pod)) {
                plan.delete.push(name(pod));
            }
        }
    }
    plan
}

/// The new and the old pod on a node, or `None` when there are more than one of either
/// (upstream's `findUpdatedPodsOnNode`).
fn updated_on_node<'a>(
    pods_here: &[&'a Pod],
    hash: &str,
    generation: Option<i64>,
) -> Option<(Option<&'a Pod>, Option<&'a Pod>)> {
    let (mut new, mut old) = (None, None);
    for pod in pods_here
        .iter()
        .copied()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        let slot = if is_updated(pod, hash, generation) {
            &mut new
        } else {
            &mut old
        };
        if slot.is_some() {
            return None;
        }
        *slot = Some(pod);
    }
    Some((new, old))
}

/// maxSurge, maxUnavailable and the number of eligible nodes; an impossible 0/0 allows one
/// unavailable (upstream's `updatedDesiredNodeCounts`).
fn desired_counts(view: &View<'_>) -> Result<(i32, i32, i32), String> {
    let template = spec(view.ds).template.spec.clone();
    let desired = view
        .nodes
        .iter()
        .filter(|n| eligibility::should_run(template.as_ref(), n).0)
        .count() as i32;
    let max_unavailable = unavailable_count(view.ds, desired)?;
    let max_surge = surge_count(view.ds, desired)?;
    if desired > 0 && max_unavailable == 0 && max_surge == 0 {
        return Ok((0, 1, desired));
    }
    Ok((max_surge, max_unavailable, desired))
}

/// The pods a rolling update deletes and the nodes it surges onto now (upstream's
/// `rollingUpdate`).
pub fn rolling_update(view: &View<'_>) -> Result<Plan, String> {
    let ds = view.ds;
    let (max_surge, max_unavailable, desired) = desired_counts(view)?;
    let template = spec(ds).template.spec.clone();
    let mut by_node = nodes_to_pods(view.pods, false);
    for node in view.nodes {
        if eligibility::should_run(template.as_ref(), node).0
            && let Some(name) = &node.metadata.name
        {
            by_node.entry(name.clone()).or_default();
        }
    }
    let generation = template_generation(ds);
    let min_ready = min_ready_seconds(ds);
    let available = |p: &Pod| pods::is_available(p, min_ready, view.now);
    let node_runs = |name: &str| {
        view.nodes
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(name))
            .is_some_and(|n| eligibility::should_run(template.as_ref(), n).0)
    };
    let mut plan = Plan::default();
    if max_surge == 0 {
        let mut unavailable = 0;
        let mut replace = Vec::new();
        let mut candidates = Vec::new();
        for pods_here in by_node.values() {
            match updated_on_node(pods_here, view.hash, generation) {
                None | Some((None, None)) | Some((Some(_), Some(_))) => unavailable += 1,
                Some((Some(new), None)) => {
                    if !available(new) {
                        unavailable += 1;
                    }
                }
                Some((None, Some(old))) => {
                    if !available(old) {
                        replace.push(name(old));
                    } else if unavailable < max_unavailable {
                        candidates.push(name(old));
                    }
                }
            }
        }
        let room = (max_unavailable - unavailable).clamp(0, candidates.len() as i32) as usize;
        plan.delete = replace;
        plan.delete.extend(candidates.into_iter().take(room));
        return Ok(plan);
    }
    let mut surging = 0;
    let mut available_count = 0;
    let mut allowed_nodes = Vec::new();
    let mut candidate_nodes = Vec::new();
    let mut off_node_pods = Vec::new();
    for (node, pods_here) in &by_node {
        let Some((new, old)) = updated_on_node(pods_here, view.hash, generation) else {
            surging += 1;
            continue;
        };
        if old.or(new).is_some_and(available) {
            available_count += 1;
        }
        match (new, old) {
            (_, None) => {}
            (None, Some(old)) => {
                if !available(old) {
                    if node_runs(node) {
                        allowed_nodes.push(node.clone());
                    } else {
                        plan.delete.push(name(old));
                    }
                } else if !node_runs(node) {
                    off_node_pods.push(name(old));
                } else if surging < max_surge {
                    candidate_nodes.push(node.clone());
                }
            }
            (Some(new), Some(old)) => {
                if available(new) {
                    plan.delete.push(name(old));
                } else {
                    surging += 1;
                }
            }
        }
    }
    let room = (max_surge - surging).clamp(0, candidate_nodes.len() as i32) as usize;
    plan.create_on = allowed_nodes;
    plan.create_on
        .extend(candidate_nodes.into_iter().take(room));
    if !off_node_pods.is_empty() {
        let unavailable = desired - available_count;
        let room = (max_unavailable - unavailable).clamp(0, off_node_pods.len() as i32) as usize;
        plan.delete.extend(off_node_pods.into_iter().take(room));
    }
    Ok(plan)
}

/// The status counts (upstream's `updateDaemonSetStatus`); the observed generation only when
/// the sync acted on this generation.
pub fn status(view: &View<'_>, observed: bool) -> DaemonSetStatus {
    let ds = view.ds;
    let template = spec(ds).template.spec.clone();
    let by_node = nodes_to_pods(view.pods, false);
    let generation = template_generation(ds);
    let mut status = ds.status.clone().unwrap_or_default();
    let (mut desired, mut current, mut misscheduled, mut ready, mut available, mut updated) =
        (0, 0, 0, 0, 0, 0);
    for node in view.nodes {
        let (should_run, _) = eligibility::should_run(template.as_ref(), node);
        let mut here: Vec<&Pod> = node
            .metadata
            .name
            .as_ref()
            .and_then(|n| by_node.get(n))
            .cloned()
            .unwrap_or_default();
        if !should_run {
            if !here.is_empty() {
                misscheduled += 1;
            }
            continue;
        }
        desired += 1;
        here.sort_by(|a, b| by_creation(a, b));
        let Some(pod) = here.first() else { continue };
        current += 1;
        if pods::is_ready(pod) {
            ready += 1;
            if pods::is_available(pod, min_ready_seconds(ds), view.now) {
                available += 1;
            }
        }
        if is_updated(pod, view.hash, generation) {
            updated += 1;
        }
    }
    status.desired_number_scheduled = desired;
    status.current_number_scheduled = current;
    status.number_misscheduled = misscheduled;
    status.number_ready = ready;
    let optional = |n: i32| (n != 0).then_some(n);
    status.number_available = optional(available);
    status.number_unavailable = optional(desired - available);
    status.updated_number_scheduled = optional(updated);
    if observed && let Some(generation) = ds.metadata.generation {
        status.observed_generation = Some(generation);
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_767_225_600 + secs).unwrap_or_default()
    }

    fn time(secs: i64) -> String {
        at(secs).to_string()
    }

    fn node(name: &str, labels: serde_json::Value) -> Node {
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}, "spec": {}}))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn ds(strategy: serde_json::Value) -> DaemonSet {
        serde_json::from_value(json!({
            "metadata": {"name": "ds", "namespace": "ns", "uid": "u", "generation": 2,
                         "annotations": {GENERATION_ANNOTATION: "2"}},
            "spec": {"selector": {"matchLabels": {"app": "d"}},
                     "template": {"metadata": {"labels": {"app": "d"}},
                                  "spec": {"nodeSelector": {"role": "worker"}, "containers": []}},
                     "updateStrategy": strategy},
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// A daemon pod: `name` on `node`, revision `hash`, created at `created`, with `state` one
    /// of pending, ready (since 0), fresh (ready since 100), failed, succeeded, deleting.
    fn pod(name: &str, node: &str, hash: &str, created: i64, state: &str) -> Pod {
        let (phase, ready_at) = match state {
            "ready" | "deleting" => ("Running", Some(0)),
            "fresh" => ("Running", Some(100)),
            "failed" => ("Failed", None),
            "succeeded" => ("Succeeded", None),
            _ => ("Pending", None),
        };
        let conditions = ready_at
            .map(|t| json!([{"type": "Ready", "status": "True", "lastTransitionTime": time(t)}]));
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": name,
                         "labels": {"app": "d", HASH_LABEL: hash},
                         "creationTimestamp": time(created),
                         "deletionTimestamp": (state == "deleting").then(|| time(50))},
            "spec": {"nodeName": node, "containers": []},
            "status": {"phase": phase, "conditions": conditions},
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn workers(n: usize) -> Vec<Node> {
        (1..=n)
            .map(|i| node(&format!("n{i}"), json!({"role": "worker"})))
            .collect()
    }

    fn view<'a>(
        ds: &'a DaemonSet,
        nodes: &'a [&'a Node],
        pods: &'a [&'a Pod],
        now: i64,
    ) -> View<'a> {
        View {
            ds,
            nodes,
            pods,
            hash: "new",
            now: at(now),
        }
    }

    fn refs<T>(v: &[T]) -> Vec<&T> {
        v.iter().collect()
    }

    #[test]
    fn manage_creates_on_missing_nodes_and_deletes_surplus() {
        let d = ds(json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}));
        let mut nodes = workers(4);
        nodes.push(node("edge", json!({"role": "edge"})));
        let pods = [
            pod("a", "n1", "new", 0, "ready"),
            pod("b", "n1", "new", 5, "ready"), // a second pod on n1: the younger goes
            pod("c", "n2", "new", 0, "failed"), // failed: deleted under backoff
            pod("d", "n3", "new", 0, "succeeded"), // succeeded: deleted
            pod("e", "edge", "new", 0, "ready"), // not eligible any more
            pod("f", "n4", "new", 0, "deleting"), // on its way out: n4 waits
            pod("g", "", "new", 0, "pending"), // no node at all: ignored
        ];
        let mut gone = pod("h", "", "new", 0, "pending");
        if let Some(spec) = gone.spec.as_mut() {
            spec.affinity = Some(eligibility::pin_to_node(None, "vanished"));
        }
        let mut all = refs(&pods);
        all.push(&gone);
        let nodes = refs(&nodes);
        let plan = manage(&view(&d, &nodes, &all, 200));
        assert_eq!(
            plan.create_on,
            Vec::<String>::new(),
            "every worker has a pod (n2, n3 get theirs next sync)"
        );
        assert_eq!(plan.delete, ["b", "d", "e", "h"]);
        assert_eq!(plan.failed, [("c".to_owned(), "n2".to_owned())]);

        let empty: Vec<&Pod> = Vec::new();
        let plan = manage(&view(&d, &nodes, &empty, 200));
        assert_eq!(plan.create_on, ["n1", "n2", "n3", "n4"]);
    }

    #[test]
    fn surge_keeps_old_and_new_until_the_new_one_is_available() {
        let d = ds(
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}),
        );
        let nodes = workers(3);
        let nodes = refs(&nodes);
        fn check(d: &DaemonSet, nodes: &[&Node], pods: &[Pod], expected: &[&str]) {
            let all = refs(pods);
            assert_eq!(manage(&view(d, nodes, &all, 200)).delete, expected);
        }
        check(
            &d,
            &nodes,
            &[
                pod("o1", "n1", "old", 0, "ready"),
                pod("x1", "n1", "new", 10, "pending"),
            ],
            &[],
        );
        check(
            &d,
            &nodes,
            &[
                pod("o1", "n1", "old", 0, "ready"),
                pod("x1", "n1", "new", 10, "ready"),
            ],
            &["o1"],
        );
        check(
            &d,
            &nodes,
            &[
                pod("o1", "n1", "old", 0, "pending"),
                pod("x1", "n1", "new", 10, "pending"),
            ],
            &["o1"],
        );
        check(
            &d,
            &nodes,
            &[
                pod("o1", "n1", "old", 0, "ready"),
                pod("o2", "n1", "old", 5, "ready"),
                pod("x1", "n1", "new", 10, "pending"),
            ],
            &["o2"],
        );
    }

    #[test]
    fn rolling_update_without_surge_stays_within_max_unavailable() {
        let nodes = workers(4);
        let nodes = refs(&nodes);
        fn check(d: &DaemonSet, nodes: &[&Node], pods: &[Pod], expected: Plan) {
            let all = refs(pods);
            assert_eq!(rolling_update(&view(d, nodes, &all, 200)), Ok(expected));
        }
        let deletes = |names: &[&str]| Plan {
            delete: names.iter().map(|s| s.to_string()).collect(),
            ..Plan::default()
        };
        let one = ds(json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}));
        let all_old = [
            pod("o1", "n1", "old", 0, "ready"),
            pod("o2", "n2", "old", 0, "ready"),
            pod("o3", "n3", "old", 0, "ready"),
            pod("o4", "n4", "old", 0, "ready"),
        ];
        check(&one, &nodes, &all_old, deletes(&["o1"]));
        let half = ds(json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "50%"}}));
        check(&half, &nodes, &all_old, deletes(&["o1", "o2"]));
        // One new pod not yet available uses up the budget; unavailable old pods always go.
        let midway = [
            pod("x1", "n1", "new", 0, "pending"),
            pod("o2", "n2", "old", 0, "pending"),
            pod("o3", "n3", "old", 0, "ready"),
            pod("o4", "n4", "old", 0, "ready"),
        ];
        check(&one, &nodes, &midway, deletes(&["o2"]));
        // A node without a pod counts as unavailable.
        check(&one, &nodes, &all_old[1..], deletes(&[]));
    }

    #[test]
    fn rolling_update_with_surge_creates_within_max_surge() {
        let nodes = workers(4);
        let nodes = refs(&nodes);
        let d = ds(
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "25%"}}),
        );
        let pods = [
            pod("o1", "n1", "old", 0, "ready"),
            pod("o2", "n2", "old", 0, "pending"),
            pod("o3", "n3", "old", 0, "ready"),
            pod("o4", "n4", "old", 0, "ready"),
        ];
        let all = refs(&pods);
        let plan = rolling_update(&view(&d, &nodes, &all, 200)).unwrap_or_default();
        assert_eq!(
            plan.create_on,
            ["n2", "n1"],
            "the unavailable node at once, plus maxSurge (1) candidates"
        );
        assert!(plan.delete.is_empty());

        let pods = [
            pod("o1", "n1", "old", 0, "ready"),
            pod("x1", "n1", "new", 10, "fresh"),
            pod("o3", "n3", "old", 0, "ready"),
            pod("x3", "n3", "new", 10, "ready"),
        ];
        let all = refs(&pods);
        let mut d = ds(
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}),
        );
        if let Some(spec) = d.spec.as_mut() {
            spec.min_ready_seconds = Some(150);
        }
        let plan = rolling_update(&view(&d, &nodes, &all, 200)).unwrap_or_default();
        assert_eq!(
            plan.delete,
            ["o3"],
            "n3's new pod is available, n1's is not"
        );
        assert!(plan.create_on.is_empty(), "n1 is surging, so no room");
    }

    #[test]
    fn status_counts() {
        let d = ds(json!({"type": "RollingUpdate"}));
        let mut d = d;
        if let Some(spec) = d.spec.as_mut() {
            spec.min_ready_seconds = Some(150);
        }
        let mut nodes = workers(4);
        nodes.push(node("edge", json!({})));
        let nodes = refs(&nodes);
        let pods = [
            pod("a", "n1", "new", 0, "ready"),
            pod("b", "n2", "old", 0, "fresh"),
            pod("c", "n3", "new", 0, "pending"),
            pod("e", "edge", "old", 0, "ready"),
        ];
        let all = refs(&pods);
        let s = status(&view(&d, &nodes, &all, 200), true);
        assert_eq!(
            (
                s.desired_number_scheduled,
                s.current_number_scheduled,
                s.number_misscheduled,
                s.number_ready
            ),
            (4, 3, 1, 2)
        );
        assert_eq!(
            (
                s.number_available,
                s.number_unavailable,
                s.updated_number_scheduled
            ),
            (Some(1), Some(3), Some(2))
        );
        assert_eq!(s.observed_generation, Some(2));
        assert_eq!(
            status(&view(&d, &nodes, &all, 200), false).observed_generation,
            None
        );
    }

    #[test]
    fn updated_by_hash_or_generation() {
        let mut p = pod("a", "n1", "old", 0, "ready");
        assert!(!is_updated(&p, "new", Some(2)));
        assert!(is_updated(&p, "old", None));
        if let Some(labels) = p.metadata.labels.as_mut() {
            labels.insert(GENERATION_LABEL.into(), "2".into());
        }
        assert!(is_updated(&p, "new", Some(2)));
        assert!(!is_updated(&p, "", Some(3)));
    }
}

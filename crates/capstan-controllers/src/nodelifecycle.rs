//! The node lifecycle controller (upstream's `pkg/controller/nodelifecycle`): node health from
//! status heartbeats and Lease renewals. A node not heard from for the grace period gets its
//! conditions set to Unknown; nodes carry the `NoSchedule` taints their conditions call for
//! (upstream's TaintNodesByCondition) and the `NoExecute` taints `not-ready` or `unreachable`.
//! New `NoExecute` taints are rate limited per zone as upstream's: one node per 10 s in a
//! healthy zone, one per 100 s in a large partially disrupted one, none in a small partially
//! disrupted one, and when every zone looks down all of them are lifted (the control plane's
//! network is the likelier culprit then). The taint eviction controller
//! ([`crate::tainteviction`]) acts on the `NoExecute` taints. A Ready node this controller
//! finds silent gets a `NodeNotReady` event and its pods' Ready condition set False (upstream's
//! `MarkPodsNotReady`: their kubelet cannot), retried until done or the node is Ready again.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use capstan_client::events::{EventRecorder, EventType};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition, ObjectReference, Pod, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::json;

use crate::runtime::{self, Error, Queue, Setup, Task};

/// How often every node's health is looked at (upstream's `--node-monitor-period`).
const MONITOR_PERIOD: Duration = Duration::from_secs(5);
/// Upstream's `--unhealthy-zone-threshold`.
const UNHEALTHY_ZONE_THRESHOLD: f64 = 0.55;
/// Upstream's `--node-eviction-rate`: nodes newly tainted `NoExecute` per second in a zone.
const EVICTION_QPS: f64 = 0.1;
/// Upstream's `--secondary-node-eviction-rate`, for a large zone in partial disruption.
const SECONDARY_EVICTION_QPS: f64 = 0.01;
/// Upstream's `--large-cluster-size-threshold`: a smaller zone in partial disruption taints no
/// more nodes.
const LARGE_CLUSTER_THRESHOLD: usize = 50;

/// The taint keys this controller manages.
pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
/// Ready is Unknown.
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
const CONDITION_TAINTS: [(&str, &str); 4] = [
    ("MemoryPressure", "node.kubernetes.io/memory-pressure"),
    ("DiskPressure", "node.kubernetes.io/disk-pressure"),
    ("PIDPressure", "node.kubernetes.io/pid-pressure"),
    (
        "NetworkUnavailable",
        "node.kubernetes.io/network-unavailable",
    ),
];
const UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";
/// The conditions set to Unknown when the kubelet falls silent.
const WATCHED_CONDITIONS: [&str; 4] = ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"];

/// When this controller last saw a node's kubelet alive.
#[derive(Debug, Clone)]
struct Probe {
    heartbeat: Option<Timestamp>,
    renew: Option<Timestamp>,
    seen_at: Instant,
}

/// A zone's state (upstream's `ZoneState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ZoneState {
    Normal,
    PartialDisruption,
    FullDisruption,
}

/// The controller's shared state.
pub struct Context {
    client: Client,
    leases: Store<Lease>,
    nodes: Store<Node>,
    pods: Store<Pod>,
    recorder: EventRecorder,
    grace: Duration,
    /// Nodes found silent whose pods are still to be marked not ready.
    unmarked: Mutex<HashSet<String>>,
    probes: Mutex<HashMap<String, Probe>>,
    /// Zone states, computed at most once a second (each takes a pass over all nodes).
    zones: Mutex<Option<(Instant, Arc<Zones>)>>,
    /// Each zone's allowance for new `NoExecute` taints.
    limiters: Mutex<HashMap<String, Limiter>>,
}

/// Every zone's state and size, and whether all are fully disrupted.
#[derive(Debug)]
struct Zones {
    states: BTreeMap<String, (ZoneState, usize)>,
    all_down: bool,
}

/// How many nodes per second a zone in `state` with `size` nodes may newly taint (upstream's
/// limiter swap on a zone's state change).
fn eviction_qps(state: ZoneState, size: usize) -> f64 {
    match state {
        ZoneState::Normal | ZoneState::FullDisruption => EVICTION_QPS,
        ZoneState::PartialDisruption if size > LARGE_CLUSTER_THRESHOLD => SECONDARY_EVICTION_QPS,
        ZoneState::PartialDisruption => 0.0,
    }
}

/// A token bucket of burst 1 (upstream's eviction limiter).
#[derive(Debug, Clone, Copy)]
struct Limiter {
    qps: f64,
    tokens: f64,
    at: Instant,
}

impl Limiter {
    /// A token at `now`, or how long until one (`None`: never, at this rate).
    fn take(&mut self, qps: f64, now: Instant) -> Result<(), Option<Duration>> {
        if qps != self.qps {
            // A new rate starts a new bucket, drained if the old one was (as upstream swaps);
            // a zero rate rejects everything, so the bucket after it starts drained.
            let drained = self.qps <= 0.0 || self.refilled(now) < 1.0;
            *self = Limiter {
                qps,
                tokens: if drained { 0.0 } else { 1.0 },
                at: now,
            };
        }
        if qps <= 0.0 {
            return Err(None);
        }
        self.tokens = self.refilled(now);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Ok(());
        }
        Err(Some(Duration::from_secs_f64((1.0 - self.tokens) / qps)))
    }

    fn refilled(&self, now: Instant) -> f64 {
        (self.tokens + now.saturating_duration_since(self.at).as_secs_f64() * self.qps).min(1.0)
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("grace", &self.grace)
            .finish_non_exhaustive()
    }
}

/// Registers the informer handlers and returns the controller's run future.
pub fn start(mut setup: Setup<'_>) -> Task {
    let nodes = setup.watch::<Node>();
    let leases = setup.watch::<Lease>();
    let pods = setup.watch::<Pod>();
    let (queue, rx) = Queue::<Node>::new();
    queue.follow_applied(&nodes);
    let ctx = Arc::new(Context {
        client: setup.client(),
        leases: leases.store(),
        nodes: nodes.store(),
        pods: pods.store(),
        recorder: setup.recorder("node-controller"),
        grace: setup.config().node_monitor_grace_period,
        unmarked: Mutex::new(HashSet::new()),
        probes: Mutex::new(HashMap::new()),
        zones: Mutex::new(None),
        limiters: Mutex::new(HashMap::new()),
    });
    let store = nodes.store();
    let ticker = async move {
        // Every node is looked at each period, heard from or not.
        loop {
            tokio::time::sleep(MONITOR_PERIOD).await;
            for node in store.state() {
                queue.add(ObjectRef::from_obj(&*node));
            }
        }
    };
    let run = setup.run("nodelifecycle", &nodes, rx, ctx, reconcile);
    Box::pin(async move {
        tokio::select! {
            () = run => {}
            () = ticker => {}
        }
    })
}

fn condition<'a>(node: &'a Node, kind: &str) -> Option<&'a NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_deref()?
        .iter()
        .find(|c| c.type_ == kind)
}

/// The Ready condition's status ("True", "False", "Unknown"; absent reads as Unknown).
fn ready(node: &Node) -> &str {
    condition(node, "Ready").map_or("Unknown", |c| c.status.as_str())
}

/// The node's zone key (region and zone labels), as upstream's `GetZoneKey`.
fn zone(node: &Node) -> String {
    let labels = node.metadata.labels.as_ref();
    let get = |k: &str| labels.and_then(|l| l.get(k)).cloned().unwrap_or_default();
    format!(
        "{}:\u{0}:{}",
        get("topology.kubernetes.io/region"),
        get("topology.kubernetes.io/zone")
    )
}

/// Upstream's `ComputeZoneState` over `(ready?)` of a zone's nodes.
fn zone_state(readiness: &[bool]) -> ZoneState {
    let not_ready = readiness.iter().filter(|r| !**r).count();
    let ready = readiness.len() - not_ready;
    if ready == 0 && not_ready > 0 {
        ZoneState::FullDisruption
    } else if not_ready > 2
        && not_ready as f64 / readiness.len().max(1) as f64 >= UNHEALTHY_ZONE_THRESHOLD
    {
        ZoneState::PartialDisruption
    } else {
        ZoneState::Normal
    }
}

/// The taints `node` should carry from this controller: the NoSchedule ones of its
/// conditions always, the NoExecute one of its readiness when evictions are on.
fn desired_taints(node: &Node, evicting: bool) -> Vec<(&'static str, &'static str)> {
    let mut taints = Vec::new();
    match ready(node) {
        "False" => taints.push((NOT_READY, "NoSchedule")),
        "True" => {}
        _ => taints.push((UNREACHABLE, "NoSchedule")),
    }
    for (kind, key) in CONDITION_TAINTS {
        if condition(node, kind).is_some_and(|c| c.status == "True") {
            taints.push((key, "NoSchedule"));
        }
    }
    if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
        taints.push((UNSCHEDULABLE, "NoSchedule"));
    }
    if evicting {
        match ready(node) {
            "False" => taints.push((NOT_READY, "NoExecute")),
            "True" => {}
            _ => taints.push((UNREACHABLE, "NoExecute")),
        }
    }
    taints
}

fn managed(taint: &Taint) -> bool {
    let key = taint.key.as_str();
    key == NOT_READY
        || key == UNREACHABLE
        || key == UNSCHEDULABLE
        || CONDITION_TAINTS.iter().any(|(_, k)| *k == key)
}

/// The node's taints with this controller's set to `desired` (others kept, existing ones kept
/// with their time); `None` when nothing changes.
fn merge_taints(current: &[Taint], desired: &[(&str, &str)], now: Timestamp) -> Option<Vec<Taint>> {
    let mut out: Vec<Taint> = current
        .iter()
        .filter(|t| !managed(t) || desired.iter().any(|(k, e)| t.key == *k && t.effect == *e))
        .cloned()
        .collect();
    for (key, effect) in desired {
        if !out.iter().any(|t| t.key == *key && t.effect == *effect) {
            out.push(Taint {
                key: (*key).to_owned(),
                effect: (*effect).to_owned(),
                time_added: (*effect == "NoExecute").then_some(Time(now)),
                value: None,
            });
        }
    }
    (out != current).then_some(out)
}

/// The node's conditions after the kubelet has been silent past the grace period: every
/// watched condition Unknown (upstream's `tryUpdateNodeHealth`); `None` when already so.
fn silenced_conditions(node: &Node, now: Timestamp) -> Option<Vec<NodeCondition>> {
    let mut conditions = node.status.as_ref()?.conditions.clone().unwrap_or_default();
    let mut changed = false;
    for kind in WATCHED_CONDITIONS {
        match conditions.iter_mut().find(|c| c.type_ == kind) {
            Some(c) if c.status != "Unknown" => {
                c.status = "Unknown".into();
                c.reason = Some("NodeStatusUnknown".into());
                c.message = Some("Kubelet stopped posting node status.".into());
                c.last_transition_time = Some(Time(now));
                changed = true;
            }
            Some(_) => {}
            None => {
                conditions.push(NodeCondition {
                    type_: kind.into(),
                    status: "Unknown".into(),
                    reason: Some("NodeStatusNeverUpdated".into()),
                    message: Some("Kubelet never posted node status.".into()),
                    last_heartbeat_time: node.metadata.creation_timestamp.clone(),
                    last_transition_time: Some(Time(now)),
                });
                changed = true;
            }
        }
    }
    changed.then_some(conditions)
}

/// The status patch that sets `pod`'s Ready condition False at `now` (upstream's
/// `MarkPodsNotReady` for one pod); `None` when it has no Ready condition or it is False
/// already. The condition keeps its reason and message.
fn not_ready_patch(pod: &Pod, now: Timestamp) -> Option<serde_json::Value> {
    let ready = pod
        .status
        .as_ref()?
        .conditions
        .as_deref()?
        .iter()
        .find(|c| c.type_ == "Ready")?;
    (ready.status != "False").then(|| {
        json!({"status": {"conditions": [{
            "type": "Ready", "status": "False", "lastTransitionTime": Time(now),
        }]}})
    })
}

impl Context {
    /// Sets the Ready condition of every pod on node `name` False.
    async fn mark_pods_not_ready(&self, name: &str) -> Result<(), Error> {
        let now = crate::pods::now();
        let on_node = self
            .pods
            .state_filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name));
        for pod in on_node {
            let Some(patch) = not_ready_patch(&pod, now) else {
                continue;
            };
            let namespace = pod.metadata.namespace.clone().unwrap_or_default();
            let pod_name = pod.metadata.name.clone().unwrap_or_default();
            tracing::info!(pod = %format!("{namespace}/{pod_name}"), node = %name,
                "updating the ready status of a pod on a silent node to false");
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
            match api
                .patch_status(&pod_name, &PatchParams::default(), &Patch::Strategic(patch))
                .await
            {
                Ok(_) => {}
                Err(error) if runtime::is_not_found(&error) => {}
                Err(error) => return Err(error.into()),
            }
        }
        Ok(())
    }

    /// Whether the kubelet was heard from within the grace period: a new heartbeat or Lease
    /// renewal since the last look counts from the moment this controller saw it.
    fn heard_from(&self, node: &Node) -> bool {
        let name = node.metadata.name.clone().unwrap_or_default();
        let heartbeat = condition(node, "Ready")
            .and_then(|c| c.last_heartbeat_time.as_ref())
            .map(|t| t.0);
        let renew = self
            .leases
            .get(&ObjectRef::new(&name).within("kube-node-lease"))
            .and_then(|l| l.spec.as_ref()?.renew_time.as_ref().map(|t| t.0));
        let now = Instant::now();
        let mut probes = self.probes.lock().unwrap_or_else(|e| e.into_inner());
        let probe = probes.entry(name).or_insert(Probe {
            heartbeat,
            renew,
            seen_at: now,
        });
        if probe.heartbeat != heartbeat || probe.renew != renew {
            *probe = Probe {
                heartbeat,
                renew,
                seen_at: now,
            };
        }
        now.duration_since(probe.seen_at) <= self.grace
    }

    /// The state and size of `node`'s zone, and whether every zone is fully disrupted.
    fn zone_of(&self, node: &Node) -> (ZoneState, usize, bool) {
        let zones = {
            let mut cached = self.zones.lock().unwrap_or_else(|e| e.into_inner());
            match cached.as_ref() {
                Some((at, zones)) if at.elapsed() < Duration::from_secs(1) => zones.clone(),
                _ => {
                    let mut readiness: BTreeMap<String, Vec<bool>> = BTreeMap::new();
                    for other in self.nodes.state() {
                        readiness
                            .entry(zone(&other))
                            .or_default()
                            .push(ready(&other) == "True");
                    }
                    let states: BTreeMap<String, (ZoneState, usize)> = readiness
                        .into_iter()
                        .map(|(z, r)| (z, (zone_state(&r), r.len())))
                        .collect();
                    let all_down = !states.is_empty()
                        && states
                            .values()
                            .all(|(s, _)| *s == ZoneState::FullDisruption);
                    let zones = Arc::new(Zones { states, all_down });
                    *cached = Some((Instant::now(), zones.clone()));
                    zones
                }
            }
        };
        let (state, size) = zones
            .states
            .get(&zone(node))
            .copied()
            .unwrap_or((ZoneState::Normal, 1));
        (state, size, zones.all_down)
    }

    /// Whether `node`'s zone may taint one more node `NoExecute` now; else how long to wait.
    fn may_taint(
        &self,
        node: &Node,
        state: ZoneState,
        size: usize,
    ) -> Result<(), Option<Duration>> {
        let now = Instant::now();
        let qps = eviction_qps(state, size);
        let mut limiters = self.limiters.lock().unwrap_or_else(|e| e.into_inner());
        limiters
            .entry(zone(node))
            .or_insert(Limiter {
                qps,
                tokens: 1.0,
                at: now,
            })
            .take(qps, now)
    }
}

/// One look at a node: conditions when the kubelet fell silent, then its taints.
pub async fn reconcile(node: Arc<Node>, ctx: Arc<Context>) -> Result<Action, Error> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let api: Api<Node> = Api::all(ctx.client.clone());
    let now = crate::pods::now();
    let mut node = (*node).clone();
    let was_ready = ready(&node) == "True";
    if !ctx.heard_from(&node)
        && let Some(conditions) = silenced_conditions(&node, now)
    {
        tracing::info!(node = %name, "node stopped posting status; conditions now Unknown");
        if let Some(status) = node.status.as_mut() {
            status.conditions = Some(conditions);
        }
        node = match runtime::replace_status_unless_gone(&api, &name, &node).await? {
            Some(updated) => updated,
            None => return Ok(Action::await_change()),
        };
        if was_ready {
            ctx.recorder.record(
                ObjectReference {
                    kind: Some("Node".into()),
                    name: Some(name.clone()),
                    uid: node.metadata.uid.clone(),
                    ..ObjectReference::default()
                },
                EventType::Normal,
                "NodeNotReady",
                format!("Node {name} status is now: NodeNotReady"),
            );
            ctx.unmarked
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(name.clone());
        }
    }
    // The pods of a node found silent are marked not ready, until done or it is Ready again.
    let unmarked = {
        let mut unmarked = ctx.unmarked.lock().unwrap_or_else(|e| e.into_inner());
        if ready(&node) == "True" {
            unmarked.remove(&name);
        }
        unmarked.contains(&name)
    };
    if unmarked {
        ctx.mark_pods_not_ready(&name).await?;
        ctx.unmarked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&name);
    }
    let (state, size, all_down) = ctx.zone_of(&node);
    let current = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    // Not ready or unreachable: NoExecute, unless every zone is down (then all are lifted).
    // A node already tainted has its taint swapped at once; a new one waits for its zone's
    // allowance. A ready node loses its taint at once.
    let mut evicting = ready(&node) != "True" && !all_down;
    let tainted = current
        .iter()
        .any(|t| t.effect == "NoExecute" && (t.key == NOT_READY || t.key == UNREACHABLE));
    let mut retry = None;
    if evicting
        && !tainted
        && let Err(wait) = ctx.may_taint(&node, state, size)
    {
        evicting = false;
        retry = wait;
    }
    let desired = desired_taints(&node, evicting);
    let merged = merge_taints(&current, &desired, now);
    if let Some(taints) = merged {
        let patch = json!({"metadata": {"resourceVersion": node.metadata.resource_version},
                           "spec": {"taints": taints}});
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => {}
            Err(error) if runtime::is_not_found(&error) => {}
            Err(error) => return Err(error.into()),
        }
    }
    // The periodic pass looks again too; a known wait comes back sooner.
    Ok(retry.map_or_else(Action::await_change, Action::requeue))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(ready: &str, extra: serde_json::Value) -> Node {
        let mut value = json!({"metadata": {"name": "n", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"conditions": [
                {"type": "Ready", "status": ready, "lastHeartbeatTime": "2026-01-01T00:00:00Z"},
                {"type": "MemoryPressure", "status": "False"}]}});
        if let (Some(v), Some(e)) = (value.as_object_mut(), extra.as_object()) {
            for (k, x) in e {
                v.insert(k.clone(), x.clone());
            }
        }
        serde_json::from_value(value).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn taints_follow_conditions() {
        assert!(desired_taints(&node("True", json!({})), true).is_empty());
        assert_eq!(
            desired_taints(&node("False", json!({})), true),
            [(NOT_READY, "NoSchedule"), (NOT_READY, "NoExecute")]
        );
        assert_eq!(
            desired_taints(&node("Unknown", json!({})), false),
            [(UNREACHABLE, "NoSchedule")]
        );
        let cordoned = node("True", json!({"spec": {"unschedulable": true}}));
        assert_eq!(
            desired_taints(&cordoned, true),
            [(UNSCHEDULABLE, "NoSchedule")]
        );
    }

    #[test]
    fn merging_keeps_foreign_taints_and_swaps_ours() {
        let now = Timestamp::UNIX_EPOCH;
        let taint = |k: &str, e: &str| Taint {
            key: k.into(),
            effect: e.into(),
            time_added: None,
            value: None,
        };
        let current = vec![
            taint("dedicated", "NoSchedule"),
            taint(NOT_READY, "NoExecute"),
        ];
        let merged = merge_taints(&current, &[(UNREACHABLE, "NoExecute")], now).unwrap_or_default();
        let keys: Vec<(&str, &str)> = merged
            .iter()
            .map(|t| (t.key.as_str(), t.effect.as_str()))
            .collect();
        assert_eq!(
            keys,
            [("dedicated", "NoSchedule"), (UNREACHABLE, "NoExecute")]
        );
        assert!(
            merged[1].time_added.is_some(),
            "NoExecute taints carry their time"
        );
        assert_eq!(
            merge_taints(&merged, &[(UNREACHABLE, "NoExecute")], now),
            None
        );
        // A recovered node loses ours and keeps the others.
        let cleared = merge_taints(&merged, &[], now).unwrap_or_default();
        assert_eq!(cleared, [taint("dedicated", "NoSchedule")]);
    }

    #[test]
    fn new_no_execute_taints_are_rate_limited_per_zone_state() {
        assert_eq!(eviction_qps(ZoneState::Normal, 3), 0.1);
        assert_eq!(eviction_qps(ZoneState::FullDisruption, 3), 0.1);
        assert_eq!(
            eviction_qps(ZoneState::PartialDisruption, 50),
            0.0,
            "a small zone stops"
        );
        assert_eq!(eviction_qps(ZoneState::PartialDisruption, 51), 0.01);
        let t = Instant::now();
        let mut limiter = Limiter {
            qps: 0.1,
            tokens: 1.0,
            at: t,
        };
        assert_eq!(limiter.take(0.1, t), Ok(()), "the first node at once");
        let wait = limiter.take(0.1, t).err().flatten().unwrap_or_default();
        assert_eq!(wait.as_secs(), 10, "the next one in 10 s");
        assert_eq!(
            limiter
                .take(0.1, t + Duration::from_secs(4))
                .err()
                .flatten()
                .map(|d| d.as_secs()),
            Some(6)
        );
        assert_eq!(limiter.take(0.1, t + Duration::from_secs(10)), Ok(()));
        // Partial disruption of a small zone: none, however long.
        assert_eq!(limiter.take(0.0, t + Duration::from_secs(1000)), Err(None));
        // Back to normal: a fresh bucket (drained, as the old one was).
        assert!(limiter.take(0.1, t + Duration::from_secs(1001)).is_err());
        assert_eq!(limiter.take(0.1, t + Duration::from_secs(1011)), Ok(()));
    }

    #[test]
    fn silence_makes_conditions_unknown() {
        let now = Timestamp::UNIX_EPOCH;
        let conditions = silenced_conditions(&node("True", json!({})), now).unwrap_or_default();
        let by = |k: &str| {
            conditions
                .iter()
                .find(|c| c.type_ == k)
                .cloned()
                .unwrap_or_else(|| panic!("{k}"))
        };
        assert_eq!(by("Ready").status, "Unknown");
        assert_eq!(by("Ready").reason.as_deref(), Some("NodeStatusUnknown"));
        assert_eq!(
            by("Ready").message.as_deref(),
            Some("Kubelet stopped posting node status.")
        );
        assert_eq!(
            by("DiskPressure").reason.as_deref(),
            Some("NodeStatusNeverUpdated")
        );
        let mut again = node("Unknown", json!({}));
        if let Some(s) = again.status.as_mut() {
            s.conditions = Some(conditions);
        }
        assert_eq!(silenced_conditions(&again, now), None);
    }

    #[test]
    fn pods_of_a_silent_node_are_marked_not_ready() {
        let pod = |conditions: serde_json::Value| -> Pod {
            serde_json::from_value(json!({"metadata": {"name": "p"},
                "status": {"conditions": conditions}}))
            .unwrap_or_else(|e| panic!("{e}"))
        };
        let now = Timestamp::UNIX_EPOCH;
        let ready = pod(json!([{"type": "Ready", "status": "True", "reason": "R"},
                               {"type": "ContainersReady", "status": "True"}]));
        assert_eq!(
            not_ready_patch(&ready, now),
            Some(
                json!({"status": {"conditions": [{"type": "Ready", "status": "False",
                "lastTransitionTime": "1970-01-01T00:00:00Z"}]}})
            )
        );
        let not_ready = pod(json!([{"type": "Ready", "status": "False"}]));
        assert_eq!(not_ready_patch(&not_ready, now), None, "already False");
        let unknown = pod(json!([{"type": "Ready", "status": "Unknown"}]));
        assert!(not_ready_patch(&unknown, now).is_some());
        let pending = pod(json!([{"type": "PodScheduled", "status": "True"}]));
        assert_eq!(not_ready_patch(&pending, now), None, "no Ready condition");
    }

    #[test]
    fn zone_states_as_upstream() {
        assert_eq!(zone_state(&[true, true, false]), ZoneState::Normal);
        assert_eq!(zone_state(&[false]), ZoneState::FullDisruption);
        assert_eq!(
            zone_state(&[true, false, false]),
            ZoneState::Normal,
            "needs more than 2 not ready"
        );
        assert_eq!(
            zone_state(&[true, false, false, false]),
            ZoneState::PartialDisruption
        );
    }
}

//! The disruption controller (upstream's `pkg/controller/disruption`): keeps each
//! PodDisruptionBudget's status current — how many selected pods are expected and healthy, how
//! many must stay healthy, and so how many disruptions are allowed — which the eviction
//! subresource reads to answer 429 when an eviction would break a budget.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::Api;
use kube::core::{Selector, SelectorExt};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::pods;
use crate::runtime::{self, Error, Queue, Setup, Task};

/// How long a pod the eviction subresource recorded as disrupted is counted out (upstream's
/// `DeletionTimeout`).
const DISRUPTED_TIMEOUT: i64 = 2 * 60;

/// The controller's shared state.
pub(crate) struct Context {
    client: Client,
    pods: Store<Pod>,
    replica_sets: Store<ReplicaSet>,
    deployments: Store<Deployment>,
    controllers: Store<ReplicationController>,
    stateful_sets: Store<StatefulSet>,
}

/// Registers the informer handlers and returns the controller's run future.
pub fn start(mut setup: Setup<'_>) -> Task {
    let budgets = setup.watch::<PodDisruptionBudget>();
    let pod_informer = setup.watch::<Pod>();
    let replica_sets = setup.watch::<ReplicaSet>();
    let deployments = setup.watch::<Deployment>();
    let controllers = setup.watch::<ReplicationController>();
    let stateful_sets = setup.watch::<StatefulSet>();
    let (queue, rx) = Queue::<PodDisruptionBudget>::new();
    queue.follow(&budgets);
    {
        // A pod's change concerns the budgets that select it (before and after).
        let store = budgets.store();
        pod_informer.on_change(move |change| {
            let mut labels = vec![change.object().metadata.labels.clone().unwrap_or_default()];
            if let runtime::Change::Applied { old: Some(old), .. } = change {
                labels.push(old.metadata.labels.clone().unwrap_or_default());
            }
            let namespace = change.object().metadata.namespace.clone();
            for budget in store.state() {
                if budget.metadata.namespace != namespace {
                    continue;
                }
                let selector = selector(&budget);
                if labels
                    .iter()
                    .any(|l| selector.as_ref().is_some_and(|s| s.matches(l)))
                {
                    queue.add(ObjectRef::from_obj(&*budget));
                }
            }
        });
    }
    let ctx = Arc::new(Context {
        client: setup.client(),
        pods: pod_informer.store(),
        replica_sets: replica_sets.store(),
        deployments: deployments.store(),
        controllers: controllers.store(),
        stateful_sets: stateful_sets.store(),
    });
    setup.run("disruption", &budgets, rx, ctx, reconcile)
}

/// The budget's selector; an empty one selects nothing (policy/v1 selects all only for
/// `{}` written explicitly, which upstream treats as matching every pod).
fn selector(budget: &PodDisruptionBudget) -> Option<Selector> {
    let selector = budget.spec.as_ref()?.selector.clone()?;
    Selector::try_from(selector).ok()
}

/// An int-or-percent against `total`, rounded up as upstream's `GetScaledValueFromIntOrPercent`.
fn scaled(value: &IntOrString, total: i32) -> Result<i32, String> {
    match value {
        IntOrString::Int(n) => Ok(*n),
        IntOrString::String(text) => {
            let percent: i64 = text
                .strip_suffix('%')
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| format!("invalid value for IntOrString: invalid value {text:?}"))?;
            Ok(((percent * i64::from(total)) as f64 / 100.0).ceil() as i32)
        }
    }
}

/// What the status is computed from.
#[derive(Debug)]
struct Facts {
    /// Selected pods: (name, healthy).
    pods: Vec<(String, bool)>,
    /// The scale of the pods' controllers when the budget needs it, or why it is unknown.
    expected_scale: Option<Result<i32, String>>,
}

/// The expected and desired counts (upstream's `getExpectedPodCount`).
fn counts(
    spec: &k8s_openapi::api::policy::v1::PodDisruptionBudgetSpec,
    facts: &Facts,
) -> Result<(i32, i32), String> {
    let pods = facts.pods.len() as i32;
    if let Some(max_unavailable) = &spec.max_unavailable {
        let expected = facts.expected_scale.clone().unwrap_or(Ok(pods))?;
        let unavailable = scaled(max_unavailable, expected)?;
        return Ok((expected, (expected - unavailable).max(0)));
    }
    match &spec.min_available {
        Some(IntOrString::Int(n)) => Ok((pods, *n)),
        Some(percent) => {
            let expected = facts.expected_scale.clone().unwrap_or(Ok(pods))?;
            Ok((expected, scaled(percent, expected)?))
        }
        None => Ok((pods, pods)),
    }
}

/// The new status (upstream's `updatePdbStatus` and its condition).
fn status(
    budget: &PodDisruptionBudget,
    facts: &Facts,
    now: Timestamp,
) -> PodDisruptionBudgetStatus {
    let old = budget.status.clone().unwrap_or_default();
    let spec = budget.spec.clone().unwrap_or_default();
    let generation = budget.metadata.generation;
    // Pods the eviction subresource counted out, until they go or the record expires.
    let disrupted: BTreeMap<String, Time> = old
        .disrupted_pods
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|(name, at)| {
            at.0.as_second() + DISRUPTED_TIMEOUT > now.as_second()
                && facts.pods.iter().any(|(p, _)| p == name)
        })
        .collect();
    let healthy = facts
        .pods
        .iter()
        .filter(|(name, ok)| *ok && !disrupted.contains_key(name))
        .count() as i32;
    let (condition, mut status) = match counts(&spec, facts) {
        Ok((expected, desired)) => {
            let allowed = (healthy - desired).max(0);
            let condition = if allowed > 0 {
                ("True", "SufficientPods", String::new())
            } else {
                ("False", "InsufficientPods", String::new())
            };
            (
                condition,
                PodDisruptionBudgetStatus {
                    current_healthy: healthy,
                    desired_healthy: desired,
                    expected_pods: expected,
                    disruptions_allowed: allowed,
                    ..PodDisruptionBudgetStatus::default()
                },
            )
        }
        Err(message) => (
            ("False", "SyncFailed", message),
            PodDisruptionBudgetStatus {
                current_healthy: healthy,
                disruptions_allowed: 0,
                ..old.clone()
            },
        ),
    };
    status.observed_generation = generation;
    status.disrupted_pods = (!disrupted.is_empty()).then_some(disrupted);
    let mut conditions = old.conditions.unwrap_or_default();
    let (value, reason, message) = condition;
    match conditions
        .iter_mut()
        .find(|c| c.type_ == "DisruptionAllowed")
    {
        Some(c) => {
            if c.status != value {
                c.last_transition_time = Time(now);
            }
            c.status = value.into();
            c.reason = reason.into();
            c.message = message;
            c.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: "DisruptionAllowed".into(),
            status: value.into(),
            reason: reason.into(),
            message,
            last_transition_time: Time(now),
            observed_generation: generation,
        }),
    }
    status.conditions = Some(conditions);
    status
}

impl Context {
    /// The summed scale of the controllers of `selected` (upstream's finders: RC, RS — or its
    /// Deployment — and StatefulSet).
    fn expected_scale(&self, selected: &[Arc<Pod>]) -> Result<i32, String> {
        let mut seen: HashSet<String> = HashSet::new();
        let mut total = 0;
        for pod in selected {
            let Some(owner) = pods::controller_of(&pod.metadata) else {
                return Err(format!(
                    "found no controller ref for pod {:?}",
                    pod.metadata.name.as_deref().unwrap_or_default()
                ));
            };
            if !seen.insert(owner.uid.clone()) {
                continue;
            }
            let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
            fn key<K: kube::Resource<DynamicType = ()>>(
                name: &str,
                namespace: &str,
            ) -> ObjectRef<K> {
                ObjectRef::new(name).within(namespace)
            }
            let scale = match owner.kind.as_str() {
                "ReplicaSet" => self
                    .replica_sets
                    .get(&key(&owner.name, namespace))
                    .and_then(|rs| {
                        // A Deployment's ReplicaSet counts as its Deployment.
                        match pods::controller_of(&rs.metadata).filter(|r| r.kind == "Deployment") {
                            Some(d) => {
                                if !seen.insert(d.uid.clone()) {
                                    return Some(0);
                                }
                                self.deployments
                                    .get(&key(&d.name, namespace))
                                    .map(|d| d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1))
                            }
                            None => Some(rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)),
                        }
                    }),
                "ReplicationController" => self
                    .controllers
                    .get(&key(&owner.name, namespace))
                    .map(|rc| rc.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)),
                "StatefulSet" => self
                    .stateful_sets
                    .get(&key(&owner.name, namespace))
                    .map(|s| s.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)),
                _ => None,
            };
            match scale {
                Some(n) => total += n,
                None => {
                    return Err(format!(
                        "found no controllers for pod {:?}",
                        pod.metadata.name.as_deref().unwrap_or_default()
                    ));
                }
            }
        }
        Ok(total)
    }
}

/// One sync of a budget.
pub(crate) async fn reconcile(
    budget: Arc<PodDisruptionBudget>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let namespace = budget.metadata.namespace.clone().unwrap_or_default();
    let name = budget.metadata.name.clone().unwrap_or_default();
    let selected: Vec<Arc<Pod>> = match selector(&budget) {
        Some(selector) => ctx.pods.state_filter(|p| {
            p.metadata.namespace.as_deref() == Some(namespace.as_str())
                && p.metadata.deletion_timestamp.is_none()
                && selector.matches(pods::labels_of(&p.metadata))
        }),
        None => Vec::new(),
    };
    let spec = budget.spec.clone().unwrap_or_default();
    let needs_scale = spec.max_unavailable.is_some()
        || matches!(spec.min_available, Some(IntOrString::String(_)));
    let facts = Facts {
        pods: selected
            .iter()
            .map(|p| {
                (
                    p.metadata.name.clone().unwrap_or_default(),
                    pods::is_ready(p),
                )
            })
            .collect(),
        expected_scale: needs_scale.then(|| ctx.expected_scale(&selected)),
    };
    let now = pods::now();
    let new = status(&budget, &facts, now);
    let old = budget.status.clone().unwrap_or_default();
    // Transition times aside, only a changed status is written.
    let same = |s: &PodDisruptionBudgetStatus| PodDisruptionBudgetStatus {
        conditions: None,
        ..s.clone()
    };
    let conditions_same = old
        .conditions
        .as_ref()
        .map(|c| c.iter().map(|c| (&c.status, &c.reason)).collect::<Vec<_>>())
        == new
            .conditions
            .as_ref()
            .map(|c| c.iter().map(|c| (&c.status, &c.reason)).collect::<Vec<_>>());
    if same(&old) != same(&new) || !conditions_same {
        let mut object = (*budget).clone();
        object.status = Some(new);
        let api: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), &namespace);
        if runtime::replace_status_unless_gone(&api, &name, &object)
            .await?
            .is_none()
        {
            return Ok(Action::await_change());
        }
    }
    // Records of disrupted pods expire; look again then.
    Ok(
        match budget
            .status
            .as_ref()
            .and_then(|s| s.disrupted_pods.as_ref())
        {
            Some(d) if !d.is_empty() => {
                Action::requeue(Duration::from_secs(DISRUPTED_TIMEOUT as u64))
            }
            _ => Action::await_change(),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn budget(spec: serde_json::Value) -> PodDisruptionBudget {
        serde_json::from_value(
            json!({"metadata": {"name": "b", "namespace": "ns", "generation": 2},
                                      "spec": spec}),
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn facts(healthy: usize, unhealthy: usize, scale: Option<Result<i32, String>>) -> Facts {
        let mut pods: Vec<(String, bool)> = (0..healthy).map(|i| (format!("h{i}"), true)).collect();
        pods.extend((0..unhealthy).map(|i| (format!("u{i}"), false)));
        Facts {
            pods,
            expected_scale: scale,
        }
    }

    #[test]
    fn counts_follow_upstream() {
        let now = Timestamp::UNIX_EPOCH;
        let check = |spec: serde_json::Value, f: Facts, want: (i32, i32, i32, i32)| {
            let s = status(&budget(spec), &f, now);
            assert_eq!(
                (
                    s.expected_pods,
                    s.desired_healthy,
                    s.current_healthy,
                    s.disruptions_allowed
                ),
                want
            );
            assert_eq!(s.observed_generation, Some(2));
        };
        check(json!({"minAvailable": 2}), facts(3, 0, None), (3, 2, 3, 1));
        check(json!({"minAvailable": 3}), facts(2, 1, None), (3, 3, 2, 0));
        check(
            json!({"minAvailable": "50%"}),
            facts(3, 0, Some(Ok(5))),
            (5, 3, 3, 0),
        );
        check(
            json!({"maxUnavailable": 1}),
            facts(4, 0, Some(Ok(4))),
            (4, 3, 4, 1),
        );
        check(
            json!({"maxUnavailable": "30%"}),
            facts(10, 0, Some(Ok(10))),
            (10, 7, 10, 3),
        );
        check(
            json!({"maxUnavailable": "25%"}),
            facts(10, 0, Some(Ok(10))),
            (10, 7, 10, 3),
        );
    }

    #[test]
    fn conditions_and_failures() {
        let now = Timestamp::UNIX_EPOCH;
        let s = status(&budget(json!({"minAvailable": 1})), &facts(2, 0, None), now);
        let c = &s.conditions.unwrap_or_default()[0];
        assert_eq!(
            (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
            ("DisruptionAllowed", "True", "SufficientPods")
        );
        let s = status(
            &budget(json!({"maxUnavailable": 1})),
            &facts(2, 0, Some(Err("found no controllers for pod \"x\"".into()))),
            now,
        );
        let c = &s.conditions.unwrap_or_default()[0];
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "SyncFailed")
        );
        assert_eq!(s.disruptions_allowed, 0);
    }

    #[test]
    fn disrupted_pods_count_out_until_they_expire() {
        let mut b = budget(json!({"minAvailable": 1}));
        b.status = Some(PodDisruptionBudgetStatus {
            disrupted_pods: Some([("h0".to_owned(), Time(Timestamp::UNIX_EPOCH))].into()),
            ..Default::default()
        });
        let early = Timestamp::from_second(60).unwrap_or_default();
        let s = status(&b, &facts(2, 0, None), early);
        assert_eq!((s.current_healthy, s.disruptions_allowed), (1, 0));
        let late = Timestamp::from_second(121).unwrap_or_default();
        let s = status(&b, &facts(2, 0, None), late);
        assert_eq!((s.current_healthy, s.disrupted_pods), (2, None));
    }
}

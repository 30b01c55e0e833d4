//! The resource quota controller (upstream's `pkg/controller/resourcequota`): keeps each
//! ResourceQuota's status current, `hard` as the spec says and `used` measured from the objects
//! of its namespace for every hard resource name an evaluator measures
//! ([`capstan_api::quota`]). The API server's ResourceQuota admission adds each new object's
//! usage to `used` as it admits it; this controller measures it again from the objects, so
//! deleted objects free their share.
//!
//! A quota is measured again when it is created or its spec changes, when a pod, service or
//! claim of its namespace is deleted or changes its usage, when the objects counted by one of
//! its `count/<resource>.<group>` names go (a metadata-only watch per such resource, started
//! the first time a quota names it, as upstream's quota monitor), when the grace period of a
//! deleted pod it counts runs out, and every five minutes (upstream's
//! `--resource-quota-sync-period`). Status is written only when it changes.
//!
//! As upstream's, it does not measure again when an object is added or when admission writes a
//! usage: admission charged the object before it was stored, and a measurement from a cache
//! that has not seen the newest objects yet would hand their share out a second time.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use capstan_api::quota::{self, Evaluator, Item, ResourceList};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, ResourceQuota, Service};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::Api;
use kube::core::{ApiResource, DynamicObject, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::{self, Event};

use crate::pods;
use crate::runtime::{self, AbortOnDrop, Change, Error, Queue, Setup, Task};

/// How often every quota is measured again (upstream's default sync period).
pub const RESYNC: Duration = Duration::from_secs(5 * 60);

/// The controller's shared state.
pub(crate) struct Context {
    client: Client,
    pods: Store<Pod>,
    services: Store<Service>,
    claims: Store<PersistentVolumeClaim>,
    counts: Arc<Counts>,
}

/// The names a quota limits: its spec's and those its status still shows.
fn quota_names(quota: &ResourceQuota) -> Vec<String> {
    let spec = quota.spec.as_ref().and_then(|s| s.hard.as_ref());
    let status = quota.status.as_ref().and_then(|s| s.hard.as_ref());
    let mut names: Vec<String> = spec
        .into_iter()
        .chain(status)
        .flat_map(|hard| hard.keys().cloned())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The quotas of `namespace` that limit something `evaluator` measures.
fn tracking(
    quotas: &[Arc<ResourceQuota>],
    namespace: &str,
    evaluator: &Evaluator,
) -> Vec<ObjectRef<ResourceQuota>> {
    quotas
        .iter()
        .filter(|q| q.metadata.namespace.as_deref() == Some(namespace))
        .filter(|q| !evaluator.matching_resources(&quota_names(q)).is_empty())
        .map(|q| ObjectRef::from_obj(&**q))
        .collect()
}

/// Whether a change of a pod, service or claim can change what quotas measure: deletions
/// (handled by the caller) and updates that change its usage (or, for pods, a scope). An
/// addition does not: admission charged it already.
fn concerns_quota(
    evaluator: &Evaluator,
    old: Option<Item<'_>>,
    new: Item<'_>,
    now: Timestamp,
) -> bool {
    let Some(old) = old else {
        return false;
    };
    if evaluator.usage(old, now) != evaluator.usage(new, now) {
        return true;
    }
    match (old, new) {
        (Item::Pod(old), Item::Pod(new)) => {
            let deadline = |p: &Pod| p.spec.as_ref().and_then(|s| s.active_deadline_seconds);
            deadline(old) != deadline(new)
        }
        _ => false,
    }
}

/// Enqueues the quotas a change of one of `evaluator`'s objects concerns.
fn on_object_change<K>(
    quotas: &Store<ResourceQuota>,
    queue: &Queue<ResourceQuota>,
    evaluator: &Evaluator,
    change: &Change<'_, K>,
    item: fn(&K) -> Item<'_>,
) where
    K: kube::Resource,
{
    let namespace = change.object().meta().namespace.clone().unwrap_or_default();
    let all = quotas.state();
    let keys = tracking(&all, &namespace, evaluator);
    if keys.is_empty() {
        return;
    }
    let relevant = match change {
        Change::Deleted(_) => true,
        Change::Applied { old, new } => {
            concerns_quota(evaluator, old.as_deref().map(item), item(new), pods::now())
        }
    };
    if relevant {
        keys.into_iter().for_each(|key| queue.add(key));
    }
}

/// Whether a quota's `status.hard` does not say what its spec does (upstream enqueues such a
/// quota on its own).
fn status_hard_stale(quota: &ResourceQuota) -> bool {
    let spec = quota.spec.as_ref().and_then(|s| s.hard.as_ref());
    let status = quota.status.as_ref().and_then(|s| s.hard.as_ref());
    spec != status
}

/// Registers the informer handlers and returns the controller's run future.
pub fn start(mut setup: Setup<'_>) -> Task {
    let quotas = setup.watch::<ResourceQuota>();
    let pod_informer = setup.watch::<Pod>();
    let services = setup.watch::<Service>();
    let claims = setup.watch::<PersistentVolumeClaim>();
    let (queue, rx) = Queue::<ResourceQuota>::new();
    {
        let queue = queue.clone();
        // A new quota, or a new spec; not the usage admission writes into the status.
        quotas.on_change(move |change| {
            if let Change::Applied { old, new } = change
                && old
                    .as_ref()
                    .is_none_or(|old| old.spec != new.spec || status_hard_stale(new))
            {
                queue.add(ObjectRef::from_obj(*new));
            }
        });
    }
    {
        let (store, queue) = (quotas.store(), queue.clone());
        pod_informer.on_change(move |change| {
            on_object_change(&store, &queue, &Evaluator::Pods, change, |p| Item::Pod(p));
        });
    }
    {
        let (store, queue) = (quotas.store(), queue.clone());
        services.on_change(move |change| {
            on_object_change(&store, &queue, &Evaluator::Services, change, |s| {
                Item::Service(s)
            });
        });
    }
    {
        let (store, queue) = (quotas.store(), queue.clone());
        claims.on_change(move |change| {
            on_object_change(&store, &queue, &Evaluator::Claims, change, |c| {
                Item::Claim(c)
            });
        });
    }
    let client = setup.client();
    let ctx = Arc::new(Context {
        counts: Arc::new(Counts::new(client.clone(), quotas.store(), queue)),
        client,
        pods: pod_informer.store(),
        services: services.store(),
        claims: claims.store(),
    });
    setup.run("resourcequota", &quotas, rx, ctx, reconcile)
}

/// What a quota's namespace holds, as measured.
struct Observed<'a> {
    pods: &'a [Arc<Pod>],
    services: &'a [Arc<Service>],
    claims: &'a [Arc<PersistentVolumeClaim>],
    /// The number of objects of a counted resource, `None` while it is not known yet.
    count: &'a dyn Fn(&Evaluator) -> Option<usize>,
}

/// The usage of every hard name an evaluator can measure now (upstream's `CalculateUsage`),
/// and when to measure again because a deleted pod's grace period runs out.
fn measure(
    quota: &ResourceQuota,
    observed: &Observed<'_>,
    now: Timestamp,
) -> (ResourceList, Option<Duration>) {
    let namespace = quota.metadata.namespace.as_deref();
    let spec_names: Vec<String> = quota
        .spec
        .as_ref()
        .and_then(|s| s.hard.as_ref())
        .map(|h| h.keys().cloned().collect())
        .unwrap_or_default();
    let mut measured = ResourceList::new();
    let mut wake: Option<Duration> = None;
    for (evaluator, names) in quota::evaluators_for(&spec_names) {
        let used = match &evaluator {
            Evaluator::Pods => {
                let pods: Vec<&Pod> = observed
                    .pods
                    .iter()
                    .map(|p| &**p)
                    .filter(|p| p.metadata.namespace.as_deref() == namespace)
                    .collect();
                for pod in &pods {
                    if let Some(left) = grace_left(pod, now) {
                        wake = Some(wake.map_or(left, |w| w.min(left)));
                    }
                }
                quota::usage_of(
                    &evaluator,
                    quota,
                    &names,
                    pods.into_iter().map(Item::Pod),
                    now,
                )
            }
            Evaluator::Services => {
                let items = observed
                    .services
                    .iter()
                    .filter(|s| s.metadata.namespace.as_deref() == namespace)
                    .map(|s| Item::Service(s));
                quota::usage_of(&evaluator, quota, &names, items, now)
            }
            Evaluator::Claims => {
                let items = observed
                    .claims
                    .iter()
                    .filter(|c| c.metadata.namespace.as_deref() == namespace)
                    .map(|c| Item::Claim(c));
                quota::usage_of(&evaluator, quota, &names, items, now)
            }
            Evaluator::Objects { .. } => {
                // Not known yet (or not a resource this server has): left as recorded.
                let Some(count) = (observed.count)(&evaluator) else {
                    continue;
                };
                let items = std::iter::repeat_n(Item::Object, count);
                quota::usage_of(&evaluator, quota, &names, items, now)
            }
        };
        measured = quota::add(&measured, &used);
    }
    (measured, wake)
}

/// How long until a deleted pod that still counts stops counting (its grace period is over).
fn grace_left(pod: &Pod, now: Timestamp) -> Option<Duration> {
    let deleted = pod.metadata.deletion_timestamp.as_ref()?;
    let grace = pod.metadata.deletion_grace_period_seconds?;
    if !quota::pod_counts(pod, now) {
        return None;
    }
    let deadline = deleted.0.as_nanosecond() + i128::from(grace) * 1_000_000_000;
    let left = u64::try_from(deadline - now.as_nanosecond()).ok()?;
    // Just past the deadline, when the pod no longer counts.
    Some(Duration::from_nanos(left) + Duration::from_millis(100))
}

/// Measures one quota and writes its status if it changed.
pub(crate) async fn reconcile(
    quota: Arc<ResourceQuota>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let namespace = quota.metadata.namespace.clone().unwrap_or_default();
    let name = quota.metadata.name.clone().unwrap_or_default();
    if quota.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let (measured, wake) = {
        let (pods, services, claims) = (ctx.pods.state(), ctx.services.state(), ctx.claims.state());
        let count = |evaluator: &Evaluator| ctx.counts.count(evaluator, &namespace);
        let observed = Observed {
            pods: &pods,
            services: &services,
            claims: &claims,
            count: &count,
        };
        measure(&quota, &observed, pods::now())
    };
    if let Some(status) = quota::next_status(&quota, &measured) {
        let mut object = (*quota).clone();
        object.status = Some(status);
        let api: Api<ResourceQuota> = Api::namespaced(ctx.client.clone(), &namespace);
        if runtime::replace_status_unless_gone(&api, &name, &object)
            .await?
            .is_none()
        {
            return Ok(Action::await_change());
        }
    }
    Ok(Action::requeue(wake.map_or(RESYNC, |w| w.min(RESYNC))))
}

/// The object counts of resources quotas count by `count/...` names: one metadata-only watch
/// per resource, started when a quota first needs it (upstream's quota monitor).
struct Counts {
    client: Client,
    quotas: Store<ResourceQuota>,
    queue: Queue<ResourceQuota>,
    kinds: Mutex<HashMap<Evaluator, Arc<Counted>>>,
}

/// The objects of one resource by namespace, complete once `synced`.
#[derive(Default)]
struct Counted {
    names: Mutex<HashMap<String, HashSet<String>>>,
    synced: std::sync::atomic::AtomicBool,
    watch: Mutex<Option<AbortOnDrop>>,
}

impl Counted {
    fn names(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashSet<String>>> {
        self.names.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What an object-count evaluator counts.
enum Countable {
    /// A built-in namespaced resource this server lists and watches, in its preferred
    /// version.
    Builtin(ApiResource),
    /// Not a built-in resource: a custom one, found by discovery.
    Custom,
    /// A built-in resource that cannot be counted per namespace.
    Uncountable,
}

/// The API resource behind an object-count evaluator, as far as the catalogue knows it.
fn api_resource(evaluator: &Evaluator) -> Countable {
    let (group, plural) = evaluator.group_resource();
    let Some(resource) = capstan_api::catalog::versions(group)
        .into_iter()
        .find_map(|version| capstan_api::catalog::lookup(group, version, plural))
    else {
        return Countable::Custom;
    };
    if !resource.namespaced || !resource.supports("list") || !resource.supports("watch") {
        return Countable::Uncountable;
    }
    Countable::Builtin(ApiResource {
        group: resource.group.into(),
        version: resource.version.into(),
        api_version: resource.api_version(),
        kind: resource.kind.into(),
        plural: resource.plural.into(),
    })
}

/// How often a custom resource not served (yet) is looked for again.
const REDISCOVERY: Duration = Duration::from_secs(2);

/// A custom resource counted by `count/<plural>.<group>`, in its group's preferred version,
/// once discovery finds it served, namespaced, listable and watchable.
async fn discover(client: &Client, evaluator: &Evaluator) -> ApiResource {
    let (group, plural) = evaluator.group_resource();
    loop {
        if let Ok(discovered) = kube::discovery::group(client, group).await
            && let Some((resource, _)) =
                discovered
                    .recommended_resources()
                    .into_iter()
                    .find(|(resource, caps)| {
                        resource.plural == plural
                            && caps.scope == kube::discovery::Scope::Namespaced
                            && caps.supports_operation(kube::discovery::verbs::LIST)
                            && caps.supports_operation(kube::discovery::verbs::WATCH)
                    })
        {
            return resource;
        }
        tokio::time::sleep(REDISCOVERY).await;
    }
}

impl Counts {
    fn new(client: Client, quotas: Store<ResourceQuota>, queue: Queue<ResourceQuota>) -> Self {
        Counts {
            client,
            quotas,
            queue,
            kinds: Mutex::new(HashMap::new()),
        }
    }

    /// The number of `evaluator`'s objects in `namespace`; `None` until its watch has listed
    /// them (the first call starts it: a custom resource once discovery finds it served) or
    /// when the resource cannot be counted per namespace.
    fn count(self: &Arc<Self>, evaluator: &Evaluator, namespace: &str) -> Option<usize> {
        if let Evaluator::Objects { group, resource } = evaluator
            && group.is_empty()
            && resource == "resourcequotas"
        {
            // The quotas themselves are counted from the store this controller measures them
            // from, as upstream counts them from the informer that woke it: that store holds
            // the quota being measured, where a second watch may not have seen it yet (and
            // an added object does not wake a measurement).
            return Some(
                self.quotas
                    .state()
                    .iter()
                    .filter(|q| q.metadata.namespace.as_deref() == Some(namespace))
                    .count(),
            );
        }
        let counted = {
            let mut kinds = self.kinds.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(counted) = kinds.get(evaluator) {
                counted.clone()
            } else {
                let builtin = match api_resource(evaluator) {
                    Countable::Uncountable => return None,
                    Countable::Builtin(resource) => Some(resource),
                    Countable::Custom => None,
                };
                let counted = Arc::new(Counted::default());
                kinds.insert(evaluator.clone(), counted.clone());
                let (counts, evaluator, kept) = (self.clone(), evaluator.clone(), counted.clone());
                let task = tokio::spawn(async move {
                    let resource = match builtin {
                        Some(resource) => resource,
                        None => discover(&counts.client, &evaluator).await,
                    };
                    counts.watch(evaluator, resource, kept).await;
                });
                *counted.watch.lock().unwrap_or_else(|e| e.into_inner()) = Some(AbortOnDrop(task));
                counted
            }
        };
        if !counted.synced.load(std::sync::atomic::Ordering::Acquire) {
            return None;
        }
        Some(counted.names().get(namespace).map_or(0, HashSet::len))
    }

    fn enqueue(&self, evaluator: &Evaluator, namespace: Option<&str>) {
        for quota in self.quotas.state() {
            let in_scope =
                namespace.is_none_or(|ns| quota.metadata.namespace.as_deref() == Some(ns));
            if in_scope
                && !evaluator
                    .matching_resources(&quota_names(&quota))
                    .is_empty()
            {
                self.queue.add(ObjectRef::from_obj(&*quota));
            }
        }
    }

    /// Follows one resource's objects into `counted` until dropped.
    async fn watch(
        self: Arc<Self>,
        evaluator: Evaluator,
        resource: ApiResource,
        counted: Arc<Counted>,
    ) {
        let api: Api<PartialObjectMeta<DynamicObject>> =
            Api::all_with(self.client.clone(), &resource);
        let stream = watcher::watcher(api, capstan_client::watcher_config()).default_backoff();
        futures::pin_mut!(stream);
        let mut listed: HashMap<String, HashSet<String>> = HashMap::new();
        while let Some(event) = stream.next().await {
            let event = match event {
                Ok(event) => event,
                Err(error) => {
                    tracing::debug!(resource = %resource.plural, %error, "quota count watch failed; retrying");
                    continue;
                }
            };
            let key = |meta: &kube::api::ObjectMeta| {
                (
                    meta.namespace.clone().unwrap_or_default(),
                    meta.name.clone().unwrap_or_default(),
                )
            };
            match event {
                // Admission charged an added object already: only record it.
                Event::Apply(object) => {
                    let (namespace, name) = key(&object.metadata);
                    counted.names().entry(namespace).or_default().insert(name);
                }
                Event::Delete(object) => {
                    let (namespace, name) = key(&object.metadata);
                    let removed = counted
                        .names()
                        .get_mut(&namespace)
                        .is_some_and(|n| n.remove(&name));
                    if removed {
                        self.enqueue(&evaluator, Some(&namespace));
                    }
                }
                Event::Init => listed.clear(),
                Event::InitApply(object) => {
                    let (namespace, name) = key(&object.metadata);
                    listed.entry(namespace).or_default().insert(name);
                }
                Event::InitDone => {
                    *counted.names() = std::mem::take(&mut listed);
                    counted
                        .synced
                        .store(true, std::sync::atomic::Ordering::Release);
                    self.enqueue(&evaluator, None);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::{Value, json};

    fn now() -> Timestamp {
        "2025-01-01T00:00:00Z".parse().unwrap()
    }

    fn quota(ns: &str, name: &str, spec: Value, status: Value) -> Arc<ResourceQuota> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns}, "spec": spec, "status": status}))
                .unwrap(),
        )
    }

    fn pod(ns: &str, name: &str, cpu: &str, extra: Value) -> Arc<Pod> {
        let mut pod = json!({"metadata": {"name": name, "namespace": ns},
            "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}]}});
        if let (Some(pod), Some(extra)) = (pod.as_object_mut(), extra.as_object()) {
            for (k, v) in extra {
                if k == "metadata" {
                    for (mk, mv) in v.as_object().unwrap() {
                        pod["metadata"][mk] = mv.clone();
                    }
                } else {
                    pod.insert(k.clone(), v.clone());
                }
            }
        }
        Arc::new(serde_json::from_value(pod).unwrap())
    }

    fn names(refs: Vec<ObjectRef<ResourceQuota>>) -> Vec<String> {
        refs.into_iter().map(|r| r.name).collect()
    }

    #[test]
    fn changes_wake_the_quotas_of_their_namespace_that_track_them() {
        let quotas = vec![
            quota(
                "a",
                "compute",
                json!({"hard": {"requests.cpu": "1"}}),
                json!({}),
            ),
            quota(
                "a",
                "objects",
                json!({"hard": {"count/configmaps": "1"}}),
                json!({}),
            ),
            quota(
                "a",
                "services",
                json!({"hard": {"services.nodeports": "1"}}),
                json!({}),
            ),
            quota("b", "compute", json!({"hard": {"pods": "1"}}), json!({})),
        ];
        assert_eq!(
            names(tracking(&quotas, "a", &Evaluator::Pods)),
            vec!["compute"]
        );
        assert_eq!(
            names(tracking(&quotas, "a", &Evaluator::Services)),
            vec!["services"]
        );
        assert_eq!(
            names(tracking(&quotas, "b", &Evaluator::Claims)),
            Vec::<String>::new()
        );
        let configmaps = Evaluator::for_resource("", "configmaps").unwrap();
        assert_eq!(names(tracking(&quotas, "a", &configmaps)), vec!["objects"]);
    }

    #[test]
    fn only_changes_of_usage_concern_quotas() {
        let running = pod("a", "p", "1", json!({"status": {"phase": "Running"}}));
        let relabelled = pod(
            "a",
            "p",
            "1",
            json!({"metadata": {"labels": {"x": "y"}}, "status": {"phase": "Running"}}),
        );
        let failed = pod("a", "p", "1", json!({"status": {"phase": "Failed"}}));
        let deadline = pod(
            "a",
            "p",
            "1",
            json!({"spec": {"activeDeadlineSeconds": 5, "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}}),
        );
        let e = Evaluator::Pods;
        assert!(
            !concerns_quota(&e, None, Item::Pod(&running), now()),
            "admission charged an addition already"
        );
        assert!(!concerns_quota(
            &e,
            Some(Item::Pod(&running)),
            Item::Pod(&relabelled),
            now()
        ));
        assert!(concerns_quota(
            &e,
            Some(Item::Pod(&running)),
            Item::Pod(&failed),
            now()
        ));
        assert!(concerns_quota(
            &e,
            Some(Item::Pod(&running)),
            Item::Pod(&deadline),
            now()
        ));
    }

    #[test]
    fn measuring_counts_the_namespace_only_and_waits_for_unknown_counts() {
        let q = quota(
            "a",
            "q",
            json!({"hard": {"pods": "5", "requests.cpu": "4", "count/configmaps": "3", "services": "2", "count/widgets.example.com": "1"}}),
            json!({"hard": {"pods": "5"}, "used": {"count/widgets.example.com": "1"}}),
        );
        let pods = vec![
            pod("a", "p1", "500m", json!({})),
            pod("a", "p2", "250m", json!({"status": {"phase": "Succeeded"}})),
            pod("b", "other", "2", json!({})),
        ];
        let services: Vec<Arc<Service>> = vec![Arc::new(
            serde_json::from_value(
                json!({"metadata": {"name": "s", "namespace": "a"}, "spec": {}}),
            )
            .unwrap(),
        )];
        let count = |e: &Evaluator| match e.group_resource() {
            ("", "configmaps") => Some(2),
            _ => None,
        };
        let observed = Observed {
            pods: &pods,
            services: &services,
            claims: &[],
            count: &count,
        };
        let (measured, wake) = measure(&q, &observed, now());
        let printed: Vec<(String, String)> = measured
            .iter()
            .map(|(n, v)| (n.clone(), v.canonical()))
            .collect();
        assert_eq!(
            printed,
            vec![
                ("count/configmaps".to_owned(), "2".to_owned()),
                ("pods".to_owned(), "1".to_owned()),
                ("requests.cpu".to_owned(), "500m".to_owned()),
                ("services".to_owned(), "1".to_owned()),
            ]
        );
        assert_eq!(wake, None);
        // The unknown count keeps what the status says; the rest is measured.
        let status = quota::next_status(&q, &measured).unwrap();
        assert_eq!(
            serde_json::to_value(&status.used).unwrap(),
            json!({"count/configmaps": "2", "count/widgets.example.com": "1", "pods": "1", "requests.cpu": "500m", "services": "1"})
        );
    }

    #[test]
    fn a_deleted_pod_is_measured_again_when_its_grace_runs_out() {
        let q = quota("a", "q", json!({"hard": {"pods": "5"}}), json!({}));
        let deleting = pod(
            "a",
            "p",
            "1",
            json!({"metadata": {"deletionTimestamp": "2024-12-31T23:59:50Z", "deletionGracePeriodSeconds": 30}}),
        );
        let pods = vec![deleting];
        let none = |_: &Evaluator| None;
        let observed = Observed {
            pods: &pods,
            services: &[],
            claims: &[],
            count: &none,
        };
        let (measured, wake) = measure(&q, &observed, now());
        assert_eq!(
            measured.get("pods").map(|q| q.canonical()),
            Some("1".to_owned())
        );
        assert_eq!(wake, Some(Duration::from_millis(20_100)));
    }

    #[test]
    fn counted_resources_are_namespaced_served_resources() {
        let Countable::Builtin(resource) =
            api_resource(&Evaluator::for_resource("apps", "deployments").unwrap())
        else {
            panic!("deployments are counted");
        };
        assert_eq!(
            (resource.api_version.as_str(), resource.kind.as_str()),
            ("apps/v1", "Deployment")
        );
        assert!(matches!(
            api_resource(&Evaluator::for_resource("", "nodes").unwrap()),
            Countable::Uncountable
        ));
        // Custom resources are found by discovery.
        assert!(matches!(
            api_resource(&Evaluator::for_resource("example.com", "widgets").unwrap()),
            Countable::Custom
        ));
    }
}

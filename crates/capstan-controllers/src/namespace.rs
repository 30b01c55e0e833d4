//! The namespace controller (upstream's `pkg/controller/namespace`): once a namespace is being
//! deleted, it deletes every namespaced object in it, of every kind the API serves at that
//! moment (custom resources included, found by discovery), reports progress in the
//! namespace's deletion conditions, comes back while content remains, and finally removes the
//! `kubernetes` finalizer through `/finalize` so that the API server can delete the namespace.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, NamespaceCondition, NamespaceStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::core::DynamicObject;
use kube::discovery::{Discovery, Scope, verbs};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;

use crate::runtime::{self, Error, Queue, Setup, Task};

/// The finalizer this controller owns.
const FINALIZER: &str = "kubernetes";

/// The condition types this controller keeps, in upstream's order, with the reason and
/// message each carries when all is well.
const CONDITIONS: [(&str, &str, &str); 5] = [
    (
        "NamespaceDeletionDiscoveryFailure",
        "ResourcesDiscovered",
        "All resources successfully discovered",
    ),
    (
        "NamespaceDeletionGroupVersionParsingFailure",
        "ParsedGroupVersions",
        "All legacy kube types successfully parsed",
    ),
    (
        "NamespaceDeletionContentFailure",
        "ContentDeleted",
        "All content successfully deleted, may be waiting on finalization",
    ),
    (
        "NamespaceContentRemaining",
        "ContentRemoved",
        "All content successfully removed",
    ),
    (
        "NamespaceFinalizersRemaining",
        "ContentRemoved",
        "All content successfully removed",
    ),
];

/// The controller's shared state.
pub(crate) struct Context {
    client: Client,
}

/// Whether a namespace is active: neither being deleted nor `Terminating` (what the
/// controllers that fill a namespace with its defaults wait for).
pub fn is_active(namespace: &Namespace) -> bool {
    namespace.metadata.deletion_timestamp.is_none()
        && namespace.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Terminating")
}

/// Registers the informer handlers and returns the controller's run future.
pub fn start(mut setup: Setup<'_>) -> Task {
    let namespaces = setup.watch::<Namespace>();
    let (queue, rx) = Queue::<Namespace>::new();
    namespaces.on_change(move |change| {
        if change.object().metadata.deletion_timestamp.is_some() {
            queue.add(ObjectRef::from_obj(change.object()));
        }
    });
    let ctx = Arc::new(Context {
        client: setup.client(),
    });
    setup.run("namespace", &namespaces, rx, ctx, reconcile)
}

/// What deleting the content found.
#[derive(Debug, Default, PartialEq)]
struct Remaining {
    /// Objects left per `resource.group`.
    by_resource: BTreeMap<String, usize>,
    /// Objects left per finalizer they carry.
    by_finalizer: BTreeMap<String, usize>,
    /// Failures to delete, one message per resource.
    failures: Vec<String>,
    /// Discovery failed.
    discovery: Option<String>,
}

/// A deletion condition: type, whether it is True (something is wrong or left), reason and
/// message.
type Wanted = (&'static str, bool, &'static str, String);

/// The deletion conditions for what remains (upstream's `namespaceConditionUpdater`).
fn conditions(remaining: &Remaining) -> Vec<Wanted> {
    let mut bad: BTreeMap<&str, (&str, String)> = BTreeMap::new();
    if let Some(message) = &remaining.discovery {
        bad.insert(CONDITIONS[0].0, ("DiscoveryFailed", message.clone()));
    }
    if !remaining.failures.is_empty() {
        let mut failures = remaining.failures.clone();
        failures.sort();
        bad.insert(
            CONDITIONS[2].0,
            (
                "ContentDeletionFailed",
                format!(
                    "Failed to delete all resource types, {} remaining: {}",
                    failures.len(),
                    failures.join(", ")
                ),
            ),
        );
    }
    let resources: Vec<String> = remaining
        .by_resource
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(resource, n)| format!("{resource} has {n} resource instances"))
        .collect();
    if !remaining.by_resource.is_empty() {
        bad.insert(
            CONDITIONS[3].0,
            (
                "SomeResourcesRemain",
                format!("Some resources are remaining: {}", resources.join(", ")),
            ),
        );
    }
    let finalizers: Vec<String> = remaining
        .by_finalizer
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(finalizer, n)| format!("{finalizer} in {n} resource instances"))
        .collect();
    if !remaining.by_finalizer.is_empty() {
        bad.insert(
            CONDITIONS[4].0,
            (
                "SomeFinalizerRemain",
                format!("Some finalizers are remaining: {}", finalizers.join(", ")),
            ),
        );
    }
    CONDITIONS
        .iter()
        .map(|(kind, reason, message)| match bad.remove(kind) {
            Some((reason, message)) => (*kind, true, reason, message),
            None => (*kind, false, *reason, (*message).to_owned()),
        })
        .collect()
}

/// Merges the wanted conditions into `status` as upstream's `updateConditions` does; whether
/// anything changed.
fn update_conditions(status: &mut NamespaceStatus, wanted: &[Wanted], now: Timestamp) -> bool {
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let mut changed = false;
    for (kind, bad, reason, message) in wanted {
        let value = if *bad { "True" } else { "False" };
        match conditions.iter_mut().find(|c| c.type_ == *kind) {
            None => {
                conditions.push(NamespaceCondition {
                    type_: (*kind).to_owned(),
                    status: value.to_owned(),
                    reason: Some((*reason).to_owned()),
                    message: Some(message.clone()),
                    last_transition_time: Some(Time(now)),
                });
                changed = true;
            }
            Some(old) => {
                if old.status != value
                    || old.reason.as_deref() != Some(*reason)
                    || old.message.as_deref() != Some(message)
                {
                    if old.status != value {
                        old.last_transition_time = Some(Time(now));
                    }
                    old.status = value.to_owned();
                    old.reason = Some((*reason).to_owned());
                    old.message = Some(message.clone());
                    changed = true;
                }
            }
        }
    }
    changed
}

/// Deletes everything in `namespace`; what is left afterwards, and the longest grace period
/// among pods still terminating.
async fn delete_content(client: &Client, namespace: &str) -> (Remaining, i64) {
    let mut remaining = Remaining::default();
    let mut longest_grace = 0;
    let discovery = match Discovery::new(client.clone()).run().await {
        Ok(discovery) => discovery,
        Err(error) => {
            remaining.discovery = Some(error.to_string());
            return (remaining, 0);
        }
    };
    for group in discovery.groups() {
        for (resource, caps) in group.recommended_resources() {
            if caps.scope != Scope::Namespaced
                || !caps.supports_operation(verbs::DELETE)
                || !caps.supports_operation(verbs::LIST)
            {
                continue;
            }
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), namespace, &resource);
            let name = format!("{}.{}", resource.plural, resource.group);
            let deleted = if caps.supports_operation(verbs::DELETE_COLLECTION) {
                api.delete_collection(&DeleteParams::background(), &ListParams::default())
                    .await
                    .map(|_| ())
            } else {
                delete_each(&api).await
            };
            if let Err(error) = deleted
                && !runtime::is_not_found(&error)
            {
                remaining.failures.push(format!("{name}: {error}"));
                continue;
            }
            let left = match api.list_metadata(&ListParams::default()).await {
                Ok(list) => list.items,
                Err(error) => {
                    remaining.failures.push(format!("{name}: {error}"));
                    continue;
                }
            };
            if left.is_empty() {
                continue;
            }
            *remaining.by_resource.entry(name).or_default() += left.len();
            for object in &left {
                for finalizer in object.metadata.finalizers.as_deref().unwrap_or_default() {
                    *remaining.by_finalizer.entry(finalizer.clone()).or_default() += 1;
                }
            }
            if resource.plural == "pods" && resource.group.is_empty() {
                longest_grace = longest_grace.max(30);
            }
        }
    }
    (remaining, longest_grace)
}

/// Deletes each object of a kind that has no `deletecollection`.
async fn delete_each(api: &Api<DynamicObject>) -> Result<(), kube::Error> {
    for object in api.list_metadata(&ListParams::default()).await?.items {
        let name = object.metadata.name.unwrap_or_default();
        match api.delete(&name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(error) if runtime::is_not_found(&error) => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

/// One sync of a namespace being deleted (upstream's `namespacedResourcesDeleter.Delete`).
pub(crate) async fn reconcile(cached: Arc<Namespace>, ctx: Arc<Context>) -> Result<Action, Error> {
    let name = cached.metadata.name.clone().unwrap_or_default();
    let api: Api<Namespace> = Api::all(ctx.client.clone());
    // Act on the namespace as it is now, not as the cache remembers it.
    let Some(mut namespace) = api.get_opt(&name).await? else {
        return Ok(Action::await_change());
    };
    let finalizers = namespace
        .spec
        .as_ref()
        .and_then(|s| s.finalizers.clone())
        .unwrap_or_default();
    if namespace.metadata.deletion_timestamp.is_none() || !finalizers.iter().any(|f| f == FINALIZER)
    {
        return Ok(Action::await_change());
    }
    let (remaining, grace) = delete_content(&ctx.client, &name).await;
    let wanted = conditions(&remaining);
    let status = namespace
        .status
        .get_or_insert_with(NamespaceStatus::default);
    if update_conditions(status, &wanted, crate::pods::now()) {
        match runtime::replace_status_unless_gone(&api, &name, &namespace).await? {
            Some(updated) => namespace = updated,
            None => return Ok(Action::await_change()),
        }
    }
    if remaining.discovery.is_some() || !remaining.failures.is_empty() {
        return Err(Error::Invalid(format!(
            "namespace {name} not emptied: {}",
            remaining
                .discovery
                .iter()
                .chain(&remaining.failures)
                .cloned()
                .collect::<Vec<_>>()
                .join("; ")
        )));
    }
    if !remaining.by_resource.is_empty() {
        // Upstream waits half the estimate plus a second.
        return Ok(Action::requeue(Duration::from_secs((grace / 2 + 1) as u64)));
    }
    // Empty: hand the namespace back to the API server without our finalizer.
    let spec = namespace.spec.get_or_insert_with(Default::default);
    spec.finalizers = Some(finalizers.into_iter().filter(|f| f != FINALIZER).collect());
    match api
        .replace_subresource("finalize", &name, &PostParams::default(), &namespace)
        .await
    {
        Ok(_) => Ok(Action::await_change()),
        Err(error) if runtime::is_not_found(&error) => Ok(Action::await_change()),
        Err(error) => Err(error.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_say_what_remains_as_upstream() {
        let remaining = Remaining {
            by_resource: [
                ("pods.".to_owned(), 2),
                ("widgets.example.com".to_owned(), 1),
            ]
            .into(),
            by_finalizer: [("example.com/hold".to_owned(), 1)].into(),
            ..Remaining::default()
        };
        let wanted = conditions(&remaining);
        let get = |kind: &str| {
            wanted
                .iter()
                .find(|c| c.0 == kind)
                .cloned()
                .unwrap_or_else(|| panic!("{kind}"))
        };
        assert_eq!(
            get("NamespaceContentRemaining"),
            ("NamespaceContentRemaining", true, "SomeResourcesRemain",
             "Some resources are remaining: pods. has 2 resource instances, widgets.example.com has 1 resource instances".to_owned())
        );
        assert_eq!(
            get("NamespaceFinalizersRemaining").3,
            "Some finalizers are remaining: example.com/hold in 1 resource instances"
        );
        assert_eq!(
            get("NamespaceDeletionDiscoveryFailure").2,
            "ResourcesDiscovered"
        );

        let now = Timestamp::UNIX_EPOCH;
        let mut status = NamespaceStatus::default();
        assert!(update_conditions(&mut status, &wanted, now));
        assert!(
            !update_conditions(&mut status, &wanted, now),
            "no change the second time"
        );
        let written = status.conditions.clone().unwrap_or_default();
        assert_eq!(written.len(), 5);
        let content = written
            .iter()
            .find(|c| c.type_ == "NamespaceContentRemaining")
            .map(|c| c.status.as_str());
        assert_eq!(content, Some("True"));

        // Once empty, every condition is False with upstream's success messages.
        let empty = Remaining::default();
        assert!(update_conditions(&mut status, &conditions(&empty), now));
        let written = status.conditions.unwrap_or_default();
        assert!(written.iter().all(|c| c.status == "False"));
        let content = written
            .iter()
            .find(|c| c.type_ == "NamespaceContentRemaining");
        assert_eq!(
            content.and_then(|c| c.message.as_deref()),
            Some("All content successfully removed")
        );
    }

    #[test]
    fn failures_are_listed_sorted() {
        let remaining = Remaining {
            failures: vec![
                "widgets.example.com: boom".into(),
                "configmaps.: nope".into(),
            ],
            ..Remaining::default()
        };
        let wanted = conditions(&remaining);
        let failure = wanted
            .iter()
            .find(|c| c.0 == "NamespaceDeletionContentFailure")
            .map(|c| c.3.clone());
        assert_eq!(
            failure.as_deref(),
            Some(
                "Failed to delete all resource types, 2 remaining: configmaps.: nope, widgets.example.com: boom"
            )
        );
    }
}

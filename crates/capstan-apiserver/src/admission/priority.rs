//! Upstream's Priority admission: a new pod's `priorityClassName` is resolved to its
//! `priority` and `preemptionPolicy` (the scheduler and preemption read those, never the
//! class); a pod without a class gets the cluster's default class (`globalDefault: true`) or
//! priority 0. A class that does not exist, or a priority or policy that disagrees with the
//! class, is refused with upstream's 403. The two system classes are created at start.

use serde_json::{Value, json};

use capstan_api::{GroupResource, StatusError};

use crate::registry::ListOptions;
use crate::registry::Registry;
use crate::status::ApiError;

/// Upstream's built-in classes: name, value, description.
pub(crate) const SYSTEM_CLASSES: &[(&str, i64, &str)] = &[
    (
        "system-node-critical",
        2_000_001_000,
        "Used for system critical pods that must not be moved from their current node.",
    ),
    (
        "system-cluster-critical",
        2_000_000_000,
        "Used for system critical pods that must run in the cluster, but can be moved to \
         another node if necessary.",
    ),
];

/// The built-in classes as objects to create at start.
pub(crate) fn system_classes() -> Vec<Value> {
    SYSTEM_CLASSES
        .iter()
        .map(|(name, value, description)| {
            json!({
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
                "description": description,
                "preemptionPolicy": "PreemptLowerPriority",
            })
        })
        .collect()
}

fn forbidden(pod: &Value, reason: &str) -> ApiError {
    let name = pod
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    StatusError::forbidden(GroupResource::new("", "pods"), name, reason).into()
}

/// The class with `globalDefault: true` (the lowest value if several claim it), if any.
async fn default_class(classes: &Registry) -> Result<Option<Value>, ApiError> {
    // From the watch cache as it stands, as upstream's admission reads its informer: this
    // runs for every pod create, and must not wait for the cache to catch up.
    let options = ListOptions {
        resource_version: Some("0".to_owned()),
        ..ListOptions::default()
    };
    let list = classes.list(None, &options).await?;
    // Every pod create without a class asks this: decode only the classes whose stored
    // bytes can be a default, not every class.
    let marker: &[u8] = b"\"globalDefault\"";
    Ok(list
        .items
        .iter()
        .filter(|item| item.json.windows(marker.len()).any(|w| w == marker))
        .map(|item| item.object())
        .filter(|class| class.get("globalDefault").and_then(Value::as_bool) == Some(true))
        .min_by_key(|class| class.get("value").and_then(Value::as_i64).unwrap_or(0)))
}

/// Resolves the priority of a pod being created, in place.
pub(crate) async fn admit(classes: &Registry, pod: &mut Value) -> Result<(), ApiError> {
    let class_name = pod
        .pointer("/spec/priorityClassName")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let class = if class_name.is_empty() {
        default_class(classes).await?
    } else {
        match classes.read(None, &class_name, Some("0")).await {
            Ok(cached) => Some(cached.object()),
            // The cache may not have a class created a moment ago.
            Err(_) => match classes.read(None, &class_name, None).await {
                Ok(cached) => Some(cached.object()),
                Err(_) => {
                    return Err(forbidden(
                        pod,
                        &format!("no PriorityClass with name {class_name} was found"),
                    ));
                }
            },
        }
    };
    let (priority, policy, name) = match &class {
        Some(class) => (
            class.get("value").and_then(Value::as_i64).unwrap_or(0),
            class
                .get("preemptionPolicy")
                .and_then(Value::as_str)
                .unwrap_or("PreemptLowerPriority")
                .to_owned(),
            class
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .map(str::to_owned),
        ),
        None => (0, "PreemptLowerPriority".to_owned(), None),
    };
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    if let Some(given) = spec.get("priority").and_then(Value::as_i64)
        && given != priority
    {
        return Err(forbidden(
            pod,
            &format!(
                "the integer value of priority ({given}) must not be provided in pod spec; \
                 priority admission controller computed {priority} from the given \
                 PriorityClass name"
            ),
        ));
    }
    if let Some(given) = spec.get("preemptionPolicy").and_then(Value::as_str)
        && given != policy
    {
        let given = given.to_owned();
        return Err(forbidden(
            pod,
            &format!(
                "the string value of PreemptionPolicy ({given}) must not be provided in pod \
                 spec; priority admission controller computed {policy} from the given \
                 PriorityClass name"
            ),
        ));
    }
    spec.insert("priority".to_owned(), json!(priority));
    spec.insert("preemptionPolicy".to_owned(), json!(policy));
    if let Some(name) = name {
        spec.insert("priorityClassName".to_owned(), json!(name));
    }
    Ok(())
}

/// Upstream's Priority plugin, over the PriorityClasses registry: new pods get their priority.
#[derive(Debug)]
pub(crate) struct Priority {
    classes: std::sync::Arc<Registry>,
}

impl Priority {
    /// The plugin reading PriorityClasses from `classes`.
    pub(crate) fn new(classes: std::sync::Arc<Registry>) -> Self {
        Priority { classes }
    }
}

impl super::Plugin for Priority {
    fn name(&self) -> &'static str {
        "Priority"
    }

    fn admit<'a>(&'a self, review: super::Mutation<'a>) -> super::Verdict<'a> {
        Box::pin(async move {
            let super::Review { attrs, object, .. } = review;
            match object {
                Some(pod) if attrs.creates_core("pods") => admit(&self.classes, pod).await,
                _ => Ok(()),
            }
        })
    }
}

//! Upstream's LimitRanger admission plugin: the LimitRanges of a namespace default the
//! resources of a new pod's containers (`default` limits, `defaultRequest` requests; the
//! LimitRange's own defaulting already made a request default to the limit and a limit to the
//! max) and say so in the `kubernetes.io/limit-ranger` annotation, then bound them: `min`,
//! `max` and `maxLimitRequestRatio` per `Container` and per `Pod`, and `min`/`max` storage per
//! `PersistentVolumeClaim` (on create and update). A refusal is upstream's 403 with its
//! message, e.g. `pods "p" is forbidden: maximum cpu usage per Container is 1, but limit is 2`.
//!
//! Several LimitRanges apply one after another, in name order (upstream's order is its
//! informer's); as upstream, each sets the annotation anew, so the last one that defaulted
//! something names what it set.

use std::sync::Arc;

use capstan_api::catalog::Resource;
use capstan_api::quantity::Quantity;
use capstan_api::quota::{ResourceList, aggregate, parse_list};
use capstan_api::{GroupResource, StatusError};
use k8s_openapi::api::core::v1::{LimitRange, PersistentVolumeClaim, Pod};
use serde_json::{Map, Value};

use crate::admission::{
    Mutation, NamespaceLookup, Operation, Plugin, Review, Validation, Verdict, namespace_of,
};
use crate::registry::Registry;
use crate::registry::object::{is_terminating, meta_str};
use crate::status::ApiError;

/// The annotation that lists what the plugin defaulted.
pub(crate) const ANNOTATION: &str = "kubernetes.io/limit-ranger";

/// The LimitRanger plugin over the LimitRanges registry.
#[derive(Debug)]
pub(crate) struct LimitRanger {
    ranges: NamespaceLookup,
}

fn is_core(resource: &Resource, plural: &str) -> bool {
    resource.group.is_empty() && resource.plural == plural
}

impl LimitRanger {
    /// The plugin reading LimitRanges from `registry`.
    pub(crate) fn new(registry: Arc<Registry>) -> Self {
        LimitRanger {
            ranges: NamespaceLookup::new(registry),
        }
    }

    /// The namespace's LimitRanges, in name order.
    async fn ranges(&self, namespace: &str) -> Result<Vec<LimitRange>, ApiError> {
        let mut ranges: Vec<LimitRange> = self
            .ranges
            .list(namespace, false)
            .await?
            .iter()
            .filter_map(|range| serde_json::from_value(range.clone()).ok())
            .collect();
        ranges.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        Ok(ranges)
    }

    /// Defaults the container resources of a new pod (upstream's `PodMutateLimitFunc`).
    async fn apply_defaults(
        &self,
        resource: &Resource,
        object: &mut Value,
    ) -> Result<(), ApiError> {
        let namespace = namespace_of(object).to_owned();
        if !is_core(resource, "pods") || namespace.is_empty() {
            return Ok(());
        }
        for range in self.ranges(&namespace).await? {
            default_pod(object, &range);
        }
        Ok(())
    }

    /// Checks a new pod, or a new or changed claim, against the namespace's LimitRanges
    /// (upstream's `PodValidateLimitFunc` and `PersistentVolumeClaimValidateLimitFunc`).
    async fn check(
        &self,
        resource: &Resource,
        object: &Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let namespace = namespace_of(object);
        let pod = is_core(resource, "pods") && old.is_none();
        let claim = is_core(resource, "persistentvolumeclaims");
        // Objects being deleted are not limited any more.
        if namespace.is_empty() || !(pod || claim) || old.is_some_and(is_terminating) {
            return Ok(());
        }
        let ranges = self.ranges(namespace).await?;
        if ranges.is_empty() {
            return Ok(());
        }
        let forbidden = |reason: String| -> ApiError {
            StatusError::forbidden(
                GroupResource::new(resource.group, resource.plural),
                meta_str(object, "name"),
                &reason,
            )
            .into()
        };
        let internal =
            |e: serde_json::Error| -> ApiError { StatusError::internal(&e.to_string()).into() };
        if pod {
            let pod: Pod = serde_json::from_value(object.clone()).map_err(internal)?;
            for range in &ranges {
                validate_pod(range, &pod).map_err(forbidden)?;
            }
        } else {
            let claim: PersistentVolumeClaim =
                serde_json::from_value(object.clone()).map_err(internal)?;
            for range in &ranges {
                validate_claim(range, &claim).map_err(forbidden)?;
            }
        }
        Ok(())
    }
}

/// The container defaults of a LimitRange: (requests, limits) from its `Container` items'
/// `defaultRequest` and `default`, a later item's value winning.
fn container_defaults(range: &LimitRange) -> (Map<String, Value>, Map<String, Value>) {
    let mut requests = Map::new();
    let mut limits = Map::new();
    for item in range.spec.iter().flat_map(|s| s.limits.iter()) {
        if item.type_ != "Container" {
            continue;
        }
        for (name, q) in item.default_request.iter().flatten() {
            requests.insert(name.clone(), Value::String(q.0.clone()));
        }
        for (name, q) in item.default.iter().flatten() {
            limits.insert(name.clone(), Value::String(q.0.clone()));
        }
    }
    (requests, limits)
}

/// Fills the resources a container lacks from `defaults` into `resources[field]`; the names set,
/// sorted.
fn fill(
    container: &mut Map<String, Value>,
    field: &str,
    defaults: &Map<String, Value>,
) -> Vec<String> {
    let present = container
        .get("resources")
        .and_then(|r| r.get(field))
        .and_then(Value::as_object);
    let missing: Vec<(String, Value)> = defaults
        .iter()
        .filter(|(name, _)| !present.is_some_and(|p| p.contains_key(*name)))
        .map(|(name, q)| (name.clone(), q.clone()))
        .collect();
    if missing.is_empty() {
        return Vec::new();
    }
    let resources = container
        .entry("resources")
        .or_insert_with(|| Value::Object(Map::new()));
    if !resources.is_object() {
        *resources = Value::Object(Map::new());
    }
    let Some(resources) = resources.as_object_mut() else {
        return Vec::new();
    };
    let list = resources
        .entry(field)
        .or_insert_with(|| Value::Object(Map::new()));
    if !list.is_object() {
        *list = Value::Object(Map::new());
    }
    let mut names = Vec::new();
    if let Some(list) = list.as_object_mut() {
        for (name, q) in missing {
            list.insert(name.clone(), q);
            names.push(name);
        }
    }
    names.sort();
    names
}

/// Applies one LimitRange's container defaults to a pod (JSON as decoded) and records them in
/// the annotation (upstream's `mergePodResourceRequirements`).
pub(crate) fn default_pod(pod: &mut Value, range: &LimitRange) {
    let (requests, limits) = container_defaults(range);
    if requests.is_empty() && limits.is_empty() {
        return;
    }
    let mut notes = Vec::new();
    for (field, what) in [
        ("containers", "container"),
        ("initContainers", "init container"),
    ] {
        let Some(containers) = pod
            .get_mut("spec")
            .and_then(|s| s.get_mut(field))
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        for container in containers.iter_mut().filter_map(Value::as_object_mut) {
            let name = container
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let set_limits = fill(container, "limits", &limits);
            let set_requests = fill(container, "requests", &requests);
            if !set_requests.is_empty() {
                notes.push(format!(
                    "{} request for {what} {name}",
                    set_requests.join(", ")
                ));
            }
            if !set_limits.is_empty() {
                notes.push(format!("{} limit for {what} {name}", set_limits.join(", ")));
            }
        }
    }
    if notes.is_empty() {
        return;
    }
    let Some(metadata) = pod.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let annotations = metadata
        .entry("annotations")
        .or_insert_with(|| Value::Object(Map::new()));
    if !annotations.is_object() {
        *annotations = Value::Object(Map::new());
    }
    if let Some(annotations) = annotations.as_object_mut() {
        annotations.insert(
            ANNOTATION.to_owned(),
            Value::String(format!("LimitRanger plugin set: {}", notes.join("; "))),
        );
    }
}

/// The largest value whose milli-units fit an int64 (upstream's `MaxMilliValue`).
const MAX_MILLI_VALUE: i64 = i64::MAX / 1000;

/// Request, limit and enforced value at one precision (upstream's
/// `requestLimitEnforcedValues`): milli-units unless one of them is too large for them.
fn enforced_values(
    request: Option<&Quantity>,
    limit: Option<&Quantity>,
    enforced: &Quantity,
) -> (i64, i64, i64) {
    let zero = Quantity::from_i64(0);
    let (request, limit) = (request.unwrap_or(&zero), limit.unwrap_or(&zero));
    let values = (request.value(), limit.value(), enforced.value());
    if values.0 <= MAX_MILLI_VALUE && values.1 <= MAX_MILLI_VALUE && values.2 <= MAX_MILLI_VALUE {
        (
            request.milli_value(),
            limit.milli_value(),
            enforced.milli_value(),
        )
    } else {
        values
    }
}

fn min_constraint(
    kind: &str,
    name: &str,
    enforced: &Quantity,
    requests: &ResourceList,
    limits: &ResourceList,
) -> Option<String> {
    let (request, limit) = (requests.get(name), limits.get(name));
    let (r, l, e) = enforced_values(request, limit, enforced);
    let Some(request) = request else {
        return Some(format!(
            "minimum {name} usage per {kind} is {enforced}.  No request is specified"
        ));
    };
    if r < e {
        return Some(format!(
            "minimum {name} usage per {kind} is {enforced}, but request is {request}"
        ));
    }
    match limit {
        Some(limit) if l < e => Some(format!(
            "minimum {name} usage per {kind} is {enforced}, but limit is {limit}"
        )),
        _ => None,
    }
}

fn max_constraint(
    kind: &str,
    name: &str,
    enforced: &Quantity,
    requests: &ResourceList,
    limits: &ResourceList,
) -> Option<String> {
    let (request, limit) = (requests.get(name), limits.get(name));
    let (r, l, e) = enforced_values(request, limit, enforced);
    let Some(limit) = limit else {
        return Some(format!(
            "maximum {name} usage per {kind} is {enforced}.  No limit is specified"
        ));
    };
    if l > e {
        return Some(format!(
            "maximum {name} usage per {kind} is {enforced}, but limit is {limit}"
        ));
    }
    match request {
        Some(request) if r > e => Some(format!(
            "maximum {name} usage per {kind} is {enforced}, but request is {request}"
        )),
        _ => None,
    }
}

/// A max on requests only, for claims (upstream's `maxRequestConstraint`).
fn max_request_constraint(
    kind: &str,
    name: &str,
    enforced: &Quantity,
    requests: &ResourceList,
) -> Option<String> {
    let request = requests.get(name);
    let (r, _, e) = enforced_values(request, None, enforced);
    let Some(request) = request else {
        return Some(format!(
            "maximum {name} usage per {kind} is {enforced}.  No request is specified"
        ));
    };
    (r > e)
        .then(|| format!("maximum {name} usage per {kind} is {enforced}, but request is {request}"))
}

fn ratio_constraint(
    kind: &str,
    name: &str,
    enforced: &Quantity,
    requests: &ResourceList,
    limits: &ResourceList,
) -> Option<String> {
    let (request, limit) = (requests.get(name), limits.get(name));
    let (r, l, _) = enforced_values(request, limit, enforced);
    if request.is_none() || r == 0 {
        return Some(format!(
            "{name} max limit to request ratio per {kind} is {enforced}, but no request is specified or request is 0"
        ));
    }
    if limit.is_none() || l == 0 {
        return Some(format!(
            "{name} max limit to request ratio per {kind} is {enforced}, but no limit is specified or limit is 0"
        ));
    }
    let shown = l as f64 / r as f64;
    let (observed, allowed) = if enforced.value() <= MAX_MILLI_VALUE {
        (shown * 1000.0, enforced.milli_value() as f64)
    } else {
        (shown, enforced.value() as f64)
    };
    (observed > allowed).then(|| {
        format!(
            "{name} max limit to request ratio per {kind} is {enforced}, but provided ratio is {shown:.6}"
        )
    })
}

/// One error, or several as Go's aggregate prints them (`[a, b]`, repeats once).
fn aggregate_errors(errors: Vec<String>) -> Result<(), String> {
    let mut unique: Vec<String> = Vec::new();
    for error in errors {
        if !unique.contains(&error) {
            unique.push(error);
        }
    }
    match unique.len() {
        0 => Ok(()),
        1 => Err(unique.remove(0)),
        _ => Err(format!("[{}]", unique.join(", "))),
    }
}

/// The min, max and ratio bounds of one item over one set of requests and limits.
fn bounds(
    item: &k8s_openapi::api::core::v1::LimitRangeItem,
    requests: &ResourceList,
    limits: &ResourceList,
    errors: &mut Vec<String>,
) {
    let kind = item.type_.as_str();
    for (name, q) in parse_list(item.min.as_ref()) {
        errors.extend(min_constraint(kind, &name, &q, requests, limits));
    }
    for (name, q) in parse_list(item.max.as_ref()) {
        errors.extend(max_constraint(kind, &name, &q, requests, limits));
    }
    for (name, q) in parse_list(item.max_limit_request_ratio.as_ref()) {
        errors.extend(ratio_constraint(kind, &name, &q, requests, limits));
    }
}

/// Checks a pod against one LimitRange's `Container` and `Pod` items.
pub(crate) fn validate_pod(range: &LimitRange, pod: &Pod) -> Result<(), String> {
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(());
    };
    let mut errors = Vec::new();
    for item in range.spec.iter().flat_map(|s| s.limits.iter()) {
        match item.type_.as_str() {
            "Container" => {
                for container in spec
                    .containers
                    .iter()
                    .chain(spec.init_containers.iter().flatten())
                {
                    let resources = container.resources.as_ref();
                    let requests = parse_list(resources.and_then(|r| r.requests.as_ref()));
                    let limits = parse_list(resources.and_then(|r| r.limits.as_ref()));
                    bounds(item, &requests, &limits, &mut errors);
                }
            }
            "Pod" => {
                bounds(
                    item,
                    &aggregate(spec, false),
                    &aggregate(spec, true),
                    &mut errors,
                );
            }
            _ => {}
        }
    }
    aggregate_errors(errors)
}

/// Checks a claim's storage requests against one LimitRange's `PersistentVolumeClaim` items.
pub(crate) fn validate_claim(
    range: &LimitRange,
    claim: &PersistentVolumeClaim,
) -> Result<(), String> {
    let requests = parse_list(
        claim
            .spec
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref()),
    );
    let mut errors = Vec::new();
    for item in range.spec.iter().flat_map(|s| s.limits.iter()) {
        if item.type_ != "PersistentVolumeClaim" {
            continue;
        }
        let kind = item.type_.as_str();
        for (name, q) in parse_list(item.min.as_ref()) {
            errors.extend(min_constraint(
                kind,
                &name,
                &q,
                &requests,
                &ResourceList::new(),
            ));
        }
        for (name, q) in parse_list(item.max.as_ref()) {
            errors.extend(max_request_constraint(kind, &name, &q, &requests));
        }
    }
    aggregate_errors(errors)
}

impl Plugin for LimitRanger {
    fn name(&self) -> &'static str {
        "LimitRanger"
    }

    fn admit<'a>(&'a self, review: Mutation<'a>) -> Verdict<'a> {
        Box::pin(async move {
            let Review { attrs, object, .. } = review;
            if is_core(attrs.resource, "limitranges") && attrs.main_namespaced() && !attrs.dry_run {
                // The pods after this one must see the range as soon as it is stored.
                if let Some(range) = object.as_deref() {
                    self.ranges.expect_write(namespace_of(range));
                }
            }
            match object {
                Some(object) if attrs.operation == Operation::Create && attrs.main_namespaced() => {
                    self.apply_defaults(attrs.resource, object).await
                }
                _ => Ok(()),
            }
        })
    }

    fn validate<'a>(&'a self, review: Validation<'a>) -> Verdict<'a> {
        Box::pin(async move {
            let Review { attrs, object, old } = review;
            if !attrs.main_namespaced() {
                return Ok(());
            }
            self.check(attrs.resource, object, old).await
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    fn range(limits: Value) -> LimitRange {
        let mut range: LimitRange =
            serde_json::from_value(json!({"metadata": {"name": "lr"}, "spec": {"limits": limits}}))
                .unwrap();
        // As stored: the LimitRange's own defaults applied.
        capstan_api::defaults::core::default_limit_range(&mut range);
        range
    }

    fn pod(spec: Value) -> Value {
        json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": spec})
    }

    fn typed(pod: &Value) -> Pod {
        serde_json::from_value(pod.clone()).unwrap()
    }

    #[test]
    fn defaults_fill_what_containers_lack_and_say_so() {
        let lr = range(json!([{"type": "Container",
            "default": {"cpu": "500m", "memory": "256Mi"},
            "defaultRequest": {"cpu": "100m"}}]));
        let mut p = pod(json!({
            "containers": [
                {"name": "a", "image": "x"},
                {"name": "b", "image": "x", "resources": {"limits": {"memory": "1Gi"}, "requests": {"memory": "1Gi"}}},
            ],
            "initContainers": [{"name": "i", "image": "x", "resources": {"requests": {"cpu": "1"}}}],
        }));
        default_pod(&mut p, &lr);
        assert_eq!(
            p["spec"]["containers"][0]["resources"],
            json!({"limits": {"cpu": "500m", "memory": "256Mi"}, "requests": {"cpu": "100m", "memory": "256Mi"}})
        );
        assert_eq!(
            p["spec"]["containers"][1]["resources"],
            json!({"limits": {"cpu": "500m", "memory": "1Gi"}, "requests": {"cpu": "100m", "memory": "1Gi"}})
        );
        assert_eq!(
            p["metadata"]["annotations"][ANNOTATION],
            "LimitRanger plugin set: cpu, memory request for container a; cpu, memory limit for container a; \
             cpu request for container b; cpu limit for container b; memory request for init container i; \
             cpu, memory limit for init container i"
        );
        // Nothing to default: nothing written, not even empty maps.
        let mut untouched = pod(json!({"containers": [{"name": "a", "image": "x"}]}));
        default_pod(
            &mut untouched,
            &range(json!([{"type": "Pod", "max": {"cpu": "2"}}])),
        );
        assert_eq!(
            untouched,
            pod(json!({"containers": [{"name": "a", "image": "x"}]}))
        );
    }

    #[test]
    fn container_and_pod_bounds_refuse_with_upstreams_messages() {
        let check = |limits: Value, spec: Value, expected: Result<(), &str>| {
            let lr = range(limits);
            assert_eq!(
                validate_pod(&lr, &typed(&pod(spec))),
                expected.map_err(str::to_owned)
            );
        };
        let c = |requests: Value, limits: Value| {
            json!({"containers": [{"name": "c", "image": "x",
            "resources": {"requests": requests, "limits": limits}}]})
        };
        check(
            json!([{"type": "Container", "max": {"cpu": "1"}}]),
            c(json!({"cpu": "1"}), json!({"cpu": "2"})),
            Err("maximum cpu usage per Container is 1, but limit is 2"),
        );
        check(
            json!([{"type": "Container", "max": {"cpu": "1"}}]),
            c(json!({"cpu": "500m"}), json!({})),
            Err("maximum cpu usage per Container is 1.  No limit is specified"),
        );
        check(
            json!([{"type": "Container", "min": {"memory": "64Mi"}}]),
            c(json!({"memory": "32Mi"}), json!({})),
            Err("minimum memory usage per Container is 64Mi, but request is 32Mi"),
        );
        check(
            json!([{"type": "Container", "min": {"memory": "64Mi"}}]),
            c(json!({}), json!({})),
            Err("minimum memory usage per Container is 64Mi.  No request is specified"),
        );
        check(
            json!([{"type": "Container", "maxLimitRequestRatio": {"cpu": "2"}}]),
            c(json!({"cpu": "100m"}), json!({"cpu": "300m"})),
            Err(
                "cpu max limit to request ratio per Container is 2, but provided ratio is 3.000000",
            ),
        );
        check(
            json!([{"type": "Container", "maxLimitRequestRatio": {"cpu": "2"}}]),
            c(json!({"cpu": "100m"}), json!({"cpu": "200m"})),
            Ok(()),
        );
        // Several problems: Go's aggregate.
        check(
            json!([{"type": "Container", "max": {"cpu": "1", "memory": "1Gi"}}]),
            c(json!({}), json!({"cpu": "2", "memory": "2Gi"})),
            Err(
                "[maximum cpu usage per Container is 1, but limit is 2, maximum memory usage per Container is 1Gi, but limit is 2Gi]",
            ),
        );
        // Pod bounds look at the containers together.
        check(
            json!([{"type": "Pod", "max": {"cpu": "1"}}]),
            json!({"containers": [
                {"name": "a", "image": "x", "resources": {"limits": {"cpu": "600m"}}},
                {"name": "b", "image": "x", "resources": {"limits": {"cpu": "600m"}}}]}),
            Err("maximum cpu usage per Pod is 1, but limit is 1200m"),
        );
    }

    #[test]
    fn claims_are_bounded_on_their_storage_request() {
        let lr = range(
            json!([{"type": "PersistentVolumeClaim", "min": {"storage": "1Gi"}, "max": {"storage": "10Gi"}}]),
        );
        let claim = |storage: &str| -> PersistentVolumeClaim {
            serde_json::from_value(json!({"metadata": {"name": "c"},
                "spec": {"resources": {"requests": {"storage": storage}}}}))
            .unwrap()
        };
        assert_eq!(validate_claim(&lr, &claim("5Gi")), Ok(()));
        assert_eq!(
            validate_claim(&lr, &claim("20Gi")),
            Err(
                "maximum storage usage per PersistentVolumeClaim is 10Gi, but request is 20Gi"
                    .into()
            )
        );
        assert_eq!(
            validate_claim(&lr, &claim("500Mi")),
            Err(
                "minimum storage usage per PersistentVolumeClaim is 1Gi, but request is 500Mi"
                    .into()
            )
        );
    }
}

//! `node.k8s.io/v1` RuntimeClasses, as upstream 1.33 validates them: a DNS-label handler that
//! never changes, pod overhead checked as resource limits, and scheduling constraints (node
//! selector labels, tolerations without repeats).

use k8s_openapi::api::core::v1::{ResourceRequirements, Toleration};
use k8s_openapi::api::node::v1::RuntimeClass;

use crate::field::{BadValue, FieldError, Path};
use crate::validation::meta::{
    FIELD_IMMUTABLE, validate_labels, validate_object_meta, validate_object_meta_update,
};
use crate::validation::names::{NameValidator, is_dns1123_label};
use crate::validation::pod::validate_tolerations;
use crate::validation::resources::validate_resource_requirements;

/// A new RuntimeClass.
pub fn validate_runtime_class(class: &RuntimeClass) -> Vec<FieldError> {
    let mut errs = validate_object_meta(
        &class.metadata,
        false,
        NameValidator::DnsSubdomain,
        &Path::new("metadata"),
    );
    for msg in is_dns1123_label(&class.handler) {
        errs.push(FieldError::invalid(
            &Path::new("handler"),
            class.handler.as_str(),
            &msg,
        ));
    }
    if let Some(overhead) = &class.overhead {
        let requirements = ResourceRequirements {
            limits: overhead.pod_fixed.clone(),
            ..Default::default()
        };
        errs.extend(validate_resource_requirements(
            Some(&requirements),
            &[],
            &Path::new("overhead"),
        ));
    }
    if let Some(scheduling) = &class.scheduling {
        let path = Path::new("scheduling");
        if scheduling.node_selector.is_some() {
            errs.extend(validate_labels(
                scheduling.node_selector.as_ref(),
                &path.child("nodeSelector"),
            ));
        }
        let tolerations = scheduling.tolerations.as_deref().unwrap_or_default();
        errs.extend(validate_tolerations(
            tolerations,
            &path.child("tolerations"),
        ));
        let mut seen: Vec<TolerationKey<'_>> = Vec::new();
        for (i, t) in tolerations.iter().enumerate() {
            let key = (&t.key, &t.operator, &t.value, &t.effect);
            if seen.contains(&key) {
                errs.push(FieldError::duplicate(
                    &path.child("tolerations").index(i),
                    BadValue::Other(go_toleration(t)),
                ));
            } else {
                seen.push(key);
            }
        }
    }
    errs
}

/// What makes two tolerations the same: key, operator, value and effect.
type TolerationKey<'a> = (
    &'a Option<String>,
    &'a Option<String>,
    &'a Option<String>,
    &'a Option<String>,
);

/// Go's `%#v` of a `core.Toleration`.
fn go_toleration(t: &Toleration) -> String {
    let text = |v: &Option<String>| format!("{:?}", v.as_deref().unwrap_or(""));
    let seconds = t
        .toleration_seconds
        .map_or_else(|| "(*int64)(nil)".to_owned(), |s| format!("&{s}"));
    format!(
        "core.Toleration{{Key:{}, Operator:{}, Value:{}, Effect:{}, TolerationSeconds:{seconds}}}",
        text(&t.key),
        text(&t.operator),
        text(&t.value),
        text(&t.effect)
    )
}

/// An update of a RuntimeClass: the handler is fixed.
pub fn validate_runtime_class_update(new: &RuntimeClass, old: &RuntimeClass) -> Vec<FieldError> {
    let mut errs =
        validate_object_meta_update(&new.metadata, &old.metadata, &Path::new("metadata"));
    if new.handler != old.handler {
        errs.push(FieldError::invalid(
            &Path::new("handler"),
            new.handler.as_str(),
            FIELD_IMMUTABLE,
        ));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn runtime_classes() {
        let class: RuntimeClass = serde_json::from_value(json!({
            "metadata": {"name": "gvisor", "resourceVersion": "1"},
            "handler": "Run_sc",
            "scheduling": {"tolerations": [
                {"key": "a", "operator": "Equal", "value": "b", "effect": "NoSchedule"},
                {"key": "a", "operator": "Equal", "value": "b", "effect": "NoSchedule"}
            ]}
        }))
        .unwrap();
        let errs: Vec<String> = validate_runtime_class(&class)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(errs.len(), 2, "{errs:#?}");
        assert!(
            errs[0].starts_with("handler: Invalid value: \"Run_sc\": a lowercase RFC 1123 label"),
            "{errs:#?}"
        );
        assert_eq!(
            errs[1],
            "scheduling.tolerations[1]: Duplicate value: core.Toleration{Key:\"a\", Operator:\"Equal\", Value:\"b\", Effect:\"NoSchedule\", TolerationSeconds:(*int64)(nil)}"
        );
        let mut changed = class.clone();
        changed.handler = "runsc".into();
        let errs = validate_runtime_class_update(&changed, &class);
        assert_eq!(
            errs[0].to_string(),
            "handler: Invalid value: \"runsc\": field is immutable"
        );
    }
}

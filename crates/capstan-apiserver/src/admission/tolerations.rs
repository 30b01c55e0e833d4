//! Upstream's DefaultTolerationSeconds admission: a new pod that does not tolerate the
//! `node.kubernetes.io/not-ready` and `node.kubernetes.io/unreachable` `NoExecute` taints gets
//! tolerations for them bounded to 300 s, so that it is evicted from a lost node after five
//! minutes rather than at once.

use serde_json::{Value, json};

/// Upstream's `--default-not-ready-toleration-seconds` and `--default-unreachable-...`.
const SECONDS: i64 = 300;
const KEYS: [&str; 2] = [
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
];

/// Adds the default tolerations the pod lacks.
pub(crate) fn admit(pod: &mut Value) {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let existing: Vec<Value> = spec
        .get("tolerations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    // A toleration with an empty key covers every key; an empty effect covers every effect.
    let covers = |key: &str| {
        existing.iter().any(|t| {
            let k = t.get("key").and_then(Value::as_str).unwrap_or_default();
            let e = t.get("effect").and_then(Value::as_str).unwrap_or_default();
            (k.is_empty() || k == key) && (e.is_empty() || e == "NoExecute")
        })
    };
    let missing: Vec<Value> = KEYS
        .iter()
        .filter(|key| !covers(key))
        .map(|key| json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": SECONDS}))
        .collect();
    if missing.is_empty() {
        return;
    }
    let mut tolerations = existing;
    tolerations.extend(missing);
    spec.insert("tolerations".into(), Value::Array(tolerations));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_added_unless_tolerated() {
        let mut pod = json!({"spec": {"containers": []}});
        admit(&mut pod);
        assert_eq!(
            pod["spec"]["tolerations"],
            json!([
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            ])
        );
        let mut own = json!({"spec": {"tolerations": [
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}]}});
        admit(&mut own);
        let tolerations = own["spec"]["tolerations"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(tolerations.len(), 2);
        assert_eq!(
            tolerations[0]["tolerationSeconds"], 5,
            "the pod's own toleration is kept"
        );
        assert_eq!(tolerations[1]["key"], "node.kubernetes.io/not-ready");
        let mut everything = json!({"spec": {"tolerations": [{"operator": "Exists"}]}});
        admit(&mut everything);
        assert_eq!(
            everything["spec"]["tolerations"].as_array().map(Vec::len),
            Some(1)
        );
    }
}

/// The plugin.
#[derive(Debug)]
pub(crate) struct DefaultTolerationSeconds;

impl super::Plugin for DefaultTolerationSeconds {
    fn name(&self) -> &'static str {
        "DefaultTolerationSeconds"
    }

    fn admit<'a>(&'a self, review: super::Mutation<'a>) -> super::Verdict<'a> {
        Box::pin(async move {
            let super::Review { attrs, object, .. } = review;
            if let Some(pod) = object.filter(|_| attrs.creates_core("pods")) {
                admit(pod);
            }
            Ok(())
        })
    }
}

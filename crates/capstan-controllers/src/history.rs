//! ControllerRevision history shared by the DaemonSet and StatefulSet controllers (upstream's
//! `pkg/controller/history` and the revision code of both controllers): a revision holds the
//! owner's pod template as the strategic merge patch that restores it (`$patch: replace`),
//! is named `<owner>-<hash>`, carries the `controller-revision-hash` label and a revision
//! number; equal revisions are found by their data, the newest wins and old unused ones are
//! pruned down to `revisionHistoryLimit`.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use serde_json::{Map, Value};

/// The label naming a revision's hash (on revisions, and on the owner's pods).
pub const HASH_LABEL: &str = "controller-revision-hash";

/// The longest owner-name prefix of a revision name (upstream's `ControllerRevisionName`).
const MAX_PREFIX: usize = 223;

/// Sorts object keys recursively, as Go writes a `map[string]interface{}`.
fn sorted(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k, sorted(v)))
                    .collect::<Map<_, _>>(),
            )
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}

/// The revision data for `template`: `{"spec":{"template":{..., "$patch":"replace"}}}` with
/// sorted keys (upstream's `getPatch` for DaemonSets and StatefulSets).
pub fn template_patch(template: &PodTemplateSpec) -> Value {
    let mut template = serde_json::to_value(template).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut template {
        map.insert("$patch".into(), Value::String("replace".into()));
    } else {
        template = serde_json::json!({"$patch": "replace"});
    }
    sorted(serde_json::json!({"spec": {"template": template}}))
}

/// The bytes Go's `json.Marshal` writes for `value`: sorted keys, HTML characters escaped.
pub fn go_json(value: &Value) -> Vec<u8> {
    let text = serde_json::to_string(&sorted(value.clone())).unwrap_or_default();
    // These characters only occur inside JSON strings, where Go escapes them.
    text.replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
        .into_bytes()
}

/// The pod template a revision restores (upstream's `ApplyRevision` of a template patch).
pub fn template_of(revision: &ControllerRevision) -> Option<PodTemplateSpec> {
    let data = revision.data.as_ref()?;
    let mut template = data.0.get("spec")?.get("template")?.clone();
    if let Value::Object(map) = &mut template {
        map.remove("$patch");
    }
    serde_json::from_value(template).ok()
}

/// FNV-1, 32 bits (Go's `fnv.New32`).
pub fn fnv32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(2_166_136_261u32, |h, &b| {
        h.wrapping_mul(16_777_619) ^ u32::from(b)
    })
}

/// Upstream's `HashControllerRevision`: FNV-1 over the data, then the collision count in
/// decimal when set, printed in decimal and safe-encoded.
pub fn hash_revision(data: &Value, collision_count: Option<i32>) -> String {
    let mut bytes = go_json(data);
    if let Some(count) = collision_count {
        bytes.extend_from_slice(count.to_string().as_bytes());
    }
    crate::deployment::util::safe_encode(&fnv32(&bytes).to_string())
}

/// `<owner>-<hash>`, the owner's name cut to 223 characters.
pub fn revision_name(owner: &str, hash: &str) -> String {
    let prefix: String = owner.chars().take(MAX_PREFIX).collect();
    format!("{prefix}-{hash}")
}

/// A new revision of `owner` holding `data` (upstream's `NewControllerRevision`): the template's
/// labels plus the hash label, the owner as controller. `hash` names it.
pub fn new_revision(
    owner: &ObjectMeta,
    controller: OwnerReference,
    template_labels: Option<&std::collections::BTreeMap<String, String>>,
    data: Value,
    revision: i64,
    hash: &str,
) -> ControllerRevision {
    let mut labels = template_labels.cloned().unwrap_or_default();
    labels.insert(HASH_LABEL.into(), hash.into());
    ControllerRevision {
        metadata: ObjectMeta {
            name: Some(revision_name(
                owner.name.as_deref().unwrap_or_default(),
                hash,
            )),
            namespace: owner.namespace.clone(),
            labels: Some(labels),
            annotations: owner.annotations.clone().filter(|a| !a.is_empty()),
            owner_references: Some(vec![controller]),
            ..ObjectMeta::default()
        },
        data: Some(RawExtension(data)),
        revision,
    }
}

fn hash_label(revision: &ControllerRevision) -> Option<&str> {
    revision
        .metadata
        .labels
        .as_ref()?
        .get(HASH_LABEL)
        .map(String::as_str)
}

/// Upstream's `EqualRevision`: different hash labels differ; otherwise the data decides.
pub fn equal_revision(a: &ControllerRevision, b: &ControllerRevision) -> bool {
    if let (Some(x), Some(y)) = (hash_label(a), hash_label(b))
        && x != y
    {
        return false;
    }
    a.data.as_ref().map(|d| &d.0) == b.data.as_ref().map(|d| &d.0)
}

/// The revisions equal to `needle`, in the order given.
pub fn find_equal<'a>(
    revisions: &[&'a ControllerRevision],
    needle: &ControllerRevision,
) -> Vec<&'a ControllerRevision> {
    revisions
        .iter()
        .copied()
        .filter(|r| equal_revision(r, needle))
        .collect()
}

/// Upstream's revision order: by number, then creation time, then name.
pub fn by_revision(a: &ControllerRevision, b: &ControllerRevision) -> Ordering {
    a.revision
        .cmp(&b.revision)
        .then_with(|| {
            let time = |r: &ControllerRevision| r.metadata.creation_timestamp.as_ref().map(|t| t.0);
            time(a).cmp(&time(b))
        })
        .then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

/// One more than the highest revision number (1 for none).
pub fn next_revision(revisions: &[&ControllerRevision]) -> i64 {
    revisions.iter().map(|r| r.revision).max().unwrap_or(0) + 1
}

/// The names of the oldest revisions not in `live` to delete so that at most `limit` of
/// `counted` remain; `revisions` is sorted by [`by_revision`].
pub fn to_prune(
    revisions: &[&ControllerRevision],
    live: &BTreeSet<String>,
    counted: usize,
    limit: i32,
) -> Vec<String> {
    let excess = counted.saturating_sub(usize::try_from(limit.max(0)).unwrap_or(0));
    revisions
        .iter()
        .filter_map(|r| r.metadata.name.clone())
        .filter(|name| !live.contains(name))
        .take(excess)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template(image: &str) -> PodTemplateSpec {
        serde_json::from_value(json!({
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": image}]},
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn revision(name: &str, number: i64, image: &str) -> ControllerRevision {
        let data = template_patch(&template(image));
        let mut r = new_revision(
            &ObjectMeta {
                name: Some("web".into()),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            OwnerReference::default(),
            None,
            data.clone(),
            number,
            &hash_revision(&data, None),
        );
        r.metadata.name = Some(name.into());
        r
    }

    #[test]
    fn fnv1_matches_go() {
        // Go: fnv.New32() over "", "a", "foobar".
        assert_eq!(fnv32(b""), 0x811c_9dc5);
        assert_eq!(fnv32(b"a"), 0x050c_5d7e);
        assert_eq!(fnv32(b"foobar"), 0x31f0_b262);
    }

    #[test]
    fn the_patch_replaces_the_template_and_restores_it() {
        let t = template("nginx:1");
        let data = template_patch(&t);
        assert_eq!(data["spec"]["template"]["$patch"], "replace");
        let text = String::from_utf8(go_json(&data)).unwrap_or_default();
        assert!(
            text.starts_with(r#"{"spec":{"template":{"$patch":"replace","metadata""#),
            "{text}"
        );
        let r = revision("web-1", 1, "nginx:1");
        assert_eq!(template_of(&r), Some(t));
        assert_eq!(
            go_json(&json!({"a": "<&>"})),
            br#"{"a":"\u003c\u0026\u003e"}"#.to_vec()
        );
    }

    #[test]
    fn hashes_names_and_labels() {
        let data = template_patch(&template("nginx:1"));
        let hash = hash_revision(&data, None);
        assert_eq!(hash, hash_revision(&data, None));
        assert_ne!(hash, hash_revision(&data, Some(0)));
        assert_ne!(hash_revision(&data, Some(0)), hash_revision(&data, Some(1)));
        assert_ne!(
            hash,
            hash_revision(&template_patch(&template("nginx:2")), None)
        );
        assert_eq!(revision_name("web", "abc"), "web-abc");
        assert_eq!(revision_name(&"x".repeat(300), "h").len(), 225);
        let r = revision("web-1", 3, "nginx:1");
        assert_eq!(hash_label(&r), Some(hash.as_str()));
        assert_eq!(
            r.metadata.labels.as_ref().and_then(|l| l.get("app")),
            None,
            "no template labels given"
        );
    }

    #[test]
    fn equality_order_and_numbers() {
        let a = revision("a", 1, "nginx:1");
        let b = revision("b", 2, "nginx:2");
        let c = revision("c", 3, "nginx:1");
        assert!(equal_revision(&a, &c));
        assert!(!equal_revision(&a, &b));
        let mut relabeled = c.clone();
        relabeled.metadata.labels = Some([(HASH_LABEL.to_owned(), "other".to_owned())].into());
        assert!(!equal_revision(&a, &relabeled), "hash labels differ");
        let all = [&c, &a, &b];
        let names = |v: Vec<&ControllerRevision>| {
            v.iter()
                .filter_map(|r| r.metadata.name.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(find_equal(&all, &a)), ["c", "a"]);
        let mut sorted: Vec<&ControllerRevision> = all.to_vec();
        sorted.sort_by(|x, y| by_revision(x, y));
        assert_eq!(names(sorted.clone()), ["a", "b", "c"]);
        assert_eq!(next_revision(&sorted), 4);
        assert_eq!(next_revision(&[]), 1);
    }

    #[test]
    fn pruning_keeps_live_and_recent_revisions() {
        let rs: Vec<ControllerRevision> = (1..=5)
            .map(|i| revision(&format!("r{i}"), i, &format!("i{i}")))
            .collect();
        let sorted: Vec<&ControllerRevision> = rs.iter().collect();
        let live: BTreeSet<String> = ["r1".to_owned(), "r5".to_owned()].into();
        fn check(
            sorted: &[&ControllerRevision],
            live: &BTreeSet<String>,
            counted: usize,
            limit: i32,
            expected: &[&str],
        ) {
            assert_eq!(
                to_prune(sorted, live, counted, limit),
                expected,
                "counted {counted} limit {limit}"
            );
        }
        check(&sorted, &live, 3, 1, &["r2", "r3"]);
        check(&sorted, &live, 3, 3, &[]);
        check(&sorted, &live, 3, 0, &["r2", "r3", "r4"]);
        check(&sorted, &live, 5, 0, &["r2", "r3", "r4"]);
    }
}

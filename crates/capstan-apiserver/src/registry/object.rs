//! Reading and writing the metadata of objects held as JSON, and the system fields the registry
//! owns (uid, creation time, resource version, generated names).

use rand::Rng;
use serde_json::{Map, Value};

/// `metadata.<field>` as a string, or "".
pub(crate) fn meta_str<'a>(object: &'a Value, field: &str) -> &'a str {
    object["metadata"][field].as_str().unwrap_or_default()
}

/// Sets or removes (`None`) `metadata.<field>`. The object is a decoded object (a map whose
/// `metadata` is a map), which the registry guarantees before calling this.
pub(crate) fn set_meta(object: &mut Value, field: &str, value: Option<Value>) {
    match value {
        Some(value) => object["metadata"][field] = value,
        None => {
            if let Some(meta) = object["metadata"].as_object_mut() {
                meta.remove(field);
            }
        }
    }
}

/// Drops empty metadata lists and maps, as Go's `omitempty` does when upstream writes an
/// object (a client sending `ownerReferences: []` reads back no `ownerReferences`).
pub(crate) fn drop_empty_meta(object: &mut Value) {
    if let Some(meta) = object["metadata"].as_object_mut() {
        for field in ["labels", "annotations", "ownerReferences", "finalizers"] {
            let empty = match meta.get(field) {
                Some(Value::Array(a)) => a.is_empty(),
                Some(Value::Object(o)) => o.is_empty(),
                Some(Value::Null) => true,
                _ => false,
            };
            if empty {
                meta.remove(field);
            }
        }
    }
}

/// The object's labels.
pub(crate) fn labels(object: &Value) -> std::collections::BTreeMap<String, String> {
    object["metadata"]["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// The object's finalizers.
pub(crate) fn finalizers(object: &Value) -> Vec<String> {
    object["metadata"]["finalizers"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether deletion of the object has begun.
pub(crate) fn is_terminating(object: &Value) -> bool {
    object["metadata"]["deletionTimestamp"].is_string()
}

/// The current time as Kubernetes writes `metav1.Time` (seconds, UTC).
pub(crate) fn now_rfc3339() -> String {
    timestamp(time::OffsetDateTime::now_utc())
}

/// A time as Kubernetes writes `metav1.Time`.
pub(crate) fn timestamp(t: time::OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

/// A random version-4 UUID in its canonical text form.
pub(crate) fn new_uid() -> String {
    let mut bytes: [u8; 16] = rand::rng().random();
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// Upstream's alphabet for generated name suffixes: no vowels (no words), no look-alikes.
const SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
/// The longest name a generated name may have before its suffix is added.
const MAX_GENERATED_PREFIX: usize = 58;

/// A name from `generateName`: the prefix (cut to leave room) and five random characters.
pub(crate) fn generate_name(prefix: &str) -> String {
    let mut name: String = prefix.chars().take(MAX_GENERATED_PREFIX).collect();
    let mut rng = rand::rng();
    for _ in 0..5 {
        name.push(SUFFIX_ALPHABET[rng.random_range(0..SUFFIX_ALPHABET.len())] as char);
    }
    name
}

/// Everything of an object but its status and metadata: what `generation` counts.
pub(crate) fn desired_state_changed(new: &Value, old: &Value) -> bool {
    let strip = |v: &Value| -> Map<String, Value> {
        v.as_object()
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| !matches!(k.as_str(), "metadata" | "status"))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default()
    };
    strip(new) != strip(old)
}

/// Takes `metadata.managedFields` out of an object. The strategies decode objects into their
/// types several times per write; the field manager's entries, which they never look at, are
/// kept aside meanwhile (see [`put_managed`]).
pub(crate) fn take_managed(object: &mut Value) -> Option<Value> {
    object
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .and_then(|m| m.remove("managedFields"))
}

/// Puts back what [`take_managed`] took.
pub(crate) fn put_managed(object: &mut Value, managed: Option<Value>) {
    if let Some(managed) = managed
        && let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut)
    {
        meta.insert("managedFields".into(), managed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uids_are_version_4() {
        let uid = new_uid();
        assert_eq!(uid.len(), 36);
        assert_eq!(&uid[14..15], "4");
        assert!(matches!(&uid[19..20], "8" | "9" | "a" | "b"));
        assert_ne!(uid, new_uid());
    }

    #[test]
    fn generated_names_keep_the_prefix_and_fit() {
        let name = generate_name("web-");
        assert!(name.starts_with("web-") && name.len() == 9);
        assert!(name[4..].bytes().all(|b| SUFFIX_ALPHABET.contains(&b)));
        assert_eq!(generate_name(&"x".repeat(100)).len(), 63);
    }

    #[test]
    fn timestamps_have_second_precision() {
        let t = time::macros::datetime!(2026-01-02 03:04:05.678 UTC);
        assert_eq!(timestamp(t), "2026-01-02T03:04:05Z");
    }
}

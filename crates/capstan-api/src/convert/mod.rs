//! Conversion between the versions of a kind. A kind served in several versions keeps one of them
//! as its *hub*: the form the registry stores, validates and reasons about (upstream's internal
//! version). Every other served version brings a [`Conversion`] to and from the hub, and the API
//! server converts request bodies into the hub form when they arrive and objects out of it when
//! they leave. Fields a version cannot hold travel in annotations, as upstream keeps them, so
//! that an object written in one version reads back whole in another.
//!
//! CustomResourceDefinition versions will plug into the same table.

mod autoscaling;
pub mod events;
pub mod secret;

use serde_json::Value;

/// How one served version of a kind converts to and from the kind's hub version.
#[derive(Debug)]
pub struct Conversion {
    /// The served version's `apiVersion`, e.g. `autoscaling/v1`.
    pub external: &'static str,
    /// The hub's `apiVersion`, e.g. `autoscaling/v2`.
    pub hub: &'static str,
    /// The kind.
    pub kind: &'static str,
    /// An object of the served version (already decoded and defaulted as that version) in hub
    /// form; an error names what the object carries that does not convert.
    pub to_hub: fn(&Value) -> Result<Value, String>,
    /// A hub object in the served version.
    pub from_hub: fn(&Value) -> Value,
    /// Whether objects of the served version are validated by its own rules (upstream's
    /// request-version-dependent validation, as for Events) rather than the hub's.
    pub validated_as_served: bool,
    /// How the served version's field selector labels name the hub's selectable fields
    /// (served, hub); empty when it uses the hub's names.
    pub field_labels: &'static [(&'static str, &'static str)],
    /// The served names of `field_labels`.
    pub field_names: &'static [&'static str],
}

impl Conversion {
    /// `object`, of either side of this conversion, in version `api_version`.
    pub fn convert(&self, object: &Value, api_version: &str) -> Result<Value, String> {
        let from = object.get("apiVersion").and_then(Value::as_str);
        if from == Some(api_version) {
            return Ok(object.clone());
        }
        let hub = if from == Some(self.external) {
            (self.to_hub)(object)?
        } else {
            object.clone()
        };
        if api_version == self.hub {
            Ok(hub)
        } else if api_version == self.external {
            Ok((self.from_hub)(&hub))
        } else {
            Err(format!("no conversion of {} to {api_version}", self.kind))
        }
    }
}

static CONVERSIONS: &[Conversion] = &[
    Conversion {
        external: "autoscaling/v1",
        hub: "autoscaling/v2",
        kind: "HorizontalPodAutoscaler",
        to_hub: autoscaling::v1_to_v2,
        from_hub: autoscaling::v2_to_v1,
        validated_as_served: false,
        field_labels: &[],
        field_names: &[],
    },
    Conversion {
        external: "events.k8s.io/v1",
        hub: "v1",
        kind: "Event",
        to_hub: events::v1_to_core,
        from_hub: events::core_to_v1,
        validated_as_served: true,
        field_labels: events::FIELD_LABELS,
        field_names: events::FIELD_NAMES,
    },
];

/// The conversion of `kind` served as `api_version` (`group/version`, or `version` for the core
/// group), when that version is not the kind's hub.
pub fn conversion(api_version: &str, kind: &str) -> Option<&'static Conversion> {
    CONVERSIONS
        .iter()
        .find(|c| c.external == api_version && c.kind == kind)
}

/// The conversion between two versions of `kind`, in either direction (`None` when they are the
/// same version or unrelated).
pub fn between(kind: &str, a: &str, b: &str) -> Option<&'static Conversion> {
    CONVERSIONS.iter().find(|c| {
        c.kind == kind && ((c.external == a && c.hub == b) || (c.external == b && c.hub == a))
    })
}

/// Writes `value` as Go's `encoding/json` writes a struct: members in declaration order. `order`
/// names the members of every struct involved, each struct's members in its declaration order
/// (a name shared by several structs keeps one place, which must suit them all); members it does
/// not name follow in name order, as Go writes maps.
pub(crate) fn go_json(value: &Value, order: &[&str]) -> String {
    let mut out = String::new();
    write_go(value, order, &mut out);
    out
}

fn write_go(value: &Value, order: &[&str], out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_by_key(|k| {
                (
                    order.iter().position(|o| o == k).unwrap_or(usize::MAX),
                    k.as_str(),
                )
            });
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_go(&map[key], order, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go(item, order, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn go_json_follows_the_declared_order() {
        let v =
            json!({"resource": {"targetAverageValue": "1", "name": "memory"}, "type": "Resource"});
        assert_eq!(
            go_json(&v, &["type", "resource", "name", "targetAverageValue"]),
            r#"{"type":"Resource","resource":{"name":"memory","targetAverageValue":"1"}}"#
        );
    }

    #[test]
    fn conversions_are_found_by_version_and_kind() {
        assert!(conversion("autoscaling/v1", "HorizontalPodAutoscaler").is_some());
        assert!(conversion("autoscaling/v2", "HorizontalPodAutoscaler").is_none());
        assert!(
            between(
                "HorizontalPodAutoscaler",
                "autoscaling/v2",
                "autoscaling/v1"
            )
            .is_some()
        );
    }
}

//! The shape of the generated schema table ([`super::schema`]) and look-ups into it.

use super::order::ORDER;
use super::schema::{KINDS, MESSAGES};

/// The Go field is a pointer: absent means nil, present means set (even to a zero value).
pub(crate) const POINTER: u8 = 1;
/// The Go json tag has `omitempty`.
pub(crate) const OMITEMPTY: u8 = 2;
/// The field is an embedded Go struct tagged `json:",inline"`: its fields join the parent's.
pub(crate) const INLINE: u8 = 4;

/// A field's proto type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ty {
    /// `string`.
    S,
    /// `bool`.
    B,
    /// `int32`.
    I32,
    /// `int64`.
    I64,
    /// `double`.
    F64,
    /// `bytes`.
    BY,
    /// A message: index into [`MESSAGES`].
    M(u16),
}

/// A field's cardinality.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Card {
    /// `optional`.
    One,
    /// `repeated`.
    Repeated,
    /// `map<string, ty>`: entries with key 1 and value 2.
    Map,
}

/// Messages whose JSON form upstream is not the object of their fields (custom `MarshalJSON`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Special {
    /// A plain object.
    None,
    /// `meta.v1.Time`: RFC 3339 seconds, or `null` when zero.
    Time,
    /// `meta.v1.MicroTime`: RFC 3339 with microseconds, or `null` when zero.
    MicroTime,
    /// `meta.v1.Duration`: Go's duration string.
    Duration,
    /// `resource.Quantity`: its string.
    Quantity,
    /// `intstr.IntOrString`: a number or a string.
    IntOrString,
    /// `runtime.RawExtension`: the embedded JSON.
    RawExtension,
    /// `meta.v1.FieldsV1`: the embedded JSON.
    FieldsV1,
    /// `apiextensions JSON`: the embedded JSON, `null` when empty.
    Json,
    /// `JSONSchemaPropsOrArray`: an array of schemas, or one schema.
    SchemaOrArray,
    /// `JSONSchemaPropsOrBool`: a schema, or a boolean.
    SchemaOrBool,
    /// `JSONSchemaPropsOrStringArray`: an array of strings, or a schema.
    SchemaOrStringArray,
    /// A named Go slice type wrapped in a message with one repeated `items` field (`Verbs`,
    /// `ExtraValue`): the array of items.
    ListWrapper,
}

/// One field of a message.
#[derive(Debug)]
pub(crate) struct Field {
    /// The field number.
    pub tag: u32,
    /// The JSON name (empty for [`INLINE`] fields).
    pub json: &'static str,
    /// The proto type (of the values, for repeated fields and maps).
    pub ty: Ty,
    /// Cardinality.
    pub card: Card,
    /// [`POINTER`], [`OMITEMPTY`], [`INLINE`].
    pub flags: u8,
}

impl Field {
    pub(crate) fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// One message type.
#[derive(Debug)]
pub(crate) struct Message {
    /// The full proto name, e.g. `k8s.io.api.core.v1.Pod`.
    pub name: &'static str,
    /// How its JSON form is built.
    pub special: Special,
    /// Its fields, by ascending field number.
    pub fields: &'static [Field],
}

impl Message {
    /// The field with number `tag`.
    pub(crate) fn field(&self, tag: u32) -> Option<&'static Field> {
        self.fields
            .binary_search_by_key(&tag, |f| f.tag)
            .ok()
            .and_then(|i| self.fields.get(i))
    }
}

/// The fields of message `index` in the order its Go struct declares them (the order Go's
/// `encoding/json` writes them in).
pub(crate) fn declared_fields(index: u16) -> impl Iterator<Item = &'static Field> {
    let message = message(index);
    let order = ORDER.get(usize::from(index)).copied().unwrap_or_default();
    order
        .iter()
        .filter_map(move |&i| message.and_then(|m| m.fields.get(usize::from(i))))
}

/// The message with index `index` (indices come from the table itself, so they are in range;
/// an out-of-range index yields `None` rather than a panic).
pub(crate) fn message(index: u16) -> Option<&'static Message> {
    MESSAGES.get(usize::from(index))
}

/// Every (apiVersion, kind, message) of the top-level types.
pub(crate) fn kinds() -> &'static [(&'static str, &'static str, u16)] {
    KINDS
}

/// Every message, sorted by name (indices are those of [`Ty::M`]).
pub(crate) fn messages() -> &'static [Message] {
    MESSAGES
}

/// The message with the full proto name `name`.
pub(crate) fn message_by_name(name: &str) -> Option<u16> {
    let i = MESSAGES.binary_search_by(|m| m.name.cmp(name)).ok()?;
    u16::try_from(i).ok()
}

/// The meta/v1 option types every group version registers (`metav1.AddToGroupVersion`).
const META_OPTION_KINDS: [&str; 6] = [
    "CreateOptions",
    "DeleteOptions",
    "GetOptions",
    "ListOptions",
    "PatchOptions",
    "UpdateOptions",
];

/// The message of the object `kind` in `api_version`.
pub(crate) fn message_for_kind(api_version: &str, kind: &str) -> Option<u16> {
    let found = KINDS
        .binary_search_by(|(av, k, _)| (*av, *k).cmp(&(api_version, kind)))
        .ok()
        .and_then(|i| KINDS.get(i))
        .map(|(_, _, m)| *m);
    found.or_else(|| {
        META_OPTION_KINDS
            .contains(&kind)
            .then(|| message_for_kind("meta.k8s.io/v1", kind))
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_and_its_indices_are_in_range() {
        assert!(MESSAGES.windows(2).all(|w| w[0].name < w[1].name));
        assert!(
            KINDS
                .windows(2)
                .all(|w| (w[0].0, w[0].1) < (w[1].0, w[1].1))
        );
        for m in MESSAGES {
            assert!(
                m.fields.windows(2).all(|w| w[0].tag < w[1].tag),
                "{}",
                m.name
            );
            for f in m.fields {
                if let Ty::M(i) = f.ty {
                    assert!(message(i).is_some(), "{}.{}", m.name, f.json);
                }
                assert_eq!(f.json.is_empty(), f.has(INLINE), "{}.{}", m.name, f.tag);
            }
        }
    }

    #[test]
    fn every_message_lists_each_field_once_in_declaration_order() {
        assert_eq!(ORDER.len(), MESSAGES.len());
        for (i, m) in MESSAGES.iter().enumerate() {
            let index = u16::try_from(i).unwrap_or_default();
            let mut tags: Vec<u32> = declared_fields(index).map(|f| f.tag).collect();
            assert_eq!(tags.len(), m.fields.len(), "{}", m.name);
            tags.sort_unstable();
            assert!(tags.windows(2).all(|w| w[0] < w[1]), "{}", m.name);
        }
        let pod_spec = message_by_name("k8s.io.api.core.v1.PodSpec").unwrap_or_default();
        let first: Vec<&str> = declared_fields(pod_spec).take(4).map(|f| f.json).collect();
        assert_eq!(
            first,
            [
                "volumes",
                "initContainers",
                "containers",
                "ephemeralContainers"
            ]
        );
    }

    #[test]
    fn kinds_resolve_to_their_messages() {
        let name = |av, k| message_for_kind(av, k).and_then(message).map(|m| m.name);
        assert_eq!(name("v1", "Pod"), Some("k8s.io.api.core.v1.Pod"));
        assert_eq!(
            name("apps/v1", "Deployment"),
            Some("k8s.io.api.apps.v1.Deployment")
        );
        assert_eq!(
            name("policy/v1", "Eviction"),
            Some("k8s.io.api.policy.v1.Eviction")
        );
        assert_eq!(
            name("autoscaling/v1", "Scale"),
            Some("k8s.io.api.autoscaling.v1.Scale")
        );
        assert_eq!(
            name("apps/v1", "DeleteOptions"),
            Some("k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions")
        );
        assert_eq!(
            name("v1", "ConfigMapList"),
            Some("k8s.io.api.core.v1.ConfigMapList")
        );
        assert_eq!(
            name("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
            Some(
                "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition"
            )
        );
        assert_eq!(name("v1", "Container"), None);
        assert_eq!(name("apps/v1", "Pod"), None);
    }
}

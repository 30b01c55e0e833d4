//! The hook through which per-field OpenAPI extensions are attached to the generated schemas.
//!
//! `k8s-openapi`'s schemas carry descriptions and types but not the merge metadata upstream puts
//! on fields: `x-kubernetes-patch-strategy` / `x-kubernetes-patch-merge-key` (strategic merge
//! patch) and `x-kubernetes-list-type` / `x-kubernetes-list-map-keys` / `x-kubernetes-map-type`
//! (server-side apply). That table lives with the strategic-merge-patch code; this function is
//! the single place where the document builder asks for it, once per property of every
//! definition, for both the v2 and the v3 documents.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::{Map, Value};

use crate::strategic::metadata::{FIELD_PATCHES, FieldPatch};

/// The extensions to add to property `field` of definition `definition` (an upstream definition
/// name such as `io.k8s.api.core.v1.PodSpec`), e.g.
/// `{"x-kubernetes-patch-strategy": "merge", "x-kubernetes-patch-merge-key": "name"}` for
/// `containers`, from the strategic-merge-patch table (one source for both). kubectl computes
/// the patches of `apply` and `edit` from these.
pub fn field_extensions(definition: &str, field: &str) -> Map<String, Value> {
    let mut extensions = Map::new();
    if let Some(entry) = index().get(&(definition, field)) {
        for (key, value) in entry.openapi_extensions() {
            extensions.insert(key.to_owned(), Value::from(value));
        }
    }
    extensions
}

type Index = HashMap<(&'static str, &'static str), &'static FieldPatch>;

/// The table by definition and field, built once.
fn index() -> &'static Index {
    static INDEX: OnceLock<Index> = OnceLock::new();
    INDEX.get_or_init(|| {
        FIELD_PATCHES
            .iter()
            .map(|e| ((e.definition, e.field), e))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_metadata_comes_from_the_strategic_table() {
        let containers = field_extensions("io.k8s.api.core.v1.PodSpec", "containers");
        assert_eq!(containers["x-kubernetes-patch-strategy"], "merge");
        assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
        assert!(field_extensions("io.k8s.api.core.v1.PodSpec", "hostname").is_empty());
    }
}

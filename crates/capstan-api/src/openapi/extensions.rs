//! The hook through which per-field OpenAPI extensions are attached to the generated schemas.
//!
//! `k8s-openapi`'s schemas carry descriptions and types but not the merge metadata upstream puts
//! on fields: `x-kubernetes-patch-strategy` / `x-kubernetes-patch-merge-key` (strategic merge
//! patch) and `x-kubernetes-list-type` / `x-kubernetes-list-map-keys` / `x-kubernetes-map-type`
//! (server-side apply). That table lives with the strategic-merge-patch code; this function is
//! the single place where the document builder asks for it, once per property of every
//! definition, for both the v2 and the v3 documents.

use serde_json::{Map, Value};

/// The extensions to add to property `field` of definition `definition` (an upstream definition
/// name such as `io.k8s.api.core.v1.PodSpec`), e.g.
/// `{"x-kubernetes-patch-strategy": "merge", "x-kubernetes-patch-merge-key": "name"}` for
/// `containers`. Keys already present on the property are overwritten.
///
/// The strategic-merge-patch table plugs in here; until it does, no field carries merge
/// metadata and clients treat every list as atomic when they compute patches.
pub fn field_extensions(definition: &str, field: &str) -> Map<String, Value> {
    let _ = (definition, field);
    Map::new()
}

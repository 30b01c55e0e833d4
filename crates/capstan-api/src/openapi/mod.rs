//! The OpenAPI documents the API server serves, generated from the resource catalogue and from
//! `k8s-openapi`'s schemas (through `schemars`), in upstream's shape:
//!
//! - `/openapi/v3` ([`v3_root`]) lists one document per discovery path (`api`, `api/v1`, `apis`,
//!   `apis/<group>`, `apis/<group>/<version>`, `version`), each at
//!   `/openapi/v3/<path>?hash=<HASH>` ([`v3_document_at`], [`v3_document`], [`v3_hash`]);
//! - `/openapi/v2` ([`v2_document`]) is the Swagger 2.0 document of every path, also in gnostic's
//!   protobuf form ([`v2_protobuf`]), which is the only form client-go's v2 client reads.
//!
//! Definitions carry upstream's names (`io.k8s.api.apps.v1.Deployment`) and
//! `x-kubernetes-group-version-kind`; operations carry upstream's operation ids,
//! `x-kubernetes-action`, `x-kubernetes-group-version-kind` and query parameters. kubectl relies on
//! two of these: it decides that the server validates fields itself when the `PATCH` operation
//! whose `x-kubernetes-group-version-kind` is the object's kind lists a `fieldValidation` parameter
//! (both in v3 and, as a fallback, v2), and `kubectl explain` finds a kind's schema through the
//! group-version-kind of the operations at the resource's path and of the definitions.
//!
//! Every document is built once, on first use, and kept (see [`stats`] for the cost). Custom
//! resources are published beside them by [`custom::publish`], which the API server calls
//! again whenever the CRDs served change.

pub mod custom;
mod definitions;
pub mod extensions;
mod operations;
mod protobuf;
mod v2;
mod v3;

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use crate::sha512_hex;
use definitions::{Definitions, sorted};

/// The media types a client asks for the protobuf form of the v2 document ([`v2_protobuf`])
/// with: client-go sends the first; upstream serves both.
pub const V2_PROTOBUF_ACCEPT: [&str; 2] = [
    "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
];

/// The `Content-Type` of the protobuf form of the v2 document, whichever of
/// [`V2_PROTOBUF_ACCEPT`] was asked for (an `@` in it is rejected by Go's media type parser).
pub const V2_PROTOBUF_CONTENT_TYPE: &str =
    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// One serialised document and its hash.
#[derive(Debug)]
pub struct Document {
    /// The document as a JSON value.
    pub value: Value,
    /// Its compact JSON serialisation, as served.
    pub json: Vec<u8>,
    /// Upper-case hex SHA-512 of [`Document::json`]: the `hash` query of its URL and its ETag.
    pub hash: String,
}

impl Document {
    fn new(value: Value) -> Document {
        let value = sorted(value);
        let json = serde_json::to_vec(&value).unwrap_or_default();
        let hash = sha512_hex(&json);
        Document { value, json, hash }
    }
}

/// Every document, built together.
#[derive(Debug)]
struct Documents {
    v3: BTreeMap<String, Arc<Document>>,
    v2: Arc<Document>,
    v2_protobuf: Arc<Vec<u8>>,
    stats: Stats,
}

/// What building the documents cost.
#[derive(Clone, Debug)]
pub struct Stats {
    /// Wall time of generating every document, hashes and the protobuf form included.
    pub build_time: Duration,
    /// Number of v3 documents.
    pub v3_documents: usize,
    /// Bytes of every v3 document together (compact JSON).
    pub v3_bytes: usize,
    /// Bytes of the largest v3 document, and its path.
    pub v3_largest: (String, usize),
    /// Bytes of the v2 document (compact JSON).
    pub v2_bytes: usize,
    /// Bytes of the v2 document in protobuf.
    pub v2_protobuf_bytes: usize,
    /// Number of definitions in the v2 document.
    pub v2_definitions: usize,
}

fn documents() -> &'static Documents {
    static DOCUMENTS: OnceLock<Documents> = OnceLock::new();
    DOCUMENTS.get_or_init(build)
}

fn build() -> Documents {
    let start = Instant::now();
    let defs = Definitions::build();
    let mut v3 = BTreeMap::new();
    for path in operations::document_paths() {
        if let Some(items) = operations::document(&defs, &path) {
            v3.insert(path, Arc::new(Document::new(v3::document(&defs, &items))));
        }
    }
    let v2 = Arc::new(Document::new(v2::document(&defs)));
    let v2_protobuf = Arc::new(protobuf::encode_document(&v2.value));
    let largest = v3
        .iter()
        .map(|(path, doc)| (path.clone(), doc.json.len()))
        .max_by_key(|(_, len)| *len)
        .unwrap_or_default();
    let stats = Stats {
        build_time: start.elapsed(),
        v3_documents: v3.len(),
        v3_bytes: v3.values().map(|doc| doc.json.len()).sum(),
        v3_largest: largest,
        v2_bytes: v2.json.len(),
        v2_protobuf_bytes: v2_protobuf.len(),
        v2_definitions: v2.value["definitions"].as_object().map_or(0, Map::len),
    };
    Documents {
        v3,
        v2,
        v2_protobuf,
        stats,
    }
}

/// The path of the v3 document of a group-version: `api/v1`, `apis/apps/v1`.
pub fn group_version_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: every document with its server-relative URL,
/// `{"paths": {"api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=<HASH>"}, ...}}`.
pub fn v3_root() -> Value {
    let paths: Map<String, Value> = documents()
        .v3
        .iter()
        .map(|(path, doc)| {
            (
                path.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={}", doc.hash)}),
            )
        })
        .collect();
    json!({ "paths": paths })
}

/// `/openapi/v3/<path>`: the OpenAPI 3.0 document at root-relative `path` (`api/v1`,
/// `apis/apps/v1`, `apis/apps`, `api`, `apis`, `version`), or `None` for a path the root does not
/// list.
pub fn v3_document_at(path: &str) -> Option<Arc<Document>> {
    documents().v3.get(path.trim_matches('/')).cloned()
}

/// `/openapi/v3/api/v1`, `/openapi/v3/apis/<group>/<version>`: the OpenAPI 3.0 document of one
/// group-version served by the catalogue.
pub fn v3_document(group: &str, version: &str) -> Option<Arc<Document>> {
    v3_document_at(&group_version_path(group, version))
}

/// The hash of the v3 document of a group-version, for its `?hash=` query and ETag.
pub fn v3_hash(group: &str, version: &str) -> Option<String> {
    v3_document(group, version).map(|doc| doc.hash.clone())
}

/// `/openapi/v2` in JSON: the Swagger 2.0 document of every path.
pub fn v2_document() -> Arc<Document> {
    documents().v2.clone()
}

/// `/openapi/v2` in protobuf (asked for with one of [`V2_PROTOBUF_ACCEPT`], served as
/// [`V2_PROTOBUF_CONTENT_TYPE`]): the v2 document as gnostic's `openapi.v2.Document`.
pub fn v2_protobuf() -> Arc<Vec<u8>> {
    documents().v2_protobuf.clone()
}

/// What building the documents cost (builds them if not yet built).
pub fn stats() -> Stats {
    documents().stats.clone()
}

#[cfg(test)]
mod tests;

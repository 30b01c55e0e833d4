//! Rendering of the OpenAPI 3.0 documents served under `/openapi/v3/<path>`: one per group-version
//! (and per discovery path), each holding its paths and the closure of the definitions they
//! reference under `components.schemas`.

use serde_json::{Map, Value, json};

use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;

use super::definitions::{Definitions, name_of, reference};
use super::operations::{Body, In, Operation, Param, PathItem};

/// The OpenAPI 3.0 document of `items`.
pub(crate) fn document(defs: &Definitions, items: &[PathItem]) -> Value {
    let mut paths = Map::new();
    for item in items {
        paths.insert(item.path.clone(), path_item(item));
    }
    let paths = Value::Object(paths);
    let mut schemas = Map::new();
    for (name, mut schema) in defs.closure([&paths]) {
        wrap_refs(&mut schema);
        schemas.insert(name, schema);
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": crate::kubernetes_version()},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "BearerToken": {
                    "description": "Bearer Token authentication",
                    "in": "header",
                    "name": "authorization",
                    "type": "apiKey",
                },
            },
        },
        "security": [{"BearerToken": []}],
    })
}

fn path_item(item: &PathItem) -> Value {
    let mut out = Map::new();
    if !item.params.is_empty() {
        out.insert("parameters".into(), params(&item.params));
    }
    for operation in &item.operations {
        out.insert(operation.method.key().into(), operation_value(operation));
    }
    Value::Object(out)
}

fn params(params: &[Param]) -> Value {
    params
        .iter()
        .map(|p| {
            let mut param = json!({
                "name": p.name,
                "in": p.location.key(),
                "description": p.description,
                "schema": {"type": p.ty, "uniqueItems": true},
            });
            if p.location == In::Path {
                param["required"] = Value::Bool(true);
            }
            param
        })
        .collect()
}

fn content(media_types: &[&str], schema: &Value) -> Value {
    media_types
        .iter()
        .map(|m| ((*m).to_owned(), json!({ "schema": schema })))
        .collect::<Map<String, Value>>()
        .into()
}

fn operation_value(op: &Operation) -> Value {
    let mut out = Map::new();
    out.insert("operationId".into(), op.id.clone().into());
    out.insert("description".into(), op.description.clone().into());
    out.insert("tags".into(), json!([op.tag]));
    if !op.params.is_empty() {
        out.insert("parameters".into(), params(&op.params));
    }
    match &op.body {
        Some(Body::Object(def)) => {
            out.insert(
                "requestBody".into(),
                json!({"content": content(&["*/*"], &reference(def)), "required": true}),
            );
        }
        Some(Body::Patch(media_types)) => {
            let patch = reference(&name_of::<meta::Patch>());
            out.insert(
                "requestBody".into(),
                json!({"content": content(media_types, &patch), "required": true}),
            );
        }
        Some(Body::DeleteOptions) => {
            let options = reference(&name_of::<meta::DeleteOptions>());
            out.insert(
                "requestBody".into(),
                json!({"content": content(&["*/*"], &options)}),
            );
        }
        None => {}
    }
    let schema = op.response.schema();
    let mut responses = Map::new();
    for (code, description) in op.responses.codes() {
        responses.insert(
            (*code).to_owned(),
            json!({
                "description": description,
                "content": content(op.responses.media_types(), &schema),
            }),
        );
    }
    responses.insert("401".into(), json!({"description": "Unauthorized"}));
    out.insert("responses".into(), responses.into());
    op.insert_extensions(&mut out);
    Value::Object(out)
}

/// Upstream's v3 form of a reference with siblings (a description, a default):
/// `{"allOf": [{"$ref": ..}], "description": ..}`, since OpenAPI 3.0 ignores the siblings of a
/// `$ref`.
pub(crate) fn wrap_refs(value: &mut Value) {
    match value {
        Value::Object(object) => {
            if object.len() > 1
                && let Some(reference) = object.remove("$ref")
            {
                object.insert("allOf".into(), json!([{ "$ref": reference }]));
            }
            for (key, child) in object.iter_mut() {
                if !key.starts_with("x-") && key != "enum" && key != "default" && key != "example" {
                    wrap_refs(child);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(wrap_refs),
        _ => {}
    }
}

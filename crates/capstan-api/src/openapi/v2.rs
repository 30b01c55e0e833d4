//! Rendering of the Swagger 2.0 document served at `/openapi/v2`: every path of every document,
//! and every definition they reference under `definitions` (references as `#/definitions/...`,
//! siblings of a `$ref` kept beside it as upstream's v2 document has them).

use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use serde_json::{Map, Value, json};

use super::definitions::{Definitions, name_of, reference, v2_refs};
use super::operations::{self, Body, In, Operation, Param, PathItem};

/// The Swagger 2.0 document of every path.
pub(crate) fn document(defs: &Definitions) -> Value {
    let mut paths = Map::new();
    for path in operations::document_paths() {
        for item in operations::document(defs, &path).unwrap_or_default() {
            paths.insert(item.path.clone(), path_item(&item));
        }
    }
    let paths = Value::Object(paths);
    let definitions: Map<String, Value> = defs.closure([&paths]).into_iter().collect();
    let mut document = json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": crate::kubernetes_version()},
        "paths": paths,
        "definitions": definitions,
        "security": [{"BearerToken": []}],
        "securityDefinitions": {
            "BearerToken": {
                "description": "Bearer Token authentication",
                "in": "header",
                "name": "authorization",
                "type": "apiKey",
            },
        },
    });
    v2_refs(&mut document);
    document
}

pub(crate) fn path_item(item: &PathItem) -> Value {
    let mut out = Map::new();
    if !item.params.is_empty() {
        out.insert(
            "parameters".into(),
            item.params.iter().map(param).collect::<Vec<_>>().into(),
        );
    }
    for operation in &item.operations {
        out.insert(operation.method.key().into(), operation_value(operation));
    }
    Value::Object(out)
}

fn param(p: &Param) -> Value {
    let mut param = json!({
        "name": p.name,
        "in": p.location.key(),
        "description": p.description,
        "type": p.ty,
        "uniqueItems": true,
    });
    if p.location == In::Path {
        param["required"] = Value::Bool(true);
    }
    param
}

fn body_param(schema: Value, required: bool) -> Value {
    let mut body = json!({"name": "body", "in": "body", "schema": schema});
    if required {
        body["required"] = Value::Bool(true);
    }
    body
}

fn operation_value(op: &Operation) -> Value {
    let mut params: Vec<Value> = Vec::new();
    let consumes: &[&str] = match &op.body {
        Some(Body::Object(def)) => {
            params.push(body_param(reference(def), true));
            &["*/*"]
        }
        Some(Body::Patch(media_types)) => {
            params.push(body_param(reference(&name_of::<meta::Patch>()), true));
            media_types
        }
        Some(Body::DeleteOptions) => {
            params.push(body_param(
                reference(&name_of::<meta::DeleteOptions>()),
                false,
            ));
            &["*/*"]
        }
        None => &["*/*"],
    };
    params.extend(op.params.iter().map(param));

    let schema = op.response.schema();
    let mut responses = Map::new();
    for (code, description) in op.responses.codes() {
        responses.insert(
            (*code).to_owned(),
            json!({"description": description, "schema": schema}),
        );
    }
    responses.insert("401".into(), json!({"description": "Unauthorized"}));

    let mut out = Map::new();
    out.insert("operationId".into(), op.id.clone().into());
    out.insert("description".into(), op.description.clone().into());
    out.insert("tags".into(), json!([op.tag]));
    out.insert("consumes".into(), json!(consumes));
    out.insert("produces".into(), json!(op.responses.media_types()));
    out.insert("schemes".into(), json!(["https"]));
    if !params.is_empty() {
        out.insert("parameters".into(), params.into());
    }
    out.insert("responses".into(), responses.into());
    op.insert_extensions(&mut out);
    Value::Object(out)
}

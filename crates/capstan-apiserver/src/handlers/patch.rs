//! PATCH: JSON merge patch (RFC 7396), JSON patch (RFC 6902) and strategic merge patch, applied
//! to the current object inside the registry's compare-and-swap loop, so a patch that loses a
//! race is re-applied to the newer object unless it pinned a `resourceVersion`.

use capstan_api::StatusError;
use capstan_api::field::{FieldError, Path};
use serde_json::Value;

use crate::registry::object::meta_str;
use crate::registry::strict::{self, Problem};
use crate::registry::{FieldValidation, Registry, WriteOptions, Written, parse_resource_version};
use crate::status::ApiError;

/// The patch formats a PATCH request may carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PatchType {
    Json,
    Merge,
    Strategic,
    /// Server-side apply: a YAML or JSON configuration.
    Apply,
}

const ACCEPTED: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
];

/// Whether a `Content-Type` is server-side apply's.
pub(crate) fn is_apply(content_type: Option<&str>) -> bool {
    matches!(patch_type(content_type), Ok(PatchType::Apply))
}

fn patch_type(content_type: Option<&str>) -> Result<PatchType, ApiError> {
    let mime = content_type
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim();
    match mime {
        "application/json-patch+json" => Ok(PatchType::Json),
        "application/merge-patch+json" => Ok(PatchType::Merge),
        "application/strategic-merge-patch+json" => Ok(PatchType::Strategic),
        "application/apply-patch+yaml" => Ok(PatchType::Apply),
        _ => Err(StatusError::unsupported_media_type(ACCEPTED).into()),
    }
}

/// Applies a PATCH body to a `Scale` (the scale subresource's view of its parent).
pub(crate) fn apply_to_scale(
    scale: &Value,
    content_type: Option<&str>,
    body: &[u8],
) -> Result<Value, ApiError> {
    let kind = patch_type(content_type)?;
    if kind == PatchType::Apply {
        return Err(StatusError::unsupported_media_type(&ACCEPTED[..3]).into());
    }
    let patch = decode_patch(kind, body)?;
    match kind {
        PatchType::Strategic => {
            let meta = capstan_api::strategic::for_kind("autoscaling", "v1", "Scale").ok_or_else(
                || ApiError::from(capstan_api::strategic::custom_resource_rejection()),
            )?;
            capstan_api::strategic::apply(scale, &patch, meta).map_err(|e| e.to_status().into())
        }
        _ => apply_generic(kind, scale, &patch),
    }
}

/// Parses a patch body and checks its shape for its type.
pub(crate) fn decode_patch(kind: PatchType, body: &[u8]) -> Result<Value, ApiError> {
    if kind == PatchType::Apply {
        let config: Value = serde_saphyr::from_slice(body).map_err(|e| {
            ApiError::from(StatusError::bad_request(&format!(
                "error decoding patch: {e}"
            )))
        })?;
        if !config.is_object() {
            return Err(StatusError::bad_request(
                "error decoding patch: the configuration must be an object",
            )
            .into());
        }
        return Ok(config);
    }
    let patch: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::from(StatusError::bad_request(&format!(
            "error decoding patch: {e}"
        )))
    })?;
    match kind {
        PatchType::Json if !patch.is_array() => Err(StatusError::bad_request(
            "json: cannot unmarshal object into Go value of type jsonpatch.Patch",
        )
        .into()),
        PatchType::Merge | PatchType::Strategic if !patch.is_object() => {
            Err(StatusError::bad_request("the patch must be a JSON object").into())
        }
        _ => Ok(patch),
    }
}

/// JSON merge patch and JSON patch, which need no type information.
pub(crate) fn apply_generic(
    kind: PatchType,
    original: &Value,
    patch: &Value,
) -> Result<Value, ApiError> {
    match kind {
        PatchType::Json => {
            let ops: json_patch::Patch = serde_json::from_value(patch.clone())
                .map_err(|e| ApiError::from(StatusError::bad_request(&e.to_string())))?;
            let mut doc = original.clone();
            json_patch_as_upstream(&mut doc, &ops)
                .map_err(|e| ApiError::from(StatusError::unprocessable(&e.to_string())))?;
            Ok(doc)
        }
        _ => {
            let mut doc = original.clone();
            json_patch::merge(&mut doc, patch);
            Ok(doc)
        }
    }
}

/// Applies the JSON patch `ops` to `doc` in order, as upstream's JSON patch library does: a
/// `test` of `null` passes where the member is missing but its parent exists (RFC 6902 would
/// fail it; kube-rs's finalizer helper tests `/metadata/finalizers` so before adding the first
/// finalizer). `doc` is a copy: after an error it is dropped.
fn json_patch_as_upstream(
    doc: &mut Value,
    ops: &json_patch::Patch,
) -> Result<(), json_patch::PatchError> {
    for (index, op) in ops.0.iter().enumerate() {
        if let json_patch::PatchOperation::Test(test) = op
            && test.value.is_null()
            && doc.pointer(test.path.as_str()).is_none()
            && test
                .path
                .parent()
                .is_some_and(|parent| doc.pointer(parent.as_str()).is_some())
        {
            continue;
        }
        json_patch::patch_unsafe(doc, std::slice::from_ref(op)).map_err(|mut e| {
            e.operation = index;
            e
        })?;
    }
    Ok(())
}

/// Applies a patch document to `original`.
fn apply(
    kind: PatchType,
    original: &Value,
    patch: &Value,
    registry: &Registry,
) -> Result<Value, ApiError> {
    match kind {
        PatchType::Strategic => {
            crate::handlers::strategic::apply(registry.resource, original, patch)
        }
        _ => apply_generic(kind, original, patch),
    }
}

/// A PATCH body and its content type.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PatchBody<'a> {
    /// The `Content-Type`, which names the patch format.
    pub content_type: Option<&'a str>,
    /// The patch document.
    pub bytes: &'a [u8],
}

/// What upstream's strict decoding of a patch document finds, before the patch applies: fields
/// an object of the patch repeats and, for a JSON patch, fields an operation does not have.
pub(crate) fn patch_problems(
    kind: PatchType,
    body: &[u8],
    validation: FieldValidation,
) -> Vec<String> {
    if validation == FieldValidation::Ignore {
        return Vec::new();
    }
    match kind {
        PatchType::Json => strict::json_patch_problems(body)
            .iter()
            .map(|problem| format!("json patch {problem}"))
            .collect(),
        PatchType::Merge | PatchType::Strategic => strict::json_duplicates(body)
            .iter()
            .map(Problem::to_string)
            .collect(),
        PatchType::Apply => Vec::new(),
    }
}

/// Reports the problems of a patch and the unknown fields of its result per `fieldValidation`:
/// a warning each under Warn; under Strict, upstream's 422 naming the patch, shown as `shown`
/// gives it (the patched object for JSON and merge patches, the patch as Go prints it for
/// strategic ones).
fn report(
    validation: FieldValidation,
    patch_problems: &[String],
    unknown: &[String],
    shown: impl FnOnce() -> String,
    warnings: &mut Vec<String>,
) -> Result<(), ApiError> {
    if validation == FieldValidation::Ignore || (patch_problems.is_empty() && unknown.is_empty()) {
        return Ok(());
    }
    let problems = patch_problems.iter().cloned().chain(
        unknown
            .iter()
            .take(strict::MAX_PROBLEMS)
            .map(|path| Problem::Unknown(path.clone()).to_string()),
    );
    if validation == FieldValidation::Warn {
        warnings.extend(problems);
        return Ok(());
    }
    let detail = format!(
        "strict decoding error: {}",
        problems.collect::<Vec<_>>().join(", ")
    );
    Err(StatusError::invalid(
        "",
        "",
        "",
        &[FieldError::invalid(&Path::new("patch"), shown(), &detail)],
    )
    .into())
}

/// Patches the object `name`.
pub(crate) async fn patch(
    registry: &Registry,
    namespace: Option<&str>,
    name: &str,
    subresource: Option<&str>,
    body: PatchBody<'_>,
    options: &WriteOptions,
) -> Result<Written, ApiError> {
    let PatchBody {
        content_type,
        bytes: body,
    } = body;
    let kind = patch_type(content_type)?;
    let patch = decode_patch(kind, body)?;
    let patch_problems = patch_problems(kind, body, options.field_validation);
    // A patch that sets metadata.resourceVersion makes the write conditional on it.
    let pinned = patch
        .get("metadata")
        .and_then(|m| m.get("resourceVersion"))
        .and_then(Value::as_str)
        .filter(|v| !v.is_empty())
        .map(|v| {
            parse_resource_version(v).map_err(|()| {
                ApiError::from(StatusError::bad_request(&format!(
                    "invalid resourceVersion {v:?}"
                )))
            })
        })
        .transpose()?;
    let key = registry.resource.storage_key(namespace, name);
    if kind == PatchType::Apply {
        return apply_configuration(
            registry,
            ApplyTarget {
                key: &key,
                namespace,
                name,
                subresource,
                pinned,
            },
            &patch,
            options,
        )
        .await;
    }
    let mut warnings = Vec::new();
    let mut written = registry
        .guaranteed_update(&key, name, pinned, subresource, options, |old| {
            let Some(old) = old else {
                return Err(StatusError::not_found(
                    capstan_api::GroupResource::new(
                        registry.resource.group,
                        registry.resource.plural,
                    ),
                    name,
                )
                .into());
            };
            let mut patched = apply(kind, old, &patch, registry)?;
            if meta_str(&patched, "name") != name {
                return Err(StatusError::bad_request(&format!(
                    "the name of the object ({}) does not match the name on the URL ({name})",
                    meta_str(&patched, "name")
                ))
                .into());
            }
            warnings.clear();
            let (decoded, unknown) = registry.decode_patched(&mut patched)?;
            report(
                options.field_validation,
                &patch_problems,
                &unknown,
                || match kind {
                    PatchType::Strategic => strict::go_format(&patch),
                    _ => patched.to_string(),
                },
                &mut warnings,
            )?;
            Ok(decoded)
        })
        .await?;
    warnings.append(&mut written.warnings);
    written.warnings = warnings;
    Ok(written)
}

/// Where an apply goes.
struct ApplyTarget<'a> {
    key: &'a str,
    namespace: Option<&'a str>,
    name: &'a str,
    subresource: Option<&'a str>,
    pinned: Option<capstan_store::Revision>,
}

/// Server-side apply of `config`, creating the object when it does not exist.
async fn apply_configuration(
    registry: &Registry,
    target: ApplyTarget<'_>,
    config: &Value,
    options: &WriteOptions,
) -> Result<Written, ApiError> {
    let writer = options.writer.clone().unwrap_or_default();
    let name = target.name;
    let endpoint = registry.endpoint(target.subresource);
    // The apply records itself; the update loop must not record it again.
    let inner = WriteOptions {
        writer: None,
        force_allow_create: true,
        ..options.clone()
    };
    let mut warnings = Vec::new();
    let mut written = registry
        .guaranteed_update(
            target.key,
            name,
            target.pinned,
            target.subresource,
            &inner,
            |old| {
                let mut applied = endpoint.apply(old, config, &writer)?;
                registry.check_namespace(&mut applied, target.namespace)?;
                if meta_str(&applied, "name") != name {
                    return Err(StatusError::bad_request(&format!(
                        "the name of the object ({}) does not match the name on the URL ({name})",
                        meta_str(&applied, "name")
                    ))
                    .into());
                }
                warnings.clear();
                let (decoded, unknown) = registry.decode_patched(&mut applied)?;
                report(
                    options.field_validation,
                    &[],
                    &unknown,
                    || applied.to_string(),
                    &mut warnings,
                )?;
                Ok(decoded)
            },
        )
        .await?;
    warnings.append(&mut written.warnings);
    written.warnings = warnings;
    Ok(written)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn patched(doc: Value, ops: Value) -> Result<Value, String> {
        let ops: json_patch::Patch = serde_json::from_value(ops).unwrap_or_else(|e| panic!("{e}"));
        let mut doc = doc;
        json_patch_as_upstream(&mut doc, &ops).map_err(|e| e.to_string())?;
        Ok(doc)
    }

    #[test]
    fn a_test_of_null_passes_on_a_missing_member_as_upstreams() {
        let finalize = json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["f"]},
        ]);
        let doc = json!({"metadata": {"name": "x"}});
        assert_eq!(
            patched(doc.clone(), finalize.clone()),
            Ok(json!({"metadata": {"name": "x", "finalizers": ["f"]}}))
        );
        // A member that is there must be null; a missing parent still fails.
        let held = json!({"metadata": {"name": "x", "finalizers": ["g"]}});
        assert!(patched(held, finalize).is_err());
        let orphan = json!([{"op": "test", "path": "/spec/x", "value": null}]);
        assert!(patched(doc.clone(), orphan).is_err());
        // Errors name the failing operation's index in the whole patch.
        let second = json!([
            {"op": "add", "path": "/metadata/labels", "value": {}},
            {"op": "remove", "path": "/metadata/nothing"},
        ]);
        let err = patched(doc, second).unwrap_err();
        assert!(err.contains("'/1'"), "{err}");
    }
}

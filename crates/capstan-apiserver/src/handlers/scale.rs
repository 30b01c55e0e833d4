//! The `scale` subresource: an `autoscaling/v1` `Scale` view of a workload's replicas, read from
//! and written to the parent object (deployments, replica sets, stateful sets, replication
//! controllers, custom objects whose CRD declares `scale`) through the parent's registry, so
//! the parent's rules and concurrency apply. Where the replicas and selector are is the
//! subresource's [`ScalePaths`]: `.spec.replicas`, `.status.replicas` and `spec.selector` for
//! the built-in workloads, the CRD's paths for custom objects (a missing count reads as 0, as
//! upstream's).
//!
//! A write of the scale is admitted as upstream's `ScaleREST` admits it (`ScaleAdmission`,
//! wrapping the request's admission): the admission chain sees `autoscaling/v1` `Scale`
//! objects, not the parent. The mutating phase gets the `Scale` the request asks for (its body,
//! or the patch applied to the current one, with the URL's name and namespace) and the current
//! `Scale` as the old object, and may change its `spec.replicas`; the count is then checked (a
//! negative one is an `Invalid` `Scale`) and written to the parent. The validating phase gets
//! the `Scale`s of the parent about to be stored and of the stored one.

use std::sync::{Arc, Mutex};

use capstan_api::catalog::{Resource, ScalePaths};
use capstan_api::field::{FieldError, Path};
use capstan_api::selector::LabelSelector;
use capstan_api::{GroupResource, StatusError};
use futures::future::BoxFuture;
use serde_json::{Value, json};

use crate::registry::object::meta_str;
use crate::registry::{Admission, Registry, WriteOptions, Written, parse_resource_version};
use crate::status::ApiError;

/// The selector of the parent in the string form `Scale.status.selector` carries.
fn selector_string(parent: &Value) -> String {
    let selector = &parent["spec"]["selector"];
    if selector.get("matchLabels").is_some() || selector.get("matchExpressions").is_some() {
        // A metav1.LabelSelector (apps/v1 kinds).
        let typed = serde_json::from_value(selector.clone()).ok();
        return LabelSelector::from_api(typed.as_ref())
            .map(|s| s.to_string())
            .unwrap_or_default();
    }
    // A plain map (replication controllers).
    let mut pairs: Vec<String> = selector
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some(format!("{k}={}", v.as_str()?)))
                .collect()
        })
        .unwrap_or_default();
    pairs.sort();
    pairs.join(",")
}

/// The JSON pointer of a dot-separated field path (`.spec.replicas` → `/spec/replicas`).
fn pointer(path: &str) -> String {
    path.split('.')
        .filter(|field| !field.is_empty())
        .map(|field| format!("/{}", field.replace('~', "~0").replace('/', "~1")))
        .collect()
}

/// Sets the field at a dot-separated path, making the objects on the way.
fn set_path(object: &mut Value, path: &str, value: Value) {
    let fields: Vec<&str> = path.split('.').filter(|f| !f.is_empty()).collect();
    let Some((last, parents)) = fields.split_last() else {
        return;
    };
    let mut at = object;
    for field in parents {
        if !at[*field].is_object() {
            at[*field] = json!({});
        }
        at = &mut at[*field];
    }
    at[*last] = value;
}

/// The `Scale` of a parent object.
pub(crate) fn scale_of(parent: &Value, paths: &ScalePaths) -> Value {
    let meta = &parent["metadata"];
    let mut metadata = json!({
        "name": meta["name"],
        "namespace": meta["namespace"],
        "uid": meta["uid"],
        "resourceVersion": meta["resourceVersion"],
        "creationTimestamp": meta["creationTimestamp"],
    });
    if let Some(map) = metadata.as_object_mut() {
        map.retain(|_, v| !v.is_null());
    }
    let count = |path: &str| {
        parent
            .pointer(&pointer(path))
            .and_then(Value::as_i64)
            .unwrap_or(0)
    };
    let mut status = json!({"replicas": count(paths.status_replicas)});
    let selector = match paths.label_selector {
        Some(path) => parent
            .pointer(&pointer(path))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        None => selector_string(parent),
    };
    if !selector.is_empty() {
        status["selector"] = selector.into();
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": metadata,
        "spec": {"replicas": count(paths.spec_replicas)},
        "status": status,
    })
}

/// Reads the scale of `name`.
pub(crate) async fn get(
    registry: &Registry,
    paths: &ScalePaths,
    namespace: Option<&str>,
    name: &str,
) -> Result<Value, ApiError> {
    Ok(scale_of(&registry.get(namespace, name).await?, paths))
}

/// How the new scale is computed from the current one.
pub(crate) enum ScaleChange<'a> {
    /// A PUT of a whole `Scale`.
    Replace(Value),
    /// A PATCH of the `Scale`, in the given content type.
    Patch {
        content_type: Option<&'a str>,
        body: &'a [u8],
    },
}

/// The desired replicas of a `Scale`, which must be an integer (none is 0).
fn count(scale: &Value) -> Result<i64, ApiError> {
    match &scale["spec"]["replicas"] {
        Value::Null => Ok(0),
        value => value.as_i64().ok_or_else(|| {
            ApiError::from(StatusError::bad_request("spec.replicas must be an integer"))
        }),
    }
}

/// The desired replicas of a `Scale`: an integer, and not negative (upstream's
/// `ValidateScale`).
fn replicas_of(scale: &Value, name: &str) -> Result<i64, ApiError> {
    let replicas = count(scale)?;
    if replicas < 0 {
        return Err(StatusError::invalid(
            "autoscaling",
            "Scale",
            name,
            &[FieldError::invalid(
                &Path::new("spec").child("replicas"),
                replicas,
                "must be greater than or equal to 0",
            )],
        )
        .into());
    }
    Ok(replicas)
}

/// The admission of a write through `scale`: the request's admission (`inner`), shown the
/// `Scale` objects instead of the parent (see the module's documentation).
#[derive(Debug)]
struct ScaleAdmission {
    inner: Arc<dyn Admission>,
    paths: ScalePaths,
    /// The `Scale` the current attempt of the write asks for, left by its `modify`.
    desired: Arc<Mutex<Option<Value>>>,
}

impl Admission for ScaleAdmission {
    fn take_warnings(&self) -> Vec<String> {
        self.inner.take_warnings()
    }

    fn mutate<'a>(
        &'a self,
        resource: &'static Resource,
        object: &'a mut Value,
        old: Option<&'a Value>,
        dry_run: bool,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        Box::pin(async move {
            let old_scale = old.map(|old| scale_of(old, &self.paths));
            let desired = self
                .desired
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            let mut scale = desired.unwrap_or_else(|| scale_of(object, &self.paths));
            self.inner
                .mutate(resource, &mut scale, old_scale.as_ref(), dry_run)
                .await?;
            let name = meta_str(object, "name").to_owned();
            let replicas = replicas_of(&scale, &name)?;
            set_path(object, self.paths.spec_replicas, replicas.into());
            Ok(())
        })
    }

    fn validate<'a>(
        &'a self,
        resource: &'static Resource,
        object: &'a Value,
        old: Option<&'a Value>,
        dry_run: bool,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        Box::pin(async move {
            let scale = scale_of(object, &self.paths);
            let old_scale = old.map(|old| scale_of(old, &self.paths));
            self.inner
                .validate(resource, &scale, old_scale.as_ref(), dry_run)
                .await
        })
    }
}

/// Writes the scale of `name`: the parent's `spec.replicas` changes, nothing else. The
/// request's admission (`options.admission`) judges the `Scale`s; the new `Scale` and the
/// warnings of the write are returned.
pub(crate) async fn update(
    registry: &Registry,
    paths: &ScalePaths,
    namespace: Option<&str>,
    name: &str,
    change: ScaleChange<'_>,
    options: &WriteOptions,
) -> Result<(Value, Vec<String>), ApiError> {
    let key = registry.resource.storage_key(namespace, name);
    let scale_resource = GroupResource::new("autoscaling", "scale");
    let mut pinned = None;
    if let ScaleChange::Replace(body) = &change
        && let Some(rv) = body["metadata"]["resourceVersion"]
            .as_str()
            .filter(|v| !v.is_empty())
    {
        pinned = Some(parse_resource_version(rv).map_err(|()| {
            ApiError::from(StatusError::bad_request(&format!(
                "invalid resourceVersion {rv:?}"
            )))
        })?);
    }
    let desired_scale = Arc::new(Mutex::new(None));
    let mut options = options.clone();
    options.admission = options.admission.take().map(|inner| {
        Arc::new(ScaleAdmission {
            inner,
            paths: *paths,
            desired: desired_scale.clone(),
        }) as Arc<dyn Admission>
    });
    let admitted = options.admission.is_some();
    let written: Written = registry
        .guaranteed_update(&key, name, pinned, Some("scale"), &options, |old| {
            let Some(old) = old else {
                return Err(StatusError::not_found(scale_resource, name).into());
            };
            let current = scale_of(old, paths);
            let mut desired = match &change {
                ScaleChange::Replace(body) => body.clone(),
                ScaleChange::Patch { content_type, body } => {
                    crate::handlers::patch::apply_to_scale(&current, content_type.as_deref(), body)?
                }
            };
            if !meta_str(&desired, "name").is_empty() && meta_str(&desired, "name") != name {
                return Err(StatusError::bad_request(&format!(
                    "the name of the object ({}) does not match the name on the URL ({name})",
                    meta_str(&desired, "name")
                ))
                .into());
            }
            // A negative count is refused after mutating admission, which may change it.
            let replicas = if admitted {
                count(&desired)?
            } else {
                replicas_of(&desired, name)?
            };
            // Admission sees the Scale as upstream decodes it: its kind, and the name and
            // namespace of the URL.
            if admitted {
                desired["apiVersion"] = "autoscaling/v1".into();
                desired["kind"] = "Scale".into();
                if !desired["metadata"].is_object() {
                    desired["metadata"] = json!({});
                }
                desired["metadata"]["name"] = name.into();
                match namespace {
                    Some(namespace) => desired["metadata"]["namespace"] = namespace.into(),
                    None => {
                        desired["metadata"]
                            .as_object_mut()
                            .map(|m| m.remove("namespace"));
                    }
                }
                *desired_scale.lock().unwrap_or_else(|e| e.into_inner()) = Some(desired);
            }
            let mut parent = old.clone();
            set_path(&mut parent, paths.spec_replicas, replicas.into());
            Ok(parent)
        })
        .await?;
    Ok((scale_of(&written.object, paths), written.warnings))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_webhooks_scale_is_decoded_as_a_scale() {
        let patched = json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
            "metadata": {"name": "web", "namespace": "ns"}, "spec": {"replicas": 4},
            "status": {"replicas": 1}, "extra": true});
        let decoded = crate::admission::webhook::decode_scale(patched).unwrap();
        assert_eq!(decoded["spec"]["replicas"], 4);
        assert!(decoded.get("extra").is_none(), "{decoded}");
        let wrong = json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
            "spec": {"replicas": "four"}});
        let error = crate::admission::webhook::decode_scale(wrong).unwrap_err();
        assert_eq!(error.status().code(), 500);
    }

    #[test]
    fn negative_counts_are_an_invalid_scale() {
        assert_eq!(
            replicas_of(&json!({"spec": {"replicas": 3}}), "web").unwrap(),
            3
        );
        assert_eq!(replicas_of(&json!({"spec": {}}), "web").unwrap(), 0);
        let error = replicas_of(&json!({"spec": {"replicas": -1}}), "web")
            .unwrap_err()
            .status()
            .to_json();
        assert_eq!(error["code"], 422);
        assert_eq!(
            error["message"],
            "Scale.autoscaling \"web\" is invalid: spec.replicas: Invalid value: -1: must be greater than or equal to 0"
        );
        let error = replicas_of(&json!({"spec": {"replicas": "x"}}), "web").unwrap_err();
        assert_eq!(error.status().code(), 400);
    }
}

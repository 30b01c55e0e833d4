//! Conversion webhooks of CustomResourceDefinitions (`conversion.strategy: Webhook`): the
//! registry of a version that is not the storage version converts stored objects to it, and
//! written objects back, by sending a `ConversionReview` to the CRD's webhook (a URL or a
//! Service, over TLS trusting its `caBundle`), as upstream's webhook converter does. Objects
//! already in the wanted version are not sent; a list is converted in one review. What the
//! webhook returns is checked (count, `apiVersion`, kind) and keeps the original metadata but
//! for its labels and annotations, which the webhook may change.

use std::sync::{Arc, Weak};
use std::time::Duration;

use capstan_api::StatusError;
use futures::future::BoxFuture;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::WebhookConversion;
use serde_json::{Value, json};

use crate::admission::webhook::call;
use crate::admission::webhook::client::{Client, Why};
use crate::registry::{Convert, Registries};
use crate::status::ApiError;

/// How long a conversion webhook is given, as upstream gives it.
const TIMEOUT: Duration = Duration::from_secs(30);

/// A CRD's conversion webhook.
#[derive(Debug)]
pub(crate) struct Webhook {
    client: Client,
    /// The `ConversionReview` version it is sent: the first of its list the server speaks.
    review_version: Option<&'static str>,
    /// The table, to resolve a Service to its endpoints.
    table: Weak<Registries>,
}

impl Webhook {
    /// The webhook `conversion` configures, resolving Services through `table`.
    pub(crate) fn new(conversion: &WebhookConversion, table: Weak<Registries>) -> Webhook {
        // The CRD's client configuration is an admission webhook's, field for field.
        let config = serde_json::to_value(&conversion.client_config)
            .and_then(serde_json::from_value)
            .unwrap_or_default();
        Webhook {
            client: call::client(&config),
            review_version: call::review_version(&conversion.conversion_review_versions),
            table,
        }
    }

    async fn convert_now(
        &self,
        mut objects: Vec<Value>,
        desired: &str,
    ) -> Result<Vec<Value>, ApiError> {
        let pending: Vec<usize> = (0..objects.len())
            .filter(|&i| objects[i]["apiVersion"] != desired)
            .collect();
        let Some(&first) = pending.first() else {
            return Ok(objects);
        };
        let gvk = group_version_kind(&objects[first]);
        let failed = |why: String| -> ApiError {
            StatusError::internal(&format!("conversion webhook for {gvk} failed: {why}")).into()
        };
        let sent: Vec<Value> = pending.iter().map(|&i| objects[i].clone()).collect();
        let converted = self.call(&sent, desired).await.map_err(failed)?;
        if converted.len() != sent.len() {
            return Err(StatusError::internal(&format!(
                "conversion webhook for {gvk} returned {} objects, expected {}",
                converted.len(),
                sent.len()
            ))
            .into());
        }
        for (n, (&i, mut object)) in pending.iter().zip(converted).enumerate() {
            let invalid = |why: String| -> ApiError {
                StatusError::internal(&format!(
                    "conversion webhook for {gvk} returned invalid converted object at index {n}: {why}"
                ))
                .into()
            };
            let received = object["apiVersion"].as_str().unwrap_or_default();
            if received != desired {
                return Err(invalid(format!(
                    "invalid groupVersion (expected {desired}, received {received})"
                )));
            }
            let (expected, received) = (&objects[i]["kind"], &object["kind"]);
            if expected != received {
                return Err(invalid(format!(
                    "invalid kind (expected {}, received {})",
                    expected.as_str().unwrap_or_default(),
                    received.as_str().unwrap_or_default()
                )));
            }
            restore_metadata(&objects[i], &mut object).map_err(|why| -> ApiError {
                StatusError::internal(&format!(
                    "conversion webhook for {gvk} returned invalid metadata in object at index {n}: {why}"
                ))
                .into()
            })?;
            objects[i] = object;
        }
        Ok(objects)
    }

    /// Sends the review of `objects`; the converted objects the webhook answered with.
    async fn call(&self, objects: &[Value], desired: &str) -> Result<Vec<Value>, String> {
        let version = self
            .review_version
            .ok_or("webhook does not accept known ConversionReview versions (v1, v1beta1)")?;
        let table = self
            .table
            .upgrade()
            .ok_or("the API server is shutting down")?;
        let uid = crate::registry::object::new_uid();
        let review = json!({
            "apiVersion": format!("apiextensions.k8s.io/{version}"),
            "kind": "ConversionReview",
            "request": {"uid": uid, "desiredAPIVersion": desired, "objects": objects},
        });
        let url = self.client.url(TIMEOUT);
        let answer = tokio::time::timeout(TIMEOUT, self.client.post(&table, &url, &review))
            .await
            .unwrap_or_else(|_| Err(Why::Transport("context deadline exceeded".to_owned())))
            .map_err(|why| match why {
                Why::Transport(why) => {
                    format!("Post {}: {why}", capstan_api::field::go_quote(&url))
                }
                Why::Answer(why) => why,
            })?;
        let response = &answer["response"];
        let answered_uid = response["uid"].as_str().unwrap_or_default();
        if answered_uid != uid {
            return Err(format!(
                "expected response.uid={}, got {}",
                capstan_api::field::go_quote(&uid),
                capstan_api::field::go_quote(answered_uid)
            ));
        }
        let status = response["result"]["status"].as_str().unwrap_or_default();
        if status != "Success" {
            return Err(match response["result"]["message"].as_str() {
                Some(message) if !message.is_empty() => message.to_owned(),
                _ => format!("response.result.status was '{status}', not 'Success'"),
            });
        }
        Ok(response["convertedObjects"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }
}

impl Convert for Webhook {
    /// (A boxed future: resolving a Service reads through registries, which may convert
    /// again.)
    fn convert<'a>(
        &'a self,
        objects: Vec<Value>,
        desired: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Value>, ApiError>> {
        Box::pin(self.convert_now(objects, desired))
    }
}

/// Go's `GroupVersionKind.String()` of an object: `group/version, Kind=Kind`.
fn group_version_kind(object: &Value) -> String {
    format!(
        "{}, Kind={}",
        object["apiVersion"].as_str().unwrap_or_default(),
        object["kind"].as_str().unwrap_or_default()
    )
}

/// Gives `converted` the metadata of `original`, but for the labels and annotations the
/// webhook returned (string maps), as upstream keeps them.
fn restore_metadata(original: &Value, converted: &mut Value) -> Result<(), String> {
    let answered = match converted.get("metadata") {
        Some(Value::Object(meta)) => meta.clone(),
        Some(other) => {
            return Err(format!(
                "invalid metadata of type {} in converted object",
                json_type(other)
            ));
        }
        None => return Err("missing metadata in converted object".to_owned()),
    };
    let mut metadata = original
        .get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for field in ["labels", "annotations"] {
        match answered.get(field) {
            None | Some(Value::Null) => {
                metadata.remove(field);
            }
            Some(Value::Object(map)) => {
                if let Some((key, value)) = map.iter().find(|(_, v)| !v.is_string()) {
                    return Err(format!(
                        "invalid metadata.{field}[{key}]={value} of type {} in converted object",
                        json_type(value)
                    ));
                }
                metadata.insert(field.to_owned(), Value::Object(map.clone()));
            }
            Some(other) => {
                return Err(format!(
                    "invalid metadata.{field} of type {} in converted object",
                    json_type(other)
                ));
            }
        }
    }
    if let Some(object) = converted.as_object_mut() {
        object.insert("metadata".to_owned(), Value::Object(metadata));
    }
    Ok(())
}

/// The Go type a JSON value decodes to, for upstream's messages.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(_) => "int64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// The webhook of a CRD's served versions (`declared`), shared by them.
pub(crate) fn webhook_for(
    declared: &[capstan_api::custom::Declared],
    table: &Weak<Registries>,
) -> Option<Arc<dyn Convert>> {
    let conversion = declared.first()?.conversion_webhook.as_ref()?;
    Some(Arc::new(Webhook::new(conversion, table.clone())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_is_kept_but_for_labels_and_annotations() {
        let original = json!({"metadata": {"name": "a", "uid": "1", "labels": {"x": "1"}, "annotations": {"y": "2"}}});
        let mut converted = json!({"apiVersion": "g/v2", "metadata": {"name": "b", "uid": "2", "labels": {"x": "3"}}});
        restore_metadata(&original, &mut converted).unwrap();
        assert_eq!(
            converted["metadata"],
            json!({"name": "a", "uid": "1", "labels": {"x": "3"}})
        );
        let mut bad = json!({"metadata": {"labels": {"x": 1}}});
        assert_eq!(
            restore_metadata(&original, &mut bad).unwrap_err(),
            "invalid metadata.labels[x]=1 of type int64 in converted object"
        );
        let mut missing = json!({"spec": {}});
        assert_eq!(
            restore_metadata(&original, &mut missing).unwrap_err(),
            "missing metadata in converted object"
        );
    }

    #[tokio::test]
    async fn objects_already_in_the_wanted_version_are_not_sent() {
        let webhook = Webhook::new(
            &WebhookConversion {
                client_config: None,
                conversion_review_versions: vec!["v1".to_owned()],
            },
            Weak::new(),
        );
        let objects = vec![json!({"apiVersion": "g/v2", "kind": "K", "metadata": {}})];
        assert_eq!(
            webhook.convert(objects.clone(), "g/v2").await.unwrap(),
            objects
        );
        // One that needs converting reaches the (absent) webhook, and fails as upstream says.
        let error = webhook
            .convert(
                vec![json!({"apiVersion": "g/v1", "kind": "K", "metadata": {}})],
                "g/v2",
            )
            .await
            .unwrap_err();
        let message = error.status().to_json().to_string();
        assert!(
            message.contains("conversion webhook for g/v1, Kind=K failed: "),
            "{message}"
        );
    }
}

//! The pod subresources that act rather than store: `binding` (the scheduler's assignment of a
//! pod to a node) and `eviction` (a delete that respects disruption budgets).

use capstan_api::field::{FieldError, Path};
use capstan_api::selector::LabelSelector;
use capstan_api::{GroupResource, StatusError};
use serde_json::{Value, json};

use crate::registry::object::{labels, meta_str};
use crate::registry::{DeleteOptions, ListOptions, Registry, WriteOptions};
use crate::status::ApiError;

/// The `Status` upstream answers a successful binding or eviction with.
pub(crate) fn success(code: u16) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code})
}

/// Assigns the pod `name` to the node a `Binding` names, as upstream's binding REST does: only a
/// pod not yet assigned, and not being deleted; the binding's annotations are copied.
pub(crate) async fn bind(
    pods: &Registry,
    namespace: Option<&str>,
    name: &str,
    binding: &Value,
    options: &WriteOptions,
) -> Result<(), ApiError> {
    let binding_name = meta_str(binding, "name");
    if !binding_name.is_empty() && binding_name != name {
        return Err(StatusError::bad_request(&format!(
            "the name of the object ({binding_name}) does not match the name on the URL ({name})"
        ))
        .into());
    }
    let target = binding["target"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let kind = binding["target"]["kind"].as_str().unwrap_or("Node");
    let mut errors = Vec::new();
    if target.is_empty() {
        errors.push(FieldError::required(&Path::new("target").child("name"), ""));
    }
    if !kind.is_empty() && kind != "Node" {
        errors.push(FieldError::not_supported(
            &Path::new("target").child("kind"),
            kind,
            &["Node", "<empty>"],
        ));
    }
    if !errors.is_empty() {
        return Err(StatusError::invalid("", "Binding", name, &errors).into());
    }
    let annotations = binding["metadata"]["annotations"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let key = pods.resource.storage_key(namespace, name);
    // Upstream writes the binding straight to storage: the pod's strategy does not run and
    // the pod's managedFields do not change (the field manager sees only the Binding).
    let options = WriteOptions {
        below_strategy: true,
        ..options.clone()
    };
    pods.guaranteed_update(&key, name, None, Some("binding"), &options, |old| {
        let Some(old) = old else {
            return Err(StatusError::not_found(GroupResource::new("", "pods"), name).into());
        };
        if old["metadata"]["deletionTimestamp"].is_string() {
            return Err(StatusError::conflict(
                GroupResource::new("", "pods/binding"),
                name,
                &format!("pod {name} is being deleted, cannot be assigned to a host"),
            )
            .into());
        }
        let assigned = old["spec"]["nodeName"].as_str().unwrap_or_default();
        if !assigned.is_empty() {
            return Err(StatusError::conflict(
                GroupResource::new("", "pods/binding"),
                name,
                &format!("pod {name} is already assigned to node \"{assigned}\""),
            )
            .into());
        }
        let mut pod = old.clone();
        pod["spec"]["nodeName"] = target.clone().into();
        for (key, value) in &annotations {
            pod["metadata"]["annotations"][key] = value.clone();
        }
        // PodScheduled=True, as upstream's UpdatePodCondition records it: in the place of an
        // earlier PodScheduled condition, keeping its transition time if it was True already.
        let mut condition = json!({
            "type": "PodScheduled", "status": "True",
            "lastProbeTime": null,
            "lastTransitionTime": crate::registry::object::now_rfc3339(),
        });
        if !pod["status"]["conditions"].is_array() {
            pod["status"]["conditions"] = json!([]);
        }
        if let Some(conditions) = pod["status"]["conditions"].as_array_mut() {
            match conditions.iter_mut().find(|c| c["type"] == "PodScheduled") {
                Some(existing) => {
                    if existing["status"] == "True" {
                        condition["lastTransitionTime"] = existing["lastTransitionTime"].clone();
                    }
                    *existing = condition;
                }
                None => conditions.push(condition),
            }
        }
        Ok(pod)
    })
    .await?;
    Ok(())
}

/// Refuses an eviction with upstream's 429 when the budget is not processed yet or allows no
/// disruption.
fn check_budget(pdb: &Value, pdb_name: &str) -> Result<(), ApiError> {
    let generation = pdb["metadata"]["generation"].as_i64().unwrap_or(0);
    let observed = pdb["status"]["observedGeneration"].as_i64().unwrap_or(0);
    let message = if observed < generation {
        format!(
            "Cannot evict pod as it would violate the pod's disruption budget. The disruption budget {pdb_name} is still being processed by the server."
        )
    } else if pdb["status"]["disruptionsAllowed"].as_i64().unwrap_or(0) <= 0 {
        format!(
            "Cannot evict pod as it would violate the pod's disruption budget. The disruption budget {pdb_name} needs {} healthy pods and has {} currently",
            pdb["status"]["desiredHealthy"].as_i64().unwrap_or(0),
            pdb["status"]["currentHealthy"].as_i64().unwrap_or(0)
        )
    } else {
        return Ok(());
    };
    let mut error = StatusError::too_many_requests(&message, 10);
    error.status.message = Some(message);
    if let Some(details) = error.status.details.as_mut() {
        details.causes = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::StatusCause {
                reason: Some("DisruptionBudget".into()),
                message: Some(format!(
                    "The disruption budget {pdb_name} needs more healthy pods"
                )),
                field: None,
            },
        ]);
    }
    Err(error.into())
}

/// Evicts the pod `name`: refused with 429 while a disruption budget covering it allows no
/// disruption (or has not been processed yet), otherwise a delete with the eviction's options.
pub(crate) async fn evict(
    pods: &Registry,
    budgets: Option<&Registry>,
    namespace: Option<&str>,
    name: &str,
    eviction: &Value,
    dry_run: bool,
) -> Result<(), ApiError> {
    let eviction_name = meta_str(eviction, "name");
    if !eviction_name.is_empty() && eviction_name != name {
        return Err(
            StatusError::bad_request("name in URL does not match name in Eviction object").into(),
        );
    }
    let pod = pods.get(namespace, name).await?;
    let mut options = DeleteOptions::from_body(&eviction["deleteOptions"]).validated()?;
    options.dry_run |= dry_run;
    let phase = pod["status"]["phase"].as_str().unwrap_or_default();
    // Finished or terminating pods need no budget, as upstream.
    let needs_budget = !matches!(phase, "Succeeded" | "Failed")
        && !pod["metadata"]["deletionTimestamp"].is_string();
    if let (true, Some(budgets)) = (needs_budget, budgets) {
        let list = budgets.list(namespace, &ListOptions::default()).await?;
        let pod_labels = labels(&pod);
        let covering: Vec<Value> = list
            .items
            .iter()
            .map(|item| item.object())
            .filter(|pdb| {
                let selector = serde_json::from_value(pdb["spec"]["selector"].clone()).ok();
                LabelSelector::from_api(selector.as_ref())
                    .is_ok_and(|s| !s.is_empty() && s.matches(&pod_labels))
            })
            .collect();
        if covering.len() > 1 {
            return Err(StatusError::internal(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            )
            .into());
        }
        if let Some(pdb) = covering.first() {
            let pdb_name = meta_str(pdb, "name").to_owned();
            // Upstream's check and record in one write: the budget's status counts the
            // eviction (one disruption fewer, the pod among `disruptedPods`) before the pod
            // is deleted, so that concurrent evictions cannot both pass.
            let key = budgets.resource.storage_key(namespace, &pdb_name);
            let write = WriteOptions {
                dry_run: options.dry_run,
                below_strategy: true,
                ..WriteOptions::default()
            };
            budgets
                .guaranteed_update(&key, &pdb_name, None, Some("status"), &write, |current| {
                    let Some(current) = current else {
                        return Err(StatusError::not_found(
                            GroupResource::new("policy", "poddisruptionbudgets"),
                            &pdb_name,
                        )
                        .into());
                    };
                    check_budget(current, &pdb_name)?;
                    let mut pdb = current.clone();
                    let allowed = pdb["status"]["disruptionsAllowed"].as_i64().unwrap_or(0);
                    pdb["status"]["disruptionsAllowed"] = (allowed - 1).into();
                    if !pdb["status"]["disruptedPods"].is_object() {
                        pdb["status"]["disruptedPods"] = json!({});
                    }
                    pdb["status"]["disruptedPods"][name] =
                        crate::registry::object::now_rfc3339().into();
                    Ok(pdb)
                })
                .await?;
        }
    }
    pods.delete(namespace, name, &options).await?;
    Ok(())
}

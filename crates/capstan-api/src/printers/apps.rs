//! Printers for `apps/v1`: deployments, replica sets, stateful sets, daemon sets and controller
//! revisions.

use jiff::Timestamp;
use serde_json::Value;

use super::core::{CONTAINERS_DESCRIPTION, IMAGES_DESCRIPTION};
use super::descriptions::*;
use super::format::{
    age, at, container_cells, format_label_selector, format_labels, int, list, name, opt_int,
    selector_string, text,
};
use super::{AGE, Column, NAME, Row, col, wide};

const READY_PODS: &str = "Number of the pod with ready state";

/// `spec.replicas`, defaulting to 1 as the v1 defaults do.
fn desired(object: &Value) -> i64 {
    opt_int(object, &["spec", "replicas"]).unwrap_or(1)
}

fn template_containers(object: &Value) -> (Value, Value) {
    container_cells(list(object, &["spec", "template", "spec", "containers"]))
}

pub(crate) const DEPLOYMENT_COLUMNS: &[Column] = &[
    NAME,
    col("Ready", "string", READY_PODS),
    col("Up-to-date", "string", DEPLOY_UPDATED),
    col("Available", "string", DEPLOY_AVAILABLE),
    AGE,
    wide("Containers", "string", CONTAINERS_DESCRIPTION),
    wide("Images", "string", IMAGES_DESCRIPTION),
    wide("Selector", "string", DEPLOY_SELECTOR),
];

pub(crate) fn deployment(object: &Value, now: Timestamp) -> Row {
    let (names, images) = template_containers(object);
    // Unlike the other workloads, an empty selector prints as nothing rather than `<none>`.
    let selector =
        selector_string(at(object, &["spec", "selector"])).unwrap_or_else(|()| "<invalid>".into());
    Row::of(vec![
        name(object),
        Value::from(format!(
            "{}/{}",
            int(object, &["status", "readyReplicas"]),
            desired(object)
        )),
        Value::from(int(object, &["status", "updatedReplicas"])),
        Value::from(int(object, &["status", "availableReplicas"])),
        age(object, now),
        names,
        images,
        Value::from(selector),
    ])
}

pub(crate) const REPLICA_SET_COLUMNS: &[Column] = &[
    NAME,
    col("Desired", "integer", RS_SPEC_REPLICAS),
    col("Current", "integer", RS_STATUS_REPLICAS),
    col("Ready", "integer", RS_READY),
    AGE,
    wide("Containers", "string", CONTAINERS_DESCRIPTION),
    wide("Images", "string", IMAGES_DESCRIPTION),
    wide("Selector", "string", RS_SELECTOR),
];

pub(crate) fn replica_set(object: &Value, now: Timestamp) -> Row {
    let (names, images) = template_containers(object);
    Row::of(vec![
        name(object),
        Value::from(desired(object)),
        Value::from(int(object, &["status", "replicas"])),
        Value::from(int(object, &["status", "readyReplicas"])),
        age(object, now),
        names,
        images,
        Value::from(format_label_selector(at(object, &["spec", "selector"]))),
    ])
}

pub(crate) const STATEFUL_SET_COLUMNS: &[Column] = &[
    NAME,
    col("Ready", "string", READY_PODS),
    AGE,
    wide("Containers", "string", CONTAINERS_DESCRIPTION),
    wide("Images", "string", IMAGES_DESCRIPTION),
];

pub(crate) fn stateful_set(object: &Value, now: Timestamp) -> Row {
    let (names, images) = template_containers(object);
    Row::of(vec![
        name(object),
        Value::from(format!(
            "{}/{}",
            int(object, &["status", "readyReplicas"]),
            desired(object)
        )),
        age(object, now),
        names,
        images,
    ])
}

pub(crate) const DAEMON_SET_COLUMNS: &[Column] = &[
    NAME,
    col("Desired", "integer", DS_DESIRED),
    col("Current", "integer", DS_CURRENT),
    col("Ready", "integer", DS_READY),
    col("Up-to-date", "integer", DS_UPDATED),
    col("Available", "integer", DS_AVAILABLE),
    col("Node Selector", "string", POD_NODE_SELECTOR),
    AGE,
    wide("Containers", "string", CONTAINERS_DESCRIPTION),
    wide("Images", "string", IMAGES_DESCRIPTION),
    wide("Selector", "string", DS_SELECTOR),
];

pub(crate) fn daemon_set(object: &Value, now: Timestamp) -> Row {
    let (names, images) = template_containers(object);
    let status = |field: &str| Value::from(int(object, &["status", field]));
    Row::of(vec![
        name(object),
        status("desiredNumberScheduled"),
        status("currentNumberScheduled"),
        status("numberReady"),
        status("updatedNumberScheduled"),
        status("numberAvailable"),
        Value::from(format_labels(
            object,
            &["spec", "template", "spec", "nodeSelector"],
        )),
        age(object, now),
        names,
        images,
        Value::from(format_label_selector(at(object, &["spec", "selector"]))),
    ])
}

pub(crate) const CONTROLLER_REVISION_COLUMNS: &[Column] = &[
    NAME,
    col("Controller", "string", "Controller of the object"),
    col("Revision", "string", CR_REVISION),
    AGE,
];

/// The owner marked as controller, as `kind.group/name` in lower case (`statefulset.apps/web`),
/// or `<none>`.
fn controller(object: &Value) -> String {
    let Some(owner) = list(object, &["metadata", "ownerReferences"])
        .iter()
        .find(|o| at(o, &["controller"]).and_then(Value::as_bool) == Some(true))
    else {
        return "<none>".to_owned();
    };
    let api_version = text(owner, &["apiVersion"]);
    let group = match api_version.split_once('/') {
        Some((group, _)) => group,
        None => "",
    };
    let kind = text(owner, &["kind"]);
    let owner_name = text(owner, &["name"]);
    match (group, kind) {
        ("", "") => owner_name.to_owned(),
        ("", kind) => format!("{}/{owner_name}", kind.to_lowercase()),
        (group, kind) => format!("{}/{owner_name}", format!("{kind}.{group}").to_lowercase()),
    }
}

pub(crate) fn controller_revision(object: &Value, now: Timestamp) -> Row {
    Row::of(vec![
        name(object),
        Value::from(controller(object)),
        Value::from(int(object, &["revision"])),
        age(object, now),
    ])
}

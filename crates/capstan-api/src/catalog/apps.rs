//! The `apps/v1` kinds.

use k8s_openapi::api::apps::v1::{
    ControllerRevision, DaemonSet, Deployment, ReplicaSet, StatefulSet,
};

use super::{Resource, SCALE, of, printer, status, typed};
use crate::defaults as d;
use crate::printers::apps as p;
use crate::strategy::Hooks;
use crate::validation as v;

pub(super) static RESOURCES: &[Resource] = &[
    Resource {
        printer: printer(p::CONTROLLER_REVISION_COLUMNS, p::controller_revision),
        strategy: || {
            typed::<ControllerRevision>(Hooks {
                validate: v::apps::validate_controller_revision,
                validate_update: v::apps::validate_controller_revision_update,
                ..Hooks::plain()
            })
        },
        ..of::<ControllerRevision>("controllerrevision")
    },
    Resource {
        short_names: &["ds"],
        categories: &["all"],
        subresources: &[status("DaemonSet")],
        printer: printer(p::DAEMON_SET_COLUMNS, p::daemon_set),
        strategy: || {
            typed::<DaemonSet>(Hooks {
                default: d::apps::default_daemon_set,
                validate: v::apps::validate_daemon_set,
                validate_update: v::apps::validate_daemon_set_update,
                validate_status_update: v::apps::validate_daemon_set_status_update,
                ..Hooks::workload()
            })
        },
        ..of::<DaemonSet>("daemonset")
    },
    Resource {
        short_names: &["deploy"],
        categories: &["all"],
        subresources: &[status("Deployment"), SCALE],
        printer: printer(p::DEPLOYMENT_COLUMNS, p::deployment),
        strategy: || {
            typed::<Deployment>(Hooks {
                default: d::apps::default_deployment,
                validate: v::apps::validate_deployment,
                validate_update: v::apps::validate_deployment_update,
                validate_status_update: v::apps::validate_deployment_status_update,
                // Upstream's deployment status strategy keeps the labels too.
                prepare_update: |deployment, old, subresource| {
                    if subresource == Some("status") {
                        deployment.metadata.labels = old.metadata.labels.clone();
                    }
                },
                ..Hooks::workload()
            })
        },
        ..of::<Deployment>("deployment")
    },
    Resource {
        short_names: &["rs"],
        categories: &["all"],
        subresources: &[status("ReplicaSet"), SCALE],
        printer: printer(p::REPLICA_SET_COLUMNS, p::replica_set),
        strategy: || {
            typed::<ReplicaSet>(Hooks {
                field_names: &["status.replicas"],
                fields: |rs| {
                    vec![(
                        "status.replicas",
                        rs.status.as_ref().map_or(0, |s| s.replicas).to_string(),
                    )]
                },
                default: d::apps::default_replica_set,
                validate: v::apps::validate_replica_set,
                validate_update: v::apps::validate_replica_set_update,
                validate_status_update: v::apps::validate_replica_set_status_update,
                ..Hooks::workload()
            })
        },
        ..of::<ReplicaSet>("replicaset")
    },
    Resource {
        short_names: &["sts"],
        categories: &["all"],
        subresources: &[status("StatefulSet"), SCALE],
        printer: printer(p::STATEFUL_SET_COLUMNS, p::stateful_set),
        strategy: || {
            typed::<StatefulSet>(Hooks {
                default: d::apps::default_stateful_set,
                validate: v::apps::validate_stateful_set,
                validate_update: v::apps::validate_stateful_set_update,
                validate_status_update: v::apps::validate_stateful_set_status_update,
                ..Hooks::workload()
            })
        },
        ..of::<StatefulSet>("statefulset")
    },
];

//! The core group's kinds (`v1`).

use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Binding, ConfigMap, Endpoints, Event, LimitRange, Namespace, NamespaceSpec, Node,
    PersistentVolume, PersistentVolumeClaim, Pod, PodTemplate, ReplicationController,
    ResourceQuota, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::{authentication::v1::TokenRequest, policy::v1::Eviction};

use super::{
    FINALIZE, NO_COLLECTION_DELETE, POD_LOG, Resource, SCALE, Serves, Subresource, connect, of,
    printer, proxy, schema_of, status, typed,
};
use crate::defaults as d;
use crate::printers::core as p;
use crate::strategy::{Hooks, Strategy, metadata_update};
use crate::validation as v;

pub(super) static RESOURCES: &[Resource] = &[
    Resource {
        short_names: &["cm"],
        printer: printer(p::CONFIG_MAP_COLUMNS, p::config_map),
        strategy: || {
            typed::<ConfigMap>(Hooks {
                validate: v::core::validate_config_map,
                validate_update: v::core::validate_config_map_update,
                ..Hooks::plain()
            })
        },
        ..of::<ConfigMap>("configmap")
    },
    Resource {
        short_names: &["ep"],
        storage_prefix: "services/endpoints",
        printer: printer(p::ENDPOINTS_COLUMNS, p::endpoints),
        strategy: || {
            typed::<Endpoints>(Hooks {
                default: d::core::default_endpoints,
                validate: v::core::validate_endpoints,
                validate_update: v::core::validate_endpoints_update,
                ..Hooks::creatable_by_put()
            })
        },
        ..of::<Endpoints>("endpoints")
    },
    Resource {
        short_names: &["ev"],
        printer: printer(p::EVENT_COLUMNS, p::event),
        strategy: event,
        ..of::<Event>("event")
    },
    Resource {
        short_names: &["limits"],
        strategy: || {
            typed::<LimitRange>(Hooks {
                default: d::core::default_limit_range,
                validate: v::core::validate_limit_range,
                validate_update: v::core::validate_limit_range_update,
                ..Hooks::creatable_by_put()
            })
        },
        ..of::<LimitRange>("limitrange")
    },
    Resource {
        short_names: &["ns"],
        verbs: NO_COLLECTION_DELETE,
        subresources: &[status("Namespace"), FINALIZE],
        printer: printer(p::NAMESPACE_COLUMNS, p::namespace),
        strategy: namespace,
        ..of::<Namespace>("namespace")
    },
    Resource {
        short_names: &["no"],
        subresources: &[proxy("NodeProxyOptions"), status("Node")],
        storage_prefix: "minions",
        printer: printer(p::NODE_COLUMNS, p::node),
        strategy: || {
            typed::<Node>(Hooks {
                default: d::core::default_node,
                validate: v::node::validate_node,
                validate_update: v::node::validate_node_update,
                // Upstream's node status strategy runs the full update rules.
                validate_status_update: v::node::validate_node_update,
                // A kubelet registers its node with its status; only `status.config` is the
                // server's to set.
                status_on_create: true,
                prepare_create: |n| {
                    if let Some(status) = n.status.as_mut() {
                        status.config = None;
                    }
                },
                field_names: &["spec.unschedulable"],
                fields: |n| {
                    vec![(
                        "spec.unschedulable",
                        n.spec
                            .as_ref()
                            .and_then(|s| s.unschedulable)
                            .unwrap_or(false)
                            .to_string(),
                    )]
                },
                ..Hooks::with_status()
            })
        },
        ..of::<Node>("node")
    },
    Resource {
        short_names: &["pvc"],
        subresources: &[status("PersistentVolumeClaim")],
        printer: printer(
            p::PERSISTENT_VOLUME_CLAIM_COLUMNS,
            p::persistent_volume_claim,
        ),
        strategy: || {
            typed::<PersistentVolumeClaim>(Hooks {
                default: d::core::default_persistent_volume_claim,
                validate: v::storage::validate_persistent_volume_claim,
                validate_update: v::storage::validate_persistent_volume_claim_update,
                validate_status_update: v::storage::validate_persistent_volume_claim_status_update,
                ..Hooks::with_status()
            })
        },
        ..of::<PersistentVolumeClaim>("persistentvolumeclaim")
    },
    Resource {
        short_names: &["pv"],
        subresources: &[status("PersistentVolume")],
        printer: printer(p::PERSISTENT_VOLUME_COLUMNS, p::persistent_volume),
        strategy: || {
            typed::<PersistentVolume>(Hooks {
                default: d::core::default_persistent_volume,
                validate: v::storage::validate_persistent_volume,
                validate_update: v::storage::validate_persistent_volume_update,
                prepare_create: d::core::prepare_persistent_volume_for_create,
                prepare_update: |pv, old, subresource| {
                    if subresource == Some("status") {
                        d::core::prepare_persistent_volume_status_update(pv, old);
                    }
                },
                ..Hooks::with_status()
            })
        },
        ..of::<PersistentVolume>("persistentvolume")
    },
    Resource {
        short_names: &["po"],
        categories: &["all"],
        subresources: &[
            status("Pod"),
            Subresource {
                name: "binding",
                group_version: None,
                kind: "Binding",
                verbs: &["create"],
                serves: Serves::Binding,
                schema: Some(schema_of::<Binding>()),
            },
            Subresource {
                name: "eviction",
                group_version: Some(("policy", "v1")),
                kind: "Eviction",
                verbs: &["create"],
                serves: Serves::Eviction,
                schema: Some(schema_of::<Eviction>()),
            },
            Subresource {
                name: "ephemeralcontainers",
                group_version: None,
                kind: "Pod",
                verbs: &["get", "patch", "update"],
                serves: Serves::Object,
                schema: None,
            },
            connect("attach", "PodAttachOptions"),
            connect("exec", "PodExecOptions"),
            POD_LOG,
            connect("portforward", "PodPortForwardOptions"),
            proxy("PodProxyOptions"),
        ],
        printer: printer(p::POD_COLUMNS, p::pod),
        strategy: pod,
        ..of::<Pod>("pod")
    },
    Resource {
        printer: printer(p::POD_TEMPLATE_COLUMNS, p::pod_template),
        strategy: || {
            typed::<PodTemplate>(Hooks {
                default: d::core::default_pod_template,
                validate: v::pod::validate_pod_template,
                validate_update: v::pod::validate_pod_template_update,
                ..Hooks::plain()
            })
        },
        ..of::<PodTemplate>("podtemplate")
    },
    Resource {
        short_names: &["rc"],
        categories: &["all"],
        subresources: &[status("ReplicationController"), SCALE],
        storage_prefix: "controllers",
        printer: printer(p::REPLICATION_CONTROLLER_COLUMNS, p::replication_controller),
        strategy: || {
            typed::<ReplicationController>(Hooks {
                default: d::core::default_replication_controller,
                validate: v::core::validate_replication_controller,
                validate_update: v::core::validate_replication_controller_update,
                validate_status_update: v::core::validate_replication_controller_status_update,
                field_names: &["status.replicas"],
                fields: |rc| {
                    vec![(
                        "status.replicas",
                        rc.status.as_ref().map_or(0, |s| s.replicas).to_string(),
                    )]
                },
                ..Hooks::workload()
            })
        },
        ..of::<ReplicationController>("replicationcontroller")
    },
    Resource {
        short_names: &["quota"],
        subresources: &[status("ResourceQuota")],
        printer: printer(p::RESOURCE_QUOTA_COLUMNS, p::resource_quota),
        strategy: || {
            typed::<ResourceQuota>(Hooks {
                default: d::core::default_resource_quota,
                validate: v::core::validate_resource_quota,
                validate_update: v::core::validate_resource_quota_update,
                validate_status_update: v::core::validate_resource_quota_status_update,
                ..Hooks::with_status()
            })
        },
        ..of::<ResourceQuota>("resourcequota")
    },
    Resource {
        printer: printer(p::SECRET_COLUMNS, p::secret),
        strategy: || {
            typed::<Secret>(Hooks {
                default: d::core::default_secret,
                internal: Some(crate::convert::secret::fold_string_data),
                validate: v::core::validate_secret,
                validate_update: v::core::validate_secret_update,
                field_names: &["type"],
                fields: |s| vec![("type", opt_str(s.type_.as_ref()))],
                ..Hooks::plain()
            })
        },
        ..of::<Secret>("secret")
    },
    Resource {
        short_names: &["sa"],
        subresources: &[Subresource {
            name: "token",
            group_version: Some(("authentication.k8s.io", "v1")),
            kind: "TokenRequest",
            verbs: &["create"],
            serves: Serves::TokenRequest,
            schema: Some(schema_of::<TokenRequest>()),
        }],
        printer: printer(p::SERVICE_ACCOUNT_COLUMNS, p::service_account),
        strategy: || {
            typed::<ServiceAccount>(Hooks {
                validate: v::core::validate_service_account,
                validate_update: v::core::validate_service_account_update,
                return_deleted: true,
                ..Hooks::plain()
            })
        },
        ..of::<ServiceAccount>("serviceaccount")
    },
    Resource {
        short_names: &["svc"],
        categories: &["all"],
        subresources: &[proxy("ServiceProxyOptions"), status("Service")],
        storage_prefix: "services/specs",
        printer: printer(p::SERVICE_COLUMNS, p::service),
        strategy: || {
            typed::<Service>(Hooks {
                default: d::core::default_service,
                validate: v::service::validate_service,
                validate_update: v::service::validate_service_update,
                validate_status_update: v::service::validate_service_status_update,
                field_names: &["spec.clusterIP", "spec.type"],
                fields: |s| {
                    let spec = s.spec.as_ref();
                    vec![
                        (
                            "spec.clusterIP",
                            opt_str(spec.and_then(|s| s.cluster_ip.as_ref())),
                        ),
                        ("spec.type", opt_str(spec.and_then(|s| s.type_.as_ref()))),
                    ]
                },
                return_deleted: true,
                create_on_update: true,
                ..Hooks::with_status()
            })
        },
        ..of::<Service>("service")
    },
];

pub(super) fn opt_str(value: Option<&String>) -> String {
    value.cloned().unwrap_or_default()
}

/// The core Events' strategy, also the hub of events.k8s.io's.
pub(super) fn event() -> Arc<dyn Strategy> {
    typed::<Event>(Hooks {
        validate: v::core::validate_event,
        validate_update: v::core::validate_event_update,
        field_names: &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        fields: event_fields,
        ..Hooks::creatable_by_put()
    })
}

fn event_fields(event: &Event) -> Vec<(&'static str, String)> {
    let o = &event.involved_object;
    vec![
        ("involvedObject.kind", opt_str(o.kind.as_ref())),
        ("involvedObject.namespace", opt_str(o.namespace.as_ref())),
        ("involvedObject.name", opt_str(o.name.as_ref())),
        ("involvedObject.uid", opt_str(o.uid.as_ref())),
        ("involvedObject.apiVersion", opt_str(o.api_version.as_ref())),
        (
            "involvedObject.resourceVersion",
            opt_str(o.resource_version.as_ref()),
        ),
        ("involvedObject.fieldPath", opt_str(o.field_path.as_ref())),
        ("reason", opt_str(event.reason.as_ref())),
        (
            "reportingComponent",
            opt_str(event.reporting_component.as_ref()),
        ),
        // The source component, or the reporting controller when there is none (an event
        // written through events.k8s.io/v1), as upstream's `ToSelectableFields`.
        (
            "source",
            opt_str(
                event
                    .source
                    .as_ref()
                    .and_then(|s| s.component.as_ref())
                    .filter(|c| !c.is_empty())
                    .or(event.reporting_component.as_ref()),
            ),
        ),
        ("type", opt_str(event.type_.as_ref())),
    ]
}

fn namespace() -> Arc<dyn Strategy> {
    typed::<Namespace>(Hooks {
        default: d::core::default_namespace,
        validate: v::core::validate_namespace,
        validate_update: v::core::validate_namespace_update,
        validate_status_update: v::core::validate_namespace_status_update,
        validate_subresource_update: |new, old, subresource| match subresource {
            "finalize" => v::core::validate_namespace_finalize_update(new, old),
            _ => metadata_update(new, old),
        },
        field_names: &["status.phase"],
        fields: |ns| {
            vec![(
                "status.phase",
                opt_str(ns.status.as_ref().and_then(|s| s.phase.as_ref())),
            )]
        },
        return_deleted: true,
        deletion_held: |ns| {
            ns.spec
                .as_ref()
                .and_then(|s| s.finalizers.as_ref())
                .is_some_and(|f| !f.is_empty())
        },
        mark_terminating: |ns| {
            ns.status.get_or_insert_with(Default::default).phase = Some("Terminating".into())
        },
        // Upstream: every namespace starts Active with the `kubernetes` finalizer (after any
        // the client gave), and `spec.finalizers` changes only through `/finalize`.
        prepare_create: |ns| {
            let finalizers = ns
                .spec
                .get_or_insert_with(Default::default)
                .finalizers
                .get_or_insert_with(Vec::new);
            if !finalizers.iter().any(|f| f == "kubernetes") {
                finalizers.push("kubernetes".into());
            }
            ns.status.get_or_insert_with(Default::default).phase = Some("Active".into());
        },
        prepare_update: |ns, old, subresource| {
            if subresource != Some("finalize") {
                ns.spec = old.spec.clone();
            } else {
                let finalizers = ns.spec.as_ref().and_then(|s| s.finalizers.clone());
                *ns = Namespace {
                    spec: Some(NamespaceSpec { finalizers }),
                    ..old.clone()
                };
            }
        },
        ..Hooks::with_status()
    })
}

fn pod() -> Arc<dyn Strategy> {
    typed::<Pod>(Hooks {
        default: |pod| {
            d::default_pod(pod);
            mirror_service_account(pod);
        },
        validate: v::pod::validate_pod,
        validate_update: |new, old| {
            // A pod stored before the deprecated field was mirrored compares as if it had been.
            let mut old = old.clone();
            mirror_service_account(&mut old);
            v::pod::validate_pod_update(new, &old)
        },
        validate_status_update: v::pod::validate_pod_status_update,
        validate_subresource_update: |new, old, subresource| match subresource {
            "ephemeralcontainers" => v::pod::validate_pod_ephemeral_containers_update(new, old),
            // A binding changes what the pod's rules guard through its own checks; the metadata
            // rules still hold.
            _ => metadata_update(new, old),
        },
        field_names: &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        // Kubelets list and watch their node's pods.
        indexed_field: Some("spec.nodeName"),
        fields: pod_fields,
        grace_period: pod_grace_period,
        return_deleted: true,
        prepare_create: d::prepare_pod_for_create,
        prepare_update: |pod, old, subresource| match subresource {
            Some("status") => d::prepare_pod_status_update(pod, old),
            Some("ephemeralcontainers") => d::prepare_pod_ephemeral_containers_update(pod, old),
            _ => {}
        },
        ..Hooks::with_status()
    })
}

fn pod_grace_period(pod: &Pod) -> Option<i64> {
    let spec = pod.spec.as_ref()?;
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    // An unscheduled pod, or one that has finished, has nothing to stop: it goes at once.
    if spec.node_name.as_deref().unwrap_or_default().is_empty()
        || matches!(phase, Some("Succeeded" | "Failed"))
    {
        return Some(0);
    }
    Some(spec.termination_grace_period_seconds.unwrap_or(30))
}

/// Upstream's conversion of a pod's service account: `serviceAccountName`, or else the
/// deprecated `serviceAccount`, is the account, and the deprecated field is written as its copy.
fn mirror_service_account(pod: &mut Pod) {
    let Some(spec) = pod.spec.as_mut() else {
        return;
    };
    let name = v::pod::service_account_name(spec).to_owned();
    if !name.is_empty() {
        spec.service_account_name = Some(name.clone());
        spec.service_account = Some(name);
    }
}

fn pod_fields(pod: &Pod) -> Vec<(&'static str, String)> {
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    vec![
        (
            "spec.nodeName",
            opt_str(spec.and_then(|s| s.node_name.as_ref())),
        ),
        (
            "spec.restartPolicy",
            opt_str(spec.and_then(|s| s.restart_policy.as_ref())),
        ),
        (
            "spec.schedulerName",
            opt_str(spec.and_then(|s| s.scheduler_name.as_ref())),
        ),
        (
            "spec.serviceAccountName",
            opt_str(spec.and_then(|s| s.service_account_name.as_ref())),
        ),
        (
            "spec.hostNetwork",
            spec.and_then(|s| s.host_network)
                .unwrap_or(false)
                .to_string(),
        ),
        (
            "status.phase",
            opt_str(status.and_then(|s| s.phase.as_ref())),
        ),
        (
            "status.podIP",
            opt_str(status.and_then(|s| s.pod_ip.as_ref())),
        ),
        (
            "status.nominatedNodeName",
            opt_str(status.and_then(|s| s.nominated_node_name.as_ref())),
        ),
    ]
}

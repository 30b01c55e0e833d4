//! The strategy of every built-in resource: a few lines each, naming the `k8s-openapi` type,
//! the status policy, whether generation is tracked, the selectable fields and the defaulting
//! and validation functions from `capstan-api`.

use std::sync::Arc;

use capstan_api::catalog::Resource;
use capstan_api::defaults as d;
use capstan_api::validation as v;
use k8s_openapi::Metadata;
use k8s_openapi::api::{
    apps, authentication, authorization, autoscaling, batch, coordination, core, discovery, events,
    flowcontrol, networking, node, policy, rbac, scheduling, storage,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::registry::Strategy;
use crate::registry::strategy::{Converted, Hooks, StatusPolicy, Typed, metadata_update};

fn plain<K: Metadata<Ty = ObjectMeta>>() -> Hooks<K> {
    Hooks::plain()
}

/// Hooks of a kind a PUT may create (upstream's `AllowCreateOnUpdate`: endpoints, events,
/// limit ranges, leases, endpoint slices, services).
fn creatable_by_put<K: Metadata<Ty = ObjectMeta>>() -> Hooks<K> {
    Hooks {
        create_on_update: true,
        ..Hooks::plain()
    }
}

/// Hooks of a kind whose status is written through `/status` and whose generation counts spec
/// changes (the workload kinds).
fn workload<K: Metadata<Ty = ObjectMeta>>() -> Hooks<K> {
    Hooks {
        status: StatusPolicy::Subresource,
        generation: true,
        ..Hooks::plain()
    }
}

/// Hooks of a kind with a status subresource but no generation.
fn with_status<K: Metadata<Ty = ObjectMeta>>() -> Hooks<K> {
    Hooks {
        status: StatusPolicy::Subresource,
        ..Hooks::plain()
    }
}

fn strategy<K>(hooks: Hooks<K>) -> Option<Arc<dyn Strategy>>
where
    K: serde::Serialize
        + serde::de::DeserializeOwned
        + Metadata<Ty = ObjectMeta>
        + Send
        + Sync
        + 'static,
{
    Some(Arc::new(Typed::new(hooks)))
}

fn opt_str(value: Option<&String>) -> String {
    value.cloned().unwrap_or_default()
}

fn pod_grace_period(pod: &core::v1::Pod) -> Option<i64> {
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
fn mirror_service_account(pod: &mut core::v1::Pod) {
    let Some(spec) = pod.spec.as_mut() else {
        return;
    };
    let name = v::pod::service_account_name(spec).to_owned();
    if !name.is_empty() {
        spec.service_account_name = Some(name.clone());
        spec.service_account = Some(name);
    }
}

fn pod_fields(pod: &core::v1::Pod) -> Vec<(&'static str, String)> {
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

fn event_fields(event: &core::v1::Event) -> Vec<(&'static str, String)> {
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

/// Drops scaling tolerances, behind the `HPAConfigurableTolerance` gate (alpha in 1.33, off), unless
/// the stored autoscaler already has one, as upstream drops disabled fields.
fn drop_tolerance(
    hpa: &mut autoscaling::v2::HorizontalPodAutoscaler,
    old: Option<&autoscaling::v2::HorizontalPodAutoscaler>,
) {
    let uses = |hpa: &autoscaling::v2::HorizontalPodAutoscaler| {
        hpa.spec
            .as_ref()
            .and_then(|s| s.behavior.as_ref())
            .is_some_and(|b| {
                [&b.scale_up, &b.scale_down]
                    .iter()
                    .any(|r| r.as_ref().is_some_and(|r| r.tolerance.is_some()))
            })
    };
    if old.is_some_and(uses) {
        return;
    }
    if let Some(behavior) = hpa.spec.as_mut().and_then(|s| s.behavior.as_mut()) {
        for rules in [&mut behavior.scale_up, &mut behavior.scale_down]
            .into_iter()
            .flatten()
        {
            rules.tolerance = None;
        }
    }
}

/// The strategy of a catalogue resource (every catalogue resource has one; a test checks).
pub(crate) fn strategy_for(resource: &Resource) -> Option<Arc<dyn Strategy>> {
    match (resource.group, resource.kind) {
        ("", "ConfigMap") => strategy::<core::v1::ConfigMap>(Hooks {
            validate: v::core::validate_config_map,
            validate_update: v::core::validate_config_map_update,
            ..plain()
        }),
        ("", "Endpoints") => strategy::<core::v1::Endpoints>(Hooks {
            default: d::core::default_endpoints,
            validate: v::core::validate_endpoints,
            validate_update: v::core::validate_endpoints_update,
            ..creatable_by_put()
        }),
        ("", "Event") => strategy::<core::v1::Event>(Hooks {
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
            ..creatable_by_put()
        }),
        ("", "LimitRange") => strategy::<core::v1::LimitRange>(Hooks {
            default: d::core::default_limit_range,
            validate: v::core::validate_limit_range,
            validate_update: v::core::validate_limit_range_update,
            ..creatable_by_put()
        }),
        ("", "Namespace") => strategy::<core::v1::Namespace>(Hooks {
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
            // Upstream: every namespace starts Active with the `kubernetes` finalizer (after
            // any the client gave), and `spec.finalizers` changes only through `/finalize`.
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
                    *ns = core::v1::Namespace {
                        spec: Some(core::v1::NamespaceSpec { finalizers }),
                        ..old.clone()
                    };
                }
            },
            ..with_status()
        }),
        ("", "Node") => strategy::<core::v1::Node>(Hooks {
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
            ..with_status()
        }),
        ("", "PersistentVolumeClaim") => strategy::<core::v1::PersistentVolumeClaim>(Hooks {
            default: d::core::default_persistent_volume_claim,
            validate: v::storage::validate_persistent_volume_claim,
            validate_update: v::storage::validate_persistent_volume_claim_update,
            validate_status_update: v::storage::validate_persistent_volume_claim_status_update,
            ..with_status()
        }),
        ("", "PersistentVolume") => strategy::<core::v1::PersistentVolume>(Hooks {
            default: d::core::default_persistent_volume,
            validate: v::storage::validate_persistent_volume,
            validate_update: v::storage::validate_persistent_volume_update,
            prepare_create: d::core::prepare_persistent_volume_for_create,
            prepare_update: |pv, old, subresource| {
                if subresource == Some("status") {
                    d::core::prepare_persistent_volume_status_update(pv, old);
                }
            },
            ..with_status()
        }),
        ("", "Pod") => strategy::<core::v1::Pod>(Hooks {
            default: |pod| {
                d::default_pod(pod);
                mirror_service_account(pod);
            },
            validate: v::pod::validate_pod,
            validate_update: |new, old| {
                // A pod stored before the deprecated field was mirrored compares as if it had
                // been.
                let mut old = old.clone();
                mirror_service_account(&mut old);
                v::pod::validate_pod_update(new, &old)
            },
            validate_status_update: v::pod::validate_pod_status_update,
            validate_subresource_update: |new, old, subresource| match subresource {
                "ephemeralcontainers" => v::pod::validate_pod_ephemeral_containers_update(new, old),
                // A binding changes what the pod's rules guard through its own checks; the
                // metadata rules still hold.
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
            fields: pod_fields,
            grace_period: pod_grace_period,
            return_deleted: true,
            prepare_create: d::prepare_pod_for_create,
            prepare_update: |pod, old, subresource| match subresource {
                Some("status") => d::prepare_pod_status_update(pod, old),
                Some("ephemeralcontainers") => d::prepare_pod_ephemeral_containers_update(pod, old),
                _ => {}
            },
            ..with_status()
        }),
        ("", "PodTemplate") => strategy::<core::v1::PodTemplate>(Hooks {
            default: d::core::default_pod_template,
            validate: v::pod::validate_pod_template,
            validate_update: v::pod::validate_pod_template_update,
            ..plain()
        }),
        ("", "ReplicationController") => strategy::<core::v1::ReplicationController>(Hooks {
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
            ..workload()
        }),
        ("", "ResourceQuota") => strategy::<core::v1::ResourceQuota>(Hooks {
            default: d::core::default_resource_quota,
            validate: v::core::validate_resource_quota,
            validate_update: v::core::validate_resource_quota_update,
            validate_status_update: v::core::validate_resource_quota_status_update,
            ..with_status()
        }),
        ("", "Secret") => strategy::<core::v1::Secret>(Hooks {
            default: d::core::default_secret,
            internal: Some(capstan_api::convert::secret::fold_string_data),
            validate: v::core::validate_secret,
            validate_update: v::core::validate_secret_update,
            field_names: &["type"],
            fields: |s| vec![("type", opt_str(s.type_.as_ref()))],
            ..plain()
        }),
        ("", "ServiceAccount") => strategy::<core::v1::ServiceAccount>(Hooks {
            validate: v::core::validate_service_account,
            validate_update: v::core::validate_service_account_update,
            return_deleted: true,
            ..plain()
        }),
        ("", "Service") => strategy::<core::v1::Service>(Hooks {
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
            ..with_status()
        }),
        ("apps", "ControllerRevision") => strategy::<apps::v1::ControllerRevision>(Hooks {
            validate: v::apps::validate_controller_revision,
            validate_update: v::apps::validate_controller_revision_update,
            ..plain()
        }),
        ("apps", "DaemonSet") => strategy::<apps::v1::DaemonSet>(Hooks {
            default: d::apps::default_daemon_set,
            validate: v::apps::validate_daemon_set,
            validate_update: v::apps::validate_daemon_set_update,
            validate_status_update: v::apps::validate_daemon_set_status_update,
            ..workload()
        }),
        ("apps", "Deployment") => strategy::<apps::v1::Deployment>(Hooks {
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
            ..workload()
        }),
        ("apps", "ReplicaSet") => strategy::<apps::v1::ReplicaSet>(Hooks {
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
            ..workload()
        }),
        ("apps", "StatefulSet") => strategy::<apps::v1::StatefulSet>(Hooks {
            default: d::apps::default_stateful_set,
            validate: v::apps::validate_stateful_set,
            validate_update: v::apps::validate_stateful_set_update,
            validate_status_update: v::apps::validate_stateful_set_status_update,
            ..workload()
        }),
        // Served from the core Events by conversion, validated by its own (stricter) rules.
        ("events.k8s.io", "Event") => {
            let served = strategy::<events::v1::Event>(Hooks {
                validate: v::misc::validate_events_v1_event,
                validate_update: v::misc::validate_events_v1_event_update,
                ..creatable_by_put()
            })?;
            let hub = strategy_for(capstan_api::catalog::lookup("", "v1", "events")?)?;
            let conversion =
                capstan_api::convert::conversion(&resource.api_version(), resource.kind)?;
            Some(Arc::new(Converted::new(served, hub, conversion)))
        }
        ("autoscaling", "HorizontalPodAutoscaler") => {
            let hub = strategy::<autoscaling::v2::HorizontalPodAutoscaler>(Hooks {
                default: d::autoscaling::default_hpa_v2,
                validate: v::autoscaling::validate_horizontal_pod_autoscaler,
                validate_update: v::autoscaling::validate_horizontal_pod_autoscaler_update,
                validate_status_update:
                    v::autoscaling::validate_horizontal_pod_autoscaler_status_update,
                prepare_create: |hpa| drop_tolerance(hpa, None),
                prepare_update: |hpa, old, subresource| match subresource {
                    // Status written through the object of another version (whose status is
                    // partly in annotations) stays the stored one, as upstream.
                    None => {
                        hpa.status.clone_from(&old.status);
                        drop_tolerance(hpa, Some(old));
                    }
                    Some("status") => hpa.spec.clone_from(&old.spec),
                    Some(_) => {}
                },
                ..with_status()
            })?;
            match capstan_api::convert::conversion(&resource.api_version(), resource.kind) {
                None => Some(hub),
                Some(conversion) => {
                    let served = strategy::<autoscaling::v1::HorizontalPodAutoscaler>(Hooks {
                        default: d::autoscaling::default_hpa_v1,
                        ..plain()
                    })?;
                    Some(Arc::new(Converted::new(served, hub, conversion)))
                }
            }
        }
        ("flowcontrol.apiserver.k8s.io", "FlowSchema") => {
            strategy::<flowcontrol::v1::FlowSchema>(Hooks {
                default: d::flowcontrol::default_flow_schema,
                validate: v::flowcontrol::validate_flow_schema,
                validate_update: v::flowcontrol::validate_flow_schema_update,
                validate_status_update: v::flowcontrol::validate_flow_schema_status_update,
                ..with_status()
            })
        }
        ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration") => {
            strategy::<flowcontrol::v1::PriorityLevelConfiguration>(Hooks {
                default: d::flowcontrol::default_priority_level,
                validate: v::flowcontrol::validate_priority_level,
                validate_update: v::flowcontrol::validate_priority_level_update,
                validate_status_update: v::flowcontrol::validate_priority_level_status_update,
                ..with_status()
            })
        }
        ("batch", "CronJob") => strategy::<batch::v1::CronJob>(Hooks {
            default: d::batch::default_cron_job,
            validate: v::batch::validate_cron_job,
            validate_update: v::batch::validate_cron_job_update,
            validate_status_update: v::batch::validate_cron_job_status_update,
            ..workload()
        }),
        ("batch", "Job") => strategy::<batch::v1::Job>(Hooks {
            field_names: &["status.successful"],
            fields: |j| {
                vec![(
                    "status.successful",
                    j.status
                        .as_ref()
                        .and_then(|s| s.succeeded)
                        .unwrap_or(0)
                        .to_string(),
                )]
            },
            default: d::batch::default_job,
            validate: v::batch::validate_job,
            validate_update: v::batch::validate_job_update,
            validate_status_update: v::batch::validate_job_status_update,
            // The generated selector and labels upstream's job strategy adds need the uid.
            prepare_create: |job| {
                let uid = job.metadata.uid.clone().unwrap_or_default();
                d::batch::prepare_job_for_create(job, &uid);
            },
            ..workload()
        }),
        ("policy", "PodDisruptionBudget") => strategy::<policy::v1::PodDisruptionBudget>(Hooks {
            validate: v::misc::validate_pod_disruption_budget,
            validate_update: v::misc::validate_pod_disruption_budget_update,
            validate_status_update: v::misc::validate_pod_disruption_budget_status_update,
            ..workload()
        }),
        ("scheduling.k8s.io", "PriorityClass") => {
            strategy::<scheduling::v1::PriorityClass>(Hooks {
                default: d::misc::default_priority_class,
                validate: v::misc::validate_priority_class,
                validate_update: v::misc::validate_priority_class_update,
                ..plain()
            })
        }
        ("networking.k8s.io", "Ingress") => strategy::<networking::v1::Ingress>(Hooks {
            validate: v::networking::validate_ingress,
            validate_update: v::networking::validate_ingress_update,
            validate_status_update: v::networking::validate_ingress_status_update,
            ..workload()
        }),
        ("networking.k8s.io", "IngressClass") => strategy::<networking::v1::IngressClass>(Hooks {
            default: d::misc::default_ingress_class,
            validate: v::networking::validate_ingress_class,
            validate_update: v::networking::validate_ingress_class_update,
            generation: true,
            ..plain()
        }),
        ("networking.k8s.io", "NetworkPolicy") => {
            strategy::<networking::v1::NetworkPolicy>(Hooks {
                default: d::misc::default_network_policy,
                validate: v::networking::validate_network_policy,
                validate_update: v::networking::validate_network_policy_update,
                generation: true,
                ..plain()
            })
        }
        ("rbac.authorization.k8s.io", "Role") => strategy::<rbac::v1::Role>(Hooks {
            validate: v::rbac::validate_role,
            validate_update: v::rbac::validate_role_update,
            ..creatable_by_put()
        }),
        ("rbac.authorization.k8s.io", "ClusterRole") => strategy::<rbac::v1::ClusterRole>(Hooks {
            validate: v::rbac::validate_cluster_role,
            validate_update: v::rbac::validate_cluster_role_update,
            ..creatable_by_put()
        }),
        ("rbac.authorization.k8s.io", "RoleBinding") => strategy::<rbac::v1::RoleBinding>(Hooks {
            default: d::misc::default_role_binding,
            validate: v::rbac::validate_role_binding,
            validate_update: v::rbac::validate_role_binding_update,
            ..creatable_by_put()
        }),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => {
            strategy::<rbac::v1::ClusterRoleBinding>(Hooks {
                default: d::misc::default_cluster_role_binding,
                validate: v::rbac::validate_cluster_role_binding,
                validate_update: v::rbac::validate_cluster_role_binding_update,
                ..creatable_by_put()
            })
        }
        // Reviews are answered by `reviews.rs`, never stored; the strategy decodes their bodies.
        ("authentication.k8s.io", "SelfSubjectReview") => {
            strategy::<authentication::v1::SelfSubjectReview>(Hooks::plain())
        }
        ("authorization.k8s.io", "SelfSubjectAccessReview") => {
            strategy::<authorization::v1::SelfSubjectAccessReview>(Hooks::plain())
        }
        ("authorization.k8s.io", "SelfSubjectRulesReview") => {
            strategy::<authorization::v1::SelfSubjectRulesReview>(Hooks::plain())
        }
        ("node.k8s.io", "RuntimeClass") => strategy::<node::v1::RuntimeClass>(Hooks {
            validate: v::runtime_class::validate_runtime_class,
            validate_update: v::runtime_class::validate_runtime_class_update,
            ..plain()
        }),
        ("storage.k8s.io", "StorageClass") => strategy::<storage::v1::StorageClass>(Hooks {
            default: d::misc::default_storage_class,
            validate: v::storage_class::validate_storage_class,
            validate_update: v::storage_class::validate_storage_class_update,
            ..plain()
        }),
        ("coordination.k8s.io", "Lease") => strategy::<coordination::v1::Lease>(Hooks {
            validate: v::misc::validate_lease,
            validate_update: v::misc::validate_lease_update,
            ..creatable_by_put()
        }),
        ("discovery.k8s.io", "EndpointSlice") => strategy::<discovery::v1::EndpointSlice>(Hooks {
            default: d::misc::default_endpoint_slice,
            validate: v::misc::validate_endpoint_slice,
            validate_update: v::misc::validate_endpoint_slice_update,
            ..creatable_by_put()
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_catalogue_resource_has_a_typed_strategy() {
        for resource in capstan_api::catalog::RESOURCES {
            let strategy = strategy_for(resource)
                .unwrap_or_else(|| panic!("{} has no strategy", resource.kind));
            let object = serde_json::json!({
                "apiVersion": resource.api_version(), "kind": resource.kind,
                "metadata": {"name": "x"}, "notAField": 1
            });
            match strategy.decode(&object) {
                Ok((decoded, unknown)) => {
                    assert_eq!(decoded["kind"], resource.kind);
                    assert_eq!(
                        unknown,
                        ["notAField"],
                        "{} must be decoded by its type",
                        resource.kind
                    );
                }
                // Kinds with required fields (Event.involvedObject, ...) name what is missing.
                Err(crate::registry::strategy::DecodeError::Missing { path }) => {
                    assert!(!path.is_empty())
                }
                Err(other) => panic!("{}: {other:?}", resource.kind),
            }
        }
    }
}

//! Defaults of the other core/v1 kinds: Services, Namespaces, Secrets, Endpoints,
//! ReplicationControllers, PodTemplates, PersistentVolumes and claims, LimitRanges, Nodes and
//! ResourceQuotas.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ClientIPConfig, Endpoints, LimitRange, Namespace, Node, PersistentVolume,
    PersistentVolumeClaim, PersistentVolumeStatus, PodTemplate, ReplicationController,
    ResourceQuota, Secret, Service, ServiceSpec, SessionAffinityConfig,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::pod::{default_pod_template_spec, default_resource_list};

/// Default ClientIP session-affinity timeout (three hours).
pub const DEFAULT_CLIENT_IP_SERVICE_AFFINITY_SECONDS: i32 = 10800;
/// The label every named namespace carries with its own name.
pub const LABEL_METADATA_NAME: &str = "kubernetes.io/metadata.name";

fn set_if_empty(slot: &mut Option<String>, value: &str) {
    if slot.as_deref().unwrap_or("").is_empty() {
        *slot = Some(value.to_owned());
    }
}

/// Whether a Service is reachable from outside the cluster, as upstream's
/// `ExternallyAccessible` (its defaulting and its validation both ask): a LoadBalancer, a
/// NodePort, or a ClusterIP with external IPs.
pub(crate) fn externally_accessible(spec: &ServiceSpec) -> bool {
    let service_type = spec.type_.as_deref().unwrap_or("");
    service_type == "LoadBalancer"
        || service_type == "NodePort"
        || (service_type == "ClusterIP"
            && spec
                .external_ips
                .as_ref()
                .is_some_and(|ips| !ips.is_empty()))
}

/// Service defaults: session affinity None (ClientIP gets a timeout), type ClusterIP, port
/// protocol TCP and targetPort equal to port, externalTrafficPolicy Cluster when externally
/// reachable, internalTrafficPolicy Cluster, allocateLoadBalancerNodePorts for load balancers,
/// and ipMode VIP for load-balancer ingress IPs.
pub fn default_service(svc: &mut Service) {
    let spec = svc.spec.get_or_insert_with(Default::default);
    set_if_empty(&mut spec.session_affinity, "None");
    match spec.session_affinity.as_deref() {
        Some("None") => spec.session_affinity_config = None,
        Some("ClientIP") => {
            let has_timeout = spec
                .session_affinity_config
                .as_ref()
                .and_then(|c| c.client_ip.as_ref())
                .and_then(|c| c.timeout_seconds)
                .is_some();
            if !has_timeout {
                spec.session_affinity_config = Some(SessionAffinityConfig {
                    client_ip: Some(ClientIPConfig {
                        timeout_seconds: Some(DEFAULT_CLIENT_IP_SERVICE_AFFINITY_SECONDS),
                    }),
                });
            }
        }
        _ => {}
    }
    set_if_empty(&mut spec.type_, "ClusterIP");
    for port in spec.ports.iter_mut().flatten() {
        set_if_empty(&mut port.protocol, "TCP");
        let unset = match &port.target_port {
            None => true,
            Some(IntOrString::Int(0)) => true,
            Some(IntOrString::String(s)) => s.is_empty(),
            Some(IntOrString::Int(_)) => false,
        };
        if unset {
            port.target_port = Some(IntOrString::Int(port.port));
        }
    }
    let service_type = spec.type_.clone().unwrap_or_default();
    if externally_accessible(spec) {
        set_if_empty(&mut spec.external_traffic_policy, "Cluster");
    }
    if spec.internal_traffic_policy.is_none()
        && matches!(
            service_type.as_str(),
            "NodePort" | "LoadBalancer" | "ClusterIP"
        )
    {
        spec.internal_traffic_policy = Some("Cluster".to_owned());
    }
    if service_type == "LoadBalancer" {
        if spec.allocate_load_balancer_node_ports.is_none() {
            spec.allocate_load_balancer_node_ports = Some(true);
        }
        let ingresses = svc
            .status
            .iter_mut()
            .flat_map(|s| s.load_balancer.iter_mut())
            .flat_map(|lb| lb.ingress.iter_mut().flatten());
        for ingress in ingresses {
            if ingress.ip.as_deref().is_some_and(|ip| !ip.is_empty()) && ingress.ip_mode.is_none() {
                ingress.ip_mode = Some("VIP".to_owned());
            }
        }
    }
}

/// Namespace defaults: the `kubernetes.io/metadata.name` label and phase Active. The `kubernetes`
/// finalizer is the namespace strategy's on create, not a default: `finalize` removes it.
pub fn default_namespace(ns: &mut Namespace) {
    if let Some(name) = ns.metadata.name.clone().filter(|n| !n.is_empty()) {
        ns.metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(LABEL_METADATA_NAME.to_owned(), name);
    }
    ns.spec.get_or_insert_with(Default::default);
    set_if_empty(
        &mut ns.status.get_or_insert_with(Default::default).phase,
        "Active",
    );
}

/// Secret defaults: type Opaque.
pub fn default_secret(secret: &mut Secret) {
    set_if_empty(&mut secret.type_, "Opaque");
}

/// Endpoints defaults: port protocol TCP.
pub fn default_endpoints(endpoints: &mut Endpoints) {
    for port in endpoints
        .subsets
        .iter_mut()
        .flatten()
        .flat_map(|s| s.ports.iter_mut().flatten())
    {
        set_if_empty(&mut port.protocol, "TCP");
    }
}

/// ReplicationController defaults: selector and labels from the template's labels when unset,
/// one replica, and the template's pod-spec defaults.
pub fn default_replication_controller(rc: &mut ReplicationController) {
    let spec = rc.spec.get_or_insert_with(Default::default);
    let template_labels = spec
        .template
        .as_ref()
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.clone());
    if let Some(labels) = template_labels {
        if spec.selector.as_ref().is_none_or(BTreeMap::is_empty) {
            spec.selector = Some(labels.clone());
        }
        if rc.metadata.labels.as_ref().is_none_or(BTreeMap::is_empty) {
            rc.metadata.labels = Some(labels);
        }
    }
    if spec.replicas.is_none() {
        spec.replicas = Some(1);
    }
    if let Some(template) = &mut spec.template {
        default_pod_template_spec(template);
    }
}

/// PodTemplate defaults: the template's pod-spec defaults.
pub fn default_pod_template(template: &mut PodTemplate) {
    default_pod_template_spec(template.template.get_or_insert_with(Default::default));
}

/// What upstream's PersistentVolume strategy sets on create: a status of phase `Pending` alone,
/// entered now.
pub fn prepare_persistent_volume_for_create(pv: &mut PersistentVolume) {
    pv.status = Some(PersistentVolumeStatus {
        phase: Some("Pending".to_owned()),
        last_phase_transition_time: Some(super::now()),
        ..Default::default()
    });
}

/// On a write through `/status`, a new phase is entered now, unless the writer gave the time
/// of the transition itself (upstream's status strategy).
pub fn prepare_persistent_volume_status_update(pv: &mut PersistentVolume, old: &PersistentVolume) {
    let old = old.status.clone().unwrap_or_default();
    let status = pv.status.get_or_insert_with(Default::default);
    if status.phase != old.phase
        && (status.last_phase_transition_time.is_none()
            || status.last_phase_transition_time == old.last_phase_transition_time)
    {
        status.last_phase_transition_time = Some(super::now());
    }
}

/// PersistentVolume defaults: phase Pending, reclaim policy Retain, volume mode Filesystem,
/// capacity rounded, and the legacy plugins' fields.
pub fn default_persistent_volume(pv: &mut PersistentVolume) {
    set_if_empty(
        &mut pv.status.get_or_insert_with(Default::default).phase,
        "Pending",
    );
    let spec = pv.spec.get_or_insert_with(Default::default);
    set_if_empty(&mut spec.persistent_volume_reclaim_policy, "Retain");
    if spec.volume_mode.is_none() {
        spec.volume_mode = Some("Filesystem".to_owned());
    }
    default_resource_list(&mut spec.capacity);
    if let Some(hp) = &mut spec.host_path
        && hp.type_.is_none()
    {
        hp.type_ = Some(String::new());
    }
    if let Some(s) = &mut spec.rbd {
        set_if_empty(&mut s.pool, "rbd");
        set_if_empty(&mut s.user, "admin");
        set_if_empty(&mut s.keyring, "/etc/ceph/keyring");
    }
    if let Some(s) = &mut spec.iscsi {
        set_if_empty(&mut s.iscsi_interface, "default");
    }
    if let Some(s) = &mut spec.azure_disk {
        s.caching_mode.get_or_insert_with(|| "ReadWrite".to_owned());
        s.fs_type.get_or_insert_with(|| "ext4".to_owned());
        s.read_only.get_or_insert(false);
        s.kind.get_or_insert_with(|| "Shared".to_owned());
    }
    if let Some(s) = &mut spec.scale_io {
        set_if_empty(&mut s.storage_mode, "ThinProvisioned");
        set_if_empty(&mut s.fs_type, "xfs");
    }
}

/// PersistentVolumeClaim defaults: phase Pending, volume mode Filesystem, quantities rounded.
pub fn default_persistent_volume_claim(pvc: &mut PersistentVolumeClaim) {
    let status = pvc.status.get_or_insert_with(Default::default);
    set_if_empty(&mut status.phase, "Pending");
    default_resource_list(&mut status.capacity);
    default_resource_list(&mut status.allocated_resources);
    let spec = pvc.spec.get_or_insert_with(Default::default);
    if spec.volume_mode.is_none() {
        spec.volume_mode = Some("Filesystem".to_owned());
    }
    if let Some(r) = &mut spec.resources {
        default_resource_list(&mut r.limits);
        default_resource_list(&mut r.requests);
    }
}

/// LimitRange defaults: for Container limits, the default limit comes from max, the default
/// request from the default limit, then from min; all quantities rounded.
pub fn default_limit_range(lr: &mut LimitRange) {
    for item in lr.spec.iter_mut().flat_map(|s| s.limits.iter_mut()) {
        if item.type_ == "Container" {
            let default = item.default.get_or_insert_with(BTreeMap::new);
            for (k, v) in item.max.iter().flatten() {
                default.entry(k.clone()).or_insert_with(|| v.clone());
            }
            let default = default.clone();
            let request = item.default_request.get_or_insert_with(BTreeMap::new);
            for (k, v) in &default {
                request.entry(k.clone()).or_insert_with(|| v.clone());
            }
            for (k, v) in item.min.iter().flatten() {
                request.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
        default_resource_list(&mut item.max);
        default_resource_list(&mut item.min);
        default_resource_list(&mut item.default);
        default_resource_list(&mut item.default_request);
        default_resource_list(&mut item.max_limit_request_ratio);
    }
}

/// Node defaults: allocatable copied from capacity when unset; quantities rounded.
pub fn default_node(node: &mut Node) {
    if let Some(status) = &mut node.status {
        if status.allocatable.is_none() && status.capacity.is_some() {
            status.allocatable = status.capacity.clone();
        }
        default_resource_list(&mut status.capacity);
        default_resource_list(&mut status.allocatable);
    }
}

/// ResourceQuota defaults: quantities rounded.
pub fn default_resource_quota(quota: &mut ResourceQuota) {
    if let Some(spec) = &mut quota.spec {
        default_resource_list(&mut spec.hard);
    }
    if let Some(status) = &mut quota.status {
        default_resource_list(&mut status.hard);
        default_resource_list(&mut status.used);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::defaults::check_defaults as check;

    #[test]
    fn services() {
        check::<Service>(
            json!({"spec": {"ports": [{"port": 80}]}}),
            default_service,
            json!({"spec": {
                "internalTrafficPolicy": "Cluster",
                "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}],
                "sessionAffinity": "None", "type": "ClusterIP"
            }}),
        );
        check::<Service>(
            json!({"spec": {"type": "LoadBalancer", "sessionAffinity": "ClientIP", "ports": [{"port": 80, "targetPort": "http"}]},
                   "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}}),
            default_service,
            json!({"spec": {
                "allocateLoadBalancerNodePorts": true, "externalTrafficPolicy": "Cluster",
                "internalTrafficPolicy": "Cluster",
                "ports": [{"port": 80, "protocol": "TCP", "targetPort": "http"}],
                "sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10800}},
                "type": "LoadBalancer"
            }, "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4", "ipMode": "VIP"}]}}}),
        );
        check::<Service>(
            json!({"spec": {"type": "ExternalName", "externalName": "example.com"}}),
            default_service,
            json!({"spec": {"externalName": "example.com", "sessionAffinity": "None", "type": "ExternalName"}}),
        );
    }

    #[test]
    fn namespaces_secrets_endpoints() {
        check::<Namespace>(
            json!({"metadata": {"name": "dev"}}),
            default_namespace,
            json!({"metadata": {"name": "dev", "labels": {"kubernetes.io/metadata.name": "dev"}},
                   "spec": {}, "status": {"phase": "Active"}}),
        );
        check::<Secret>(json!({}), default_secret, json!({"type": "Opaque"}));
        check::<Endpoints>(
            json!({"subsets": [{"ports": [{"port": 80}]}]}),
            default_endpoints,
            json!({"subsets": [{"ports": [{"port": 80, "protocol": "TCP"}]}]}),
        );
    }

    #[test]
    fn replication_controllers_and_limit_ranges() {
        let mut rc: ReplicationController = serde_json::from_value(json!({
            "spec": {"template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}
        })).unwrap_or_else(|e| panic!("{e}"));
        default_replication_controller(&mut rc);
        let spec = rc.spec.clone().unwrap_or_default();
        assert_eq!(spec.replicas, Some(1));
        assert_eq!(
            spec.selector,
            Some(BTreeMap::from([("app".to_owned(), "web".to_owned())]))
        );
        assert_eq!(rc.metadata.labels, spec.selector);
        let pod_spec = spec.template.and_then(|t| t.spec).unwrap_or_default();
        assert_eq!(pod_spec.restart_policy.as_deref(), Some("Always"));
        assert_eq!(
            pod_spec.enable_service_links, None,
            "pod-only defaults stay off templates"
        );

        check::<LimitRange>(
            json!({"spec": {"limits": [{"type": "Container", "max": {"cpu": "2"}, "min": {"memory": "1000Mi"}}]}}),
            default_limit_range,
            json!({"spec": {"limits": [{"type": "Container", "max": {"cpu": "2"}, "min": {"memory": "1000Mi"},
                "default": {"cpu": "2"}, "defaultRequest": {"cpu": "2", "memory": "1000Mi"}}]}}),
        );
    }

    #[test]
    fn persistent_volume_phases_carry_their_transition_time() {
        let pv = |status: serde_json::Value| -> PersistentVolume {
            serde_json::from_value(json!({"status": status})).unwrap_or_else(|e| panic!("{e}"))
        };
        let mut created = pv(json!({"phase": "Bound", "message": "client's"}));
        prepare_persistent_volume_for_create(&mut created);
        let status = created.status.clone().unwrap_or_default();
        assert_eq!(status.phase.as_deref(), Some("Pending"));
        assert!(status.message.is_none());
        assert!(status.last_phase_transition_time.is_some());

        let old =
            pv(json!({"phase": "Pending", "lastPhaseTransitionTime": "2020-01-01T00:00:00Z"}));
        let time = |pv: &PersistentVolume| {
            serde_json::to_value(pv.status.clone().unwrap_or_default())
                .unwrap_or_default()["lastPhaseTransitionTime"]
                .clone()
        };
        // Same phase: the time stays.
        let mut same = old.clone();
        prepare_persistent_volume_status_update(&mut same, &old);
        assert_eq!(time(&same), "2020-01-01T00:00:00Z");
        // A new phase with the old time (or none) is entered now.
        for status in [
            json!({"phase": "Available", "lastPhaseTransitionTime": "2020-01-01T00:00:00Z"}),
            json!({"phase": "Available"}),
        ] {
            let mut moved = pv(status);
            prepare_persistent_volume_status_update(&mut moved, &old);
            let now = time(&moved);
            assert!(
                now.as_str().is_some_and(|t| t > "2020-01-01T00:00:00Z"),
                "{now}"
            );
        }
        // A new phase with a time of the writer's own keeps that time.
        let mut given =
            pv(json!({"phase": "Available", "lastPhaseTransitionTime": "2021-05-05T00:00:00Z"}));
        prepare_persistent_volume_status_update(&mut given, &old);
        assert_eq!(time(&given), "2021-05-05T00:00:00Z");
    }
}

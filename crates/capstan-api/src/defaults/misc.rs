//! Defaults of the smaller kinds that have any: scheduling.k8s.io/v1 PriorityClasses (preemption
//! policy PreemptLowerPriority), admissionregistration.k8s.io/v1 webhook configurations,
//! ValidatingAdmissionPolicies and their bindings, and discovery.k8s.io/v1 EndpointSlices (each port named `""`
//! with protocol TCP). PodDisruptionBudgets, Leases, events.k8s.io Events, Bindings, Evictions
//! and Scales have none.

use k8s_openapi::api::admissionregistration::v1::{
    MatchResources, MutatingWebhookConfiguration, RuleWithOperations, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::scheduling::v1::PriorityClass;

/// PriorityClass defaults: preemption policy PreemptLowerPriority.
pub fn default_priority_class(pc: &mut PriorityClass) {
    pc.preemption_policy
        .get_or_insert_with(|| "PreemptLowerPriority".to_owned());
}

/// EndpointSlice defaults: every port gets an empty name and protocol TCP when unset.
pub fn default_endpoint_slice(slice: &mut EndpointSlice) {
    for port in slice.ports.iter_mut().flatten() {
        port.name.get_or_insert_with(String::new);
        port.protocol.get_or_insert_with(|| "TCP".to_owned());
    }
}

/// The API group of RBAC objects, which `roleRef` and user and group subjects name.
pub const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// RBAC binding defaults: `roleRef.apiGroup` is the RBAC group; a subject without an API group
/// gets the RBAC group for users and groups and the core group for service accounts.
pub fn default_rbac_binding(
    role_ref: &mut k8s_openapi::api::rbac::v1::RoleRef,
    subjects: Option<&mut Vec<k8s_openapi::api::rbac::v1::Subject>>,
) {
    if role_ref.api_group.is_empty() {
        role_ref.api_group = RBAC_GROUP.to_owned();
    }
    for subject in subjects.into_iter().flatten() {
        if subject.api_group.as_deref().unwrap_or_default().is_empty() {
            subject.api_group = Some(match subject.kind.as_str() {
                "ServiceAccount" => String::new(),
                "User" | "Group" => RBAC_GROUP.to_owned(),
                _ => continue,
            });
        }
    }
}

/// RoleBinding defaults (see [`default_rbac_binding`]).
pub fn default_role_binding(binding: &mut k8s_openapi::api::rbac::v1::RoleBinding) {
    default_rbac_binding(&mut binding.role_ref, binding.subjects.as_mut());
}

/// ClusterRoleBinding defaults (see [`default_rbac_binding`]).
pub fn default_cluster_role_binding(binding: &mut k8s_openapi::api::rbac::v1::ClusterRoleBinding) {
    default_rbac_binding(&mut binding.role_ref, binding.subjects.as_mut());
}

/// NetworkPolicy defaults: ports are TCP unless said otherwise; without `policyTypes` a policy
/// is an Ingress policy, and an Egress one too when it has egress rules.
pub fn default_network_policy(policy: &mut k8s_openapi::api::networking::v1::NetworkPolicy) {
    let Some(spec) = policy.spec.as_mut() else {
        return;
    };
    let rules = spec
        .ingress
        .iter_mut()
        .flatten()
        .flat_map(|r| r.ports.iter_mut().flatten());
    let egress = spec
        .egress
        .iter_mut()
        .flatten()
        .flat_map(|r| r.ports.iter_mut().flatten());
    for port in rules.chain(egress) {
        port.protocol.get_or_insert_with(|| "TCP".to_owned());
    }
    if spec.policy_types.as_ref().is_none_or(Vec::is_empty) {
        let mut types = vec!["Ingress".to_owned()];
        if spec.egress.as_ref().is_some_and(|e| !e.is_empty()) {
            types.push("Egress".to_owned());
        }
        spec.policy_types = Some(types);
    }
}

/// IngressClass defaults: parameters without a scope are cluster-scoped.
pub fn default_ingress_class(class: &mut k8s_openapi::api::networking::v1::IngressClass) {
    if let Some(parameters) = class.spec.as_mut().and_then(|s| s.parameters.as_mut()) {
        parameters.scope.get_or_insert_with(|| "Cluster".to_owned());
    }
}

/// StorageClass defaults: reclaim policy Delete, binding mode Immediate.
pub fn default_storage_class(class: &mut k8s_openapi::api::storage::v1::StorageClass) {
    class
        .reclaim_policy
        .get_or_insert_with(|| "Delete".to_owned());
    class
        .volume_binding_mode
        .get_or_insert_with(|| "Immediate".to_owned());
}

/// A CSIDriver: attach required, no pod information on mount, no capacity tracking, no
/// republishing, no SELinux mount option, the `ReadWriteOnceWithFSType` group policy and
/// persistent volumes only, as upstream's `SetDefaults_CSIDriver` with 1.33's gates.
pub fn default_csi_driver(driver: &mut k8s_openapi::api::storage::v1::CSIDriver) {
    let spec = &mut driver.spec;
    spec.attach_required.get_or_insert(true);
    spec.pod_info_on_mount.get_or_insert(false);
    spec.storage_capacity.get_or_insert(false);
    spec.fs_group_policy
        .get_or_insert_with(|| "ReadWriteOnceWithFSType".to_owned());
    if spec
        .volume_lifecycle_modes
        .as_ref()
        .is_none_or(Vec::is_empty)
    {
        spec.volume_lifecycle_modes = Some(vec!["Persistent".to_owned()]);
    }
    spec.requires_republish.get_or_insert(false);
    spec.se_linux_mount.get_or_insert(false);
}

/// A CustomResourceDefinition, as upstream's v1 `SetDefaults_CustomResourceDefinitionSpec`: the
/// singular name is the lower-case kind, the list kind the kind and `List`, and conversion is
/// `None`.
pub fn default_crd(
    crd: &mut k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) {
    let names = &mut crd.spec.names;
    if names.singular.as_deref().is_none_or(str::is_empty) {
        names.singular = Some(names.kind.to_lowercase());
    }
    if names.list_kind.as_deref().is_none_or(str::is_empty) && !names.kind.is_empty() {
        names.list_kind = Some(format!("{}List", names.kind));
    }
    crd.spec
        .conversion
        .get_or_insert_with(|| {
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceConversion {
                strategy: "None".to_owned(),
                webhook: None,
            }
        });
}

/// The defaults every admission webhook gets, mutating or validating (upstream's v1 defaults):
/// failure policy Fail, match policy Equivalent, empty (match-all) namespace and object
/// selectors, a 10 s timeout, rules of any scope and service port 443.
macro_rules! default_webhook {
    ($hook:expr) => {{
        let hook = $hook;
        hook.failure_policy.get_or_insert_with(|| "Fail".to_owned());
        hook.match_policy
            .get_or_insert_with(|| "Equivalent".to_owned());
        hook.namespace_selector.get_or_insert_default();
        hook.object_selector.get_or_insert_default();
        hook.timeout_seconds.get_or_insert(10);
        default_rules(hook.rules.as_deref_mut());
        default_client_config(&mut hook.client_config);
    }};
}

fn default_rules(rules: Option<&mut [RuleWithOperations]>) {
    for rule in rules.into_iter().flatten() {
        rule.scope.get_or_insert_with(|| "*".to_owned());
    }
}

fn default_client_config(config: &mut WebhookClientConfig) {
    if let Some(service) = &mut config.service {
        service.port.get_or_insert(443);
    }
}

/// MutatingWebhookConfiguration defaults: each webhook's, and reinvocation policy Never.
pub fn default_mutating_webhook_configuration(config: &mut MutatingWebhookConfiguration) {
    for hook in config.webhooks.iter_mut().flatten() {
        default_webhook!(&mut *hook);
        hook.reinvocation_policy
            .get_or_insert_with(|| "Never".to_owned());
    }
}

/// ValidatingWebhookConfiguration defaults: each webhook's.
pub fn default_validating_webhook_configuration(config: &mut ValidatingWebhookConfiguration) {
    for hook in config.webhooks.iter_mut().flatten() {
        default_webhook!(hook);
    }
}

/// The defaults of the resources a policy or binding matches (upstream's `SetDefaults_MatchResources`
/// and the rules' scope): match policy Equivalent, empty (match-all) selectors, any scope.
fn default_match_resources(resources: &mut MatchResources) {
    resources
        .match_policy
        .get_or_insert_with(|| "Equivalent".to_owned());
    resources.namespace_selector.get_or_insert_default();
    resources.object_selector.get_or_insert_default();
    for rule in [
        &mut resources.resource_rules,
        &mut resources.exclude_resource_rules,
    ]
    .into_iter()
    .flatten()
    .flatten()
    {
        rule.scope.get_or_insert_with(|| "*".to_owned());
    }
}

/// ValidatingAdmissionPolicy defaults: failure policy Fail, and its match constraints'.
pub fn default_validating_admission_policy(policy: &mut ValidatingAdmissionPolicy) {
    let Some(spec) = policy.spec.as_mut() else {
        return;
    };
    spec.failure_policy.get_or_insert_with(|| "Fail".to_owned());
    if let Some(constraints) = spec.match_constraints.as_mut() {
        default_match_resources(constraints);
    }
}

/// ValidatingAdmissionPolicyBinding defaults: those of the resources it matches, if it says.
pub fn default_validating_admission_policy_binding(binding: &mut ValidatingAdmissionPolicyBinding) {
    if let Some(resources) = binding
        .spec
        .as_mut()
        .and_then(|s| s.match_resources.as_mut())
    {
        default_match_resources(resources);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn priority_classes_and_endpoint_slices() {
        let mut pc: PriorityClass =
            serde_json::from_value(json!({"metadata": {"name": "high"}, "value": 1000}))
                .unwrap_or_else(|e| panic!("{e}"));
        default_priority_class(&mut pc);
        assert_eq!(
            pc.preemption_policy.as_deref(),
            Some("PreemptLowerPriority")
        );
        let mut never: PriorityClass = serde_json::from_value(
            json!({"metadata": {"name": "n"}, "value": 1, "preemptionPolicy": "Never"}),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        default_priority_class(&mut never);
        assert_eq!(never.preemption_policy.as_deref(), Some("Never"));

        let mut slice: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": "s"}, "addressType": "IPv4", "endpoints": [],
            "ports": [{"port": 80}, {"name": "dns", "port": 53, "protocol": "UDP"}]
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        default_endpoint_slice(&mut slice);
        let out = serde_json::to_value(&slice).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            out["ports"],
            json!([{"name": "", "port": 80, "protocol": "TCP"}, {"name": "dns", "port": 53, "protocol": "UDP"}])
        );
    }
}

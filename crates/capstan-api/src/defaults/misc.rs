//! Defaults of the smaller kinds that have any: scheduling.k8s.io/v1 PriorityClasses (preemption
//! policy PreemptLowerPriority) and discovery.k8s.io/v1 EndpointSlices (each port named `""`
//! with protocol TCP). PodDisruptionBudgets, Leases, events.k8s.io Events, Bindings, Evictions
//! and Scales have none.

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

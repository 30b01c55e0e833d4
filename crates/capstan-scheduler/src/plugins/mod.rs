//! The plugins, registered under their upstream names. Each is a small module whose fit and
//! score rules are pure functions of the pod, the node info and the snapshot, unit-tested
//! beside them.

use std::sync::Arc;

use crate::framework::Plugin;

pub mod default_preemption;
pub mod image_locality;
pub mod inter_pod_affinity;
pub mod node_affinity;
pub mod node_name;
pub mod node_ports;
pub mod node_resources;
pub mod node_unschedulable;
pub mod pod_topology_spread;
pub mod taint_toleration;
pub mod volume_binding;
pub mod volume_restrictions;
pub mod volume_zone;

/// Arguments a plugin may be configured with (`pluginConfig[].args`), as JSON.
pub type Args = serde_json::Value;

/// Builds the plugin registered under `name` with its configured arguments; `None` for a name
/// this scheduler does not know.
pub fn build(name: &str, args: Option<&Args>) -> Option<Result<Arc<dyn Plugin>, String>> {
    let plugin: Arc<dyn Plugin> = match name {
        node_name::NAME => Arc::new(node_name::NodeName),
        node_unschedulable::NAME => Arc::new(node_unschedulable::NodeUnschedulable),
        node_affinity::NAME => match node_affinity::NodeAffinity::from_args(args) {
            Ok(plugin) => Arc::new(plugin),
            Err(e) => return Some(Err(e)),
        },
        taint_toleration::NAME => Arc::new(taint_toleration::TaintToleration),
        node_ports::NAME => Arc::new(node_ports::NodePorts),
        node_resources::FIT => match node_resources::Fit::from_args(args) {
            Ok(plugin) => Arc::new(plugin),
            Err(e) => return Some(Err(e)),
        },
        node_resources::BALANCED_ALLOCATION => {
            match node_resources::BalancedAllocation::from_args(args) {
                Ok(plugin) => Arc::new(plugin),
                Err(e) => return Some(Err(e)),
            }
        }
        image_locality::NAME => Arc::new(image_locality::ImageLocality),
        pod_topology_spread::NAME => {
            match pod_topology_spread::PodTopologySpread::from_args(args) {
                Ok(plugin) => Arc::new(plugin),
                Err(e) => return Some(Err(e)),
            }
        }
        inter_pod_affinity::NAME => match inter_pod_affinity::InterPodAffinity::from_args(args) {
            Ok(plugin) => Arc::new(plugin),
            Err(e) => return Some(Err(e)),
        },
        volume_restrictions::NAME => Arc::new(volume_restrictions::VolumeRestrictions),
        volume_zone::NAME => Arc::new(volume_zone::VolumeZone),
        volume_binding::NAME => match volume_binding::VolumeBinding::from_args(args) {
            Ok(plugin) => Arc::new(plugin),
            Err(e) => return Some(Err(e)),
        },
        default_preemption::NAME => match default_preemption::DefaultPreemption::from_args(args) {
            Ok(plugin) => Arc::new(plugin),
            Err(e) => return Some(Err(e)),
        },
        _ => return None,
    };
    Some(Ok(plugin))
}

/// Plugins upstream registers that need nothing from this scheduler (their work is done
/// elsewhere, or concerns objects it does not serve): accepted in configuration, never run.
pub const ACCEPTED_WITHOUT_EFFECT: &[&str] = &[
    "PrioritySort",
    "SchedulingGates",
    "DefaultBinder",
    "NodeVolumeLimits",
    "DynamicResources",
];

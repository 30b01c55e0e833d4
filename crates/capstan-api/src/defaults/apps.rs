//! apps/v1 defaults: Deployments, ReplicaSets, StatefulSets, DaemonSets (as upstream's
//! `pkg/apis/apps/v1` defaulters apply them on decode), each with its pod template's defaults.
//! ControllerRevisions have none.

use k8s_openapi::api::apps::v1::{
    DaemonSet, DaemonSetUpdateStrategy, Deployment, DeploymentStrategy, ReplicaSet,
    RollingUpdateDaemonSet, RollingUpdateDeployment, RollingUpdateStatefulSetStrategy, StatefulSet,
    StatefulSetPersistentVolumeClaimRetentionPolicy, StatefulSetUpdateStrategy,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::core::default_persistent_volume_claim;
use super::pod::default_pod_template_spec;

/// Default number of old revisions a workload keeps.
pub const DEFAULT_REVISION_HISTORY_LIMIT: i32 = 10;
/// Default Deployment progress deadline, in seconds.
pub const DEFAULT_PROGRESS_DEADLINE_SECONDS: i32 = 600;
/// Default Deployment `maxUnavailable` and `maxSurge`.
pub const DEFAULT_DEPLOYMENT_ROLLING_PERCENT: &str = "25%";

fn is_unset(value: &Option<String>) -> bool {
    value.as_deref().unwrap_or("").is_empty()
}

/// Deployment defaults: one replica, a RollingUpdate strategy with `maxUnavailable` and
/// `maxSurge` of 25%, ten revisions of history, a 600 s progress deadline, and the template's
/// pod defaults.
pub fn default_deployment(d: &mut Deployment) {
    let spec = d.spec.get_or_insert_with(Default::default);
    spec.replicas.get_or_insert(1);
    let strategy = spec
        .strategy
        .get_or_insert_with(DeploymentStrategy::default);
    if is_unset(&strategy.type_) {
        strategy.type_ = Some("RollingUpdate".to_owned());
    }
    if strategy.type_.as_deref() == Some("RollingUpdate") {
        let rolling = strategy
            .rolling_update
            .get_or_insert_with(RollingUpdateDeployment::default);
        rolling.max_unavailable.get_or_insert_with(|| {
            IntOrString::String(DEFAULT_DEPLOYMENT_ROLLING_PERCENT.to_owned())
        });
        rolling.max_surge.get_or_insert_with(|| {
            IntOrString::String(DEFAULT_DEPLOYMENT_ROLLING_PERCENT.to_owned())
        });
    }
    spec.revision_history_limit
        .get_or_insert(DEFAULT_REVISION_HISTORY_LIMIT);
    spec.progress_deadline_seconds
        .get_or_insert(DEFAULT_PROGRESS_DEADLINE_SECONDS);
    default_pod_template_spec(&mut spec.template);
}

/// ReplicaSet defaults: one replica and the template's pod defaults.
pub fn default_replica_set(rs: &mut ReplicaSet) {
    let spec = rs.spec.get_or_insert_with(Default::default);
    spec.replicas.get_or_insert(1);
    // The template is a plain struct upstream, so even an absent one gets pod defaults.
    default_pod_template_spec(spec.template.get_or_insert_with(Default::default));
}

/// StatefulSet defaults: OrderedReady pod management, a RollingUpdate strategy with partition 0,
/// a Retain/Retain claim retention policy, one replica, ten revisions of history, the
/// template's pod defaults and each claim template's claim defaults.
pub fn default_stateful_set(ss: &mut StatefulSet) {
    let spec = ss.spec.get_or_insert_with(Default::default);
    if is_unset(&spec.pod_management_policy) {
        spec.pod_management_policy = Some("OrderedReady".to_owned());
    }
    let strategy = spec
        .update_strategy
        .get_or_insert_with(StatefulSetUpdateStrategy::default);
    if is_unset(&strategy.type_) {
        strategy.type_ = Some("RollingUpdate".to_owned());
        strategy
            .rolling_update
            .get_or_insert_with(RollingUpdateStatefulSetStrategy::default);
    }
    if strategy.type_.as_deref() == Some("RollingUpdate")
        && let Some(rolling) = &mut strategy.rolling_update
    {
        rolling.partition.get_or_insert(0);
    }
    let retention = spec
        .persistent_volume_claim_retention_policy
        .get_or_insert_with(StatefulSetPersistentVolumeClaimRetentionPolicy::default);
    if is_unset(&retention.when_deleted) {
        retention.when_deleted = Some("Retain".to_owned());
    }
    if is_unset(&retention.when_scaled) {
        retention.when_scaled = Some("Retain".to_owned());
    }
    spec.replicas.get_or_insert(1);
    spec.revision_history_limit
        .get_or_insert(DEFAULT_REVISION_HISTORY_LIMIT);
    default_pod_template_spec(&mut spec.template);
    for claim in spec.volume_claim_templates.iter_mut().flatten() {
        default_persistent_volume_claim(claim);
    }
}

/// DaemonSet defaults: a RollingUpdate strategy with `maxUnavailable` 1 and `maxSurge` 0, ten
/// revisions of history, and the template's pod defaults.
pub fn default_daemon_set(ds: &mut DaemonSet) {
    let spec = ds.spec.get_or_insert_with(Default::default);
    let strategy = spec
        .update_strategy
        .get_or_insert_with(DaemonSetUpdateStrategy::default);
    if is_unset(&strategy.type_) {
        strategy.type_ = Some("RollingUpdate".to_owned());
    }
    if strategy.type_.as_deref() == Some("RollingUpdate") {
        let rolling = strategy
            .rolling_update
            .get_or_insert_with(RollingUpdateDaemonSet::default);
        rolling.max_unavailable.get_or_insert(IntOrString::Int(1));
        rolling.max_surge.get_or_insert(IntOrString::Int(0));
    }
    spec.revision_history_limit
        .get_or_insert(DEFAULT_REVISION_HISTORY_LIMIT);
    default_pod_template_spec(&mut spec.template);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn defaulted<T: serde::de::DeserializeOwned + serde::Serialize>(
        value: Value,
        default: fn(&mut T),
    ) -> Value {
        let mut object: T = serde_json::from_value(value).unwrap_or_else(|e| panic!("{e}"));
        default(&mut object);
        serde_json::to_value(&object).unwrap_or_else(|e| panic!("{e}"))
    }

    fn template() -> Value {
        json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}})
    }

    #[test]
    fn deployments() {
        let out = defaulted::<Deployment>(
            json!({"spec": {"selector": {"matchLabels": {"app": "web"}}, "template": template()}}),
            default_deployment,
        );
        let spec = &out["spec"];
        assert_eq!(spec["replicas"], 1);
        assert_eq!(
            spec["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
        );
        assert_eq!(spec["revisionHistoryLimit"], 10);
        assert_eq!(spec["progressDeadlineSeconds"], 600);
        assert_eq!(spec["template"]["spec"]["restartPolicy"], "Always");
        assert_eq!(
            spec["template"]["spec"]["containers"][0]["imagePullPolicy"],
            "Always"
        );

        let out = defaulted::<Deployment>(
            json!({"spec": {"replicas": 0, "strategy": {"type": "Recreate"}, "template": template()}}),
            default_deployment,
        );
        assert_eq!(out["spec"]["replicas"], 0);
        assert_eq!(out["spec"]["strategy"], json!({"type": "Recreate"}));
    }

    #[test]
    fn replica_sets() {
        let out = defaulted::<ReplicaSet>(
            json!({"spec": {"template": template()}}),
            default_replica_set,
        );
        assert_eq!(out["spec"]["replicas"], 1);
        assert_eq!(out["spec"]["template"]["spec"]["dnsPolicy"], "ClusterFirst");
    }

    #[test]
    fn stateful_sets() {
        let out = defaulted::<StatefulSet>(
            json!({"spec": {"template": template(), "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {}}]}}),
            default_stateful_set,
        );
        let spec = &out["spec"];
        assert_eq!(spec["podManagementPolicy"], "OrderedReady");
        assert_eq!(
            spec["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
        );
        assert_eq!(
            spec["persistentVolumeClaimRetentionPolicy"],
            json!({"whenDeleted": "Retain", "whenScaled": "Retain"})
        );
        assert_eq!(spec["replicas"], 1);
        assert_eq!(spec["revisionHistoryLimit"], 10);
        assert_eq!(
            spec["volumeClaimTemplates"][0]["spec"]["volumeMode"],
            "Filesystem"
        );
        assert_eq!(
            spec["volumeClaimTemplates"][0]["status"]["phase"],
            "Pending"
        );

        // OnDelete keeps its (invalid) rolling update untouched; validation reports it.
        let out = defaulted::<StatefulSet>(
            json!({"spec": {"updateStrategy": {"type": "OnDelete", "rollingUpdate": {}}, "template": template()}}),
            default_stateful_set,
        );
        assert_eq!(
            out["spec"]["updateStrategy"],
            json!({"type": "OnDelete", "rollingUpdate": {}})
        );
        // An explicit RollingUpdate without parameters gets no rollingUpdate.
        let out = defaulted::<StatefulSet>(
            json!({"spec": {"updateStrategy": {"type": "RollingUpdate"}, "template": template()}}),
            default_stateful_set,
        );
        assert_eq!(
            out["spec"]["updateStrategy"],
            json!({"type": "RollingUpdate"})
        );
    }

    #[test]
    fn daemon_sets() {
        let out = defaulted::<DaemonSet>(
            json!({"spec": {"template": template()}}),
            default_daemon_set,
        );
        assert_eq!(
            out["spec"]["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
        );
        assert_eq!(out["spec"]["revisionHistoryLimit"], 10);
        let out = defaulted::<DaemonSet>(
            json!({"spec": {"updateStrategy": {"type": "OnDelete"}, "template": template()}}),
            default_daemon_set,
        );
        assert_eq!(out["spec"]["updateStrategy"], json!({"type": "OnDelete"}));
    }
}

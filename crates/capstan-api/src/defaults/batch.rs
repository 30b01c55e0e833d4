//! batch/v1 defaults (Jobs and CronJobs, as upstream's `pkg/apis/batch/v1` defaulters), and the
//! part of the Job registry strategy that runs on create: the generated selector and pod labels.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{CronJob, Job, PodFailurePolicy};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::pod::default_pod_template_spec;

/// The label with the owning Job's uid on its pods (and in its generated selector).
pub const CONTROLLER_UID_LABEL: &str = "batch.kubernetes.io/controller-uid";
/// The label with the owning Job's name on its pods.
pub const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";
/// The unprefixed form of [`CONTROLLER_UID_LABEL`], still set for compatibility.
pub const LEGACY_CONTROLLER_UID_LABEL: &str = "controller-uid";
/// The unprefixed form of [`JOB_NAME_LABEL`], still set for compatibility.
pub const LEGACY_JOB_NAME_LABEL: &str = "job-name";

/// Default retries of a Job.
pub const DEFAULT_BACKOFF_LIMIT: i32 = 6;

fn default_pod_failure_policy(policy: &mut Option<PodFailurePolicy>) {
    for rule in policy.iter_mut().flat_map(|p| p.rules.iter_mut()) {
        for pattern in rule.on_pod_conditions.iter_mut().flatten() {
            if pattern.status.is_empty() {
                pattern.status = "True".to_owned();
            }
        }
    }
}

/// Job defaults: completions and parallelism 1 when both are unset (parallelism 1 when only it
/// is), a backoff limit of 6 (the largest int32 with a per-index limit), metadata labels from
/// the template's when the Job has none, NonIndexed completion, not suspended, a pod
/// replacement policy (Failed with a pod failure policy, TerminatingOrFailed otherwise),
/// manualSelector false, pod-condition patterns with status True, and the template's pod
/// defaults.
pub fn default_job(job: &mut Job) {
    let spec = job.spec.get_or_insert_with(Default::default);
    if spec.completions.is_none() && spec.parallelism.is_none() {
        spec.completions = Some(1);
        spec.parallelism = Some(1);
    }
    spec.parallelism.get_or_insert(1);
    if spec.backoff_limit.is_none() {
        spec.backoff_limit = Some(if spec.backoff_limit_per_index.is_some() {
            i32::MAX
        } else {
            DEFAULT_BACKOFF_LIMIT
        });
    }
    let template_labels = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone());
    if let Some(labels) = template_labels
        && job.metadata.labels.as_ref().is_none_or(BTreeMap::is_empty)
    {
        job.metadata.labels = Some(labels);
    }
    spec.completion_mode
        .get_or_insert_with(|| "NonIndexed".to_owned());
    spec.suspend.get_or_insert(false);
    if spec.pod_replacement_policy.is_none() {
        spec.pod_replacement_policy = Some(if spec.pod_failure_policy.is_some() {
            "Failed".to_owned()
        } else {
            "TerminatingOrFailed".to_owned()
        });
    }
    spec.manual_selector.get_or_insert(false);
    default_pod_failure_policy(&mut spec.pod_failure_policy);
    default_pod_template_spec(&mut spec.template);
}

/// CronJob defaults: concurrency policy Allow, not suspended, three successful and one failed
/// Job kept, and the job template's pod-condition patterns and pod defaults. (The job template's
/// own spec gets no Job defaults: those apply when the CronJob creates a Job.)
pub fn default_cron_job(cron_job: &mut CronJob) {
    let spec = cron_job.spec.get_or_insert_with(Default::default);
    if spec.concurrency_policy.as_deref().unwrap_or("").is_empty() {
        spec.concurrency_policy = Some("Allow".to_owned());
    }
    spec.suspend.get_or_insert(false);
    spec.successful_jobs_history_limit.get_or_insert(3);
    spec.failed_jobs_history_limit.get_or_insert(1);
    let job_spec = spec.job_template.spec.get_or_insert_with(Default::default);
    default_pod_failure_policy(&mut job_spec.pod_failure_policy);
    default_pod_template_spec(&mut job_spec.template);
}

/// What upstream's Job strategy does on create, after defaulting and before validation: the
/// status is cleared, the generation is 1, and unless `manualSelector` is true the pod
/// template gets the job-name and controller-uid labels (prefixed and legacy, each only if not
/// already set) and the selector matches `batch.kubernetes.io/controller-uid` = `uid`. `uid` is
/// the uid the registry assigned; it is stored in `metadata.uid` when that is unset.
pub fn prepare_job_for_create(job: &mut Job, uid: &str) {
    job.status = None;
    job.metadata.generation = Some(1);
    if job.metadata.uid.as_deref().unwrap_or("").is_empty() {
        job.metadata.uid = Some(uid.to_owned());
    }
    let uid = job.metadata.uid.clone().unwrap_or_default();
    let name = job.metadata.name.clone().unwrap_or_default();
    let spec = job.spec.get_or_insert_with(Default::default);
    if spec.manual_selector == Some(true) {
        return;
    }
    let labels = spec
        .template
        .metadata
        .get_or_insert_with(Default::default)
        .labels
        .get_or_insert_with(BTreeMap::new);
    for key in [LEGACY_JOB_NAME_LABEL, JOB_NAME_LABEL] {
        labels.entry(key.to_owned()).or_insert_with(|| name.clone());
    }
    for key in [LEGACY_CONTROLLER_UID_LABEL, CONTROLLER_UID_LABEL] {
        labels.entry(key.to_owned()).or_insert_with(|| uid.clone());
    }
    let selector = spec.selector.get_or_insert_with(LabelSelector::default);
    selector
        .match_labels
        .get_or_insert_with(BTreeMap::new)
        .entry(CONTROLLER_UID_LABEL.to_owned())
        .or_insert(uid);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn job(spec: Value) -> Job {
        let mut job: Job = serde_json::from_value(
            json!({"metadata": {"name": "pi", "namespace": "default"}, "spec": spec}),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        default_job(&mut job);
        job
    }

    fn template() -> Value {
        json!({"metadata": {"labels": {"app": "pi"}}, "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "perl"}]}})
    }

    #[test]
    fn job_defaults() {
        let out = serde_json::to_value(job(json!({"template": template()})))
            .unwrap_or_else(|e| panic!("{e}"));
        let spec = &out["spec"];
        assert_eq!(spec["completions"], 1);
        assert_eq!(spec["parallelism"], 1);
        assert_eq!(spec["backoffLimit"], 6);
        assert_eq!(spec["completionMode"], "NonIndexed");
        assert_eq!(spec["suspend"], false);
        assert_eq!(spec["podReplacementPolicy"], "TerminatingOrFailed");
        assert_eq!(spec["manualSelector"], false);
        assert_eq!(out["metadata"]["labels"], json!({"app": "pi"}));
        assert_eq!(spec["template"]["spec"]["dnsPolicy"], "ClusterFirst");

        let out = serde_json::to_value(job(json!({
            "parallelism": 3, "backoffLimitPerIndex": 1, "completionMode": "Indexed",
            "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]},
            "template": template()
        })))
        .unwrap_or_else(|e| panic!("{e}"));
        let spec = &out["spec"];
        assert_eq!(spec.get("completions"), None);
        assert_eq!(spec["parallelism"], 3);
        assert_eq!(spec["backoffLimit"], 2147483647);
        assert_eq!(spec["podReplacementPolicy"], "Failed");
        assert_eq!(
            spec["podFailurePolicy"]["rules"][0]["onPodConditions"][0]["status"],
            "True"
        );
    }

    #[test]
    fn cron_job_defaults() {
        let mut cron: CronJob = serde_json::from_value(json!({
            "metadata": {"name": "c"},
            "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": template()}}}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        default_cron_job(&mut cron);
        let out = serde_json::to_value(cron).unwrap_or_else(|e| panic!("{e}"));
        let spec = &out["spec"];
        assert_eq!(spec["concurrencyPolicy"], "Allow");
        assert_eq!(spec["suspend"], false);
        assert_eq!(spec["successfulJobsHistoryLimit"], 3);
        assert_eq!(spec["failedJobsHistoryLimit"], 1);
        assert_eq!(spec["jobTemplate"]["spec"].get("backoffLimit"), None);
        assert_eq!(
            spec["jobTemplate"]["spec"]["template"]["spec"]["schedulerName"],
            "default-scheduler"
        );
    }

    #[test]
    fn generated_selector() {
        let mut generated = job(json!({"template": template()}));
        prepare_job_for_create(&mut generated, "1234");
        let out = serde_json::to_value(&generated).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(out["metadata"]["uid"], "1234");
        assert_eq!(out["metadata"]["generation"], 1);
        assert_eq!(
            out["spec"]["selector"],
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": "1234"}})
        );
        assert_eq!(
            out["spec"]["template"]["metadata"]["labels"],
            json!({
                "app": "pi",
                "batch.kubernetes.io/controller-uid": "1234",
                "batch.kubernetes.io/job-name": "pi",
                "controller-uid": "1234",
                "job-name": "pi"
            })
        );

        let mut manual = job(
            json!({"manualSelector": true, "selector": {"matchLabels": {"app": "pi"}}, "template": template()}),
        );
        prepare_job_for_create(&mut manual, "1234");
        let out = serde_json::to_value(&manual).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            out["spec"]["selector"],
            json!({"matchLabels": {"app": "pi"}})
        );
        assert_eq!(
            out["spec"]["template"]["metadata"]["labels"],
            json!({"app": "pi"})
        );
    }
}

//! batch/v1 kinds: Jobs (spec, generated selector, pod failure and success policies, the update
//! rules and the status rules of upstream 1.33 with its default feature gates) and CronJobs
//! (schedule, time zone, job template). Run [`crate::defaults::batch`] first, and for a new Job
//! also [`crate::defaults::batch::prepare_job_for_create`].

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::batch::v1::{
    CronJob, CronJobSpec, Job, JobSpec, JobStatus, JobTemplateSpec, PodFailurePolicy,
    PodFailurePolicyOnExitCodesRequirement, PodFailurePolicyOnPodConditionsPattern,
    PodFailurePolicyRule, SuccessPolicy,
};
use k8s_openapi::api::core::v1::{Affinity, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};

use crate::cron;
use crate::defaults::batch::{
    CONTROLLER_UID_LABEL, JOB_NAME_LABEL, LEGACY_CONTROLLER_UID_LABEL, LEGACY_JOB_NAME_LABEL,
};
use crate::field::{BadValue, FieldError, Path, go_quote};
use crate::selector::LabelSelector as Selector;
use crate::validation::apps::semantic_eq;
use crate::validation::gofmt::{go_opt_string_map, go_pointer, selector_value};
use crate::validation::meta::{
    FIELD_IMMUTABLE, validate_label_selector, validate_nonnegative, validate_object_meta,
    validate_object_meta_update,
};
use crate::validation::names::{NameValidator, is_dns1123_label, validate_qualified_name};
use crate::validation::pod::{PodValidationOptions, validate_pod_template_spec};

const MAX_PARALLELISM_FOR_INDEXED_JOB: i32 = 100_000;
const MAX_FAILED_INDEXES_FOR_INDEXED_JOB: i32 = 100_000;
const COMPLETIONS_SOFT_LIMIT: i32 = 100_000;
const PARALLELISM_LIMIT_FOR_HIGH_COMPLETIONS: i32 = 10_000;
const MAX_FAILED_INDEXES_LIMIT_FOR_HIGH_COMPLETIONS: i32 = 10_000;
const MAX_POD_FAILURE_POLICY_RULES: usize = 20;
const MAX_ON_EXIT_CODES_VALUES: usize = 255;
const MAX_ON_POD_CONDITIONS_PATTERNS: usize = 20;
const MAX_MANAGED_BY_LENGTH: usize = 63;
const MAX_SUCCEEDED_INDEXES_LENGTH: usize = 64 * 1024;
const MAX_SUCCESS_POLICY_RULES: usize = 20;
/// The longest CronJob name: Job names get an 11-character suffix and stay within 63.
pub const MAX_CRON_JOB_NAME_LENGTH: usize = 52;

const POD_FAILURE_POLICY_ACTIONS: &[&str] = &["Count", "FailIndex", "FailJob", "Ignore"];
const ON_EXIT_CODES_OPERATORS: &[&str] = &["In", "NotIn"];
const CONDITION_STATUSES: &[&str] = &["False", "True", "Unknown"];
const POD_REPLACEMENT_POLICIES: &[&str] = &["Failed", "TerminatingOrFailed"];

fn meta_path() -> Path {
    Path::new("metadata")
}

fn spec_path() -> Path {
    Path::new("spec")
}

/// Go's `%q` of a string slice (`["a" "b"]`), which upstream uses in some details.
fn go_quoted_list(values: &[&str]) -> String {
    let quoted: Vec<String> = values.iter().map(|v| go_quote(v)).collect();
    format!("[{}]", quoted.join(" "))
}

fn go_int32_slice(values: &[i32]) -> String {
    let items: Vec<String> = values.iter().map(i32::to_string).collect();
    format!("[]int32{{{}}}", items.join(", "))
}

fn opt_i64(value: Option<i32>) -> BadValue {
    value.map_or(BadValue::Null, BadValue::from)
}

fn opt_str(value: Option<&str>) -> BadValue {
    value.map_or(BadValue::Null, BadValue::from)
}

fn immutable(changed: bool, path: &Path, value: BadValue) -> Vec<FieldError> {
    if changed {
        vec![FieldError::invalid(path, value, FIELD_IMMUTABLE)]
    } else {
        Vec::new()
    }
}

/// Choices upstream's Job strategy derives from the request.
#[derive(Clone, Copy, Debug, Default)]
pub struct JobValidationOptions {
    /// The template must carry the prefixed `batch.kubernetes.io/` labels (always on create; on
    /// update only when the old template had both).
    pub require_prefixed_labels: bool,
    /// Scheduling directives of the template may change (the old Job was suspended and never
    /// started).
    pub allow_mutable_scheduling_directives: bool,
    /// Selector values need not be valid label values (the old selector already had such).
    pub allow_invalid_label_value_in_selector: bool,
}

fn has_label(template: &PodTemplateSpec, key: &str, expected: &str) -> Vec<FieldError> {
    let labels = template.metadata.as_ref().and_then(|m| m.labels.as_ref());
    let path = Path::new("spec")
        .child("template")
        .child("metadata")
        .child("labels")
        .key(key);
    let detail = format!("must be '{expected}'");
    match labels.and_then(|l| l.get(key)) {
        None => vec![FieldError::required(&path, &detail)],
        Some(actual) if actual != expected => vec![FieldError::invalid(
            &path,
            BadValue::Other(go_opt_string_map(labels)),
            &detail,
        )],
        Some(_) => Vec::new(),
    }
}

fn validate_generated_selector(job: &Job, spec: &JobSpec, prefixed: bool) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if spec.manual_selector == Some(true) {
        return errs;
    }
    let Some(selector) = &spec.selector else {
        return errs;
    };
    let uid = job.metadata.uid.as_deref().unwrap_or("");
    let name = job.metadata.name.as_deref().unwrap_or("");
    if uid.is_empty() {
        errs.push(FieldError::required(&meta_path().child("uid"), ""));
    }
    errs.extend(has_label(&spec.template, LEGACY_CONTROLLER_UID_LABEL, uid));
    errs.extend(has_label(&spec.template, LEGACY_JOB_NAME_LABEL, name));
    let mut expected = BTreeMap::new();
    if prefixed {
        errs.extend(has_label(&spec.template, CONTROLLER_UID_LABEL, uid));
        errs.extend(has_label(&spec.template, JOB_NAME_LABEL, name));
        expected.insert(CONTROLLER_UID_LABEL.to_owned(), uid.to_owned());
        expected.insert(JOB_NAME_LABEL.to_owned(), name.to_owned());
    }
    expected.insert(LEGACY_CONTROLLER_UID_LABEL.to_owned(), uid.to_owned());
    expected.insert(LEGACY_JOB_NAME_LABEL.to_owned(), name.to_owned());
    if let Ok(converted) = Selector::from_api(Some(selector))
        && !converted.matches(&expected)
    {
        errs.push(FieldError::invalid(
            &spec_path().child("selector"),
            selector_value(Some(selector)),
            "`selector` not auto-generated",
        ));
    }
    errs
}

/// A new Job: metadata (DNS-subdomain name), the generated selector and labels, the spec, and
/// for Indexed Jobs a name that still makes valid pod hostnames.
pub fn validate_job_with(job: &Job, opts: &JobValidationOptions) -> Vec<FieldError> {
    let spec = job.spec.clone().unwrap_or_default();
    let mut errs = validate_object_meta(
        &job.metadata,
        true,
        NameValidator::DnsSubdomain,
        &meta_path(),
    );
    errs.extend(validate_generated_selector(
        job,
        &spec,
        opts.require_prefixed_labels,
    ));
    errs.extend(validate_job_spec(&spec, &spec_path(), opts));
    if spec.completion_mode.as_deref() == Some("Indexed")
        && let Some(completions) = spec.completions.filter(|c| *c > 0)
    {
        let name = job.metadata.name.as_deref().unwrap_or("");
        let hostname = format!("{name}-{}", completions - 1);
        if !is_dns1123_label(&hostname).is_empty() {
            errs.push(FieldError::invalid(
                &meta_path().child("name"),
                name,
                &format!("will not able to create pod with invalid DNS label: {hostname}"),
            ));
        }
    }
    errs
}

/// A new Job, with the options upstream uses on create.
pub fn validate_job(job: &Job) -> Vec<FieldError> {
    validate_job_with(
        job,
        &JobValidationOptions {
            require_prefixed_labels: true,
            ..Default::default()
        },
    )
}

/// A Job spec at `path`: the shared checks plus a required selector matching the template.
pub fn validate_job_spec(
    spec: &JobSpec,
    path: &Path,
    opts: &JobValidationOptions,
) -> Vec<FieldError> {
    let mut errs = validate_job_spec_common(spec, path);
    let selector_path = path.child("selector");
    match &spec.selector {
        None => errs.push(FieldError::required(&selector_path, "")),
        Some(selector) => errs.extend(validate_label_selector(
            Some(selector),
            opts.allow_invalid_label_value_in_selector,
            &selector_path,
        )),
    }
    if let Ok(converted) = Selector::from_api(spec.selector.as_ref()) {
        let labels = spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.as_ref());
        let empty = BTreeMap::new();
        if !converted.matches(labels.unwrap_or(&empty)) {
            errs.push(FieldError::invalid(
                &path.child("template").child("metadata").child("labels"),
                BadValue::Other(go_opt_string_map(labels)),
                "`selector` does not match template `labels`",
            ));
        }
    }
    errs
}

/// The checks a Job spec and a CronJob's job template share.
fn validate_job_spec_common(spec: &JobSpec, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let nonneg = |value: Option<i32>, field: &str| {
        value.map_or_else(Vec::new, |v| {
            validate_nonnegative(i64::from(v), &path.child(field))
        })
    };
    errs.extend(nonneg(spec.parallelism, "parallelism"));
    errs.extend(nonneg(spec.completions, "completions"));
    if let Some(deadline) = spec.active_deadline_seconds {
        errs.extend(validate_nonnegative(
            deadline,
            &path.child("activeDeadlineSeconds"),
        ));
    }
    errs.extend(nonneg(spec.backoff_limit, "backoffLimit"));
    errs.extend(nonneg(
        spec.ttl_seconds_after_finished,
        "ttlSecondsAfterFinished",
    ));
    errs.extend(nonneg(spec.backoff_limit_per_index, "backoffLimitPerIndex"));
    if let Some(max_failed) = spec.max_failed_indexes {
        errs.extend(validate_nonnegative(
            i64::from(max_failed),
            &path.child("maxFailedIndexes"),
        ));
        if spec.backoff_limit_per_index.is_none() {
            errs.push(FieldError::required(
                &path.child("backoffLimitPerIndex"),
                "when maxFailedIndexes is specified",
            ));
        }
    }
    if let Some(managed_by) = &spec.managed_by {
        let p = path.child("managedBy");
        errs.extend(crate::validation::names::validate_domain_prefixed_path(
            &p, managed_by,
        ));
        if managed_by.len() > MAX_MANAGED_BY_LENGTH {
            errs.push(FieldError::too_long(&p, MAX_MANAGED_BY_LENGTH));
        }
    }
    let indexed = spec.completion_mode.as_deref() == Some("Indexed");
    if let Some(mode) = &spec.completion_mode {
        if mode != "NonIndexed" && mode != "Indexed" {
            errs.push(FieldError::not_supported(
                &path.child("completionMode"),
                mode.as_str(),
                &["NonIndexed", "Indexed"],
            ));
        }
        if indexed {
            errs.extend(validate_indexed_limits(spec, path));
        }
    }
    if !indexed {
        if let Some(limit) = spec.backoff_limit_per_index {
            errs.push(FieldError::invalid(
                &path.child("backoffLimitPerIndex"),
                limit,
                "requires indexed completion mode",
            ));
        }
        if let Some(max_failed) = spec.max_failed_indexes {
            errs.push(FieldError::invalid(
                &path.child("maxFailedIndexes"),
                max_failed,
                "requires indexed completion mode",
            ));
        }
    }
    if let Some(policy) = &spec.pod_failure_policy {
        errs.extend(validate_pod_failure_policy(
            spec,
            policy,
            &path.child("podFailurePolicy"),
        ));
    }
    if let Some(policy) = &spec.success_policy {
        if indexed {
            errs.extend(validate_success_policy(
                spec,
                policy,
                &path.child("successPolicy"),
            ));
        } else {
            errs.push(FieldError::invalid(
                &path.child("successPolicy"),
                BadValue::Other(go_success_policy(policy)),
                "requires indexed completion mode",
            ));
        }
    }
    if let Some(replacement) = &spec.pod_replacement_policy {
        let p = path.child("podReplacementPolicy");
        if spec.pod_failure_policy.is_some() {
            if replacement != "Failed" {
                errs.push(FieldError::not_supported(
                    &p,
                    replacement.as_str(),
                    &["Failed"],
                ));
            }
        } else if !POD_REPLACEMENT_POLICIES.contains(&replacement.as_str()) {
            errs.push(FieldError::not_supported(
                &p,
                replacement.as_str(),
                POD_REPLACEMENT_POLICIES,
            ));
        }
    }
    let template_path = path.child("template");
    errs.extend(validate_pod_template_spec(
        &spec.template,
        &template_path,
        &PodValidationOptions::default(),
    ));
    let restart_path = template_path.child("spec").child("restartPolicy");
    let restart = spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.clone())
        .unwrap_or_default();
    match restart.as_str() {
        "" | "Always" => errs.push(FieldError::required(
            &restart_path,
            "valid values: \"OnFailure\", \"Never\"",
        )),
        "OnFailure" if spec.pod_failure_policy.is_some() => errs.push(FieldError::invalid(
            &restart_path,
            restart.as_str(),
            "only \"Never\" is supported when podFailurePolicy is specified",
        )),
        "OnFailure" | "Never" => {}
        other => errs.push(FieldError::not_supported(
            &restart_path,
            other,
            &["OnFailure", "Never"],
        )),
    }
    errs
}

fn validate_indexed_limits(spec: &JobSpec, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if spec.completions.is_none() {
        errs.push(FieldError::required(
            &path.child("completions"),
            "when completion mode is Indexed",
        ));
    }
    if let Some(parallelism) = spec
        .parallelism
        .filter(|p| *p > MAX_PARALLELISM_FOR_INDEXED_JOB)
    {
        errs.push(FieldError::invalid(
            &path.child("parallelism"),
            parallelism,
            &format!(
                "must be less than or equal to {MAX_PARALLELISM_FOR_INDEXED_JOB} when completion mode is Indexed"
            ),
        ));
    }
    if let (Some(completions), Some(max_failed)) = (spec.completions, spec.max_failed_indexes)
        && max_failed > completions
    {
        errs.push(FieldError::invalid(
            &path.child("maxFailedIndexes"),
            max_failed,
            "must be less than or equal to completions",
        ));
    }
    if let Some(max_failed) = spec
        .max_failed_indexes
        .filter(|m| *m > MAX_FAILED_INDEXES_FOR_INDEXED_JOB)
    {
        errs.push(FieldError::invalid(
            &path.child("maxFailedIndexes"),
            max_failed,
            &format!("must be less than or equal to {MAX_FAILED_INDEXES_FOR_INDEXED_JOB}"),
        ));
    }
    if spec.completions.is_some_and(|c| c > COMPLETIONS_SOFT_LIMIT)
        && spec.backoff_limit_per_index.is_some()
    {
        if spec.max_failed_indexes.is_none() {
            errs.push(FieldError::required(
                &path.child("maxFailedIndexes"),
                &format!("must be specified when completions is above {COMPLETIONS_SOFT_LIMIT}"),
            ));
        }
        if let Some(parallelism) = spec
            .parallelism
            .filter(|p| *p > PARALLELISM_LIMIT_FOR_HIGH_COMPLETIONS)
        {
            errs.push(FieldError::invalid(
                &path.child("parallelism"),
                parallelism,
                &format!(
                    "must be less than or equal to {PARALLELISM_LIMIT_FOR_HIGH_COMPLETIONS} when completions are above {COMPLETIONS_SOFT_LIMIT} and used with backoff limit per index"
                ),
            ));
        }
        if let Some(max_failed) = spec
            .max_failed_indexes
            .filter(|m| *m > MAX_FAILED_INDEXES_LIMIT_FOR_HIGH_COMPLETIONS)
        {
            errs.push(FieldError::invalid(
                &path.child("maxFailedIndexes"),
                max_failed,
                &format!(
                    "must be less than or equal to {MAX_FAILED_INDEXES_LIMIT_FOR_HIGH_COMPLETIONS} when completions are above {COMPLETIONS_SOFT_LIMIT} and used with backoff limit per index"
                ),
            ));
        }
    }
    errs
}

fn validate_pod_failure_policy(
    spec: &JobSpec,
    policy: &PodFailurePolicy,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let rules_path = path.child("rules");
    if policy.rules.len() > MAX_POD_FAILURE_POLICY_RULES {
        errs.push(FieldError::too_many(
            &rules_path,
            policy.rules.len(),
            MAX_POD_FAILURE_POLICY_RULES,
        ));
    }
    let pod_spec = spec.template.spec.clone().unwrap_or_default();
    let container_names: BTreeSet<String> = pod_spec
        .containers
        .iter()
        .map(|c| c.name.clone())
        .chain(
            pod_spec
                .init_containers
                .iter()
                .flatten()
                .map(|c| c.name.clone()),
        )
        .collect();
    for (i, rule) in policy.rules.iter().enumerate() {
        errs.extend(validate_pod_failure_policy_rule(
            spec,
            rule,
            &rules_path.index(i),
            &container_names,
        ));
    }
    errs
}

fn validate_pod_failure_policy_rule(
    spec: &JobSpec,
    rule: &PodFailurePolicyRule,
    path: &Path,
    container_names: &BTreeSet<String>,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let action_path = path.child("action");
    match rule.action.as_str() {
        "" => errs.push(FieldError::required(
            &action_path,
            &format!(
                "valid values: {}",
                go_quoted_list(POD_FAILURE_POLICY_ACTIONS)
            ),
        )),
        "FailIndex" if spec.backoff_limit_per_index.is_none() => {
            errs.push(FieldError::invalid(
                &action_path,
                "FailIndex",
                "requires the backoffLimitPerIndex to be set",
            ));
        }
        "FailIndex" => {}
        action if !POD_FAILURE_POLICY_ACTIONS.contains(&action) => errs.push(
            FieldError::not_supported(&action_path, action, POD_FAILURE_POLICY_ACTIONS),
        ),
        _ => {}
    }
    if let Some(on_exit_codes) = &rule.on_exit_codes {
        errs.extend(validate_on_exit_codes(
            on_exit_codes,
            &path.child("onExitCodes"),
            container_names,
        ));
    }
    let patterns = rule.on_pod_conditions.as_deref().unwrap_or(&[]);
    if !patterns.is_empty() {
        errs.extend(validate_on_pod_conditions(
            patterns,
            &path.child("onPodConditions"),
        ));
    }
    if rule.on_exit_codes.is_some() && !patterns.is_empty() {
        errs.push(FieldError::invalid(
            path,
            BadValue::Omitted,
            "specifying both OnExitCodes and OnPodConditions is not supported",
        ));
    }
    if rule.on_exit_codes.is_none() && patterns.is_empty() {
        errs.push(FieldError::invalid(
            path,
            BadValue::Omitted,
            "specifying one of OnExitCodes and OnPodConditions is required",
        ));
    }
    errs
}

fn validate_on_pod_conditions(
    patterns: &[PodFailurePolicyOnPodConditionsPattern],
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if patterns.len() > MAX_ON_POD_CONDITIONS_PATTERNS {
        errs.push(FieldError::too_many(
            path,
            patterns.len(),
            MAX_ON_POD_CONDITIONS_PATTERNS,
        ));
    }
    for (j, pattern) in patterns.iter().enumerate() {
        let pattern_path = path.index(j);
        errs.extend(validate_qualified_name(
            &pattern.type_,
            &pattern_path.child("type"),
        ));
        let status_path = pattern_path.child("status");
        match pattern.status.as_str() {
            "" => errs.push(FieldError::required(
                &status_path,
                &format!("valid values: {}", go_quoted_list(CONDITION_STATUSES)),
            )),
            status if !CONDITION_STATUSES.contains(&status) => errs.push(
                FieldError::not_supported(&status_path, status, CONDITION_STATUSES),
            ),
            _ => {}
        }
    }
    errs
}

fn validate_on_exit_codes(
    requirement: &PodFailurePolicyOnExitCodesRequirement,
    path: &Path,
    container_names: &BTreeSet<String>,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let operator_path = path.child("operator");
    match requirement.operator.as_str() {
        "" => errs.push(FieldError::required(
            &operator_path,
            &format!("valid values: {}", go_quoted_list(ON_EXIT_CODES_OPERATORS)),
        )),
        op if !ON_EXIT_CODES_OPERATORS.contains(&op) => errs.push(FieldError::not_supported(
            &operator_path,
            op,
            ON_EXIT_CODES_OPERATORS,
        )),
        _ => {}
    }
    if let Some(name) = &requirement.container_name
        && !container_names.contains(name)
    {
        errs.push(FieldError::invalid(
            &path.child("containerName"),
            name.as_str(),
            "must be one of the container or initContainer names in the pod template",
        ));
    }
    let values_path = path.child("values");
    let values = &requirement.values;
    if values.is_empty() {
        errs.push(FieldError::invalid(
            &values_path,
            BadValue::Other("[]int32{}".to_owned()),
            "at least one value is required",
        ));
    } else if values.len() > MAX_ON_EXIT_CODES_VALUES {
        errs.push(FieldError::too_many(
            &values_path,
            values.len(),
            MAX_ON_EXIT_CODES_VALUES,
        ));
    }
    let mut seen = BTreeSet::new();
    let mut ordered = true;
    for (j, value) in values.iter().enumerate() {
        let value_path = values_path.index(j);
        if requirement.operator == "In" && *value == 0 {
            errs.push(FieldError::invalid(
                &value_path,
                0,
                "must not be 0 for the In operator",
            ));
        }
        if !seen.insert(*value) {
            errs.push(FieldError::duplicate(&value_path, *value));
        }
        if j > 0 && values[j - 1] > *value {
            ordered = false;
        }
    }
    if !ordered {
        errs.push(FieldError::invalid(
            &values_path,
            BadValue::Other(go_int32_slice(values)),
            "must be ordered",
        ));
    }
    errs
}

fn go_success_policy(policy: &SuccessPolicy) -> String {
    let rules: Vec<String> = policy
        .rules
        .iter()
        .map(|r| {
            format!(
                "batch.SuccessPolicyRule{{SucceededIndexes:{}, SucceededCount:{}}}",
                go_pointer("string", r.succeeded_indexes.as_ref()),
                go_pointer("int32", r.succeeded_count.as_ref())
            )
        })
        .collect();
    let rules = if policy.rules.is_empty() {
        "[]batch.SuccessPolicyRule(nil)".to_owned()
    } else {
        format!("[]batch.SuccessPolicyRule{{{}}}", rules.join(", "))
    };
    format!("batch.SuccessPolicy{{Rules:{rules}}}")
}

fn validate_success_policy(spec: &JobSpec, policy: &SuccessPolicy, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let rules_path = path.child("rules");
    if policy.rules.is_empty() {
        errs.push(FieldError::required(
            &rules_path,
            "at least one rules must be specified when the successPolicy is specified",
        ));
    }
    if policy.rules.len() > MAX_SUCCESS_POLICY_RULES {
        errs.push(FieldError::too_many(
            &rules_path,
            policy.rules.len(),
            MAX_SUCCESS_POLICY_RULES,
        ));
    }
    let completions = spec.completions.unwrap_or(0);
    for (i, rule) in policy.rules.iter().enumerate() {
        let rule_path = rules_path.index(i);
        if rule.succeeded_count.is_none() && rule.succeeded_indexes.is_none() {
            errs.push(FieldError::required(
                &rule_path,
                "at least one of succeededCount or succeededIndexes must be specified",
            ));
        }
        let mut total_indexes = 0i64;
        if let Some(indexes) = &rule.succeeded_indexes {
            let p = rule_path.child("succeededIndexes");
            if indexes.len() > MAX_SUCCEEDED_INDEXES_LENGTH {
                errs.push(FieldError::too_long(&p, MAX_SUCCEEDED_INDEXES_LENGTH));
            }
            match parse_indexes(indexes, completions) {
                Ok(total) => total_indexes = total,
                Err(e) => errs.push(FieldError::invalid(
                    &p,
                    indexes.as_str(),
                    &format!("error parsing succeededIndexes: {e}"),
                )),
            }
        }
        if let Some(count) = rule.succeeded_count {
            let p = rule_path.child("succeededCount");
            errs.extend(validate_nonnegative(i64::from(count), &p));
            if count > completions {
                errs.push(FieldError::invalid(
                    &p,
                    count,
                    &format!(
                        "must be less than or equal to {completions} (the number of specified completions)"
                    ),
                ));
            }
            if rule.succeeded_indexes.is_some() && i64::from(count) > total_indexes {
                errs.push(FieldError::invalid(
                    &p,
                    count,
                    &format!(
                        "must be less than or equal to {total_indexes} (the number of indexes in the specified succeededIndexes field)"
                    ),
                ));
            }
        }
    }
    errs
}

/// One `x` or `x-y` interval of an index list, below `completions`.
fn parse_interval(interval: &str, completions: i32) -> Result<(i64, i64), String> {
    let limits: Vec<&str> = interval.split('-').collect();
    if limits.len() > 2 {
        return Err(format!(
            "the fragment {} violates the requirement that an index interval can have at most two parts separated by '-'",
            go_quote(interval)
        ));
    }
    let parse = |text: &str| -> Result<i64, String> {
        let value = parse_go_int(text).ok_or_else(|| {
            format!(
                "cannot convert string to integer for index: {}",
                go_quote(text)
            )
        })?;
        if value >= i64::from(completions) {
            return Err(format!("too large index: {}", go_quote(text)));
        }
        Ok(value)
    };
    let x = parse(limits[0])?;
    if limits.len() > 1 {
        let y = parse(limits[1])?;
        if x >= y {
            return Err(format!("non-increasing order, previous: {x}, current: {y}"));
        }
        return Ok((x, y));
    }
    Ok((x, x))
}

fn parse_go_int(text: &str) -> Option<i64> {
    let digits = text.strip_prefix('+').unwrap_or(text);
    let (negative, digits) = match digits.strip_prefix('-') {
        Some(rest) if !text.starts_with('+') => (true, rest),
        _ => (false, digits),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let value: i64 = digits.parse().ok()?;
    Some(if negative { -value } else { value })
}

/// An index list such as `1,3-5,7` (increasing, each index below `completions`): the number of
/// indexes it names.
fn parse_indexes(indexes: &str, completions: i32) -> Result<i64, String> {
    if indexes.is_empty() {
        return Ok(0);
    }
    let mut last: Option<i64> = None;
    let mut total = 0i64;
    for interval in indexes.split(',') {
        let (x, y) = parse_interval(interval, completions)?;
        if let Some(last) = last
            && last >= x
        {
            return Err(format!(
                "non-increasing order, previous: {last}, current: {x}"
            ));
        }
        total += y - x + 1;
        last = Some(y);
    }
    Ok(total)
}

fn failed_overlaps_completed(completed: &str, failed: &str, completions: i32) -> Option<String> {
    if completed.is_empty() || failed.is_empty() {
        return None;
    }
    let completed: Vec<&str> = completed.split(',').collect();
    let failed: Vec<&str> = failed.split(',').collect();
    let (mut ci, mut fi) = (0, 0);
    let mut c = parse_interval(completed[0], completions);
    let mut f = parse_interval(failed[0], completions);
    while ci < completed.len() && fi < failed.len() {
        match (&c, &f) {
            (Err(_), _) => {
                ci += 1;
                if ci < completed.len() {
                    c = parse_interval(completed[ci], completions);
                }
            }
            (_, Err(_)) => {
                fi += 1;
                if fi < failed.len() {
                    f = parse_interval(failed[fi], completions);
                }
            }
            (Ok((cx, cy)), Ok((fx, fy))) => {
                if cx <= fy && fx <= cy {
                    return Some(format!(
                        "failedIndexes and completedIndexes overlap at index: {}",
                        (*cx).max(*fx)
                    ));
                }
                if cx <= fx {
                    ci += 1;
                    if ci < completed.len() {
                        c = parse_interval(completed[ci], completions);
                    }
                } else {
                    fi += 1;
                    if fi < failed.len() {
                        f = parse_interval(failed[fi], completions);
                    }
                }
            }
        }
    }
    None
}

/// The options upstream's strategy uses for an update from `old`.
pub fn job_update_options(old: &Job) -> JobValidationOptions {
    let spec = old.spec.clone().unwrap_or_default();
    let labels = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let selector_has_bad_value = spec.selector.as_ref().is_some_and(|s| {
        s.match_expressions.iter().flatten().any(|r| {
            r.values
                .iter()
                .flatten()
                .any(|v| !crate::validation::names::is_valid_label_value(v).is_empty())
        })
    });
    JobValidationOptions {
        require_prefixed_labels: labels.contains_key(JOB_NAME_LABEL)
            && labels.contains_key(CONTROLLER_UID_LABEL),
        allow_mutable_scheduling_directives: spec.suspend == Some(true)
            && old
                .status
                .as_ref()
                .and_then(|s| s.start_time.as_ref())
                .is_none(),
        allow_invalid_label_value_in_selector: selector_has_bad_value,
    }
}

fn template_update_errors(
    new: &JobSpec,
    old: &JobSpec,
    opts: &JobValidationOptions,
) -> Vec<FieldError> {
    let mut old_template = old.template.clone();
    let template = &new.template;
    if opts.allow_mutable_scheduling_directives {
        let new_spec = template.spec.clone().unwrap_or_default();
        let old_spec = old_template.spec.get_or_insert_with(Default::default);
        match (&new_spec.affinity, &mut old_spec.affinity) {
            (None, old_affinity @ Some(_)) => {
                if let Some(affinity) = old_affinity.as_mut() {
                    affinity.node_affinity = None;
                }
                if old_affinity
                    .as_ref()
                    .is_some_and(|a| *a == Affinity::default())
                {
                    *old_affinity = None;
                }
            }
            (Some(affinity), old_affinity @ None) => {
                *old_affinity = Some(Affinity {
                    node_affinity: affinity.node_affinity.clone(),
                    ..Default::default()
                });
            }
            (Some(affinity), Some(old_affinity)) => {
                old_affinity.node_affinity = affinity.node_affinity.clone();
            }
            (None, None) => {}
        }
        old_spec.node_selector = new_spec.node_selector.clone();
        old_spec.tolerations = new_spec.tolerations.clone();
        old_spec.scheduling_gates = new_spec.scheduling_gates.clone();
        let new_meta = template.metadata.clone().unwrap_or_default();
        let old_meta = old_template.metadata.get_or_insert_with(Default::default);
        old_meta.annotations = new_meta.annotations;
        old_meta.labels = new_meta.labels;
    }
    // The whole template would be printed upstream; the value is omitted here.
    immutable(
        !semantic_eq(template, &old_template),
        &spec_path().child("template"),
        BadValue::Omitted,
    )
}

/// An update of a Job with explicit options: the new Job as if created, the metadata rules, the
/// spec again, and the fields that may not change (completions unless an Indexed Job scales it
/// with parallelism, selector, template except scheduling directives of a suspended Job that
/// never started, completion mode, pod failure policy, backoff limit per index, managedBy,
/// success policy).
pub fn validate_job_update_with(
    new: &Job,
    old: &Job,
    opts: &JobValidationOptions,
) -> Vec<FieldError> {
    let mut errs = validate_job_with(new, opts);
    errs.extend(validate_object_meta_update(
        &new.metadata,
        &old.metadata,
        &meta_path(),
    ));
    let spec = new.spec.clone().unwrap_or_default();
    let old_spec = old.spec.clone().unwrap_or_default();
    let path = spec_path();
    errs.extend(validate_job_spec(&spec, &path, opts));
    let completions_path = path.child("completions");
    if spec.completion_mode.as_deref() == Some("Indexed") {
        if spec.completions != old_spec.completions
            && let Some(completions) = spec.completions
            && Some(completions) != spec.parallelism
        {
            errs.push(FieldError::invalid(
                &completions_path,
                completions,
                "can only be modified in tandem with spec.parallelism",
            ));
        }
    } else {
        errs.extend(immutable(
            spec.completions != old_spec.completions,
            &completions_path,
            opt_i64(spec.completions),
        ));
    }
    let norm = |s: &Option<LabelSelector>| {
        s.as_ref().map(|s| {
            (
                s.match_labels.clone().unwrap_or_default(),
                s.match_expressions.clone().unwrap_or_default(),
            )
        })
    };
    errs.extend(immutable(
        norm(&spec.selector) != norm(&old_spec.selector),
        &path.child("selector"),
        selector_value(spec.selector.as_ref()),
    ));
    errs.extend(template_update_errors(&spec, &old_spec, opts));
    errs.extend(immutable(
        spec.completion_mode != old_spec.completion_mode,
        &path.child("completionMode"),
        opt_str(spec.completion_mode.as_deref()),
    ));
    errs.extend(immutable(
        !semantic_eq(&spec.pod_failure_policy, &old_spec.pod_failure_policy),
        &path.child("podFailurePolicy"),
        BadValue::Omitted,
    ));
    errs.extend(immutable(
        spec.backoff_limit_per_index != old_spec.backoff_limit_per_index,
        &path.child("backoffLimitPerIndex"),
        opt_i64(spec.backoff_limit_per_index),
    ));
    errs.extend(immutable(
        spec.managed_by != old_spec.managed_by,
        &path.child("managedBy"),
        opt_str(spec.managed_by.as_deref()),
    ));
    errs.extend(immutable(
        !semantic_eq(&spec.success_policy, &old_spec.success_policy),
        &path.child("successPolicy"),
        BadValue::Omitted,
    ));
    errs
}

/// An update of a Job, with the options upstream derives from the old Job.
pub fn validate_job_update(new: &Job, old: &Job) -> Vec<FieldError> {
    validate_job_update_with(new, old, &job_update_options(old))
}

fn condition_true(status: &JobStatus, type_: &str) -> bool {
    status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == type_ && c.status == "True")
}

fn is_finished(status: &JobStatus) -> bool {
    condition_true(status, "Complete") || condition_true(status, "Failed")
}

fn go_time(time: Option<&Time>) -> BadValue {
    time.map_or(BadValue::Null, |t| {
        BadValue::Other(t.0.strftime("%Y-%m-%d %H:%M:%S +0000 UTC").to_string())
    })
}

fn go_uids(uids: Option<&Vec<String>>) -> String {
    match uids {
        None => "[]types.UID(nil)".to_owned(),
        Some(uids) => {
            let quoted: Vec<String> = uids.iter().map(|u| go_quote(u)).collect();
            format!("[]types.UID{{{}}}", quoted.join(", "))
        }
    }
}

fn go_uncounted(
    uncounted: Option<&k8s_openapi::api::batch::v1::UncountedTerminatedPods>,
) -> String {
    let uncounted = uncounted.cloned().unwrap_or_default();
    format!(
        "batch.UncountedTerminatedPods{{Succeeded:{}, Failed:{}}}",
        go_uids(uncounted.succeeded.as_ref()),
        go_uids(uncounted.failed.as_ref())
    )
}

fn conditions_invalid(detail: &str) -> FieldError {
    FieldError::invalid(
        &Path::new("status").child("conditions"),
        BadValue::Omitted,
        detail,
    )
}

/// The status rules upstream 1.33 applies with `JobManagedBy` on (its default): each checked
/// only when the fields it concerns changed, so that controllers can repair bad states.
fn validate_job_status(new: &Job, old: &Job) -> Vec<FieldError> {
    let path = Path::new("status");
    let spec = new.spec.clone().unwrap_or_default();
    let status = new.status.clone().unwrap_or_default();
    let old_status = old.status.clone().unwrap_or_default();
    let mut errs = Vec::new();
    let active = status.active.unwrap_or(0);
    errs.extend(validate_nonnegative(
        i64::from(active),
        &path.child("active"),
    ));
    errs.extend(validate_nonnegative(
        i64::from(status.succeeded.unwrap_or(0)),
        &path.child("succeeded"),
    ));
    errs.extend(validate_nonnegative(
        i64::from(status.failed.unwrap_or(0)),
        &path.child("failed"),
    ));
    if let Some(ready) = status.ready {
        errs.extend(validate_nonnegative(i64::from(ready), &path.child("ready")));
    }
    if let Some(terminating) = status.terminating {
        errs.extend(validate_nonnegative(
            i64::from(terminating),
            &path.child("terminating"),
        ));
    }
    if let Some(uncounted) = &status.uncounted_terminated_pods {
        let p = path.child("uncountedTerminatedPods");
        let mut seen = BTreeSet::new();
        for (field, list) in [
            ("succeeded", &uncounted.succeeded),
            ("failed", &uncounted.failed),
        ] {
            for (i, uid) in list.iter().flatten().enumerate() {
                let item = p.child(field).index(i);
                if uid.is_empty() {
                    errs.push(FieldError::invalid(&item, "", "must not be empty"));
                } else if !seen.insert(uid.clone()) {
                    errs.push(FieldError::duplicate(&item, uid.as_str()));
                }
            }
        }
    }

    let indexed = spec.completion_mode.as_deref() == Some("Indexed");
    let complete = condition_true(&status, "Complete");
    let failed = condition_true(&status, "Failed");
    let failure_target = condition_true(&status, "FailureTarget");
    let success_met = condition_true(&status, "SuccessCriteriaMet");
    let finished = is_finished(&status);
    let finished_changed = is_finished(&old_status) != finished;
    let complete_changed = condition_true(&old_status, "Complete") != complete;
    let failed_changed = condition_true(&old_status, "Failed") != failed;
    let failure_target_changed = condition_true(&old_status, "FailureTarget") != failure_target;
    let completed_indexes = status.completed_indexes.clone().unwrap_or_default();
    let completed_changed =
        old_status.completed_indexes.clone().unwrap_or_default() != completed_indexes;
    let failed_indexes_changed = old_status.failed_indexes != status.failed_indexes;
    let active_changed = old_status.active.unwrap_or(0) != active;
    let start_changed = old_status.start_time != status.start_time;
    let completion_changed = old_status.completion_time != status.completion_time;
    let uncounted_changed = !semantic_eq(
        &old_status.uncounted_terminated_pods,
        &status.uncounted_terminated_pods,
    );

    if (complete_changed || failed_changed) && complete && failed {
        errs.push(conditions_invalid(
            "cannot set Complete=True and Failed=true conditions",
        ));
    }
    if (complete_changed || failure_target_changed) && complete && failure_target {
        errs.push(conditions_invalid(
            "cannot set Complete=True and FailureTarget=true conditions",
        ));
    }
    if (complete_changed || completion_changed) && status.completion_time.is_some() && !complete {
        errs.push(FieldError::invalid(
            &path.child("completionTime"),
            go_time(status.completion_time.as_ref()),
            "cannot set completionTime when there is no Complete=True condition",
        ));
    }
    if (complete_changed || completion_changed) && status.completion_time.is_none() && complete {
        errs.push(FieldError::required(
            &path.child("completionTime"),
            "completionTime is required for Complete jobs",
        ));
    }
    if (start_changed || completion_changed)
        && let (Some(start), Some(completion)) = (&status.start_time, &status.completion_time)
        && completion.0 < start.0
    {
        errs.push(FieldError::invalid(
            &path.child("completionTime"),
            go_time(Some(completion)),
            "completionTime cannot be set before startTime",
        ));
    }
    if (finished_changed || active_changed) && active > 0 && finished {
        errs.push(FieldError::invalid(
            &path.child("active"),
            active,
            "active>0 is invalid for finished job",
        ));
    }
    if (finished_changed || start_changed) && status.start_time.is_none() && finished {
        errs.push(FieldError::required(
            &path.child("startTime"),
            "startTime is required for finished job",
        ));
    }
    if (finished_changed || uncounted_changed)
        && finished
        && status.uncounted_terminated_pods.as_ref().is_some_and(|u| {
            u.failed.as_ref().is_some_and(|l| !l.is_empty())
                || u.succeeded.as_ref().is_some_and(|l| !l.is_empty())
        })
    {
        errs.push(FieldError::invalid(
            &path.child("uncountedTerminatedPods"),
            BadValue::Other(go_uncounted(status.uncounted_terminated_pods.as_ref())),
            "uncountedTerminatedPods needs to be empty for finished job",
        ));
    }
    if completed_changed
        && let Some(completions) = spec.completions
        && let Err(e) = parse_indexes(&completed_indexes, completions)
    {
        errs.push(FieldError::invalid(
            &path.child("completedIndexes"),
            completed_indexes.as_str(),
            &format!("error parsing completedIndexes: {e}"),
        ));
    }
    if failed_indexes_changed
        && let (Some(completions), Some(_), Some(failed_indexes)) = (
            spec.completions,
            spec.backoff_limit_per_index,
            &status.failed_indexes,
        )
        && let Err(e) = parse_indexes(failed_indexes, completions)
    {
        errs.push(FieldError::invalid(
            &path.child("failedIndexes"),
            failed_indexes.as_str(),
            &format!("error parsing failedIndexes: {e}"),
        ));
    }
    if completed_changed && !completed_indexes.is_empty() && !indexed {
        errs.push(FieldError::invalid(
            &path.child("completedIndexes"),
            completed_indexes.as_str(),
            "cannot set non-empty completedIndexes when non-indexed completion mode",
        ));
    }
    if failed_indexes_changed
        && spec.backoff_limit_per_index.is_none()
        && let Some(failed_indexes) = &status.failed_indexes
    {
        errs.push(FieldError::invalid(
            &path.child("failedIndexes"),
            failed_indexes.as_str(),
            "cannot set non-null failedIndexes when backoffLimitPerIndex is null",
        ));
    }
    if (failed_indexes_changed || completed_changed)
        && let (Some(completions), Some(failed_indexes)) =
            (spec.completions, &status.failed_indexes)
        && let Some(detail) =
            failed_overlaps_completed(&completed_indexes, failed_indexes, completions)
    {
        errs.push(FieldError::invalid(
            &path.child("failedIndexes"),
            failed_indexes.as_str(),
            &detail,
        ));
    }
    if success_met && failed {
        errs.push(conditions_invalid(
            "cannot set SuccessCriteriaMet=True and Failed=true conditions",
        ));
    }
    if success_met && failure_target {
        errs.push(conditions_invalid(
            "cannot set SuccessCriteriaMet=True and FailureTarget=true conditions",
        ));
    }
    if spec.success_policy.is_some() && !success_met && complete {
        errs.push(conditions_invalid(
            "cannot set Complete=True for Job with SuccessPolicy unless SuccessCriteriaMet=True",
        ));
    }
    errs
}

/// An update of a Job's status subresource, with upstream 1.33's default rules.
pub fn validate_job_status_update(new: &Job, old: &Job) -> Vec<FieldError> {
    let mut errs = validate_object_meta_update(&new.metadata, &old.metadata, &meta_path());
    errs.extend(validate_job_status(new, old));
    let path = Path::new("status");
    let spec = new.spec.clone().unwrap_or_default();
    let status = new.status.clone().unwrap_or_default();
    let old_status = old.status.clone().unwrap_or_default();
    for condition in ["Failed", "Complete", "FailureTarget"] {
        if condition_true(&old_status, condition) && !condition_true(&status, condition) {
            errs.push(conditions_invalid(&format!(
                "cannot disable the terminal {condition}=True condition"
            )));
        }
    }
    if status.failed.unwrap_or(0) < old_status.failed.unwrap_or(0) {
        errs.push(FieldError::invalid(
            &path.child("failed"),
            status.failed.unwrap_or(0),
            "cannot decrease the failed counter",
        ));
    }
    let indexed = spec.completion_mode.as_deref() == Some("Indexed");
    let reject_decreasing_succeeded = !indexed || spec.completions != spec.parallelism;
    if reject_decreasing_succeeded
        && status.succeeded.unwrap_or(0) < old_status.succeeded.unwrap_or(0)
    {
        errs.push(FieldError::invalid(
            &path.child("succeeded"),
            status.succeeded.unwrap_or(0),
            "cannot decrease the succeeded counter",
        ));
    }
    if let (Some(new_time), Some(old_time)) = (&status.completion_time, &old_status.completion_time)
        && new_time != old_time
    {
        errs.push(FieldError::invalid(
            &path.child("completionTime"),
            go_time(Some(new_time)),
            "completionTime cannot be mutated",
        ));
    }
    if old_status.start_time.is_some()
        && old_status.start_time != status.start_time
        && spec.suspend != Some(true)
    {
        errs.push(FieldError::required(
            &path.child("startTime"),
            "startTime cannot be removed for unsuspended job",
        ));
    }
    let success_met = condition_true(&status, "SuccessCriteriaMet");
    let old_success_met = condition_true(&old_status, "SuccessCriteriaMet");
    if old_success_met && !success_met {
        errs.push(conditions_invalid(
            "cannot disable the SuccessCriteriaMet=True condition",
        ));
    }
    if condition_true(&old_status, "Complete") && !old_success_met && success_met {
        errs.push(conditions_invalid(
            "cannot set SuccessCriteriaMet=True for Job already has Complete=true conditions",
        ));
    }
    errs
}

// ---------------------------------------------------------------------------------------------
// CronJobs

fn validate_schedule(
    schedule: &str,
    allow_tz: bool,
    time_zone: Option<&str>,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Err(e) = cron::parse(schedule) {
        errs.push(FieldError::invalid(path, schedule, &e));
    }
    let has_tz = schedule.contains("TZ");
    if allow_tz && has_tz && time_zone.is_some() {
        errs.push(FieldError::invalid(
            path,
            schedule,
            "cannot use both timeZone field and TZ or CRON_TZ in schedule",
        ));
    } else if !allow_tz && has_tz {
        errs.push(FieldError::invalid(
            path,
            schedule,
            "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
        ));
    }
    errs
}

fn valid_zone_part(part: &str) -> bool {
    (1..=14).contains(&part.len())
        && part
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-+".contains(&b))
}

/// A CronJob time zone: a non-empty IANA name (not `Local`) that Go's `time.LoadLocation` finds.
pub fn validate_time_zone(time_zone: Option<&str>, path: &Path) -> Vec<FieldError> {
    let Some(zone) = time_zone else {
        return Vec::new();
    };
    if zone.is_empty() {
        return vec![FieldError::invalid(
            path,
            zone,
            "timeZone must be nil or non-empty string",
        )];
    }
    for part in zone.split('/') {
        if part == "." || part == ".." || part.starts_with('-') || !valid_zone_part(part) {
            return vec![FieldError::invalid(
                path,
                zone,
                &format!("unknown time zone {zone}"),
            )];
        }
    }
    let mut errs = Vec::new();
    if zone.eq_ignore_ascii_case("Local") {
        errs.push(FieldError::invalid(
            path,
            zone,
            "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones",
        ));
    }
    if let Err(e) = cron::load_zone(zone) {
        errs.push(FieldError::invalid(path, zone, &e));
    }
    errs
}

/// A CronJob's job template at `path`: the shared Job spec checks, and no selector (it is
/// generated for each Job) nor manual selector.
pub fn validate_job_template_spec(template: &JobTemplateSpec, path: &Path) -> Vec<FieldError> {
    let spec = template.spec.clone().unwrap_or_default();
    let spec_path = path.child("spec");
    let mut errs = validate_job_spec_common(&spec, &spec_path);
    if let Some(selector) = &spec.selector {
        errs.push(FieldError::invalid(
            &spec_path.child("selector"),
            selector_value(Some(selector)),
            "`selector` will be auto-generated",
        ));
    }
    if spec.manual_selector == Some(true) {
        errs.push(FieldError::not_supported(
            &spec_path.child("manualSelector"),
            true,
            &["nil", "false"],
        ));
    }
    errs
}

fn validate_cron_job_spec(
    spec: &CronJobSpec,
    old: Option<&CronJobSpec>,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if spec.schedule.is_empty() {
        errs.push(FieldError::required(&path.child("schedule"), ""));
    } else {
        let allow_tz = old.is_some_and(|o| o.schedule.contains("TZ"));
        errs.extend(validate_schedule(
            &spec.schedule,
            allow_tz,
            spec.time_zone.as_deref(),
            &path.child("schedule"),
        ));
    }
    if let Some(deadline) = spec.starting_deadline_seconds {
        errs.extend(validate_nonnegative(
            deadline,
            &path.child("startingDeadlineSeconds"),
        ));
    }
    if old.is_none_or(|o| o.time_zone != spec.time_zone) {
        errs.extend(validate_time_zone(
            spec.time_zone.as_deref(),
            &path.child("timeZone"),
        ));
    }
    let policy_path = path.child("concurrencyPolicy");
    match spec.concurrency_policy.as_deref().unwrap_or("") {
        "Allow" | "Forbid" | "Replace" => {}
        "" => errs.push(FieldError::required(&policy_path, "")),
        other => errs.push(FieldError::not_supported(
            &policy_path,
            other,
            &["Allow", "Forbid", "Replace"],
        )),
    }
    errs.extend(validate_job_template_spec(
        &spec.job_template,
        &path.child("jobTemplate"),
    ));
    for (value, field) in [
        (
            spec.successful_jobs_history_limit,
            "successfulJobsHistoryLimit",
        ),
        (spec.failed_jobs_history_limit, "failedJobsHistoryLimit"),
    ] {
        if let Some(value) = value {
            errs.extend(validate_nonnegative(i64::from(value), &path.child(field)));
        }
    }
    errs
}

/// A new CronJob: metadata (DNS-subdomain name of at most 52 characters), schedule, time zone,
/// concurrency policy, job template and history limits.
pub fn validate_cron_job(cron_job: &CronJob) -> Vec<FieldError> {
    let mut errs = validate_object_meta(
        &cron_job.metadata,
        true,
        NameValidator::DnsSubdomain,
        &meta_path(),
    );
    errs.extend(validate_cron_job_spec(
        &cron_job.spec.clone().unwrap_or_default(),
        None,
        &spec_path(),
    ));
    let name = cron_job.metadata.name.as_deref().unwrap_or("");
    if name.len() > MAX_CRON_JOB_NAME_LENGTH {
        errs.push(FieldError::invalid(
            &meta_path().child("name"),
            name,
            "must be no more than 52 characters",
        ));
    }
    errs
}

/// An update of a CronJob: metadata rules and the spec (a schedule may keep a `TZ=` prefix it
/// already had; an unchanged time zone is not re-checked; the name length is not re-checked).
pub fn validate_cron_job_update(new: &CronJob, old: &CronJob) -> Vec<FieldError> {
    let mut errs = validate_object_meta_update(&new.metadata, &old.metadata, &meta_path());
    let old_spec = old.spec.clone().unwrap_or_default();
    errs.extend(validate_cron_job_spec(
        &new.spec.clone().unwrap_or_default(),
        Some(&old_spec),
        &spec_path(),
    ));
    errs
}

/// An update of a CronJob's status subresource. Upstream's status strategy validates nothing
/// here, not even the metadata.
pub fn validate_cron_job_status_update(_new: &CronJob, _old: &CronJob) -> Vec<FieldError> {
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::defaults::batch::{default_cron_job, default_job, prepare_job_for_create};
    use crate::validation::test_support::check;
    use serde_json::{Value, json};

    fn template() -> Value {
        json!({"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "perl"}]}})
    }

    fn new_job(name: &str, spec: Value) -> Job {
        let mut job: Job = serde_json::from_value(
            json!({"metadata": {"name": name, "namespace": "default", "resourceVersion": "1"}, "spec": spec}),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        default_job(&mut job);
        prepare_job_for_create(&mut job, "uid-1");
        job
    }

    fn with(extra: Value) -> Value {
        let mut spec = json!({"template": template()});
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
            for (k, v) in extra {
                spec.insert(k.clone(), v.clone());
            }
        }
        spec
    }

    #[test]
    fn valid_job() {
        check(validate_job(&new_job("pi", with(json!({})))), &[]);
        check(
            validate_job(&new_job(
                "pi",
                with(
                    json!({"completionMode": "Indexed", "completions": 3, "parallelism": 3, "backoffLimitPerIndex": 1,
                            "successPolicy": {"rules": [{"succeededIndexes": "0-1", "succeededCount": 1}]},
                            "podFailurePolicy": {"rules": [{"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [1, 2]}}]}}),
                ),
            )),
            &[],
        );
    }

    #[test]
    fn job_spec_rules() {
        let cases: Vec<(Value, Vec<&str>)> = vec![
            (
                json!({"parallelism": -1, "backoffLimit": -1, "activeDeadlineSeconds": -5}),
                vec![
                    "spec.parallelism: Invalid value: -1: must be greater than or equal to 0",
                    "spec.activeDeadlineSeconds: Invalid value: -5: must be greater than or equal to 0",
                    "spec.backoffLimit: Invalid value: -1: must be greater than or equal to 0",
                ],
            ),
            (
                json!({"template": {"spec": {"restartPolicy": "Always", "containers": [{"name": "c", "image": "i"}]}}}),
                vec![
                    "spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\"",
                ],
            ),
            (
                json!({"maxFailedIndexes": 1, "backoffLimitPerIndex": 1}),
                vec![
                    "spec.backoffLimitPerIndex: Invalid value: 1: requires indexed completion mode",
                    "spec.maxFailedIndexes: Invalid value: 1: requires indexed completion mode",
                ],
            ),
            (
                json!({"completionMode": "Indexed", "completions": 2, "parallelism": 200000}),
                vec![
                    "spec.parallelism: Invalid value: 200000: must be less than or equal to 100000 when completion mode is Indexed",
                ],
            ),
            (
                json!({"completionMode": "Sometimes"}),
                vec![
                    "spec.completionMode: Unsupported value: \"Sometimes\": supported values: \"NonIndexed\", \"Indexed\"",
                ],
            ),
            (
                json!({"managedBy": "nobody"}),
                vec![
                    "spec.managedBy: Invalid value: \"nobody\": must be a domain-prefixed path (such as \"acme.io/foo\")",
                ],
            ),
            (
                json!({"podReplacementPolicy": "Sometimes"}),
                vec![
                    "spec.podReplacementPolicy: Unsupported value: \"Sometimes\": supported values: \"Failed\", \"TerminatingOrFailed\"",
                ],
            ),
            (
                json!({"successPolicy": {"rules": [{"succeededCount": 1}]}}),
                vec![
                    "spec.successPolicy: Invalid value: batch.SuccessPolicy{Rules:[]batch.SuccessPolicyRule{batch.SuccessPolicyRule{SucceededIndexes:(*string)(nil), SucceededCount:(*int32)(0xc000000000)}}}: requires indexed completion mode",
                ],
            ),
            (
                json!({"podFailurePolicy": {"rules": [
                    {"action": "Explode", "onExitCodes": {"operator": "In", "containerName": "x", "values": [3, 0, 3]}},
                    {"action": "Ignore"},
                    {"action": "FailIndex", "onPodConditions": [{"type": "bad type", "status": "Maybe"}]}
                ]}, "template": {"spec": {"restartPolicy": "OnFailure", "containers": [{"name": "c", "image": "i"}]}}}),
                vec![
                    "spec.podFailurePolicy.rules[0].action: Unsupported value: \"Explode\": supported values: \"Count\", \"FailIndex\", \"FailJob\", \"Ignore\"",
                    "spec.podFailurePolicy.rules[0].onExitCodes.containerName: Invalid value: \"x\": must be one of the container or initContainer names in the pod template",
                    "spec.podFailurePolicy.rules[0].onExitCodes.values[1]: Invalid value: 0: must not be 0 for the In operator",
                    "spec.podFailurePolicy.rules[0].onExitCodes.values[2]: Duplicate value: 3",
                    "spec.podFailurePolicy.rules[0].onExitCodes.values: Invalid value: []int32{3, 0, 3}: must be ordered",
                    "spec.podFailurePolicy.rules[1]: Invalid value: specifying one of OnExitCodes and OnPodConditions is required",
                    "spec.podFailurePolicy.rules[2].action: Invalid value: \"FailIndex\": requires the backoffLimitPerIndex to be set",
                    "spec.podFailurePolicy.rules[2].onPodConditions[0].type: Invalid value: \"bad type\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
                    "spec.podFailurePolicy.rules[2].onPodConditions[0].status: Unsupported value: \"Maybe\": supported values: \"False\", \"True\", \"Unknown\"",
                    "spec.template.spec.restartPolicy: Invalid value: \"OnFailure\": only \"Never\" is supported when podFailurePolicy is specified",
                ],
            ),
            (
                json!({"completionMode": "Indexed", "completions": 3, "successPolicy": {"rules": [{"succeededIndexes": "2-1,9", "succeededCount": 5}, {}]}}),
                vec![
                    "spec.successPolicy.rules[0].succeededIndexes: Invalid value: \"2-1,9\": error parsing succeededIndexes: non-increasing order, previous: 2, current: 1",
                    "spec.successPolicy.rules[0].succeededCount: Invalid value: 5: must be less than or equal to 3 (the number of specified completions)",
                    "spec.successPolicy.rules[0].succeededCount: Invalid value: 5: must be less than or equal to 0 (the number of indexes in the specified succeededIndexes field)",
                    "spec.successPolicy.rules[1]: Required value: at least one of succeededCount or succeededIndexes must be specified",
                ],
            ),
        ];
        for (extra, expected) in cases {
            check(validate_job(&new_job("pi", with(extra))), &expected);
        }
    }

    #[test]
    fn generated_selector_and_names() {
        let mut job = new_job("pi", with(json!({})));
        if let Some(spec) = &mut job.spec
            && let Some(labels) = spec
                .template
                .metadata
                .as_mut()
                .and_then(|m| m.labels.as_mut())
        {
            labels.insert("job-name".into(), "other".into());
            labels.remove("batch.kubernetes.io/controller-uid");
        }
        check(
            validate_job(&job),
            &[
                "spec.template.metadata.labels[job-name]: Invalid value: map[string]string{\"batch.kubernetes.io/job-name\":\"pi\", \"controller-uid\":\"uid-1\", \"job-name\":\"other\"}: must be 'pi'",
                "spec.template.metadata.labels[batch.kubernetes.io/controller-uid]: Required value: must be 'uid-1'",
                "spec.template.metadata.labels: Invalid value: map[string]string{\"batch.kubernetes.io/job-name\":\"pi\", \"controller-uid\":\"uid-1\", \"job-name\":\"other\"}: `selector` does not match template `labels`",
            ],
        );
        let manual = new_job("pi", with(json!({"manualSelector": true})));
        check(
            validate_job(&manual),
            &[
                "spec.selector: Required value",
                "spec.template.metadata.labels: Invalid value: map[string]string(nil): `selector` does not match template `labels`",
            ],
        );
        let long = "a".repeat(62);
        check(
            validate_job(&new_job(
                &long,
                with(json!({"completionMode": "Indexed", "completions": 10})),
            )),
            &[&format!(
                "metadata.name: Invalid value: \"{long}\": will not able to create pod with invalid DNS label: {long}-9"
            )],
        );
    }

    #[test]
    fn job_updates() {
        let old = new_job("pi", with(json!({"suspend": true})));
        let mut new = old.clone();
        if let Some(spec) = &mut new.spec {
            spec.completions = Some(4);
            spec.parallelism = Some(2);
            if let Some(pod) = &mut spec.template.spec {
                pod.node_selector = Some(BTreeMap::from([("disk".into(), "ssd".into())]));
            }
        }
        // Suspended and never started: scheduling directives may change.
        check(
            validate_job_update(&new, &old),
            &["spec.completions: Invalid value: 4: field is immutable"],
        );
        let mut started = old.clone();
        started.status = Some(JobStatus {
            start_time: Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
            ..Default::default()
        });
        check(
            validate_job_update(&new, &started),
            &[
                "spec.completions: Invalid value: 4: field is immutable",
                "spec.template: Invalid value: field is immutable",
            ],
        );

        let old = new_job(
            "idx",
            with(json!({"completionMode": "Indexed", "completions": 3, "parallelism": 3})),
        );
        let mut scaled = old.clone();
        if let Some(spec) = &mut scaled.spec {
            spec.completions = Some(5);
            spec.parallelism = Some(5);
        }
        check(validate_job_update(&scaled, &old), &[]);
        if let Some(spec) = &mut scaled.spec {
            spec.parallelism = Some(4);
        }
        check(
            validate_job_update(&scaled, &old),
            &[
                "spec.completions: Invalid value: 5: can only be modified in tandem with spec.parallelism",
            ],
        );
    }

    #[test]
    fn job_status_updates() {
        let old = new_job("pi", with(json!({})));
        let mut old_status = old.clone();
        old_status.status = Some(JobStatus {
            failed: Some(2),
            conditions: Some(vec![k8s_openapi::api::batch::v1::JobCondition {
                type_: "Complete".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            start_time: Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
            completion_time: Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
            ..Default::default()
        });
        let mut new = old.clone();
        new.status = Some(JobStatus {
            failed: Some(1),
            active: Some(1),
            completed_indexes: Some("1".into()),
            ..Default::default()
        });
        check(
            validate_job_status_update(&new, &old_status),
            &[
                "status.completedIndexes: Invalid value: \"1\": error parsing completedIndexes: too large index: \"1\"",
                "status.completedIndexes: Invalid value: \"1\": cannot set non-empty completedIndexes when non-indexed completion mode",
                "status.conditions: Invalid value: cannot disable the terminal Complete=True condition",
                "status.failed: Invalid value: 1: cannot decrease the failed counter",
                "status.startTime: Required value: startTime cannot be removed for unsuspended job",
            ],
        );
    }

    fn cron(name: &str, spec: Value) -> CronJob {
        let mut cron: CronJob = serde_json::from_value(
            json!({"metadata": {"name": name, "namespace": "default", "resourceVersion": "1"}, "spec": spec}),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        default_cron_job(&mut cron);
        cron
    }

    #[test]
    fn cron_jobs() {
        let job_template = json!({"spec": {"template": template()}});
        let long_name = "x".repeat(53);
        check(
            validate_cron_job(&cron(
                "hourly",
                json!({"schedule": "0 * * * *", "timeZone": "Europe/Berlin", "jobTemplate": job_template}),
            )),
            &[],
        );
        let cases: Vec<(&str, Value, Vec<String>)> = vec![
            (
                "c",
                json!({"schedule": "", "jobTemplate": job_template}),
                vec!["spec.schedule: Required value".into()],
            ),
            (
                "c",
                json!({"schedule": "61 * * * *", "concurrencyPolicy": "Sometimes", "startingDeadlineSeconds": -1, "jobTemplate": job_template}),
                vec![
                    "spec.schedule: Invalid value: \"61 * * * *\": end of range (61) above maximum (59): 61".into(),
                    "spec.startingDeadlineSeconds: Invalid value: -1: must be greater than or equal to 0".into(),
                    "spec.concurrencyPolicy: Unsupported value: \"Sometimes\": supported values: \"Allow\", \"Forbid\", \"Replace\"".into(),
                ],
            ),
            (
                "c",
                json!({"schedule": "TZ=UTC * * * * *", "jobTemplate": job_template}),
                vec![
                    "spec.schedule: Invalid value: \"TZ=UTC * * * * *\": cannot use TZ or CRON_TZ in schedule, use timeZone field instead".into(),
                ],
            ),
            (
                "c",
                json!({"schedule": "@daily", "timeZone": "Mars/Olympus", "jobTemplate": job_template}),
                vec!["spec.timeZone: Invalid value: \"Mars/Olympus\": unknown time zone Mars/Olympus".into()],
            ),
            (
                "c",
                json!({"schedule": "@daily", "timeZone": "local", "jobTemplate": job_template}),
                vec![
                    "spec.timeZone: Invalid value: \"local\": timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones".into(),
                    "spec.timeZone: Invalid value: \"local\": unknown time zone local".into(),
                ],
            ),
            (
                "c",
                json!({"schedule": "@daily", "timeZone": "Etc/GMT+99999999999999", "jobTemplate": job_template}),
                vec!["spec.timeZone: Invalid value: \"Etc/GMT+99999999999999\": unknown time zone Etc/GMT+99999999999999".into()],
            ),
            (
                "c",
                json!({"schedule": "@daily", "jobTemplate": {"spec": {"manualSelector": true, "selector": {"matchLabels": {"a": "b"}}, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}}),
                vec![
                    "spec.jobTemplate.spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\"".into(),
                    "spec.jobTemplate.spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string{\"a\":\"b\"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: `selector` will be auto-generated".into(),
                    "spec.jobTemplate.spec.manualSelector: Unsupported value: true: supported values: \"nil\", \"false\"".into(),
                ],
            ),
            (
                &long_name,
                json!({"schedule": "@daily", "jobTemplate": job_template}),
                vec![format!("metadata.name: Invalid value: \"{}\": must be no more than 52 characters", "x".repeat(53))],
            ),
        ];
        for (name, spec, expected) in cases {
            let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
            check(validate_cron_job(&cron(name, spec)), &expected);
        }
    }

    #[test]
    fn cron_job_updates() {
        let job_template = json!({"spec": {"template": template()}});
        let old = cron(
            "c",
            json!({"schedule": "TZ=UTC 0 * * *", "jobTemplate": job_template}),
        );
        let mut new = old.clone();
        if let Some(spec) = &mut new.spec {
            spec.schedule = "TZ=UTC 5 * * * *".into();
        }
        // An old TZ= prefix may stay.
        check(validate_cron_job_update(&new, &old), &[]);
        if let Some(spec) = &mut new.spec {
            spec.time_zone = Some("UTC".into());
        }
        check(
            validate_cron_job_update(&new, &old),
            &[
                "spec.schedule: Invalid value: \"TZ=UTC 5 * * * *\": cannot use both timeZone field and TZ or CRON_TZ in schedule",
            ],
        );
    }
}

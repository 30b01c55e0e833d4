//! Printers for `batch/v1`: jobs and cron jobs.

use jiff::Timestamp;
use serde_json::Value;

use super::core::{CONTAINERS_DESCRIPTION, IMAGES_DESCRIPTION};
use super::descriptions::*;
use super::format::{
    age, at, bool_ptr, container_cells, format_label_selector, human_duration, int, len, list,
    name, nanos_between, opt_flag, opt_int, opt_text, since, text, time,
};
use super::{AGE, Column, NAME, Row, col, wide};

pub(crate) const JOB_COLUMNS: &[Column] = &[
    NAME,
    col("Status", "string", "Status of the job."),
    col("Completions", "string", JOB_SUCCEEDED),
    col("Duration", "string", "Time required to complete the job."),
    AGE,
    wide("Containers", "string", CONTAINERS_DESCRIPTION),
    wide("Images", "string", IMAGES_DESCRIPTION),
    wide("Selector", "string", JOB_SELECTOR),
];

/// Whether the first condition of `type_` has status `True`.
fn has_condition(job: &Value, type_: &str) -> bool {
    list(job, &["status", "conditions"])
        .iter()
        .find(|c| text(c, &["type"]) == type_)
        .is_some_and(|c| text(c, &["status"]) == "True")
}

pub(crate) fn job(job: &Value, now: Timestamp) -> Row {
    let succeeded = int(job, &["status", "succeeded"]);
    let mut completions = opt_int(job, &["spec", "completions"]);
    let parallelism = opt_int(job, &["spec", "parallelism"]);
    if completions.is_none() && parallelism.is_none() {
        // The v1 defaults make a job with neither set a single-completion job.
        completions = Some(1);
    }
    let completions = match (completions, parallelism.unwrap_or(1)) {
        (Some(completions), _) => format!("{succeeded}/{completions}"),
        (None, parallelism) if parallelism > 1 => format!("{succeeded}/1 of {parallelism}"),
        (None, _) => format!("{succeeded}/1"),
    };
    let duration = match (
        time(job, &["status", "startTime"]),
        time(job, &["status", "completionTime"]),
    ) {
        (None, _) => String::new(),
        (Some(start), None) => human_duration(nanos_between(start, now)),
        (Some(start), Some(end)) => human_duration(nanos_between(start, end)),
    };
    let deleting = at(job, &["metadata", "deletionTimestamp"]).is_some_and(|d| !d.is_null());
    let status = if has_condition(job, "Complete") {
        "Complete"
    } else if has_condition(job, "Failed") {
        "Failed"
    } else if deleting {
        "Terminating"
    } else if has_condition(job, "Suspended") {
        "Suspended"
    } else if has_condition(job, "FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    };
    let (names, images) = container_cells(list(job, &["spec", "template", "spec", "containers"]));
    Row::of(vec![
        name(job),
        Value::from(status),
        Value::from(completions),
        Value::from(duration),
        age(job, now),
        names,
        images,
        Value::from(format_label_selector(at(job, &["spec", "selector"]))),
    ])
}

pub(crate) const CRON_JOB_COLUMNS: &[Column] = &[
    NAME,
    col("Schedule", "string", CRON_SCHEDULE),
    col("Timezone", "string", CRON_TIME_ZONE),
    col("Suspend", "boolean", CRON_SUSPEND),
    col("Active", "integer", CRON_ACTIVE),
    col("Last Schedule", "string", CRON_LAST_SCHEDULE),
    AGE,
    wide("Containers", "string", CONTAINERS_DESCRIPTION),
    wide("Images", "string", IMAGES_DESCRIPTION),
    wide("Selector", "string", JOB_SELECTOR),
];

pub(crate) fn cron_job(cron_job: &Value, now: Timestamp) -> Row {
    let last_schedule = match time(cron_job, &["status", "lastScheduleTime"]) {
        Some(ts) => since(Some(ts), now),
        None => "<none>".to_owned(),
    };
    let job_spec = at(cron_job, &["spec", "jobTemplate", "spec"]).unwrap_or(&Value::Null);
    let (names, images) = container_cells(list(job_spec, &["template", "spec", "containers"]));
    Row::of(vec![
        name(cron_job),
        Value::from(text(cron_job, &["spec", "schedule"])),
        Value::from(opt_text(cron_job, &["spec", "timeZone"]).unwrap_or("<none>")),
        // The v1 defaults set `suspend: false`.
        Value::from(bool_ptr(
            opt_flag(cron_job, &["spec", "suspend"]).or(Some(false)),
        )),
        Value::from(len(cron_job, &["status", "active"])),
        Value::from(last_schedule),
        age(cron_job, now),
        names,
        images,
        Value::from(format_label_selector(at(job_spec, &["selector"]))),
    ])
}

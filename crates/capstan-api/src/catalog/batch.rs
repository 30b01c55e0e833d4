//! The `batch/v1` kinds.

use k8s_openapi::api::batch::v1::{CronJob, Job};

use super::{Resource, of, printer, status, typed};
use crate::defaults as d;
use crate::printers::batch as p;
use crate::strategy::Hooks;
use crate::validation as v;

pub(super) static RESOURCES: &[Resource] = &[
    Resource {
        short_names: &["cj"],
        categories: &["all"],
        subresources: &[status("CronJob")],
        printer: printer(p::CRON_JOB_COLUMNS, p::cron_job),
        strategy: || {
            typed::<CronJob>(Hooks {
                default: d::batch::default_cron_job,
                validate: v::batch::validate_cron_job,
                validate_update: v::batch::validate_cron_job_update,
                validate_status_update: v::batch::validate_cron_job_status_update,
                ..Hooks::workload()
            })
        },
        ..of::<CronJob>("cronjob")
    },
    Resource {
        categories: &["all"],
        subresources: &[status("Job")],
        printer: printer(p::JOB_COLUMNS, p::job),
        strategy: || {
            typed::<Job>(Hooks {
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
                ..Hooks::workload()
            })
        },
        ..of::<Job>("job")
    },
];

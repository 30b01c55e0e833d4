//! The CronJob controller (upstream's `pkg/controller/cronjob`, the v2 controller of
//! Kubernetes 1.33): creates a Job from `spec.jobTemplate` at each scheduled time, named
//! `<cronjob>-<scheduled time in minutes since the epoch>` so that a time is never run twice,
//! and annotated with the scheduled time. It honours `suspend`, `startingDeadlineSeconds`,
//! `concurrencyPolicy` (Allow, Forbid, Replace) and `spec.timeZone`, keeps `status.active`,
//! `lastScheduleTime` and `lastSuccessfulTime` current, deletes finished Jobs beyond the
//! history limits, and requeues itself for the next scheduled time.
//!
//! The decisions are pure functions of the CronJob, its Jobs and a fixed `now`
//! ([`decide`], [`review_children`], [`history_to_delete`], [`job_from_template`]);
//! [`reconcile`] only carries them out. Schedules are `capstan_api::cron`'s, the one parser
//! the API's validation uses too.

use std::sync::Arc;
use std::time::Duration;

use capstan_client::events::{EventRecorder, EventType};
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{CronJob, CronJobStatus, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;

use crate::job;
use crate::pods;
use crate::runtime::{self, Change, Error, Queue, Setup, Task};
use capstan_api::cron::{self as schedule, Schedule};

/// The annotation holding a Job's scheduled time (RFC 3339, in the CronJob's zone).
pub const SCHEDULED_TIMESTAMP: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";
/// Requeues land this long after the scheduled time (upstream's `nextScheduleDelta`).
const NEXT_SCHEDULE_DELTA: Duration = Duration::from_millis(100);

/// An event to record: type, reason, message.
pub type Event = (EventType, &'static str, String);

/// How many scheduled times were missed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missed {
    /// None.
    None,
    /// Some.
    Few,
    /// More than 100 (upstream warns).
    Many,
}

/// The schedule upstream parses: `spec.schedule`, prefixed with `TZ=<spec.timeZone>` when
/// the zone loads (upstream's `formatSchedule`); a schedule that names a zone itself is not
/// officially supported and gets a warning.
pub fn formatted_schedule(cj: &CronJob) -> (String, Option<Event>) {
    let spec = cj.spec.clone().unwrap_or_default();
    if spec.schedule.contains("TZ") {
        let message = format!(
            "CRON_TZ or TZ used in schedule {:?} is not officially supported, see https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/ for more details",
            spec.schedule
        );
        return (
            spec.schedule,
            Some((EventType::Warning, "UnsupportedSchedule", message)),
        );
    }
    match spec.time_zone.as_deref() {
        Some(zone) if schedule::load_zone(zone).is_ok() => {
            (format!("TZ={zone} {}", spec.schedule), None)
        }
        _ => (spec.schedule, None),
    }
}

fn status(cj: &CronJob) -> CronJobStatus {
    cj.status.clone().unwrap_or_default()
}

/// Upstream's `mostRecentScheduleTime`: from the last scheduled time (or the creation, or
/// the starting deadline when later), the latest scheduled time not after `now`, and how
/// many were missed. Errs for a schedule whose consecutive times are under a second apart.
pub fn most_recent_schedule_time(
    cj: &CronJob,
    now: Timestamp,
    sched: &Schedule,
    include_deadline: bool,
) -> Result<(Timestamp, Option<Timestamp>, Missed), String> {
    let created = cj
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0)
        .unwrap_or_default();
    let mut earliest = status(cj).last_schedule_time.map_or(created, |t| t.0);
    if include_deadline
        && let Some(deadline) = cj.spec.as_ref().and_then(|s| s.starting_deadline_seconds)
    {
        let limit = Timestamp::from_second(now.as_second() - deadline).unwrap_or(now);
        if limit > earliest {
            earliest = limit;
        }
    }
    let Some(t1) = sched.next(earliest) else {
        return Ok((earliest, None, Missed::None));
    };
    if now < t1 {
        return Ok((earliest, None, Missed::None));
    }
    let Some(t2) = sched.next(t1) else {
        return Ok((earliest, Some(t1), Missed::None));
    };
    if now < t2 {
        return Ok((earliest, Some(t1), Missed::None));
    }
    let between = (t2.as_millisecond() - t1.as_millisecond() + 500) / 1000;
    if between < 1 {
        return Err("time difference between two schedules is less than 1 second".into());
    }
    let elapsed = (now.as_millisecond() - t1.as_millisecond()) / 1000;
    let missed = elapsed / between + 1;
    // Step from a little before the estimated latest time, for uneven schedules.
    let from = Timestamp::from_second(t1.as_second() + (missed - 2) * between).unwrap_or(t1);
    let mut latest = None;
    let mut t = sched.next(from);
    while let Some(at) = t.filter(|at| *at <= now) {
        latest = Some(at);
        t = sched.next(at);
    }
    let missed = if missed > 100 {
        Missed::Many
    } else {
        Missed::Few
    };
    Ok((earliest, latest, missed))
}

/// How long until the next scheduled time (upstream's `nextScheduleTimeDuration`).
pub fn next_schedule_delay(cj: &CronJob, now: Timestamp, sched: &Schedule) -> Option<Duration> {
    let (earliest, latest, missed) = most_recent_schedule_time(cj, now, sched, false).ok()?;
    let from = match (latest, missed) {
        (Some(latest), _) => latest,
        (None, Missed::None) => earliest,
        (None, _) => now,
    };
    let next = sched.next(from)?;
    let millis =
        next.as_millisecond() - now.as_millisecond() + NEXT_SCHEDULE_DELTA.as_millis() as i64;
    Some(Duration::from_millis(millis.max(0) as u64))
}

/// The name of the Job for `scheduled` (upstream's `getJobName`).
pub fn job_name(cronjob: &str, scheduled: Timestamp) -> String {
    format!("{cronjob}-{}", scheduled.as_second().div_euclid(60))
}

/// `time` in RFC 3339 as Go writes it, in `zone`.
fn rfc3339(time: Timestamp, zone: &jiff::tz::TimeZone) -> String {
    let zoned = time.to_zoned(zone.clone());
    let text = zoned.strftime("%Y-%m-%dT%H:%M:%S%:z").to_string();
    match text.strip_suffix("+00:00") {
        Some(base) => format!("{base}Z"),
        None => text,
    }
}

/// The Job for `scheduled` (upstream's `getJobFromTemplate2`): the template's labels,
/// annotations and spec, the deterministic name, the scheduled-time annotation and a
/// controller reference.
pub fn job_from_template(cj: &CronJob, scheduled: Timestamp) -> Result<Job, String> {
    let spec = cj.spec.clone().unwrap_or_default();
    let template = spec.job_template;
    let tmeta = template.metadata.unwrap_or_default();
    let zone = schedule::load_zone(spec.time_zone.as_deref().unwrap_or_default())?;
    let mut annotations = tmeta.annotations.unwrap_or_default();
    annotations.insert(SCHEDULED_TIMESTAMP.to_owned(), rfc3339(scheduled, &zone));
    Ok(Job {
        metadata: ObjectMeta {
            name: Some(job_name(
                cj.metadata.name.as_deref().unwrap_or_default(),
                scheduled,
            )),
            namespace: cj.metadata.namespace.clone(),
            labels: tmeta.labels,
            annotations: Some(annotations),
            owner_references: Some(vec![pods::controller_ref(
                "batch/v1",
                "CronJob",
                &cj.metadata,
            )]),
            ..ObjectMeta::default()
        },
        spec: template.spec,
        status: None,
    })
}

fn in_active(status: &CronJobStatus, uid: Option<&str>) -> bool {
    status
        .active
        .iter()
        .flatten()
        .any(|r| r.uid.as_deref() == uid)
}

fn remove_active(status: &mut CronJobStatus, uid: Option<&str>) {
    if let Some(active) = status.active.as_mut() {
        active.retain(|r| r.uid.as_deref() != uid);
        if active.is_empty() {
            status.active = None;
        }
    }
}

/// What [`review_children`] found.
#[derive(Debug, Default)]
pub struct Review<'a> {
    /// Events to record.
    pub events: Vec<Event>,
    /// The status changed.
    pub changed: bool,
    /// Unfinished Jobs of the CronJob missing from `status.active`.
    pub unexpected: Vec<&'a Job>,
    /// Active references whose Job is not in the cache (to be checked with the API).
    pub missing: Vec<ObjectReference>,
}

/// Brings `status` in line with the CronJob's Jobs (the first part of upstream's
/// `syncCronJob`): finished Jobs leave the active list, the latest completion becomes
/// `lastSuccessfulTime`.
pub fn review_children<'a>(status: &mut CronJobStatus, jobs: &[&'a Job]) -> Review<'a> {
    let mut review = Review::default();
    for job in jobs {
        let uid = job.metadata.uid.as_deref();
        let name = job.metadata.name.clone().unwrap_or_default();
        let found = in_active(status, uid);
        let finished = job::finished_at(job);
        if !found && finished.is_none() {
            review.unexpected.push(job);
        } else if let (true, Some((condition, _))) = (found, finished) {
            remove_active(status, uid);
            review.events.push((
                EventType::Normal,
                "SawCompletedJob",
                format!("Saw completed job: {name}, condition: {condition}"),
            ));
            review.changed = true;
        } else if finished.is_some_and(|(c, _)| c == job::COMPLETE) {
            let completed = job.status.as_ref().and_then(|s| s.completion_time.clone());
            match (&status.last_successful_time, &completed) {
                (None, _) => {
                    status.last_successful_time = completed;
                    review.changed = true;
                }
                (Some(last), Some(done)) if done.0 > last.0 => {
                    status.last_successful_time = completed;
                    review.changed = true;
                }
                _ => {}
            }
        }
    }
    for reference in status.active.iter().flatten() {
        if !jobs.iter().any(|j| j.metadata.uid == reference.uid) {
            review.missing.push(reference.clone());
        }
    }
    review
}

/// The finished Jobs to delete beyond the history limits, oldest first (upstream's
/// `cleanupFinishedJobs`).
pub fn history_to_delete<'a>(cj: &CronJob, jobs: &[&'a Job]) -> Vec<&'a Job> {
    let spec = cj.spec.clone().unwrap_or_default();
    let mut out = Vec::new();
    for (kind, limit) in [
        (job::COMPLETE, spec.successful_jobs_history_limit),
        (job::FAILED, spec.failed_jobs_history_limit),
    ] {
        let Some(limit) = limit else { continue };
        let mut finished: Vec<&Job> = jobs
            .iter()
            .copied()
            .filter(|j| job::finished_at(j).is_some_and(|(c, _)| c == kind))
            .collect();
        let surplus = finished.len().saturating_sub(limit.max(0) as usize);
        if surplus == 0 {
            continue;
        }
        // By start time, unstarted last, then by name.
        finished.sort_by(|a, b| {
            let start = |j: &Job| {
                j.status
                    .as_ref()
                    .and_then(|s| s.start_time.as_ref())
                    .map(|t| t.0)
            };
            let key = |j: &Job| (start(j).is_none(), start(j), j.metadata.name.clone());
            key(a).cmp(&key(b))
        });
        out.extend(finished.into_iter().take(surplus));
    }
    out
}

/// The `MissSchedule` event's message (the time in Go's RFC 1123 with numeric zone, UTC).
pub fn miss_schedule_message(scheduled: Timestamp) -> String {
    let when = scheduled
        .to_zoned(jiff::tz::TimeZone::UTC)
        .strftime("%a, %d %b %Y %H:%M:%S %z");
    format!("Missed scheduled time to start a job: {when}")
}

/// What to do about the schedule.
#[derive(Debug, Default, PartialEq)]
pub struct Decision {
    /// Events to record.
    pub events: Vec<Event>,
    /// Start a Job for this scheduled time (replacing the active ones if `true`).
    pub start: Option<(Timestamp, bool)>,
    /// When to look again.
    pub requeue: Option<Duration>,
}

/// Whether a Job for `scheduled` should start at `now`, and when to look again (the
/// scheduling part of upstream's `syncCronJob`). Expects `status.active` already reviewed.
pub fn decide(cj: &CronJob, now: Timestamp) -> Decision {
    let mut d = Decision::default();
    let spec = cj.spec.clone().unwrap_or_default();
    if cj.metadata.deletion_timestamp.is_some() {
        return d;
    }
    if let Some(zone) = spec.time_zone.as_deref()
        && let Err(error) = schedule::load_zone(zone)
    {
        d.events.push((
            EventType::Warning,
            "UnknownTimeZone",
            format!("invalid timeZone: {zone:?}: {error}"),
        ));
        return d;
    }
    if spec.suspend == Some(true) {
        return d;
    }
    let (text, warning) = formatted_schedule(cj);
    d.events.extend(warning);
    let sched = match schedule::parse(&text) {
        Ok(sched) => sched,
        Err(error) => {
            d.events.push((
                EventType::Warning,
                "UnparseableSchedule",
                format!("unparseable schedule: {:?} : {error}", spec.schedule),
            ));
            return d;
        }
    };
    let scheduled = match most_recent_schedule_time(cj, now, &sched, true) {
        Err(error) => {
            d.events.push((
                EventType::Warning,
                "InvalidSchedule",
                format!("invalid schedule: {} : {error}", spec.schedule),
            ));
            return d;
        }
        Ok((_, latest, missed)) => {
            if missed == Missed::Many && latest.is_some_and(|t| t <= now) {
                d.events.push((EventType::Warning, "TooManyMissedTimes",
                    "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew".to_owned()));
            }
            latest.filter(|t| *t <= now)
        }
    };
    d.requeue = next_schedule_delay(cj, now, &sched);
    let Some(scheduled) = scheduled else { return d };
    if let Some(deadline) = spec.starting_deadline_seconds
        && scheduled.as_second() + deadline < now.as_second()
    {
        d.events.push((
            EventType::Warning,
            "MissSchedule",
            miss_schedule_message(scheduled),
        ));
        return d;
    }
    let status = status(cj);
    let name = job_name(cj.metadata.name.as_deref().unwrap_or_default(), scheduled);
    let processed = status
        .active
        .iter()
        .flatten()
        .any(|r| r.name.as_deref() == Some(name.as_str()))
        || status
            .last_schedule_time
            .as_ref()
            .is_some_and(|t| t.0 == scheduled);
    if processed {
        return d;
    }
    let policy = spec.concurrency_policy.as_deref().unwrap_or("Allow");
    if policy == "Forbid" && status.active.as_ref().is_some_and(|a| !a.is_empty()) {
        d.events.push((
            EventType::Normal,
            "JobAlreadyActive",
            "Not starting job because prior execution is running and concurrency policy is Forbid"
                .to_owned(),
        ));
        return d;
    }
    d.start = Some((scheduled, policy == "Replace"));
    d
}

// ----- The controller -----

struct Context {
    client: Client,
    jobs: Store<Job>,
    recorder: EventRecorder,
}

/// Registers the informer handlers and returns the controller's run future.
pub fn start(mut setup: Setup<'_>) -> Task {
    let cronjobs = setup.watch::<CronJob>();
    let jobs = setup.watch::<Job>();
    let (queue, rx) = Queue::<CronJob>::new();
    queue.follow_applied(&cronjobs);
    jobs.on_change(move |change| {
        let owner = |job: &Job| {
            if let Some(r) = pods::controller_of(&job.metadata).filter(|r| r.kind == "CronJob")
                && let Some(ns) = job.metadata.namespace.as_deref()
            {
                queue.add_name(Some(ns), &r.name);
            }
        };
        match change {
            Change::Applied { old, new } => {
                if let Some(old) = old {
                    owner(old);
                }
                owner(new);
            }
            Change::Deleted(job) => owner(job),
        }
    });
    let ctx = Arc::new(Context {
        client: setup.client(),
        jobs: jobs.store(),
        recorder: setup.recorder("cronjob-controller"),
    });
    setup.run("cronjob", &cronjobs, rx, ctx, reconcile)
}

fn record(ctx: &Context, cj: &CronJob, (kind, reason, message): Event) {
    ctx.recorder
        .record(pods::object_reference(cj), kind, reason, message);
}

/// Deletes a Job in the background and drops it from the active list (upstream's
/// `deleteJob`); whether it was deleted.
async fn delete_job(ctx: &Context, cj: &mut CronJob, job: &Job) -> bool {
    let api: Api<Job> = Api::namespaced(
        ctx.client.clone(),
        job.metadata.namespace.as_deref().unwrap_or_default(),
    );
    let name = job.metadata.name.clone().unwrap_or_default();
    match api.delete(&name, &DeleteParams::background()).await {
        Ok(_) => {}
        Err(error) if runtime::is_not_found(&error) => {}
        Err(error) => {
            record(
                ctx,
                cj,
                (
                    EventType::Warning,
                    "FailedDelete",
                    format!("Deleted job: {}", pods::error_message(&error)),
                ),
            );
            return false;
        }
    }
    let mut status = status(cj);
    remove_active(&mut status, job.metadata.uid.as_deref());
    cj.status = Some(status);
    record(
        ctx,
        cj,
        (
            EventType::Normal,
            "SuccessfulDelete",
            format!("Deleted job {name}"),
        ),
    );
    true
}

/// One sync of a CronJob (upstream's `sync` and `syncCronJob`).
async fn reconcile(cached: Arc<CronJob>, ctx: Arc<Context>) -> Result<Action, Error> {
    let mut cj = (*cached).clone();
    let namespace = cj.metadata.namespace.clone().unwrap_or_default();
    let cj_api: Api<CronJob> = Api::namespaced(ctx.client.clone(), &namespace);
    let job_api: Api<Job> = Api::namespaced(ctx.client.clone(), &namespace);
    let children = ctx.jobs.state_filter(|j| {
        j.metadata.namespace.as_deref() == Some(namespace.as_str())
            && pods::controller_of(&j.metadata)
                .is_some_and(|r| Some(&r.uid) == cj.metadata.uid.as_ref())
    });
    let children: Vec<&Job> = children.iter().map(|j| &**j).collect();

    let mut changed = false;
    for victim in history_to_delete(&cj, &children) {
        changed |= delete_job(&ctx, &mut cj, victim).await;
    }

    // A Job created just before the status was written may be missing from a stale cache.
    let mut current = status(&cj);
    let mut review = review_children(&mut current, &children);
    if !review.unexpected.is_empty()
        && let Ok(fresh) = cj_api
            .get(cj.metadata.name.as_deref().unwrap_or_default())
            .await
        && fresh.metadata.uid == cj.metadata.uid
        && review
            .unexpected
            .iter()
            .any(|j| in_active(&status(&fresh), j.metadata.uid.as_deref()))
    {
        cj = fresh;
        current = status(&cj);
        review = review_children(&mut current, &children);
    }
    for job in &review.unexpected {
        if !in_active(&current, job.metadata.uid.as_deref()) {
            let name = job.metadata.name.clone().unwrap_or_default();
            record(
                &ctx,
                &cj,
                (
                    EventType::Warning,
                    "UnexpectedJob",
                    format!("Saw a job that the controller did not create or forgot: {name}"),
                ),
            );
        }
    }
    changed |= review.changed;
    for event in review.events.drain(..) {
        record(&ctx, &cj, event);
    }
    let mut sync_error = None;
    for missing in &review.missing {
        match job_api
            .get(missing.name.as_deref().unwrap_or_default())
            .await
        {
            Err(error) if runtime::is_not_found(&error) => {
                record(
                    &ctx,
                    &cj,
                    (
                        EventType::Normal,
                        "MissingJob",
                        format!(
                            "Active job went missing: {}",
                            missing.name.clone().unwrap_or_default()
                        ),
                    ),
                );
                remove_active(&mut current, missing.uid.as_deref());
                changed = true;
            }
            Err(error) => {
                sync_error = Some(error.into());
                break;
            }
            Ok(_) => {}
        }
    }
    cj.status = Some(current);

    let now = pods::now();
    let mut requeue = None;
    if sync_error.is_none() {
        let decision = decide(&cj, now);
        for event in decision.events {
            record(&ctx, &cj, event);
        }
        requeue = decision.requeue;
        if let Some((scheduled, replace)) = decision.start {
            match start_job(&ctx, &mut cj, &job_api, scheduled, replace, &mut changed).await {
                Ok(true) => {
                    let mut st = status(&cj);
                    st.last_schedule_time = Some(Time(scheduled));
                    cj.status = Some(st);
                    changed = true;
                    let (text, _) = formatted_schedule(&cj);
                    requeue = schedule::parse(&text)
                        .ok()
                        .and_then(|s| next_schedule_delay(&cj, now, &s));
                }
                Ok(false) => requeue = None,
                Err(error) => {
                    requeue = None;
                    sync_error = Some(error);
                }
            }
        }
    }
    if changed
        && runtime::replace_status_unless_gone(
            &cj_api,
            cj.metadata.name.as_deref().unwrap_or_default(),
            &cj,
        )
        .await?
        .is_none()
    {
        return Ok(Action::await_change());
    }
    if let Some(delay) = requeue {
        return Ok(Action::requeue(delay));
    }
    match sync_error {
        Some(error) => Err(error),
        None => Ok(Action::await_change()),
    }
}

/// Replaces the active Jobs if asked, then creates the Job for `scheduled` and adds it to
/// the active list; `false` when a Job of that name exists and needs nothing more.
async fn start_job(
    ctx: &Context,
    cj: &mut CronJob,
    api: &Api<Job>,
    scheduled: Timestamp,
    replace: bool,
    changed: &mut bool,
) -> Result<bool, Error> {
    if replace {
        for active in status(cj).active.unwrap_or_default() {
            let name = active.name.clone().unwrap_or_default();
            let job = match api.get(&name).await {
                Ok(job) => job,
                Err(error) => {
                    record(
                        ctx,
                        cj,
                        (
                            EventType::Warning,
                            "FailedGet",
                            format!("Get job: {}", pods::error_message(&error)),
                        ),
                    );
                    return Err(error.into());
                }
            };
            if !delete_job(ctx, cj, &job).await {
                return Err(Error::Invalid(format!(
                    "could not replace job {}/{name}",
                    job.metadata.namespace.clone().unwrap_or_default()
                )));
            }
            *changed = true;
        }
    }
    let wanted = job_from_template(cj, scheduled).map_err(Error::Invalid)?;
    let created = match api.create(&PostParams::default(), &wanted).await {
        Ok(job) => {
            record(
                ctx,
                cj,
                (
                    EventType::Normal,
                    "SuccessfulCreate",
                    format!(
                        "Created job {}",
                        job.metadata.name.clone().unwrap_or_default()
                    ),
                ),
            );
            job
        }
        Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => {
            let existing = api
                .get(wanted.metadata.name.as_deref().unwrap_or_default())
                .await?;
            let ours = pods::controller_of(&existing.metadata)
                .is_some_and(|r| Some(&r.uid) == cj.metadata.uid.as_ref());
            if !ours || in_active(&status(cj), existing.metadata.uid.as_deref()) {
                return Ok(false);
            }
            tracing::info!(job = ?existing.metadata.name, "job already exists");
            existing
        }
        Err(error) => {
            if !pods::namespace_terminating(&error) {
                record(
                    ctx,
                    cj,
                    (
                        EventType::Warning,
                        "FailedCreate",
                        format!("Error creating job: {}", pods::error_message(&error)),
                    ),
                );
            }
            return Err(error.into());
        }
    };
    let mut st = status(cj);
    st.active
        .get_or_insert_with(Vec::new)
        .push(pods::object_reference(&created));
    cj.status = Some(st);
    Ok(true)
}

#[cfg(test)]
mod tests;

//! The TTL-after-finished controller (upstream's `pkg/controller/ttlafterfinished`): deletes a
//! finished Job (`Complete` or `Failed`) `spec.ttlSecondsAfterFinished` seconds after it
//! finished, with background propagation so its pods go with it. A Job read afresh from the
//! API is checked again before deletion, and the deletion is guarded by its resourceVersion,
//! so a Job whose TTL was just extended is not deleted.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, DeleteParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;

use crate::job;
use crate::pods;
use crate::runtime::{self, Change, Error, Queue, Setup, Task};

/// How long until the Job expires at `now` (zero once expired); `None` when it has no TTL,
/// has not finished, or is already being deleted.
pub fn time_left(job: &Job, now: Timestamp) -> Result<Option<Duration>, Error> {
    let Some(ttl) = job.spec.as_ref().and_then(|s| s.ttl_seconds_after_finished) else {
        return Ok(None);
    };
    if job.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let Some((_, finished)) = job::finished_at(job) else {
        return Ok(None);
    };
    let Some(finished) = finished else {
        return Err(Error::Invalid(
            "unable to find the time when the Job finished".into(),
        ));
    };
    let expires = finished.as_millisecond() + i64::from(ttl) * 1000;
    let left = expires - now.as_millisecond();
    Ok(Some(Duration::from_millis(left.max(0) as u64)))
}

struct Context {
    client: Client,
}

/// Registers the Job handler and returns the controller's run future.
pub fn start(mut setup: Setup<'_>) -> Task {
    let jobs = setup.watch::<Job>();
    let (queue, rx) = Queue::<Job>::new();
    jobs.on_change(move |change| {
        if let Change::Applied { new, .. } = change
            && new
                .spec
                .as_ref()
                .is_some_and(|s| s.ttl_seconds_after_finished.is_some())
            && job::is_finished(new)
        {
            queue.add(ObjectRef::from_obj(*new));
        }
    });
    let ctx = Arc::new(Context {
        client: setup.client(),
    });
    setup.run("ttl-after-finished", &jobs, rx, ctx, reconcile)
}

async fn reconcile(cached: Arc<Job>, ctx: Arc<Context>) -> Result<Action, Error> {
    match time_left(&cached, pods::now())? {
        None => return Ok(Action::await_change()),
        Some(left) if !left.is_zero() => return Ok(Action::requeue(left)),
        Some(_) => {}
    }
    let namespace = cached.metadata.namespace.clone().unwrap_or_default();
    let name = cached.metadata.name.clone().unwrap_or_default();
    let api: Api<Job> = Api::namespaced(ctx.client.clone(), &namespace);
    // The TTL may have changed since the cache saw the Job.
    let fresh = match api.get(&name).await {
        Ok(fresh) => fresh,
        Err(error) if runtime::is_not_found(&error) => return Ok(Action::await_change()),
        Err(error) => return Err(error.into()),
    };
    match time_left(&fresh, pods::now())? {
        None => return Ok(Action::await_change()),
        Some(left) if !left.is_zero() => return Ok(Action::requeue(left)),
        Some(_) => {}
    }
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            resource_version: fresh.metadata.resource_version.clone(),
            uid: fresh.metadata.uid.clone(),
        }),
        ..DeleteParams::background()
    };
    tracing::debug!(job = %format!("{namespace}/{name}"), "deleting the expired Job");
    match api.delete(&name, &params).await {
        Ok(_) => Ok(Action::await_change()),
        Err(error) if runtime::is_not_found(&error) => Ok(Action::await_change()),
        Err(error) => Err(error.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap_or_default()
    }

    fn job(ttl: Option<i32>, conditions: Value, deleting: bool) -> Job {
        serde_json::from_value(json!({
            "metadata": {"name": "j", "namespace": "ns",
                         "deletionTimestamp": deleting.then(|| at(0).to_string())},
            "spec": {"ttlSecondsAfterFinished": ttl, "template": {}},
            "status": {"conditions": conditions},
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn expiry() {
        let done = |t: &str| json!([{"type": t, "status": "True", "lastTransitionTime": at(0).to_string()}]);
        let check = |j: Job, now: i64, want: Option<u64>| {
            let left = time_left(&j, at(now)).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(left.map(|d| d.as_secs()), want);
        };
        check(job(Some(100), done("Complete"), false), 30, Some(70));
        check(job(Some(100), done("Failed"), false), 100, Some(0));
        check(job(Some(0), done("Complete"), false), 5, Some(0));
        check(job(None, done("Complete"), false), 500, None);
        check(job(Some(100), json!([]), false), 500, None);
        check(
            job(
                Some(100),
                json!([{"type": "Complete", "status": "False"}]),
                false,
            ),
            500,
            None,
        );
        check(job(Some(100), done("Complete"), true), 500, None);
        let no_time = job(
            Some(1),
            json!([{"type": "Complete", "status": "True"}]),
            false,
        );
        assert!(time_left(&no_time, at(0)).is_err());
    }
}

//! Pod-failure backoff (upstream's `backoff_utils.go`): a Job waits before replacing failed
//! pods, 10 s after the first failure since the last success, doubling per further failure up
//! to six minutes, counted from when the last failed pod finished.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

/// The delay after the first failure (upstream's `DefaultJobPodFailureBackOff`).
pub const DEFAULT: Duration = Duration::from_secs(10);
/// The longest delay (upstream's `MaxJobPodFailureBackOff`).
pub const MAX: Duration = Duration::from_secs(360);

/// What a Job's backoff remembers between syncs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Record {
    /// Pod failures since the last success.
    pub failures_after_last_success: u32,
    /// When the last of them finished.
    pub last_failure: Option<Timestamp>,
}

impl Record {
    /// The record after the newly finished pods are counted (upstream's `newBackoffRecord`).
    pub fn next(self, new_succeeded: &[&Pod], new_failed: &[&Pod]) -> Record {
        let mut failed: Vec<Timestamp> = new_failed.iter().map(|p| finished_at(p)).collect();
        failed.sort();
        let last_success = new_succeeded.iter().map(|p| finished_at(p)).max();
        match (last_success, failed.last()) {
            (None, None) => self,
            (None, Some(last)) => Record {
                failures_after_last_success: self.failures_after_last_success + failed.len() as u32,
                last_failure: Some(*last),
            },
            (Some(success), _) => {
                let after: Vec<&Timestamp> = failed.iter().filter(|t| **t > success).collect();
                Record {
                    failures_after_last_success: after.len() as u32,
                    last_failure: after.last().map(|t| **t),
                }
            }
        }
    }

    /// How long pod creation must still wait at `now` (upstream's `getRemainingTime`).
    pub fn remaining(&self, now: Timestamp) -> Duration {
        let Some(last) = self.last_failure else {
            return Duration::ZERO;
        };
        if self.failures_after_last_success == 0 {
            return Duration::ZERO;
        }
        let mut delay = DEFAULT;
        for _ in 1..self.failures_after_last_success {
            delay = delay.saturating_mul(2);
            if delay >= MAX {
                delay = MAX;
                break;
            }
        }
        let elapsed = now.duration_since(last);
        let elapsed = Duration::try_from(elapsed).unwrap_or(Duration::ZERO);
        delay.saturating_sub(elapsed)
    }
}

/// When a pod finished (upstream's `getFinishedTime`): the last container to terminate if
/// all did, else when it turned not ready, else its deletion time less the grace period, else
/// its creation.
pub fn finished_at(pod: &Pod) -> Timestamp {
    let status = pod.status.as_ref();
    let containers = status
        .and_then(|s| s.container_statuses.as_deref())
        .unwrap_or_default();
    if !containers.is_empty() {
        let ends: Option<Vec<Timestamp>> = containers
            .iter()
            .map(|c| {
                c.state
                    .as_ref()?
                    .terminated
                    .as_ref()?
                    .finished_at
                    .as_ref()
                    .map(|t| t.0)
            })
            .collect();
        if let Some(last) = ends.and_then(|e| e.into_iter().max()) {
            return last;
        }
    }
    let not_ready = status
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
        .iter()
        .find(|c| c.type_ == "Ready")
        .filter(|c| c.status == "False")
        .and_then(|c| c.last_transition_time.as_ref());
    if let Some(t) = not_ready {
        return t.0;
    }
    if let Some(deleted) = &pod.metadata.deletion_timestamp {
        let grace = pod.metadata.deletion_grace_period_seconds.unwrap_or(0);
        return Timestamp::from_second(deleted.0.as_second() - grace).unwrap_or(deleted.0);
    }
    pod.metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap_or_default()
    }

    fn finished(secs: i64) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": format!("p{secs}"), "creationTimestamp": "2020-01-01T00:00:00Z"},
            "status": {"containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": false,
                "restartCount": 0, "state": {"terminated": {"exitCode": 1, "finishedAt": at(secs).to_string()}}}]},
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn delay_doubles_and_is_capped() {
        let check = |failures: u32, last: i64, now: i64, want: u64| {
            let record = Record {
                failures_after_last_success: failures,
                last_failure: Some(at(last)),
            };
            assert_eq!(
                record.remaining(at(now)),
                Duration::from_secs(want),
                "{failures} failures"
            );
        };
        check(0, 0, 0, 0);
        check(1, 0, 0, 10);
        check(1, 0, 4, 6);
        check(1, 0, 11, 0);
        check(2, 0, 0, 20);
        check(3, 0, 5, 35);
        check(6, 0, 0, 320);
        check(7, 0, 0, 360);
        check(100, 0, 60, 300);
        assert_eq!(Record::default().remaining(at(0)), Duration::ZERO);
    }

    #[test]
    fn record_counts_failures_after_the_last_success() {
        let (f1, f2, s, f3) = (finished(10), finished(20), finished(30), finished(40));
        let start = Record::default();
        let r = start.next(&[], &[&f2, &f1]);
        assert_eq!(
            r,
            Record {
                failures_after_last_success: 2,
                last_failure: Some(at(20))
            }
        );
        let r = r.next(&[], &[]);
        assert_eq!(
            r.failures_after_last_success, 2,
            "nothing new, nothing changes"
        );
        let r = r.next(&[&s], &[&f3, &f1]);
        assert_eq!(
            r,
            Record {
                failures_after_last_success: 1,
                last_failure: Some(at(40))
            }
        );
        assert_eq!(r.next(&[&s], &[]), Record::default());
    }

    #[test]
    fn finish_time_falls_back() {
        let deleted: Pod = serde_json::from_value(json!({"metadata": {"name": "d",
            "creationTimestamp": "2020-01-01T00:00:00Z", "deletionTimestamp": at(100).to_string(),
            "deletionGracePeriodSeconds": 30}}))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(finished_at(&deleted), at(70));
        let not_ready: Pod = serde_json::from_value(json!({"metadata": {"name": "n"},
            "status": {"conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": at(5).to_string()}]}}))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(finished_at(&not_ready), at(5));
        assert_eq!(finished_at(&finished(3)), at(3));
    }
}

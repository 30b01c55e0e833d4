//! Lease-based leader election with client-go's semantics, for components of which only one
//! may act at a time when several servers share a datastore (the scheduler, the controllers).
//!
//! A candidate takes the `coordination.k8s.io/v1` Lease when it is absent or its holder has not
//! renewed it for `leaseDurationSeconds` — measured on the candidate's own clock from when it
//! last saw the lease change, so clocks need not agree — and then renews it every retry period.
//! Every write carries the lease's `resourceVersion`, so two candidates cannot both win. A
//! leader that cannot renew within the renew deadline stops its work and competes again.

use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, PostParams};

/// Timing of an election (client-go's defaults for kube-scheduler and the controller manager).
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// How long a lease is valid after its last renewal.
    pub lease_duration: Duration,
    /// How long a leader keeps trying to renew before it gives up.
    pub renew_deadline: Duration,
    /// How often candidates retry and leaders renew.
    pub retry_period: Duration,
}

impl Default for Timing {
    fn default() -> Timing {
        Timing {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// One candidate for one lease.
#[derive(Debug)]
pub struct LeaderElection {
    api: Api<Lease>,
    name: String,
    identity: String,
    timing: Timing,
}

/// What the candidate last saw of the lease, and when (on its own clock).
#[derive(Debug, Default)]
pub struct Observed {
    record: Option<(Option<String>, Option<MicroTime>)>,
    at: Option<Instant>,
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

impl LeaderElection {
    /// A candidate named `identity` for the Lease `namespace/name`.
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: &str,
        timing: Timing,
    ) -> Self {
        LeaderElection {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
            identity: identity.to_owned(),
            timing,
        }
    }

    /// Runs `work` whenever this candidate leads: it is started on winning and dropped
    /// (cancelled) on losing the lease, then the candidate competes again. Never returns.
    pub async fn run<F, Fut>(&self, mut work: F) -> !
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = ()>,
    {
        let mut observed = Observed::default();
        loop {
            while !self.try_acquire_or_renew(&mut observed).await {
                tokio::time::sleep(self.timing.retry_period).await;
            }
            tracing::info!(lease = %self.name, identity = %self.identity, "became leader");
            tokio::select! {
                _ = work() => {}
                _ = self.keep(&mut observed) => {}
            }
            tracing::warn!(lease = %self.name, identity = %self.identity, "lost the lease; stopped leading");
        }
    }

    /// Renews until a renewal cannot be done within the renew deadline.
    async fn keep(&self, observed: &mut Observed) {
        let mut last_renewal = Instant::now();
        loop {
            tokio::time::sleep(self.timing.retry_period).await;
            if self.try_acquire_or_renew(observed).await {
                last_renewal = Instant::now();
            } else if last_renewal.elapsed() >= self.timing.renew_deadline {
                return;
            }
        }
    }

    /// One attempt, as client-go's `tryAcquireOrRenew`; whether this candidate now holds the
    /// lease.
    pub async fn try_acquire_or_renew(&self, observed: &mut Observed) -> bool {
        let duration_secs = self.timing.lease_duration.as_secs() as i32;
        let lease = match self.api.get_opt(&self.name).await {
            Ok(lease) => lease,
            Err(e) => {
                tracing::debug!(lease = %self.name, error = %e, "cannot read the lease");
                return false;
            }
        };
        let Some(mut lease) = lease else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(duration_secs),
                    acquire_time: Some(now()),
                    renew_time: Some(now()),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return self
                .api
                .create(&PostParams::default(), &lease)
                .await
                .is_ok();
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let record = (spec.holder_identity.clone(), spec.renew_time.clone());
        if observed.record.as_ref() != Some(&record) {
            observed.record = Some(record);
            observed.at = Some(Instant::now());
        }
        let holder = spec.holder_identity.as_deref().unwrap_or_default();
        let held_by_me = holder == self.identity;
        let duration = spec
            .lease_duration_seconds
            .map(|s| Duration::from_secs(s.max(0) as u64))
            .unwrap_or(self.timing.lease_duration);
        let expired = observed.at.is_none_or(|at| at.elapsed() > duration);
        if !holder.is_empty() && !held_by_me && !expired {
            return false;
        }
        let mut new_spec = spec.clone();
        new_spec.holder_identity = Some(self.identity.clone());
        new_spec.lease_duration_seconds = Some(duration_secs);
        new_spec.renew_time = Some(now());
        if !held_by_me {
            new_spec.acquire_time = Some(now());
            new_spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        lease.spec = Some(new_spec);
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(lease) => {
                let spec = lease.spec.unwrap_or_default();
                observed.record = Some((spec.holder_identity, spec.renew_time));
                observed.at = Some(Instant::now());
                true
            }
            Err(e) => {
                tracing::debug!(lease = %self.name, error = %e, "cannot take or renew the lease");
                false
            }
        }
    }
}

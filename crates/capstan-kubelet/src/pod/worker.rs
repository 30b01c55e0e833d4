//! One pod's worker: it brings the runtime in line with the pod (one sync at a time, woken by
//! changes to the pod, by the runtime relist and by its own timers) and reports the pod's
//! status. A sync reads the runtime afresh and acts on the difference, never on the event
//! that woke it:
//!
//! - a pod being deleted, or finished, has its containers stopped (the grace period, then
//!   SIGKILL) and its sandbox stopped; a deleted pod is then removed from the API (grace 0, UID
//!   precondition) once nothing of it runs;
//! - otherwise the pod gets a ready sandbox (a new one, with its containers started afresh, if
//!   the old one died, unless restartPolicy Never and its containers already ran), then its
//!   init containers one by one, then its app containers; exited containers restart as the
//!   restart policy says, after the kubelet's crash-loop back-off (10 s doubling to 5 minutes,
//!   forgotten after 10 minutes of quiet);
//! - containers are probed ([`crate::pod::probes`]): a container whose liveness or startup probe
//!   failed is killed (with the probe's grace period if it sets one) and restarted at once as
//!   the restart policy says; readiness and startup results go into the status. A probe result
//!   change wakes the worker;
//! - a container is stopped as the kubelet kills one: its preStop hook first, bounded by the
//!   grace period and using it up, then SIGTERM and SIGKILL once the rest has passed; a
//!   container's postStart hook runs right after it started, and a failing one kills it
//!   (`PostStartHookError`);
//! - every container gets a termination message file mounted at its
//!   `terminationMessagePath`, which the status reads once it exited;
//! - a pod gone from the API has everything of it removed from the runtime and the disk.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::json;
use tokio::sync::{Notify, watch};

use capstan_client::events::EventType::{Normal, Warning};

use crate::pod::events::{Events, reason};
use crate::pod::inspect::observe;
use crate::pod::probes::{self, Kind, Prober};
use crate::pod::status::{self, ContainerRecord, Observed, State, Waiting};
use crate::runtime::cri::{Cri, CriError};
use crate::spec::{self, ContainerInputs};

/// How often a worker syncs when nothing wakes it.
const RESYNC: Duration = Duration::from_secs(60);
/// How soon a worker tries again after the runtime or the API failed it.
const RETRY: Duration = Duration::from_secs(5);
/// The crash-loop back-off's first delay.
const BACKOFF_INITIAL: Duration = Duration::from_secs(10);
/// The crash-loop back-off's longest delay.
const BACKOFF_MAX: Duration = Duration::from_secs(300);
/// The shortest grace period a container is stopped with unless one is imposed (upstream's
/// minimum shutdown window).
const MINIMUM_GRACE: i64 = 2;

/// What every worker on the node shares.
pub struct Shared {
    /// The API client.
    pub client: kube::Client,
    /// The runtime.
    pub cri: Cri,
    /// The node's name.
    pub node_name: String,
    /// The node's addresses.
    pub host_ips: Vec<String>,
    /// The runtime's name (the scheme of container IDs).
    pub runtime_name: String,
    /// Where pod logs go (`<ns>_<name>_<uid>/<container>/<n>.log`).
    pub log_root: PathBuf,
    /// The agent's root directory (`pods/<uid>/volumes/...`).
    pub root_dir: PathBuf,
    /// The cluster's DNS domain.
    pub cluster_domain: String,
    /// The cluster DNS servers (empty: the `kube-dns` Service's cluster IP).
    pub cluster_dns: Vec<std::net::IpAddr>,
    /// The host's resolv.conf.
    pub resolv_conf: PathBuf,
    /// The node's memory, in bytes.
    pub node_memory: i64,
    /// The node's allocatable resources.
    pub allocatable: BTreeMap<String, String>,
    /// Where the kubelet's events go.
    pub events: Events,
    /// The volumes the node reports in use.
    pub volumes_in_use: crate::volumes::InUse,
    /// `kubelet_pod_start_duration_seconds`: from a worker's start to its pod's first
    /// `Running` status.
    pub pod_starts: Arc<crate::observed::Histogram>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("node_name", &self.node_name)
            .field("root_dir", &self.root_dir)
            .finish_non_exhaustive()
    }
}

fn now_nanos() -> i64 {
    crate::now().as_nanosecond() as i64
}

/// The kubelet's per-key exponential back-off (client-go's `flowcontrol.Backoff`): an event at
/// time `t` is held back while less than the key's current delay has passed since `t`.
#[derive(Debug, Default)]
pub struct Backoff {
    entries: HashMap<String, (Duration, i64)>,
}

impl Backoff {
    fn expired(event: i64, last: i64) -> bool {
        event.saturating_sub(last) > 2 * BACKOFF_MAX.as_nanos() as i64
    }

    /// How much longer `key` is held back after an event at `event` (nanoseconds), if at all.
    pub fn remaining(&self, key: &str, event: i64, now: i64) -> Option<Duration> {
        let (delay, last) = self.entries.get(key)?;
        if Self::expired(event, *last) {
            return None;
        }
        let elapsed = now.saturating_sub(event).max(0) as u128;
        let delay_nanos = delay.as_nanos();
        (elapsed < delay_nanos).then(|| Duration::from_nanos((delay_nanos - elapsed) as u64))
    }

    /// Records an event for `key` at `event`: its delay starts at 10 s and doubles each time,
    /// up to 5 minutes; after 10 quiet minutes it starts over.
    pub fn next(&mut self, key: &str, event: i64) {
        let entry = self
            .entries
            .entry(key.to_owned())
            .or_insert((Duration::ZERO, event));
        entry.0 = if entry.0.is_zero() || Self::expired(event, entry.1) {
            BACKOFF_INITIAL
        } else {
            (entry.0 * 2).min(BACKOFF_MAX)
        };
        entry.1 = event;
    }

    /// The current delay of `key`.
    pub fn delay(&self, key: &str) -> Duration {
        self.entries.get(key).map_or(BACKOFF_INITIAL, |e| e.0)
    }
}

/// A pod's worker.
#[derive(Debug)]
pub struct Worker {
    shared: Arc<Shared>,
    uid: String,
    crash_backoff: Backoff,
    pull_backoff: Backoff,
    waiting: HashMap<String, Waiting>,
    prober: Prober,
    wake: Arc<Notify>,
    volumes: crate::volumes::PodVolumes,
    /// When the agent first saw the pod (this worker's start), until its start is observed.
    first_seen: Option<Instant>,
}

/// What a sync step decided.
type Step = Result<Option<Duration>, CriError>;

fn shorter(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl Worker {
    /// A worker for the pod with `uid`.
    pub fn new(shared: Arc<Shared>, uid: String) -> Worker {
        let wake = Arc::new(Notify::new());
        Worker {
            prober: Prober::new(shared.cri.clone(), wake.clone(), shared.events.clone()),
            shared,
            uid,
            crash_backoff: Backoff::default(),
            pull_backoff: Backoff::default(),
            waiting: HashMap::new(),
            wake,
            volumes: crate::volumes::PodVolumes::default(),
            first_seen: Some(Instant::now()),
        }
    }

    /// Syncs until the pod is gone and torn down, or the sender is dropped. `None` on the
    /// channel means the pod is gone from the API.
    pub async fn run(mut self, mut pods: watch::Receiver<Option<Arc<Pod>>>) {
        let wake = self.wake.clone();
        loop {
            let pod = pods.borrow_and_update().clone();
            let wait = match pod {
                None => match self.teardown().await {
                    Ok(()) => return,
                    Err(e) => {
                        tracing::warn!(uid = %self.uid, error = %e, "cannot remove a deleted pod's containers");
                        RETRY
                    }
                },
                Some(pod) => {
                    // The pod's deletion interrupts a sync still running (a postStart hook that
                    // does not end, a long pull), as upstream's pod workers cancel theirs: the
                    // next sync reads the runtime afresh and stops what was started.
                    // A deletion with a shorter grace period interrupts the stopping of one
                    // with a longer one: the next sync stops the containers again with it.
                    let outcome = if let Some(grace) = pod.metadata.deletion_grace_period_seconds {
                        tokio::select! {
                            outcome = self.sync(&pod) => Some(outcome),
                            () = shortened(pods.clone(), grace) => None,
                        }
                    } else if pod.metadata.deletion_timestamp.is_some() {
                        Some(self.sync(&pod).await)
                    } else {
                        tokio::select! {
                            outcome = self.sync(&pod) => Some(outcome),
                            () = deletion(pods.clone()) => None,
                        }
                    };
                    match outcome {
                        None => {
                            tracing::info!(pod = %name(&pod), "pod deleted during its sync, or its grace period shortened; stopping it");
                            continue;
                        }
                        Some(Ok(wait)) => wait.unwrap_or(RESYNC),
                        Some(Err(e)) => {
                            tracing::warn!(pod = %name(&pod), error = %e, "pod sync failed");
                            RETRY
                        }
                    }
                }
            };
            tokio::select! {
                changed = pods.changed() => if changed.is_err() { return },
                // A probe result changed.
                _ = wake.notified() => {}
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Removes every sandbox and container of the pod, and its directories.
    async fn teardown(&mut self) -> Result<(), CriError> {
        self.prober.stop_all();
        let observed = observe(&self.shared.cri, &self.uid).await?;
        self.stop_all(None, &observed, 0).await?;
        let mut runtime = self.shared.cri.runtime.clone();
        for sandbox in &observed.sandboxes {
            runtime
                .remove_pod_sandbox(cri::RemovePodSandboxRequest {
                    pod_sandbox_id: sandbox.id.clone(),
                })
                .await?;
        }
        remove_log_dir(&self.shared.log_root, &self.uid);
        let pod_dir = self.shared.root_dir.join("pods").join(&self.uid);
        if let Err(e) = crate::volumes::remove_pod_dir(&pod_dir) {
            tracing::warn!(uid = %self.uid, error = %e, "cannot remove the pod's directory");
        }
        self.shared.volumes_in_use.forget(&self.uid);
        tracing::info!(uid = %self.uid, "removed a deleted pod's containers");
        Ok(())
    }

    /// Stops every running container, all at once, with `grace` seconds to exit (their
    /// preStop hooks first when the pod is known), then every ready sandbox.
    async fn stop_all(
        &self,
        pod: Option<&Pod>,
        observed: &Observed,
        grace: i64,
    ) -> Result<(), CriError> {
        let pod_ip = pod.map(|p| self.pod_ip(p, observed)).unwrap_or_default();
        let stops = observed
            .containers
            .iter()
            .filter(|c| matches!(c.state, State::Running | State::Created | State::Unknown))
            .map(|c| {
                let pod_ip = pod_ip.as_str();
                async move {
                    match pod {
                        Some(pod) if c.state == State::Running => {
                            let spec = container_spec(pod, &c.name);
                            let reason = Kill::Stop(format!("Stopping container {}", c.name));
                            self.kill_container(pod, spec, &c.id, Some(grace), reason, pod_ip)
                                .await
                        }
                        _ => self.stop_container(&c.id, grace).await,
                    }
                }
            });
        for result in futures::future::join_all(stops).await {
            result?;
        }
        let mut runtime = self.shared.cri.runtime.clone();
        for sandbox in observed.sandboxes.iter().filter(|s| s.ready) {
            runtime
                .stop_pod_sandbox(cri::StopPodSandboxRequest {
                    pod_sandbox_id: sandbox.id.clone(),
                })
                .await?;
        }
        Ok(())
    }

    /// One sync of the pod; returns when to sync again (None: at the resync).
    async fn sync(&mut self, pod: &Pod) -> Step {
        let observed = observe(&self.shared.cri, &self.uid).await?;
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        let finished = matches!(phase, Some("Succeeded" | "Failed"));
        if pod.metadata.deletion_timestamp.is_some() || finished {
            return self.terminate(pod, observed).await;
        }
        let deadline = status::active_deadline_left(pod, crate::now());
        if deadline == Some(Duration::ZERO) {
            // Active longer than `activeDeadlineSeconds`: the pod fails and is stopped.
            tracing::info!(pod = %name(pod), "pod exceeded its active deadline; stopping it");
            self.shared.events.pod(
                pod,
                Normal,
                status::DEADLINE_EXCEEDED,
                status::DEADLINE_EXCEEDED_MESSAGE.to_owned(),
            );
            let mut failed = pod.clone();
            let status = failed.status.get_or_insert_with(Default::default);
            status.phase = Some("Failed".to_owned());
            status.reason = Some(status::DEADLINE_EXCEEDED.to_owned());
            status.message = Some(status::DEADLINE_EXCEEDED_MESSAGE.to_owned());
            return self.terminate(&failed, observed).await;
        }
        self.waiting.clear();
        let (observed, wait) = match self.run_pod(pod, &observed).await? {
            (true, wait) => (observe(&self.shared.cri, &self.uid).await?, wait),
            (false, wait) => (observed, wait),
        };
        self.refresh_volumes(pod).await;
        self.prober
            .reconcile(pod, &observed, &self.pod_ip(pod, &observed), false);
        self.post_status(pod, &observed, false).await;
        // Wake when the active deadline passes (the status posted above starts its clock).
        let deadline = deadline.or(Some(Duration::from_secs(1))).filter(|_| {
            pod.spec
                .as_ref()
                .is_some_and(|s| s.active_deadline_seconds.is_some())
        });
        Ok(shorter(wait, deadline))
    }

    /// Refreshes the files of the pod's volumes that are set up (downward API files, tokens,
    /// ConfigMap and Secret contents).
    async fn refresh_volumes(&mut self, pod: &Pod) {
        let pod_dir = self.shared.root_dir.join("pods").join(&self.uid);
        let shared = self.shared.clone();
        let host = crate::volumes::Host {
            client: &shared.client,
            node_name: &shared.node_name,
            allocatable: &shared.allocatable,
            pod_dir: &pod_dir,
            in_use: &shared.volumes_in_use,
        };
        self.volumes.refresh(&host, pod).await;
    }

    /// Stops what runs of a pod being deleted or finished; deletes a deleted pod from the API
    /// once nothing of it runs.
    async fn terminate(&mut self, pod: &Pod, observed: Observed) -> Step {
        let grace = pod
            .metadata
            .deletion_grace_period_seconds
            .or_else(|| {
                pod.spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
            })
            .unwrap_or(30);
        // Liveness and startup probes stop: what is stopping is not restarted.
        let pod_ip = self.pod_ip(pod, &observed);
        self.prober.reconcile(pod, &observed, &pod_ip, true);
        let running = observed.containers.iter().any(|c| c.state != State::Exited)
            || observed.sandboxes.iter().any(|s| s.ready);
        let observed = if running {
            self.stop_all(Some(pod), &observed, grace).await?;
            observe(&self.shared.cri, &self.uid).await?
        } else {
            observed
        };
        self.prober.reconcile(pod, &observed, &pod_ip, true);
        self.waiting.clear();
        self.post_status(pod, &observed, true).await;
        if pod.metadata.deletion_timestamp.is_none() {
            return Ok(None);
        }
        let pods: Api<Pod> = Api::namespaced(
            self.shared.client.clone(),
            pod.metadata.namespace.as_deref().unwrap_or("default"),
        );
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(self.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match pods
            .delete(pod.metadata.name.as_deref().unwrap_or_default(), &params)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => {
                tracing::warn!(pod = %name(pod), error = %e, "cannot confirm the pod's deletion");
                return Ok(Some(RETRY));
            }
        }
        Ok(Some(RETRY))
    }

    /// Brings the pod's sandbox and containers in line with its spec. Returns whether anything
    /// was done (so the runtime must be read again) and when to look again.
    async fn run_pod(
        &mut self,
        pod: &Pod,
        observed: &Observed,
    ) -> Result<(bool, Option<Duration>), CriError> {
        let Some(spec) = pod.spec.clone() else {
            return Ok((false, None));
        };
        let policy = spec
            .restart_policy
            .clone()
            .unwrap_or_else(|| "Always".to_owned());
        let mut acted = false;
        let fresh;
        let mut observed = observed;
        let sandbox = match observed.sandbox().filter(|s| s.ready) {
            Some(sandbox) => sandbox.id.clone(),
            None => {
                if policy == "Never" && !observed.containers.is_empty() {
                    // Its containers ran; a Never pod does not get them again.
                    return Ok((false, None));
                }
                if observed.sandbox().is_some() {
                    self.shared.events.pod(
                        pod,
                        Normal,
                        reason::SANDBOX_CHANGED,
                        "Pod sandbox changed, it will be killed and re-created.".to_owned(),
                    );
                }
                self.stop_all(None, observed, 0).await?;
                match self.start_sandbox(pod, observed).await {
                    Ok(id) => id,
                    Err(e) => {
                        tracing::warn!(pod = %name(pod), error = %e, "cannot create the pod sandbox");
                        self.shared.events.pod(
                            pod,
                            Warning,
                            reason::FAILED_CREATE_POD_SANDBOX,
                            format!("Failed to create pod sandbox: {e}"),
                        );
                        return Ok((true, Some(RETRY)));
                    }
                }
            }
        };
        if observed.sandbox().is_none_or(|s| s.id != sandbox) {
            fresh = observe(&self.shared.cri, &self.uid).await?;
            observed = &fresh;
            acted = true;
        }
        let sandbox_ip = self.pod_ip(pod, observed);
        let mut wait = None;
        // Ephemeral containers start once each and are never restarted; they come first so
        // that a pod stuck on an init container can still be debugged (as upstream).
        for ephemeral in spec.ephemeral_containers.iter().flatten() {
            if observed.latest(&ephemeral.name).is_some() {
                continue;
            }
            let container = spec::ephemeral_container(ephemeral);
            let target = ephemeral
                .target_container_name
                .as_deref()
                .and_then(|name| in_sandbox(observed, name, &sandbox))
                .filter(|c| c.state == State::Running)
                .map(|c| c.id.clone());
            acted = true;
            let started = self
                .start_container(pod, &container, &sandbox, &sandbox_ip, 0, target)
                .await;
            if let Err(NotStarted { waiting, retry }) = started {
                if let Some(waiting) = waiting {
                    self.waiting.insert(ephemeral.name.clone(), waiting);
                }
                wait = shorter(wait, Some(retry));
            }
        }
        // Init containers, in order: each must complete (a sidecar: start) before the next.
        for container in spec.init_containers.iter().flatten() {
            let current = in_sandbox(observed, &container.name, &sandbox);
            let sidecar = status::is_sidecar(container);
            // A sidecar whose liveness or startup probe failed is killed and started again.
            let failed = current
                .filter(|c| sidecar && c.state == State::Running)
                .and_then(|c| Some((c, self.prober.failed(&c.id)?)));
            if let Some((c, kind)) = failed {
                let reason = Kill::Probe(kind, probe_kill_message(container, kind, true));
                self.kill_container(pod, Some(container), &c.id, None, reason, &sandbox_ip)
                    .await?;
                acted = true;
            }
            let restart = match current.map(|c| (c.state, c.exit_code)) {
                None => true,
                Some((State::Running, _)) if failed.is_some() => true,
                Some((State::Running, _)) if sidecar => continue,
                Some((State::Exited, 0)) if !sidecar => continue,
                Some((State::Exited, _)) => policy != "Never" || sidecar,
                Some(_) => return Ok((acted, wait)),
            };
            if !restart {
                return Ok((acted, wait));
            }
            let (started, again) = self
                .start_after_backoff(pod, container, observed, &sandbox, &sandbox_ip)
                .await?;
            acted |= started;
            wait = shorter(wait, again);
            if !sidecar || !started {
                return Ok((acted, wait));
            }
        }
        for container in &spec.containers {
            let current = in_sandbox(observed, &container.name, &sandbox);
            let start = match current {
                None => true,
                Some(c) if c.state == State::Running => {
                    if let Some(kind) = self.prober.failed(&c.id) {
                        let restart = policy != "Never";
                        let reason =
                            Kill::Probe(kind, probe_kill_message(container, kind, restart));
                        self.kill_container(pod, Some(container), &c.id, None, reason, &sandbox_ip)
                            .await?;
                        acted = true;
                        restart
                    } else if c.hash != spec::container_hash(container) {
                        let message = format!(
                            "Container {} definition changed, will be restarted",
                            container.name
                        );
                        self.kill_container(
                            pod,
                            Some(container),
                            &c.id,
                            None,
                            Kill::Stop(message),
                            &sandbox_ip,
                        )
                        .await?;
                        acted = true;
                        true
                    } else {
                        false
                    }
                }
                Some(c) if c.state == State::Exited => match policy.as_str() {
                    "Always" => true,
                    "OnFailure" => c.exit_code != 0,
                    _ => false,
                },
                Some(c) => {
                    // Created but never started, or unknown: start over.
                    self.stop_container(&c.id, 0).await?;
                    acted = true;
                    true
                }
            };
            if start {
                let (started, again) = self
                    .start_after_backoff(pod, container, observed, &sandbox, &sandbox_ip)
                    .await?;
                acted |= started;
                wait = shorter(wait, again);
            }
        }
        Ok((acted, wait))
    }

    /// Kills a container as the kubelet does: the grace period is `grace_override` or the
    /// pod's (a failed probe's own when it sets one); the preStop hook runs first, for at most
    /// that long, and what it took comes off it; the container then gets what is left (at
    /// least two seconds unless the grace period was imposed) between SIGTERM and SIGKILL.
    async fn kill_container(
        &self,
        pod: &Pod,
        container: Option<&Container>,
        id: &str,
        grace_override: Option<i64>,
        reason: Kill,
        pod_ip: &str,
    ) -> Result<(), CriError> {
        let probe = match &reason {
            Kill::Probe(kind, _) => Some(*kind),
            _ => None,
        };
        let mut grace = grace_override.unwrap_or_else(|| termination_grace(pod, container, probe));
        let message = match &reason {
            Kill::Probe(_, message) | Kill::Stop(message) => message.as_str(),
            Kill::PostStartHook => "FailedPostStartHook",
        };
        tracing::info!(pod = %name(pod), container = %container.map_or("", |c| c.name.as_str()), id = %id, grace, "{message}");
        if let Some(container) = container {
            self.shared.events.container(
                pod,
                &container.name,
                Normal,
                reason::KILLING,
                message.to_owned(),
            );
        }
        let pre_stop = container.and_then(|c| Some((c, c.lifecycle.as_ref()?.pre_stop.as_ref()?)));
        if let Some((container, hook)) = pre_stop
            && grace > 0
        {
            let started = Instant::now();
            let target = probes::Target {
                container_id: id.to_owned(),
                pod_ip: pod_ip.to_owned(),
                container: container.clone(),
            };
            let limit = Duration::from_secs(u64::try_from(grace).unwrap_or(0));
            match tokio::time::timeout(
                limit,
                probes::run_hook(&self.shared.cri, hook, pod, &target),
            )
            .await
            {
                Ok(Ok(())) => {}
                Ok(Err(message)) => {
                    tracing::warn!(pod = %name(pod), container = %container.name, %message, "PreStop hook failed");
                    self.shared.events.container(
                        pod,
                        &container.name,
                        Warning,
                        reason::FAILED_PRE_STOP_HOOK,
                        message,
                    );
                }
                Err(_) => {
                    tracing::info!(pod = %name(pod), container = %container.name, grace, "PreStop hook not completed in grace period")
                }
            }
            grace -= i64::try_from(started.elapsed().as_secs()).unwrap_or(grace);
        }
        if grace_override.is_none() && grace < MINIMUM_GRACE {
            grace = MINIMUM_GRACE;
        }
        self.stop_container(id, grace.max(0)).await
    }

    async fn stop_container(&self, id: &str, grace: i64) -> Result<(), CriError> {
        let mut runtime = self.shared.cri.runtime.clone();
        match runtime
            .stop_container(cri::StopContainerRequest {
                container_id: id.to_owned(),
                timeout: grace,
            })
            .await
        {
            Ok(_) => Ok(()),
            Err(status) if status.code() == tonic::Code::NotFound => Ok(()),
            Err(status) => Err(status.into()),
        }
    }

    /// The cluster DNS servers: the configured ones, else the `kube-system/kube-dns`
    /// Service's cluster IP (so that a joined node needs no `--cluster-dns`), else none.
    async fn cluster_dns(&self) -> Vec<std::net::IpAddr> {
        if !self.shared.cluster_dns.is_empty() {
            return self.shared.cluster_dns.clone();
        }
        let services: kube::Api<k8s_openapi::api::core::v1::Service> =
            kube::Api::namespaced(self.shared.client.clone(), "kube-system");
        match services.get_opt("kube-dns").await {
            Ok(Some(service)) => service
                .spec
                .and_then(|s| s.cluster_ip)
                .and_then(|ip| ip.parse().ok())
                .into_iter()
                .collect(),
            Ok(None) => Vec::new(),
            Err(error) => {
                tracing::debug!(%error, "cannot look up the kube-dns Service");
                Vec::new()
            }
        }
    }

    /// Creates a new sandbox for the pod: its directories, then the runtime's sandbox.
    async fn start_sandbox(&mut self, pod: &Pod, observed: &Observed) -> Result<String, String> {
        let log_dir = self.shared.log_root.join(spec::pod_log_dir_name(pod));
        std::fs::create_dir_all(&log_dir)
            .map_err(|e| format!("cannot create {}: {e}", log_dir.display()))?;
        let attempt = observed.sandbox().map_or(0, |s| s.attempt + 1);
        let mut config = spec::sandbox_config(pod, attempt, &log_dir.display().to_string());
        let cluster_dns = self.cluster_dns().await;
        let host = crate::spec::dns::ResolvConf::read(&self.shared.resolv_conf);
        let (dns, warnings) =
            crate::spec::dns::pod_dns(pod, &cluster_dns, &self.shared.cluster_domain, &host);
        for (reason, message) in warnings {
            self.shared.events.pod(pod, Warning, reason, message);
        }
        config.dns_config = Some(dns.to_cri());
        let mut runtime = self.shared.cri.runtime.clone();
        let response = runtime
            .run_pod_sandbox(cri::RunPodSandboxRequest {
                config: Some(config),
                runtime_handler: String::new(),
            })
            .await
            .map_err(|status| status.message().to_owned())?;
        let id = response.into_inner().pod_sandbox_id;
        tracing::info!(pod = %name(pod), sandbox = %id, attempt, "started the pod sandbox");
        Ok(id)
    }

    /// Starts `container` unless its last run ended too recently (crash-loop back-off).
    /// Returns whether it started, and when to look again.
    async fn start_after_backoff(
        &mut self,
        pod: &Pod,
        container: &Container,
        observed: &Observed,
        sandbox: &str,
        sandbox_ip: &str,
    ) -> Result<(bool, Option<Duration>), CriError> {
        let latest = observed.latest(&container.name);
        let previous_in_sandbox = in_sandbox(observed, &container.name, sandbox);
        if let Some(exited) = previous_in_sandbox.filter(|c| c.state == State::Exited) {
            let key = container.name.clone();
            let now = now_nanos();
            if let Some(remaining) = self.crash_backoff.remaining(&key, exited.finished_at, now) {
                let delay = self.crash_backoff.delay(&key);
                self.waiting.insert(
                    container.name.clone(),
                    Waiting {
                        reason: "CrashLoopBackOff".to_owned(),
                        message: format!(
                            "back-off {} restarting failed container={} pod={}_{}({})",
                            capstan_api::duration::format_go_duration(delay),
                            container.name,
                            pod.metadata.name.as_deref().unwrap_or_default(),
                            pod.metadata.namespace.as_deref().unwrap_or_default(),
                            self.uid
                        ),
                    },
                );
                self.shared.events.container(
                    pod,
                    &container.name,
                    Warning,
                    reason::BACK_OFF,
                    format!(
                        "Back-off restarting failed container {} in pod {}",
                        container.name,
                        probes::pod_full_name(pod)
                    ),
                );
                return Ok((false, Some(remaining)));
            }
            self.crash_backoff.next(&key, exited.finished_at);
        }
        self.prune_dead(observed, &container.name).await;
        let restart_count = latest.map_or(0, |l| l.restart_count + 1);
        match self
            .start_container(pod, container, sandbox, sandbox_ip, restart_count, None)
            .await
        {
            Ok(()) => Ok((true, None)),
            Err(NotStarted { waiting, retry }) => {
                if let Some(waiting) = waiting {
                    tracing::warn!(pod = %name(pod), container = %container.name, reason = %waiting.reason, message = %waiting.message, "cannot start container");
                    self.waiting.insert(container.name.clone(), waiting);
                }
                Ok((true, Some(retry)))
            }
        }
    }

    /// Removes the dead containers called `name` but the newest (kept for `lastState`).
    async fn prune_dead(&self, observed: &Observed, name: &str) {
        let mut runtime = self.shared.cri.runtime.clone();
        for dead in observed
            .named(name)
            .skip(1)
            .filter(|c| c.state == State::Exited)
        {
            let _ = runtime
                .remove_container(cri::RemoveContainerRequest {
                    container_id: dead.id.clone(),
                })
                .await;
        }
    }

    /// Pulls the image if needed, resolves environment and mounts, creates and starts the
    /// container. A failure says why the container waits, and when to try again.
    async fn start_container(
        &mut self,
        pod: &Pod,
        container: &Container,
        sandbox: &str,
        sandbox_ip: &str,
        restart_count: u32,
        pid_target: Option<String>,
    ) -> Result<(), NotStarted> {
        let image_ref = self.ensure_image(pod, container).await?;
        let sources = crate::spec::env::Sources {
            client: &self.shared.client,
            pod_ip: sandbox_ip,
            host_ips: &self.shared.host_ips,
            allocatable: &self.shared.allocatable,
        };
        let events = &self.shared.events;
        let failed = |reason: &str, message: String| {
            events.container(
                pod,
                &container.name,
                Warning,
                reason::FAILED,
                format!("Error: {message}"),
            );
            NotStarted::waiting(reason, message, RETRY)
        };
        let env = crate::spec::env::resolve(&sources, pod, container)
            .await
            .map_err(|message| failed("CreateContainerConfigError", message))?;
        // A log file left by an earlier container of the same name and attempt goes (the
        // runtime appends to it otherwise); the logs of the others stay.
        let log_file = self
            .shared
            .log_root
            .join(spec::pod_log_dir_name(pod))
            .join(&container.name)
            .join(format!("{restart_count}.log"));
        let _ = std::fs::remove_file(&log_file);
        let pod_dir = self.shared.root_dir.join("pods").join(&self.uid);
        let shared = self.shared.clone();
        let host = crate::volumes::Host {
            client: &shared.client,
            node_name: &shared.node_name,
            allocatable: &shared.allocatable,
            pod_dir: &pod_dir,
            in_use: &shared.volumes_in_use,
        };
        let mut mounts = match self.volumes.prepare(&host, pod, container, &env).await {
            Ok(mounts) => mounts,
            // As upstream, a pod whose volumes cannot be set up stays ContainerCreating and
            // says why in events.
            Err(crate::volumes::PrepareError::Mount { volume, message }) => {
                tracing::warn!(pod = %name(pod), %volume, %message, "cannot set the volume up");
                self.shared.events.pod(
                    pod,
                    Warning,
                    reason::FAILED_MOUNT,
                    format!("MountVolume.SetUp failed for volume {volume:?} : {message}"),
                );
                return Err(NotStarted {
                    waiting: None,
                    retry: RETRY,
                });
            }
            Err(crate::volumes::PrepareError::Config(message)) => {
                return Err(failed("CreateContainerConfigError", message));
            }
        };
        let hosts = crate::volumes::EtcHosts {
            pod_ips: &[sandbox_ip],
            host_ips: &self.shared.host_ips,
            cluster_domain: &self.shared.cluster_domain,
        };
        match hosts.mount(&pod_dir, pod, container) {
            Ok(Some(mount)) => mounts.push(mount),
            Ok(None) => {}
            Err(message) => return Err(failed("CreateContainerConfigError", message)),
        }
        match crate::volumes::termination_log(&pod_dir, container) {
            Ok(Some(mount)) => mounts.push(mount),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(pod = %name(pod), container = %container.name, error = %e, "cannot create the termination log file")
            }
        }
        let inputs = ContainerInputs {
            env,
            mounts,
            image_ref,
            restart_count,
            node_memory: self.shared.node_memory,
            pid_target,
        };
        let config = spec::container_config(pod, container, &inputs);
        let sandbox_config = spec::sandbox_config(
            pod,
            0,
            &self
                .shared
                .log_root
                .join(spec::pod_log_dir_name(pod))
                .display()
                .to_string(),
        );
        let mut runtime = self.shared.cri.runtime.clone();
        let id = runtime
            .create_container(cri::CreateContainerRequest {
                pod_sandbox_id: sandbox.to_owned(),
                config: Some(config),
                sandbox_config: Some(sandbox_config),
            })
            .await
            .map_err(|s| failed("CreateContainerError", s.message().to_owned()))?
            .into_inner()
            .container_id;
        events.container(
            pod,
            &container.name,
            Normal,
            reason::CREATED,
            format!("Created container: {}", container.name),
        );
        runtime
            .start_container(cri::StartContainerRequest {
                container_id: id.clone(),
            })
            .await
            .map_err(|s| failed("RunContainerError", s.message().to_owned()))?;
        events.container(
            pod,
            &container.name,
            Normal,
            reason::STARTED,
            format!("Started container {}", container.name),
        );
        tracing::info!(pod = %name(pod), container = %container.name, id = %id, restart_count, "started container");
        let post_start = container
            .lifecycle
            .as_ref()
            .and_then(|l| l.post_start.as_ref());
        if let Some(hook) = post_start {
            let target = probes::Target {
                container_id: id.clone(),
                pod_ip: sandbox_ip.to_owned(),
                container: container.clone(),
            };
            if let Err(message) = probes::run_hook(&self.shared.cri, hook, pod, &target).await {
                tracing::warn!(pod = %name(pod), container = %container.name, %message, "FailedPostStartHook");
                self.shared.events.container(
                    pod,
                    &container.name,
                    Warning,
                    reason::FAILED_POST_START_HOOK,
                    message.clone(),
                );
                if let Err(e) = self
                    .kill_container(
                        pod,
                        Some(container),
                        &id,
                        None,
                        Kill::PostStartHook,
                        sandbox_ip,
                    )
                    .await
                {
                    tracing::warn!(pod = %name(pod), container = %container.name, error = %e, "cannot kill the container after its postStart hook failed");
                }
                return Err(NotStarted::waiting("PostStartHookError", message, RETRY));
            }
        }
        Ok(())
    }

    /// The image the container runs, pulled as its pull policy says.
    async fn ensure_image(
        &mut self,
        pod: &Pod,
        container: &Container,
    ) -> Result<String, NotStarted> {
        let image = container.image.clone().unwrap_or_default();
        let policy = container
            .image_pull_policy
            .clone()
            .unwrap_or_else(|| capstan_api::defaults::pod::default_pull_policy(&image).to_owned());
        let spec = cri::ImageSpec {
            image: image.clone(),
            user_specified_image: image.clone(),
            ..cri::ImageSpec::default()
        };
        let mut images = self.shared.cri.images.clone();
        let present = images
            .image_status(cri::ImageStatusRequest {
                image: Some(spec.clone()),
                verbose: false,
            })
            .await
            .ok()
            .and_then(|r| r.into_inner().image)
            .map(|i| i.id);
        let events = &self.shared.events;
        let event = |kind, reason: &str, message: String| {
            events.container(pod, &container.name, kind, reason, message);
        };
        match (policy.as_str(), present) {
            ("Never", Some(id)) | ("IfNotPresent", Some(id)) => {
                event(
                    Normal,
                    reason::PULLED,
                    format!("Container image {image:?} already present on machine"),
                );
                return Ok(id);
            }
            ("Never", None) => {
                let message =
                    format!("Container image {image:?} is not present with pull policy of Never");
                event(Warning, reason::ERR_IMAGE_NEVER_PULL, message.clone());
                event(
                    Warning,
                    reason::FAILED,
                    "Error: ErrImageNeverPull".to_owned(),
                );
                return Err(NotStarted::waiting("ErrImageNeverPull", message, RESYNC));
            }
            _ => {}
        }
        let now = now_nanos();
        if let Some(remaining) = self.pull_backoff.remaining(&image, now, now) {
            let message = format!("Back-off pulling image {image:?}");
            event(Normal, reason::BACK_OFF, message.clone());
            event(
                Warning,
                reason::FAILED,
                "Error: ImagePullBackOff".to_owned(),
            );
            return Err(NotStarted::waiting("ImagePullBackOff", message, remaining));
        }
        event(Normal, reason::PULLING, format!("Pulling image {image:?}"));
        let started = Instant::now();
        let auth = crate::runtime::pull::credentials(&self.shared.client, pod, &image).await;
        let mut last_error = String::new();
        for auth in auth.into_iter().map(Some).chain(std::iter::once(None)) {
            match images
                .pull_image(cri::PullImageRequest {
                    image: Some(spec.clone()),
                    auth,
                    sandbox_config: None,
                })
                .await
            {
                Ok(response) => {
                    let image_ref = response.into_inner().image_ref;
                    let took = capstan_api::duration::format_go_duration(started.elapsed());
                    let size = images
                        .image_status(cri::ImageStatusRequest {
                            image: Some(cri::ImageSpec {
                                image: image_ref.clone(),
                                ..cri::ImageSpec::default()
                            }),
                            verbose: false,
                        })
                        .await
                        .ok()
                        .and_then(|r| r.into_inner().image)
                        .map_or(0, |i| i.size);
                    // One pull at a time is not enforced here, so the time spent waiting is
                    // the time spent pulling.
                    event(
                        Normal,
                        reason::PULLED,
                        format!(
                            "Successfully pulled image {image:?} in {took} ({took} including waiting). Image size: {size} bytes."
                        ),
                    );
                    return Ok(image_ref);
                }
                Err(status) => last_error = status.message().to_owned(),
            }
        }
        self.pull_backoff.next(&image, now);
        event(
            Warning,
            reason::FAILED,
            format!("Failed to pull image {image:?}: {last_error}"),
        );
        event(Warning, reason::FAILED, "Error: ErrImagePull".to_owned());
        Err(NotStarted::waiting(
            "ErrImagePull",
            format!("failed to pull image {image:?}: {last_error}"),
            self.pull_backoff.delay(&image),
        ))
    }

    /// Computes the pod's status and writes it if it changed.
    async fn post_status(&mut self, pod: &Pod, observed: &Observed, terminating: bool) {
        let (readiness, started) = self.probe_status(pod, observed);
        let context = status::Context {
            runtime: &self.shared.runtime_name,
            host_ips: &self.shared.host_ips,
            waiting: &self.waiting,
            readiness: &readiness,
            started: &started,
            now: crate::now(),
        };
        let mut next = status::pod_status(pod, observed, &context);
        if terminating && pod.metadata.deletion_timestamp.is_some() {
            status::settle_terminated(pod, &mut next);
        }
        if pod.status.as_ref() == Some(&next) {
            return;
        }
        // Upstream observes a pod's start when its status turns from Pending to Running (once:
        // the pod read here may not show the status written a moment ago yet).
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, None | Some("Pending"))
            && next.phase.as_deref() == Some("Running")
            && let Some(first_seen) = self.first_seen.take()
        {
            self.shared
                .pod_starts
                .observe(first_seen.elapsed().as_secs_f64());
        }
        let pods: Api<Pod> = Api::namespaced(
            self.shared.client.clone(),
            pod.metadata.namespace.as_deref().unwrap_or("default"),
        );
        let patch = json!({"metadata": {"uid": self.uid}, "status": next});
        match pods
            .patch_status(
                pod.metadata.name.as_deref().unwrap_or_default(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => {
                tracing::warn!(pod = %name(pod), error = %e, "cannot update the pod's status")
            }
        }
    }
}

impl Worker {
    /// The pod's address as its containers, probes and hooks see it: its sandbox's, or the
    /// node's on the host network.
    fn pod_ip(&self, pod: &Pod, observed: &Observed) -> String {
        let ip = observed
            .sandbox()
            .filter(|s| s.ready)
            .map(|s| s.ip.clone())
            .unwrap_or_default();
        let host_network = pod
            .spec
            .as_ref()
            .is_some_and(|s| s.host_network == Some(true));
        if ip.is_empty() && host_network {
            self.shared.host_ips.first().cloned().unwrap_or_default()
        } else {
            ip
        }
    }

    /// Readiness and startup as the probes say, by container name, for the containers that
    /// have such probes (the newest container of each name counts). A started container whose
    /// readiness probe has not succeeded yet is probed at once, as upstream does when it
    /// computes the status.
    fn probe_status(
        &self,
        pod: &Pod,
        observed: &Observed,
    ) -> (HashMap<String, bool>, HashMap<String, bool>) {
        let mut readiness = HashMap::new();
        let mut started = HashMap::new();
        for container in probes::probed_containers(pod) {
            let latest = observed.latest(&container.name);
            let has_started = latest.is_some_and(|l| self.prober.started(container, l));
            if container.startup_probe.is_some() {
                started.insert(container.name.clone(), has_started);
            }
            if container.readiness_probe.is_some() {
                let ready = latest.is_some_and(|l| self.prober.ready(l));
                if has_started && !ready {
                    self.prober.trigger(&container.name, Kind::Readiness);
                }
                readiness.insert(container.name.clone(), ready);
            }
        }
        (readiness, started)
    }
}

/// Resolves once the pod on `pods` is being deleted or gone (never when the sender goes).
async fn deletion(mut pods: watch::Receiver<Option<Arc<Pod>>>) {
    loop {
        if pods.changed().await.is_err() {
            return std::future::pending().await;
        }
        let deleting = pods
            .borrow_and_update()
            .as_ref()
            .is_none_or(|pod| pod.metadata.deletion_timestamp.is_some());
        if deleting {
            return;
        }
    }
}

/// Resolves when the pod's deletion grace period becomes shorter than `grace` (a second
/// delete with `--grace-period`), or the pod is gone.
async fn shortened(mut pods: watch::Receiver<Option<Arc<Pod>>>, grace: i64) {
    loop {
        if pods.changed().await.is_err() {
            return std::future::pending().await;
        }
        let shorter = pods.borrow_and_update().as_ref().is_none_or(|pod| {
            pod.metadata
                .deletion_grace_period_seconds
                .is_some_and(|g| g < grace)
        });
        if shorter {
            return;
        }
    }
}

/// Why a container did not start: what its status says while it waits (none: it is still
/// being created, as far as the status goes), and when to try again.
#[derive(Debug)]
struct NotStarted {
    waiting: Option<Waiting>,
    retry: Duration,
}

impl NotStarted {
    fn waiting(reason: &str, message: String, retry: Duration) -> NotStarted {
        NotStarted {
            waiting: Some(Waiting {
                reason: reason.to_owned(),
                message,
            }),
            retry,
        }
    }
}

/// Why a container is killed.
#[derive(Debug, Clone)]
enum Kill {
    /// A probe failed (the message says which).
    Probe(Kind, String),
    /// Its postStart hook failed.
    PostStartHook,
    /// It is stopped for another reason (the message says which).
    Stop(String),
}

/// What upstream says when a probe has a container killed.
fn probe_kill_message(container: &Container, kind: Kind, restart: bool) -> String {
    let mut message = format!(
        "Container {} failed {} probe",
        container.name,
        kind.as_str().to_ascii_lowercase()
    );
    if restart {
        message.push_str(", will be restarted");
    }
    message
}

/// The grace period of a container's kill: the deletion's, else the failed probe's own
/// (liveness and startup probes may set one), else the pod's.
fn termination_grace(pod: &Pod, container: Option<&Container>, probe: Option<Kind>) -> i64 {
    if let Some(grace) = pod.metadata.deletion_grace_period_seconds {
        return grace;
    }
    let own = container
        .zip(probe.filter(|k| *k != Kind::Readiness))
        .and_then(|(c, kind)| kind.spec(c))
        .and_then(|p| p.termination_grace_period_seconds);
    own.unwrap_or_else(|| grace_of(pod))
}

/// The spec of the container called `name` (app, init or ephemeral).
fn container_spec<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    let spec = pod.spec.as_ref()?;
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
}

/// Removes the log directory of the pod with `uid` (`<ns>_<name>_<uid>`).
fn remove_log_dir(log_root: &std::path::Path, uid: &str) {
    let suffix = format!("_{uid}");
    let Ok(entries) = std::fs::read_dir(log_root) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().ends_with(&suffix) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The newest container called `name` in the sandbox `sandbox`.
fn in_sandbox<'a>(
    observed: &'a Observed,
    name: &str,
    sandbox: &str,
) -> Option<&'a ContainerRecord> {
    observed
        .containers
        .iter()
        .find(|c| c.name == name && c.sandbox_id == sandbox)
}

fn grace_of(pod: &Pod) -> i64 {
    pod.spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(30)
}

fn name(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    #[test]
    fn backoff_doubles_and_resets() {
        let mut backoff = Backoff::default();
        assert_eq!(backoff.remaining("c", 0, 0), None);
        backoff.next("c", 0);
        // The first restart waited for nothing; a crash at 5 s is held back until 15 s.
        assert_eq!(
            backoff.remaining("c", 5 * S, 6 * S),
            Some(Duration::from_secs(9))
        );
        assert_eq!(backoff.remaining("c", 5 * S, 15 * S), None);
        backoff.next("c", 5 * S);
        assert_eq!(backoff.delay("c"), Duration::from_secs(20));
        for i in 0..10 {
            backoff.next("c", (6 + i) * S);
        }
        assert_eq!(backoff.delay("c"), BACKOFF_MAX);
        // Ten quiet minutes later it starts over.
        let later = 20 * S + 601 * S;
        assert_eq!(backoff.remaining("c", later, later), None);
        backoff.next("c", later);
        assert_eq!(backoff.delay("c"), BACKOFF_INITIAL);
    }
}

//! Container probes and lifecycle hooks, as the kubelet runs them.
//!
//! **Probes.** A pod's [`Prober`] keeps one probe loop per (container, probe kind) for every
//! running container that has a liveness, readiness or startup probe: started once the worker
//! sees the container running, stopped when the container stops or the pod goes. A loop probes
//! every `periodSeconds` (the first time at once), not before `initialDelaySeconds` after the
//! container started; liveness and readiness wait until the startup probe has succeeded, and the
//! startup probe stops once it has. A result counts only after `successThreshold` successes or
//! `failureThreshold` failures in a row ([`Tracker`]); it is then published in the pod's
//! [`Results`], by container ID as upstream's results manager keeps them, and a change wakes the
//! pod's worker, which restarts containers whose liveness or startup probe failed and reports
//! readiness (`ready`, `started`, the Ready condition). After a liveness failure, or a startup
//! verdict, the loop holds until a new container replaces this one. A handler that errors (as
//! opposed to failing) is retried up to three times and its result thrown away.
//!
//! Handlers: `exec` (CRI `ExecSync` with the probe's timeout; exit 0 succeeds), `httpGet` (GET
//! to the pod IP or `host`, port by number or container port name, HTTPS without certificate
//! checks; 2xx succeeds, 3xx succeeds with a warning, redirects followed only to the same host
//! and at most ten times), `tcpSocket` (a connection within the timeout) and `grpc`
//! (`grpc.health.v1.Health/Check`, SERVING succeeds).
//!
//! **Lifecycle hooks** ([`run_hook`]): `exec`, `httpGet` (any answer is success; an HTTPS hook
//! answered in plain HTTP is retried over HTTP, as upstream does) and `sleep`. The worker runs
//! postStart after starting a container and preStop before stopping one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use capstan_client::events::EventType;
use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{
    Container, HTTPGetAction, LifecycleHandler, ObjectReference, Pod, Probe,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::sync::Notify;
use tonic::codegen::http;

use crate::pod::events::{Events, reason};
use crate::pod::status::{ContainerRecord, Observed, State};
use crate::runtime::cri::Cri;

/// The most of a probe's output kept (upstream's 10 KiB).
const MAX_OUTPUT: usize = 10 * 1024;
/// How many times a handler that errors is run before its result is thrown away.
const RETRIES: usize = 3;
/// The most redirects an HTTP handler follows, counting as Go's client does.
const MAX_REDIRECTS: usize = 10;

/// The three kinds of probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Restarts the container when it fails.
    Liveness,
    /// Says whether the container takes traffic.
    Readiness,
    /// Holds the other two back until the container has started.
    Startup,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 3] = [Kind::Startup, Kind::Liveness, Kind::Readiness];

    /// The container's probe of this kind.
    pub fn spec(self, container: &Container) -> Option<&Probe> {
        match self {
            Kind::Liveness => container.liveness_probe.as_ref(),
            Kind::Readiness => container.readiness_probe.as_ref(),
            Kind::Startup => container.startup_probe.as_ref(),
        }
    }

    /// The name upstream prints (`Liveness`).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Liveness => "Liveness",
            Kind::Readiness => "Readiness",
            Kind::Startup => "Startup",
        }
    }

    fn index(self) -> usize {
        match self {
            Kind::Liveness => 0,
            Kind::Readiness => 1,
            Kind::Startup => 2,
        }
    }
}

/// A published probe result (upstream's `results.Result`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The container passes.
    Success,
    /// The container fails.
    Failure,
    /// Not known yet (a startup probe before its first verdict).
    Unknown,
}

/// What one run of a probe handler found (upstream's `probe.Result` and its output).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Passed.
    Success(String),
    /// Passed, with something to say (an HTTP redirect not followed).
    Warning(String),
    /// Failed, and why.
    Failure(String),
}

impl Outcome {
    /// The result it counts as.
    pub fn verdict(&self) -> Verdict {
        match self {
            Outcome::Success(_) | Outcome::Warning(_) => Verdict::Success,
            Outcome::Failure(_) => Verdict::Failure,
        }
    }
}

/// A probe's timing and thresholds, with the API's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Seconds after the container started before the first probe.
    pub initial_delay: i64,
    /// Time between probes.
    pub period: Duration,
    /// How long one probe may take.
    pub timeout: Duration,
    /// Successes in a row that make a success.
    pub success_threshold: u32,
    /// Failures in a row that make a failure.
    pub failure_threshold: u32,
}

fn seconds(value: Option<i32>, default: i32) -> Duration {
    Duration::from_secs(u64::try_from(value.unwrap_or(default).max(1)).unwrap_or(1))
}

impl Settings {
    /// The settings of `probe`.
    pub fn of(probe: &Probe) -> Settings {
        Settings {
            initial_delay: i64::from(probe.initial_delay_seconds.unwrap_or(0)),
            period: seconds(probe.period_seconds, 10),
            timeout: seconds(probe.timeout_seconds, 1),
            success_threshold: u32::try_from(probe.success_threshold.unwrap_or(1).max(1))
                .unwrap_or(1),
            failure_threshold: u32::try_from(probe.failure_threshold.unwrap_or(3).max(1))
                .unwrap_or(3),
        }
    }
}

/// One probe loop's state machine (upstream's probe worker without its I/O): whether a probe
/// is due, and when a run of equal results becomes the published result.
#[derive(Debug, Clone)]
pub struct Tracker {
    kind: Kind,
    settings: Settings,
    last: Option<Verdict>,
    run: u32,
    on_hold: bool,
}

impl Tracker {
    /// A loop for a probe of `kind` with `settings`, for a new container.
    pub fn new(kind: Kind, settings: Settings) -> Tracker {
        Tracker {
            kind,
            settings,
            last: None,
            run: 0,
            on_hold: false,
        }
    }

    /// The result a new container has before its first verdict: not ready, alive, not known
    /// to have started.
    pub fn initial(kind: Kind) -> Verdict {
        match kind {
            Kind::Readiness => Verdict::Failure,
            Kind::Liveness => Verdict::Success,
            Kind::Startup => Verdict::Unknown,
        }
    }

    /// Whether to probe now, `since_start` after the container started (whole seconds count,
    /// as upstream reads the start time from the status), `started` telling whether the
    /// startup probe (if any) has succeeded.
    pub fn due(&self, since_start: Duration, started: bool) -> bool {
        if self.on_hold {
            return false;
        }
        if i64::try_from(since_start.as_secs()).unwrap_or(i64::MAX) < self.settings.initial_delay {
            return false;
        }
        match self.kind {
            Kind::Startup => !started,
            Kind::Liveness | Kind::Readiness => started,
        }
    }

    /// Whether the loop waits for a new container.
    pub fn on_hold(&self) -> bool {
        self.on_hold
    }

    /// Counts one probe's result; returns the result to publish once its threshold is met.
    pub fn record(&mut self, verdict: Verdict) -> Option<Verdict> {
        if self.last == Some(verdict) {
            self.run = self.run.saturating_add(1);
        } else {
            self.last = Some(verdict);
            self.run = 1;
        }
        let threshold = match verdict {
            Verdict::Success => self.settings.success_threshold,
            Verdict::Failure => self.settings.failure_threshold,
            Verdict::Unknown => 1,
        };
        if self.run < threshold {
            return None;
        }
        // A failed liveness probe restarts the container and a startup verdict is final:
        // nothing more to probe until a new container replaces this one.
        if (self.kind == Kind::Liveness && verdict == Verdict::Failure)
            || self.kind == Kind::Startup
        {
            self.on_hold = true;
            self.run = 0;
        }
        Some(verdict)
    }
}

/// The published results of a pod's probes, by container ID (upstream's results managers);
/// a change wakes the pod's worker.
#[derive(Debug)]
pub struct Results {
    by_container: Mutex<HashMap<String, [Option<Verdict>; 3]>>,
    wake: Arc<Notify>,
}

impl Results {
    /// Results that wake `wake` when they change.
    pub fn new(wake: Arc<Notify>) -> Results {
        Results {
            by_container: Mutex::new(HashMap::new()),
            wake,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, [Option<Verdict>; 3]>> {
        self.by_container
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The result of the `kind` probe of container `id`, if one was published.
    pub fn get(&self, id: &str, kind: Kind) -> Option<Verdict> {
        self.lock().get(id).and_then(|r| r[kind.index()])
    }

    /// Publishes a result; a change wakes the worker when `wake` says so.
    pub fn set(&self, id: &str, kind: Kind, verdict: Verdict, wake: bool) -> bool {
        let changed = {
            let mut all = self.lock();
            let slot = &mut all.entry(id.to_owned()).or_default()[kind.index()];
            let changed = *slot != Some(verdict);
            *slot = Some(verdict);
            changed
        };
        if changed && wake {
            self.wake.notify_one();
        }
        changed
    }

    /// Forgets the `kind` result of container `id`.
    pub fn remove(&self, id: &str, kind: Kind) {
        let mut all = self.lock();
        if let Some(entry) = all.get_mut(id) {
            entry[kind.index()] = None;
            if entry.iter().all(Option::is_none) {
                all.remove(id);
            }
        }
    }
}

/// What a probe or hook is run against.
#[derive(Debug, Clone)]
pub struct Target {
    /// The container's runtime ID.
    pub container_id: String,
    /// The pod's address (the default host of HTTP, TCP and gRPC handlers).
    pub pod_ip: String,
    /// The container's spec (its named ports).
    pub container: Container,
}

#[derive(Debug)]
struct Task {
    container_id: String,
    handle: tokio::task::JoinHandle<()>,
    trigger: Arc<Notify>,
}

/// The probe loops of one pod and their results.
#[derive(Debug)]
pub struct Prober {
    cri: Cri,
    events: Events,
    results: Arc<Results>,
    tasks: HashMap<(String, Kind), Task>,
}

/// The containers of `pod` that may have probes: its app containers and its sidecars.
pub fn probed_containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    pod.spec.iter().flat_map(|spec| {
        spec.init_containers
            .iter()
            .flatten()
            .filter(|c| crate::pod::status::is_sidecar(c))
            .chain(&spec.containers)
    })
}

impl Prober {
    /// A prober whose result changes wake `wake`; failures are reported to `events`.
    pub fn new(cri: Cri, wake: Arc<Notify>, events: Events) -> Prober {
        Prober {
            cri,
            events,
            results: Arc::new(Results::new(wake)),
            tasks: HashMap::new(),
        }
    }

    /// The published results.
    pub fn results(&self) -> &Results {
        &self.results
    }

    fn stop(&mut self, key: &(String, Kind)) {
        if let Some(task) = self.tasks.remove(key) {
            task.handle.abort();
            self.results.remove(&task.container_id, key.1);
        }
    }

    /// Stops every loop.
    pub fn stop_all(&mut self) {
        let keys: Vec<_> = self.tasks.keys().cloned().collect();
        for key in keys {
            self.stop(&key);
        }
    }

    /// Runs one loop per probe of each running container of the pod's current sandbox, and
    /// stops the loops of containers that no longer run. `pod_ip` is where HTTP, TCP and gRPC
    /// probes go by default. A pod being deleted keeps only its readiness probes (liveness and
    /// startup failures must not restart what is stopping).
    pub fn reconcile(&mut self, pod: &Pod, observed: &Observed, pod_ip: &str, terminating: bool) {
        let sandbox = observed.sandbox().filter(|s| s.ready);
        let mut wanted = Vec::new();
        for container in probed_containers(pod) {
            let Some(record) = observed
                .latest(&container.name)
                .filter(|c| c.state == State::Running)
                .filter(|c| sandbox.is_some_and(|s| s.id == c.sandbox_id))
            else {
                continue;
            };
            let has_startup = container.startup_probe.is_some();
            for kind in Kind::ALL {
                let Some(probe) = kind.spec(container) else {
                    continue;
                };
                if terminating && kind != Kind::Readiness {
                    continue;
                }
                let key = (container.name.clone(), kind);
                wanted.push(key.clone());
                if self
                    .tasks
                    .get(&key)
                    .is_some_and(|t| t.container_id == record.id && !t.handle.is_finished())
                {
                    continue;
                }
                self.stop(&key);
                let trigger = Arc::new(Notify::new());
                let run = Loop {
                    kind,
                    probe: probe.clone(),
                    target: Target {
                        container_id: record.id.clone(),
                        pod_ip: pod_ip.to_owned(),
                        container: container.clone(),
                    },
                    started_at: record.started_at,
                    has_startup,
                    cri: self.cri.clone(),
                    events: self.events.clone(),
                    object: crate::pod::events::container_ref(pod, &container.name),
                    results: self.results.clone(),
                    trigger: trigger.clone(),
                    pod: format!(
                        "{}/{}",
                        pod.metadata.namespace.as_deref().unwrap_or_default(),
                        pod.metadata.name.as_deref().unwrap_or_default()
                    ),
                };
                self.tasks.insert(
                    key,
                    Task {
                        container_id: record.id.clone(),
                        handle: tokio::spawn(run.run()),
                        trigger,
                    },
                );
            }
        }
        let stale: Vec<_> = self
            .tasks
            .keys()
            .filter(|k| !wanted.contains(k))
            .cloned()
            .collect();
        for key in stale {
            self.stop(&key);
        }
    }

    /// Which probe, if any, says container `id` must be restarted (liveness first).
    pub fn failed(&self, id: &str) -> Option<Kind> {
        [Kind::Liveness, Kind::Startup]
            .into_iter()
            .find(|kind| self.results.get(id, *kind) == Some(Verdict::Failure))
    }

    /// Whether `record` (a container of `container`'s spec) has started: running, and its
    /// startup probe, if it has one, succeeded.
    pub fn started(&self, container: &Container, record: &ContainerRecord) -> bool {
        record.state == State::Running
            && (container.startup_probe.is_none()
                || self.results.get(&record.id, Kind::Startup) == Some(Verdict::Success))
    }

    /// Whether `record`'s readiness probe has succeeded.
    pub fn ready(&self, record: &ContainerRecord) -> bool {
        record.state == State::Running
            && self.results.get(&record.id, Kind::Readiness) == Some(Verdict::Success)
    }

    /// Runs the `kind` probe of container `name` now (upstream probes readiness at once when
    /// the status is computed and the container is not ready yet).
    pub fn trigger(&self, name: &str, kind: Kind) {
        if let Some(task) = self.tasks.get(&(name.to_owned(), kind)) {
            task.trigger.notify_one();
        }
    }
}

impl Drop for Prober {
    fn drop(&mut self) {
        for task in self.tasks.values() {
            task.handle.abort();
        }
    }
}

/// One probe loop.
struct Loop {
    kind: Kind,
    probe: Probe,
    target: Target,
    started_at: i64,
    has_startup: bool,
    cri: Cri,
    events: Events,
    /// The container, as its events name it.
    object: ObjectReference,
    results: Arc<Results>,
    trigger: Arc<Notify>,
    pod: String,
}

impl Loop {
    /// A warning about the probed container.
    fn event(&self, reason: &str, message: String) {
        self.events
            .record(self.object.clone(), EventType::Warning, reason, message);
    }

    async fn run(self) {
        let settings = Settings::of(&self.probe);
        let mut tracker = Tracker::new(self.kind, settings);
        let id = self.target.container_id.clone();
        self.results
            .set(&id, self.kind, Tracker::initial(self.kind), false);
        // Whole seconds, as the status carries the start time.
        let started_at = self.started_at - self.started_at.rem_euclid(1_000_000_000);
        let mut ticker = tokio::time::interval(settings.period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = self.trigger.notified() => ticker.reset(),
            }
            let now = crate::now().as_nanosecond() as i64;
            let since = Duration::from_nanos(u64::try_from(now - started_at).unwrap_or(0));
            let started =
                !self.has_startup || self.results.get(&id, Kind::Startup) == Some(Verdict::Success);
            if !tracker.due(since, started) {
                continue;
            }
            let outcome =
                run_with_retries(&self.cri, &self.probe, &self.target, settings.timeout).await;
            let container = &self.target.container.name;
            let kind = self.kind.as_str();
            let outcome = match outcome {
                Ok(outcome) => outcome,
                Err(error) => {
                    // A prober error: the result is thrown away.
                    tracing::warn!(pod = %self.pod, container = %container, error = %error, "{kind} probe errored");
                    self.event(
                        reason::UNHEALTHY,
                        format!("{kind} probe errored and resulted in unknown state: {error}"),
                    );
                    continue;
                }
            };
            match &outcome {
                Outcome::Success(_) => {}
                Outcome::Warning(output) => {
                    tracing::warn!(pod = %self.pod, container = %container, "{kind} probe warning: {output}");
                    self.event(
                        reason::PROBE_WARNING,
                        format!("{kind} probe warning: {output}"),
                    );
                }
                Outcome::Failure(output) => {
                    if self.kind == Kind::Readiness {
                        tracing::debug!(pod = %self.pod, container = %container, "{kind} probe failed: {output}")
                    } else {
                        tracing::info!(pod = %self.pod, container = %container, "{kind} probe failed: {output}")
                    }
                    self.event(reason::UNHEALTHY, format!("{kind} probe failed: {output}"));
                }
            }
            if let Some(verdict) = tracker.record(outcome.verdict()) {
                self.results.set(&id, self.kind, verdict, true);
            }
        }
    }
}

/// Runs `probe`'s handler once more while it errors (not fails), up to three times.
pub async fn run_with_retries(
    cri: &Cri,
    probe: &Probe,
    target: &Target,
    timeout: Duration,
) -> Result<Outcome, String> {
    let mut last = String::new();
    for _ in 0..RETRIES {
        match run_once(cri, probe, target, timeout).await {
            Ok(outcome) => return Ok(outcome),
            Err(error) => last = error,
        }
    }
    Err(last)
}

/// Runs `probe`'s handler once. An error (as opposed to a failure) means the probe could not
/// be run: an unknown port name, the runtime refusing the exec.
pub async fn run_once(
    cri: &Cri,
    probe: &Probe,
    target: &Target,
    timeout: Duration,
) -> Result<Outcome, String> {
    if let Some(exec) = &probe.exec {
        let command = exec.command.clone().unwrap_or_default();
        return match exec_sync(cri, &target.container_id, &command, timeout).await {
            Ok(response) => {
                let output = combined_output(&response);
                Ok(if response.exit_code == 0 {
                    Outcome::Success(output)
                } else {
                    Outcome::Failure(output)
                })
            }
            Err(ExecError::Timeout) => Ok(Outcome::Failure(format!(
                "command {:?} timed out",
                command.join(" ")
            ))),
            Err(ExecError::Runtime(error)) => Err(error),
        };
    }
    if let Some(action) = &probe.http_get {
        let request = http_request(action, &target.container, &target.pod_ip, "probe")?;
        return Ok(http_probe(&request, timeout).await);
    }
    if let Some(action) = &probe.tcp_socket {
        let port = resolve_port(&action.port, &target.container)?;
        let host = action
            .host
            .clone()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| target.pod_ip.clone());
        return Ok(tcp_probe(&host, port, timeout).await);
    }
    if let Some(action) = &probe.grpc {
        let port = u16::try_from(action.port)
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("invalid port number: {}", action.port))?;
        let service = action.service.clone().unwrap_or_default();
        return Ok(grpc_probe(&target.pod_ip, port, &service, timeout).await);
    }
    Err(format!(
        "missing probe handler for container {}",
        target.container.name
    ))
}

/// Why an exec in a container did not complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecError {
    /// It ran out of time.
    Timeout,
    /// The runtime refused or failed it.
    Runtime(String),
}

/// Runs `command` in container `id` through CRI `ExecSync` (`timeout` zero: no limit).
pub async fn exec_sync(
    cri: &Cri,
    id: &str,
    command: &[String],
    timeout: Duration,
) -> Result<cri::ExecSyncResponse, ExecError> {
    let mut runtime = cri.runtime.clone();
    let request = cri::ExecSyncRequest {
        container_id: id.to_owned(),
        cmd: command.to_vec(),
        timeout: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
    };
    let call = runtime.exec_sync(request);
    let response = if timeout.is_zero() {
        call.await
    } else {
        match tokio::time::timeout(timeout, call).await {
            Ok(response) => response,
            Err(_) => return Err(ExecError::Timeout),
        }
    };
    match response {
        Ok(response) => Ok(response.into_inner()),
        Err(status) if status.code() == tonic::Code::DeadlineExceeded => Err(ExecError::Timeout),
        Err(status)
            if status.message().contains("timeout") && status.message().contains("exceeded") =>
        {
            Err(ExecError::Timeout)
        }
        Err(status) => Err(ExecError::Runtime(status.message().to_owned())),
    }
}

fn combined_output(response: &cri::ExecSyncResponse) -> String {
    let mut bytes = response.stdout.clone();
    bytes.extend_from_slice(&response.stderr);
    bytes.truncate(MAX_OUTPUT);
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Resolves a handler's port: a number, a number written as a string, or the name of one of
/// the container's ports.
pub fn resolve_port(port: &IntOrString, container: &Container) -> Result<u16, String> {
    let number = match port {
        IntOrString::Int(n) => i64::from(*n),
        IntOrString::String(name) => match container
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
        {
            Some(p) => i64::from(p.container_port),
            None => name
                .parse::<i64>()
                .map_err(|_| format!("port {name} not found"))?,
        },
    };
    u16::try_from(number)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("invalid port number: {number}"))
}

fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// An HTTP(S) URL as handlers use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    /// `http` or `https`.
    pub scheme: String,
    /// The host name or address (IPv6 without brackets).
    pub host: String,
    /// The port.
    pub port: u16,
    /// The path and query, starting with `/`.
    pub path: String,
}

impl std::fmt::Display for Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}://{}{}",
            self.scheme,
            join_host_port(&self.host, self.port),
            self.path
        )
    }
}

fn normalize_path(path: &str) -> String {
    // A fragment is never sent.
    let path = path.split('#').next().unwrap_or_default();
    if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("/{path}")
    }
}

impl Url {
    /// Parses `scheme://host[:port]/path`.
    pub fn parse(text: &str) -> Option<Url> {
        let (scheme, rest) = text.split_once("://")?;
        let scheme = scheme.to_ascii_lowercase();
        if scheme != "http" && scheme != "https" {
            return None;
        }
        let split = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(split);
        let authority = authority.rsplit('@').next().unwrap_or_default();
        let default_port = if scheme == "https" { 443 } else { 80 };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (host, after) = v6.split_once(']')?;
            let port = match after.strip_prefix(':') {
                Some(p) => p.parse().ok()?,
                None if after.is_empty() => default_port,
                None => return None,
            };
            (host.to_owned(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (host.to_owned(), port.parse().ok()?),
                None => (authority.to_owned(), default_port),
            }
        };
        if host.is_empty() {
            return None;
        }
        Some(Url {
            scheme,
            host,
            port,
            path: normalize_path(path),
        })
    }

    /// The URL a `Location` header points to from this one.
    pub fn resolve(&self, location: &str) -> Option<Url> {
        if location.contains("://") {
            return Url::parse(location);
        }
        if let Some(rest) = location.strip_prefix("//") {
            return Url::parse(&format!("{}://{rest}", self.scheme));
        }
        let path = if location.starts_with('/') {
            normalize_path(location)
        } else if let Some(query) = location.strip_prefix('?') {
            let base = self.path.split('?').next().unwrap_or("/");
            format!("{base}?{query}")
        } else {
            let base = self.path.split('?').next().unwrap_or("/");
            let dir = &base[..base.rfind('/').map_or(0, |i| i + 1)];
            normalize_path(&format!("{dir}{location}"))
        };
        Some(Url {
            path,
            ..self.clone()
        })
    }
}

/// An HTTP GET a handler makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    /// Where.
    pub url: Url,
    /// The headers, the user agent and `Accept` included.
    pub headers: Vec<(String, String)>,
}

/// The user agent of the agent's probes (`kube-probe/1.33`) and hooks (`kube-lifecycle/1.33`).
pub fn user_agent(purpose: &str) -> String {
    format!("kube-{purpose}/1.{}", capstan_api::KUBERNETES_MINOR)
}

/// The request an `httpGet` handler makes: scheme (default HTTP), host (default the pod's
/// address), port, path and headers; a `User-Agent` and `Accept: */*` unless the spec sets
/// them (an empty `Accept` removes it).
pub fn http_request(
    action: &HTTPGetAction,
    container: &Container,
    pod_ip: &str,
    purpose: &str,
) -> Result<HttpRequest, String> {
    let scheme = action
        .scheme
        .as_deref()
        .filter(|s| !s.is_empty())
        .unwrap_or("HTTP")
        .to_ascii_lowercase();
    let host = action
        .host
        .clone()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| pod_ip.to_owned());
    let port = resolve_port(&action.port, container)?;
    let mut headers: Vec<(String, String)> = action
        .http_headers
        .iter()
        .flatten()
        .map(|h| (h.name.clone(), h.value.clone()))
        .collect();
    let has = |headers: &[(String, String)], name: &str| {
        headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name))
    };
    if !has(&headers, "User-Agent") {
        headers.push(("User-Agent".to_owned(), user_agent(purpose)));
    }
    if !has(&headers, "Accept") {
        headers.push(("Accept".to_owned(), "*/*".to_owned()));
    } else if headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("Accept"))
        .all(|(_, v)| v.is_empty())
    {
        headers.retain(|(n, _)| !n.eq_ignore_ascii_case("Accept"));
    }
    Ok(HttpRequest {
        url: Url {
            scheme,
            host,
            port,
            path: normalize_path(action.path.as_deref().unwrap_or_default()),
        },
        headers,
    })
}

/// Describes an error and its causes, with the io error Go would print for a refused
/// connection.
fn describe(error: &(dyn std::error::Error + 'static), address: &str) -> String {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    let mut parts = Vec::new();
    while let Some(e) = current {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                std::io::ErrorKind::ConnectionRefused => {
                    format!("dial tcp {address}: connect: connection refused")
                }
                std::io::ErrorKind::TimedOut => format!("dial tcp {address}: i/o timeout"),
                _ => format!("dial tcp {address}: {io}"),
            };
        }
        let text = e.to_string();
        if !parts.contains(&text) {
            parts.push(text);
        }
        current = e.source();
    }
    parts.join(": ")
}

/// Reads a body (at most `limit` bytes of data) and its trailers.
async fn read_body<B>(body: B, limit: usize) -> Result<(Vec<u8>, Option<http::HeaderMap>), String>
where
    B: tonic::codegen::Body<Data = tonic::codegen::Bytes>,
    B::Error: std::fmt::Display,
{
    let mut body = std::pin::pin!(body);
    let mut data = Vec::new();
    let mut trailers = None;
    while let Some(frame) = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
        let frame = frame.map_err(|e| e.to_string())?;
        match frame.into_data() {
            Ok(chunk) => {
                let room = limit.saturating_sub(data.len());
                data.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            Err(frame) => {
                if let Ok(map) = frame.into_trailers() {
                    trailers = Some(map);
                }
            }
        }
    }
    Ok((data, trailers))
}

/// What one HTTP exchange returned: status, `Location`, body.
type Answer = (u16, Option<String>, Vec<u8>);

/// One GET of `url` with `request`'s headers, on a connection of its own (upstream probes
/// disable keep-alives), trusting any certificate.
async fn fetch(request: &HttpRequest, url: &Url) -> Result<Answer, String> {
    use kube::client::ConfigExt as _;
    let address = join_host_port(&url.host, url.port);
    let failed = |detail: String| format!("Get \"{url}\": {detail}");
    let target: http::Uri = url
        .to_string()
        .parse()
        .map_err(|e: http::uri::InvalidUri| failed(e.to_string()))?;
    // kube's TLS set-up with verification off and no roots to load: the HTTPS connector
    // of its client, without its client (whose tracing reports every refused probe).
    let mut config = kube::Config::new(target.clone());
    config.accept_invalid_certs = true;
    config.root_cert = Some(Vec::new());
    let mut connector = hyper_util::client::legacy::connect::HttpConnector::new();
    connector.enforce_http(false);
    let connector = config
        .rustls_https_connector_with_connector(connector)
        .map_err(|e| failed(e.to_string()))?;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .pool_max_idle_per_host(0)
        .build::<_, kube::client::Body>(connector);
    let mut builder = http::Request::get(target);
    for (name, value) in &request.headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    let get = builder
        .header("Connection", "close")
        .body(kube::client::Body::from(Vec::new()))
        .map_err(|e| failed(e.to_string()))?;
    let response = client
        .request(get)
        .await
        .map_err(|e| failed(describe(&e, &address)))?;
    let status = response.status().as_u16();
    let location = response
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let (body, _) = read_body(response.into_body(), MAX_OUTPUT)
        .await
        .map_err(failed)?;
    Ok((status, location, body))
}

/// A GET that follows redirects as the kubelet's probe client does: only to the same host
/// name (another host ends the chain with the redirect itself), and not a tenth time.
async fn follow(request: &HttpRequest) -> Result<(u16, Vec<u8>), String> {
    let first = &request.url;
    let mut url = first.clone();
    let mut via = 0;
    loop {
        let (status, location, body) = fetch(request, &url).await?;
        let redirect = matches!(status, 301 | 302 | 303 | 307 | 308);
        let Some(location) = location.filter(|_| redirect) else {
            return Ok((status, body));
        };
        let next = url
            .resolve(&location)
            .ok_or_else(|| format!("failed to parse Location header {location:?}"))?;
        via += 1;
        if next.host != first.host {
            return Ok((status, body));
        }
        if via >= MAX_REDIRECTS {
            return Err(format!(
                "Get \"{next}\": stopped after {MAX_REDIRECTS} redirects"
            ));
        }
        url = next;
    }
}

/// The verdict on an HTTP answer: 2xx succeeds, 3xx (a redirect not followed) succeeds with
/// a warning, anything else fails.
pub fn classify(status: u16, body: &[u8]) -> Outcome {
    let body = String::from_utf8_lossy(body).into_owned();
    match status {
        200..=299 => Outcome::Success(body),
        300..=399 => Outcome::Warning(format!("Probe terminated redirects, Response body: {body}")),
        _ => Outcome::Failure(format!("HTTP probe failed with statuscode: {status}")),
    }
}

/// An HTTP probe within `timeout`.
pub async fn http_probe(request: &HttpRequest, timeout: Duration) -> Outcome {
    match tokio::time::timeout(timeout, follow(request)).await {
        Err(_) => Outcome::Failure(format!(
            "Get \"{}\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)",
            request.url
        )),
        Ok(Err(error)) => Outcome::Failure(error),
        Ok(Ok((status, body))) => classify(status, &body),
    }
}

/// A TCP probe: a connection within `timeout` succeeds.
pub async fn tcp_probe(host: &str, port: u16, timeout: Duration) -> Outcome {
    let address = join_host_port(host, port);
    match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(address.as_str())).await {
        Ok(Ok(_)) => Outcome::Success(String::new()),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            Outcome::Failure(format!("dial tcp {address}: connect: connection refused"))
        }
        Ok(Err(e)) => Outcome::Failure(format!("dial tcp {address}: {e}")),
        Err(_) => Outcome::Failure(format!("dial tcp {address}: i/o timeout")),
    }
}

fn go_seconds(d: Duration) -> String {
    format!("{}s", d.as_secs())
}

/// `grpc.health.v1.HealthCheckRequest { service }` in protobuf, framed for gRPC.
pub fn health_request(service: &str) -> Vec<u8> {
    let mut message = Vec::new();
    if !service.is_empty() {
        message.push(0x0a);
        put_varint(&mut message, service.len() as u64);
        message.extend_from_slice(service.as_bytes());
    }
    let mut frame = Vec::with_capacity(5 + message.len());
    frame.push(0);
    frame.extend_from_slice(&u32::try_from(message.len()).unwrap_or(0).to_be_bytes());
    frame.extend_from_slice(&message);
    frame
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *bytes.get(*at)?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// The serving status in a framed `grpc.health.v1.HealthCheckResponse` (field 1; absent
/// means UNKNOWN, 0).
pub fn health_status(frame: &[u8]) -> Option<u64> {
    if frame.len() < 5 || frame[0] != 0 {
        return None;
    }
    let length = u32::from_be_bytes([frame[1], frame[2], frame[3], frame[4]]) as usize;
    let message = frame.get(5..5 + length)?;
    let mut at = 0;
    let mut status = 0;
    while at < message.len() {
        let key = varint(message, &mut at)?;
        match key & 7 {
            0 => {
                let value = varint(message, &mut at)?;
                if key >> 3 == 1 {
                    status = value;
                }
            }
            // Lengths come from the pod: an overflow is a malformed reply, not a wrap.
            1 => at = at.checked_add(8)?,
            2 => {
                let length = usize::try_from(varint(message, &mut at)?).ok()?;
                at = at.checked_add(length)?;
            }
            5 => at = at.checked_add(4)?,
            _ => return None,
        }
    }
    Some(status)
}

fn serving_status_name(status: u64) -> String {
    match status {
        0 => "UNKNOWN".to_owned(),
        1 => "SERVING".to_owned(),
        2 => "NOT_SERVING".to_owned(),
        3 => "SERVICE_UNKNOWN".to_owned(),
        other => other.to_string(),
    }
}

/// Decodes a `grpc-message` (percent-encoded).
fn grpc_message(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = value.get(i + 1..i + 3)
            && let Ok(byte) = u8::from_str_radix(hex, 16)
        {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A gRPC health probe: `grpc.health.v1.Health/Check` for `service` over plain HTTP/2;
/// SERVING succeeds.
pub async fn grpc_probe(host: &str, port: u16, service: &str, timeout: Duration) -> Outcome {
    let address = join_host_port(host, port);
    let within = go_seconds(timeout);
    let connect_failed = |detail: String| {
        Outcome::Failure(format!(
            "timeout: failed to connect service {address:?} within {within}: {detail}"
        ))
    };
    let endpoint = match tonic::transport::Endpoint::from_shared(format!("http://{address}"))
        .and_then(|e| e.user_agent(user_agent("probe")))
    {
        Ok(endpoint) => endpoint.connect_timeout(timeout).timeout(timeout),
        Err(e) => return connect_failed(e.to_string()),
    };
    let channel = match tokio::time::timeout(timeout, endpoint.connect()).await {
        Ok(Ok(channel)) => channel,
        Ok(Err(e)) => return connect_failed(describe(&e, &address)),
        Err(_) => return connect_failed("context deadline exceeded".to_owned()),
    };
    let request = http::Request::post("/grpc.health.v1.Health/Check")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("grpc-timeout", format!("{}m", timeout.as_millis()))
        .body(tonic::body::Body::new(kube::client::Body::from(
            health_request(service),
        )));
    let request = match request {
        Ok(request) => request,
        Err(e) => return Outcome::Failure(format!("error: health rpc probe failed: {e}")),
    };
    let call = async move {
        use tower::{Service as _, ServiceExt as _};
        let mut channel = channel;
        let response = channel
            .ready()
            .await
            .map_err(|e| e.to_string())?
            .call(request)
            .await
            .map_err(|e| e.to_string())?;
        let (parts, body) = response.into_parts();
        let (data, trailers) = read_body(body, MAX_OUTPUT).await?;
        Ok::<_, String>((parts, data, trailers))
    };
    let (parts, data, trailers) = match tokio::time::timeout(timeout, call).await {
        Err(_) => {
            return Outcome::Failure(format!(
                "timeout: health rpc did not complete within {within}"
            ));
        }
        Ok(Err(e)) => return Outcome::Failure(format!("error: health rpc probe failed: {e}")),
        Ok(Ok(answer)) => answer,
    };
    let header = |name: &str| {
        trailers
            .as_ref()
            .and_then(|t| t.get(name))
            .or_else(|| parts.headers.get(name))
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    if parts.status != http::StatusCode::OK {
        return Outcome::Failure(format!(
            "error: health rpc probe failed: HTTP status {}",
            parts.status.as_u16()
        ));
    }
    let code: i32 = header("grpc-status")
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    let message = grpc_message(&header("grpc-message").unwrap_or_default());
    match tonic::Code::from(code) {
        tonic::Code::Ok => {}
        tonic::Code::Unimplemented => {
            return Outcome::Failure(format!(
                "this server does not implement the grpc health protocol (grpc.health.v1.Health): {message}"
            ));
        }
        tonic::Code::DeadlineExceeded => {
            return Outcome::Failure(format!(
                "timeout: health rpc did not complete within {within}"
            ));
        }
        other => {
            return Outcome::Failure(format!(
                "error: health rpc probe failed: rpc error: code = {other:?} desc = {message}"
            ));
        }
    }
    match health_status(&data) {
        Some(1) => Outcome::Success("service healthy".to_owned()),
        Some(status) => Outcome::Failure(format!(
            "service unhealthy (responded with {:?})",
            serving_status_name(status)
        )),
        None => Outcome::Failure(
            "error: health rpc probe failed: malformed health check response".to_owned(),
        ),
    }
}

/// The pod as upstream names it in messages: `name_namespace(uid)`.
pub fn pod_full_name(pod: &Pod) -> String {
    format!(
        "{}_{}({})",
        pod.metadata.name.as_deref().unwrap_or_default(),
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.uid.as_deref().unwrap_or_default()
    )
}

/// Runs a lifecycle hook against `target`. The error is the message upstream reports.
pub async fn run_hook(
    cri: &Cri,
    handler: &LifecycleHandler,
    pod: &Pod,
    target: &Target,
) -> Result<(), String> {
    let container = &target.container.name;
    let pod_name = pod_full_name(pod);
    if let Some(exec) = &handler.exec {
        let command = exec.command.clone().unwrap_or_default();
        let shown = format!("[{}]", command.join(" "));
        let (error, output) =
            match exec_sync(cri, &target.container_id, &command, Duration::ZERO).await {
                Ok(response) if response.exit_code == 0 => return Ok(()),
                Ok(response) => (
                    format!(
                        "command '{}' exited with {}: {}",
                        command.join(" "),
                        response.exit_code,
                        String::from_utf8_lossy(&response.stderr)
                    ),
                    combined_output(&response),
                ),
                Err(ExecError::Timeout) => (
                    format!("command {:?} timed out", command.join(" ")),
                    String::new(),
                ),
                Err(ExecError::Runtime(e)) => (e, String::new()),
            };
        return Err(format!(
            "Exec lifecycle hook ({shown}) for Container {container:?} in Pod {pod_name:?} failed - error: {error}, message: {output:?}"
        ));
    }
    if let Some(action) = &handler.http_get {
        let path = action.path.clone().unwrap_or_default();
        let failed = |error: String| {
            format!(
                "HTTP lifecycle hook ({path}) for Container {container:?} in Pod {pod_name:?} failed - error: {error}"
            )
        };
        if action.host.as_deref().unwrap_or_default().is_empty() && target.pod_ip.is_empty() {
            return Err(failed(
                "failed to find networking container: the pod has no address".to_owned(),
            ));
        }
        let request = http_request(action, &target.container, &target.pod_ip, "lifecycle")
            .map_err(&failed)?;
        return match follow(&request).await {
            Ok(_) => Ok(()),
            // An HTTPS hook answered in plain HTTP is retried over HTTP.
            Err(error)
                if request.url.scheme == "https"
                    && (error.contains("InvalidContentType") || error.contains("corrupt")) =>
            {
                let mut plain = request.clone();
                plain.url.scheme = "http".to_owned();
                plain
                    .headers
                    .retain(|(n, _)| !n.eq_ignore_ascii_case("Authorization"));
                match follow(&plain).await {
                    Ok(_) => {
                        tracing::warn!(pod = %pod_name, container = %container, "request to HTTPS lifecycle hook {} got HTTP response, retry with HTTP succeeded", join_host_port(&plain.url.host, plain.url.port));
                        Ok(())
                    }
                    Err(_) => Err(failed(error)),
                }
            }
            Err(error) => Err(failed(error)),
        };
    }
    if let Some(sleep) = &handler.sleep {
        tokio::time::sleep(Duration::from_secs(
            u64::try_from(sleep.seconds).unwrap_or(0),
        ))
        .await;
        return Ok(());
    }
    Err("Cannot run handler: invalid handler".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerPort, HTTPHeader};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    fn settings(delay: i64, success: u32, failure: u32) -> Settings {
        Settings {
            initial_delay: delay,
            period: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            success_threshold: success,
            failure_threshold: failure,
        }
    }

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn defaults_follow_the_api() {
        let s = Settings::of(&Probe::default());
        assert_eq!(
            s,
            Settings {
                initial_delay: 0,
                period: Duration::from_secs(10),
                timeout: Duration::from_secs(1),
                success_threshold: 1,
                failure_threshold: 3,
            }
        );
        let custom = Settings::of(&Probe {
            initial_delay_seconds: Some(5),
            period_seconds: Some(2),
            timeout_seconds: Some(3),
            success_threshold: Some(2),
            failure_threshold: Some(4),
            ..Probe::default()
        });
        assert_eq!(custom.period, Duration::from_secs(2));
        assert_eq!(custom.timeout, Duration::from_secs(3));
        assert_eq!(
            (
                custom.initial_delay,
                custom.success_threshold,
                custom.failure_threshold
            ),
            (5, 2, 4)
        );
    }

    #[test]
    fn failures_count_only_in_a_row_up_to_the_threshold() {
        let mut t = Tracker::new(Kind::Readiness, settings(0, 1, 3));
        assert_eq!(t.record(Verdict::Failure), None);
        assert_eq!(t.record(Verdict::Failure), None);
        // A success in between starts the count over, and is itself published (threshold 1).
        assert_eq!(t.record(Verdict::Success), Some(Verdict::Success));
        assert_eq!(t.record(Verdict::Failure), None);
        assert_eq!(t.record(Verdict::Failure), None);
        assert_eq!(t.record(Verdict::Failure), Some(Verdict::Failure));
        // Past the threshold every further failure is published again (no change for the
        // results, which only wake the worker on a change); readiness never holds.
        assert_eq!(t.record(Verdict::Failure), Some(Verdict::Failure));
        assert!(!t.on_hold());
    }

    #[test]
    fn successes_need_their_threshold() {
        let mut t = Tracker::new(Kind::Readiness, settings(0, 3, 1));
        assert_eq!(t.record(Verdict::Success), None);
        assert_eq!(t.record(Verdict::Success), None);
        assert_eq!(t.record(Verdict::Success), Some(Verdict::Success));
        assert_eq!(t.record(Verdict::Failure), Some(Verdict::Failure));
        assert_eq!(t.record(Verdict::Success), None);
    }

    #[test]
    fn a_liveness_failure_holds_the_loop_until_a_new_container() {
        let mut t = Tracker::new(Kind::Liveness, settings(0, 1, 2));
        assert!(t.due(S, true));
        assert_eq!(t.record(Verdict::Success), Some(Verdict::Success));
        assert!(!t.on_hold());
        assert_eq!(t.record(Verdict::Failure), None);
        assert_eq!(t.record(Verdict::Failure), Some(Verdict::Failure));
        assert!(t.on_hold());
        assert!(!t.due(100 * S, true));
    }

    #[test]
    fn the_initial_delay_holds_probes_back() {
        let t = Tracker::new(Kind::Readiness, settings(5, 1, 3));
        assert!(!t.due(Duration::ZERO, true));
        // Whole seconds count: 4.9 s is still 4.
        assert!(!t.due(Duration::from_millis(4_900), true));
        assert!(t.due(5 * S, true));
        assert!(t.due(60 * S, true));
    }

    #[test]
    fn startup_gates_the_other_probes() {
        let startup = Tracker::new(Kind::Startup, settings(0, 1, 3));
        let liveness = Tracker::new(Kind::Liveness, settings(0, 1, 3));
        let readiness = Tracker::new(Kind::Readiness, settings(0, 1, 3));
        // Before the container started, only the startup probe runs...
        assert!(startup.due(S, false));
        assert!(!liveness.due(S, false));
        assert!(!readiness.due(S, false));
        // ...after, only the others.
        assert!(!startup.due(S, true));
        assert!(liveness.due(S, true));
        assert!(readiness.due(S, true));
    }

    #[test]
    fn a_startup_verdict_is_final() {
        let mut t = Tracker::new(Kind::Startup, settings(0, 1, 2));
        assert_eq!(t.record(Verdict::Failure), None);
        assert_eq!(t.record(Verdict::Success), Some(Verdict::Success));
        assert!(t.on_hold());
        let mut failing = Tracker::new(Kind::Startup, settings(0, 1, 2));
        assert_eq!(failing.record(Verdict::Failure), None);
        assert_eq!(failing.record(Verdict::Failure), Some(Verdict::Failure));
        assert!(failing.on_hold());
        assert!(!failing.due(S, false));
    }

    #[test]
    fn initial_results_by_kind() {
        assert_eq!(Tracker::initial(Kind::Readiness), Verdict::Failure);
        assert_eq!(Tracker::initial(Kind::Liveness), Verdict::Success);
        assert_eq!(Tracker::initial(Kind::Startup), Verdict::Unknown);
    }

    #[tokio::test]
    async fn results_wake_the_worker_on_changes_only() {
        let wake = Arc::new(Notify::new());
        let results = Results::new(wake.clone());
        assert!(results.set("c1", Kind::Readiness, Verdict::Failure, false));
        assert!(results.set("c1", Kind::Readiness, Verdict::Success, true));
        tokio::time::timeout(Duration::from_secs(1), wake.notified())
            .await
            .expect("a change wakes");
        assert!(!results.set("c1", Kind::Readiness, Verdict::Success, true));
        assert!(
            tokio::time::timeout(Duration::from_millis(50), wake.notified())
                .await
                .is_err(),
            "no change, no wake"
        );
        assert_eq!(results.get("c1", Kind::Readiness), Some(Verdict::Success));
        assert_eq!(results.get("c1", Kind::Liveness), None);
        results.remove("c1", Kind::Readiness);
        assert_eq!(results.get("c1", Kind::Readiness), None);
    }

    fn container_with_port() -> Container {
        Container {
            name: "web".to_owned(),
            ports: Some(vec![ContainerPort {
                name: Some("http".to_owned()),
                container_port: 8080,
                ..ContainerPort::default()
            }]),
            ..Container::default()
        }
    }

    #[test]
    fn ports_resolve_by_number_or_name() {
        let c = container_with_port();
        assert_eq!(resolve_port(&IntOrString::Int(80), &c), Ok(80));
        assert_eq!(
            resolve_port(&IntOrString::String("http".to_owned()), &c),
            Ok(8080)
        );
        assert_eq!(
            resolve_port(&IntOrString::String("9090".to_owned()), &c),
            Ok(9090)
        );
        assert_eq!(
            resolve_port(&IntOrString::String("metrics".to_owned()), &c),
            Err("port metrics not found".to_owned())
        );
        assert_eq!(
            resolve_port(&IntOrString::Int(70000), &c),
            Err("invalid port number: 70000".to_owned())
        );
    }

    #[test]
    fn requests_carry_the_probe_headers() {
        let action = HTTPGetAction {
            path: Some("healthz?full=1".to_owned()),
            port: IntOrString::String("http".to_owned()),
            scheme: Some("HTTPS".to_owned()),
            http_headers: Some(vec![HTTPHeader {
                name: "X-Custom".to_owned(),
                value: "1".to_owned(),
            }]),
            ..HTTPGetAction::default()
        };
        let request =
            http_request(&action, &container_with_port(), "10.1.2.3", "probe").expect("valid");
        assert_eq!(
            request.url.to_string(),
            "https://10.1.2.3:8080/healthz?full=1"
        );
        assert!(
            request
                .headers
                .contains(&("User-Agent".to_owned(), "kube-probe/1.33".to_owned()))
        );
        assert!(
            request
                .headers
                .contains(&("Accept".to_owned(), "*/*".to_owned()))
        );
        assert!(
            request
                .headers
                .contains(&("X-Custom".to_owned(), "1".to_owned()))
        );
        // An empty Accept removes it; the host may be set; IPv6 addresses get brackets.
        let action = HTTPGetAction {
            host: Some("fd00::1".to_owned()),
            port: IntOrString::Int(80),
            http_headers: Some(vec![HTTPHeader {
                name: "accept".to_owned(),
                value: String::new(),
            }]),
            ..HTTPGetAction::default()
        };
        let request =
            http_request(&action, &Container::default(), "10.1.2.3", "lifecycle").expect("valid");
        assert_eq!(request.url.to_string(), "http://[fd00::1]:80/");
        assert!(
            !request
                .headers
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case("accept"))
        );
        assert!(
            request
                .headers
                .contains(&("User-Agent".to_owned(), "kube-lifecycle/1.33".to_owned()))
        );
    }

    #[test]
    fn locations_resolve_against_the_request() {
        let base = Url::parse("http://10.0.0.1:8080/a/b?x=1").expect("valid");
        assert_eq!(base.path, "/a/b?x=1");
        let to = |l: &str| base.resolve(l).map(|u| u.to_string());
        assert_eq!(to("/c"), Some("http://10.0.0.1:8080/c".to_owned()));
        assert_eq!(to("c"), Some("http://10.0.0.1:8080/a/c".to_owned()));
        assert_eq!(to("?y=2"), Some("http://10.0.0.1:8080/a/b?y=2".to_owned()));
        assert_eq!(to("//other/z"), Some("http://other:80/z".to_owned()));
        assert_eq!(
            to("https://other:9443"),
            Some("https://other:9443/".to_owned())
        );
        assert_eq!(
            Url::parse("http://[fd00::1]:81/x").map(|u| (u.host, u.port)),
            Some(("fd00::1".to_owned(), 81))
        );
        assert_eq!(Url::parse("ftp://x/"), None);
    }

    #[test]
    fn http_answers_are_classified_as_upstream() {
        assert_eq!(classify(200, b"ok"), Outcome::Success("ok".to_owned()));
        assert_eq!(classify(399, b"moved").verdict(), Verdict::Success);
        assert_eq!(
            classify(302, b"x"),
            Outcome::Warning("Probe terminated redirects, Response body: x".to_owned())
        );
        assert_eq!(
            classify(503, b"down"),
            Outcome::Failure("HTTP probe failed with statuscode: 503".to_owned())
        );
        assert_eq!(classify(199, b"").verdict(), Verdict::Failure);
    }

    #[test]
    fn health_messages_round_trip() {
        assert_eq!(health_request(""), vec![0, 0, 0, 0, 0]);
        assert_eq!(
            health_request("db"),
            vec![0, 0, 0, 0, 4, 0x0a, 2, b'd', b'b']
        );
        // status: SERVING (1), with an unknown length-delimited field first.
        assert_eq!(
            health_status(&[0, 0, 0, 0, 5, 0x12, 1, b'x', 0x08, 1]),
            Some(1)
        );
        assert_eq!(health_status(&[0, 0, 0, 0, 0]), Some(0));
        assert_eq!(health_status(&[1, 0, 0, 0, 0]), None);
        // A length-delimited field whose length would wrap the offset is malformed.
        let mut huge = vec![0, 0, 0, 0, 11, 0x12];
        huge.extend_from_slice(&[0xf5, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
        assert_eq!(health_status(&huge), None);
        assert_eq!(grpc_message("not%20here"), "not here");
    }

    /// A one-request-per-connection HTTP server on 127.0.0.1 answering by path.
    async fn server() -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("address").port();
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    let text = String::from_utf8_lossy(&request).into_owned();
                    let path = text.split(' ').nth(1).unwrap_or("/").to_owned();
                    let (status, extra, body) = match path.as_str() {
                        "/ok" => ("200 OK", String::new(), "fine".to_owned()),
                        "/bad" => ("500 Internal Server Error", String::new(), "no".to_owned()),
                        "/hop" => ("301 Moved", "Location: /ok\r\n".to_owned(), String::new()),
                        "/loop" => ("302 Found", "Location: /loop\r\n".to_owned(), String::new()),
                        "/away" => (
                            "302 Found",
                            format!("Location: http://127.0.0.2:{port}/ok\r\n"),
                            "elsewhere".to_owned(),
                        ),
                        "/agent"
                            if text
                                .to_ascii_lowercase()
                                .contains("user-agent: kube-probe/1.33") =>
                        {
                            ("200 OK", String::new(), String::new())
                        }
                        "/agent" => ("400 Bad Request", String::new(), String::new()),
                        "/slow" => {
                            tokio::time::sleep(Duration::from_secs(5)).await;
                            ("200 OK", String::new(), String::new())
                        }
                        _ => ("404 Not Found", String::new(), String::new()),
                    };
                    let answer = format!(
                        "HTTP/1.1 {status}\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(answer.as_bytes()).await;
                });
            }
        });
        port
    }

    fn get(port: u16, path: &str) -> HttpRequest {
        let action = HTTPGetAction {
            path: Some(path.to_owned()),
            port: IntOrString::Int(i32::from(port)),
            ..HTTPGetAction::default()
        };
        http_request(&action, &Container::default(), "127.0.0.1", "probe").expect("valid")
    }

    #[tokio::test]
    async fn http_probes_follow_local_redirects_only() {
        let port = server().await;
        let t = Duration::from_secs(2);
        assert_eq!(
            http_probe(&get(port, "/ok"), t).await,
            Outcome::Success("fine".to_owned())
        );
        assert_eq!(
            http_probe(&get(port, "/agent"), t).await.verdict(),
            Verdict::Success
        );
        assert_eq!(
            http_probe(&get(port, "/bad"), t).await,
            Outcome::Failure("HTTP probe failed with statuscode: 500".to_owned())
        );
        assert_eq!(
            http_probe(&get(port, "/hop"), t).await,
            Outcome::Success("fine".to_owned())
        );
        assert_eq!(
            http_probe(&get(port, "/away"), t).await,
            Outcome::Warning("Probe terminated redirects, Response body: elsewhere".to_owned())
        );
        assert_eq!(
            http_probe(&get(port, "/loop"), t).await,
            Outcome::Failure(format!(
                "Get \"http://127.0.0.1:{port}/loop\": stopped after 10 redirects"
            ))
        );
        assert_eq!(
            http_probe(&get(port, "/slow"), Duration::from_millis(300)).await,
            Outcome::Failure(format!(
                "Get \"http://127.0.0.1:{port}/slow\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
            ))
        );
    }

    /// A gRPC health server on 127.0.0.1 (HTTP/2 without TLS): "" is SERVING, "down" is
    /// NOT_SERVING, anything else is not implemented.
    async fn health_server() -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("address").port();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    let service = tower::service_fn(|request: http::Request<_>| async move {
                        let path = request.uri().path().to_owned();
                        let (frame, _) = read_body(request.into_body(), 1024).await?;
                        let service = frame.get(7..).unwrap_or_default().to_vec();
                        let answer = |status: &str, message: Vec<u8>| {
                            http::Response::builder()
                                .header("content-type", "application/grpc")
                                .header("grpc-status", status)
                                .body(kube::client::Body::from(message))
                        };
                        let response = match (path.as_str(), service.as_slice()) {
                            ("/grpc.health.v1.Health/Check", b"") => {
                                answer("0", vec![0, 0, 0, 0, 2, 0x08, 1])
                            }
                            ("/grpc.health.v1.Health/Check", b"down") => {
                                answer("0", vec![0, 0, 0, 0, 2, 0x08, 2])
                            }
                            _ => answer("12", Vec::new()),
                        };
                        response.map_err(|e| e.to_string())
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(
                        hyper_util::rt::TokioIo::new(stream),
                        hyper_util::service::TowerToHyperService::new(service),
                    )
                    .await;
                });
            }
        });
        port
    }

    #[tokio::test]
    async fn grpc_probes_read_the_health_answer() {
        let port = health_server().await;
        let t = Duration::from_secs(2);
        assert_eq!(
            grpc_probe("127.0.0.1", port, "", t).await,
            Outcome::Success("service healthy".to_owned())
        );
        assert_eq!(
            grpc_probe("127.0.0.1", port, "down", t).await,
            Outcome::Failure("service unhealthy (responded with \"NOT_SERVING\")".to_owned())
        );
        assert_eq!(
            grpc_probe("127.0.0.1", port, "other", t).await,
            Outcome::Failure(
                "this server does not implement the grpc health protocol (grpc.health.v1.Health): "
                    .to_owned()
            )
        );
    }

    #[tokio::test]
    async fn refused_connections_fail() {
        // A port nothing listens on: bind one and let it go.
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            listener.local_addr().expect("address").port()
        };
        let t = Duration::from_secs(2);
        assert_eq!(
            http_probe(&get(port, "/"), t).await,
            Outcome::Failure(format!(
                "Get \"http://127.0.0.1:{port}/\": dial tcp 127.0.0.1:{port}: connect: connection refused"
            ))
        );
        assert_eq!(
            tcp_probe("127.0.0.1", port, t).await,
            Outcome::Failure(format!(
                "dial tcp 127.0.0.1:{port}: connect: connection refused"
            ))
        );
        let grpc = grpc_probe("127.0.0.1", port, "", t).await;
        assert!(
            matches!(&grpc, Outcome::Failure(m) if m.starts_with(&format!("timeout: failed to connect service \"127.0.0.1:{port}\" within 2s"))),
            "{grpc:?}"
        );
        let open = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let open_port = open.local_addr().expect("address").port();
        assert_eq!(
            tcp_probe("127.0.0.1", open_port, t).await,
            Outcome::Success(String::new())
        );
    }
}

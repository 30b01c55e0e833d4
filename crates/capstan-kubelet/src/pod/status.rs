//! The pod status the agent reports, computed without I/O from the pod, what the runtime holds
//! for it and what the agent itself knows (waiting reasons such as a back-off): phase,
//! conditions, container statuses and addresses, following the kubelet's rules.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// A container's state in the runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Created, not started.
    Created,
    /// Running.
    Running,
    /// Exited.
    Exited,
    /// The runtime does not know.
    Unknown,
}

/// One container of the pod as the runtime reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerRecord {
    /// The runtime's ID.
    pub id: String,
    /// The container's name in the pod.
    pub name: String,
    /// The sandbox it belongs to.
    pub sandbox_id: String,
    /// Its state.
    pub state: State,
    /// When it was created, started and finished, in nanoseconds since the epoch (0: never).
    pub created_at: i64,
    /// See `created_at`.
    pub started_at: i64,
    /// See `created_at`.
    pub finished_at: i64,
    /// Its exit code, once exited.
    pub exit_code: i32,
    /// The runtime's reason for the exit (`Completed`, `Error`, `OOMKilled`).
    pub reason: String,
    /// The runtime's message about the exit.
    pub message: String,
    /// The image's ID or digest reference.
    pub image_ref: String,
    /// The hash of the spec it was started from.
    pub hash: String,
    /// How many times it had been restarted when it was created.
    pub restart_count: u32,
}

/// The pod's sandbox as the runtime reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxRecord {
    /// The runtime's ID.
    pub id: String,
    /// Whether it is ready (running, network set up).
    pub ready: bool,
    /// Its primary address (empty on the host network).
    pub ip: String,
    /// Its other addresses.
    pub additional_ips: Vec<String>,
    /// When it was created, in nanoseconds since the epoch.
    pub created_at: i64,
    /// Its attempt number.
    pub attempt: u32,
}

/// Everything the runtime holds for a pod: sandboxes and containers, newest first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// The pod's sandboxes, newest first.
    pub sandboxes: Vec<SandboxRecord>,
    /// The pod's containers, newest first.
    pub containers: Vec<ContainerRecord>,
}

impl Observed {
    /// The newest sandbox.
    pub fn sandbox(&self) -> Option<&SandboxRecord> {
        self.sandboxes.first()
    }
    /// The containers called `name`, newest first.
    pub fn named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a ContainerRecord> + 'a {
        self.containers.iter().filter(move |c| c.name == name)
    }
    /// The newest container called `name`.
    pub fn latest(&self, name: &str) -> Option<&ContainerRecord> {
        self.containers.iter().find(|c| c.name == name)
    }
}

/// Why a container waits, as the agent decided (back-off, image pull failure, bad config).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// The upstream reason, e.g. `CrashLoopBackOff`.
    pub reason: String,
    /// The message.
    pub message: String,
}

/// What else the status needs.
#[derive(Debug, Clone)]
pub struct Context<'a> {
    /// The runtime's name, the scheme of container IDs (`containerd`).
    pub runtime: &'a str,
    /// The node's addresses.
    pub host_ips: &'a [String],
    /// The agent's waiting reasons, by container name.
    pub waiting: &'a HashMap<String, Waiting>,
    /// Container readiness from readiness probes, by container name (absent: no probe, so a
    /// started container is ready).
    pub readiness: &'a HashMap<String, bool>,
    /// Whether containers with a startup probe have passed it, by container name (absent: no
    /// startup probe, so a running container has started). A container that has not started
    /// is not ready.
    pub started: &'a HashMap<String, bool>,
    /// Now.
    pub now: Timestamp,
}

fn time(nanos: i64) -> Option<Time> {
    (nanos > 0)
        .then(|| Timestamp::from_nanosecond(i128::from(nanos)).ok())
        .flatten()
        .map(|t| {
            // The API keeps whole seconds.
            Time(Timestamp::from_second(t.as_second()).unwrap_or(t))
        })
}

fn terminated(record: &ContainerRecord, runtime: &str) -> ContainerStateTerminated {
    let reason = if !record.reason.is_empty() {
        record.reason.clone()
    } else if record.exit_code == 0 {
        "Completed".to_owned()
    } else {
        "Error".to_owned()
    };
    ContainerStateTerminated {
        exit_code: record.exit_code,
        reason: Some(reason),
        message: (!record.message.is_empty()).then(|| record.message.clone()),
        started_at: time(record.started_at),
        finished_at: time(record.finished_at),
        container_id: Some(format!("{runtime}://{}", record.id)),
        signal: None,
    }
}

fn waiting(reason: &str, message: Option<String>) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.to_owned()),
            message,
        }),
        ..ContainerState::default()
    }
}

/// Whether the init container `container` is a sidecar (restartPolicy Always).
pub fn is_sidecar(container: &Container) -> bool {
    container.restart_policy.as_deref() == Some("Always")
}

/// The status of one container. `before_start` is the waiting reason of a container that has
/// not been created yet (`PodInitializing` or `ContainerCreating`).
fn container_status(
    container: &Container,
    observed: &Observed,
    context: &Context<'_>,
    before_start: &str,
) -> ContainerStatus {
    let mut history = observed.named(&container.name);
    let latest = history.next();
    let previous = history.next();
    let runtime = context.runtime;
    let image = container.image.clone().unwrap_or_default();
    let (state, last_state) = match (context.waiting.get(&container.name), latest) {
        (Some(w), latest) => (
            waiting(&w.reason, Some(w.message.clone()).filter(|m| !m.is_empty())),
            latest
                .filter(|l| l.state == State::Exited)
                .map(|l| terminated(l, runtime)),
        ),
        (None, Some(latest)) => {
            let state = match latest.state {
                State::Running => ContainerState {
                    running: Some(ContainerStateRunning {
                        started_at: time(latest.started_at),
                    }),
                    ..ContainerState::default()
                },
                State::Exited => ContainerState {
                    terminated: Some(terminated(latest, runtime)),
                    ..ContainerState::default()
                },
                State::Created | State::Unknown => waiting("ContainerCreating", None),
            };
            (
                state,
                previous
                    .filter(|p| p.state == State::Exited)
                    .map(|p| terminated(p, runtime)),
            )
        }
        (None, None) => (waiting(before_start, None), None),
    };
    let running = state.running.is_some();
    let started = running
        && context
            .started
            .get(&container.name)
            .copied()
            .unwrap_or(true);
    let ready = started
        && context
            .readiness
            .get(&container.name)
            .copied()
            .unwrap_or(true);
    ContainerStatus {
        name: container.name.clone(),
        image,
        image_id: latest.map(|l| l.image_ref.clone()).unwrap_or_default(),
        container_id: latest.map(|l| format!("{runtime}://{}", l.id)),
        ready,
        started: Some(started),
        restart_count: latest.map_or(0, |l| l.restart_count as i32),
        state: Some(state),
        last_state: Some(ContainerState {
            terminated: last_state,
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    }
}

/// Where a pod's init containers stand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitProgress {
    /// Every init container has completed (sidecars have started).
    Done,
    /// These have not completed yet.
    Pending(Vec<String>),
    /// This one failed and the pod will not restart it.
    Failed(String),
}

/// How far the pod's init containers got.
pub fn init_progress(pod: &Pod, observed: &Observed) -> InitProgress {
    let Some(spec) = &pod.spec else {
        return InitProgress::Done;
    };
    let never = spec.restart_policy.as_deref() == Some("Never");
    let mut pending = Vec::new();
    for container in spec.init_containers.iter().flatten() {
        let latest = observed.latest(&container.name);
        let done = match latest {
            Some(l) if is_sidecar(container) => l.state == State::Running || l.started_at > 0,
            Some(l) => l.state == State::Exited && l.exit_code == 0,
            None => false,
        };
        if let Some(l) = latest
            && !is_sidecar(container)
            && l.state == State::Exited
            && l.exit_code != 0
            && never
        {
            return InitProgress::Failed(container.name.clone());
        }
        if !done {
            pending.push(container.name.clone());
        }
    }
    if pending.is_empty() {
        InitProgress::Done
    } else {
        InitProgress::Pending(pending)
    }
}

/// The pod phase from its app containers' statuses (the kubelet's `getPhase`).
fn phase(pod: &Pod, init: &InitProgress, statuses: &[ContainerStatus]) -> &'static str {
    match init {
        InitProgress::Failed(_) => return "Failed",
        InitProgress::Pending(_) => return "Pending",
        InitProgress::Done => {}
    }
    let policy = pod
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always");
    let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for status in statuses {
        let state = status.state.clone().unwrap_or_default();
        if state.running.is_some() {
            running += 1;
        } else if let Some(t) = &state.terminated {
            stopped += 1;
            if t.exit_code == 0 {
                succeeded += 1;
            }
        } else if state.waiting.is_some() {
            match status
                .last_state
                .as_ref()
                .and_then(|l| l.terminated.as_ref())
            {
                Some(t) => {
                    stopped += 1;
                    if t.exit_code == 0 {
                        succeeded += 1;
                    }
                }
                None => waiting += 1,
            }
        }
    }
    if waiting > 0 {
        "Pending"
    } else if running > 0 {
        "Running"
    } else if stopped > 0 {
        if policy == "Always" {
            "Running"
        } else if stopped == succeeded {
            "Succeeded"
        } else if policy == "Never" {
            "Failed"
        } else {
            "Running"
        }
    } else {
        "Pending"
    }
}

fn condition(
    previous: &[PodCondition],
    type_: &str,
    ok: bool,
    reason: Option<&str>,
    message: Option<String>,
    now: Timestamp,
) -> PodCondition {
    let status = if ok { "True" } else { "False" };
    let transition = previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or(Time(Timestamp::from_second(now.as_second()).unwrap_or(now)));
    PodCondition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: if ok { None } else { reason.map(str::to_owned) },
        message: if ok { None } else { message },
        last_transition_time: Some(transition),
        ..PodCondition::default()
    }
}

fn names(list: &[String]) -> String {
    format!("[{}]", list.join(" "))
}

/// The conditions the agent owns.
const OWNED: &[&str] = &[
    "PodReadyToStartContainers",
    "Initialized",
    "ContainersReady",
    "Ready",
];

/// The pod's status: what the runtime shows, in the API's terms.
pub fn pod_status(pod: &Pod, observed: &Observed, context: &Context<'_>) -> PodStatus {
    let previous = pod.status.clone().unwrap_or_default();
    let default_spec = Default::default();
    let spec = pod.spec.as_ref().unwrap_or(&default_spec);
    let init = init_progress(pod, observed);
    let app_before_start = if init == InitProgress::Done {
        "ContainerCreating"
    } else {
        "PodInitializing"
    };
    let init_statuses: Vec<ContainerStatus> = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| {
            let mut status = container_status(c, observed, context, "PodInitializing");
            // An init container (not a sidecar, which is ready as other containers are) is
            // ready once it has exited with success, as upstream's prober manager says.
            if !is_sidecar(c) {
                status.ready = status
                    .state
                    .as_ref()
                    .and_then(|s| s.terminated.as_ref())
                    .is_some_and(|t| t.exit_code == 0);
            }
            status
        })
        .collect();
    let statuses: Vec<ContainerStatus> = spec
        .containers
        .iter()
        .map(|c| container_status(c, observed, context, app_before_start))
        .collect();
    // Ephemeral containers count for nothing else; the kubelet never calls them ready.
    let ephemeral_statuses: Vec<ContainerStatus> = spec
        .ephemeral_containers
        .iter()
        .flatten()
        .map(|e| ContainerStatus {
            ready: false,
            ..container_status(
                &crate::spec::ephemeral_container(e),
                observed,
                context,
                app_before_start,
            )
        })
        .collect();
    let mut phase = phase(pod, &init, &statuses).to_owned();
    // A pod that reached a terminal phase stays there.
    if let Some(old) = previous.phase.as_deref()
        && (old == "Succeeded" || old == "Failed")
    {
        phase = old.to_owned();
    }
    let terminal = phase == "Succeeded" || phase == "Failed";
    let now = context.now;
    let old_conditions = previous.conditions.clone().unwrap_or_default();
    let sandbox_ready = observed.sandbox().is_some_and(|s| s.ready);
    let unready: Vec<String> = statuses
        .iter()
        .filter(|s| !s.ready)
        .map(|s| s.name.clone())
        .chain(
            // Sidecars count too.
            spec.init_containers
                .iter()
                .flatten()
                .zip(&init_statuses)
                .filter(|(c, s)| is_sidecar(c) && !s.ready)
                .map(|(c, _)| c.name.clone()),
        )
        .collect();
    let gates_unready: Vec<String> = spec
        .readiness_gates
        .iter()
        .flatten()
        .filter(|gate| {
            !old_conditions
                .iter()
                .any(|c| c.type_ == gate.condition_type && c.status == "True")
        })
        .map(|gate| gate.condition_type.clone())
        .collect();
    let (ready_reason, ready_message) = if terminal {
        ("PodCompleted", None)
    } else if !unready.is_empty() {
        (
            "ContainersNotReady",
            Some(format!(
                "containers with unready status: {}",
                names(&unready)
            )),
        )
    } else {
        (
            "ReadinessGatesNotReady",
            Some(format!(
                "corresponding condition of pod readiness gate {} does not exist.",
                names(&gates_unready)
            )),
        )
    };
    let containers_ready = !terminal && unready.is_empty();
    let initialized = match &init {
        InitProgress::Done => (true, None),
        InitProgress::Pending(list) => (
            false,
            Some(format!(
                "containers with incomplete status: {}",
                names(list)
            )),
        ),
        InitProgress::Failed(name) => (
            false,
            Some(format!("containers with incomplete status: [{name}]")),
        ),
    };
    let mut conditions: Vec<PodCondition> = vec![
        condition(
            &old_conditions,
            "PodReadyToStartContainers",
            sandbox_ready && !terminal,
            None,
            None,
            now,
        ),
        condition(
            &old_conditions,
            "Initialized",
            initialized.0 || terminal && init == InitProgress::Done,
            Some("ContainersNotInitialized"),
            initialized.1,
            now,
        ),
        condition(
            &old_conditions,
            "Ready",
            containers_ready && gates_unready.is_empty(),
            Some(ready_reason),
            ready_message.clone(),
            now,
        ),
        condition(
            &old_conditions,
            "ContainersReady",
            containers_ready,
            Some(if terminal {
                "PodCompleted"
            } else {
                "ContainersNotReady"
            }),
            if terminal {
                None
            } else {
                ready_message.filter(|_| !unready.is_empty())
            },
            now,
        ),
    ];
    conditions.extend(
        old_conditions
            .iter()
            .filter(|c| !OWNED.contains(&c.type_.as_str()))
            .cloned(),
    );
    let sandbox = observed.sandbox().filter(|s| s.ready && !s.ip.is_empty());
    let host_network = spec.host_network == Some(true);
    let pod_ips: Vec<String> = if host_network {
        context.host_ips.to_vec()
    } else {
        sandbox
            .map(|s| {
                std::iter::once(s.ip.clone())
                    .chain(s.additional_ips.clone())
                    .collect()
            })
            .unwrap_or_else(|| {
                // Keep the addresses once assigned, as the kubelet does after the sandbox stops.
                previous
                    .pod_ips
                    .iter()
                    .flatten()
                    .map(|ip| ip.ip.clone())
                    .collect()
            })
    };
    PodStatus {
        phase: Some(phase),
        conditions: Some(conditions),
        host_ip: context.host_ips.first().cloned(),
        host_ips: Some(
            context
                .host_ips
                .iter()
                .map(|ip| HostIP { ip: ip.clone() })
                .collect(),
        ),
        pod_ip: pod_ips.first().cloned(),
        pod_ips: (!pod_ips.is_empty())
            .then(|| pod_ips.iter().map(|ip| PodIP { ip: ip.clone() }).collect()),
        start_time: previous
            .start_time
            .clone()
            .or_else(|| Some(Time(Timestamp::from_second(now.as_second()).unwrap_or(now)))),
        init_container_statuses: (!init_statuses.is_empty()).then_some(init_statuses),
        container_statuses: Some(statuses),
        ephemeral_container_statuses: (!ephemeral_statuses.is_empty())
            .then_some(ephemeral_statuses),
        qos_class: previous.qos_class.clone(),
        message: previous.message.clone(),
        reason: previous.reason.clone(),
        nominated_node_name: previous.nominated_node_name.clone(),
        ..PodStatus::default()
    }
}

/// The reason a pod fails with once it has been active longer than `activeDeadlineSeconds`.
pub const DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
/// Its message, upstream's.
pub const DEADLINE_EXCEEDED_MESSAGE: &str =
    "Pod was active on the node longer than the specified deadline";

/// How long a pod with `activeDeadlineSeconds` may still run, counted from its `startTime`
/// (zero once the deadline has passed; `None` without a deadline or before it started), as
/// upstream's active deadline handler decides. The deadline may be lowered while the pod runs.
pub fn active_deadline_left(pod: &Pod, now: Timestamp) -> Option<std::time::Duration> {
    let deadline = pod.spec.as_ref()?.active_deadline_seconds?;
    let started = pod.status.as_ref()?.start_time.as_ref()?.0;
    let active = now.as_second().saturating_sub(started.as_second());
    let left = deadline.saturating_sub(active).max(0);
    Some(std::time::Duration::from_secs(
        u64::try_from(left).unwrap_or(0),
    ))
}

/// A deleted pod whose containers have all stopped ends in a terminal phase, as the kubelet
/// reports it before the pod goes: Succeeded when every app container exited 0, else Failed.
pub fn settle_terminated(pod: &Pod, status: &mut PodStatus) {
    if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return;
    }
    let statuses = status.container_statuses.clone().unwrap_or_default();
    if statuses
        .iter()
        .any(|s| s.state.as_ref().is_some_and(|s| s.running.is_some()))
    {
        return;
    }
    let succeeded = !statuses.is_empty()
        && statuses.iter().all(|s| {
            s.state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .is_some_and(|t| t.exit_code == 0)
        })
        && pod.spec.as_ref().is_some_and(|s| !s.containers.is_empty());
    status.phase = Some(if succeeded { "Succeeded" } else { "Failed" }.to_owned());
    for condition in status.conditions.iter_mut().flatten() {
        if matches!(
            condition.type_.as_str(),
            "Ready" | "ContainersReady" | "PodReadyToStartContainers"
        ) && condition.status == "True"
        {
            condition.status = "False".to_owned();
        }
    }
}

#[cfg(test)]
mod tests;

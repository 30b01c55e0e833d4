use super::*;
use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

fn pod(policy: &str, init: &[&str], containers: &[&str]) -> Pod {
    let container = |name: &&str| Container {
        name: (*name).to_owned(),
        image: Some("busybox".to_owned()),
        ..Container::default()
    };
    Pod {
        metadata: ObjectMeta {
            name: Some("p".to_owned()),
            uid: Some("u".to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            restart_policy: Some(policy.to_owned()),
            init_containers: (!init.is_empty()).then(|| init.iter().map(container).collect()),
            containers: containers.iter().map(container).collect(),
            ..PodSpec::default()
        }),
        status: None,
    }
}

fn record(
    name: &str,
    state: State,
    exit_code: i32,
    restart_count: u32,
    at: i64,
) -> ContainerRecord {
    ContainerRecord {
        id: format!("{name}-{restart_count}"),
        name: name.to_owned(),
        sandbox_id: "s".to_owned(),
        state,
        created_at: at,
        started_at: at + 1_000_000_000,
        finished_at: if state == State::Exited {
            at + 2_000_000_000
        } else {
            0
        },
        exit_code,
        reason: String::new(),
        message: String::new(),
        image_ref: "sha256:1".to_owned(),
        hash: "h".to_owned(),
        restart_count,
    }
}

fn observed(containers: Vec<ContainerRecord>) -> Observed {
    Observed {
        sandboxes: vec![SandboxRecord {
            id: "s".to_owned(),
            ready: true,
            ip: "10.42.0.7".to_owned(),
            additional_ips: Vec::new(),
            created_at: 1,
            attempt: 0,
        }],
        containers,
    }
}

struct Check {
    waiting: HashMap<String, Waiting>,
    readiness: HashMap<String, bool>,
    started: HashMap<String, bool>,
    hosts: Vec<String>,
}

impl Check {
    fn new() -> Check {
        Check {
            waiting: HashMap::new(),
            readiness: HashMap::new(),
            started: HashMap::new(),
            hosts: vec!["10.0.0.1".to_owned()],
        }
    }
    fn status(&self, pod: &Pod, observed: &Observed) -> PodStatus {
        let context = Context {
            runtime: "containerd",
            host_ips: &self.hosts,
            waiting: &self.waiting,
            readiness: &self.readiness,
            started: &self.started,
            now: Timestamp::from_second(1_700_000_000).unwrap_or(Timestamp::UNIX_EPOCH),
        };
        pod_status(pod, observed, &context)
    }
}

fn condition_of(status: &PodStatus, type_: &str) -> String {
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.clone())
        .unwrap_or_default()
}

#[test]
fn phases_follow_the_kubelet() {
    let check = Check::new();
    let s = |policy: &str, records: Vec<ContainerRecord>| {
        check
            .status(&pod(policy, &[], &["a", "b"]), &observed(records))
            .phase
            .unwrap_or_default()
    };
    assert_eq!(s("Always", vec![]), "Pending");
    assert_eq!(
        s(
            "Always",
            vec![
                record("a", State::Running, 0, 0, 1),
                record("b", State::Running, 0, 0, 1)
            ]
        ),
        "Running"
    );
    assert_eq!(
        s(
            "Never",
            vec![
                record("a", State::Exited, 0, 0, 1),
                record("b", State::Exited, 0, 0, 1)
            ]
        ),
        "Succeeded"
    );
    assert_eq!(
        s(
            "Never",
            vec![
                record("a", State::Exited, 1, 0, 1),
                record("b", State::Exited, 0, 0, 1)
            ]
        ),
        "Failed"
    );
    assert_eq!(
        s(
            "OnFailure",
            vec![
                record("a", State::Exited, 1, 0, 1),
                record("b", State::Exited, 0, 0, 1)
            ]
        ),
        "Running"
    );
    assert_eq!(
        s(
            "Always",
            vec![
                record("a", State::Exited, 0, 0, 1),
                record("b", State::Exited, 0, 0, 1)
            ]
        ),
        "Running"
    );
    // One container not started yet keeps the pod pending.
    assert_eq!(
        s("Always", vec![record("a", State::Running, 0, 0, 1)]),
        "Pending"
    );
}

#[test]
fn a_running_pod_is_ready_with_its_addresses() {
    let check = Check::new();
    let status = check.status(
        &pod("Always", &[], &["a"]),
        &observed(vec![record("a", State::Running, 0, 2, 5)]),
    );
    assert_eq!(status.pod_ip.as_deref(), Some("10.42.0.7"));
    assert_eq!(status.host_ip.as_deref(), Some("10.0.0.1"));
    assert_eq!(condition_of(&status, "Ready"), "True");
    assert_eq!(condition_of(&status, "ContainersReady"), "True");
    assert_eq!(condition_of(&status, "Initialized"), "True");
    assert_eq!(condition_of(&status, "PodReadyToStartContainers"), "True");
    let container = &status.container_statuses.unwrap_or_default()[0];
    assert!(container.ready);
    assert_eq!(container.restart_count, 2);
    assert_eq!(container.container_id.as_deref(), Some("containerd://a-2"));
    assert!(
        container
            .state
            .as_ref()
            .and_then(|s| s.running.as_ref())
            .is_some()
    );
}

#[test]
fn a_container_in_back_off_shows_its_last_exit() {
    let mut check = Check::new();
    check.waiting.insert(
        "a".to_owned(),
        Waiting {
            reason: "CrashLoopBackOff".to_owned(),
            message: "back-off 10s restarting failed container=a pod=p_default(u)".to_owned(),
        },
    );
    let status = check.status(
        &pod("Always", &[], &["a"]),
        &observed(vec![
            record("a", State::Exited, 3, 1, 9),
            record("a", State::Exited, 3, 0, 1),
        ]),
    );
    let container = &status.container_statuses.clone().unwrap_or_default()[0];
    let state = container.state.clone().unwrap_or_default();
    assert_eq!(
        state.waiting.and_then(|w| w.reason).as_deref(),
        Some("CrashLoopBackOff")
    );
    let last = container.last_state.clone().unwrap_or_default().terminated;
    assert_eq!(last.as_ref().map(|t| t.exit_code), Some(3));
    assert_eq!(last.and_then(|t| t.reason).as_deref(), Some("Error"));
    assert_eq!(container.restart_count, 1);
    assert_eq!(status.phase.as_deref(), Some("Running"));
    assert_eq!(condition_of(&status, "Ready"), "False");
}

#[test]
fn init_containers_gate_the_pod() {
    let check = Check::new();
    let pod = pod("Always", &["setup"], &["a"]);
    let status = check.status(
        &pod,
        &observed(vec![record("setup", State::Running, 0, 0, 1)]),
    );
    assert_eq!(status.phase.as_deref(), Some("Pending"));
    assert_eq!(condition_of(&status, "Initialized"), "False");
    let app = &status.container_statuses.clone().unwrap_or_default()[0];
    assert_eq!(
        app.state
            .clone()
            .unwrap_or_default()
            .waiting
            .and_then(|w| w.reason)
            .as_deref(),
        Some("PodInitializing")
    );
    let done = check.status(
        &pod,
        &observed(vec![record("setup", State::Exited, 0, 0, 1)]),
    );
    assert_eq!(condition_of(&done, "Initialized"), "True");
    // A running init container is not ready; one that exited with success is.
    let init_ready =
        |status: &PodStatus| status.init_container_statuses.clone().unwrap_or_default()[0].ready;
    assert!(!init_ready(&status));
    assert!(init_ready(&done));
    let app = &done.container_statuses.clone().unwrap_or_default()[0];
    assert_eq!(
        app.state
            .clone()
            .unwrap_or_default()
            .waiting
            .and_then(|w| w.reason)
            .as_deref(),
        Some("ContainerCreating")
    );
    let never = self::pod("Never", &["setup"], &["a"]);
    let failed = check.status(
        &never,
        &observed(vec![record("setup", State::Exited, 2, 0, 1)]),
    );
    assert_eq!(failed.phase.as_deref(), Some("Failed"));
    assert!(!init_ready(&failed));
}

#[test]
fn terminal_phases_stick() {
    let check = Check::new();
    let mut done = pod("Never", &[], &["a"]);
    done.status = Some(PodStatus {
        phase: Some("Succeeded".to_owned()),
        ..PodStatus::default()
    });
    let status = check.status(&done, &Observed::default());
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    assert_eq!(condition_of(&status, "Ready"), "False");
}

#[test]
fn probes_decide_started_and_ready() {
    let mut check = Check::new();
    let pod = pod("Always", &[], &["a", "b"]);
    let running = observed(vec![
        record("a", State::Running, 0, 0, 1),
        record("b", State::Running, 0, 0, 1),
    ]);
    let flags = |status: &PodStatus| {
        status
            .container_statuses
            .iter()
            .flatten()
            .map(|s| (s.started.unwrap_or(false), s.ready))
            .collect::<Vec<_>>()
    };
    // Without probes, running containers have started and are ready.
    let status = check.status(&pod, &running);
    assert_eq!(flags(&status), [(true, true), (true, true)]);
    assert_eq!(condition_of(&status, "Ready"), "True");
    // A readiness probe that has not succeeded keeps its container, and the pod, unready.
    check.readiness.insert("a".to_owned(), false);
    let status = check.status(&pod, &running);
    assert_eq!(flags(&status), [(true, false), (true, true)]);
    assert_eq!(condition_of(&status, "Ready"), "False");
    assert_eq!(condition_of(&status, "ContainersReady"), "False");
    let ready = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Ready")
        .and_then(|c| c.message.clone());
    assert_eq!(
        ready.as_deref(),
        Some("containers with unready status: [a]")
    );
    // A container whose startup probe has not succeeded has not started, and is not ready
    // even when its readiness probe says so.
    check.readiness.insert("a".to_owned(), true);
    check.started.insert("b".to_owned(), false);
    let status = check.status(&pod, &running);
    assert_eq!(flags(&status), [(true, true), (false, false)]);
    assert_eq!(condition_of(&status, "Ready"), "False");
    check.started.insert("b".to_owned(), true);
    let status = check.status(&pod, &running);
    assert_eq!(flags(&status), [(true, true), (true, true)]);
    assert_eq!(condition_of(&status, "Ready"), "True");
    // An exited container has neither started nor is ready, whatever the probes said.
    let exited = observed(vec![
        record("a", State::Exited, 1, 0, 1),
        record("b", State::Running, 0, 0, 1),
    ]);
    assert_eq!(
        flags(&check.status(&pod, &exited)),
        [(false, false), (true, true)]
    );
}

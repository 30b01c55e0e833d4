//! Reading a pod's state out of the runtime, and the runtime calls the workers make, in the
//! agent's terms ([`Observed`] records).

use std::collections::HashMap;

use k8s_cri::v1 as cri;

use crate::cri::{Cri, CriError};
use crate::spec::{CONTAINER_HASH, CONTAINER_NAME, POD_UID, RESTART_COUNT};
use crate::status::{ContainerRecord, Observed, SandboxRecord, State};

fn state(value: i32) -> State {
    match cri::ContainerState::try_from(value) {
        Ok(cri::ContainerState::ContainerCreated) => State::Created,
        Ok(cri::ContainerState::ContainerRunning) => State::Running,
        Ok(cri::ContainerState::ContainerExited) => State::Exited,
        _ => State::Unknown,
    }
}

fn uid_filter(uid: &str) -> HashMap<String, String> {
    HashMap::from([(POD_UID.to_owned(), uid.to_owned())])
}

/// Everything the runtime holds for the pod with `uid`, newest first. Only each container
/// name's two newest containers are read in full (the current one and the one before, for
/// `lastState`); older ones carry only their identity and state.
pub async fn observe(cri: &Cri, uid: &str) -> Result<Observed, CriError> {
    let mut runtime = cri.runtime.clone();
    let mut sandboxes = runtime
        .list_pod_sandbox(cri::ListPodSandboxRequest {
            filter: Some(cri::PodSandboxFilter {
                label_selector: uid_filter(uid),
                ..cri::PodSandboxFilter::default()
            }),
        })
        .await?
        .into_inner()
        .items;
    sandboxes.sort_by_key(|s| std::cmp::Reverse(s.created_at));
    let mut sandbox_records = Vec::with_capacity(sandboxes.len());
    for (index, sandbox) in sandboxes.iter().enumerate() {
        let ready = sandbox.state == cri::PodSandboxState::SandboxReady as i32;
        let (mut ip, mut additional_ips) = (String::new(), Vec::new());
        if index == 0 && ready {
            let status = runtime
                .pod_sandbox_status(cri::PodSandboxStatusRequest {
                    pod_sandbox_id: sandbox.id.clone(),
                    verbose: false,
                })
                .await?
                .into_inner();
            if let Some(network) = status.status.and_then(|s| s.network) {
                ip = network.ip;
                additional_ips = network.additional_ips.into_iter().map(|i| i.ip).collect();
            }
        }
        sandbox_records.push(SandboxRecord {
            id: sandbox.id.clone(),
            ready,
            ip,
            additional_ips,
            created_at: sandbox.created_at,
            attempt: sandbox.metadata.as_ref().map_or(0, |m| m.attempt),
        });
    }
    let mut containers = runtime
        .list_containers(cri::ListContainersRequest {
            filter: Some(cri::ContainerFilter {
                label_selector: uid_filter(uid),
                ..cri::ContainerFilter::default()
            }),
        })
        .await?
        .into_inner()
        .containers;
    containers.sort_by_key(|c| std::cmp::Reverse(c.created_at));
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut records = Vec::with_capacity(containers.len());
    for container in containers {
        let name = container
            .labels
            .get(CONTAINER_NAME)
            .cloned()
            .unwrap_or_default();
        let restart_count = container
            .annotations
            .get(RESTART_COUNT)
            .and_then(|c| c.parse().ok())
            .unwrap_or_default();
        let hash = container
            .annotations
            .get(CONTAINER_HASH)
            .cloned()
            .unwrap_or_default();
        let mut record = ContainerRecord {
            id: container.id.clone(),
            name: name.clone(),
            sandbox_id: container.pod_sandbox_id.clone(),
            state: state(container.state),
            created_at: container.created_at,
            started_at: 0,
            finished_at: 0,
            exit_code: 0,
            reason: String::new(),
            message: String::new(),
            image_ref: container.image_ref.clone(),
            hash,
            restart_count,
        };
        let count = seen.entry(name).or_default();
        *count += 1;
        if *count <= 2 {
            let status = runtime
                .container_status(cri::ContainerStatusRequest {
                    container_id: container.id.clone(),
                    verbose: false,
                })
                .await;
            match status {
                Ok(response) => {
                    if let Some(s) = response.into_inner().status {
                        record.state = state(s.state);
                        record.started_at = s.started_at;
                        record.finished_at = s.finished_at;
                        record.exit_code = s.exit_code;
                        record.reason = s.reason;
                        record.message = s.message;
                        if !s.image_ref.is_empty() {
                            record.image_ref = s.image_ref;
                        }
                    }
                }
                // Removed between the list and now.
                Err(status) if status.code() == tonic::Code::NotFound => continue,
                Err(status) => return Err(status.into()),
            }
        }
        records.push(record);
    }
    Ok(Observed {
        sandboxes: sandbox_records,
        containers: records,
    })
}

/// A fingerprint of every pod's runtime state (sandbox and container IDs and states), by pod
/// UID, from one listing of the whole runtime: the agent's relist, which wakes the worker of
/// each pod whose fingerprint changed.
pub async fn fingerprints(cri: &Cri) -> Result<HashMap<String, u64>, CriError> {
    let mut runtime = cri.runtime.clone();
    let sandboxes = runtime
        .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
        .await?
        .into_inner()
        .items;
    let containers = runtime
        .list_containers(cri::ListContainersRequest { filter: None })
        .await?
        .into_inner()
        .containers;
    let mut items: Vec<(String, String, i32)> = sandboxes
        .into_iter()
        .filter_map(|s| Some((s.labels.get(POD_UID)?.clone(), s.id, s.state)))
        .chain(
            containers
                .into_iter()
                .filter_map(|c| Some((c.labels.get(POD_UID)?.clone(), c.id, c.state + 10))),
        )
        .collect();
    items.sort();
    let mut prints: HashMap<String, u64> = HashMap::new();
    for (uid, id, state) in items {
        let print = prints.entry(uid).or_insert(crate::FNV_OFFSET);
        *print = crate::fnv1a(*print, id.bytes().chain(state.to_le_bytes()));
    }
    Ok(prints)
}

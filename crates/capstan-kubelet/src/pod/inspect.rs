//! Reading a pod's state out of the runtime, and the runtime calls the workers make, in the
//! agent's terms ([`Observed`] records).

use std::collections::HashMap;

use k8s_cri::v1 as cri;

use crate::pod::status::{ContainerRecord, Observed, SandboxRecord, State};
use crate::runtime::cri::{Cri, CriError};
use crate::spec::{
    CONTAINER_HASH, CONTAINER_NAME, POD_UID, RESTART_COUNT, TERMINATION_MESSAGE_PATH,
    TERMINATION_MESSAGE_POLICY,
};

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
                        record.message = if record.state == State::Exited {
                            termination_message(&s).await
                        } else {
                            s.message.clone()
                        };
                        record.reason = s.reason;
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

/// The most of a termination message kept (upstream's 4 KiB).
const MAX_MESSAGE: u64 = 4096;
/// The log lines a FallbackToLogsOnError message is taken from.
const MESSAGE_LOG_LINES: i64 = 80;
/// The most of the log a FallbackToLogsOnError message keeps.
const MESSAGE_LOG_BYTES: usize = 2048;

/// The message of an exited container, as the kubelet reports it: the runtime's message,
/// enriched with what the container wrote to its termination message file (its last 4 KiB),
/// or, when its policy is FallbackToLogsOnError, it failed and wrote nothing there, the end of
/// its log (its last 80 lines, at most 2 KiB).
pub async fn termination_message(status: &cri::ContainerStatus) -> String {
    let path = status
        .annotations
        .get(TERMINATION_MESSAGE_PATH)
        .map(String::as_str)
        .unwrap_or_default();
    let fallback = status
        .annotations
        .get(TERMINATION_MESSAGE_POLICY)
        .is_some_and(|p| p == "FallbackToLogsOnError")
        && status.exit_code != 0
        && status.reason != "ContainerCannotRun";
    let (mut written, check_logs) = if path.is_empty() {
        (String::new(), fallback)
    } else {
        match status.mounts.iter().find(|m| m.container_path == path) {
            None => (String::new(), fallback),
            Some(mount) => match read_tail(std::path::Path::new(&mount.host_path), MAX_MESSAGE) {
                Ok(data) => {
                    let empty = data.is_empty();
                    (
                        String::from_utf8_lossy(&data).into_owned(),
                        fallback && empty,
                    )
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => (String::new(), fallback),
                Err(e) => (
                    format!("Error on reading termination log {}: {e}", mount.host_path),
                    false,
                ),
            },
        }
    };
    if check_logs {
        written = log_tail(std::path::Path::new(&status.log_path)).await;
    }
    let mut message = status.message.clone();
    if !written.is_empty() {
        if !message.is_empty() {
            message.push_str(": ");
        }
        message.push_str(&written);
    }
    message
}

/// The last `most` bytes of a file.
fn read_tail(path: &std::path::Path, most: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Read as _, Seek as _};
    let mut file = std::fs::File::open(path)?;
    let length = file.metadata()?.len();
    if length > most {
        file.seek(std::io::SeekFrom::Start(length - most))?;
    }
    let mut data = Vec::new();
    file.take(most).read_to_end(&mut data)?;
    Ok(data)
}

/// What a container logged last, from its CRI log file: the last 80 lines, at most their
/// last 2 KiB (as upstream reads them, through its log reader into a small ring buffer).
pub async fn log_tail(path: &std::path::Path) -> String {
    use futures::{FutureExt as _, StreamExt as _};
    let options = crate::runtime::logs::LogOptions {
        tail_lines: Some(MESSAGE_LOG_LINES),
        ..crate::runtime::logs::LogOptions::default()
    };
    let mut chunks =
        crate::runtime::logs::read(path.to_path_buf(), options, || async { false }.boxed());
    let mut out: Vec<u8> = Vec::new();
    while let Some(Ok(chunk)) = chunks.next().await {
        out.extend_from_slice(&chunk);
        if out.len() > MESSAGE_LOG_BYTES {
            out.drain(..out.len() - MESSAGE_LOG_BYTES);
        }
    }
    String::from_utf8_lossy(&out).into_owned()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn exited(dir: &std::path::Path, policy: &str, exit_code: i32) -> cri::ContainerStatus {
        cri::ContainerStatus {
            exit_code,
            annotations: HashMap::from([
                (
                    TERMINATION_MESSAGE_PATH.to_owned(),
                    "/dev/termination-log".to_owned(),
                ),
                (TERMINATION_MESSAGE_POLICY.to_owned(), policy.to_owned()),
            ]),
            mounts: vec![cri::Mount {
                container_path: "/dev/termination-log".to_owned(),
                host_path: dir.join("message").display().to_string(),
                ..cri::Mount::default()
            }],
            log_path: dir.join("0.log").display().to_string(),
            ..cri::ContainerStatus::default()
        }
    }

    #[tokio::test]
    async fn termination_messages_come_from_the_file_or_the_log() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let log: String = (0..100)
            .map(|i| format!("2024-01-01T00:00:00.000000000Z stdout F line {i}\n"))
            .collect::<String>()
            + "2024-01-01T00:00:00.000000000Z stderr P no newline\n";
        std::fs::write(dir.path().join("0.log"), log)?;
        // No file written: nothing, or the log's end on failure with FallbackToLogsOnError.
        assert_eq!(
            termination_message(&exited(dir.path(), "File", 1)).await,
            ""
        );
        assert_eq!(
            termination_message(&exited(dir.path(), "FallbackToLogsOnError", 0)).await,
            ""
        );
        let tail = termination_message(&exited(dir.path(), "FallbackToLogsOnError", 1)).await;
        assert!(tail.ends_with("line 99\nno newline"), "{tail:?}");
        assert!(tail.len() <= 2048);
        assert!(!tail.contains("line 20\n"), "only the last 80 lines");
        // An empty file falls back too; a written one wins, its last 4 KiB kept.
        std::fs::write(dir.path().join("message"), "")?;
        let tail = termination_message(&exited(dir.path(), "FallbackToLogsOnError", 1)).await;
        assert!(tail.ends_with("no newline"));
        std::fs::write(dir.path().join("message"), "bye")?;
        assert_eq!(
            termination_message(&exited(dir.path(), "FallbackToLogsOnError", 1)).await,
            "bye"
        );
        let mut status = exited(dir.path(), "File", 0);
        status.message = "runtime says".to_owned();
        assert_eq!(termination_message(&status).await, "runtime says: bye");
        std::fs::write(dir.path().join("message"), "x".repeat(5000) + "end")?;
        let long = termination_message(&exited(dir.path(), "File", 0)).await;
        assert_eq!(long.len(), 4096);
        assert!(long.ends_with("end"));
        Ok(())
    }
}

//! The events the node agent writes, as upstream's kubelet writes them: the same reasons and
//! messages, about the same objects (a container's events name the pod with the container's
//! field path, so that `kubectl describe pod` lists them), from source `kubelet` on the node.
//!
//! Writing goes through capstan-client's [`EventRecorder`], which folds repeats into counts and
//! never makes the caller wait.

use capstan_client::events::{EventRecorder, EventType};
use k8s_openapi::api::core::v1::{ObjectReference, Pod};

/// The event reasons the kubelet uses (upstream's `pkg/kubelet/events`).
pub mod reason {
    /// A container was created.
    pub const CREATED: &str = "Created";
    /// A container was started.
    pub const STARTED: &str = "Started";
    /// Something about a container failed (creating, starting or pulling for it).
    pub const FAILED: &str = "Failed";
    /// A container is being stopped.
    pub const KILLING: &str = "Killing";
    /// A container, or an image pull, waits in back-off.
    pub const BACK_OFF: &str = "BackOff";
    /// An image is being pulled.
    pub const PULLING: &str = "Pulling";
    /// An image was pulled, or was already there.
    pub const PULLED: &str = "Pulled";
    /// An image is missing and its pull policy is Never.
    pub const ERR_IMAGE_NEVER_PULL: &str = "ErrImageNeverPull";
    /// A probe failed.
    pub const UNHEALTHY: &str = "Unhealthy";
    /// A probe succeeded with a warning.
    pub const PROBE_WARNING: &str = "ProbeWarning";
    /// A postStart hook failed.
    pub const FAILED_POST_START_HOOK: &str = "FailedPostStartHook";
    /// A preStop hook failed.
    pub const FAILED_PRE_STOP_HOOK: &str = "FailedPreStopHook";
    /// The pod's sandbox could not be created.
    pub const FAILED_CREATE_POD_SANDBOX: &str = "FailedCreatePodSandBox";
    /// The pod's sandbox died and is replaced.
    pub const SANDBOX_CHANGED: &str = "SandboxChanged";
    /// A volume could not be set up.
    pub const FAILED_MOUNT: &str = "FailedMount";
    /// The kubelet started.
    pub const STARTING: &str = "Starting";
    /// The node became ready.
    pub const NODE_READY: &str = "NodeReady";
    /// The node stopped being ready.
    pub const NODE_NOT_READY: &str = "NodeNotReady";
}

/// The kubelet's event writer; cheap to clone.
#[derive(Clone, Debug)]
pub struct Events {
    recorder: EventRecorder,
    node: String,
}

impl Events {
    /// Starts writing events as the kubelet of `node`. Must be called within a Tokio runtime.
    pub fn start(client: kube::Client, node: &str) -> Events {
        Events {
            recorder: EventRecorder::start_on_host(client, "kubelet", node),
            node: node.to_owned(),
        }
    }

    /// An event about `object`.
    pub fn record(&self, object: ObjectReference, kind: EventType, reason: &str, message: String) {
        self.recorder.record(object, kind, reason, message);
    }

    /// An event about `pod` as a whole.
    pub fn pod(&self, pod: &Pod, kind: EventType, reason: &str, message: String) {
        self.recorder.record(pod_ref(pod), kind, reason, message);
    }

    /// An event about container `container` of `pod`.
    pub fn container(
        &self,
        pod: &Pod,
        container: &str,
        kind: EventType,
        reason: &str,
        message: String,
    ) {
        self.recorder
            .record(container_ref(pod, container), kind, reason, message);
    }

    /// An event about this node.
    pub fn node(&self, kind: EventType, reason: &str, message: String) {
        self.recorder
            .record(node_ref(&self.node), kind, reason, message);
    }
}

/// A reference to `pod`, as events name it.
pub fn pod_ref(pod: &Pod) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".to_owned()),
        kind: Some("Pod".to_owned()),
        namespace: pod.metadata.namespace.clone(),
        name: pod.metadata.name.clone(),
        uid: pod.metadata.uid.clone(),
        resource_version: pod.metadata.resource_version.clone(),
        field_path: None,
    }
}

/// A reference to container `name` of `pod`: the pod, with the container's field path
/// (`spec.containers{name}`, `spec.initContainers{name}` or `spec.ephemeralContainers{name}`).
pub fn container_ref(pod: &Pod, name: &str) -> ObjectReference {
    let spec = pod.spec.as_ref();
    let list = if spec.is_some_and(|s| s.containers.iter().any(|c| c.name == name)) {
        "containers"
    } else if spec
        .and_then(|s| s.init_containers.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.name == name))
    {
        "initContainers"
    } else if spec
        .and_then(|s| s.ephemeral_containers.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.name == name))
    {
        "ephemeralContainers"
    } else {
        return pod_ref(pod);
    };
    ObjectReference {
        field_path: Some(format!("spec.{list}{{{name}}}")),
        ..pod_ref(pod)
    }
}

/// A reference to node `name`; upstream's kubelet names its node by name in the UID too.
pub fn node_ref(name: &str) -> ObjectReference {
    ObjectReference {
        kind: Some("Node".to_owned()),
        name: Some(name.to_owned()),
        uid: Some(name.to_owned()),
        ..ObjectReference::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, EphemeralContainer, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod() -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("ns".into()),
                uid: Some("u1".into()),
                resource_version: Some("7".into()),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "app".into(),
                    ..Container::default()
                }],
                init_containers: Some(vec![Container {
                    name: "setup".into(),
                    ..Container::default()
                }]),
                ephemeral_containers: Some(vec![EphemeralContainer {
                    name: "debug".into(),
                    ..EphemeralContainer::default()
                }]),
                ..PodSpec::default()
            }),
            ..Pod::default()
        }
    }

    #[test]
    fn container_events_name_the_pod_and_the_container_field() {
        let pod = pod();
        let app = container_ref(&pod, "app");
        assert_eq!(app.kind.as_deref(), Some("Pod"));
        assert_eq!(app.api_version.as_deref(), Some("v1"));
        assert_eq!(app.uid.as_deref(), Some("u1"));
        assert_eq!(app.resource_version.as_deref(), Some("7"));
        assert_eq!(app.field_path.as_deref(), Some("spec.containers{app}"));
        assert_eq!(
            container_ref(&pod, "setup").field_path.as_deref(),
            Some("spec.initContainers{setup}")
        );
        assert_eq!(
            container_ref(&pod, "debug").field_path.as_deref(),
            Some("spec.ephemeralContainers{debug}")
        );
        assert_eq!(container_ref(&pod, "gone").field_path, None);
        let node = node_ref("n1");
        assert_eq!(
            (node.kind.as_deref(), node.uid.as_deref()),
            (Some("Node"), Some("n1"))
        );
    }
}

//! Builders of deployments, replica sets and pods for the tests, and a [`Writes`] fake that
//! records every write and answers as the API would.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use capstan_client::events::EventType;
use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, ReplicaSet, ReplicaSetSpec, ReplicaSetStatus,
    RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;

use super::Writes;
use super::sync::controller_ref;
use super::util::*;

/// A time `secs` after the epoch.
pub fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(secs).unwrap_or_default()
}

/// Int-or-string from a string like "25%" or a number.
pub fn ios(v: &str) -> IntOrString {
    match v.parse() {
        Ok(i) => IntOrString::Int(i),
        Err(_) => IntOrString::String(v.to_owned()),
    }
}

/// A pod template running `image`, labelled `app: foo`.
pub fn template(image: &str) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(BTreeMap::from([("app".to_owned(), "foo".to_owned())])),
            ..Default::default()
        }),
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "c".to_owned(),
                image: Some(image.to_owned()),
                ..Default::default()
            }],
            ..Default::default()
        }),
    }
}

/// A rolling deployment `foo` of `replicas` running `image`, with the API's defaults (25%/25%,
/// history 10, deadline 600 s), generation 1.
pub fn deployment(replicas: i32, image: &str) -> Deployment {
    Deployment {
        metadata: ObjectMeta {
            name: Some("foo".to_owned()),
            namespace: Some("ns".to_owned()),
            uid: Some("d-uid".to_owned()),
            generation: Some(1),
            resource_version: Some("1".to_owned()),
            ..Default::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(BTreeMap::from([("app".to_owned(), "foo".to_owned())])),
                match_expressions: None,
            },
            template: template(image),
            strategy: Some(DeploymentStrategy {
                type_: Some(ROLLING_UPDATE.to_owned()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_surge: Some(ios("25%")),
                    max_unavailable: Some(ios("25%")),
                }),
            }),
            revision_history_limit: Some(10),
            progress_deadline_seconds: Some(600),
            ..Default::default()
        }),
        status: None,
    }
}

/// Sets maxSurge and maxUnavailable.
pub fn with_fenceposts(mut d: Deployment, surge: &str, unavailable: &str) -> Deployment {
    if let Some(strategy) = d.spec.as_mut().and_then(|s| s.strategy.as_mut()) {
        strategy.rolling_update = Some(RollingUpdateDeployment {
            max_surge: Some(ios(surge)),
            max_unavailable: Some(ios(unavailable)),
        });
    }
    d
}

/// Makes the deployment use `Recreate`.
pub fn recreate(mut d: Deployment) -> Deployment {
    if let Some(spec) = d.spec.as_mut() {
        spec.strategy = Some(DeploymentStrategy {
            type_: Some(RECREATE.to_owned()),
            rolling_update: None,
        });
    }
    d
}

/// A replica set of deployment `d` for the template running `image`, created at `created`,
/// asking for `replicas` of which `available` are available (and running), at `revision`.
pub fn rs(
    d: &Deployment,
    image: &str,
    replicas: i32,
    available: i32,
    created: i64,
    revision: i64,
) -> ReplicaSet {
    let mut t = template(image);
    let hash = compute_hash(&t, None);
    let labels = with_label(
        t.metadata.as_ref().and_then(|m| m.labels.as_ref()),
        HASH_LABEL,
        &hash,
    );
    if let Some(meta) = t.metadata.as_mut() {
        meta.labels = Some(labels.clone());
    }
    let mut selector = spec(d).selector.clone();
    selector.match_labels = Some(with_label(
        selector.match_labels.as_ref(),
        HASH_LABEL,
        &hash,
    ));
    let name = format!("foo-{hash}");
    ReplicaSet {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some("ns".to_owned()),
            uid: Some(format!("uid-{name}")),
            labels: Some(labels),
            creation_timestamp: Some(Time(at(created))),
            owner_references: Some(vec![controller_ref(d)]),
            annotations: Some(BTreeMap::from([
                (REVISION_ANNOTATION.to_owned(), revision.to_string()),
                (
                    DESIRED_REPLICAS_ANNOTATION.to_owned(),
                    d_replicas(d).to_string(),
                ),
                (
                    MAX_REPLICAS_ANNOTATION.to_owned(),
                    (d_replicas(d) + max_surge(d)).to_string(),
                ),
            ])),
            resource_version: Some("1".to_owned()),
            generation: Some(1),
            ..Default::default()
        },
        spec: Some(ReplicaSetSpec {
            replicas: Some(replicas),
            selector,
            template: Some(t),
            min_ready_seconds: None,
        }),
        status: Some(ReplicaSetStatus {
            replicas,
            available_replicas: Some(available),
            ready_replicas: Some(available),
            observed_generation: Some(1),
            ..Default::default()
        }),
    }
}

/// A replica set named `name` of `replicas` with a max-replicas annotation, created at
/// `created` (for the proportional scaling tables).
pub fn sized(name: &str, replicas: i32, max_annotation: Option<i32>, created: i64) -> ReplicaSet {
    let mut annotations = BTreeMap::new();
    if let Some(max) = max_annotation {
        annotations.insert(MAX_REPLICAS_ANNOTATION.to_owned(), max.to_string());
    }
    ReplicaSet {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            creation_timestamp: Some(Time(at(created))),
            annotations: Some(annotations),
            ..Default::default()
        },
        spec: Some(ReplicaSetSpec {
            replicas: Some(replicas),
            ..Default::default()
        }),
        status: None,
    }
}

/// A pod controlled by `rs` in `phase`.
pub fn pod(rs: &ReplicaSet, name: &str, phase: &str) -> Arc<Pod> {
    let mut owner = controller_ref(&Deployment::default());
    owner.kind = "ReplicaSet".to_owned();
    owner.name = rs.metadata.name.clone().unwrap_or_default();
    owner.uid = rs.metadata.uid.clone().unwrap_or_default();
    Arc::new(Pod {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some("ns".to_owned()),
            labels: rs.metadata.labels.clone(),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: None,
        status: Some(PodStatus {
            phase: Some(phase.to_owned()),
            ..Default::default()
        }),
    })
}

/// One recorded write.
#[derive(Debug, Clone)]
pub enum Call {
    /// A replica set was created.
    Create(ReplicaSet),
    /// A replica set was replaced.
    Update(ReplicaSet),
    /// A replica set was patched.
    Patch(String, serde_json::Value),
    /// A replica set was deleted.
    Delete(String),
    /// A deployment status was written.
    Status(Deployment),
    /// A deployment was replaced.
    UpdateDeployment(Deployment),
    /// An event was recorded.
    Event(EventType, String, String),
}

/// Records writes and answers like the API: writes succeed and bump the resourceVersion; a
/// create of a name in `existing` fails with AlreadyExists.
#[derive(Debug, Default)]
pub struct Fake {
    /// What was written, in order.
    pub calls: Mutex<Vec<Call>>,
    /// Replica sets the API and the cache already hold (for create conflicts).
    pub existing: Vec<ReplicaSet>,
    /// What a fresh GET of the deployment returns (default: the deployment is there).
    pub fresh: Option<Deployment>,
}

fn bump(meta: &mut ObjectMeta) {
    let rv: u64 = meta
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    meta.resource_version = Some((rv + 1).to_string());
}

fn api_error(code: u16, reason: &str) -> kube::Error {
    kube::Error::Api(Box::new(kube::core::Status {
        code,
        reason: reason.to_owned(),
        message: format!("{reason} ({code})"),
        ..Default::default()
    }))
}

impl Fake {
    fn push(&self, call: Call) {
        self.calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(call);
    }

    /// The recorded writes.
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The events recorded, as `"Type Reason: message"`.
    pub fn events(&self) -> Vec<String> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Event(kind, reason, message) => Some(format!("{kind:?} {reason}: {message}")),
                _ => None,
            })
            .collect()
    }

    /// The last status written.
    pub fn last_status(&self) -> Option<Deployment> {
        self.calls().into_iter().rev().find_map(|c| match c {
            Call::Status(d) => Some(d),
            _ => None,
        })
    }

    /// The replica sets created or updated, as `(name, replicas)`.
    pub fn scaled(&self) -> Vec<(String, i32)> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Create(rs) | Call::Update(rs) => Some((
                    rs.metadata.name.clone().unwrap_or_default(),
                    rs_replicas(&rs),
                )),
                _ => None,
            })
            .collect()
    }
}

impl Writes for Fake {
    async fn create_rs(&self, rs: &ReplicaSet) -> Result<ReplicaSet, kube::Error> {
        if self
            .existing
            .iter()
            .any(|e| e.metadata.name == rs.metadata.name)
        {
            return Err(api_error(409, "AlreadyExists"));
        }
        self.push(Call::Create(rs.clone()));
        let mut created = rs.clone();
        created.metadata.uid = Some(format!(
            "uid-{}",
            rs.metadata.name.as_deref().unwrap_or_default()
        ));
        created.metadata.resource_version = Some("1".to_owned());
        Ok(created)
    }

    async fn update_rs(&self, rs: &ReplicaSet) -> Result<ReplicaSet, kube::Error> {
        self.push(Call::Update(rs.clone()));
        let mut updated = rs.clone();
        bump(&mut updated.metadata);
        Ok(updated)
    }

    async fn patch_rs(
        &self,
        _namespace: &str,
        name: &str,
        patch: serde_json::Value,
    ) -> Result<(), kube::Error> {
        self.push(Call::Patch(name.to_owned(), patch));
        Ok(())
    }

    async fn delete_rs(&self, _namespace: &str, name: &str) -> Result<(), kube::Error> {
        self.push(Call::Delete(name.to_owned()));
        Ok(())
    }

    async fn update_status(&self, d: &Deployment) -> Result<Deployment, kube::Error> {
        self.push(Call::Status(d.clone()));
        let mut updated = d.clone();
        bump(&mut updated.metadata);
        Ok(updated)
    }

    async fn update(&self, d: &Deployment) -> Result<Deployment, kube::Error> {
        self.push(Call::UpdateDeployment(d.clone()));
        let mut updated = d.clone();
        bump(&mut updated.metadata);
        Ok(updated)
    }

    async fn get_deployment(
        &self,
        _namespace: &str,
        _name: &str,
    ) -> Result<Deployment, kube::Error> {
        self.fresh.clone().ok_or_else(|| api_error(404, "NotFound"))
    }

    fn cached_rs(&self, _namespace: &str, name: &str) -> Option<ReplicaSet> {
        self.existing
            .iter()
            .find(|rs| rs.metadata.name.as_deref() == Some(name))
            .cloned()
    }

    fn event(&self, _d: &Deployment, kind: EventType, reason: &str, message: String) {
        self.push(Call::Event(kind, reason.to_owned(), message));
    }
}

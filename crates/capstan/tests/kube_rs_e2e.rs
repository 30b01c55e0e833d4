//! End to end: a kube-rs client against the real `capstan server`, on SQLite and on a real etcd.
//! Typed CRUD through `kube::Api`, a `watcher` + `reflector` keeping a store in sync (with the
//! list-then-watch protocol and with streaming lists), and a watcher that carries on across a
//! server restart.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;

use common::*;

/// How long a store may take to reflect a change (generous: the machine is shared).
const CONVERGE: Duration = Duration::from_secs(30);

async fn client(kubeconfig: &Path) -> Client {
    common::kube_client(kubeconfig).await
}

async fn create_namespace(client: &Client, name: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    let created = namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    assert_eq!(created.name_any(), name);
}

fn config_map(name: &str, labels: &[(&str, &str)], data: &[(&str, &str)]) -> ConfigMap {
    let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
    let data: BTreeMap<&str, &str> = data.iter().copied().collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "data": data,
    }))
    .unwrap()
}

/// The ConfigMap every namespace is given (the cluster's CA bundle); the tests leave it out.
const ROOT_CA: &str = "kube-root-ca.crt";

fn names(list: impl IntoIterator<Item = ConfigMap>) -> Vec<String> {
    let mut names: Vec<String> = list
        .into_iter()
        .map(|cm| cm.name_any())
        .filter(|name| name != ROOT_CA)
        .collect();
    names.sort();
    names
}

fn api_code(result: Result<impl std::fmt::Debug, kube::Error>) -> (u16, String) {
    match result {
        Err(kube::Error::Api(status)) => (status.code, status.reason.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Typed CRUD on ConfigMaps and Deployments.
async fn typed_crud(client: &Client) {
    let ns = "kube-rs-crud";
    create_namespace(client, ns).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let pp = PostParams::default();

    // create
    let alpha = config_map(
        "alpha",
        &[("app", "kubers"), ("tier", "web")],
        &[("color", "blue"), ("size", "large")],
    );
    let created = cms.create(&pp, &alpha).await.unwrap();
    assert_eq!(created.name_any(), "alpha");
    assert_eq!(created.namespace().as_deref(), Some(ns));
    assert!(created.uid().is_some_and(|uid| uid.len() == 36));
    let first_rv = created
        .resource_version()
        .expect("a resourceVersion on create");
    cms.create(
        &pp,
        &config_map(
            "beta",
            &[("app", "kubers"), ("tier", "db")],
            &[("color", "red")],
        ),
    )
    .await
    .unwrap();
    cms.create(&pp, &config_map("gamma", &[("app", "other")], &[]))
        .await
        .unwrap();
    let (code, reason) = api_code(cms.create(&pp, &alpha).await);
    assert_eq!((code, reason.as_str()), (409, "AlreadyExists"));

    // get
    let got = cms.get("alpha").await.unwrap();
    assert_eq!(got.data.as_ref().unwrap()["color"], "blue");
    assert_eq!(got.labels()["tier"], "web");
    assert_eq!(got.resource_version().as_deref(), Some(first_rv.as_str()));
    let (code, reason) = api_code(cms.get("missing").await);
    assert_eq!((code, reason.as_str()), (404, "NotFound"));
    assert!(cms.get_opt("missing").await.unwrap().is_none());

    // list, with label selectors
    let all = cms.list(&ListParams::default()).await.unwrap();
    assert!(
        all.metadata
            .resource_version
            .as_ref()
            .is_some_and(|rv| !rv.is_empty())
    );
    assert_eq!(names(all), ["alpha", "beta", "gamma"]);
    let kubers = cms
        .list(&ListParams::default().labels("app=kubers"))
        .await
        .unwrap();
    assert_eq!(names(kubers), ["alpha", "beta"]);
    let web = cms
        .list(&ListParams::default().labels("app=kubers,tier=web"))
        .await
        .unwrap();
    assert_eq!(names(web), ["alpha"]);
    let not_web = cms
        .list(&ListParams::default().labels("app,tier!=web"))
        .await
        .unwrap();
    assert_eq!(names(not_web), ["beta", "gamma"]);
    let paged = cms.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(paged.items.len(), 2);
    let rest = cms
        .list(
            &ListParams::default().limit(2).continue_token(
                paged
                    .metadata
                    .continue_
                    .as_deref()
                    .expect("a continue token"),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        names(paged.items.into_iter().chain(rest.items)),
        ["alpha", "beta", "gamma"]
    );

    // replace: with the current resourceVersion it succeeds, with a stale one it is a conflict.
    let mut fresh = got.clone();
    fresh
        .data
        .as_mut()
        .unwrap()
        .insert("color".into(), "green".into());
    let replaced = cms.replace("alpha", &pp, &fresh).await.unwrap();
    assert_eq!(replaced.data.as_ref().unwrap()["color"], "green");
    assert_ne!(replaced.resource_version(), got.resource_version());
    let mut stale = got.clone();
    stale
        .data
        .as_mut()
        .unwrap()
        .insert("color".into(), "purple".into());
    let (code, reason) = api_code(cms.replace("alpha", &pp, &stale).await);
    assert_eq!((code, reason.as_str()), (409, "Conflict"));
    assert_eq!(
        cms.get("alpha").await.unwrap().data.unwrap()["color"],
        "green"
    );

    // merge patch: set one key, remove another with null.
    let patched = cms
        .patch(
            "alpha",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"color": "yellow", "size": null}})),
        )
        .await
        .unwrap();
    let data = patched.data.clone().unwrap();
    assert_eq!(data.get("color").map(String::as_str), Some("yellow"));
    assert!(!data.contains_key("size"), "{data:?}");
    assert_eq!(patched.labels()["app"], "kubers");

    // strategic merge patch on a Deployment: containers are merged by name.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "shop", "labels": {"app": "shop"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "shop"}},
            "template": {
                "metadata": {"labels": {"app": "shop"}},
                "spec": {"containers": [
                    {"name": "web", "image": "registry.local/web:1.0"},
                    {"name": "sidecar", "image": "registry.local/sidecar:1.0"},
                ]},
            },
        },
    }))
    .unwrap();
    deployments.create(&pp, &deployment).await.unwrap();
    let strategic = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "web", "image": "registry.local/web:2.0"},
    ]}}}});
    let patched = deployments
        .patch(
            "shop",
            &PatchParams::default(),
            &Patch::Strategic(strategic),
        )
        .await
        .unwrap();
    let containers: Vec<(String, Option<String>)> = patched
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .containers
        .into_iter()
        .map(|c| (c.name, c.image))
        .collect();
    assert_eq!(
        containers,
        [
            ("web".to_owned(), Some("registry.local/web:2.0".to_owned())),
            (
                "sidecar".to_owned(),
                Some("registry.local/sidecar:1.0".to_owned())
            ),
        ]
    );
    // The same body as a JSON merge patch replaces the list whole.
    let merge = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "web", "image": "registry.local/web:3.0"},
    ]}}}});
    let patched = deployments
        .patch("shop", &PatchParams::default(), &Patch::Merge(merge))
        .await
        .unwrap();
    let containers = patched.spec.unwrap().template.spec.unwrap().containers;
    assert_eq!(containers.len(), 1);
    assert_eq!(
        containers[0].image.as_deref(),
        Some("registry.local/web:3.0")
    );

    // delete
    // A ConfigMap's registry does not return the deleted object (upstream's
    // ReturnDeletedObject is off for it): the answer is a Success status naming it.
    let beta_uid = cms.get("beta").await.unwrap().uid();
    let status = cms.delete("beta", &DeleteParams::default()).await.unwrap();
    let status = status.right().expect("a Status for a deleted ConfigMap");
    assert!(status.is_success(), "{status:?}");
    let details = status.details.expect("the deleted object's details");
    assert_eq!(details.name, "beta");
    assert_eq!(details.kind, "configmaps");
    assert_eq!(Some(details.uid), beta_uid);
    let (code, _) = api_code(cms.get("beta").await);
    assert_eq!(code, 404);
    let (code, reason) = api_code(cms.delete("beta", &DeleteParams::default()).await);
    assert_eq!((code, reason.as_str()), (404, "NotFound"));
    assert_eq!(
        names(cms.list(&ListParams::default()).await.unwrap()),
        ["alpha", "gamma"]
    );
    deployments
        .delete("shop", &DeleteParams::default())
        .await
        .unwrap();
}

/// A reflector over one namespace's ConfigMaps, driven by a background task; the errors its
/// watcher reported (after which it retried with backoff).
struct Reflector {
    store: Store<ConfigMap>,
    errors: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Reflector {
    fn start(api: Api<ConfigMap>, config: watcher::Config) -> Reflector {
        let (store, writer) = reflector::store();
        let errors = Arc::new(Mutex::new(Vec::new()));
        let seen = errors.clone();
        let stream = reflector::reflector(writer, watcher(api, config)).default_backoff();
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                if let Err(e) = event {
                    seen.lock().unwrap().push(e.to_string());
                }
            }
        });
        Reflector {
            store,
            errors,
            task,
        }
    }

    async fn ready(&self) {
        tokio::time::timeout(CONVERGE, self.store.wait_until_ready())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "the store never got its initial list; watcher errors: {:?}",
                    self.errors()
                )
            })
            .expect("the writer is alive");
    }

    fn errors(&self) -> Vec<String> {
        self.errors.lock().unwrap().clone()
    }

    /// The store's objects, as name → data.
    fn state(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        self.store
            .state()
            .iter()
            .filter(|cm| cm.name_any() != ROOT_CA)
            .map(|cm| (cm.name_any(), cm.data.clone().unwrap_or_default()))
            .collect()
    }

    /// Waits until the store holds exactly `expected` (name → data), polling.
    async fn converges_to(&self, expected: &[(&str, &[(&str, &str)])]) {
        let expected: BTreeMap<String, BTreeMap<String, String>> = expected
            .iter()
            .map(|(name, data)| {
                let data = data
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect();
                ((*name).to_owned(), data)
            })
            .collect();
        let deadline = tokio::time::Instant::now() + CONVERGE;
        loop {
            let state = self.state();
            if state == expected {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the store did not converge\n  expected {expected:?}\n  has      {state:?}\n  watcher errors: {:?}",
                self.errors()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Reflector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A reflector follows creates, updates and deletes, with the list-then-watch protocol or with
/// a streaming list (`sendInitialEvents`).
async fn reflector_follows(client: &Client, ns: &str, config: watcher::Config) {
    let streaming = config.initial_list_strategy == watcher::InitialListStrategy::StreamingList;
    create_namespace(client, ns).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let pp = PostParams::default();
    for name in ["pre-1", "pre-2", "pre-3"] {
        cms.create(&pp, &config_map(name, &[("app", "kubers")], &[("n", name)]))
            .await
            .unwrap();
    }
    // Another namespace's objects stay out of the store.
    let default: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    default
        .create(&pp, &config_map(&format!("{ns}-elsewhere"), &[], &[]))
        .await
        .unwrap();

    if streaming {
        streaming_list_events(&cms).await;
    }
    let reflector = Reflector::start(cms.clone(), config);
    reflector.ready().await;
    // The initial objects are in the store as soon as it is ready (after the initial list, or
    // after the initial-events-end bookmark of a streaming list).
    assert_eq!(
        reflector
            .state()
            .keys()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        ["pre-1", "pre-2", "pre-3"]
    );
    reflector
        .converges_to(&[
            ("pre-1", &[("n", "pre-1")]),
            ("pre-2", &[("n", "pre-2")]),
            ("pre-3", &[("n", "pre-3")]),
        ])
        .await;

    cms.create(&pp, &config_map("new", &[], &[("n", "new")]))
        .await
        .unwrap();
    cms.patch(
        "pre-1",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"n": "changed"}})),
    )
    .await
    .unwrap();
    cms.delete("pre-2", &DeleteParams::default()).await.unwrap();
    reflector
        .converges_to(&[
            ("new", &[("n", "new")]),
            ("pre-1", &[("n", "changed")]),
            ("pre-3", &[("n", "pre-3")]),
        ])
        .await;

    let mut replaced = cms.get("pre-3").await.unwrap();
    replaced.data = Some([("n".to_owned(), "replaced".to_owned())].into());
    cms.replace("pre-3", &pp, &replaced).await.unwrap();
    cms.delete("new", &DeleteParams::default()).await.unwrap();
    reflector
        .converges_to(&[
            ("pre-1", &[("n", "changed")]),
            ("pre-3", &[("n", "replaced")]),
        ])
        .await;
    assert_eq!(
        reflector.errors(),
        Vec::<String>::new(),
        "no watcher errors without a restart"
    );
}

/// The protocol of a streaming list, as kube sends it (`sendInitialEvents=true`, bookmarks,
/// `resourceVersionMatch=NotOlderThan`): the namespace's objects as ADDED events, then a bookmark
/// annotated `k8s.io/initial-events-end`.
async fn streaming_list_events(cms: &Api<ConfigMap>) {
    let events = cms
        .watch(&WatchParams::streaming_lists().timeout(20), "0")
        .await
        .unwrap();
    let mut events = std::pin::pin!(events);
    let mut added = Vec::new();
    let bookmark = tokio::time::timeout(CONVERGE, async {
        loop {
            match events
                .next()
                .await
                .expect("the watch ended before the initial-events-end bookmark")
            {
                Ok(WatchEvent::Added(cm)) if cm.name_any() == ROOT_CA => {}
                Ok(WatchEvent::Added(cm)) => added.push(cm.name_any()),
                Ok(WatchEvent::Bookmark(bookmark)) => return bookmark,
                other => panic!("unexpected event in a streaming list: {other:?}"),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no initial-events-end bookmark; ADDED so far: {added:?}"));
    added.sort();
    assert_eq!(added, ["pre-1", "pre-2", "pre-3"]);
    assert_eq!(
        bookmark
            .metadata
            .annotations
            .get("k8s.io/initial-events-end")
            .map(String::as_str),
        Some("true"),
        "{:?}",
        bookmark.metadata.annotations
    );
    assert!(!bookmark.metadata.resource_version.is_empty());
}

/// Server-side apply through `Patch::Apply`, as controllers use it: create, re-apply, take a
/// field from another manager with `force`, drop a field, and a conflict as a 409.
async fn server_side_apply(client: &Client) {
    let ns = "kube-rs-apply";
    create_namespace(client, ns).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let desired = |image: &str, replicas: Option<i32>| {
        let mut spec = json!({
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": image}]}}
        });
        if let Some(replicas) = replicas {
            spec["replicas"] = replicas.into();
        }
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web"}, "spec": spec})
    };
    let operator = PatchParams::apply("web-operator");
    let created = deployments
        .patch("web", &operator, &Patch::Apply(desired("web:1", Some(2))))
        .await
        .unwrap();
    assert_eq!(created.spec.as_ref().unwrap().replicas, Some(2));
    let managers: Vec<(String, String)> = created
        .managed_fields()
        .iter()
        .map(|e| {
            (
                e.manager.clone().unwrap_or_default(),
                e.operation.clone().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(managers, [("web-operator".to_owned(), "Apply".to_owned())]);
    // Re-applying the same configuration writes nothing.
    let again = deployments
        .patch("web", &operator, &Patch::Apply(desired("web:1", Some(2))))
        .await
        .unwrap();
    assert_eq!(again.resource_version(), created.resource_version());
    // Another manager scales with a strategic merge patch; the operator's next apply of a
    // different replica count conflicts, and wins with force.
    deployments
        .patch(
            "web",
            &PatchParams {
                field_manager: Some("autoscaler".into()),
                ..PatchParams::default()
            },
            &Patch::Strategic(json!({"spec": {"replicas": 4}})),
        )
        .await
        .unwrap();
    let conflict = deployments
        .patch("web", &operator, &Patch::Apply(desired("web:2", Some(3))))
        .await;
    let Err(kube::Error::Api(status)) = conflict else {
        panic!("expected a conflict, got {conflict:?}");
    };
    let message = status.message;
    assert_eq!(status.code, 409, "{message}");
    assert!(
        message.contains("\"autoscaler\" using apps/v1: .spec.replicas"),
        "{message}"
    );
    let forced = deployments
        .patch(
            "web",
            &operator.clone().force(),
            &Patch::Apply(desired("web:2", Some(3))),
        )
        .await
        .unwrap();
    assert_eq!(forced.spec.as_ref().unwrap().replicas, Some(3));
    // Dropping replicas from the configuration gives it up; the default comes back.
    let dropped = deployments
        .patch("web", &operator, &Patch::Apply(desired("web:2", None)))
        .await
        .unwrap();
    assert_eq!(dropped.spec.as_ref().unwrap().replicas, Some(1));
    let image = dropped.spec.unwrap().template.spec.unwrap().containers[0]
        .image
        .clone();
    assert_eq!(image.as_deref(), Some("web:2"));
}

/// Metadata-only reads (`PartialObjectMetadata`), as metadata informers make them.
async fn metadata_only(client: &Client) {
    let ns = "kube-rs-meta";
    create_namespace(client, ns).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    cms.create(
        &PostParams::default(),
        &config_map("m", &[("tier", "x")], &[("big", "data")]),
    )
    .await
    .unwrap();
    let one = cms.get_metadata("m").await.unwrap();
    assert_eq!(one.labels().get("tier").map(String::as_str), Some("x"));
    let list = cms.list_metadata(&ListParams::default()).await.unwrap();
    let listed: Vec<String> = list
        .items
        .iter()
        .map(|m| m.name_any())
        .filter(|name| name != ROOT_CA)
        .collect();
    assert_eq!(listed, ["m"]);
    let metadata: Api<kube::core::PartialObjectMeta<ConfigMap>> =
        Api::namespaced(client.clone(), ns);
    let mut events = watcher::watcher(metadata, watcher::Config::default().labels("tier=x"))
        .default_backoff()
        .applied_objects()
        .boxed();
    let seen = tokio::time::timeout(CONVERGE, events.next())
        .await
        .expect("a metadata watcher event")
        .expect("the stream goes on")
        .expect("no watcher error");
    assert_eq!(seen.name_any(), "m");
}

fn run_on(datastore: &str) {
    let store = Datastore::start(datastore);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let flags = store.flags();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = Server::start_with(dir.path(), port, &flags);
    let kubeconfig = server.kubeconfig();

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let client = runtime.block_on(client(&kubeconfig));

    runtime.block_on(async {
        typed_crud(&client).await;
        server_side_apply(&client).await;
        metadata_only(&client).await;
        reflector_follows(&client, "kube-rs-watch", watcher::Config::default()).await;
        reflector_follows(
            &client,
            "kube-rs-stream",
            watcher::Config::default().streaming_lists(),
        )
        .await;
    });

    // A watcher carries on across a server restart: it sees a change made after it.
    let ns = "kube-rs-restart";
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let reflector = runtime.block_on(async {
        create_namespace(&client, ns).await;
        cms.create(
            &PostParams::default(),
            &config_map("before", &[], &[("n", "1")]),
        )
        .await
        .unwrap();
        let reflector = Reflector::start(cms.clone(), watcher::Config::default());
        reflector.ready().await;
        reflector.converges_to(&[("before", &[("n", "1")])]).await;
        reflector
    });
    // The watcher task runs on the runtime's workers while the server is down and back.
    server.stop();
    let server = Server::start_with(dir.path(), port, &flags);
    runtime.block_on(async {
        cms.create(
            &PostParams::default(),
            &config_map("after", &[], &[("n", "2")]),
        )
        .await
        .unwrap();
        cms.patch(
            "before",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"n": "3"}})),
        )
        .await
        .unwrap();
        reflector
            .converges_to(&[("after", &[("n", "2")]), ("before", &[("n", "3")])])
            .await;
        cms.delete("after", &DeleteParams::default()).await.unwrap();
        reflector.converges_to(&[("before", &[("n", "3")])]).await;
    });
    drop(reflector);
    runtime.shutdown_timeout(Duration::from_secs(5));
    server.stop();
}

#[test]
fn kube_rs_on_sqlite() {
    run_on("sqlite");
}

#[test]
fn kube_rs_on_etcd() {
    run_on("etcd");
}

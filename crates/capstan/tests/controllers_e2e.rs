//! End to end: the controllers inside `capstan server`, with simulated nodes (`capstan sim`),
//! driven by stock kubectl. ReplicaSets and ReplicationControllers scale up and down, adopt
//! matching orphans and release pods that stop matching; disruption budgets keep their status and
//! refuse an eviction that would break them; cascading deletion works in all three
//! modes; a deleted namespace takes everything in it, of every kind; every
//! namespace gets its `default` ServiceAccount; Deployments roll out within maxSurge and
//! maxUnavailable under `kubectl rollout`; lost nodes are tainted and their pods evicted; a
//! DaemonSet follows nodes, a StatefulSet scales in order, a Job completes through a failure and
//! a CronJob fires; on etcd the controllers take their Lease.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::Path;

use common::{
    Datastore, Server, Sim, assert_refused, eventually, free_port, kubectl_any, kubectl_ok,
    kubectl_stdin, kubectl_stdin_ok,
};

const KUBECTL: &str = "default";

fn apply(kc: &Path, manifest: &str) {
    kubectl_stdin_ok(KUBECTL, kc, &["apply", "-f", "-"], manifest);
}

fn get(kc: &Path, args: &[&str]) -> String {
    String::from_utf8_lossy(&kubectl_any(KUBECTL, kc, args).stdout).into_owned()
}

/// The pods labelled `app=<app>` that are not being deleted, with their first owner's name.
fn pods_of(kc: &Path, ns: &str, app: &str) -> Vec<(String, String)> {
    let out = get(
        kc,
        &[
            "-n",
            ns,
            "get",
            "pods",
            "-l",
            &format!("app={app}"),
            "-o",
            "jsonpath={range .items[*]}{.metadata.name} {.metadata.ownerReferences[0].name} {.metadata.deletionTimestamp}{\"\\n\"}{end}",
        ],
    );
    out.lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let (name, owner, deleting) = (
                fields.next()?,
                fields.next().unwrap_or(""),
                fields.next().unwrap_or(""),
            );
            deleting
                .is_empty()
                .then(|| (name.to_owned(), owner.to_owned()))
        })
        .collect()
}

/// Waits until `count` pods labelled `app=<app>` exist, all owned by `owner` (or by none
/// when `owner` is empty).
fn wait_pods(kc: &Path, ns: &str, app: &str, owner: &str, count: usize) -> Vec<String> {
    eventually(&format!("{count} pods of {app} owned by {owner:?}"), || {
        let pods = pods_of(kc, ns, app);
        (pods.len() == count && pods.iter().all(|(_, o)| o == owner))
            .then(|| pods.into_iter().map(|(n, _)| n).collect())
    })
}

fn replica_set(ns: &str, name: &str, replicas: u32) -> String {
    format!(
        "apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  replicas: {replicas}\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec: {{containers: [{{name: c, image: busybox}}]}}\n"
    )
}

fn scaling(kc: &Path) {
    kubectl_ok(KUBECTL, kc, &["create", "namespace", "scale"]);
    apply(kc, &replica_set("scale", "web", 3));
    wait_pods(kc, "scale", "web", "web", 3);
    eventually("readyReplicas 3", || {
        (get(
            kc,
            &[
                "-n",
                "scale",
                "get",
                "rs",
                "web",
                "-o",
                "jsonpath={.status.readyReplicas}",
            ],
        ) == "3")
            .then_some(())
    });
    let events = get(
        kc,
        &[
            "-n",
            "scale",
            "get",
            "events",
            "--field-selector",
            "reason=SuccessfulCreate",
            "-o",
            "name",
        ],
    );
    assert_eq!(
        events.lines().count(),
        3,
        "one SuccessfulCreate event per pod: {events}"
    );
    // Past ten similar events about one object, the rest are combined into one, counted.
    apply(kc, &replica_set("scale", "burst", 14));
    wait_pods(kc, "scale", "burst", "burst", 14);
    let events = eventually("nine events and a combined one counting five", || {
        let events = get(
            kc,
            &[
                "-n",
                "scale",
                "get",
                "events",
                "--field-selector",
                "reason=SuccessfulCreate,involvedObject.name=burst",
                "-o",
                "jsonpath={range .items[*]}{.count} {.message}{\"\\n\"}{end}",
            ],
        );
        let combined = events
            .lines()
            .filter(|l| l.starts_with("5 (combined from similar events): Created pod: burst-"))
            .count();
        (events.lines().count() == 10 && combined == 1).then_some(events)
    });
    assert_eq!(
        events
            .lines()
            .filter(|l| l.starts_with("1 Created pod: burst-"))
            .count(),
        9,
        "{events}"
    );
    kubectl_ok(KUBECTL, kc, &["-n", "scale", "delete", "rs", "burst"]);

    kubectl_ok(
        KUBECTL,
        kc,
        &["-n", "scale", "scale", "rs", "web", "--replicas=5"],
    );
    wait_pods(kc, "scale", "web", "web", 5);
    kubectl_ok(
        KUBECTL,
        kc,
        &["-n", "scale", "scale", "rs", "web", "--replicas=2"],
    );
    wait_pods(kc, "scale", "web", "web", 2);
    eventually("a SuccessfulDelete event", || {
        get(
            kc,
            &[
                "-n",
                "scale",
                "get",
                "events",
                "--field-selector",
                "reason=SuccessfulDelete",
                "-o",
                "name",
            ],
        )
        .contains("event")
        .then_some(())
    });
    let status = eventually("status of 2", || {
        let s = get(
            kc,
            &[
                "-n",
                "scale",
                "get",
                "rs",
                "web",
                "-o",
                "jsonpath={.status.replicas}/{.status.readyReplicas}/{.status.availableReplicas}/{.status.fullyLabeledReplicas}",
            ],
        );
        (s == "2/2/2/2").then_some(s)
    });
    assert_eq!(status, "2/2/2/2");

    // A pod that stops matching is released and replaced.
    let pods = wait_pods(kc, "scale", "web", "web", 2);
    kubectl_ok(
        KUBECTL,
        kc,
        &[
            "-n",
            "scale",
            "label",
            "pod",
            &pods[0],
            "app=stray",
            "--overwrite",
        ],
    );
    wait_pods(kc, "scale", "web", "web", 2);
    eventually("the released pod without owner", || {
        get(
            kc,
            &[
                "-n",
                "scale",
                "get",
                "pod",
                &pods[0],
                "-o",
                "jsonpath={.metadata.ownerReferences[?(@.controller==true)].name}",
            ],
        )
        .is_empty()
        .then_some(())
    });
    // An orphan that matches is adopted; the surplus is deleted.
    kubectl_ok(
        KUBECTL,
        kc,
        &[
            "-n",
            "scale",
            "label",
            "pod",
            &pods[0],
            "app=web",
            "--overwrite",
        ],
    );
    wait_pods(kc, "scale", "web", "web", 2);

    // A ReplicationController, scaled with kubectl.
    apply(
        kc,
        "apiVersion: v1\nkind: ReplicationController\nmetadata: {name: legacy, namespace: scale}\nspec:\n  replicas: 2\n  selector: {app: legacy}\n  template:\n    metadata: {labels: {app: legacy}}\n    spec: {containers: [{name: c, image: busybox}]}\n",
    );
    wait_pods(kc, "scale", "legacy", "legacy", 2);
    kubectl_ok(
        KUBECTL,
        kc,
        &["-n", "scale", "scale", "rc", "legacy", "--replicas=1"],
    );
    wait_pods(kc, "scale", "legacy", "legacy", 1);
    // The controller's status write may follow the pod count by a moment.
    eventually("the RC's table to show 1 1 1", || {
        let table = kubectl_ok(KUBECTL, kc, &["-n", "scale", "get", "rc", "legacy"]);
        table
            .lines()
            .nth(1)
            .is_some_and(|l| {
                l.split_whitespace().take(4).collect::<Vec<_>>() == ["legacy", "1", "1", "1"]
            })
            .then_some(())
    });
}

/// Evicts `pod`; kubectl's output (stdout and stderr) and whether it succeeded.
fn evict(kc: &Path, ns: &str, pod: &str) -> (bool, String) {
    let body = format!(
        r#"{{"apiVersion":"policy/v1","kind":"Eviction","metadata":{{"name":"{pod}","namespace":"{ns}"}}}}"#
    );
    let out = kubectl_stdin(
        KUBECTL,
        kc,
        &[
            "create",
            "--raw",
            &format!("/api/v1/namespaces/{ns}/pods/{pod}/eviction"),
            "-f",
            "-",
        ],
        &body,
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn budgets(kc: &Path) {
    kubectl_ok(KUBECTL, kc, &["create", "namespace", "budget"]);
    // Bare pods: nothing replaces an evicted one, so the budget's arithmetic stays put.
    for i in 0..3 {
        apply(
            kc,
            &format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: db-{i}, namespace: budget, labels: {{app: db}}}}\nspec: {{containers: [{{name: c, image: busybox}}]}}\n"
            ),
        );
    }
    apply(
        kc,
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: db, namespace: budget}\nspec:\n  minAvailable: 2\n  selector: {matchLabels: {app: db}}\n",
    );
    let allowed = |kc: &Path| {
        get(
            kc,
            &[
                "-n",
                "budget",
                "get",
                "pdb",
                "db",
                "-o",
                "jsonpath={.status.currentHealthy}/{.status.desiredHealthy}/{.status.disruptionsAllowed}",
            ],
        )
    };
    eventually("the budget's status", || {
        (allowed(kc) == "3/2/1").then_some(())
    });
    let table = kubectl_ok(KUBECTL, kc, &["-n", "budget", "get", "pdb", "db"]);
    assert!(
        table.lines().nth(1).is_some_and(
            |l| l.split_whitespace().take(4).collect::<Vec<_>>() == ["db", "2", "N/A", "1"]
        ),
        "{table}"
    );
    // One eviction is allowed; it is counted in the budget at once, so the next is refused.
    let (ok, out) = evict(kc, "budget", "db-0");
    assert!(ok, "{out}");
    let (ok, out) = evict(kc, "budget", "db-1");
    assert!(!ok, "the second eviction must be refused: {out}");
    assert!(
        out.contains("Cannot evict pod as it would violate the pod's disruption budget"),
        "{out}"
    );
    eventually("the budget after the eviction", || {
        (allowed(kc) == "2/2/0").then_some(())
    });
    let (ok, out) = evict(kc, "budget", "db-1");
    assert!(
        !ok && out.contains("needs 2 healthy pods and has 2 currently"),
        "{out}"
    );
}

fn cascading(kc: &Path) {
    kubectl_ok(KUBECTL, kc, &["create", "namespace", "cascade"]);
    // Orphan: the pods stay, without their owner.
    apply(kc, &replica_set("cascade", "a", 2));
    wait_pods(kc, "cascade", "a", "a", 2);
    kubectl_ok(
        KUBECTL,
        kc,
        &["-n", "cascade", "delete", "rs", "a", "--cascade=orphan"],
    );
    let orphans = wait_pods(kc, "cascade", "a", "", 2);
    // A new owner adopts them instead of creating more.
    apply(kc, &replica_set("cascade", "a", 2));
    let adopted = wait_pods(kc, "cascade", "a", "a", 2);
    assert_eq!(orphans.len(), adopted.len());
    assert!(
        orphans.iter().all(|p| adopted.contains(p)),
        "{orphans:?} adopted as {adopted:?}"
    );

    // Foreground: kubectl returns once the owner is gone, and the pods went first.
    kubectl_ok(
        KUBECTL,
        kc,
        &["-n", "cascade", "delete", "rs", "a", "--cascade=foreground"],
    );
    assert!(
        pods_of(kc, "cascade", "a").is_empty(),
        "dependents deleted before the owner"
    );

    // Background (kubectl's default): the pods follow the owner.
    apply(kc, &replica_set("cascade", "b", 2));
    wait_pods(kc, "cascade", "b", "b", 2);
    kubectl_ok(KUBECTL, kc, &["-n", "cascade", "delete", "rs", "b"]);
    wait_pods(kc, "cascade", "b", "", 0);

    // A dangling owner reference (owner gone before the dependent was created) is collected.
    apply(
        kc,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dangling\n  namespace: cascade\n  ownerReferences:\n  - {apiVersion: v1, kind: ConfigMap, name: ghost, uid: 00000000-0000-0000-0000-000000000001}\n",
    );
    eventually("the dangling dependent collected", || {
        let out = kubectl_any(
            KUBECTL,
            kc,
            &["-n", "cascade", "get", "configmap", "dangling"],
        );
        (!out.status.success()).then_some(())
    });

    // Owners in a ring, each blocking its owner's deletion: a foreground delete of one takes
    // them all (upstream's "should not be blocked by dependency circle").
    let uid = |name: &str| {
        get(
            kc,
            &[
                "-n",
                "cascade",
                "get",
                "configmap",
                name,
                "-o",
                "jsonpath={.metadata.uid}",
            ],
        )
    };
    for name in ["ring1", "ring2", "ring3"] {
        kubectl_ok(KUBECTL, kc, &["-n", "cascade", "create", "configmap", name]);
    }
    for (dependent, owner) in [("ring1", "ring3"), ("ring2", "ring1"), ("ring3", "ring2")] {
        let patch = format!(
            r#"{{"metadata":{{"ownerReferences":[{{"apiVersion":"v1","kind":"ConfigMap","name":"{owner}","uid":"{}","controller":true,"blockOwnerDeletion":true}}]}}}}"#,
            uid(owner)
        );
        kubectl_ok(
            KUBECTL,
            kc,
            &[
                "-n",
                "cascade",
                "patch",
                "configmap",
                dependent,
                "-p",
                &patch,
            ],
        );
    }
    kubectl_ok(
        KUBECTL,
        kc,
        &[
            "-n",
            "cascade",
            "delete",
            "configmap",
            "ring1",
            "--cascade=foreground",
            "--wait=false",
        ],
    );
    eventually("the ring collected", || {
        get(kc, &["-n", "cascade", "get", "configmaps", "-o", "name"])
            .lines()
            .all(|l| !l.contains("ring"))
            .then_some(())
    });
}

/// A Service's endpoints: EndpointSlices and the legacy Endpoints follow the pods it selects
/// (named target ports resolved per pod), keep an empty slice when none is left, and Endpoints
/// written for a Service without a selector are mirrored into slices.
fn service_endpoints(kc: &Path) {
    kubectl_ok(KUBECTL, kc, &["create", "namespace", "svc"]);
    apply(
        kc,
        "apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: web, namespace: svc}\nspec:\n  replicas: 3\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: c, image: busybox, ports: [{name: http, containerPort: 8080}]}]}\n",
    );
    apply(
        kc,
        "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: svc, labels: {team: a}}\nspec:\n  selector: {app: web}\n  ports: [{port: 80, targetPort: http}]\n",
    );
    let slices = || -> serde_json::Value {
        serde_json::from_str(&get(
            kc,
            &[
                "-n",
                "svc",
                "get",
                "endpointslices",
                "-l",
                "kubernetes.io/service-name=web",
                "-o",
                "json",
            ],
        ))
        .unwrap_or_default()
    };
    let addresses = |slices: &serde_json::Value| -> Vec<String> {
        let mut all: Vec<String> = slices["items"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
            .filter(|e| e["conditions"]["ready"] == true)
            .filter_map(|e| e["addresses"][0].as_str().map(str::to_owned))
            .collect();
        all.sort();
        all
    };
    let ready = eventually("three ready endpoints", || {
        let slices = slices();
        (addresses(&slices).len() == 3).then_some(slices)
    });
    let slice = &ready["items"][0];
    assert_eq!(slice["addressType"], "IPv4");
    assert_eq!(
        slice["ports"],
        serde_json::json!([{"name": "", "protocol": "TCP", "port": 8080}])
    );
    assert_eq!(
        slice["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"],
        "endpointslice-controller.k8s.io"
    );
    assert_eq!(slice["metadata"]["labels"]["team"], "a");
    assert_eq!(slice["metadata"]["ownerReferences"][0]["kind"], "Service");
    assert!(
        slice["endpoints"][0]["targetRef"]["name"]
            .as_str()
            .unwrap()
            .starts_with("web-")
    );
    // The legacy Endpoints list the same addresses.
    let legacy = eventually("legacy endpoints", || {
        let ips = get(
            kc,
            &[
                "-n",
                "svc",
                "get",
                "endpoints",
                "web",
                "-o",
                "jsonpath={.subsets[*].addresses[*].ip}",
            ],
        );
        let mut ips: Vec<String> = ips.split_whitespace().map(str::to_owned).collect();
        ips.sort();
        (ips.len() == 3).then_some(ips)
    });
    assert_eq!(legacy, addresses(&ready));
    let described = get(kc, &["-n", "svc", "describe", "service", "web"]);
    assert!(
        described.contains(&format!("{}:8080", legacy[0])),
        "{described}"
    );
    // Scaled to nothing: one empty slice stays, the Endpoints have no subsets.
    kubectl_ok(
        KUBECTL,
        kc,
        &["-n", "svc", "scale", "rs", "web", "--replicas=0"],
    );
    eventually("no endpoints left", || {
        let slices = slices();
        let items = slices["items"].as_array().cloned().unwrap_or_default();
        (items.len() == 1 && items[0]["endpoints"].as_array().is_none_or(Vec::is_empty))
            .then_some(())
    });
    eventually("legacy endpoints emptied", || {
        get(
            kc,
            &[
                "-n",
                "svc",
                "get",
                "endpoints",
                "web",
                "-o",
                "jsonpath={.subsets}",
            ],
        )
        .trim()
        .is_empty()
        .then_some(())
    });
    // Endpoints written for a Service without a selector are mirrored.
    apply(
        kc,
        "apiVersion: v1\nkind: Service\nmetadata: {name: external, namespace: svc}\nspec:\n  ports: [{port: 5432}]\n---\napiVersion: v1\nkind: Endpoints\nmetadata: {name: external, namespace: svc}\nsubsets: [{addresses: [{ip: 192.0.2.10}], ports: [{port: 5432}]}]\n",
    );
    eventually("the mirrored slice", || {
        let mirrored: serde_json::Value = serde_json::from_str(&get(
            kc,
            &[
                "-n",
                "svc",
                "get",
                "endpointslices",
                "-l",
                "kubernetes.io/service-name=external",
                "-o",
                "json",
            ],
        ))
        .unwrap_or_default();
        let slice = mirrored["items"].get(0)?.clone();
        (slice["endpoints"][0]["addresses"][0] == "192.0.2.10"
            && slice["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"]
                == "endpointslicemirroring-controller.k8s.io")
            .then_some(())
    });
    // The Service's deletion takes its Endpoints; its slices go with it.
    kubectl_ok(KUBECTL, kc, &["-n", "svc", "delete", "service", "web"]);
    eventually("the endpoints gone", || {
        let out = kubectl_any(KUBECTL, kc, &["-n", "svc", "get", "endpoints", "web"]);
        (!out.status.success()).then_some(())
    });
    eventually("the slices gone", || {
        slices()["items"]
            .as_array()
            .is_some_and(Vec::is_empty)
            .then_some(())
    });
}

fn namespaces(kc: &Path, ca_file: &Path) {
    // Every namespace gets its default ServiceAccount.
    kubectl_ok(KUBECTL, kc, &["create", "namespace", "doomed"]);
    eventually("the default ServiceAccount", || {
        kubectl_any(
            KUBECTL,
            kc,
            &["-n", "doomed", "get", "serviceaccount", "default"],
        )
        .status
        .success()
        .then_some(())
    });
    // And the cluster's CA bundle, put back when deleted or edited.
    let ca = std::fs::read_to_string(ca_file).unwrap();
    let published = |kc: &Path| {
        let out = kubectl_any(
            KUBECTL,
            kc,
            &[
                "-n",
                "doomed",
                "get",
                "configmap",
                "kube-root-ca.crt",
                "-o",
                "jsonpath={.data.ca\\.crt}",
            ],
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    eventually("kube-root-ca.crt", || (published(kc) == ca).then_some(()));
    kubectl_ok(
        KUBECTL,
        kc,
        &["-n", "doomed", "delete", "configmap", "kube-root-ca.crt"],
    );
    eventually("kube-root-ca.crt again", || {
        (published(kc) == ca).then_some(())
    });
    kubectl_ok(
        KUBECTL,
        kc,
        &[
            "-n",
            "doomed",
            "patch",
            "configmap",
            "kube-root-ca.crt",
            "-p",
            r#"{"data":{"ca.crt":"forged"}}"#,
        ],
    );
    eventually("kube-root-ca.crt restored", || {
        (published(kc) == ca).then_some(())
    });
    // Content of several kinds in several groups.
    apply(
        kc,
        "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {name: l, namespace: doomed}\nspec: {holderIdentity: me}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: r, namespace: doomed}\nrules: []\n",
    );
    kubectl_ok(
        KUBECTL,
        kc,
        &[
            "-n",
            "doomed",
            "create",
            "configmap",
            "c",
            "--from-literal=k=v",
        ],
    );
    apply(kc, &replica_set("doomed", "web", 2));
    wait_pods(kc, "doomed", "web", "web", 2);

    kubectl_ok(
        KUBECTL,
        kc,
        &["delete", "namespace", "doomed", "--timeout=60s"],
    );
    let out = kubectl_any(KUBECTL, kc, &["get", "namespace", "doomed"]);
    assert!(
        !out.status.success(),
        "the namespace is gone once kubectl returns"
    );
    // Recreated, it is empty (but for what every namespace is given).
    kubectl_ok(KUBECTL, kc, &["create", "namespace", "doomed"]);
    let left = get(
        kc,
        &[
            "-n",
            "doomed",
            "get",
            "leases,roles,configmaps,replicasets,pods",
            "-o",
            "name",
        ],
    );
    assert!(
        left.lines().all(|l| l == "configmap/kube-root-ca.crt"),
        "{left}"
    );
}

#[test]
fn controllers_manage_replicas_cascades_and_namespaces() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), free_port());
    let kc = server.kubeconfig();
    let _sim = Sim::start(&kc, &["--nodes", "3", "--lease-interval", "2s"]);
    eventually("three nodes", || {
        (get(&kc, &["get", "nodes", "-o", "name"]).lines().count() == 3).then_some(())
    });
    scaling(&kc);
    budgets(&kc);
    cascading(&kc);
    service_endpoints(&kc);
    namespaces(&kc, &dir.path().join("tls").join("ca.crt"));
    server.stop();
}

#[test]
fn disabled_controllers_do_not_run_and_on_etcd_the_lease_is_held() {
    let etcd = Datastore::start("etcd");
    let dir = tempfile::tempdir().unwrap();
    let mut flags: Vec<String> = etcd.flags();
    // Upstream's older and newer names both work.
    flags.push("--disable-controllers=replicaset,serviceaccount-controller,root-ca-certificate-publisher-controller".into());
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = Server::start_with(dir.path(), free_port(), &flags);
    let kc = server.kubeconfig();
    let holder = eventually("the controller manager's Lease", || {
        let holder = get(
            &kc,
            &[
                "-n",
                "kube-system",
                "get",
                "lease",
                "kube-controller-manager",
                "-o",
                "jsonpath={.spec.holderIdentity}",
            ],
        );
        (!holder.is_empty()).then_some(holder)
    });
    assert!(!holder.is_empty());
    // Without the service account controller nobody makes `default`, which ServiceAccount
    // admission requires of new pods.
    kubectl_ok(KUBECTL, &kc, &["create", "serviceaccount", "default"]);
    // The replication controller runs; the ReplicaSet controller does not.
    apply(&kc, &replica_set("default", "idle", 1));
    apply(
        &kc,
        "apiVersion: v1\nkind: ReplicationController\nmetadata: {name: busy}\nspec:\n  replicas: 1\n  selector: {app: busy}\n  template:\n    metadata: {labels: {app: busy}}\n    spec: {containers: [{name: c, image: busybox}]}\n",
    );
    wait_pods(&kc, "default", "busy", "busy", 1);
    assert!(pods_of(&kc, "default", "idle").is_empty());
    kubectl_ok(KUBECTL, &kc, &["create", "namespace", "quiet"]);
    std::thread::sleep(std::time::Duration::from_secs(1));
    assert!(
        !kubectl_any(
            KUBECTL,
            &kc,
            &["-n", "quiet", "get", "serviceaccount", "default"]
        )
        .status
        .success()
    );
    assert!(
        !kubectl_any(
            KUBECTL,
            &kc,
            &["-n", "quiet", "get", "configmap", "kube-root-ca.crt"]
        )
        .status
        .success()
    );
    server.stop();

    // An unknown controller name is refused at start.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args([
            "server",
            "--disable-controllers=replicaset,nonesuch",
            "--data-dir",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_refused(&out, &["unknown controller \"nonesuch\""]);
}

/// The `kubernetes` Service's endpoints list every API server that runs: two servers on one
/// etcd both appear, and one that stops drops out once its Lease expires.
#[test]
fn the_kubernetes_service_lists_every_running_server() {
    let etcd = Datastore::start("etcd");
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let flags = |address: &str| -> Vec<String> {
        let mut flags = etcd.flags();
        flags.extend(["--advertise-address".to_owned(), address.to_owned()]);
        flags.push("--disable-controller-manager".to_owned());
        flags
    };
    let (flags_a, flags_b) = (flags("192.0.2.11"), flags("192.0.2.12"));
    let a: Vec<&str> = flags_a.iter().map(String::as_str).collect();
    let b: Vec<&str> = flags_b.iter().map(String::as_str).collect();
    let port = free_port();
    let server_a = Server::start_with(dir_a.path(), port, &a);
    let server_b = Server::start_with(dir_b.path(), free_port(), &b);
    let kc = server_a.kubeconfig();
    let addresses = || {
        let ips = get(
            &kc,
            &[
                "get",
                "endpoints",
                "kubernetes",
                "-o",
                "jsonpath={.subsets[*].addresses[*].ip}",
            ],
        );
        ips.split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    eventually("both servers listed", || {
        (addresses() == ["192.0.2.11", "192.0.2.12"]).then_some(())
    });
    let slice: serde_json::Value = serde_json::from_str(&get(
        &kc,
        &["get", "endpointslice", "kubernetes", "-o", "json"],
    ))
    .unwrap();
    assert_eq!(
        slice["metadata"]["labels"]["kubernetes.io/service-name"],
        "kubernetes"
    );
    assert_eq!(slice["endpoints"].as_array().unwrap().len(), 2);
    assert_eq!(slice["ports"][0]["name"], "https");
    let skip = get(
        &kc,
        &[
            "get",
            "endpoints",
            "kubernetes",
            "-o",
            "jsonpath={.metadata.labels}",
        ],
    );
    assert!(skip.contains("skip-mirror"), "{skip}");
    // The second server stops: it takes itself out of the endpoints as it goes.
    server_b.stop();
    eventually("the stopped server dropped", || {
        (addresses() == ["192.0.2.11"]).then_some(())
    });
    server_a.stop();
}

/// Watches the pods labelled `app=<app>` and records, from the first complete list on, the
/// most pods alive (not being deleted) at once and the fewest of them ready.
#[derive(Debug, Default)]
struct Observed {
    most_alive: usize,
    fewest_ready: Option<usize>,
    /// Every pod seen alive.
    names: std::collections::BTreeSet<String>,
}

fn observe_pods(
    kubeconfig: &Path,
    app: &str,
) -> (
    std::sync::Arc<std::sync::Mutex<Observed>>,
    std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::Pod;
    use kube::runtime::watcher;
    let observed = std::sync::Arc::new(std::sync::Mutex::new(Observed::default()));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (kubeconfig, app) = (kubeconfig.to_owned(), app.to_owned());
    let (out, done) = (observed.clone(), stop.clone());
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let pods: kube::Api<Pod> =
                kube::Api::namespaced(common::kube_client(&kubeconfig).await, "default");
            let config = watcher::Config::default().labels(&format!("app={app}"));
            let stream = watcher::watcher(pods, config);
            futures::pin_mut!(stream);
            let mut alive: std::collections::BTreeMap<String, bool> = Default::default();
            let mut listed = false;
            while let Some(event) = stream.next().await {
                if done.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
                let (pod, gone) = match event {
                    Ok(watcher::Event::InitDone) => {
                        listed = true;
                        continue;
                    }
                    Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => (pod, false),
                    Ok(watcher::Event::Delete(pod)) => (pod, true),
                    _ => continue,
                };
                let name = pod.metadata.name.clone().unwrap_or_default();
                if gone || pod.metadata.deletion_timestamp.is_some() {
                    alive.remove(&name);
                } else {
                    out.lock().unwrap().names.insert(name.clone());
                    let ready = pod
                        .status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| {
                            c.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                        });
                    alive.insert(name, ready);
                }
                if !listed {
                    continue;
                }
                let mut seen = out.lock().unwrap();
                seen.most_alive = seen.most_alive.max(alive.len());
                let ready = alive.values().filter(|r| **r).count();
                seen.fewest_ready = Some(seen.fewest_ready.map_or(ready, |f| f.min(ready)));
            }
        });
    });
    (observed, stop)
}

fn rollout_status(kc: &Path) -> String {
    kubectl_ok(
        KUBECTL,
        kc,
        &["rollout", "status", "deployment/web", "--timeout=60s"],
    )
}

#[test]
fn deployments_roll_out_within_surge_and_unavailability() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), free_port());
    let kc = server.kubeconfig();
    let _sim = Sim::start(&kc, &["--nodes", "3", "--lease-interval", "2s"]);
    kubectl_ok(
        KUBECTL,
        &kc,
        &[
            "create",
            "deployment",
            "web",
            "--image=busybox:1",
            "--replicas=6",
        ],
    );
    kubectl_ok(
        KUBECTL,
        &kc,
        &[
            "patch",
            "deployment",
            "web",
            "-p",
            r#"{"spec":{"strategy":{"rollingUpdate":{"maxSurge":2,"maxUnavailable":1}}}}"#,
        ],
    );
    assert!(rollout_status(&kc).contains("deployment \"web\" successfully rolled out"));
    let ready = get(
        &kc,
        &[
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.status.readyReplicas}/{.status.updatedReplicas}/{.status.availableReplicas}",
        ],
    );
    assert_eq!(ready, "6/6/6");

    // A rolling update, watched pod by pod: never more than 6 + 2 pods, never fewer than
    // 6 - 1 ready.
    let (observed, stop) = observe_pods(&kc, "web");
    std::thread::sleep(std::time::Duration::from_millis(500));
    kubectl_ok(
        KUBECTL,
        &kc,
        &["set", "image", "deployment/web", "busybox=busybox:2"],
    );
    let status = rollout_status(&kc);
    assert!(status.contains("successfully rolled out"), "{status}");
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let seen = observed.lock().unwrap();
    assert!(
        seen.most_alive <= 8,
        "at most replicas + maxSurge pods: {seen:?}"
    );
    assert!(seen.most_alive > 6, "the rollout surged: {seen:?}");
    assert!(
        seen.fewest_ready.is_some_and(|r| r >= 5),
        "at least replicas - maxUnavailable ready: {seen:?}"
    );
    drop(seen);
    let replica_sets = get(
        &kc,
        &[
            "get",
            "rs",
            "-l",
            "app=web",
            "-o",
            "jsonpath={range .items[*]}{.spec.replicas} {.metadata.annotations.deployment\\.kubernetes\\.io/revision}{\"\\n\"}{end}",
        ],
    );
    let mut sizes: Vec<&str> = replica_sets.lines().collect();
    sizes.sort();
    assert_eq!(
        sizes,
        ["0 1", "6 2"],
        "the old ReplicaSet scaled to 0 and kept as revision 1"
    );
    let events = get(
        &kc,
        &[
            "get",
            "events",
            "--field-selector",
            "reason=ScalingReplicaSet",
            "-o",
            "jsonpath={.items[*].message}",
        ],
    );
    assert!(
        events.contains("Scaled up replica set web-")
            && events.contains("Scaled down replica set web-"),
        "{events}"
    );

    // Undo brings back revision 1's template as revision 3.
    kubectl_ok(KUBECTL, &kc, &["rollout", "undo", "deployment/web"]);
    rollout_status(&kc);
    let image = get(
        &kc,
        &[
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image} {.metadata.annotations.deployment\\.kubernetes\\.io/revision}",
        ],
    );
    assert_eq!(image, "busybox:1 3");

    // Paused: a template change rolls nothing out until resumed.
    kubectl_ok(KUBECTL, &kc, &["rollout", "pause", "deployment/web"]);
    kubectl_ok(
        KUBECTL,
        &kc,
        &["set", "image", "deployment/web", "busybox=busybox:3"],
    );
    eventually("the Progressing condition to say paused", || {
        (get(
            &kc,
            &[
                "get",
                "deployment",
                "web",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Progressing\")].reason}",
            ],
        ) == "DeploymentPaused")
            .then_some(())
    });
    assert_eq!(
        get(&kc, &["get", "rs", "-l", "app=web", "-o", "name"])
            .lines()
            .count(),
        2,
        "no new ReplicaSet while paused"
    );
    kubectl_ok(KUBECTL, &kc, &["rollout", "resume", "deployment/web"]);
    rollout_status(&kc);
    assert_eq!(
        get(&kc, &["get", "rs", "-l", "app=web", "-o", "name"])
            .lines()
            .count(),
        3
    );

    // Restart: a new ReplicaSet with the same image.
    kubectl_ok(KUBECTL, &kc, &["rollout", "restart", "deployment/web"]);
    rollout_status(&kc);
    let history = kubectl_ok(KUBECTL, &kc, &["rollout", "history", "deployment/web"]);
    let revisions: Vec<&str> = history
        .lines()
        .skip(2)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(revisions, ["2", "3", "4", "5"], "{history}");
    let available = get(
        &kc,
        &[
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Available\")].status} {.status.conditions[?(@.type==\"Progressing\")].reason}",
        ],
    );
    assert_eq!(available, "True NewReplicaSetAvailable");
    server.stop();
}

#[test]
fn lost_nodes_are_tainted_and_their_pods_evicted_after_their_toleration() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), free_port(), &["--node-monitor-grace-period=4s"]);
    let kc = server.kubeconfig();
    let _steady = Sim::start(
        &kc,
        &[
            "--nodes",
            "2",
            "--name-prefix",
            "steady-",
            "--lease-interval",
            "1s",
        ],
    );
    let lost = Sim::start(
        &kc,
        &[
            "--nodes",
            "1",
            "--name-prefix",
            "lost-",
            "--lease-interval",
            "1s",
        ],
    );
    // Node IPAM: every node gets a /24 of the cluster CIDR of its own.
    let cidrs = eventually("three pod CIDRs", || {
        let out = get(
            &kc,
            &["get", "nodes", "-o", "jsonpath={.items[*].spec.podCIDR}"],
        );
        let cidrs: std::collections::BTreeSet<String> =
            out.split_whitespace().map(str::to_owned).collect();
        (cidrs.len() == 3).then_some(cidrs)
    });
    assert!(
        cidrs
            .iter()
            .all(|c| c.starts_with("10.42.") && c.ends_with(".0/24")),
        "{cidrs:?}"
    );

    // Two pods on the node about to be lost: one tolerating unreachability for 2 s, one with
    // the 300 s the admission adds.
    let pod = |name: &str, tolerations: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  nodeName: lost-0\n{tolerations}  containers: [{{name: c, image: busybox}}]\n"
        )
    };
    apply(
        &kc,
        &pod(
            "quick",
            "  tolerations: [{key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 2}]\n",
        ),
    );
    apply(&kc, &pod("slow", ""));
    let defaults = get(
        &kc,
        &[
            "get",
            "pod",
            "slow",
            "-o",
            "jsonpath={.spec.tolerations[*].key}={.spec.tolerations[*].tolerationSeconds}",
        ],
    );
    assert_eq!(
        defaults,
        "node.kubernetes.io/not-ready node.kubernetes.io/unreachable=300 300"
    );
    eventually("both pods running", || {
        (get(
            &kc,
            &["get", "pods", "-o", "jsonpath={.items[*].status.phase}"],
        ) == "Running Running")
            .then_some(())
    });

    drop(lost);
    let ready = eventually("the lost node to turn Unknown", || {
        let ready = get(
            &kc,
            &[
                "get",
                "node",
                "lost-0",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}/{.status.conditions[?(@.type==\"Ready\")].reason}",
            ],
        );
        (ready.starts_with("Unknown")).then_some(ready)
    });
    assert_eq!(ready, "Unknown/NodeStatusUnknown");
    let taints = eventually("the unreachable taints", || {
        let taints = get(
            &kc,
            &[
                "get",
                "node",
                "lost-0",
                "-o",
                "jsonpath={range .spec.taints[*]}{.key}:{.effect} {end}",
            ],
        );
        taints.contains("NoExecute").then_some(taints)
    });
    assert!(
        taints.contains("node.kubernetes.io/unreachable:NoSchedule"),
        "{taints}"
    );
    assert!(
        taints.contains("node.kubernetes.io/unreachable:NoExecute"),
        "{taints}"
    );
    assert!(
        !get(
            &kc,
            &["get", "node", "steady-0", "-o", "jsonpath={.spec.taints}"]
        )
        .contains("unreachable")
    );

    eventually("the pod with a 2 s toleration to be evicted", || {
        (!get(
            &kc,
            &[
                "get",
                "pod",
                "quick",
                "-o",
                "jsonpath={.metadata.deletionTimestamp}",
            ],
        )
        .is_empty())
        .then_some(())
    });
    let condition = get(
        &kc,
        &[
            "get",
            "pod",
            "quick",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"DisruptionTarget\")].reason}",
        ],
    );
    assert_eq!(condition, "DeletionByTaintManager");
    assert!(
        get(
            &kc,
            &[
                "get",
                "events",
                "--field-selector",
                "reason=TaintManagerEviction",
                "-o",
                "jsonpath={.items[*].message}"
            ]
        )
        .contains("Marking for deletion Pod default/quick")
    );
    assert!(
        get(
            &kc,
            &[
                "get",
                "pod",
                "slow",
                "-o",
                "jsonpath={.metadata.deletionTimestamp}"
            ]
        )
        .is_empty(),
        "300 s not over"
    );

    // The node comes back: its taints go and the pending eviction is cancelled.
    let _back = Sim::start(
        &kc,
        &[
            "--nodes",
            "1",
            "--name-prefix",
            "lost-",
            "--lease-interval",
            "1s",
        ],
    );
    eventually("the node Ready and untainted again", || {
        let taints = get(
            &kc,
            &["get", "node", "lost-0", "-o", "jsonpath={.spec.taints}"],
        );
        let ready = get(
            &kc,
            &[
                "get",
                "node",
                "lost-0",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ],
        );
        (ready == "True" && !taints.contains("unreachable")).then_some(())
    });
    assert!(
        get(
            &kc,
            &[
                "get",
                "pod",
                "slow",
                "-o",
                "jsonpath={.metadata.deletionTimestamp}"
            ]
        )
        .is_empty()
    );
    server.stop();
}

/// Sets a pod's phase as its kubelet would when its containers end.
fn finish_pod(kc: &Path, ns: &str, pod: &str, phase: &str) {
    kubectl_ok(
        KUBECTL,
        kc,
        &[
            "-n",
            ns,
            "patch",
            "pod",
            pod,
            "--subresource=status",
            "--type=merge",
            "-p",
            &format!(r#"{{"status":{{"phase":"{phase}"}}}}"#),
        ],
    );
}

fn daemon_sets(kc: &Path) {
    apply(
        kc,
        "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: agent, namespace: default}\nspec:\n  selector: {matchLabels: {app: agent}}\n  template:\n    metadata: {labels: {app: agent}}\n    spec: {containers: [{name: c, image: busybox}]}\n",
    );
    let on_nodes = |kc: &Path| {
        let mut nodes: Vec<String> = get(
            kc,
            &[
                "get",
                "pods",
                "-l",
                "app=agent",
                "-o",
                "jsonpath={.items[*].spec.nodeName}",
            ],
        )
        .split_whitespace()
        .map(str::to_owned)
        .collect();
        nodes.sort();
        nodes
    };
    eventually("a daemon pod per node", || {
        (on_nodes(kc) == ["sim-node-0", "sim-node-1"]).then_some(())
    });
    // A node joins: it gets its daemon pod.
    let extra = Sim::start(
        kc,
        &[
            "--nodes",
            "1",
            "--name-prefix",
            "late-",
            "--lease-interval",
            "2s",
        ],
    );
    eventually("the daemon pod on the new node", || {
        (on_nodes(kc) == ["late-0", "sim-node-0", "sim-node-1"]).then_some(())
    });
    let status = eventually("the DaemonSet's status", || {
        let s = get(
            kc,
            &[
                "get",
                "ds",
                "agent",
                "-o",
                "jsonpath={.status.desiredNumberScheduled}/{.status.currentNumberScheduled}/{.status.numberReady}",
            ],
        );
        (s == "3/3/3").then_some(s)
    });
    assert_eq!(status, "3/3/3");
    // The node leaves: it no longer counts.
    drop(extra);
    kubectl_ok(KUBECTL, kc, &["delete", "node", "late-0"]);
    eventually("two desired daemon pods", || {
        (get(
            kc,
            &[
                "get",
                "ds",
                "agent",
                "-o",
                "jsonpath={.status.desiredNumberScheduled}",
            ],
        ) == "2")
            .then_some(())
    });
}

fn stateful_sets(kc: &Path) {
    // Simulated nodes provision nothing: the claims (of no class) bind to volumes made by hand,
    // so the scheduler can place the replicas.
    for i in 0..3 {
        apply(
            kc,
            &format!(
                "apiVersion: v1\nkind: PersistentVolume\nmetadata: {{name: sts-pv-{i}}}\nspec: {{capacity: {{storage: 1Gi}}, accessModes: [ReadWriteOnce], storageClassName: \"\", hostPath: {{path: /var/tmp/sts-pv-{i}}}}}\n"
            ),
        );
    }
    apply(
        kc,
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: db, namespace: default}\nspec:\n  replicas: 3\n  serviceName: db\n  selector: {matchLabels: {app: sts}}\n  template:\n    metadata: {labels: {app: sts}}\n    spec: {containers: [{name: c, image: busybox}]}\n  volumeClaimTemplates:\n  - metadata: {name: data}\n    spec: {accessModes: [ReadWriteOnce], storageClassName: \"\", resources: {requests: {storage: 1Gi}}}\n",
    );
    eventually("three ready replicas", || {
        (get(
            kc,
            &["get", "sts", "db", "-o", "jsonpath={.status.readyReplicas}"],
        ) == "3")
            .then_some(())
    });
    let names = get(
        kc,
        &[
            "get",
            "pods",
            "-l",
            "app=sts",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ],
    );
    assert_eq!(names, "db-0 db-1 db-2");
    let claims = get(
        kc,
        &["get", "pvc", "-o", "jsonpath={.items[*].metadata.name}"],
    );
    assert_eq!(claims, "data-db-0 data-db-1 data-db-2");
    // OrderedReady: created in order, each after the previous was ready.
    let created = |kc: &Path| -> Vec<String> {
        get(
            kc,
            &[
                "get",
                "events",
                "--field-selector",
                "involvedObject.kind=StatefulSet,involvedObject.name=db",
                "-o",
                "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}",
            ],
        )
        .lines()
        .map(str::to_owned)
        .collect()
    };
    let pods_created: Vec<String> = created(kc)
        .into_iter()
        .filter(|m| m.starts_with("create Pod"))
        .collect();
    assert_eq!(
        pods_created,
        [
            "create Pod db-0 in StatefulSet db successful",
            "create Pod db-1 in StatefulSet db successful",
            "create Pod db-2 in StatefulSet db successful",
        ]
    );
    // Scaled down, the highest ordinals go first; the claims stay.
    kubectl_ok(KUBECTL, kc, &["scale", "sts", "db", "--replicas=1"]);
    eventually("one replica left", || {
        (get(
            kc,
            &[
                "get",
                "pods",
                "-l",
                "app=sts",
                "-o",
                "jsonpath={.items[*].metadata.name}",
            ],
        ) == "db-0")
            .then_some(())
    });
    let deleted: Vec<String> = created(kc)
        .into_iter()
        .filter(|m| m.starts_with("delete Pod"))
        .collect();
    assert_eq!(
        deleted,
        [
            "delete Pod db-2 in StatefulSet db successful",
            "delete Pod db-1 in StatefulSet db successful"
        ]
    );
    assert_eq!(
        get(
            kc,
            &["get", "pvc", "-o", "jsonpath={.items[*].metadata.name}"]
        ),
        "data-db-0 data-db-1 data-db-2"
    );
}

fn jobs(kc: &Path) {
    // Two completions one at a time; the first pod fails and is replaced after the backoff.
    apply(
        kc,
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: work, namespace: default}\nspec:\n  completions: 2\n  parallelism: 1\n  backoffLimit: 2\n  template:\n    spec:\n      restartPolicy: Never\n      containers: [{name: c, image: busybox}]\n",
    );
    let running = |kc: &Path| -> Option<String> {
        let out = get(
            kc,
            &[
                "get",
                "pods",
                "-l",
                "job-name=work",
                "-o",
                "jsonpath={range .items[?(@.status.phase==\"Running\")]}{.metadata.name} {end}",
            ],
        );
        let names: Vec<&str> = out.split_whitespace().collect();
        (names.len() == 1).then(|| names[0].to_owned())
    };
    let first = eventually("the first job pod running", || running(kc));
    finish_pod(kc, "default", &first, "Failed");
    eventually("the failure counted", || {
        (get(
            kc,
            &["get", "job", "work", "-o", "jsonpath={.status.failed}"],
        ) == "1")
            .then_some(())
    });
    let second = eventually("a replacement pod", || running(kc).filter(|p| *p != first));
    finish_pod(kc, "default", &second, "Succeeded");
    let third = eventually("the pod for the second completion", || {
        running(kc).filter(|p| *p != second && *p != first)
    });
    finish_pod(kc, "default", &third, "Succeeded");
    eventually("the Job complete", || {
        let s = get(
            kc,
            &[
                "get",
                "job",
                "work",
                "-o",
                "jsonpath={.status.succeeded}/{.status.failed}/{.status.conditions[?(@.type==\"Complete\")].status}",
            ],
        );
        (s == "2/1/True").then_some(())
    });
    let table = kubectl_ok(KUBECTL, kc, &["get", "job", "work"]);
    assert!(
        table.contains("Complete") && table.contains("2/2"),
        "{table}"
    );
    // Counted pods lose the tracking finalizer.
    let finalizers = get(
        kc,
        &[
            "get",
            "pods",
            "-l",
            "job-name=work",
            "-o",
            "jsonpath={.items[*].metadata.finalizers}",
        ],
    );
    assert!(!finalizers.contains("job-tracking"), "{finalizers}");

    // A CronJob fires and records it.
    apply(
        kc,
        "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: tick, namespace: default}\nspec:\n  schedule: \"@every 2s\"\n  jobTemplate:\n    spec:\n      template:\n        spec:\n          restartPolicy: Never\n          containers: [{name: c, image: busybox}]\n",
    );
    let job = eventually("a Job from the CronJob", || {
        let owned = get(
            kc,
            &[
                "get",
                "jobs",
                "-o",
                "jsonpath={range .items[?(@.metadata.ownerReferences[0].name==\"tick\")]}{.metadata.name} {end}",
            ],
        );
        owned.split_whitespace().next().map(str::to_owned)
    });
    assert!(job.starts_with("tick-"), "{job}");
    eventually("lastScheduleTime and the event", || {
        let last = get(
            kc,
            &[
                "get",
                "cronjob",
                "tick",
                "-o",
                "jsonpath={.status.lastScheduleTime}",
            ],
        );
        let events = get(
            kc,
            &[
                "get",
                "events",
                "--field-selector",
                "involvedObject.kind=CronJob,reason=SuccessfulCreate",
                "-o",
                "jsonpath={.items[*].message}",
            ],
        );
        (!last.is_empty() && events.contains(&format!("Created job {job}"))).then_some(())
    });
    kubectl_ok(
        KUBECTL,
        kc,
        &[
            "patch",
            "cronjob",
            "tick",
            "-p",
            r#"{"spec":{"suspend":true}}"#,
        ],
    );
}

#[test]
fn daemon_sets_stateful_sets_jobs_and_cron_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), free_port());
    let kc = server.kubeconfig();
    let _sim = Sim::start(&kc, &["--nodes", "2", "--lease-interval", "2s"]);
    eventually("two nodes", || {
        (get(&kc, &["get", "nodes", "-o", "name"]).lines().count() == 2).then_some(())
    });
    daemon_sets(&kc);
    stateful_sets(&kc);
    jobs(&kc);
    server.stop();
}

#[test]
fn a_server_restart_mid_rollout_neither_creates_nor_deletes_extra_pods() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let port = free_port();
    let server = Server::start(&data, port);
    let kc = server.kubeconfig();
    let _sim = Sim::start(&kc, &["--nodes", "3", "--lease-interval", "2s"]);
    kubectl_ok(
        KUBECTL,
        &kc,
        &[
            "create",
            "deployment",
            "web",
            "--image=busybox:1",
            "--replicas=6",
        ],
    );
    // One new pod at a time, each ready for 2 s before the next step: a rollout of some 15 s.
    kubectl_ok(
        KUBECTL,
        &kc,
        &[
            "patch",
            "deployment",
            "web",
            "-p",
            r#"{"spec":{"minReadySeconds":2,"strategy":{"rollingUpdate":{"maxSurge":1,"maxUnavailable":0}}}}"#,
        ],
    );
    assert!(rollout_status(&kc).contains("successfully rolled out"));
    let (observed, stop) = observe_pods(&kc, "web");
    std::thread::sleep(std::time::Duration::from_millis(500));
    kubectl_ok(
        KUBECTL,
        &kc,
        &["set", "image", "deployment/web", "busybox=busybox:2"],
    );
    eventually("the rollout under way", || {
        let updated: u32 = get(
            &kc,
            &[
                "get",
                "deployment",
                "web",
                "-o",
                "jsonpath={.status.updatedReplicas}",
            ],
        )
        .parse()
        .unwrap_or(0);
        (2..6).contains(&updated).then_some(())
    });
    server.stop();
    let server = Server::start(&data, port);
    let status = rollout_status(&kc);
    assert!(status.contains("successfully rolled out"), "{status}");
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let seen = observed.lock().unwrap();
    // Six old pods and six new ones, never a seventh extra nor one ready pod fewer than six.
    assert_eq!(seen.names.len(), 12, "{:?}", seen.names);
    assert!(seen.most_alive <= 7, "{seen:?}");
    assert!(seen.fewest_ready.is_some_and(|r| r >= 6), "{seen:?}");
    drop(seen);
    assert_eq!(pods_of(&kc, "default", "web").len(), 6);
    server.stop();
}

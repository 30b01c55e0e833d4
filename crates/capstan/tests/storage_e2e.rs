//! End to end: persistent storage on a real node (the agent inside `capstan server`, its
//! containerd and runc, the preloaded busybox image), driven with stock kubectl. One test so
//! the node starts once:
//!
//! - a new cluster has the default `local-path` StorageClass;
//! - the node reports its mounted local volumes in `status.volumesInUse`;
//! - a StatefulSet of three replicas with a claim template: each claim is provisioned on the
//!   node the scheduler chose (a directory under the agent's storage directory, a `local`
//!   PersistentVolume pinned to the node), bound, and each replica writes its name; after the
//!   StatefulSet is deleted and made again, each replica reads its own file back;
//! - a claim grows on request (`status.capacity`), and may not shrink;
//! - deleting a claim in use waits for its pod (`kubernetes.io/pvc-protection`); once the pod
//!   is gone, the claim goes, and with `reclaimPolicy: Delete` its volume and directory too;
//! - a PersistentVolume made by hand binds to a matching claim; a claim nothing matches stays
//!   Pending with upstream's event;
//! - a claim of a class nobody provisions for waits with upstream's `ExternalProvisioning`;
//! - a pod whose claim nothing can satisfy stays Pending with upstream's `FailedScheduling`;
//! - an ephemeral volume's claim is made for its pod and goes with it;
//! - with `persistentVolumeClaimRetentionPolicy.whenDeleted: Delete` a StatefulSet's claims,
//!   volumes and directories go with it;
//! - bad input gets upstream's field errors (quantity, access mode, the provisioner of a
//!   class).

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::node::{IMAGE, NodeDir, jsonpath, node_flags, wait_event, wait_for, wait_ready};
use common::{
    Server, assert_refused, free_port, kubectl_any, kubectl_ok, kubectl_stdin, kubectl_stdin_ok,
};

/// This test's node and pod network: its own bridge and range, beside the other node tests'.
const NODE: &str = "storage-node";
const BRIDGE: &str = "capstor0";
const CLUSTER_CIDR: &str = "10.206.0.0/16";

fn apply(kc: &Path, manifest: &str) {
    kubectl_stdin_ok("default", kc, &["apply", "-f", "-"], manifest);
}

fn stateful_set(image: &str) -> String {
    format!(
        r#"
apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: web}}
spec:
  serviceName: web
  replicas: 3
  podManagementPolicy: Parallel
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
      - name: main
        image: {image}
        command:
        - sh
        - -c
        - 'if [ -f /data/id ]; then cp /data/id /data/seen; else hostname > /data/id; fi; exec sleep 3600'
        volumeMounts: [{{name: data, mountPath: /data}}]
  volumeClaimTemplates:
  - metadata: {{name: data}}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {{requests: {{storage: 1Gi}}}}
"#
    )
}

/// Waits for `pod` to run; on a timeout the test fails with what `kubectl describe` says of
/// the pod and its claims.
fn wait_running(kc: &Path, pod: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while jsonpath(kc, &["get", "pod", pod], "{.status.phase}") != "Running" {
        if std::time::Instant::now() > deadline {
            let pod = kubectl_any("default", kc, &["describe", "pod", pod]);
            let claims = kubectl_any("default", kc, &["describe", "pvc"]);
            panic!(
                "the pod does not run:\n{}\n{}",
                String::from_utf8_lossy(&pod.stdout),
                String::from_utf8_lossy(&claims.stdout)
            );
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn exec(kc: &Path, pod: &str, command: &[&str]) -> String {
    let mut args = vec!["exec", pod, "--"];
    args.extend_from_slice(command);
    kubectl_ok("default", kc, &args).trim().to_owned()
}

fn gone(kc: &Path, args: &[&str]) -> bool {
    let out = kubectl_any("default", kc, args);
    String::from_utf8_lossy(&out.stderr).contains("NotFound")
}

#[test]
fn claims_are_provisioned_bound_kept_and_reclaimed() {
    let node = NodeDir::new(BRIDGE);
    let data_dir = node.data_dir.clone();
    let port = free_port();
    let flags = node_flags(NODE, BRIDGE, CLUSTER_CIDR);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = Server::start_node(&data_dir, port, &flags);
    let kubeconfig = server.kubeconfig();
    let kc = kubeconfig.as_path();
    wait_ready(kc, NODE);
    let storage_dir = data_dir.join("agent/storage");

    // The default class of a new cluster.
    let classes = kubectl_ok("default", kc, &["get", "storageclass"]);
    assert!(classes.contains("local-path (default)"), "{classes}");
    assert!(classes.contains("capstan.io/local-path"), "{classes}");
    assert!(classes.contains("WaitForFirstConsumer"), "{classes}");

    // A StatefulSet's claims are provisioned where its pods run.
    apply(kc, &stateful_set(IMAGE));
    for i in 0..3 {
        let pod = format!("web-{i}");
        wait_running(kc, &pod);
        let claim = format!("data-web-{i}");
        assert_eq!(
            jsonpath(kc, &["get", "pvc", &claim], "{.status.phase}"),
            "Bound"
        );
        assert_eq!(
            jsonpath(
                kc,
                &["get", "pvc", &claim],
                "{.metadata.annotations.volume\\.kubernetes\\.io/selected-node}"
            ),
            NODE
        );
        let volume = jsonpath(kc, &["get", "pvc", &claim], "{.spec.volumeName}");
        let path = jsonpath(kc, &["get", "pv", &volume], "{.spec.local.path}");
        assert!(Path::new(&path).starts_with(&storage_dir), "{path}");
        assert_eq!(
            std::fs::read_to_string(Path::new(&path).join("id"))
                .unwrap()
                .trim(),
            pod
        );
        assert_eq!(
            jsonpath(kc, &["get", "pv", &volume], "{.status.phase}"),
            "Bound"
        );
        assert_eq!(
            jsonpath(kc, &["get", "pvc", &claim], "{.status.capacity.storage}"),
            "1Gi"
        );
    }
    let provisioned = wait_event(kc, "data-web-0", "ProvisioningSucceeded", |_| true);
    assert!(
        provisioned
            .message
            .starts_with("Successfully provisioned volume pvc-"),
        "{}",
        provisioned.message
    );
    // The node reports the local volumes its pods have mounted, as upstream's kubelet.
    let volume = jsonpath(kc, &["get", "pvc", "data-web-0"], "{.spec.volumeName}");
    wait_for(
        "the node to report its volumes in use",
        Duration::from_secs(30),
        || {
            jsonpath(kc, &["get", "node", NODE], "{.status.volumesInUse}")
                .contains(&format!("kubernetes.io/local-volume/{volume}"))
                .then_some(())
        },
    );

    // Gone and back: each replica finds its own file.
    kubectl_ok(
        "default",
        kc,
        &["delete", "statefulset", "web", "--wait=true"],
    );
    wait_for("the replicas to go", Duration::from_secs(60), || {
        (0..3)
            .all(|i| gone(kc, &["get", "pod", &format!("web-{i}")]))
            .then_some(())
    });
    apply(kc, &stateful_set(IMAGE));
    for i in 0..3 {
        let pod = format!("web-{i}");
        wait_running(kc, &pod);
        assert_eq!(exec(kc, &pod, &["cat", "/data/seen"]), pod);
    }

    // Growing a claim is recorded; shrinking is refused.
    kubectl_ok(
        "default",
        kc,
        &[
            "patch",
            "pvc",
            "data-web-1",
            "-p",
            r#"{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}"#,
        ],
    );
    wait_for("the claim to grow", Duration::from_secs(30), || {
        (jsonpath(
            kc,
            &["get", "pvc", "data-web-1"],
            "{.status.capacity.storage}",
        ) == "2Gi")
            .then_some(())
    });
    let shrink = kubectl_any(
        "default",
        kc,
        &[
            "patch",
            "pvc",
            "data-web-1",
            "-p",
            r#"{"spec":{"resources":{"requests":{"storage":"1Gi"}}}}"#,
        ],
    );
    assert_refused(&shrink, &["field can not be less than status.capacity"]);

    // A claim in use stays until its pod is gone; then its volume and directory go too.
    let volume = jsonpath(kc, &["get", "pvc", "data-web-2"], "{.spec.volumeName}");
    let path = jsonpath(kc, &["get", "pv", &volume], "{.spec.local.path}");
    kubectl_ok(
        "default",
        kc,
        &["delete", "pvc", "data-web-2", "--wait=false"],
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        jsonpath(kc, &["get", "pvc", "data-web-2"], "{.metadata.finalizers}"),
        r#"["kubernetes.io/pvc-protection"]"#
    );
    assert!(
        !jsonpath(
            kc,
            &["get", "pvc", "data-web-2"],
            "{.metadata.deletionTimestamp}"
        )
        .is_empty()
    );
    kubectl_ok(
        "default",
        kc,
        &["scale", "statefulset", "web", "--replicas=2"],
    );
    wait_for(
        "the claim to go with its pod",
        Duration::from_secs(60),
        || gone(kc, &["get", "pvc", "data-web-2"]).then_some(()),
    );
    wait_for("the released volume to go", Duration::from_secs(60), || {
        gone(kc, &["get", "pv", &volume]).then_some(())
    });
    assert!(!Path::new(&path).exists(), "{path} is left");

    // A volume made by hand binds to a claim it satisfies; a claim nothing satisfies waits.
    let manual = node.path().join("manual");
    std::fs::create_dir_all(&manual).unwrap();
    apply(
        kc,
        &format!(
            r#"
apiVersion: v1
kind: PersistentVolume
metadata: {{name: manual-pv, labels: {{kind: manual}}}}
spec:
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  hostPath: {{path: "{}"}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: fits}}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: ""
  selector: {{matchLabels: {{kind: manual}}}}
  resources: {{requests: {{storage: 500Mi}}}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: too-big}}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: ""
  resources: {{requests: {{storage: 5Gi}}}}
"#,
            manual.display()
        ),
    );
    wait_for("the manual claim to bind", Duration::from_secs(30), || {
        (jsonpath(kc, &["get", "pvc", "fits"], "{.status.phase}") == "Bound").then_some(())
    });
    assert_eq!(
        jsonpath(kc, &["get", "pvc", "fits"], "{.spec.volumeName}"),
        "manual-pv"
    );
    assert_eq!(
        jsonpath(kc, &["get", "pvc", "fits"], "{.status.capacity.storage}"),
        "1Gi"
    );
    assert_eq!(
        jsonpath(kc, &["get", "pv", "manual-pv"], "{.spec.claimRef.name}"),
        "fits"
    );
    let waiting = wait_event(kc, "too-big", "FailedBinding", |_| true);
    assert_eq!(
        waiting.message,
        "no persistent volumes available for this claim and no storage class is set"
    );
    assert_eq!(
        jsonpath(kc, &["get", "pvc", "too-big"], "{.status.phase}"),
        "Pending"
    );
    // A class whose provisioner nobody runs: the claim waits, with upstream's event.
    apply(
        kc,
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: elsewhere}\nprovisioner: example.com/absent\n---\napiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: unserved}\nspec: {accessModes: [ReadWriteOnce], storageClassName: elsewhere, resources: {requests: {storage: 1Gi}}}\n",
    );
    let unserved = wait_event(kc, "unserved", "ExternalProvisioning", |_| true);
    assert_eq!(
        unserved.message,
        "Waiting for a volume to be created either by the external provisioner 'example.com/absent' \
         or manually by the system administrator. If volume creation is delayed, please verify \
         that the provisioner is running and correctly registered."
    );
    assert_eq!(
        jsonpath(
            kc,
            &["get", "pvc", "unserved"],
            "{.metadata.annotations.volume\\.kubernetes\\.io/storage-provisioner}"
        ),
        "example.com/absent"
    );
    // Released with Retain: the volume stays, Released, its files untouched.
    std::fs::write(manual.join("keep"), "kept").unwrap();
    kubectl_ok(
        "default",
        kc,
        &["delete", "pvc", "fits", "--wait=true", "--timeout=60s"],
    );
    wait_for(
        "the manual volume to be released",
        Duration::from_secs(30),
        || {
            (jsonpath(kc, &["get", "pv", "manual-pv"], "{.status.phase}") == "Released")
                .then_some(())
        },
    );
    assert_eq!(
        std::fs::read_to_string(manual.join("keep")).unwrap(),
        "kept"
    );

    // A pod whose claim nothing can satisfy (a class of hand-made local volumes, none made)
    // stays Pending with upstream's scheduling message.
    apply(
        kc,
        &format!(
            "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {{name: manual-local}}\nprovisioner: kubernetes.io/no-provisioner\nvolumeBindingMode: WaitForFirstConsumer\n---\napiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: nowhere}}\nspec: {{accessModes: [ReadWriteOnce], storageClassName: manual-local, resources: {{requests: {{storage: 1Gi}}}}}}\n---\napiVersion: v1\nkind: Pod\nmetadata: {{name: stuck}}\nspec:\n  terminationGracePeriodSeconds: 0\n  containers: [{{name: main, image: {IMAGE}, command: [sleep, '3600'], volumeMounts: [{{name: d, mountPath: /d}}]}}]\n  volumes: [{{name: d, persistentVolumeClaim: {{claimName: nowhere}}}}]\n"
        ),
    );
    let unschedulable = wait_event(kc, "stuck", "FailedScheduling", |_| true);
    assert!(
        unschedulable
            .message
            .contains("1 node(s) didn't find available persistent volumes to bind"),
        "{}",
        unschedulable.message
    );
    assert_eq!(
        jsonpath(kc, &["get", "pod", "stuck"], "{.status.phase}"),
        "Pending"
    );
    kubectl_ok("default", kc, &["delete", "pod", "stuck", "--wait=true"]);

    // An ephemeral volume's claim is made for its pod and goes with it.
    apply(
        kc,
        &format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: scratch}}
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - name: main
    image: {IMAGE}
    command: [sh, -c, 'echo hi > /scratch/file && exec sleep 3600']
    volumeMounts: [{{name: scratch, mountPath: /scratch}}]
  volumes:
  - name: scratch
    ephemeral:
      volumeClaimTemplate:
        spec:
          accessModes: [ReadWriteOnce]
          resources: {{requests: {{storage: 100Mi}}}}
"#
        ),
    );
    wait_running(kc, "scratch");
    assert_eq!(exec(kc, "scratch", &["cat", "/scratch/file"]), "hi");
    assert_eq!(
        jsonpath(
            kc,
            &["get", "pvc", "scratch-scratch"],
            "{.metadata.ownerReferences[0].kind}"
        ),
        "Pod"
    );
    kubectl_ok(
        "default",
        kc,
        &["delete", "pod", "scratch", "--wait=true", "--timeout=60s"],
    );
    wait_for("the ephemeral claim to go", Duration::from_secs(60), || {
        gone(kc, &["get", "pvc", "scratch-scratch"]).then_some(())
    });

    // Bad input: upstream's field errors.
    assert_refused(
        &kubectl_stdin(
            "default",
            kc,
            &["apply", "-f", "-"],
            "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: bad}\nspec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: lots}}}\n",
        ),
        &["quantities must match the regular expression"],
    );
    assert_refused(
        &kubectl_stdin(
            "default",
            kc,
            &["apply", "-f", "-"],
            "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: bad}\nspec: {accessModes: [ReadWriteSometimes], resources: {requests: {storage: 1Gi}}}\n",
        ),
        &["spec.accessModes: Unsupported value: \"ReadWriteSometimes\""],
    );
    assert_refused(
        &kubectl_stdin(
            "default",
            kc,
            &["apply", "-f", "-"],
            "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: local-path}\nprovisioner: example.com/other\n",
        ),
        &["provisioner: Forbidden: updates to provisioner are forbidden."],
    );

    // With `whenDeleted: Delete` the claims go with the StatefulSet, and their volumes and
    // directories with them. Every pod goes before the node stops.
    let paths: Vec<String> = (0..2)
        .map(|i| {
            let volume = jsonpath(
                kc,
                &["get", "pvc", &format!("data-web-{i}")],
                "{.spec.volumeName}",
            );
            jsonpath(kc, &["get", "pv", &volume], "{.spec.local.path}")
        })
        .collect();
    kubectl_ok(
        "default",
        kc,
        &[
            "patch",
            "statefulset",
            "web",
            "-p",
            r#"{"spec":{"persistentVolumeClaimRetentionPolicy":{"whenDeleted":"Delete"}}}"#,
        ],
    );
    wait_for(
        "the claims to be owned by the StatefulSet",
        Duration::from_secs(30),
        || {
            (0..2)
                .all(|i| {
                    jsonpath(
                        kc,
                        &["get", "pvc", &format!("data-web-{i}")],
                        "{.metadata.ownerReferences[0].kind}",
                    ) == "StatefulSet"
                })
                .then_some(())
        },
    );
    kubectl_ok(
        "default",
        kc,
        &["delete", "statefulset", "web", "--wait=true"],
    );
    wait_for("the replicas to go", Duration::from_secs(60), || {
        (0..2)
            .all(|i| gone(kc, &["get", "pod", &format!("web-{i}")]))
            .then_some(())
    });
    wait_for(
        "the claims and their directories to go",
        Duration::from_secs(60),
        || {
            ((0..2).all(|i| gone(kc, &["get", "pvc", &format!("data-web-{i}")]))
                && paths.iter().all(|p| !Path::new(p).exists()))
            .then_some(())
        },
    );
    server.stop();
}

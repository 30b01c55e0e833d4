//! End to end: the volume types the node agent sets up beyond emptyDir, hostPath, configMap and
//! secret, seen from inside a container on a real node (the agent inside `capstan server`, its
//! own containerd, runc and CNI plugins, the preloaded busybox image), driven with stock
//! kubectl. One test so the node starts once:
//!
//! - `volumes` checks from inside: a downwardAPI volume (name, namespace, the labels file as
//!   the kubelet formats it, a cpu limit in millicores, the `..data` layout) that follows a
//!   label change while the container runs; a projected volume combining a ConfigMap, a
//!   Secret, the namespace, `kube-root-ca.crt` and, when the API server has the TokenRequest
//!   API, a service account token; a gitRepo volume at the older of two commits of a
//!   repository on the host; a claim pre-bound to a hostPath PersistentVolume the test and
//!   the pod exchange files through;
//! - `waits` has containers that cannot start: a claim that does not exist, and (without the
//!   TokenRequest API) a token the API server cannot issue: they stay ContainerCreating and
//!   the kubelet says why in FailedMount events;
//! - deleting the pod removes its volumes from the node and leaves the PersistentVolume's
//!   files alone.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::node::{IMAGE, NodeDir, jsonpath, node_flags, wait_event, wait_for, wait_ready};
use common::{Server, free_port, kubectl_any, kubectl_ok, kubectl_stdin_ok};

/// This test's node and pod network: its own bridge and range, beside the other node tests'.
const NODE: &str = "volume-node";
const BRIDGE: &str = "capnode2";
const CLUSTER_CIDR: &str = "10.204.0.0/16";

fn apply(kc: &Path, manifest: &str) {
    kubectl_stdin_ok("default", kc, &["apply", "-f", "-"], manifest);
}

/// Runs git in `dir`; its output.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "e2e")
        .env("GIT_AUTHOR_EMAIL", "e2e@example.com")
        .env("GIT_COMMITTER_NAME", "e2e")
        .env("GIT_COMMITTER_EMAIL", "e2e@example.com")
        .output()
        .expect("git (scripts/install-deps installs it)");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A bare repository with two commits of `file` ("one", then "two"); returns its path and the
/// first commit.
fn repository(root: &Path) -> (std::path::PathBuf, String) {
    let work = root.join("repo-work");
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "-q", "-b", "main"]);
    std::fs::write(work.join("file"), "one").unwrap();
    git(&work, &["add", "file"]);
    git(&work, &["commit", "-q", "-m", "one"]);
    let first = git(&work, &["rev-parse", "HEAD"]);
    std::fs::write(work.join("file"), "two").unwrap();
    git(&work, &["commit", "-q", "-am", "two"]);
    let bare = root.join("repo.git");
    git(
        root,
        &[
            "clone",
            "-q",
            "--bare",
            &work.display().to_string(),
            &bare.display().to_string(),
        ],
    );
    (bare, first)
}

fn volumes_pod(image: &str, repo: &Path, revision: &str, with_token: bool) -> String {
    let token_source = if with_token {
        "\n      - serviceAccountToken: {path: token, expirationSeconds: 3607}"
    } else {
        ""
    };
    let token_check = if with_token {
        // A JWT: three dot-separated parts, with the projected volume's mode.
        r#"
      test "$(tr -cd . < /bundle/token)" = ..
      test "$(stat -L -c %a /bundle/token)" = 440"#
    } else {
        ""
    };
    let repository = format!("file://{}", repo.display());
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: volumes
  labels: {{app: volumes, tier: test}}
spec:
  restartPolicy: Never
  serviceAccountName: default
  volumes:
  - name: info
    downwardAPI:
      items:
      - {{path: name, fieldRef: {{fieldPath: metadata.name}}}}
      - {{path: namespace, fieldRef: {{fieldPath: metadata.namespace}}, mode: 0400}}
      - {{path: labels, fieldRef: {{fieldPath: metadata.labels}}}}
      - {{path: cpu_limit, resourceFieldRef: {{containerName: check, resource: limits.cpu, divisor: 1m}}}}
  - name: bundle
    projected:
      defaultMode: 0440
      sources:
      - configMap: {{name: settings, items: [{{key: greeting, path: greeting}}]}}
      - secret: {{name: creds}}
      - downwardAPI: {{items: [{{path: namespace, fieldRef: {{fieldPath: metadata.namespace}}}}]}}
      - configMap: {{name: kube-root-ca.crt, items: [{{key: ca.crt, path: ca.crt}}]}}{token_source}
  - name: repo
    gitRepo: {{repository: "{repository}", revision: "{revision}", directory: "."}}
  - name: data
    persistentVolumeClaim: {{claimName: data}}
  containers:
  - name: check
    image: {image}
    resources:
      limits: {{cpu: 250m, memory: 64Mi}}
    volumeMounts:
    - {{name: info, mountPath: /info}}
    - {{name: bundle, mountPath: /bundle}}
    - {{name: repo, mountPath: /repo}}
    - {{name: data, mountPath: /data}}
    command:
    - sh
    - -c
    - |
      set -e
      test "$(cat /info/name)" = volumes
      test "$(cat /info/namespace)" = default
      test "$(cat /info/labels)" = "$(printf 'app="volumes"\ntier="test"')"
      test "$(cat /info/cpu_limit)" = 250
      test -L /info/name && test -L /info/..data
      test "$(stat -L -c %a /info/name)" = 644
      test "$(stat -L -c %a /info/namespace)" = 400
      test "$(cat /bundle/greeting)" = hello
      test "$(cat /bundle/password)" = s3cret
      test "$(cat /bundle/namespace)" = default
      grep -q "BEGIN CERTIFICATE" /bundle/ca.crt
      test "$(stat -L -c %a /bundle/greeting)" = 440{token_check}
      ! touch /bundle/new 2>/dev/null
      test "$(cat /repo/file)" = one
      test -d /repo/.git
      test "$(cat /data/from-host)" = "hello from the host"
      echo "hello from the pod" > /data/from-pod
      echo "static checks passed"
      # The labels file follows a label change while the container runs.
      i=0
      until grep -q 'phase="relabelled"' /info/labels; do
        i=$((i+1)); test $i -lt 100; sleep 0.3
      done
      test "$(cat /info/labels)" = "$(printf 'app="volumes"\nphase="relabelled"\ntier="test"')"
"#
    )
}

fn waits_pod(image: &str, with_token_container: bool) -> String {
    let token = if with_token_container {
        format!(
            r#"
  - name: token
    image: {image}
    command: ["sleep", "3600"]
    volumeMounts: [{{name: access, mountPath: /var/run/secrets/kubernetes.io/serviceaccount}}]"#
        )
    } else {
        String::new()
    };
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: waits}}
spec:
  nodeName: {NODE}
  serviceAccountName: default
  terminationGracePeriodSeconds: 0
  volumes:
  - name: missing
    persistentVolumeClaim: {{claimName: nope}}
  - name: access
    projected:
      sources:
      - serviceAccountToken: {{path: token}}
  containers:
  - name: claim
    image: {image}
    command: ["sleep", "3600"]
    volumeMounts: [{{name: missing, mountPath: /data}}]{token}
"#
    )
}

fn waiting(kc: &Path, pod: &str, container: &str) -> (String, String) {
    let path = |field: &str| {
        format!("{{.status.containerStatuses[?(@.name==\"{container}\")].state.waiting.{field}}}")
    };
    (
        jsonpath(kc, &["get", "pod", pod], &path("reason")),
        jsonpath(kc, &["get", "pod", pod], &path("message")),
    )
}

#[test]
fn volumes_are_set_up_on_the_node() {
    let node = NodeDir::new(BRIDGE);
    let data_dir = node.data_dir.clone();
    let image = IMAGE;
    // What the pod reads from the host: a repository, and a PersistentVolume's directory.
    let (repo, first_commit) = repository(node.path());
    let pv_dir = node.path().join("pv");
    std::fs::create_dir_all(&pv_dir).unwrap();
    std::fs::write(pv_dir.join("from-host"), "hello from the host").unwrap();

    let port = free_port();
    let flags = node_flags(NODE, BRIDGE, CLUSTER_CIDR);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = Server::start_node(&data_dir, port, &flags);
    let kubeconfig = server.kubeconfig();
    let kc = kubeconfig.as_path();
    wait_ready(kc, NODE);
    // Whether the API server answers the TokenRequest subresource: the token is checked only
    // then.
    wait_for(
        "the default service account",
        Duration::from_secs(30),
        || {
            kubectl_any("default", kc, &["get", "serviceaccount", "default"])
                .status
                .success()
                .then_some(())
        },
    );
    let probe = kubectl_any("default", kc, &["create", "token", "default"]);
    let token_api = probe.status.success();
    if !token_api {
        eprintln!(
            "node_volumes_e2e: the API server has no TokenRequest API yet ({}); the token file is not checked",
            String::from_utf8_lossy(&probe.stderr).trim()
        );
    }

    kubectl_ok(
        "default",
        kc,
        &[
            "create",
            "configmap",
            "settings",
            "--from-literal=greeting=hello",
        ],
    );
    kubectl_ok(
        "default",
        kc,
        &[
            "create",
            "secret",
            "generic",
            "creds",
            "--from-literal=password=s3cret",
        ],
    );
    // The volume and the claim name each other (pre-bound by the user).
    let claim = format!(
        r#"
apiVersion: v1
kind: PersistentVolume
metadata: {{name: volume-e2e-pv}}
spec:
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  hostPath: {{path: "{}", type: Directory}}
  claimRef: {{namespace: default, name: data}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: data}}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: ""
  volumeName: volume-e2e-pv
  resources: {{requests: {{storage: 1Gi}}}}
"#,
        pv_dir.display()
    );
    apply(kc, &claim);
    apply(kc, &volumes_pod(image, &repo, &first_commit, token_api));
    apply(kc, &waits_pod(image, !token_api));

    // The static checks pass and the container waits for the label change.
    wait_for(
        "the volumes pod's static checks",
        Duration::from_secs(60),
        || {
            let phase = jsonpath(kc, &["get", "pod", "volumes"], "{.status.phase}");
            if phase == "Failed" {
                let state = jsonpath(
                    kc,
                    &["get", "pod", "volumes"],
                    "{.status.containerStatuses[0].state}",
                );
                panic!("the checks inside the container failed: {state}");
            }
            let logs = kubectl_any("default", kc, &["logs", "volumes"]);
            String::from_utf8_lossy(&logs.stdout)
                .contains("static checks passed")
                .then_some(())
        },
    );
    assert_eq!(
        std::fs::read_to_string(pv_dir.join("from-pod")).unwrap(),
        "hello from the pod\n"
    );
    kubectl_ok(
        "default",
        kc,
        &["label", "pod", "volumes", "phase=relabelled"],
    );
    let phase = wait_for("the volumes pod to finish", Duration::from_secs(40), || {
        let phase = jsonpath(kc, &["get", "pod", "volumes"], "{.status.phase}");
        (phase == "Succeeded" || phase == "Failed").then_some(phase)
    });
    let state = jsonpath(
        kc,
        &["get", "pod", "volumes"],
        "{.status.containerStatuses[0].state}",
    );
    assert_eq!(
        phase, "Succeeded",
        "the checks inside the container failed: {state}"
    );

    // Containers whose volumes cannot be set up wait in ContainerCreating, as upstream's do,
    // and the kubelet says why in FailedMount events about the pod.
    let mount_failed = wait_event(kc, "waits", "FailedMount", |e| {
        e.message.contains("\"missing\"")
    });
    assert_eq!(
        mount_failed.message,
        "MountVolume.SetUp failed for volume \"missing\" : persistentvolumeclaim \"nope\" not found"
    );
    assert_eq!(mount_failed.type_, "Warning");
    assert_eq!(mount_failed.field_path, "");
    assert_eq!(mount_failed.source, ("kubelet".to_owned(), NODE.to_owned()));
    assert_eq!(
        waiting(kc, "waits", "claim"),
        ("ContainerCreating".to_owned(), String::new())
    );
    if !token_api {
        let token_failed = wait_event(kc, "waits", "FailedMount", |e| {
            e.message.contains("\"access\"")
        });
        assert!(
            token_failed.message.starts_with(
                "MountVolume.SetUp failed for volume \"access\" : failed to fetch token for service account \"default/default\""
            ),
            "{}",
            token_failed.message
        );
        assert_eq!(
            waiting(kc, "waits", "token"),
            ("ContainerCreating".to_owned(), String::new())
        );
    }

    // The pod's volumes are on the node until the pod goes; the PersistentVolume's files stay.
    let uid = jsonpath(kc, &["get", "pod", "volumes"], "{.metadata.uid}");
    let pod_dir = data_dir.join("agent/kubelet/pods").join(&uid);
    let volumes = pod_dir.join("volumes");
    for plugin in ["downward-api/info", "projected/bundle"] {
        let link = volumes.join(format!("kubernetes.io~{plugin}/..data"));
        assert!(link.is_symlink(), "{}", link.display());
    }
    assert!(volumes.join("kubernetes.io~git-repo/repo/.git").is_dir());
    kubectl_ok(
        "default",
        kc,
        &[
            "delete",
            "pod",
            "volumes",
            "waits",
            "--wait=true",
            "--timeout=60s",
        ],
    );
    wait_for("the pod's directory to go", Duration::from_secs(30), || {
        (!pod_dir.exists()).then_some(())
    });
    assert_eq!(
        std::fs::read_to_string(pv_dir.join("from-host")).unwrap(),
        "hello from the host"
    );
    assert!(pv_dir.join("from-pod").exists());
    server.stop();
}

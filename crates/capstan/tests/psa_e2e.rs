//! End to end: Pod Security admission with stock kubectl against `capstan server` started with
//! an admission configuration file (`--admission-control-config-file`, one exempt namespace).
//! A namespace labeled `enforce=restricted` refuses a privileged `kubectl run` with upstream's
//! message and admits a compliant pod; `warn=baseline` admits with `Warning:` lines; a
//! Deployment whose template violates the enforced level is created with a warning; labeling a
//! namespace whose pods would violate the new level warns with them; the exempt namespace takes
//! privileged pods (warning that its labels are ignored); a bad label value is refused. Pods
//! stay Pending: no node is needed.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::Output;

use common::{Server, eventually, free_port, kubectl_any, kubectl_ok};

const KUBECTL: &str = "default";

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Creates `namespace` (with `labels`, `key=value`) and waits for its `default` service
/// account, which pods need.
fn namespace(kc: &Path, namespace: &str, labels: &[&str]) -> Output {
    kubectl_ok(KUBECTL, kc, &["create", "namespace", namespace]);
    let labeled = if labels.is_empty() {
        None
    } else {
        let mut args = vec!["label", "namespace", namespace];
        args.extend_from_slice(labels);
        Some(kubectl_any(KUBECTL, kc, &args))
    };
    eventually("the default service account", || {
        kubectl_any(
            KUBECTL,
            kc,
            &["-n", namespace, "get", "serviceaccount", "default"],
        )
        .status
        .success()
        .then_some(())
    });
    labeled.unwrap_or_else(|| kubectl_any(KUBECTL, kc, &["get", "namespace", namespace]))
}

/// `kubectl run name --image=busybox` in `namespace` with `security` as the container's
/// security context.
fn run(kc: &Path, namespace: &str, name: &str, security: &str) -> Output {
    let overrides = format!(
        r#"{{"spec":{{"containers":[{{"name":"{name}","image":"busybox","securityContext":{security}}}]}}}}"#
    );
    kubectl_any(
        KUBECTL,
        kc,
        &[
            "-n",
            namespace,
            "run",
            name,
            "--image=busybox",
            "--overrides",
            &overrides,
        ],
    )
}

const PRIVILEGED: &str = r#"{"privileged":true}"#;
const RESTRICTED: &str = r#"{"allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]},"runAsNonRoot":true,"seccompProfile":{"type":"RuntimeDefault"}}"#;

#[test]
fn pod_security_admission_with_kubectl() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("admission.yaml");
    std::fs::write(
        &config,
        "apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults:
      enforce: privileged
      enforce-version: latest
    exemptions:
      namespaces: [exempt]
",
    )
    .unwrap();
    let data = dir.path().join("data");
    let server = Server::start_with(
        &data,
        free_port(),
        &["--admission-control-config-file", config.to_str().unwrap()],
    );
    let kc = server.kubeconfig();

    // enforce=restricted: a privileged pod is refused with upstream's message.
    namespace(
        &kc,
        "strict",
        &["pod-security.kubernetes.io/enforce=restricted"],
    );
    let refused = run(&kc, "strict", "priv", PRIVILEGED);
    assert!(!refused.status.success());
    assert_eq!(
        stderr(&refused).trim_end(),
        "Error from server (Forbidden): pods \"priv\" is forbidden: violates PodSecurity \"restricted:latest\": \
         privileged (container \"priv\" must not set securityContext.privileged=true), \
         allowPrivilegeEscalation != false (container \"priv\" must set securityContext.allowPrivilegeEscalation=false), \
         unrestricted capabilities (container \"priv\" must set securityContext.capabilities.drop=[\"ALL\"]), \
         runAsNonRoot != true (pod or container \"priv\" must set securityContext.runAsNonRoot=true), \
         seccompProfile (pod or container \"priv\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"
    );
    // A compliant pod is admitted, without warnings.
    let admitted = run(&kc, "strict", "ok", RESTRICTED);
    assert!(admitted.status.success(), "{}", stderr(&admitted));
    assert_eq!(
        String::from_utf8_lossy(&admitted.stdout),
        "pod/ok created\n"
    );
    assert_eq!(stderr(&admitted), "");

    // A Deployment whose template violates the enforced level is created, with a warning.
    let deployment = kubectl_any(
        KUBECTL,
        &kc,
        &[
            "-n",
            "strict",
            "create",
            "deployment",
            "web",
            "--image=busybox",
        ],
    );
    assert!(deployment.status.success(), "{}", stderr(&deployment));
    assert_eq!(
        stderr(&deployment),
        "Warning: would violate PodSecurity \"restricted:latest\": \
         allowPrivilegeEscalation != false (container \"busybox\" must set securityContext.allowPrivilegeEscalation=false), \
         unrestricted capabilities (container \"busybox\" must set securityContext.capabilities.drop=[\"ALL\"]), \
         runAsNonRoot != true (pod or container \"busybox\" must set securityContext.runAsNonRoot=true), \
         seccompProfile (pod or container \"busybox\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")\n"
    );

    // warn=baseline: admitted, with the violations as a warning.
    namespace(&kc, "warned", &["pod-security.kubernetes.io/warn=baseline"]);
    let warned = run(&kc, "warned", "p", PRIVILEGED);
    assert!(warned.status.success(), "{}", stderr(&warned));
    assert_eq!(
        stderr(&warned),
        "Warning: would violate PodSecurity \"baseline:latest\": privileged (container \"p\" must not set securityContext.privileged=true)\n"
    );

    // A bad level is refused as upstream refuses it.
    let bad = kubectl_any(
        KUBECTL,
        &kc,
        &[
            "label",
            "namespace",
            "warned",
            "pod-security.kubernetes.io/enforce=bogus",
        ],
    );
    assert!(!bad.status.success());
    assert_eq!(
        stderr(&bad).trim_end(),
        "The Namespace \"warned\" is invalid: metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: \"bogus\": must be one of privileged, baseline, restricted"
    );

    // Enforcing a level existing pods violate warns with them.
    namespace(&kc, "busy", &[]);
    for (name, security) in [("a", "{}"), ("b", "{}"), ("c", PRIVILEGED)] {
        let created = run(&kc, "busy", name, security);
        assert!(created.status.success(), "{}", stderr(&created));
    }
    let labeled = kubectl_any(
        KUBECTL,
        &kc,
        &[
            "label",
            "namespace",
            "busy",
            "pod-security.kubernetes.io/enforce=restricted",
        ],
    );
    assert!(labeled.status.success(), "{}", stderr(&labeled));
    assert_eq!(
        String::from_utf8_lossy(&labeled.stdout),
        "namespace/busy labeled\n"
    );
    assert_eq!(
        stderr(&labeled),
        "Warning: existing pods in namespace \"busy\" violate the new PodSecurity enforce level \"restricted:latest\"\n\
         Warning: a (and 1 other pod): allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, seccompProfile\n\
         Warning: c: privileged, allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, seccompProfile\n"
    );

    // The namespace the configuration exempts takes privileged pods whatever its labels say.
    let exempt = namespace(
        &kc,
        "exempt",
        &["pod-security.kubernetes.io/enforce=restricted"],
    );
    assert!(exempt.status.success(), "{}", stderr(&exempt));
    assert_eq!(
        stderr(&exempt),
        "Warning: namespace \"exempt\" is exempt from Pod Security, and the policy (enforce=restricted:latest) will be ignored\n"
    );
    let free = run(&kc, "exempt", "priv", PRIVILEGED);
    assert!(free.status.success(), "{}", stderr(&free));
    assert_eq!(stderr(&free), "");
}

#[test]
fn a_bad_admission_configuration_stops_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("admission.yaml");
    std::fs::write(
        &config,
        "apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults:
      enforce: strict
",
    )
    .unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["server", "--disable-agent", "--bind-address", "127.0.0.1"])
        .args([
            "--https-listen-port",
            &free_port().to_string(),
            "--dns-port",
            "0",
        ])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("--admission-control-config-file")
        .arg(&config)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = stderr(&output);
    assert!(
        stderr.contains(
            "defaults.enforce: Invalid value: \"strict\": must be one of privileged, baseline, restricted"
        ),
        "{stderr}"
    );
}

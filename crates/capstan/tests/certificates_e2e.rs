//! End to end: the `certificates.k8s.io/v1` CertificateSigningRequest API with stock kubectl
//! against the real `capstan server` (no node). A user makes a key and a request (rcgen); the
//! server records who asked, whatever the body claims; someone allowed to update approvals but
//! not to approve for the signer is refused; `kubectl certificate approve` as the admin gets the
//! request signed by the cluster CA, and the issued certificate authenticates as that user;
//! `kubectl certificate deny` leaves a request unsigned; `system:masters` may not be asked of
//! the kube-apiserver-client signer; a node client request by someone allowed to create
//! `certificatesigningrequests/nodeclient` is approved and signed by the controllers alone.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use base64::Engine;
use common::*;
use serde_json::Value;

const KUBECTL: &str = "1.33";

/// A new key and a PEM certificate request for `cn` in `orgs`.
fn key_and_request(cn: &str, orgs: &[&str]) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    for org in orgs {
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, *org);
    }
    let request = params.serialize_request(&key).unwrap().pem().unwrap();
    (key.serialize_pem(), request)
}

/// A CSR manifest named `name` for `request`, claiming to come from `mallory`.
fn manifest(name: &str, request: &str, signer: &str, usages: &[&str]) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(request);
    format!(
        "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata:\n  \
         name: {name}\nspec:\n  request: {encoded}\n  signerName: {signer}\n  \
         expirationSeconds: 3600\n  usages: [{}]\n  username: mallory\n  groups: [system:masters]\n",
        usages.join(", ")
    )
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn csr_json(kubeconfig: &Path, name: &str) -> Value {
    let text = kubectl_ok(KUBECTL, kubeconfig, &["get", "csr", name, "-o", "json"]);
    serde_json::from_str(&text).unwrap()
}

/// The issued certificate of `name` once the signer has written it.
fn issued(kubeconfig: &Path, name: &str) -> String {
    eventually(&format!("a certificate for {name}"), || {
        let csr = csr_json(kubeconfig, name);
        let encoded = csr.pointer("/status/certificate")?.as_str()?.to_owned();
        let pem = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .unwrap();
        Some(String::from_utf8(pem).unwrap())
    })
}

/// A kubeconfig that authenticates with the client certificate `cert` and `key` only.
fn cert_kubeconfig(dir: &Path, server: &Server, name: &str, cert: &str, key: &str) -> PathBuf {
    let cert_path = dir.join(format!("{name}.crt"));
    let key_path = dir.join(format!("{name}.key"));
    std::fs::write(&cert_path, cert).unwrap();
    std::fs::write(&key_path, key).unwrap();
    let path = dir.join(format!("{name}.kubeconfig"));
    let ca = dir.join("data").join("tls").join("ca.crt");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: capstan\n  cluster:\n    server: {}\n    \
         certificate-authority: {}\nusers:\n- name: {name}\n  user:\n    client-certificate: {}\n    \
         client-key: {}\ncontexts:\n- name: {name}\n  context: {{cluster: capstan, user: {name}}}\n\
         current-context: {name}\n",
        server.url(""),
        ca.display(),
        cert_path.display(),
        key_path.display()
    );
    std::fs::write(&path, text).unwrap();
    path
}

fn condition_types(csr: &Value) -> Vec<String> {
    csr.pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(|c| {
            c.iter()
                .filter_map(|c| c["type"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn certificate_signing_requests_with_stock_kubectl() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), free_port());
    let admin = server.kubeconfig();

    // alice may make requests (upstream's bootstrap role for that); bob may write approvals
    // but is not an approver of any signer.
    kubectl_ok(
        KUBECTL,
        &admin,
        &[
            "create",
            "clusterrolebinding",
            "alice-requests",
            "--clusterrole=system:node-bootstrapper",
            "--user=alice",
        ],
    );
    kubectl_ok(
        KUBECTL,
        &admin,
        &[
            "create",
            "clusterrole",
            "approval-writer",
            "--verb=get,update",
            "--resource=certificatesigningrequests,certificatesigningrequests/approval",
        ],
    );
    kubectl_ok(
        KUBECTL,
        &admin,
        &[
            "create",
            "clusterrolebinding",
            "bob-approvals",
            "--clusterrole=approval-writer",
            "--user=bob",
        ],
    );

    // alice asks for a client certificate; the spec records her, not what the body claims.
    let (key, request) = key_and_request("alice", &["devs"]);
    let created = kubectl_stdin(
        KUBECTL,
        &admin,
        &["--as=alice", "--as-group=devs", "create", "-f", "-"],
        &manifest(
            "alice",
            &request,
            "kubernetes.io/kube-apiserver-client",
            &["client auth"],
        ),
    );
    assert!(created.status.success(), "{}", stderr(&created));
    let csr = csr_json(&admin, "alice");
    assert_eq!(csr["spec"]["username"], "alice");
    assert_eq!(
        csr["spec"]["groups"],
        serde_json::json!(["devs", "system:authenticated"])
    );
    let row = kubectl_ok(KUBECTL, &admin, &["get", "csr", "alice", "--no-headers"]);
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells[2..],
        [
            "kubernetes.io/kube-apiserver-client",
            "alice",
            "60m",
            "Pending"
        ],
        "{row}"
    );

    // bob may update approvals, but not approve for the signer.
    let refused = kubectl_any(
        KUBECTL,
        &admin,
        &["--as=bob", "certificate", "approve", "alice"],
    );
    assert_refused(
        &refused,
        &[
            "certificatesigningrequests.certificates.k8s.io \"alice\" is forbidden: user not \
             permitted to approve requests with signerName \"kubernetes.io/kube-apiserver-client\"",
        ],
    );
    assert!(condition_types(&csr_json(&admin, "alice")).is_empty());

    // The admin approves; the signer issues; the certificate is alice's.
    kubectl_ok(KUBECTL, &admin, &["certificate", "approve", "alice"]);
    let cert = issued(&admin, "alice");
    assert!(cert.starts_with("-----BEGIN CERTIFICATE-----"), "{cert}");
    let csr = csr_json(&admin, "alice");
    assert_eq!(condition_types(&csr), ["Approved"]);
    assert_eq!(csr["status"]["conditions"][0]["reason"], "KubectlApprove");
    let row = kubectl_ok(KUBECTL, &admin, &["get", "csr", "alice", "--no-headers"]);
    assert!(row.trim_end().ends_with("Approved,Issued"), "{row}");

    let alice = cert_kubeconfig(dir.path(), &server, "alice", &cert, &key);
    let whoami: Value = serde_json::from_str(&kubectl_ok(
        KUBECTL,
        &alice,
        &["auth", "whoami", "-o", "json"],
    ))
    .unwrap();
    assert_eq!(whoami["status"]["userInfo"]["username"], "alice");
    assert_eq!(
        whoami["status"]["userInfo"]["groups"],
        serde_json::json!(["devs", "system:authenticated"])
    );
    let forbidden = kubectl_any(KUBECTL, &alice, &["get", "secrets"]);
    assert!(
        stderr(&forbidden).contains("User \"alice\" cannot list resource \"secrets\""),
        "{}",
        stderr(&forbidden)
    );

    // A denied request stays unsigned.
    let (_, request) = key_and_request("carol", &[]);
    let created = kubectl_stdin(
        KUBECTL,
        &admin,
        &["create", "-f", "-"],
        &manifest(
            "carol",
            &request,
            "kubernetes.io/kube-apiserver-client",
            &["client auth"],
        ),
    );
    assert!(created.status.success(), "{}", stderr(&created));
    kubectl_ok(KUBECTL, &admin, &["certificate", "deny", "carol"]);
    let csr = csr_json(&admin, "carol");
    assert_eq!(condition_types(&csr), ["Denied"]);
    assert_eq!(csr["status"]["conditions"][0]["reason"], "KubectlDeny");
    std::thread::sleep(std::time::Duration::from_secs(1));
    assert!(
        csr_json(&admin, "carol")
            .pointer("/status/certificate")
            .is_none()
    );
    // Denied, it cannot be approved as well (kubectl refuses itself; the API does too).
    let mut approved_too = csr_json(&admin, "carol");
    approved_too["status"]["conditions"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"type": "Approved", "status": "True", "reason": "Again"}));
    let both = kubectl_stdin(
        KUBECTL,
        &admin,
        &[
            "replace",
            "--raw",
            "/apis/certificates.k8s.io/v1/certificatesigningrequests/carol/approval",
            "-f",
            "-",
        ],
        &approved_too.to_string(),
    );
    assert_refused(
        &both,
        &["Approved and Denied conditions are mutually exclusive"],
    );

    // system:masters may not be asked of the API server's client signer.
    let (_, request) = key_and_request("root", &["system:masters"]);
    let refused = kubectl_stdin(
        KUBECTL,
        &admin,
        &["create", "-f", "-"],
        &manifest(
            "root",
            &request,
            "kubernetes.io/kube-apiserver-client",
            &["client auth"],
        ),
    );
    assert_refused(
        &refused,
        &[
            "is forbidden: use of kubernetes.io/kube-apiserver-client signer with \
             system:masters group is not allowed",
        ],
    );

    // A node client request by someone allowed to create nodeclient requests is approved and
    // signed without anyone's kubectl.
    kubectl_ok(
        KUBECTL,
        &admin,
        &[
            "create",
            "clusterrolebinding",
            "bootstrap-requests",
            "--clusterrole=system:node-bootstrapper",
            "--group=system:bootstrappers",
        ],
    );
    kubectl_ok(
        KUBECTL,
        &admin,
        &[
            "create",
            "clusterrolebinding",
            "bootstrap-nodeclient",
            "--clusterrole=system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            "--group=system:bootstrappers",
        ],
    );
    let (_, request) = key_and_request("system:node:n1", &["system:nodes"]);
    let created = kubectl_stdin(
        KUBECTL,
        &admin,
        &[
            "--as=system:bootstrap:abcdef",
            "--as-group=system:bootstrappers",
            "create",
            "-f",
            "-",
        ],
        &manifest(
            "node-n1",
            &request,
            "kubernetes.io/kube-apiserver-client-kubelet",
            &["digital signature", "client auth"],
        ),
    );
    assert!(created.status.success(), "{}", stderr(&created));
    issued(&admin, "node-n1");
    let csr = csr_json(&admin, "node-n1");
    assert_eq!(condition_types(&csr), ["Approved"]);
    assert_eq!(csr["status"]["conditions"][0]["reason"], "AutoApproved");
    assert_eq!(
        csr["status"]["conditions"][0]["message"],
        "Auto approving kubelet client certificate after SubjectAccessReview."
    );

    // A kubelet serving certificate comes from the kubelet serving CA, which the API server
    // checks kubelets against, not from the cluster CA clients trust.
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["n1.example".to_owned()]).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "system:node:n1");
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    let request = params.serialize_request(&key).unwrap().pem().unwrap();
    let created = kubectl_stdin(
        KUBECTL,
        &admin,
        &["create", "-f", "-"],
        &manifest(
            "serving-n1",
            &request,
            "kubernetes.io/kubelet-serving",
            &["digital signature", "server auth"],
        ),
    );
    assert!(created.status.success(), "{}", stderr(&created));
    kubectl_ok(KUBECTL, &admin, &["certificate", "approve", "serving-n1"]);
    let serving = dir.path().join("serving.crt");
    std::fs::write(&serving, issued(&admin, "serving-n1")).unwrap();
    let tls = dir.path().join("data").join("tls");
    let verify = |ca: &str| {
        std::process::Command::new("openssl")
            .arg("verify")
            .arg("-CAfile")
            .arg(tls.join(ca))
            .arg(&serving)
            .output()
            .unwrap()
            .status
            .success()
    };
    assert!(verify("kubelet-serving-ca.crt"));
    assert!(!verify("ca.crt"));

    // A kubelet request that breaks the signer's rules fails instead.
    let (_, request) = key_and_request("alice", &["system:nodes"]);
    let created = kubectl_stdin(
        KUBECTL,
        &admin,
        &["create", "-f", "-"],
        &manifest(
            "not-a-node",
            &request,
            "kubernetes.io/kube-apiserver-client-kubelet",
            &["digital signature", "client auth"],
        ),
    );
    assert!(created.status.success(), "{}", stderr(&created));
    kubectl_ok(KUBECTL, &admin, &["certificate", "approve", "not-a-node"]);
    let failed = eventually("the signer's refusal", || {
        let csr = csr_json(&admin, "not-a-node");
        condition_types(&csr)
            .contains(&"Failed".to_owned())
            .then_some(csr)
    });
    let failure = &failed["status"]["conditions"][1];
    assert_eq!(failure["reason"], "SignerValidationFailure");
    assert_eq!(
        failure["message"],
        "subject common name does not begin with system:node:"
    );
    assert!(failed.pointer("/status/certificate").is_none());
}

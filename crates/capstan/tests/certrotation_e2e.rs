//! End to end: certificates renewed before they expire, against the real `capstan server` with
//! its node agent. With `--cluster-signing-duration 100s` the node's certificates last 100 s
//! (a signer's five-minute backdate makes their 70-90 % deadline fall within the first
//! minute): the kubelet renews its client certificate through a CSR the controllers approve
//! (`kubectl get csr` shows it Approved,Issued), keeps talking to the API server past the first
//! certificate's end, and serves a renewed serving certificate on its port; a serving request
//! naming anything but the node's own names is left pending. Then `capstan certificate check`
//! lists the server's certificates, `capstan certificate rotate` moves its leaves aside, and a
//! restart issues new ones from the same CA: kubectl with the old kubeconfig still works.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use common::node::{Cleanup, flag_value, node_flags, wait_for, wait_ready};
use common::*;
use serde_json::Value;

const KUBECTL: &str = "1.33";
const NODE: &str = "cert-node";
const BRIDGE: &str = "capcert0";
const CLUSTER_CIDR: &str = "10.207.0.0/16";

/// The first PEM certificate in `text`.
fn first_pem(text: &str) -> Option<String> {
    let start = text.find("-----BEGIN CERTIFICATE-----")?;
    let end = text[start..].find("-----END CERTIFICATE-----")? + start + 25;
    Some(format!("{}\n", &text[start..end]))
}

/// The end of a PEM certificate.
fn not_after(cert_pem: &str) -> SystemTime {
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes()).unwrap();
    let (_, cert) = x509_parser::parse_x509_certificate(&pem.contents).unwrap();
    let secs = cert.validity().not_after.timestamp();
    SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).unwrap())
}

/// The issuer of a PEM certificate, as x509-parser prints it.
fn issuer(cert_pem: &str) -> String {
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes()).unwrap();
    let (_, cert) = x509_parser::parse_x509_certificate(&pem.contents).unwrap();
    cert.issuer().to_string()
}

/// The client certificate a kubeconfig holds.
fn kubeconfig_cert(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let data = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("client-certificate-data: "))
        .unwrap();
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .unwrap(),
    )
    .unwrap()
}

/// The certificate served at `127.0.0.1:<port>`.
fn served_cert(port: &str) -> Option<String> {
    let output = Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
        .stdin(Stdio::null())
        .output()
        .ok()?;
    first_pem(&String::from_utf8_lossy(&output.stdout))
}

/// The CSRs as JSON.
fn csrs(kubeconfig: &Path) -> Vec<Value> {
    let text = kubectl_ok(KUBECTL, kubeconfig, &["get", "csr", "-o", "json"]);
    let list: Value = serde_json::from_str(&text).unwrap();
    list["items"].as_array().cloned().unwrap_or_default()
}

fn approved(csr: &Value) -> bool {
    csr["status"]["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["type"] == "Approved"))
}

/// A node's issued request to `signer`, if any.
fn issued_request(kubeconfig: &Path, signer: &str) -> Option<Value> {
    csrs(kubeconfig).into_iter().find(|csr| {
        csr["spec"]["signerName"] == signer
            && csr["spec"]["username"] == format!("system:node:{NODE}")
            && approved(csr)
            && csr["status"]["certificate"]
                .as_str()
                .is_some_and(|c| !c.is_empty())
    })
}

fn capstan(args: &[&str], data_dir: &Path) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(args)
        .arg("--data-dir")
        .arg(data_dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "capstan {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A kubelet serving request of the node (as the node) for `names`, PEM.
fn serving_request(names: &[&str]) -> String {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut params =
        rcgen::CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
            .unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("system:node:{NODE}"));
    params.serialize_request(&key).unwrap().pem().unwrap()
}

#[test]
fn node_certificates_rotate_through_csrs_and_server_leaves_renew() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let _cleanup = Cleanup {
        data_dir: data_dir.clone(),
        bridge: BRIDGE,
    };
    let mut flags = node_flags(NODE, BRIDGE, CLUSTER_CIDR);
    let kubelet_port = flag_value(&flags, "--kubelet-port").to_string();
    flags.extend(["--cluster-signing-duration", "100s"].map(str::to_owned));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let port = free_port();
    let server = Server::start_node(&data_dir, port, &flags);
    let kc = server.kubeconfig();
    wait_ready(&kc, NODE);

    // The node started with a 100 s client certificate from the server.
    let node_kubeconfig = data_dir.join("cred/node.kubeconfig");
    let first = kubeconfig_cert(&node_kubeconfig);
    let first_end = not_after(&first);
    let life = first_end
        .duration_since(SystemTime::now())
        .unwrap_or_default();
    assert!(life <= Duration::from_secs(100), "{life:?}");

    // The kubelet renews it through a CSR the controllers approve and sign.
    let client_csr = wait_for(
        "a renewed client certificate",
        Duration::from_secs(150),
        || issued_request(&kc, "kubernetes.io/kube-apiserver-client-kubelet"),
    );
    assert_eq!(
        client_csr["spec"]["usages"],
        serde_json::json!(["digital signature", "client auth"])
    );
    assert!(
        client_csr["spec"]["groups"]
            .as_array()
            .unwrap()
            .contains(&Value::from("system:nodes"))
    );
    let table = kubectl_ok(KUBECTL, &kc, &["get", "csr"]);
    assert!(table.contains("Approved,Issued"), "{table}");
    assert!(
        table.contains("kubernetes.io/kube-apiserver-client-kubelet"),
        "{table}"
    );
    // ... and stores it, rewriting the node's kubeconfig.
    let renewed = wait_for("the renewed pair on disk", Duration::from_secs(30), || {
        let current =
            std::fs::read_to_string(data_dir.join("agent/pki/kubelet-client-current.pem")).ok()?;
        let cert = first_pem(&current)?;
        (cert != first).then_some(cert)
    });
    assert_eq!(issuer(&renewed), issuer(&first));
    wait_for("the rewritten kubeconfig", Duration::from_secs(30), || {
        (kubeconfig_cert(&node_kubeconfig) != first).then_some(())
    });

    // The serving certificate is renewed as well (the node asks for its own names only, which
    // the approver grants) and served without a restart.
    wait_for(
        "a renewed serving certificate",
        Duration::from_secs(150),
        || issued_request(&kc, "kubernetes.io/kubelet-serving"),
    );
    wait_for(
        "the renewed serving certificate served",
        Duration::from_secs(30),
        || {
            let current =
                std::fs::read_to_string(data_dir.join("agent/pki/kubelet-server-current.pem"))
                    .ok()?;
            let stored = first_pem(&current)?;
            let served = served_cert(&kubelet_port)?;
            (served == stored && issuer(&served).contains("capstan-kubelet-serving-ca"))
                .then_some(())
        },
    );

    // A serving request for a name that is not the node's is left pending.
    let foreign = serving_request(&[NODE, "kubernetes.default.svc"]);
    let manifest = format!(
        "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata:\n  \
         name: foreign-serving\nspec:\n  request: {}\n  signerName: kubernetes.io/kubelet-serving\n  \
         usages: [digital signature, server auth]\n",
        base64::engine::general_purpose::STANDARD.encode(foreign)
    );
    let created = kubectl_stdin(KUBECTL, &node_kubeconfig, &["create", "-f", "-"], &manifest);
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    std::thread::sleep(Duration::from_secs(5));
    let text = kubectl_ok(
        KUBECTL,
        &kc,
        &["get", "csr", "foreign-serving", "-o", "json"],
    );
    let pending: Value = serde_json::from_str(&text).unwrap();
    assert!(!approved(&pending), "{pending}");
    assert_eq!(pending["spec"]["username"], format!("system:node:{NODE}"));

    // Past the first certificate's end the node still talks to the API server: its Lease is
    // renewed, and its kubeconfig (the renewed certificate) authenticates as the node.
    let wait = first_end
        .duration_since(SystemTime::now())
        .unwrap_or_default();
    std::thread::sleep(wait + Duration::from_secs(5));
    assert!(SystemTime::now() > not_after(&first));
    let renew_time = |kc: &Path| {
        kubectl_ok(
            KUBECTL,
            kc,
            &[
                "get",
                "lease",
                "-n",
                "kube-node-lease",
                NODE,
                "-o",
                "jsonpath={.spec.renewTime}",
            ],
        )
    };
    let before = renew_time(&kc);
    wait_for(
        "a Lease renewal after the first certificate's end",
        Duration::from_secs(30),
        || (renew_time(&kc) != before).then_some(()),
    );
    let who = kubectl_ok(
        KUBECTL,
        &node_kubeconfig,
        &[
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ],
    );
    assert_eq!(who, format!("system:node:{NODE}"));
    let ready = kubectl_ok(
        KUBECTL,
        &kc,
        &[
            "get",
            "node",
            NODE,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ],
    );
    assert_eq!(ready, "True");

    // `capstan certificate check` lists the server's certificates; `rotate` moves the leaves
    // aside, keeping the CA.
    let check = capstan(&["certificate", "check"], &data_dir);
    for name in ["admin", "ca", "serving", "scheduler", "controller"] {
        assert!(
            check.lines().any(|l| l.starts_with(&format!("{name} "))),
            "{check}"
        );
    }
    let tls = data_dir.join("tls");
    let read = |f: &str| std::fs::read_to_string(tls.join(f)).unwrap();
    let (ca, admin, serving) = (read("ca.crt"), read("admin.crt"), read("serving.crt"));
    let old_kubeconfig = dir.path().join("old-kubeconfig.yaml");
    std::fs::copy(&kc, &old_kubeconfig).unwrap();
    server.stop();
    let rotated = capstan(&["certificate", "rotate"], &data_dir);
    assert!(
        rotated.contains("admin: certificate and key moved to"),
        "{rotated}"
    );
    let backups: Vec<_> = std::fs::read_dir(&tls)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("expired-")
        })
        .collect();
    assert_eq!(backups.len(), 1, "{backups:?}");
    assert_eq!(
        std::fs::read_to_string(backups[0].join("admin.crt")).unwrap(),
        admin
    );
    assert!(!tls.join("admin.crt").exists() && tls.join("ca.key").exists());

    // The next start issues new leaves from the same CA.
    let server = Server::start_node(&data_dir, port, &flags);
    assert_eq!(read("ca.crt"), ca);
    let (new_admin, new_serving) = (read("admin.crt"), read("serving.crt"));
    assert_ne!(new_admin, admin);
    assert_ne!(new_serving, serving);
    assert_eq!(issuer(&new_admin), issuer(&admin));
    assert_eq!(issuer(&new_serving), issuer(&serving));
    // kubectl with the kubeconfig from before the rotation (its CA, its still valid admin
    // certificate) works, as does the new one.
    let nodes = kubectl_ok(KUBECTL, &old_kubeconfig, &["get", "nodes", "-o", "name"]);
    assert!(nodes.contains(NODE), "{nodes}");
    assert_eq!(kubeconfig_cert(&kc), new_admin);
    wait_ready(&kc, NODE);
    let served = first_pem(&{
        let output = Command::new("openssl")
            .args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        String::from_utf8_lossy(&output.stdout).into_owned()
    })
    .unwrap();
    assert_eq!(served, first_pem(&new_serving).unwrap());
    server.stop();
}

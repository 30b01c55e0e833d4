//! End to end: server join (issue 27), as k3s servers join. Two `capstan server` processes on
//! one real etcd, the second started with `--server https://<first> --token <server token>`
//! and its own data directory and port: it fetches the secrets servers share and starts with
//! them, so the first server's admin kubeconfig works against the second with stock kubectl,
//! a service account token made through the first authenticates on the second, an agent joins
//! through the second with the same token and its node certificate is accepted by the first,
//! and both servers are the `default/kubernetes` endpoints (from their master leases, TTL keys
//! in etcd), while one identity Lease names their host. Joins that must not happen are
//! refused with a message and exit non-zero without writing a secret: no token, a wrong secret,
//! an agent (bootstrap) token, a token pinning another CA or none, a SQLite datastore on either
//! side, an etcd that holds no cluster, a data directory holding another cluster's CA. A joined
//! server restarts from its own files while the first is down. With `--secrets-encryption` the
//! key comes with the join (a joining server without the flag is refused), and a Secret sealed
//! by either server reads back through the other. An agent follows the live servers: joined
//! through the first, it fails over to the second when the first is killed (issue 27).

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::cluster::{Netns, endpoint_addresses, node_ready, pointed_at};
use common::*;
use serde_json::Value;

/// The server flags both servers share: one etcd, no components a join does not need.
fn shared_flags(etcd: &Datastore) -> Vec<String> {
    let mut flags = etcd.flags();
    flags.extend(
        [
            "--disable-scheduler",
            "--disable-controller-manager",
            "--disable-metrics-server",
            "--disable-dns",
        ]
        .map(str::to_owned),
    );
    flags
}

/// Runs a `capstan server` that must refuse to start; its standard error. It must exit
/// non-zero within 60 s (it is killed, and the test fails, otherwise).
fn refused_start(data_dir: &Path, extra: &[&str]) -> String {
    let child = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .arg("server")
        .args(["--bind-address", "127.0.0.1", "--https-listen-port"])
        .arg(free_port().to_string())
        .args(["--disable-agent", "--dns-port", "0", "--data-dir"])
        .arg(data_dir)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start capstan server");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let output = match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(output) => output.unwrap(),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            let _ = rx.recv_timeout(Duration::from_secs(10));
            panic!("capstan server {extra:?} did not exit: the join was not refused");
        }
    };
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        !output.status.success(),
        "capstan server {extra:?} started: {stderr}"
    );
    stderr
}

/// The files a joined server shares with the first one, under `tls/`.
const SHARED: [&str; 7] = [
    "ca.crt",
    "ca.key",
    "kubelet-serving-ca.crt",
    "kubelet-serving-ca.key",
    "front-proxy-ca.crt",
    "front-proxy-ca.key",
    "service-account.key",
];

/// Asserts that `data_dir` holds no secret.
fn no_secrets(data_dir: &Path) {
    for file in SHARED {
        let path = data_dir.join("tls").join(file);
        assert!(!path.exists(), "{} was written", path.display());
    }
}

/// A kubeconfig for `url` (CA `ca`) that authenticates with `token` alone.
fn token_kubeconfig(to: &Path, url: &str, ca: &Path, token: &str) -> PathBuf {
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: capstan\n  cluster:\n    server: {url}\n    \
         certificate-authority: {}\nusers:\n- name: sa\n  user:\n    token: {token}\n\
         contexts:\n- name: sa\n  context: {{cluster: capstan, user: sa}}\ncurrent-context: sa\n",
        ca.display()
    );
    std::fs::write(to, text).unwrap();
    to.to_owned()
}

fn whoami(kubeconfig: &Path) -> String {
    let me: Value = serde_json::from_str(&kubectl_ok(
        "default",
        kubeconfig,
        &["auth", "whoami", "-o", "json"],
    ))
    .unwrap();
    me["status"]["userInfo"]["username"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn a_second_server_joins_with_the_server_token() {
    let etcd = Datastore::start("etcd");
    let work = tempfile::tempdir().unwrap();
    let (dir1, dir2) = (work.path().join("server-1"), work.path().join("server-2"));
    let flags = shared_flags(&etcd);
    let mut first_flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    first_flags.extend(["--advertise-address", "192.0.2.1"]);
    let first = Server::start_with(&dir1, free_port(), &first_flags);
    let kc1 = first.kubeconfig();
    let token = std::fs::read_to_string(dir1.join("token")).unwrap();
    let token = token.trim().to_owned();
    let url1 = first.url("");
    let etcd_flags = etcd.flags();
    let etcd_flags: Vec<&str> = etcd_flags.iter().map(String::as_str).collect();
    let join = |token: &str| -> Vec<String> {
        let mut args: Vec<String> = etcd_flags.iter().map(|f| (*f).to_owned()).collect();
        args.extend([
            "--server".into(),
            url1.clone(),
            "--token".into(),
            token.into(),
        ]);
        args
    };
    let run_refused = |dir: &Path, args: Vec<String>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        refused_start(dir, &args)
    };

    // A wrong secret (pinning the right CA) is refused by the first server.
    let (pin, _) = token.split_once("::").unwrap();
    let refused = work.path().join("refused");
    let stderr = run_refused(&refused, join(&format!("{pin}::server:wrong")));
    assert!(
        stderr.contains("401") && stderr.contains("not this server's join token"),
        "{stderr}"
    );
    no_secrets(&refused);

    // An agent's token (a valid bootstrap token, which joins nodes) is refused too.
    let created = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["token", "create", "--data-dir"])
        .arg(&dir1)
        .output()
        .unwrap();
    assert!(created.status.success(), "{created:?}");
    let agent_token = String::from_utf8_lossy(&created.stdout).trim().to_owned();
    let stderr = run_refused(&refused, join(&agent_token));
    assert!(
        stderr.contains("401")
            && stderr.contains("an agent (bootstrap) token cannot join a server"),
        "{stderr}"
    );
    no_secrets(&refused);
    // ... although it joins agents.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime
        .block_on(capstan_kubelet::join::join(
            &url1,
            &agent_token,
            "agent-token-node",
            &[],
            "pw",
            false,
        ))
        .unwrap();

    // A token pinning another CA, and one pinning none, never reach the secrets.
    let other_pin = format!(
        "K10{}::server:{}",
        "0".repeat(64),
        token.rsplit(':').next().unwrap()
    );
    let stderr = run_refused(&refused, join(&other_pin));
    assert!(
        stderr.contains("the server's CA bundle has hash"),
        "{stderr}"
    );
    let bare = token.rsplit(':').next().unwrap().to_owned();
    let stderr = run_refused(&refused, join(&bare));
    assert!(
        stderr.contains("must pin the running server's CA"),
        "{stderr}"
    );
    no_secrets(&refused);

    // --server needs the token.
    let stderr = run_refused(&refused, vec!["--server".into(), url1.clone()]);
    assert!(stderr.contains("--server needs --token"), "{stderr}");

    // Servers share an etcd: a joining server on SQLite is refused before it asks, and so is
    // one whose etcd holds no cluster; a server on SQLite hands out nothing.
    let sqlite_dir = work.path().join("sqlite-server");
    let sqlite_server = Server::start_with(&sqlite_dir, free_port(), &["--disable-dns"]);
    let sqlite_token = std::fs::read_to_string(sqlite_dir.join("token")).unwrap();
    let mut args = join(sqlite_token.trim());
    let at = args.iter().position(|a| a == "--server").unwrap() + 1;
    args[at] = sqlite_server.url("");
    let stderr = run_refused(&refused, args);
    assert!(
        stderr.contains("409") && stderr.contains("this server keeps its state in SQLite"),
        "{stderr}"
    );
    sqlite_server.stop();
    let stderr = run_refused(
        &refused,
        vec![
            "--server".into(),
            url1.clone(),
            "--token".into(),
            token.clone(),
        ],
    );
    assert!(stderr.contains("not SQLite"), "{stderr}");
    let empty_etcd = Datastore::start("etcd");
    let mut args = empty_etcd.flags();
    args.extend([
        "--server".into(),
        url1.clone(),
        "--token".into(),
        token.clone(),
    ]);
    let stderr = run_refused(&refused, args);
    assert!(
        stderr.contains("the datastore holds no cluster"),
        "{stderr}"
    );
    drop(empty_etcd);
    no_secrets(&refused);

    // A data directory holding another cluster's CA is not overwritten.
    let other = work.path().join("other-cluster");
    std::fs::create_dir_all(other.join("tls")).unwrap();
    std::fs::write(other.join("tls").join("ca.crt"), "another cluster's CA\n").unwrap();
    let stderr = run_refused(&other, join(&token));
    assert!(
        stderr.contains("holds the CA of another cluster"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(other.join("tls").join("ca.crt")).unwrap(),
        "another cluster's CA\n"
    );
    assert!(!other.join("tls").join("ca.key").exists());

    // The second server joins with the server token.
    let mut second_flags = flags.clone();
    second_flags.extend(join(&token).into_iter().skip(etcd_flags.len()));
    second_flags.extend(["--advertise-address".into(), "192.0.2.2".into()]);
    let second_flags: Vec<&str> = second_flags.iter().map(String::as_str).collect();
    let port2 = free_port();
    let second = Server::start_with(&dir2, port2, &second_flags);
    use std::os::unix::fs::PermissionsExt as _;
    for file in SHARED {
        let (a, b) = (dir1.join("tls").join(file), dir2.join("tls").join(file));
        assert_eq!(
            std::fs::read(&a).unwrap(),
            std::fs::read(&b).unwrap(),
            "{file}"
        );
        let mode = std::fs::metadata(&b).unwrap().permissions().mode() & 0o777;
        let expected = if file.ends_with(".key") { 0o600 } else { 0o644 };
        assert_eq!(mode, expected, "{file}: {mode:o}");
    }
    // Leaf certificates are its own; its token is the first server's.
    assert_ne!(
        std::fs::read(dir1.join("tls").join("serving.crt")).unwrap(),
        std::fs::read(dir2.join("tls").join("serving.crt")).unwrap()
    );
    assert_eq!(
        std::fs::read_to_string(dir2.join("token")).unwrap().trim(),
        token
    );

    // The first server's admin kubeconfig works against the second with stock kubectl (the
    // second's serving certificate is the shared CA's, the admin certificate is accepted).
    let kc1_on_2 = pointed_at(
        &kc1,
        &second.url(""),
        &work.path().join("admin-on-2.kubeconfig"),
    );
    for version in KUBECTL_VERSIONS {
        let namespaces = kubectl_ok(version, &kc1_on_2, &["get", "namespaces", "-o", "name"]);
        assert!(namespaces.contains("namespace/kube-system"), "{namespaces}");
    }
    assert_eq!(whoami(&kc1_on_2), "system:admin");
    // And the second's own kubeconfig against the first.
    let kc2_on_1 = pointed_at(
        &second.kubeconfig(),
        &url1,
        &work.path().join("admin2-on-1.kubeconfig"),
    );
    assert_eq!(whoami(&kc2_on_1), "system:admin");

    // A service account token issued by the first server authenticates on the second.
    kubectl_ok("default", &kc1, &["create", "serviceaccount", "joiner"]);
    let sa_token = kubectl_ok("default", &kc1, &["create", "token", "joiner"])
        .trim()
        .to_owned();
    let as_sa = token_kubeconfig(
        &work.path().join("sa-on-2.kubeconfig"),
        &second.url(""),
        &dir1.join("tls").join("ca.crt"),
        &sa_token,
    );
    assert_eq!(whoami(&as_sa), "system:serviceaccount:default:joiner");
    // And one issued by the second on the first.
    let sa_token = eventually("a token from the second server", || {
        let output = kubectl_any(
            "default",
            &second.kubeconfig(),
            &["create", "token", "joiner"],
        );
        output
            .status
            .success()
            .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
    });
    let as_sa = token_kubeconfig(
        &work.path().join("sa-on-1.kubeconfig"),
        &url1,
        &dir1.join("tls").join("ca.crt"),
        &sa_token,
    );
    assert_eq!(whoami(&as_sa), "system:serviceaccount:default:joiner");

    // An agent joins through the second server with the same token; the first server accepts
    // its node certificate.
    let credentials = runtime
        .block_on(capstan_kubelet::join::join(
            &second.url(""),
            &token,
            "joined-via-2",
            &["10.99.0.7".to_owned()],
            "node-password",
            false,
        ))
        .unwrap();
    let node_kc = work.path().join("node.kubeconfig");
    capstan_kubelet::join::write_kubeconfig(&node_kc, &url1, &credentials).unwrap();
    assert_eq!(whoami(&node_kc), "system:node:joined-via-2");

    // Both servers are the kubernetes Service's endpoints. They listen on loopback, but
    // advertise documentation addresses (192.0.2.0/24, nothing connects to them here): an
    // Endpoints address may not be a loopback one.
    eventually("both servers in default/kubernetes", || {
        let addresses = endpoint_addresses(&kc1);
        (addresses == ["192.0.2.1", "192.0.2.2"]).then_some(())
    });
    assert_eq!(
        endpoint_addresses(&second.kubeconfig()),
        ["192.0.2.1", "192.0.2.2"]
    );
    // Those endpoints come from the servers' master leases, TTL keys in storage as upstream's,
    // not from Leases: the only API server Lease is the identity Lease, one per host, named
    // from the host name and labelled as upstream's.
    for address in ["192.0.2.1", "192.0.2.2"] {
        let lease: Value = serde_json::from_slice(&etcd_value(
            &etcd,
            &format!("/registry/masterleases/{address}"),
        ))
        .unwrap();
        assert_eq!(lease["subsets"][0]["addresses"][0]["ip"], address);
    }
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let identity: Value = serde_json::from_str(&kubectl_ok(
        "default",
        &kc1,
        &[
            "get",
            "leases",
            "-n",
            "kube-system",
            "-l",
            "apiserver.kubernetes.io/identity=kube-apiserver",
            "-o",
            "json",
        ],
    ))
    .unwrap();
    let items = identity["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{identity}");
    let name = items[0]["metadata"]["name"].as_str().unwrap();
    let hash = name.strip_prefix("apiserver-").unwrap();
    assert!(
        hash.len() == 26
            && hash
                .bytes()
                .all(|b| b.is_ascii_lowercase() || (b'2'..=b'7').contains(&b)),
        "{name}"
    );
    assert_eq!(
        items[0]["metadata"]["labels"]["kubernetes.io/hostname"],
        hostname.trim()
    );
    assert!(
        items[0]["spec"]["holderIdentity"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{name}_")),
        "{identity}"
    );
    assert_eq!(items[0]["spec"]["leaseDurationSeconds"], 3600);

    // A joined server restarts from its own files, with the first server down.
    first.stop();
    second.stop();
    let second = Server::start_with(&dir2, port2, &second_flags);
    let namespaces = kubectl_ok("default", &kc1_on_2, &["get", "namespaces", "-o", "name"]);
    assert!(namespaces.contains("namespace/kube-system"), "{namespaces}");
    second.stop();
}

/// The raw value of `key` in `etcd`.
fn etcd_value(etcd: &Datastore, key: &str) -> Vec<u8> {
    let Datastore::Etcd(etcd) = etcd else {
        panic!("an etcd datastore")
    };
    let output = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args([
            "--endpoints",
            &etcd.endpoint(),
            "get",
            key,
            "--print-value-only",
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    output.stdout
}

fn secret_value(kubeconfig: &Path, name: &str) -> String {
    kubectl_ok(
        "default",
        kubeconfig,
        &["get", "secret", name, "-o", "jsonpath={.data.value}"],
    )
}

#[test]
fn a_joined_server_shares_the_secrets_encryption_key() {
    let etcd = Datastore::start("etcd");
    let work = tempfile::tempdir().unwrap();
    let (dir1, dir2) = (work.path().join("server-1"), work.path().join("server-2"));
    let mut flags = shared_flags(&etcd);
    flags.push("--secrets-encryption".to_owned());
    let first_flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let first = Server::start_with(&dir1, free_port(), &first_flags);
    let token = std::fs::read_to_string(dir1.join("token")).unwrap();
    let join = ["--server", &first.url(""), "--token", token.trim()];

    // Without --secrets-encryption the second server could not read the Secrets the first
    // writes: refused, nothing written.
    let mut plain = etcd.flags();
    plain.extend(join.map(str::to_owned));
    let plain: Vec<&str> = plain.iter().map(String::as_str).collect();
    let refused = work.path().join("refused");
    let stderr = refused_start(&refused, &plain);
    assert!(
        stderr.contains("start this server with --secrets-encryption too"),
        "{stderr}"
    );
    no_secrets(&refused);
    assert!(!refused.join("cred").join("encryption-config.json").exists());

    // With it, the key comes with the join.
    let mut second_flags = first_flags.clone();
    second_flags.extend(join);
    let second = Server::start_with(&dir2, free_port(), &second_flags);
    let config = |dir: &Path| dir.join("cred").join("encryption-config.json");
    assert_eq!(
        std::fs::read(config(&dir1)).unwrap(),
        std::fs::read(config(&dir2)).unwrap()
    );
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(config(&dir2))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    // A Secret written through either server is sealed in etcd and reads back through the
    // other.
    let (kc1, kc2) = (first.kubeconfig(), second.kubeconfig());
    for (name, writer, reader) in [("from-1", &kc1, &kc2), ("from-2", &kc2, &kc1)] {
        let value = format!("{name}-plain-text-7f3a");
        kubectl_ok(
            "default",
            writer,
            &[
                "create",
                "secret",
                "generic",
                name,
                &format!("--from-literal=value={value}"),
            ],
        );
        let stored = etcd_value(&etcd, &format!("/registry/secrets/default/{name}"));
        assert!(
            stored.starts_with(b"k8s:enc:aescbc:v1:"),
            "{name} stored sealed"
        );
        assert!(!stored.windows(value.len()).any(|w| w == value.as_bytes()));
        let read = eventually("the Secret through the other server", || {
            let output = kubectl_any(
                "default",
                reader,
                &["get", "secret", name, "-o", "jsonpath={.data.value}"],
            );
            output
                .status
                .success()
                .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
        });
        use base64::Engine as _;
        assert_eq!(
            read,
            base64::engine::general_purpose::STANDARD.encode(&value),
            "{name}"
        );
        assert_eq!(secret_value(writer, name), read);
    }
    second.stop();
    first.stop();
}

/// The node Lease's `spec.renewTime`, read through `kubeconfig` (empty if it cannot be read).
fn lease_renewed(kubeconfig: &Path, node: &str) -> String {
    common::node::jsonpath(
        kubeconfig,
        &["get", "lease", "-n", "kube-node-lease", node],
        "{.spec.renewTime}",
    )
}

/// The servers the agent's load balancer saved, sorted.
fn saved_servers(agent_dir: &Path) -> Vec<String> {
    let file = agent_dir.join("agent/etc/capstan-agent-load-balancer.json");
    let saved: Value = std::fs::read_to_string(file)
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_default();
    let mut servers: Vec<String> = saved["serverAddresses"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect();
    servers.sort();
    servers
}

/// Waits until the node Lease is renewed after `since` (a renewTime) twice, read through
/// `kubeconfig`; the last renewTime.
fn renewed_twice(kubeconfig: &Path, node: &str, since: &str) -> String {
    let mut last = since.to_owned();
    for _ in 0..2 {
        last = common::node::wait_for(
            "the node Lease to be renewed",
            Duration::from_secs(60),
            || {
                let now = lease_renewed(kubeconfig, node);
                (!now.is_empty() && now > last).then_some(now)
            },
        );
    }
    last
}

/// Issue 27: an agent follows the live servers. Two servers on one etcd, each on its own
/// address (in a network namespace of the test's, where any address may sit on loopback: the
/// `kubernetes` endpoints may not be loopback ones), the same port; an agent joins through the
/// first, learns both from the `default/kubernetes` Endpoints and saves them. The first server
/// is killed (SIGKILL): the agent's clients fail over to the second, the node Lease keeps being
/// renewed, the node stays Ready past the node controller's grace period, and a pod created
/// afterwards runs. A restarted agent whose `--server` is still the dead one joins through the
/// server it saved. Each server's certificate names the address it advertises.
#[test]
fn an_agent_fails_over_to_a_live_server() {
    const NODE: &str = "lb-node";
    const BRIDGE: &str = "caplb0";
    const CLUSTER_CIDR: &str = "10.221.0.0/16";
    let (ip1, ip2, node_ip) = ("10.222.0.1", "10.222.0.2", "10.222.0.3");
    let _netns = Netns::enter("agentlb", &[ip1, ip2, node_ip]);
    let etcd = Datastore::start("etcd");
    let work = tempfile::tempdir().unwrap();
    let (dir1, dir2, agent_dir) = (
        work.path().join("server-1"),
        work.path().join("server-2"),
        work.path().join("agent"),
    );
    let port = free_port();
    let server_flags = |ip: &str| -> Vec<String> {
        let mut flags = etcd.flags();
        flags.extend(
            [
                "--bind-address",
                ip,
                "--advertise-address",
                ip,
                "--cluster-cidr",
                CLUSTER_CIDR,
                "--disable-scheduler",
                "--disable-metrics-server",
                "--disable-dns",
            ]
            .map(str::to_owned),
        );
        flags
    };
    let flags1 = server_flags(ip1);
    let first = Server::start_with(
        &dir1,
        port,
        &flags1.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let url1 = first.url("");
    assert_eq!(url1, format!("https://{ip1}:{port}"));
    let token = std::fs::read_to_string(dir1.join("token")).unwrap();
    let token = token.trim().to_owned();
    let mut flags2 = server_flags(ip2);
    flags2.extend([
        "--server".into(),
        url1.clone(),
        "--token".into(),
        token.clone(),
    ]);
    let second = Server::start_with(
        &dir2,
        port,
        &flags2.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    // Each serving certificate names the address the server advertises: stock kubectl checks
    // it against the address it dials.
    let kc1 = first.kubeconfig();
    let kc2 = pointed_at(&kc1, &second.url(""), &work.path().join("on-2.kubeconfig"));
    assert_eq!(whoami(&kc1), "system:admin");
    assert_eq!(whoami(&kc2), "system:admin");
    eventually("both servers in default/kubernetes", || {
        (endpoint_addresses(&kc1) == [ip1, ip2]).then_some(())
    });

    // The agent joins through the first server.
    std::fs::create_dir_all(agent_dir.join("agent/images")).unwrap();
    common::node::pack_busybox(&agent_dir);
    let _cleanup = common::node::Cleanup {
        data_dir: agent_dir.clone(),
        bridge: BRIDGE,
    };
    let start_agent =
        || common::node::spawn_agent(&url1, &token, &agent_dir, NODE, Some(node_ip), BRIDGE).0;
    let mut agent = start_agent();
    common::node::wait_ready(&kc1, NODE);
    // It learns both servers from the Endpoints, and saves them.
    let both = [format!("{ip1}:{port}"), format!("{ip2}:{port}")];
    common::node::wait_for(
        "the agent to learn both servers",
        Duration::from_secs(60),
        || (saved_servers(&agent_dir) == both).then_some(()),
    );

    // The first server dies. Through the second, the node Lease keeps being renewed.
    first.kill();
    let killed_at = std::time::Instant::now();
    let before = common::node::wait_for(
        "the node Lease through the second server",
        Duration::from_secs(30),
        || Some(lease_renewed(&kc2, NODE)).filter(|t| !t.is_empty()),
    );
    let mut renewed = renewed_twice(&kc2, NODE, &before);
    // The node stays Ready beyond the node controller's grace period (40 s), which would have
    // made it Unknown had its Lease and status stopped.
    while killed_at.elapsed() < Duration::from_secs(50) {
        std::thread::sleep(Duration::from_secs(2));
    }
    renewed = renewed_twice(&kc2, NODE, &renewed);
    assert_eq!(node_ready(&kc2, NODE), "True");
    // The dead server leaves the Endpoints, and the agent's list.
    eventually("the first server out of the agent's list", || {
        (saved_servers(&agent_dir) == both[1..]).then_some(())
    });

    // A pod created now, on the node, is run by the agent.
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: after-failover}}\nspec:\n  nodeName: {NODE}\n  \
         containers:\n  - name: main\n    image: {}\n    command: [sh, -c, 'echo running; sleep 3600']\n",
        common::node::IMAGE
    );
    let created = kubectl_stdin("default", &kc2, &["apply", "-f", "-"], &pod);
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    kubectl_ok(
        "default",
        &kc2,
        &[
            "wait",
            "pod/after-failover",
            "--for=condition=Ready",
            "--timeout=90s",
        ],
    );
    assert_eq!(
        kubectl_ok("default", &kc2, &["logs", "after-failover"]),
        "running\n"
    );

    // A restarted agent, still told the dead server, joins through the one it saved.
    let _ = Command::new("kill")
        .args(["-TERM", &agent.id().to_string()])
        .status();
    let _ = agent.wait();
    agent = start_agent();
    renewed_twice(&kc2, NODE, &renewed);
    assert_eq!(node_ready(&kc2, NODE), "True");

    kubectl_ok(
        "default",
        &kc2,
        &[
            "delete",
            "pod",
            "after-failover",
            "--grace-period=1",
            "--timeout=60s",
        ],
    );
    let _ = Command::new("kill")
        .args(["-TERM", &agent.id().to_string()])
        .status();
    let _ = agent.wait();
    second.stop();
}

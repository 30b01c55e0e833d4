//! End to end: Secrets encrypted at rest (issue 25), on SQLite and on etcd. With
//! `--secrets-encryption` a Secret's data is nowhere in the database in plain text, yet reads
//! back through kubectl; a key rotation through `--encryption-provider-config` (a new key
//! added first, every Secret rewritten with `kubectl replace`, the old key dropped, no restart)
//! leaves every Secret readable; ConfigMaps, not configured, stay plain.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use base64::Engine as _;
use common::*;

const PLAIN: &str = "plain-text-never-stored-7f3a";

/// The raw stored value of `key`, from the database itself.
fn raw(datastore: &Datastore, data_dir: &Path, key: &str) -> Vec<u8> {
    match datastore {
        Datastore::Sqlite => {
            // The latest value written under the key.
            let db = data_dir.join("db").join("state.db");
            let output = Command::new("sqlite3")
                .arg(&db)
                .arg(format!(
                    "SELECT hex(value) FROM log WHERE key = CAST('{key}' AS BLOB) \
                     ORDER BY rev DESC LIMIT 1"
                ))
                .output()
                .unwrap();
            assert!(
                output.status.success(),
                "{}",
                String::from_utf8_lossy(&output.stderr)
            );
            let hex = String::from_utf8_lossy(&output.stdout).replace('\n', "");
            (0..hex.len() / 2)
                .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
                .collect()
        }
        Datastore::Etcd(etcd) => {
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
            assert!(
                output.status.success(),
                "{}",
                String::from_utf8_lossy(&output.stderr)
            );
            output.stdout
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn secret_value(kc: &Path, name: &str) -> String {
    let encoded = kubectl_ok(
        "1.33",
        kc,
        &["get", "secret", name, "-o", "jsonpath={.data.k}"],
    );
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .unwrap(),
    )
    .unwrap()
}

fn config(keys: &[(&str, &[u8; 32])]) -> String {
    let keys: Vec<serde_json::Value> = keys
        .iter()
        .map(|(name, key)| {
            serde_json::json!({"name": name,
                "secret": base64::engine::general_purpose::STANDARD.encode(key)})
        })
        .collect();
    serde_json::json!({
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "EncryptionConfiguration",
        "resources": [{"resources": ["secrets"],
                       "providers": [{"aescbc": {"keys": keys}}, {"identity": {}}]}],
    })
    .to_string()
}

fn scenario(kind: &str) {
    let datastore = Datastore::start(kind);
    let dir = tempfile::tempdir().unwrap();
    let flags = datastore.flags();
    let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
    args.push("--secrets-encryption");
    let server = Server::start_with(dir.path(), free_port(), &args);
    let kc = server.kubeconfig();
    let generated = dir.path().join("cred").join("encryption-config.json");
    assert!(generated.exists());
    kubectl_ok(
        "1.33",
        &kc,
        &[
            "create",
            "secret",
            "generic",
            "s1",
            &format!("--from-literal=k={PLAIN}"),
        ],
    );
    kubectl_ok(
        "1.33",
        &kc,
        &[
            "create",
            "configmap",
            "c1",
            "--from-literal=k=configmap-value-in-plain",
        ],
    );
    let stored = raw(&datastore, dir.path(), "/registry/secrets/default/s1");
    assert!(
        stored.starts_with(b"k8s:enc:aescbc:v1:aescbckey-"),
        "{kind}: {:?}",
        String::from_utf8_lossy(&stored)
    );
    let encoded = base64::engine::general_purpose::STANDARD.encode(PLAIN);
    assert!(!contains(&stored, PLAIN.as_bytes()) && !contains(&stored, encoded.as_bytes()));
    // Nowhere in the database files either (every revision, the write-ahead log included).
    if let Datastore::Sqlite = datastore {
        for file in ["state.db", "state.db-wal"] {
            let bytes = std::fs::read(dir.path().join("db").join(file)).unwrap_or_default();
            assert!(!contains(&bytes, PLAIN.as_bytes()), "{file}");
            assert!(!contains(&bytes, encoded.as_bytes()), "{file}");
        }
    }
    assert_eq!(secret_value(&kc, "s1"), PLAIN);
    // Not configured: stored as is.
    assert!(contains(
        &raw(&datastore, dir.path(), "/registry/configmaps/default/c1"),
        b"configmap-value-in-plain"
    ));
    server.stop();

    // Rotation on a server running with an explicit file: the generated key, then a new one
    // first, every Secret rewritten, then the old key dropped.
    let text = std::fs::read_to_string(&generated).unwrap();
    let old: serde_json::Value = serde_json::from_str(&text).unwrap();
    let old_key = &old["resources"][0]["providers"][0]["aescbc"]["keys"][0];
    let old_name = old_key["name"].as_str().unwrap().to_owned();
    let old_secret: [u8; 32] = base64::engine::general_purpose::STANDARD
        .decode(old_key["secret"].as_str().unwrap())
        .unwrap()
        .try_into()
        .unwrap();
    let file = dir.path().join("encryption.json");
    std::fs::write(&file, config(&[(&old_name, &old_secret)])).unwrap();
    let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
    let file_arg = file.display().to_string();
    args.extend(["--encryption-provider-config", &file_arg]);
    let server = Server::start_with(dir.path(), free_port(), &args);
    let kc = server.kubeconfig();
    assert_eq!(secret_value(&kc, "s1"), PLAIN);
    let new_secret = [42u8; 32];
    let reload = |text: String| {
        std::fs::write(&file, text).unwrap();
        // The server checks the file every two seconds.
        std::thread::sleep(Duration::from_secs(5));
    };
    reload(config(&[
        ("rotated", &new_secret),
        (&old_name, &old_secret),
    ]));
    let all = kubectl_ok("1.33", &kc, &["get", "secrets", "-o", "json"]);
    let replaced = kubectl_stdin("1.33", &kc, &["replace", "-f", "-"], &all);
    assert!(
        replaced.status.success(),
        "{}",
        String::from_utf8_lossy(&replaced.stderr)
    );
    let stored = raw(&datastore, dir.path(), "/registry/secrets/default/s1");
    assert!(
        contains(&stored, b"k8s:enc:aescbc:v1:rotated:"),
        "{kind}: the unchanged Secret was rewritten with the new key"
    );
    reload(config(&[("rotated", &new_secret)]));
    assert_eq!(secret_value(&kc, "s1"), PLAIN);
    // A Secret written now is sealed with the new key; reading still works after a restart.
    kubectl_ok(
        "1.33",
        &kc,
        &["create", "secret", "generic", "s2", "--from-literal=k=v2"],
    );
    server.stop();
    let server = Server::start_with(dir.path(), free_port(), &args);
    assert_eq!(secret_value(&server.kubeconfig(), "s1"), PLAIN);
    assert_eq!(secret_value(&server.kubeconfig(), "s2"), "v2");
    server.stop();
}

#[test]
fn secrets_are_encrypted_at_rest_on_sqlite() {
    scenario("sqlite");
}

#[test]
fn secrets_are_encrypted_at_rest_on_etcd() {
    scenario("etcd");
}

//! This server's identity Lease and the collector of expired ones, as upstream's
//! `APIServerIdentity` (on by default since 1.26).
//!
//! Each server holds a Lease in `kube-system` named after its host (`apiserver-` and the first
//! 16 bytes of the SHA-256 of the host name and `kube-apiserver`, each prefixed by its 16-bit
//! length, in lower-case unpadded base32), labelled `apiserver.kubernetes.io/identity:
//! kube-apiserver` and `kubernetes.io/hostname: <host name>`, held by `<lease name>_<UUID>` (a
//! new UUID each start), valid for 3600 s and renewed every 10 s (plus up to 4 % jitter), as
//! upstream's lease controller writes it: created when missing, then updated from the last
//! version written, read again after a conflict, five attempts per renewal.
//!
//! Every server also collects identity Leases: at start and then every hour it lists the
//! identity-labelled Leases of `kube-system` and deletes each that has expired (no renew time,
//! no duration, or renewed longer ago than its duration) when a fresh read still finds it
//! expired. Leases without the label are not looked at.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use rand::Rng;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::registry::selectors::Selectors;
use crate::registry::{ListOptions, Registries, Registry, WriteOptions};
use crate::status::ApiError;

/// The label that marks identity Leases (upstream's `IdentityLeaseComponentLabelKey`), and
/// its value for API servers.
pub(crate) const IDENTITY_LABEL: &str = "apiserver.kubernetes.io/identity";
pub(crate) const KUBE_APISERVER: &str = "kube-apiserver";
/// The convenience label naming the server's host.
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
/// Where identity Leases live.
const NAMESPACE: &str = "kube-system";
/// Immediate retries of one renewal (upstream's `maxUpdateRetries`).
const MAX_UPDATE_RETRIES: usize = 5;
/// The longest wait between attempts to create or read the Lease (upstream's `maxBackoff`).
const MAX_BACKOFF: Duration = Duration::from_secs(7);

/// How long an identity Lease stands, how often it is renewed, how often the collector runs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timing {
    pub lease_seconds: i64,
    pub renew: Duration,
    pub gc_period: Duration,
}

impl Default for Timing {
    /// Upstream's `IdentityLeaseDurationSeconds`, `IdentityLeaseRenewIntervalPeriod` and
    /// `IdentityLeaseGCPeriod`.
    fn default() -> Self {
        Timing {
            lease_seconds: 3600,
            renew: Duration::from_secs(10),
            gc_period: Duration::from_secs(3600),
        }
    }
}

/// The host name as Go's `os.Hostname` reads it on Linux.
pub(crate) fn os_hostname() -> Result<String, String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .map_err(|e| format!("error getting hostname for apiserver identity: {e}"))
}

/// The server's identity, which names its Lease: `apiserver-` and the lower-case unpadded
/// base32 of the first 16 bytes of the SHA-256 of the host name and `kube-apiserver`, each
/// preceded by its length on two bytes (big-endian).
pub(crate) fn server_id(hostname: &str) -> String {
    let mut data = Vec::with_capacity(hostname.len() + KUBE_APISERVER.len() + 4);
    for part in [hostname, KUBE_APISERVER] {
        // Upstream's builder refuses parts of 64 KiB or more; a host name never is.
        let length = u16::try_from(part.len()).unwrap_or(u16::MAX);
        data.extend_from_slice(&length.to_be_bytes());
        data.extend_from_slice(part.as_bytes());
    }
    let hash = ring::digest::digest(&ring::digest::SHA256, &data);
    format!("apiserver-{}", base32_lower(&hash.as_ref()[..16]))
}

/// RFC 4648 base32 without padding, in lower case.
fn base32_lower(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let mut out = String::with_capacity(bytes.len().div_ceil(5) * 8);
    let (mut buffer, mut bits) = (0u32, 0u32);
    for byte in bytes {
        buffer = (buffer << 8) | u32::from(*byte);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(char::from(ALPHABET[((buffer >> bits) & 31) as usize]));
        }
    }
    if bits > 0 {
        out.push(char::from(ALPHABET[((buffer << (5 - bits)) & 31) as usize]));
    }
    out
}

fn now_micro() -> String {
    format!("{}", Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ"))
}

fn leases(registries: &Registries) -> Result<Arc<Registry>, String> {
    registries
        .get("coordination.k8s.io", "v1", "leases")
        .ok_or_else(|| "the coordination.k8s.io/v1 leases resource is not served".to_owned())
}

fn message(error: &ApiError) -> String {
    error.status().to_json().to_string()
}

/// This server's identity Lease, kept as upstream's lease controller keeps it.
pub(crate) struct IdentityLease {
    registries: Arc<Registries>,
    name: String,
    holder: String,
    hostname: String,
    timing: Timing,
    /// The Lease as last written or read.
    latest: Option<Value>,
}

impl IdentityLease {
    /// The Lease of a server on `hostname`, held under a new UUID.
    pub(crate) fn new(registries: Arc<Registries>, hostname: &str, timing: Timing) -> Self {
        let name = server_id(hostname);
        let holder = format!("{name}_{}", crate::registry::object::new_uid());
        IdentityLease {
            registries,
            name,
            holder,
            hostname: hostname.to_owned(),
            timing,
            latest: None,
        }
    }

    /// The Lease's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Renews the Lease every interval (with up to 4 % jitter) until the handle is aborted.
    pub(crate) fn start(mut self) -> JoinHandle<()> {
        tracing::info!(lease = self.name(), holder = %self.holder, "API server identity");
        tokio::spawn(async move {
            loop {
                self.sync().await;
                let jitter = self
                    .timing
                    .renew
                    .mul_f64(rand::rng().random_range(0.0..0.04));
                tokio::time::sleep(self.timing.renew + jitter).await;
            }
        })
    }

    /// One renewal: from the last version written when there is one; else the Lease is
    /// created, or read and renewed.
    pub(crate) async fn sync(&mut self) {
        if let Some(latest) = self.latest.clone() {
            match self.retry_update(latest).await {
                Ok(()) => return,
                Err(error) => tracing::info!(
                    %error,
                    "failed to update the identity lease using the latest lease, ensuring it"
                ),
            }
        }
        let (lease, created) = self.backoff_ensure().await;
        self.latest = Some(lease.clone());
        if !created && let Err(error) = self.retry_update(lease).await {
            tracing::warn!(%error, retry_in = ?self.timing.renew, "cannot renew the identity lease");
        }
    }

    /// The Lease as this server writes it: `base` (or a new Lease) with the holder, duration,
    /// renew time and labels set.
    fn desired(&self, base: Option<Value>) -> Value {
        let mut lease = base.unwrap_or_else(|| {
            json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": NAMESPACE},
                "spec": {},
            })
        });
        lease["spec"]["holderIdentity"] = json!(self.holder);
        lease["spec"]["leaseDurationSeconds"] = json!(self.timing.lease_seconds);
        lease["spec"]["renewTime"] = json!(now_micro());
        let labels = &mut lease["metadata"]["labels"];
        if !labels.is_object() {
            *labels = json!({});
        }
        labels[IDENTITY_LABEL] = json!(KUBE_APISERVER);
        labels[HOSTNAME_LABEL] = json!(self.hostname);
        lease
    }

    /// Reads the Lease, creating it when missing, retrying with a growing wait (up to 7 s)
    /// until that works. Also says whether it was created.
    async fn backoff_ensure(&self) -> (Value, bool) {
        let mut sleep = Duration::from_millis(100);
        loop {
            match self.ensure().await {
                Ok(found) => return found,
                Err(error) => {
                    sleep = (sleep * 2).min(MAX_BACKOFF);
                    tracing::warn!(%error, retry_in = ?sleep, "cannot ensure the identity lease");
                    tokio::time::sleep(sleep).await;
                }
            }
        }
    }

    async fn ensure(&self) -> Result<(Value, bool), String> {
        let leases = leases(&self.registries)?;
        match leases.get(Some(NAMESPACE), &self.name).await {
            Ok(lease) => Ok((lease, false)),
            Err(error) if error.status().code() == 404 => {
                let written = leases
                    .create(
                        Some(NAMESPACE),
                        self.desired(None),
                        &WriteOptions::default(),
                    )
                    .await
                    .map_err(|e| message(&e))?;
                Ok((written.object, true))
            }
            Err(error) => Err(message(&error)),
        }
    }

    /// Writes the renewed Lease over `base` (its `resourceVersion` guards the write); after a
    /// conflict, over a fresh read. At most five attempts.
    async fn retry_update(&mut self, mut base: Value) -> Result<(), String> {
        let leases = leases(&self.registries)?;
        for _ in 0..MAX_UPDATE_RETRIES {
            let lease = self.desired(Some(base.clone()));
            match leases
                .update(
                    Some(NAMESPACE),
                    &self.name,
                    lease,
                    None,
                    &WriteOptions::default(),
                )
                .await
            {
                Ok(written) => {
                    self.latest = Some(written.object);
                    return Ok(());
                }
                Err(error) => {
                    tracing::warn!(error = %message(&error), "failed to update the identity lease");
                    if error.status().code() == 409 {
                        base = self.backoff_ensure().await.0;
                    }
                }
            }
        }
        Err(format!(
            "failed {MAX_UPDATE_RETRIES} attempts to update lease"
        ))
    }
}

/// Whether an identity Lease has expired at `now`: no renew time, no duration, or renewed
/// longer ago than its duration.
fn expired(lease: &Value, now: Timestamp) -> bool {
    let spec = &lease["spec"];
    let renewed = spec["renewTime"]
        .as_str()
        .and_then(|t| t.parse::<Timestamp>().ok());
    let (Some(renewed), Some(seconds)) = (renewed, spec["leaseDurationSeconds"].as_i64()) else {
        return true;
    };
    match renewed.checked_add(k8s_openapi::jiff::SignedDuration::from_secs(seconds)) {
        Ok(until) => until < now,
        Err(_) => false,
    }
}

/// Deletes the expired identity Leases of API servers, once now and then every `period`,
/// until the handle is aborted.
pub(crate) fn start_gc(registries: Arc<Registries>, period: Duration) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            if let Err(error) = collect(&registries).await {
                tracing::warn!(%error, "cannot collect expired API server identity leases");
            }
            tokio::time::sleep(period).await;
        }
    })
}

/// One pass of the collector: each identity-labelled Lease of `kube-system` that has expired
/// is read again and, still expired, deleted. Leases another server deleted meanwhile are
/// passed over.
pub(crate) async fn collect(registries: &Registries) -> Result<(), String> {
    let leases = leases(registries)?;
    let options = ListOptions {
        selectors: Selectors::parse(Some(&format!("{IDENTITY_LABEL}={KUBE_APISERVER}")), None)
            .map_err(|e| message(&e))?,
        ..ListOptions::default()
    };
    let listed = leases
        .list(Some(NAMESPACE), &options)
        .await
        .map_err(|e| message(&e))?;
    for item in &listed.items {
        let lease = item.object();
        if !expired(&lease, Timestamp::now()) {
            continue;
        }
        let Some(name) = lease["metadata"]["name"].as_str() else {
            continue;
        };
        let fresh = match leases.get(Some(NAMESPACE), name).await {
            Ok(fresh) => fresh,
            Err(error) if error.status().code() == 404 => continue,
            Err(error) => {
                tracing::warn!(error = %message(&error), lease = name, "cannot read an identity lease");
                continue;
            }
        };
        if !expired(&fresh, Timestamp::now()) {
            continue;
        }
        match leases
            .delete(Some(NAMESPACE), name, &Default::default())
            .await
        {
            Ok(_) => tracing::info!(lease = name, "deleted an expired API server identity lease"),
            Err(error) if error.status().code() == 404 => {}
            Err(error) => {
                tracing::warn!(error = %message(&error), lease = name, "cannot delete an identity lease")
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn registries(dir: &std::path::Path) -> Arc<Registries> {
        crate::test_support::bootstrapped(dir, false)
            .await
            .0
            .registries()
            .clone()
    }

    /// Names computed apart from this code (Python's hashlib and base64 over the same bytes),
    /// as upstream's integration test derives them.
    #[test]
    fn the_identity_is_upstreams_hash_of_the_host_name() {
        assert_eq!(
            server_id("test-host"),
            "apiserver-aafqjbvdrjjl2c5nvqhebm6kym"
        );
        assert_eq!(
            server_id("node-1.example.com"),
            "apiserver-iwnuvvk6ostz3iw72j5q3rbs5i"
        );
        assert_eq!(base32_lower(b"foobar"), "mzxw6ytboi");
        assert_eq!(base32_lower(b"f"), "my");
    }

    #[test]
    fn a_lease_without_renew_time_or_duration_has_expired() {
        let now: Timestamp = "2026-12-07T12:00:00Z".parse().unwrap();
        let lease = |spec: Value| json!({"spec": spec});
        let renewed = |at: &str| lease(json!({"renewTime": at, "leaseDurationSeconds": 3600}));
        assert!(!expired(&renewed("2026-12-07T11:30:00.000000Z"), now));
        assert!(!expired(&renewed("2026-12-07T11:00:00.000000Z"), now));
        assert!(expired(&renewed("2026-12-07T10:59:59.999999Z"), now));
        assert!(expired(&lease(json!({"leaseDurationSeconds": 3600})), now));
        assert!(expired(
            &lease(json!({"renewTime": "2026-12-07T11:59:00.000000Z"})),
            now
        ));
    }

    /// A server creates its identity Lease with upstream's name, labels, holder and duration,
    /// and renews it; a restarted server (a new holder) takes the same Lease over.
    #[tokio::test]
    async fn the_identity_lease_is_created_and_renewed() {
        let dir = tempfile::tempdir().unwrap();
        let registries = registries(dir.path()).await;
        let leases = leases(&registries).unwrap();
        let timing = Timing {
            renew: Duration::from_millis(50),
            ..Timing::default()
        };
        let lease = IdentityLease::new(registries.clone(), "test-host", timing);
        assert_eq!(lease.name(), "apiserver-aafqjbvdrjjl2c5nvqhebm6kym");
        let running = lease.start();
        let read = || async {
            loop {
                match leases
                    .get(Some(NAMESPACE), "apiserver-aafqjbvdrjjl2c5nvqhebm6kym")
                    .await
                {
                    Ok(lease) => return lease,
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
        };
        let first = tokio::time::timeout(Duration::from_secs(10), read())
            .await
            .unwrap();
        assert_eq!(
            first["metadata"]["labels"],
            json!({"apiserver.kubernetes.io/identity": "kube-apiserver",
                   "kubernetes.io/hostname": "test-host"})
        );
        let holder = first["spec"]["holderIdentity"].as_str().unwrap().to_owned();
        let uuid = holder
            .strip_prefix("apiserver-aafqjbvdrjjl2c5nvqhebm6kym_")
            .unwrap();
        assert_eq!(uuid.len(), 36, "{holder}");
        assert_eq!(first["spec"]["leaseDurationSeconds"], 3600);
        let renewed_at = |lease: &Value| -> Timestamp {
            lease["spec"]["renewTime"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap()
        };
        // Renewed: a later renew time, same holder.
        let renewed = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let lease = read().await;
                if renewed_at(&lease) > renewed_at(&first) {
                    return lease;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .unwrap();
        assert_eq!(renewed["spec"]["holderIdentity"], holder.as_str());
        running.abort();

        // A restart on the same host renews the same Lease under a new holder.
        let mut restarted = IdentityLease::new(registries.clone(), "test-host", timing);
        restarted.sync().await;
        let taken = read().await;
        let new_holder = taken["spec"]["holderIdentity"].as_str().unwrap();
        assert_ne!(new_holder, holder);
        assert!(new_holder.starts_with("apiserver-aafqjbvdrjjl2c5nvqhebm6kym_"));
        assert!(renewed_at(&taken) > renewed_at(&renewed));
        let all = leases
            .list(Some(NAMESPACE), &ListOptions::default())
            .await
            .unwrap();
        assert_eq!(all.items.len(), 1, "one Lease per host");
    }

    /// The collector deletes expired identity Leases (and identity Leases without a renew
    /// time), and leaves live ones and Leases without the identity label alone.
    #[tokio::test]
    async fn the_collector_deletes_only_expired_identity_leases() {
        let dir = tempfile::tempdir().unwrap();
        let registries = registries(dir.path()).await;
        let leases = leases(&registries).unwrap();
        let two_hours_ago = format!(
            "{}",
            Timestamp::now()
                .checked_sub(k8s_openapi::jiff::SignedDuration::from_hours(2))
                .unwrap()
                .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        );
        let make = |name: &str, labels: Value, spec: Value| {
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                   "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
                   "spec": spec})
        };
        let identity = json!({IDENTITY_LABEL: KUBE_APISERVER});
        let objects = [
            make(
                "apiserver-expired",
                identity.clone(),
                json!({"holderIdentity": "gone", "leaseDurationSeconds": 3600,
                       "renewTime": two_hours_ago}),
            ),
            make(
                "apiserver-unrenewed",
                identity.clone(),
                json!({"holderIdentity": "never", "leaseDurationSeconds": 3600}),
            ),
            make(
                "apiserver-live",
                identity.clone(),
                json!({"holderIdentity": "here", "leaseDurationSeconds": 3600,
                       "renewTime": now_micro()}),
            ),
            make(
                "some-controller",
                json!({}),
                json!({"holderIdentity": "old", "leaseDurationSeconds": 15,
                       "renewTime": two_hours_ago}),
            ),
            make(
                "other-component",
                json!({IDENTITY_LABEL: "sample-apiserver"}),
                json!({"holderIdentity": "old", "leaseDurationSeconds": 15,
                       "renewTime": two_hours_ago}),
            ),
        ];
        for object in objects {
            leases
                .create(Some(NAMESPACE), object, &WriteOptions::default())
                .await
                .unwrap();
        }
        collect(&registries).await.unwrap();
        let listed = leases
            .list(Some(NAMESPACE), &ListOptions::default())
            .await
            .unwrap();
        let mut names: Vec<String> = listed
            .items
            .iter()
            .map(|item| {
                item.object()["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        names.sort();
        assert_eq!(
            names,
            ["apiserver-live", "other-component", "some-controller"]
        );

        // The running collector does the same, at once and then every period.
        leases
            .create(
                Some(NAMESPACE),
                make(
                    "apiserver-expired-later",
                    identity,
                    json!({"holderIdentity": "gone", "leaseDurationSeconds": 1,
                           "renewTime": now_micro()}),
                ),
                &WriteOptions::default(),
            )
            .await
            .unwrap();
        let gc = start_gc(registries.clone(), Duration::from_millis(200));
        tokio::time::timeout(Duration::from_secs(10), async {
            while leases
                .get(Some(NAMESPACE), "apiserver-expired-later")
                .await
                .is_ok()
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .unwrap();
        gc.abort();
        assert!(leases.get(Some(NAMESPACE), "apiserver-live").await.is_ok());
    }
}

//! The CSR cleaner (upstream's `csrcleaner` controller): deletes a request whose certificate
//! has expired, that was issued, denied or failed more than an hour ago (by its condition's
//! last update), or that is still pending a day after it was made. Instead of upstream's
//! hourly sweep, each request is looked at when it changes and again when its next deadline
//! comes.

use std::sync::Arc;
use std::time::Duration;

use capstan_api::certificates::{self as certs, APPROVED, DENIED, FAILED};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, DeleteParams};
use kube::runtime::controller::Action;

use crate::runtime::{self, Error, Queue, Setup, Task};

/// How long an issued (approved) request is kept.
const APPROVED_EXPIRATION: Duration = Duration::from_secs(3600);
/// How long a denied request is kept.
const DENIED_EXPIRATION: Duration = Duration::from_secs(3600);
/// How long a failed request is kept.
const FAILED_EXPIRATION: Duration = Duration::from_secs(3600);
/// How long a request may wait for approval.
const PENDING_EXPIRATION: Duration = Duration::from_secs(24 * 3600);

fn plus(at: Timestamp, after: Duration) -> Timestamp {
    at.checked_add(after).unwrap_or(Timestamp::MAX)
}

/// When the request is to be deleted: the earliest deadline it has (`None` while it has
/// none, e.g. approved but not yet issued).
pub fn deadline(csr: &CertificateSigningRequest) -> Option<Timestamp> {
    let mut deadlines = Vec::new();
    let conditions = certs::conditions(csr);
    let certificate = certs::certificate(csr);
    for block in certs::pem_blocks(certificate) {
        if let Ok((_, cert)) = x509_parser::parse_x509_certificate(&block.der)
            && let Ok(end) = Timestamp::from_second(cert.validity().not_after.timestamp())
        {
            deadlines.push(end);
        }
    }
    let (approved, denied, failed) = (
        certs::has_condition(csr, APPROVED),
        certs::has_condition(csr, DENIED),
        certs::has_condition(csr, FAILED),
    );
    if !approved
        && !denied
        && !failed
        && let Some(created) = &csr.metadata.creation_timestamp
    {
        deadlines.push(plus(created.0, PENDING_EXPIRATION));
    }
    for condition in conditions {
        let Some(updated) = &condition.last_update_time else {
            continue;
        };
        let keep = match condition.type_.as_str() {
            DENIED => DENIED_EXPIRATION,
            FAILED => FAILED_EXPIRATION,
            APPROVED if !certificate.is_empty() => APPROVED_EXPIRATION,
            _ => continue,
        };
        deadlines.push(plus(updated.0, keep));
    }
    deadlines.into_iter().min()
}

struct Context {
    client: Client,
}

/// Registers the CSR handler and returns the controller's run future.
pub fn start(mut setup: Setup<'_>) -> Task {
    let requests = setup.watch::<CertificateSigningRequest>();
    let (queue, rx) = Queue::<CertificateSigningRequest>::new();
    queue.follow_applied(&requests);
    let ctx = Arc::new(Context {
        client: setup.client(),
    });
    setup.run("csrcleaner", &requests, rx, ctx, reconcile)
}

async fn reconcile(
    csr: Arc<CertificateSigningRequest>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let Some(at) = deadline(&csr) else {
        return Ok(Action::await_change());
    };
    let now = crate::pods::now();
    if at > now {
        let left = at.as_millisecond().saturating_sub(now.as_millisecond());
        return Ok(Action::requeue(Duration::from_millis(
            u64::try_from(left).unwrap_or(0) + 1000,
        )));
    }
    let name = csr.metadata.name.clone().unwrap_or_default();
    tracing::debug!(csr = %name, "deleting the expired certificate signing request");
    let api: Api<CertificateSigningRequest> = Api::all(ctx.client.clone());
    match api.delete(&name, &DeleteParams::default()).await {
        Ok(_) => Ok(Action::await_change()),
        Err(error) if runtime::is_not_found(&error) => Ok(Action::await_change()),
        Err(error) => Err(Error::Invalid(format!(
            "unable to delete CSR {name:?}: {}",
            runtime::error_message(&error)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(secs: i64) -> String {
        Timestamp::from_second(1_800_000_000 + secs)
            .unwrap_or_default()
            .to_string()
    }

    fn csr(conditions: serde_json::Value) -> CertificateSigningRequest {
        serde_json::from_value(json!({
            "metadata": {"name": "c", "creationTimestamp": at(0)},
            "spec": {"request": "", "signerName": "example.com/s"},
            "status": {"conditions": conditions},
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn secs(t: Option<Timestamp>) -> Option<i64> {
        t.map(|t| t.as_second() - 1_800_000_000)
    }

    #[test]
    fn deadlines_follow_upstreams_ages() {
        assert_eq!(secs(deadline(&csr(json!([])))), Some(24 * 3600));
        let denied = json!([{"type": "Denied", "status": "True", "lastUpdateTime": at(100)}]);
        assert_eq!(secs(deadline(&csr(denied))), Some(3700));
        let failed = json!([{"type": "Approved", "status": "True", "lastUpdateTime": at(10)},
                            {"type": "Failed", "status": "True", "lastUpdateTime": at(50)}]);
        assert_eq!(secs(deadline(&csr(failed))), Some(3650));
        // Approved and waiting for its certificate: kept.
        let approved = json!([{"type": "Approved", "status": "True", "lastUpdateTime": at(10)}]);
        assert_eq!(deadline(&csr(approved)), None);
    }
}

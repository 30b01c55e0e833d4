//! The CSR approver (upstream's `csrapproving` controller): a pending request for a node's
//! client certificate (signer `kubernetes.io/kube-apiserver-client-kubelet`, upstream's
//! kubelet client subject and usages) is approved when its requester may create
//! `certificatesigningrequests/selfnodeclient` (the node renewing its own certificate: the
//! requester is the certificate's common name) or `certificatesigningrequests/nodeclient`
//! (anyone bootstrapping a node), as a SubjectAccessReview for the requester answers.
//! Anything else is left to other approvers.

use std::sync::Arc;

use capstan_api::certificates::{self as certs, APPROVED, DENIED, KUBE_APISERVER_CLIENT_KUBELET};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestStatus,
};
use kube::Client;
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;

use crate::runtime::{Change, Error, Queue, Setup, Task};

/// One kind of request the approver recognizes: the subresource its requester needs `create`
/// on, and the approval's message.
struct Recognizer {
    subresource: &'static str,
    message: &'static str,
    /// Whether the requester must be the certificate's subject.
    self_only: bool,
}

/// Upstream's recognizers, in the order they are tried.
const RECOGNIZERS: &[Recognizer] = &[
    Recognizer {
        subresource: "selfnodeclient",
        message: "Auto approving self kubelet client certificate after SubjectAccessReview.",
        self_only: true,
    },
    Recognizer {
        subresource: "nodeclient",
        message: "Auto approving kubelet client certificate after SubjectAccessReview.",
        self_only: false,
    },
];

/// The recognizers that apply to `csr`, whose request is `request`.
fn recognized(
    csr: &CertificateSigningRequest,
    request: &certs::ParsedRequest,
) -> Vec<&'static Recognizer> {
    if csr.spec.signer_name != KUBE_APISERVER_CLIENT_KUBELET
        || super::validate_kubelet_client(request, &super::usage_set(csr)).is_err()
    {
        return Vec::new();
    }
    let username = csr.spec.username.as_deref().unwrap_or_default();
    RECOGNIZERS
        .iter()
        .filter(|r| !r.self_only || username == request.common_name)
        .collect()
}

/// Neither approved nor denied, nor issued.
fn pending(csr: &CertificateSigningRequest) -> bool {
    certs::certificate(csr).is_empty()
        && !certs::has_condition(csr, APPROVED)
        && !certs::has_condition(csr, DENIED)
}

/// The review asking whether the requester of `csr` may create `subresource`.
fn review(csr: &CertificateSigningRequest, subresource: &str) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: csr.spec.username.clone(),
            uid: csr.spec.uid.clone(),
            groups: csr.spec.groups.clone(),
            extra: csr.spec.extra.clone(),
            resource_attributes: Some(ResourceAttributes {
                group: Some("certificates.k8s.io".into()),
                resource: Some("certificatesigningrequests".into()),
                subresource: Some(subresource.into()),
                verb: Some("create".into()),
                version: Some("*".into()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    }
}

struct Context {
    client: Client,
}

/// Registers the CSR handler and returns the controller's run future.
pub fn start(mut setup: Setup<'_>) -> Task {
    let requests = setup.watch::<CertificateSigningRequest>();
    let (queue, rx) = Queue::<CertificateSigningRequest>::new();
    requests.on_change(move |change| {
        if let Change::Applied { new, .. } = change
            && pending(new)
            && new.spec.signer_name == KUBE_APISERVER_CLIENT_KUBELET
        {
            queue.add(ObjectRef::from_obj(*new));
        }
    });
    let ctx = Arc::new(Context {
        client: setup.client(),
    });
    setup.run("csrapproving", &requests, rx, ctx, reconcile)
}

async fn reconcile(
    csr: Arc<CertificateSigningRequest>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    if !pending(&csr) {
        return Ok(Action::await_change());
    }
    let name = csr.metadata.name.clone().unwrap_or_default();
    let request = certs::parse_request(&csr.spec.request.0)
        .map_err(|e| Error::Invalid(format!("unable to parse csr {name:?}: {e}")))?;
    let reviews: Api<SubjectAccessReview> = Api::all(ctx.client.clone());
    let mut tried = Vec::new();
    for recognizer in recognized(&csr, &request) {
        tried.push(recognizer.subresource);
        let answer = reviews
            .create(
                &PostParams::default(),
                &review(&csr, recognizer.subresource),
            )
            .await?;
        if !answer.status.is_some_and(|s| s.allowed) {
            continue;
        }
        let mut approved = (*csr).clone();
        approved
            .status
            .get_or_insert_with(CertificateSigningRequestStatus::default)
            .conditions
            .get_or_insert_with(Vec::new)
            .push(CertificateSigningRequestCondition {
                type_: APPROVED.into(),
                status: "True".into(),
                reason: Some("AutoApproved".into()),
                message: Some(recognizer.message.into()),
                ..CertificateSigningRequestCondition::default()
            });
        let api: Api<CertificateSigningRequest> = Api::all(ctx.client.clone());
        api.replace_subresource("approval", &name, &PostParams::default(), &approved)
            .await?;
        return Ok(Action::await_change());
    }
    if !tried.is_empty() {
        // Upstream's ignorable error: logged, not retried until the request changes.
        tracing::debug!(
            csr = %name,
            tried = ?tried,
            "recognized the request but the subject access review was not approved"
        );
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csr(signer: &str, username: &str, usages: &[&str]) -> CertificateSigningRequest {
        let mut csr = CertificateSigningRequest::default();
        csr.spec.signer_name = signer.into();
        csr.spec.username = Some(username.into());
        csr.spec.usages = Some(usages.iter().map(|u| u.to_string()).collect());
        csr
    }

    fn node_request(cn: &str) -> certs::ParsedRequest {
        certs::ParsedRequest {
            common_name: cn.into(),
            organizations: vec!["system:nodes".into()],
            ..certs::ParsedRequest::default()
        }
    }

    #[test]
    fn node_client_requests_are_recognized_self_first() {
        let usages = ["client auth", "digital signature"];
        let own = csr(KUBE_APISERVER_CLIENT_KUBELET, "system:node:n1", &usages);
        let names: Vec<_> = recognized(&own, &node_request("system:node:n1"))
            .iter()
            .map(|r| r.subresource)
            .collect();
        assert_eq!(names, ["selfnodeclient", "nodeclient"]);
        let bootstrap = csr(
            KUBE_APISERVER_CLIENT_KUBELET,
            "system:bootstrap:abc",
            &usages,
        );
        let names: Vec<_> = recognized(&bootstrap, &node_request("system:node:n1"))
            .iter()
            .map(|r| r.subresource)
            .collect();
        assert_eq!(names, ["nodeclient"]);
        let other_signer = csr(
            "kubernetes.io/kube-apiserver-client",
            "system:node:n1",
            &usages,
        );
        assert!(recognized(&other_signer, &node_request("system:node:n1")).is_empty());
        let serving = csr(
            KUBE_APISERVER_CLIENT_KUBELET,
            "system:node:n1",
            &["server auth"],
        );
        assert!(recognized(&serving, &node_request("system:node:n1")).is_empty());
    }

    #[test]
    fn the_review_asks_for_the_requester() {
        let mut request = csr(KUBE_APISERVER_CLIENT_KUBELET, "system:node:n1", &[]);
        request.spec.groups = Some(vec!["system:nodes".into()]);
        let review = review(&request, "selfnodeclient");
        assert_eq!(review.spec.user.as_deref(), Some("system:node:n1"));
        assert_eq!(review.spec.groups, Some(vec!["system:nodes".to_owned()]));
        let attributes = review.spec.resource_attributes.unwrap_or_default();
        assert_eq!(attributes.subresource.as_deref(), Some("selfnodeclient"));
        assert_eq!(attributes.verb.as_deref(), Some("create"));
    }
}

//! The CSR approver (upstream's `csrapproving` controller): a pending request for a node's
//! client certificate (signer `kubernetes.io/kube-apiserver-client-kubelet`, upstream's
//! kubelet client subject and usages) is approved when its requester may create
//! `certificatesigningrequests/selfnodeclient` (the node renewing its own certificate: the
//! requester is the certificate's common name) or `certificatesigningrequests/nodeclient`
//! (anyone bootstrapping a node), as a SubjectAccessReview for the requester answers.
//!
//! Beyond upstream (which leaves kubelet serving requests to a human or an external approver,
//! while k3s signs its kubelets' serving certificates itself without CSRs): a pending
//! `kubernetes.io/kubelet-serving` request is approved when a node asks for its own serving
//! certificate (the requester is `system:node:<name>` in `system:nodes` and the subject's common
//! name) with upstream's serving subject and usages, and every name it asks for is the node's
//! name or one of the addresses its Node reports (`status.addresses`). A request naming
//! anything else is left pending for a human (`kubectl certificate approve`), so a node can
//! never get a certificate for another machine's or the API server's names on its own.
//! Anything else is left to other approvers.

use std::sync::Arc;

use capstan_api::certificates::{
    self as certs, APPROVED, DENIED, KUBE_APISERVER_CLIENT_KUBELET, KUBELET_SERVING,
};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestStatus,
};
use k8s_openapi::api::core::v1::Node;
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
            && (new.spec.signer_name == KUBE_APISERVER_CLIENT_KUBELET
                || new.spec.signer_name == KUBELET_SERVING)
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
    if csr.spec.signer_name == KUBELET_SERVING {
        return approve_own_serving(&csr, &request, &ctx).await;
    }
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
        approve(&csr, &ctx, recognizer.message).await?;
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

/// Writes the `Approved` condition (`AutoApproved`, `message`) through `/approval`.
async fn approve(
    csr: &CertificateSigningRequest,
    ctx: &Context,
    message: &str,
) -> Result<(), Error> {
    let name = csr.metadata.name.clone().unwrap_or_default();
    let mut approved = csr.clone();
    approved
        .status
        .get_or_insert_with(CertificateSigningRequestStatus::default)
        .conditions
        .get_or_insert_with(Vec::new)
        .push(CertificateSigningRequestCondition {
            type_: APPROVED.into(),
            status: "True".into(),
            reason: Some("AutoApproved".into()),
            message: Some(message.into()),
            ..CertificateSigningRequestCondition::default()
        });
    let api: Api<CertificateSigningRequest> = Api::all(ctx.client.clone());
    api.replace_subresource("approval", &name, &PostParams::default(), &approved)
        .await?;
    Ok(())
}

/// Whether `csr` (request `request`) is a node asking for its own serving certificate for
/// names its Node `node` reports, else why not.
fn own_serving(
    csr: &CertificateSigningRequest,
    request: &certs::ParsedRequest,
    node: Option<&Node>,
) -> Result<(), String> {
    super::validate_kubelet_serving(request, &super::usage_set(csr))?;
    let username = csr.spec.username.as_deref().unwrap_or_default();
    if username != request.common_name
        || !csr
            .spec
            .groups
            .iter()
            .flatten()
            .any(|g| g == "system:nodes")
    {
        return Err(format!(
            "requested by {username:?}, not by the node {:?} itself",
            request.common_name
        ));
    }
    let name = request
        .common_name
        .strip_prefix("system:node:")
        .unwrap_or_default();
    let Some(node) = node else {
        return Err(format!("node {name:?} does not exist"));
    };
    let mut own: Vec<String> = vec![name.to_owned()];
    own.extend(
        node.status
            .iter()
            .flat_map(|s| s.addresses.iter().flatten())
            .map(|a| a.address.clone()),
    );
    let asked = request
        .dns_names
        .iter()
        .cloned()
        .chain(request.ip_addresses.iter().map(|ip| ip.to_string()));
    for asked in asked {
        let matches = |o: &String| match (
            asked.parse::<std::net::IpAddr>(),
            o.parse::<std::net::IpAddr>(),
        ) {
            (Ok(a), Ok(b)) => a == b,
            _ => o.eq_ignore_ascii_case(&asked),
        };
        if !own.iter().any(matches) {
            return Err(format!(
                "{asked:?} is neither the node's name nor one of its addresses"
            ));
        }
    }
    Ok(())
}

/// Approves a node's request for its own serving certificate ([`own_serving`]); leaves any
/// other serving request pending.
async fn approve_own_serving(
    csr: &CertificateSigningRequest,
    request: &certs::ParsedRequest,
    ctx: &Context,
) -> Result<Action, Error> {
    let name = request
        .common_name
        .strip_prefix("system:node:")
        .unwrap_or_default();
    let node = match name {
        "" => None,
        name => Api::<Node>::all(ctx.client.clone()).get_opt(name).await?,
    };
    match own_serving(csr, request, node.as_ref()) {
        Ok(()) => {
            approve(
                csr,
                ctx,
                "Auto approving self kubelet serving certificate: its names are the node's own.",
            )
            .await?
        }
        Err(why) => {
            tracing::info!(
                csr = %csr.metadata.name.as_deref().unwrap_or_default(),
                reason = %why,
                "kubelet serving request left for manual approval"
            );
            // The Node may not report its addresses yet (a node's first request can race its
            // status): look again for a while, as no change of the request itself will come.
            if young(csr) {
                return Ok(Action::requeue(RECHECK));
            }
        }
    }
    Ok(Action::await_change())
}

/// How often a node's serving request that did not match its Node is checked again.
const RECHECK: std::time::Duration = std::time::Duration::from_secs(5);
/// How long after its creation such a request is checked again.
const RECHECK_FOR: i64 = 10 * 60;

/// Whether the request was created less than [`RECHECK_FOR`] ago.
fn young(csr: &CertificateSigningRequest) -> bool {
    csr.metadata
        .creation_timestamp
        .as_ref()
        .is_some_and(|created| {
            let now = k8s_openapi::jiff::Timestamp::now().as_second();
            now - created.0.as_second() < RECHECK_FOR
        })
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

    #[test]
    fn a_node_serving_request_is_approved_only_for_its_own_names() {
        use k8s_openapi::api::core::v1::{NodeAddress, NodeStatus};
        let usages = ["digital signature", "server auth"];
        let mut own = csr(KUBELET_SERVING, "system:node:n1", &usages);
        own.spec.groups = Some(vec!["system:nodes".into(), "system:authenticated".into()]);
        let node = Node {
            status: Some(NodeStatus {
                addresses: Some(vec![
                    NodeAddress {
                        type_: "InternalIP".into(),
                        address: "10.0.0.5".into(),
                    },
                    NodeAddress {
                        type_: "Hostname".into(),
                        address: "host1".into(),
                    },
                ]),
                ..NodeStatus::default()
            }),
            ..Node::default()
        };
        let mut request = node_request("system:node:n1");
        request.dns_names = vec!["n1".into(), "HOST1".into()];
        request.ip_addresses = vec!["10.0.0.5".parse().unwrap()];
        assert_eq!(own_serving(&own, &request, Some(&node)), Ok(()));
        // A foreign name, an unknown node, another requester, a client usage: all refused.
        let mut foreign = request.clone();
        foreign.dns_names.push("kubernetes.default.svc".into());
        let why = own_serving(&own, &foreign, Some(&node)).unwrap_err();
        assert!(why.contains("kubernetes.default.svc"), "{why}");
        let mut foreign_ip = request.clone();
        foreign_ip.ip_addresses = vec!["10.0.0.6".parse().unwrap()];
        assert!(own_serving(&own, &foreign_ip, Some(&node)).is_err());
        assert!(own_serving(&own, &request, None).is_err());
        let mut other = own.clone();
        other.spec.username = Some("system:node:n2".into());
        assert!(own_serving(&other, &request, Some(&node)).is_err());
        let mut admin = own.clone();
        admin.spec.username = Some("system:node:n1".into());
        admin.spec.groups = Some(vec!["system:masters".into()]);
        assert!(own_serving(&admin, &request, Some(&node)).is_err());
        let client = csr(
            KUBELET_SERVING,
            "system:node:n1",
            &["digital signature", "client auth"],
        );
        assert!(own_serving(&client, &request, Some(&node)).is_err());
    }
}

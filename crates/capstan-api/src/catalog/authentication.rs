//! `authentication.k8s.io/v1`: the review the API server answers without storing it (see the
//! API server's `authz/reviews.rs`); the strategy only decodes its body.

use k8s_openapi::api::authentication::v1::SelfSubjectReview;

use super::{CREATE_ONLY, Resource, of};

pub(super) static RESOURCES: &[Resource] = &[Resource {
    verbs: CREATE_ONLY,
    review: true,
    ..of::<SelfSubjectReview>("selfsubjectreview")
}];

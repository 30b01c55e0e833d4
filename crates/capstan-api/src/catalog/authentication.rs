//! `authentication.k8s.io/v1`: the reviews the API server answers without storing them (see
//! the API server's `authz/reviews.rs`); the strategy only decodes their bodies.

use k8s_openapi::api::authentication::v1::{SelfSubjectReview, TokenReview};

use super::{CREATE_ONLY, Resource, of};

pub(super) static RESOURCES: &[Resource] = &[
    Resource {
        verbs: CREATE_ONLY,
        review: true,
        ..of::<SelfSubjectReview>("selfsubjectreview")
    },
    Resource {
        verbs: CREATE_ONLY,
        review: true,
        ..of::<TokenReview>("tokenreview")
    },
];

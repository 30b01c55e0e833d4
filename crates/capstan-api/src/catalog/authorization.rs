//! `authorization.k8s.io/v1`: the reviews the API server answers without storing them (see the
//! API server's `authz/reviews.rs`); the strategies only decode their bodies.

use k8s_openapi::api::authorization::v1::{
    SelfSubjectAccessReview, SelfSubjectRulesReview, SubjectAccessReview,
};

use super::{CREATE_ONLY, Resource, of};

pub(super) static RESOURCES: &[Resource] = &[
    Resource {
        verbs: CREATE_ONLY,
        review: true,
        ..of::<SelfSubjectAccessReview>("selfsubjectaccessreview")
    },
    Resource {
        verbs: CREATE_ONLY,
        review: true,
        ..of::<SelfSubjectRulesReview>("selfsubjectrulesreview")
    },
    Resource {
        verbs: CREATE_ONLY,
        review: true,
        ..of::<SubjectAccessReview>("subjectaccessreview")
    },
];

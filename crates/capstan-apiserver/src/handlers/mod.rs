//! The handlers: what answers a request once it has passed authentication, authorization and
//! flow control ([`crate::serve`]). [`resource`] serves every resource request through the
//! resource's registry (content negotiation, bodies, query options, lists and watches) and
//! dispatches the subresources that are not plain reads and writes of the object: `scale`,
//! pods' `binding` and `eviction` ([`pods`]), `log`/`exec`/`attach`/`portforward`
//! ([`streaming`], through [`kubelets`]) and `proxy` ([`proxy`]). Beside it: discovery,
//! health and version, patches ([`patch`], [`strategic`]), and the built-in Metrics API
//! ([`resourcemetrics`], `metrics.k8s.io`).

pub(crate) mod discovery;
pub mod health;
pub(crate) mod kubelets;
pub(crate) mod patch;
pub(crate) mod pods;
pub(crate) mod proxy;
pub(crate) mod resource;
pub(crate) mod resourcemetrics;
pub(crate) mod scale;
pub(crate) mod strategic;
pub(crate) mod streaming;

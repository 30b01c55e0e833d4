//! Upstream's NamespaceLifecycle admission: no new content in a missing or terminating
//! namespace, and the namespaces every cluster needs (`default`, `kube-system`,
//! `kube-public`) may not be deleted. It runs first in the admission chain
//! ([`crate::admission::Chain`]).
//!
//! Like upstream's plugin, it reads namespaces from the watch cache as it stands, without
//! waiting for the cache to catch up with the store, and reads consistently only when the cache
//! does not have the namespace (it may have just been created) or when this server was asked to
//! delete it lately (the cache may not show it terminating yet).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use capstan_api::catalog::Resource;
use capstan_api::{GroupResource, StatusError};

use super::{Mutation, Operation, Plugin, Review, Verdict};
use crate::registry::Registry;
use crate::registry::object::is_terminating;
use crate::status::ApiError;

/// How long after a delete request a namespace is always read consistently (upstream's
/// `forceLiveLookupTTL`).
const LIVE_LOOKUP: Duration = Duration::from_secs(30);

/// The namespaces that may not be deleted (upstream's immortal namespaces).
const IMMORTAL: [&str; 3] = ["default", "kube-system", "kube-public"];

/// The admission, over the namespaces' registry, with its memory of recent namespace deletes.
#[derive(Debug)]
pub(crate) struct NamespaceLifecycle {
    namespaces: std::sync::Arc<Registry>,
    deleted: Mutex<HashMap<String, Instant>>,
}

/// Whether `resource` is the core group's namespaces.
fn is_namespaces(resource: &Resource) -> bool {
    resource.group.is_empty() && resource.plural == "namespaces"
}

impl NamespaceLifecycle {
    /// The admission reading namespaces from `namespaces`.
    pub(crate) fn new(namespaces: std::sync::Arc<Registry>) -> Self {
        NamespaceLifecycle {
            namespaces,
            deleted: Mutex::new(HashMap::new()),
        }
    }

    /// Admits the delete of `name` of `resource`: an immortal namespace is refused; the
    /// delete of any other namespace is remembered, so that creates in it read it fresh.
    pub(crate) fn admit_delete(&self, resource: &Resource, name: &str) -> Result<(), ApiError> {
        if !is_namespaces(resource) {
            return Ok(());
        }
        if IMMORTAL.contains(&name) {
            return Err(StatusError::forbidden(
                GroupResource::new(resource.group, resource.plural),
                name,
                "this namespace may not be deleted",
            )
            .into());
        }
        self.deleting(name);
        Ok(())
    }

    /// Notes that the namespace `name` is being deleted.
    fn deleting(&self, name: &str) {
        let now = Instant::now();
        let mut deleted = self.deleted.lock().unwrap_or_else(|e| e.into_inner());
        deleted.retain(|_, at| now.duration_since(*at) < LIVE_LOOKUP);
        deleted.insert(name.to_owned(), now);
    }

    fn deleted_lately(&self, name: &str) -> bool {
        let deleted = self.deleted.lock().unwrap_or_else(|e| e.into_inner());
        deleted
            .get(name)
            .is_some_and(|at| at.elapsed() < LIVE_LOOKUP)
    }

    /// Admits the creation of `name` of `resource` in `namespace`.
    pub(crate) async fn admit_create(
        &self,
        namespace: &str,
        resource: &Resource,
        name: &str,
    ) -> Result<(), ApiError> {
        let namespaces = &self.namespaces;
        let cached = if self.deleted_lately(namespace) {
            None
        } else {
            namespaces.read(None, namespace, Some("0")).await.ok()
        };
        let found = match cached {
            Some(ns) => Ok(ns),
            None => namespaces.read(None, namespace, None).await,
        };
        match found {
            Ok(ns) if is_terminating(&ns.object()) => Err(StatusError::forbidden(
                GroupResource::new(resource.group, resource.plural),
                name,
                &format!(
                    "unable to create new content in namespace {namespace} because it is being terminated"
                ),
            )
            .into()),
            Ok(_) => Ok(()),
            Err(error) if error.status().code() == 404 => {
                Err(StatusError::not_found(GroupResource::new("", "namespaces"), namespace).into())
            }
            Err(error) => Err(error),
        }
    }
}

impl Plugin for NamespaceLifecycle {
    fn name(&self) -> &'static str {
        "NamespaceLifecycle"
    }

    fn admit<'a>(&'a self, review: Mutation<'a>) -> Verdict<'a> {
        Box::pin(async move {
            let Review { attrs, .. } = review;
            match attrs.operation {
                Operation::Delete => self.admit_delete(attrs.resource, attrs.name),
                Operation::Create if attrs.main_namespaced() && !attrs.namespace.is_empty() => {
                    self.admit_create(attrs.namespace, attrs.resource, attrs.name)
                        .await
                }
                _ => Ok(()),
            }
        })
    }
}

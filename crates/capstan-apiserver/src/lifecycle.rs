//! Upstream's NamespaceLifecycle admission: no new content in a missing or terminating
//! namespace.
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

use crate::registry::Registry;
use crate::registry::object::is_terminating;
use crate::status::ApiError;

/// How long after a delete request a namespace is always read consistently (upstream's
/// `forceLiveLookupTTL`).
const LIVE_LOOKUP: Duration = Duration::from_secs(30);

/// The admission's memory of recent namespace deletes.
#[derive(Debug, Default)]
pub(crate) struct NamespaceLifecycle {
    deleted: Mutex<HashMap<String, Instant>>,
}

impl NamespaceLifecycle {
    /// Notes that the namespace `name` is being deleted.
    pub(crate) fn deleting(&self, name: &str) {
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
    pub(crate) async fn admit(
        &self,
        namespaces: &Registry,
        namespace: &str,
        resource: &Resource,
        name: &str,
    ) -> Result<(), ApiError> {
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

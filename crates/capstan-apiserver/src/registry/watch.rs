//! Watches: the event stream a client sees for a resource, from a starting `resourceVersion`,
//! through its selectors (an object that stops matching is reported as deleted, one that starts
//! matching as added, as upstream does), with bookmarks and the initial-events protocol.

use std::time::Duration;

use capstan_api::StatusError;
use capstan_store::{EventKind, Revision, StoreError};
use futures::{Stream, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::list::{ListOptions, ReadAt, read_at};
use super::object::set_meta;
use super::{Registry, store_error};
use crate::selectors::Selectors;
use crate::status::ApiError;

/// The query of a watch.
#[derive(Clone, Debug, Default)]
pub(crate) struct WatchOptions {
    /// Label and field selectors.
    pub selectors: Selectors,
    /// Where to start.
    pub resource_version: Option<String>,
    /// `resourceVersionMatch` (only `NotOlderThan` with `sendInitialEvents`).
    pub resource_version_match: Option<String>,
    /// Whether the client accepts bookmarks.
    pub allow_bookmarks: bool,
    /// `sendInitialEvents`.
    pub send_initial_events: Option<bool>,
    /// How long the watch lasts.
    pub timeout: Duration,
}

/// One event as the client receives it.
#[derive(Clone, Debug)]
pub(crate) struct WatchEventOut {
    /// ADDED, MODIFIED, DELETED, BOOKMARK or ERROR.
    pub kind: &'static str,
    /// The object (a `Status` for ERROR).
    pub object: Value,
}

impl WatchEventOut {
    fn error(error: &ApiError) -> Self {
        WatchEventOut {
            kind: "ERROR",
            object: error.status().to_json(),
        }
    }
}

/// How often a watch that accepts bookmarks gets one.
const BOOKMARK_INTERVAL: Duration = Duration::from_secs(60);

/// How a watch starts.
enum Start {
    /// Send the current state as ADDED events, then changes after its revision.
    WithState { bookmark_after: bool },
    /// Send changes after this revision.
    After(Revision),
}

impl Registry {
    /// Starts a watch; errors before the first event are returned, later ones are sent as an
    /// ERROR event that ends the stream.
    pub(crate) async fn watch(
        &self,
        namespace: Option<&str>,
        options: WatchOptions,
    ) -> Result<impl Stream<Item = WatchEventOut> + Send + 'static + use<>, ApiError> {
        self.check_selectors(&options.selectors)?;
        let start = match options.send_initial_events {
            Some(true) | Some(false) => {
                if options.resource_version_match.as_deref() != Some("NotOlderThan") {
                    return Err(StatusError::invalid(
                        "meta.k8s.io",
                        "ListOptions",
                        "",
                        &[capstan_api::field::FieldError::forbidden(
                            &capstan_api::field::Path::new("resourceVersionMatch"),
                            "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                        )],
                    )
                    .into());
                }
                if options.send_initial_events == Some(true) && !options.allow_bookmarks {
                    return Err(StatusError::invalid(
                        "meta.k8s.io",
                        "ListOptions",
                        "",
                        &[capstan_api::field::FieldError::forbidden(
                            &capstan_api::field::Path::new("allowWatchBookmarks"),
                            "sendInitialEvents requires setting allowWatchBookmarks to true",
                        )],
                    )
                    .into());
                }
                let at = match options.resource_version.as_deref().filter(|v| !v.is_empty()) {
                    // With sendInitialEvents, an unset resourceVersion is a consistent read.
                    None => ReadAt::Latest,
                    rv => read_at(rv, Some("NotOlderThan"))?,
                };
                match (options.send_initial_events, at) {
                    (Some(true), _) => Start::WithState { bookmark_after: true },
                    (_, ReadAt::NotOlderThan(n)) => Start::After(n),
                    _ => Start::After(self.store().current_revision().await.map_err(|e| self.store_error("", e))?),
                }
            }
            None => match read_at(options.resource_version.as_deref(), None)? {
                ReadAt::Latest => Start::WithState { bookmark_after: false },
                ReadAt::NotOlderThan(n) | ReadAt::Exact(n) => Start::After(n),
            },
        };

        let (tx, rx) = mpsc::channel::<WatchEventOut>(256);
        let registry = RegistryRef {
            resource: self.resource,
            strategy: self.strategy.clone(),
            store: self.store().clone(),
        };
        let namespace = namespace.map(str::to_owned);
        tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + options.timeout;
            let _ = tokio::time::timeout_at(deadline, registry.run(namespace, options, start, tx)).await;
        });
        Ok(tokio_stream::wrappers::ReceiverStream::new(rx))
    }
}

/// What a running watch needs of its registry.
struct RegistryRef {
    resource: &'static capstan_api::catalog::Resource,
    strategy: std::sync::Arc<dyn super::Strategy>,
    store: capstan_store::Store,
}

impl RegistryRef {
    fn registry(&self) -> Registry {
        Registry::new(self.resource, self.strategy.clone(), self.store.clone())
    }

    fn bookmark(&self, revision: Revision, initial_end: bool) -> WatchEventOut {
        let mut metadata = json!({"resourceVersion": revision.to_string(), "creationTimestamp": null});
        if initial_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        WatchEventOut {
            kind: "BOOKMARK",
            object: json!({
                "kind": self.resource.kind,
                "apiVersion": self.resource.api_version(),
                "metadata": metadata,
            }),
        }
    }

    async fn run(
        self,
        namespace: Option<String>,
        options: WatchOptions,
        start: Start,
        tx: mpsc::Sender<WatchEventOut>,
    ) {
        let registry = self.registry();
        let mut after = match start {
            Start::After(n) => n,
            Start::WithState { bookmark_after } => {
                let list = registry
                    .list(
                        namespace.as_deref(),
                        &ListOptions {
                            selectors: options.selectors.clone(),
                            ..ListOptions::default()
                        },
                    )
                    .await;
                let list = match list {
                    Ok(list) => list,
                    Err(error) => {
                        let _ = tx.send(WatchEventOut::error(&error)).await;
                        return;
                    }
                };
                for mut object in list.items {
                    with_type(&mut object, self.resource);
                    if tx.send(WatchEventOut { kind: "ADDED", object }).await.is_err() {
                        return;
                    }
                }
                if bookmark_after && tx.send(self.bookmark(list.resource_version, true)).await.is_err() {
                    return;
                }
                list.resource_version
            }
        };
        let prefix = self.resource.storage_namespace_prefix(namespace.as_deref());
        let group_resource = capstan_api::GroupResource::new(self.resource.group, self.resource.plural);
        let mut bookmarks = tokio::time::interval_at(tokio::time::Instant::now() + BOOKMARK_INTERVAL, BOOKMARK_INTERVAL);
        'watch: loop {
            let mut stream = match self.store.watch(&prefix, after).await {
                Ok(stream) => stream,
                Err(error) => {
                    let error = match error {
                        StoreError::Compacted { requested, compacted } => {
                            StatusError::too_old_resource_version(requested, compacted.unwrap_or(requested)).into()
                        }
                        other => store_error(group_resource, "", other),
                    };
                    let _ = tx.send(WatchEventOut::error(&error)).await;
                    return;
                }
            };
            loop {
                let event = tokio::select! {
                    event = stream.next() => event,
                    _ = bookmarks.tick(), if options.allow_bookmarks => {
                        if tx.send(self.bookmark(after, false)).await.is_err() {
                            return;
                        }
                        continue;
                    }
                    () = tx.closed() => return,
                };
                let event = match event {
                    None => return,
                    Some(Ok(event)) => event,
                    Some(Err(StoreError::WatchLagged { last_revision })) => {
                        after = last_revision;
                        continue 'watch;
                    }
                    Some(Err(error)) => {
                        let _ = tx.send(WatchEventOut::error(&store_error(group_resource, "", error))).await;
                        return;
                    }
                };
                after = event.revision();
                let decode = |kv: &capstan_store::KeyValue| registry.decode_stored(kv).ok();
                let prev = event.prev.as_ref().and_then(decode);
                let prev_matches = prev.as_ref().is_some_and(|p| registry.matches(&options.selectors, p));
                let out = match event.kind {
                    EventKind::Delete => prev.filter(|_| prev_matches).map(|mut object| {
                        set_meta(&mut object, "resourceVersion", Some(event.revision().to_string().into()));
                        ("DELETED", object)
                    }),
                    EventKind::Put => decode(&event.kv).and_then(|object| {
                        let matches = registry.matches(&options.selectors, &object);
                        match (prev_matches, matches) {
                            (true, true) => Some(("MODIFIED", object)),
                            (false, true) => Some(("ADDED", object)),
                            (true, false) => Some(("DELETED", object)),
                            (false, false) => None,
                        }
                    }),
                };
                if let Some((kind, mut object)) = out {
                    with_type(&mut object, self.resource);
                    if tx.send(WatchEventOut { kind, object }).await.is_err() {
                        return;
                    }
                }
            }
        }
    }
}

/// Stored objects carry their kind; this makes sure of it.
fn with_type(object: &mut Value, resource: &capstan_api::catalog::Resource) {
    if object.get("kind").is_none() {
        object["kind"] = resource.kind.into();
        object["apiVersion"] = resource.api_version().into();
    }
}

//! Watches: the event stream a client sees for a resource, from a starting `resourceVersion`,
//! through its selectors (an object that stops matching is reported as deleted, one that starts
//! matching as added, as upstream does), with bookmarks and the initial-events protocol.

use std::time::Duration;

use capstan_api::StatusError;
use capstan_store::{EventKind, Revision, StoreError};
use futures::{FutureExt, Stream, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use std::sync::Arc;

use super::cache::{Cached, CachedEvent, Feed, Subscription, WatchCache};
use super::list::{ListOptions, ReadAt, read_at};
use super::{Registry, store_error};
use crate::registry::selectors::Selectors;
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
    /// The object (a `Status` for ERROR), with its JSON serialised once.
    pub object: Arc<Cached>,
}

impl WatchEventOut {
    fn new(kind: &'static str, object: Value) -> Self {
        WatchEventOut {
            kind,
            object: Cached::of(object),
        }
    }

    fn error(error: &ApiError) -> Self {
        Self::new("ERROR", error.status().to_json())
    }
}

/// How long a watch waits for the cache to catch up with the version it starts from before it
/// reads the store instead.
const CACHE_WAIT: Duration = Duration::from_secs(3);

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
        self: &Arc<Self>,
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
                let at = match options
                    .resource_version
                    .as_deref()
                    .filter(|v| !v.is_empty())
                {
                    // With sendInitialEvents, an unset resourceVersion is a consistent read.
                    None => ReadAt::Latest,
                    rv => read_at(rv, Some("NotOlderThan"))?,
                };
                match (options.send_initial_events, at) {
                    (Some(true), _) => Start::WithState {
                        bookmark_after: true,
                    },
                    (_, ReadAt::NotOlderThan(n)) => Start::After(n),
                    _ => Start::After(
                        self.store()
                            .current_revision()
                            .await
                            .map_err(|e| self.store_error("", e))?,
                    ),
                }
            }
            None => match read_at(options.resource_version.as_deref(), None)? {
                ReadAt::Latest => Start::WithState {
                    bookmark_after: false,
                },
                ReadAt::NotOlderThan(n) | ReadAt::Exact(n) => Start::After(n),
            },
        };

        let (tx, rx) = mpsc::channel::<WatchEventOut>(256);
        let registry = self.clone();
        let namespace = namespace.map(str::to_owned);
        tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + options.timeout;
            let _ = tokio::time::timeout_at(
                deadline,
                registry.run_watch(namespace, options, start, tx),
            )
            .await;
        });
        Ok(tokio_stream::wrappers::ReceiverStream::new(rx))
    }

    fn bookmark(&self, revision: Revision, initial_end: bool) -> WatchEventOut {
        let mut metadata =
            json!({"resourceVersion": revision.to_string(), "creationTimestamp": null});
        if initial_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        WatchEventOut::new(
            "BOOKMARK",
            json!({
                "kind": self.resource.kind,
                "apiVersion": self.resource.api_version(),
                "metadata": metadata,
            }),
        )
    }

    /// The event a watcher with `selectors` sees for a change, if any: entering the selection
    /// is ADDED, leaving it DELETED, as upstream.
    fn event_for(
        &self,
        selectors: &Selectors,
        prev: Option<&Arc<Cached>>,
        object: &Arc<Cached>,
        deleted: bool,
    ) -> Option<WatchEventOut> {
        let prev_matches = prev.is_some_and(|p| self.matches_cached(selectors, p));
        let kind = if deleted {
            prev_matches.then_some("DELETED")?
        } else {
            match (prev_matches, self.matches_cached(selectors, object)) {
                (true, true) => "MODIFIED",
                (false, true) => "ADDED",
                (true, false) => "DELETED",
                (false, false) => return None,
            }
        };
        Some(WatchEventOut {
            kind,
            object: object.clone(),
        })
    }

    /// Sends the event of a stored object, the object as served; whether the watch goes on (a
    /// conversion that fails ends it with its error).
    async fn send_served(&self, tx: &mpsc::Sender<WatchEventOut>, out: WatchEventOut) -> bool {
        match self.view(out.object).await {
            Ok(object) => tx
                .send(WatchEventOut {
                    kind: out.kind,
                    object,
                })
                .await
                .is_ok(),
            Err(error) => {
                let _ = tx.send(WatchEventOut::error(&error)).await;
                false
            }
        }
    }

    /// Feeds a watcher: from the cache when it can serve the start, from the store otherwise.
    async fn run_watch(
        self: Arc<Self>,
        namespace: Option<String>,
        options: WatchOptions,
        start: Start,
        tx: mpsc::Sender<WatchEventOut>,
    ) {
        let prefix = self.resource.storage_namespace_prefix(namespace.as_deref());
        if let Some(cache) = self.cache.clone() {
            // A watcher of one value of the cache's indexed field (a kubelet's
            // `spec.nodeName=<node>`) is fed only that value's events.
            let narrow = cache.narrowing(&options.selectors);
            let subscription = match start {
                Start::WithState { bookmark_after } => {
                    // A consistent start: the cache must have caught up with the store.
                    let current = self.store().current_revision().await.unwrap_or(0);
                    if cache.wait_for(current, CACHE_WAIT).await {
                        cache.snapshot_and_subscribe(&prefix, narrow).map(
                            |(objects, revision, feed)| {
                                (objects, revision, Vec::new(), feed, bookmark_after)
                            },
                        )
                    } else {
                        None
                    }
                }
                Start::After(after) => {
                    // History the store has compacted is gone for watchers too (410), even
                    // where the cache's window still holds it.
                    let probe = capstan_store::ListOptions {
                        prefix: prefix.clone(),
                        start: None,
                        revision: Some(after),
                        limit: Some(1),
                    };
                    if let Err(StoreError::Compacted {
                        requested,
                        compacted,
                    }) = self.store().list(&probe).await
                    {
                        let error = StatusError::too_old_resource_version(
                            requested,
                            compacted.unwrap_or(requested),
                        )
                        .into();
                        let _ = tx.send(WatchEventOut::error(&error)).await;
                        return;
                    }
                    if cache.wait_for(after, CACHE_WAIT).await {
                        match cache.subscribe(after, narrow) {
                            Subscription::Events { backlog, feed } => {
                                Some((Vec::new(), after, backlog, feed, false))
                            }
                            Subscription::TooOld => None,
                        }
                    } else {
                        None
                    }
                }
            };
            if let Some((initial, revision, backlog, feed, bookmark_after)) = subscription {
                self.watch_from_cache(
                    &cache,
                    &prefix,
                    &options,
                    initial,
                    revision,
                    backlog,
                    feed,
                    bookmark_after,
                    &tx,
                )
                .await;
                return;
            }
        }
        self.watch_from_store(namespace, options, start, tx).await;
    }

    #[allow(clippy::too_many_arguments)]
    async fn watch_from_cache(
        &self,
        cache: &WatchCache,
        prefix: &str,
        options: &WatchOptions,
        initial: Vec<Arc<Cached>>,
        revision: Revision,
        backlog: Vec<Arc<CachedEvent>>,
        mut feed: Feed,
        bookmark_after: bool,
        tx: &mpsc::Sender<WatchEventOut>,
    ) {
        for object in initial {
            if self.matches_cached(&options.selectors, &object)
                && !self
                    .send_served(
                        tx,
                        WatchEventOut {
                            kind: "ADDED",
                            object,
                        },
                    )
                    .await
            {
                return;
            }
        }
        if bookmark_after && tx.send(self.bookmark(revision, true)).await.is_err() {
            return;
        }
        let mut last = revision;
        let mut bookmarks = tokio::time::interval_at(
            tokio::time::Instant::now() + BOOKMARK_INTERVAL,
            BOOKMARK_INTERVAL,
        );
        let deliver = |event: &CachedEvent, last: &mut Revision| -> Option<WatchEventOut> {
            if event.revision <= *last {
                return None;
            }
            *last = event.revision;
            if !event.key.starts_with(prefix) {
                return None;
            }
            self.event_for(
                &options.selectors,
                event.prev.as_ref(),
                &event.object,
                event.deleted,
            )
        };
        for event in backlog {
            if let Some(out) = deliver(&event, &mut last)
                && !self.send_served(tx, out).await
            {
                return;
            }
        }
        loop {
            let event = tokio::select! {
                event = feed.recv() => event,
                _ = bookmarks.tick(), if options.allow_bookmarks => {
                    // A narrowed watcher's feed skips the other values' changes: its bookmark
                    // still moves to the resource's last change once it has taken its own.
                    last = cache.bookmark_revision(&feed, last);
                    if tx.send(self.bookmark(last, false)).await.is_err() {
                        return;
                    }
                    continue;
                }
                () = tx.closed() => return,
            };
            match event {
                Ok(event) => {
                    if let Some(out) = deliver(&event, &mut last)
                        && !self.send_served(tx, out).await
                    {
                        return;
                    }
                }
                // Too slow for the live feed, or the cache restarted: the watch ends and the
                // client watches again from the last version it saw, as with upstream.
                Err(_) => return,
            }
        }
    }

    async fn watch_from_store(
        &self,
        namespace: Option<String>,
        options: WatchOptions,
        start: Start,
        tx: mpsc::Sender<WatchEventOut>,
    ) {
        let registry = self;
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
                for object in list.items {
                    let added = WatchEventOut {
                        kind: "ADDED",
                        object,
                    };
                    if tx.send(added).await.is_err() {
                        return;
                    }
                }
                if bookmark_after
                    && tx
                        .send(self.bookmark(list.resource_version, true))
                        .await
                        .is_err()
                {
                    return;
                }
                list.resource_version
            }
        };
        let prefix = self.resource.storage_namespace_prefix(namespace.as_deref());
        let group_resource =
            capstan_api::GroupResource::new(self.resource.group, self.resource.plural);
        let mut bookmarks = tokio::time::interval_at(
            tokio::time::Instant::now() + BOOKMARK_INTERVAL,
            BOOKMARK_INTERVAL,
        );
        let (kind, api_version) = (self.resource.kind, self.resource.api_version());
        'watch: loop {
            let mut stream = match self.store().watch(&prefix, after).await {
                Ok(stream) => stream,
                Err(error) => {
                    let error = match error {
                        StoreError::Compacted {
                            requested,
                            compacted,
                        } => StatusError::too_old_resource_version(
                            requested,
                            compacted.unwrap_or(requested),
                        )
                        .into(),
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
                        let _ = tx
                            .send(WatchEventOut::error(&store_error(
                                group_resource,
                                "",
                                error,
                            )))
                            .await;
                        return;
                    }
                };
                after = event.revision();
                let decode = |kv: &capstan_store::KeyValue, revision: Revision| {
                    let object: Value = serde_json::from_slice(&kv.value).ok()?;
                    Some(Cached::new(object, revision, kind, &api_version))
                };
                let prev = event
                    .prev
                    .as_ref()
                    .and_then(|kv| decode(kv, kv.mod_revision));
                let out = match event.kind {
                    EventKind::Delete => prev
                        .as_ref()
                        .and_then(|p| {
                            decode(event.prev.as_ref()?, event.revision()).or(Some(p.clone()))
                        })
                        .and_then(|object| {
                            self.event_for(&options.selectors, prev.as_ref(), &object, true)
                        }),
                    EventKind::Put => decode(&event.kv, event.revision()).and_then(|object| {
                        self.event_for(&options.selectors, prev.as_ref(), &object, false)
                    }),
                };
                if let Some(out) = out
                    && !self.send_served(&tx, out).await
                {
                    return;
                }
            }
        }
    }
}

/// A signal that fires when any object of a few resources changes, for the API server's own
/// consumers of its configuration (the RBAC authorizer, flow control) that keep a derived form of
/// it current. It is built on ordinary watches, reopened when they end, so a change is seen as
/// soon as it is written rather than at the next poll.
pub(crate) struct Changes {
    registries: Vec<Arc<Registry>>,
    events: futures::stream::SelectAll<futures::stream::BoxStream<'static, WatchEventOut>>,
}

impl Changes {
    /// How long each underlying watch lasts before it is reopened.
    const WATCH_TIMEOUT: Duration = Duration::from_secs(3600);

    /// Follows every object of `registries`.
    pub(crate) fn new(registries: Vec<Arc<Registry>>) -> Changes {
        Changes {
            registries,
            events: futures::stream::SelectAll::new(),
        }
    }

    /// Waits until something changed (or `fallback` passed), then swallows the events already
    /// queued so that a burst of writes costs one wake-up. The first call returns at once: a new
    /// watch starts with the current objects.
    pub(crate) async fn changed(&mut self, fallback: Duration) {
        if self.events.len() < self.registries.len() {
            // A watch ended (or none is open yet): reopen them all.
            self.events.clear();
            for registry in &self.registries {
                let options = WatchOptions {
                    timeout: Self::WATCH_TIMEOUT,
                    ..WatchOptions::default()
                };
                match registry.watch(None, options).await {
                    Ok(stream) => self.events.push(stream.boxed()),
                    Err(error) => {
                        tracing::debug!(?error, "cannot watch; polling instead");
                        self.events.clear();
                        tokio::time::sleep(fallback).await;
                        return;
                    }
                }
            }
        }
        let _ = tokio::time::timeout(fallback, self.events.next()).await;
        while let Some(Some(_)) = self.events.next().now_or_never() {}
    }
}

//! Watch delivery shared by the backends.
//!
//! A backend hands committed changes to watchers in batches ([`Batch`], shared by every watcher
//! it concerns, so a change is copied once however many watch it). Each watcher has a bounded
//! buffer: offering a batch never waits, and a watcher whose buffer is full is cut off instead
//! of slowing the writer or the other watchers. The stream the caller reads first drains an
//! optional replay of history (see [`Replay`]), then live batches, skipping anything at or below
//! the last revision it delivered; when cut off it ends with [`StoreError::WatchLagged`] naming
//! that revision, from which the caller can watch again without a gap.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::mpsc;

use crate::{Result, Revision, StoreError, WatchEvent, WatchStream};

/// Events of one or more consecutive revisions, shared by all watchers that receive them.
pub(crate) type Batch = Arc<[WatchEvent]>;

type Message = Result<Batch>;

/// The receiving end of one watcher's buffer.
pub(crate) struct Subscription {
    rx: mpsc::Receiver<Message>,
    lagged: Arc<AtomicBool>,
}

/// The sending end of one watcher's buffer.
pub(crate) struct Feed {
    tx: mpsc::Sender<Message>,
    lagged: Arc<AtomicBool>,
}

/// A watcher buffer holding at most `capacity` batches.
pub(crate) fn channel(capacity: usize) -> (Feed, Subscription) {
    let (tx, rx) = mpsc::channel(capacity.max(1));
    let lagged = Arc::new(AtomicBool::new(false));
    (
        Feed {
            tx,
            lagged: lagged.clone(),
        },
        Subscription { rx, lagged },
    )
}

impl Feed {
    /// Offers a batch without waiting. Returns false when the watcher is gone or has just been
    /// cut off for lagging; the caller then drops this feed.
    pub(crate) fn offer(&self, batch: &Batch) -> bool {
        match self.tx.try_send(Ok(batch.clone())) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.lagged.store(true, Ordering::Release);
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }

    /// Ends the watch with an error (waiting for buffer space: the watch is over anyway).
    pub(crate) async fn fail(self, error: StoreError) {
        let _ = self.tx.send(Err(error)).await;
    }

    /// Whether the watcher has gone away.
    pub(crate) fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Completes when the watcher has gone away.
    pub(crate) async fn closed(&self) {
        self.tx.closed().await
    }
}

/// History to deliver before live events.
#[async_trait::async_trait]
pub(crate) trait Replay: Send {
    /// The next events after revision `after`, in order, already filtered to the watch's prefix;
    /// empty when the replay is complete.
    async fn next_chunk(&mut self, after: Revision) -> Result<Vec<WatchEvent>>;
}

struct StreamState {
    prefix: String,
    last: Revision,
    replay: Option<Box<dyn Replay>>,
    subscription: Subscription,
    pending: VecDeque<WatchEvent>,
    done: bool,
}

/// The stream a caller reads: `replay` first (if any), then live batches from `subscription`,
/// every event under `prefix` with a revision greater than `after`, each exactly once.
pub(crate) fn stream(
    prefix: String,
    after: Revision,
    replay: Option<Box<dyn Replay>>,
    subscription: Subscription,
) -> WatchStream {
    let state = StreamState {
        prefix,
        last: after,
        replay,
        subscription,
        pending: VecDeque::new(),
        done: false,
    };
    Box::pin(futures::stream::unfold(state, |mut s| async move {
        loop {
            if s.done {
                return None;
            }
            if let Some(event) = s.pending.pop_front() {
                s.last = event.revision();
                return Some((Ok(event), s));
            }
            if let Some(replay) = s.replay.as_mut() {
                match replay.next_chunk(s.last).await {
                    Ok(chunk) if chunk.is_empty() => s.replay = None,
                    Ok(chunk) => s.pending.extend(chunk),
                    Err(error) => {
                        s.done = true;
                        return Some((Err(error), s));
                    }
                }
                continue;
            }
            match s.subscription.rx.recv().await {
                Some(Ok(batch)) => {
                    let (last, prefix) = (s.last, &s.prefix);
                    s.pending.extend(
                        batch
                            .iter()
                            .filter(|e| {
                                e.revision() > last && e.kv.key.starts_with(prefix.as_str())
                            })
                            .cloned(),
                    );
                }
                Some(Err(error)) => {
                    s.done = true;
                    return Some((Err(error), s));
                }
                None => {
                    s.done = true;
                    let error = if s.subscription.lagged.load(Ordering::Acquire) {
                        StoreError::WatchLagged {
                            last_revision: s.last,
                        }
                    } else {
                        StoreError::Closed
                    };
                    return Some((Err(error), s));
                }
            }
        }
    }))
}

/// Fans committed batches out to in-process watchers (the SQLite backend's watch source).
pub(crate) struct Hub {
    inner: Mutex<HubInner>,
    capacity: usize,
}

struct HubInner {
    /// The revision of the last batch published; every watcher registered now receives exactly
    /// the batches after it.
    published: Revision,
    watchers: Vec<(String, Feed)>,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.lock();
        f.debug_struct("Hub")
            .field("published", &inner.published)
            .field("watchers", &inner.watchers.len())
            .finish()
    }
}

impl Hub {
    /// A hub whose history so far ends at `published`; each watcher buffers `capacity` batches.
    pub(crate) fn new(published: Revision, capacity: usize) -> Self {
        Hub {
            inner: Mutex::new(HubInner {
                published,
                watchers: Vec::new(),
            }),
            capacity,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HubInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a watcher of `prefix`. Returns the revision of the last published batch: the
    /// subscription receives every batch after it.
    pub(crate) fn subscribe(&self, prefix: &str) -> (Revision, Subscription) {
        let (feed, subscription) = channel(self.capacity);
        let mut inner = self.lock();
        inner.watchers.push((prefix.to_owned(), feed));
        (inner.published, subscription)
    }

    /// Hands a committed batch (in revision order) to the watchers it concerns.
    pub(crate) fn publish(&self, events: Vec<WatchEvent>) {
        let Some(revision) = events.last().map(WatchEvent::revision) else {
            return;
        };
        let batch: Batch = events.into();
        let mut inner = self.lock();
        inner.watchers.retain(|(prefix, feed)| {
            if batch.iter().any(|e| e.kv.key.starts_with(prefix.as_str())) {
                feed.offer(&batch)
            } else {
                !feed.is_closed()
            }
        });
        inner.published = revision;
    }

    /// The number of registered watchers (for tests and metrics).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn watcher_count(&self) -> usize {
        self.lock().watchers.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EventKind, KeyValue};
    use futures::StreamExt;

    fn put(key: &str, revision: Revision) -> WatchEvent {
        WatchEvent {
            kind: EventKind::Put,
            kv: KeyValue {
                key: key.into(),
                value: bytes::Bytes::from_static(b"v"),
                create_revision: revision,
                mod_revision: revision,
            },
            prev: None,
        }
    }

    #[tokio::test]
    async fn a_watcher_sees_only_its_prefix_and_nothing_twice() {
        let hub = Hub::new(0, 8);
        let (published, sub) = hub.subscribe("/a/");
        let mut events = stream("/a/".into(), published, None, sub);
        hub.publish(vec![put("/a/1", 1), put("/b/1", 2)]);
        hub.publish(vec![put("/a/2", 3)]);
        let first = events.next().await.map(|e| e.map(|e| e.revision()).ok());
        let second = events.next().await.map(|e| e.map(|e| e.revision()).ok());
        assert_eq!((first, second), (Some(Some(1)), Some(Some(3))));
    }

    #[tokio::test]
    async fn a_full_buffer_cuts_the_watcher_off_with_its_last_revision() {
        let hub = Hub::new(0, 2);
        let (_, sub) = hub.subscribe("/");
        let mut events = stream("/".into(), 0, None, sub);
        for revision in 1..=5 {
            hub.publish(vec![put("/k", revision)]);
        }
        assert_eq!(hub.watcher_count(), 0, "the lagging watcher is dropped");
        let mut seen = Vec::new();
        let error = loop {
            match events.next().await {
                Some(Ok(event)) => seen.push(event.revision()),
                Some(Err(error)) => break error,
                None => panic!("stream ended without an error"),
            }
        };
        assert_eq!(seen, vec![1, 2]);
        assert!(
            matches!(error, StoreError::WatchLagged { last_revision: 2 }),
            "{error:?}"
        );
        assert!(events.next().await.is_none());
    }
}

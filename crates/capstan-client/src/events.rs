//! An event recorder for components (upstream's `record.EventRecorder` in spirit): `core/v1`
//! Events about an object, written in the background so the caller never waits.
//!
//! Before an event is written it passes a correlator with upstream client-go's three stages and
//! defaults, so that a controller stuck in a hot loop cannot flood the store:
//! - **aggregation**: when more than ten events of one source about one object share type and
//!   reason but differ in message within ten minutes, the rest are folded into one event whose
//!   message reads `(combined from similar events): <latest message>`;
//! - **counting**: an event identical to one already written (same source, object, type, reason
//!   and message) bumps that event's `count` and `lastTimestamp` instead of creating another;
//! - **spam filtering**: each source may write 25 events about one object at once, refilled at
//!   one every five minutes; the rest are dropped.
//!
//! When the API cannot keep up, events are dropped rather than queued without bound (upstream
//! drops too).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hashlink::LruCache;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// How many events may wait to be written.
const QUEUE: usize = 1000;

/// A reference to `object` for an event's `involvedObject` (upstream's `reference.GetReference`):
/// its kind and version, name, namespace, uid and resourceVersion.
pub fn object_reference<K: kube::Resource<DynamicType = ()>>(object: &K) -> ObjectReference {
    let meta = object.meta();
    ObjectReference {
        api_version: Some(K::api_version(&()).into_owned()),
        kind: Some(K::kind(&()).into_owned()),
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        ..ObjectReference::default()
    }
}
/// How many are written at once.
const WRITERS: usize = 8;
/// How many keys each correlator stage remembers (least recently used ones are forgotten).
const REMEMBERED: usize = 4096;
/// How many distinct messages of one kind of event are kept before they are combined.
const AGGREGATE_MAX_EVENTS: usize = 10;
/// How long a group of similar events stays open after the last one.
const AGGREGATE_INTERVAL: Duration = Duration::from_secs(600);
/// How many events a source may write about one object at once.
const SPAM_BURST: f64 = 25.0;
/// How fast that allowance refills (one event per five minutes).
const SPAM_REFILL_PER_SEC: f64 = 1.0 / 300.0;
/// The prefix of a combined event's message.
const COMBINED: &str = "(combined from similar events): ";

/// An event's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// Something expected happened.
    Normal,
    /// Something went wrong.
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

#[derive(Debug)]
struct Pending {
    object: ObjectReference,
    kind: EventType,
    reason: String,
    message: String,
}

/// The recorder handle; cheap to clone.
#[derive(Clone)]
pub struct EventRecorder {
    inner: Arc<Recorder>,
}

struct Recorder {
    component: String,
    instance: String,
    /// The `source.host` of its events (a node agent's node).
    host: Option<String>,
    correlator: Mutex<Correlator>,
    /// One queue per writer; an event always goes to the same writer, so the writes of one
    /// event (its creation, then its count bumps) stay in order.
    writers: Vec<mpsc::Sender<Action>>,
}

impl std::fmt::Debug for EventRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventRecorder")
            .field("component", &self.inner.component)
            .finish_non_exhaustive()
    }
}

impl EventRecorder {
    /// Starts a recorder writing as `component` (the `source.component` and
    /// `reportingComponent`) from `instance` (the `source.host`-like reporting instance). Must
    /// be called within a Tokio runtime.
    pub fn start(client: Client, component: &str, instance: &str) -> EventRecorder {
        Self::spawn(client, component, instance, None)
    }

    /// Starts a recorder for a component that runs on a node, as a kubelet does: its events
    /// name the node as their `source.host` and reporting instance.
    pub fn start_on_host(client: Client, component: &str, host: &str) -> EventRecorder {
        Self::spawn(client, component, host, Some(host))
    }

    fn spawn(client: Client, component: &str, instance: &str, host: Option<&str>) -> EventRecorder {
        let writers = (0..WRITERS)
            .map(|_| {
                let (tx, mut rx) = mpsc::channel::<Action>(QUEUE / WRITERS);
                let client = client.clone();
                tokio::spawn(async move {
                    while let Some(action) = rx.recv().await {
                        write(&client, action).await;
                    }
                });
                tx
            })
            .collect();
        EventRecorder {
            inner: Arc::new(Recorder {
                component: component.to_owned(),
                instance: instance.to_owned(),
                host: host.map(str::to_owned),
                correlator: Mutex::new(Correlator::new()),
                writers,
            }),
        }
    }

    /// Records an event about `object`; never waits (dropped when too many are pending).
    pub fn record(&self, object: ObjectReference, kind: EventType, reason: &str, message: String) {
        let inner = &self.inner;
        let pending = Pending {
            object,
            kind,
            reason: reason.to_owned(),
            message,
        };
        let event = new_event(
            &inner.component,
            &inner.instance,
            inner.host.as_deref(),
            pending,
        );
        let action = inner
            .correlator
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .correlate(event, Instant::now());
        let name = match &action {
            Action::Skip => {
                tracing::debug!(
                    reason,
                    "event dropped: its source wrote too many about the object"
                );
                return;
            }
            Action::Create(event) | Action::Patch { event, .. } => {
                event.metadata.name.clone().unwrap_or_default()
            }
        };
        let shard = {
            use std::hash::{Hash, Hasher};
            let mut hasher = std::hash::DefaultHasher::new();
            name.hash(&mut hasher);
            (hasher.finish() % inner.writers.len() as u64) as usize
        };
        if inner.writers[shard].try_send(action).is_err() {
            tracing::debug!(reason, "event dropped: too many pending");
        }
    }
}

/// The current time as the API writes event and condition timestamps (whole seconds).
pub fn now() -> Time {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default();
    Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap_or_default())
}

/// Upstream names events `<object>.<hex nanoseconds>`.
fn event_name(object: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("{object}.{nanos:x}")
}

/// The event as first written, before correlation.
fn new_event(component: &str, instance: &str, host: Option<&str>, pending: Pending) -> Event {
    let namespace = pending
        .object
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".to_owned());
    let timestamp = now();
    Event {
        metadata: ObjectMeta {
            name: Some(event_name(
                pending.object.name.as_deref().unwrap_or("object"),
            )),
            namespace: Some(namespace),
            ..ObjectMeta::default()
        },
        involved_object: pending.object,
        reason: Some(pending.reason),
        message: Some(pending.message),
        type_: Some(pending.kind.as_str().to_owned()),
        source: Some(EventSource {
            component: Some(component.to_owned()),
            host: host.map(str::to_owned),
        }),
        first_timestamp: Some(timestamp.clone()),
        last_timestamp: Some(timestamp),
        count: Some(1),
        reporting_component: Some(component.to_owned()),
        reporting_instance: Some(instance.to_owned()),
        ..Event::default()
    }
}

/// What to do with an event after correlation.
#[derive(Debug)]
enum Action {
    /// Write it as a new object.
    Create(Event),
    /// Bump the existing event of that name (the event is the whole new state, used to create
    /// it again should it have been deleted meanwhile).
    Patch { patch: Value, event: Event },
    /// Drop it: its source wrote too many about the object.
    Skip,
}

/// A token bucket of the spam filter.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// The messages seen recently for one (source, object, type, reason).
#[derive(Debug, Default)]
struct Group {
    messages: HashSet<String>,
    last: Option<Instant>,
}

/// What was written for one correlation key.
#[derive(Debug, Clone)]
struct Observed {
    name: String,
    count: i32,
    first: Option<Time>,
}

/// Upstream's `EventCorrelator`: aggregation, counting and spam filtering with its defaults.
struct Correlator {
    groups: LruCache<String, Group>,
    observed: LruCache<String, Observed>,
    buckets: LruCache<String, Bucket>,
}

fn join(parts: &[&str]) -> String {
    parts.join("\u{0}")
}

fn involved_key(event: &Event) -> [&str; 7] {
    let source = event.source.as_ref();
    let object = &event.involved_object;
    [
        source.and_then(|s| s.component.as_deref()).unwrap_or(""),
        source.and_then(|s| s.host.as_deref()).unwrap_or(""),
        object.kind.as_deref().unwrap_or(""),
        object.namespace.as_deref().unwrap_or(""),
        object.name.as_deref().unwrap_or(""),
        object.uid.as_deref().unwrap_or(""),
        object.api_version.as_deref().unwrap_or(""),
    ]
}

/// Source and object: what the spam filter rates.
fn spam_key(event: &Event) -> String {
    join(&involved_key(event))
}

/// Source, object, type and reason (and reporter): what aggregation groups by.
fn aggregate_key(event: &Event) -> String {
    let mut parts = involved_key(event).to_vec();
    parts.extend([
        event.type_.as_deref().unwrap_or(""),
        event.reason.as_deref().unwrap_or(""),
        event.reporting_component.as_deref().unwrap_or(""),
        event.reporting_instance.as_deref().unwrap_or(""),
    ]);
    join(&parts)
}

/// Everything that makes two events the same: what counting folds.
fn event_key(event: &Event) -> String {
    let mut parts = involved_key(event).to_vec();
    parts.extend([
        event.involved_object.field_path.as_deref().unwrap_or(""),
        event.type_.as_deref().unwrap_or(""),
        event.reason.as_deref().unwrap_or(""),
        event.message.as_deref().unwrap_or(""),
    ]);
    join(&parts)
}

impl Correlator {
    fn new() -> Correlator {
        Correlator {
            groups: LruCache::new(REMEMBERED),
            observed: LruCache::new(REMEMBERED),
            buckets: LruCache::new(REMEMBERED),
        }
    }

    /// Decides what becomes of `event`, observed at `now`.
    fn correlate(&mut self, event: Event, now: Instant) -> Action {
        let (mut event, key) = self.aggregate(event, now);
        let patch = self.count(&mut event, key);
        if !self.allow(&event, now) {
            return Action::Skip;
        }
        match patch {
            Some(patch) => Action::Patch { patch, event },
            None => Action::Create(event),
        }
    }

    /// The aggregation stage: the event to record and the key it is counted under.
    fn aggregate(&mut self, event: Event, now: Instant) -> (Event, String) {
        let group_key = aggregate_key(&event);
        let mut group = self.groups.remove(&group_key).unwrap_or_default();
        if group
            .last
            .is_none_or(|last| now.duration_since(last) > AGGREGATE_INTERVAL)
        {
            group = Group::default();
        }
        group
            .messages
            .insert(event.message.clone().unwrap_or_default());
        group.last = Some(now);
        let combine = group.messages.len() >= AGGREGATE_MAX_EVENTS;
        if combine {
            // Keep the set from growing past the threshold.
            if let Some(any) = group.messages.iter().next().cloned() {
                group.messages.remove(&any);
            }
        }
        self.groups.insert(group_key.clone(), group);
        if !combine {
            let key = event_key(&event);
            return (event, key);
        }
        let timestamp = event.last_timestamp.clone();
        let combined = Event {
            metadata: ObjectMeta {
                name: Some(event_name(
                    event.involved_object.name.as_deref().unwrap_or("object"),
                )),
                namespace: event.metadata.namespace.clone(),
                ..ObjectMeta::default()
            },
            message: Some(format!(
                "{COMBINED}{}",
                event.message.as_deref().unwrap_or("")
            )),
            count: Some(1),
            first_timestamp: timestamp.clone(),
            last_timestamp: timestamp,
            ..event
        };
        (combined, group_key)
    }

    /// The counting stage: a repeat takes the earlier event's name and first timestamp and a
    /// count one higher, and is written as a patch.
    fn count(&mut self, event: &mut Event, key: String) -> Option<Value> {
        let previous = self.observed.get(&key).cloned();
        let patch = previous.map(|previous| {
            event.metadata.name = Some(previous.name);
            event.first_timestamp = previous.first;
            event.count = Some(previous.count.saturating_add(1));
            json!({
                "count": event.count,
                "lastTimestamp": event.last_timestamp,
                "message": event.message,
            })
        });
        self.observed.insert(
            key,
            Observed {
                name: event.metadata.name.clone().unwrap_or_default(),
                count: event.count.unwrap_or(1),
                first: event.first_timestamp.clone(),
            },
        );
        patch
    }

    /// The spam filter: whether the source still has allowance for the object.
    fn allow(&mut self, event: &Event, now: Instant) -> bool {
        let key = spam_key(event);
        let mut bucket = self.buckets.remove(&key).unwrap_or(Bucket {
            tokens: SPAM_BURST,
            at: now,
        });
        let refill = now.saturating_duration_since(bucket.at).as_secs_f64() * SPAM_REFILL_PER_SEC;
        bucket.tokens = (bucket.tokens + refill).min(SPAM_BURST);
        bucket.at = now;
        let allowed = bucket.tokens >= 1.0;
        if allowed {
            bucket.tokens -= 1.0;
        }
        self.buckets.insert(key, bucket);
        allowed
    }
}

async fn write(client: &Client, action: Action) {
    let (event, patch) = match action {
        Action::Skip => return,
        Action::Create(event) => (event, None),
        Action::Patch { patch, event } => (event, Some(patch)),
    };
    let namespace = event.metadata.namespace.clone().unwrap_or_default();
    let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
    if let (Some(patch), Some(name)) = (patch, event.metadata.name.as_deref()) {
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return,
            // Deleted meanwhile (or expired): write it again, as upstream does.
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => {
                tracing::debug!(error = %e, "could not update event");
                return;
            }
        }
    }
    if let Err(e) = api.create(&PostParams::default(), &event).await {
        tracing::debug!(error = %e, "could not write event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: &str, reason: &str, message: &str) -> Event {
        new_event(
            "test-controller",
            "here",
            None,
            Pending {
                object: ObjectReference {
                    kind: Some("ReplicaSet".into()),
                    namespace: Some("ns".into()),
                    name: Some(name.into()),
                    uid: Some(format!("uid-{name}")),
                    api_version: Some("apps/v1".into()),
                    ..ObjectReference::default()
                },
                kind: EventType::Normal,
                reason: reason.into(),
                message: message.into(),
            },
        )
    }

    fn created(action: Action) -> Event {
        match action {
            Action::Create(event) => event,
            other => panic!("expected a create, got {other:?}"),
        }
    }

    #[test]
    fn event_names_follow_the_object() {
        let name = event_name("web-1");
        let (object, suffix) = name.rsplit_once('.').unwrap_or_default();
        assert_eq!(object, "web-1");
        assert!(u128::from_str_radix(suffix, 16).is_ok());
    }

    #[test]
    fn identical_events_are_counted_on_the_first_one() {
        let mut correlator = Correlator::new();
        let t = Instant::now();
        let first = created(correlator.correlate(event("rs", "SuccessfulCreate", "m"), t));
        for n in 2..=4 {
            match correlator.correlate(event("rs", "SuccessfulCreate", "m"), t) {
                Action::Patch { patch, event } => {
                    assert_eq!(event.metadata.name, first.metadata.name);
                    assert_eq!(event.first_timestamp, first.first_timestamp);
                    assert_eq!(patch["count"], n);
                    assert_eq!(patch["message"], "m");
                }
                other => panic!("expected a patch, got {other:?}"),
            }
        }
        // Another object, or another reason, is another event.
        created(correlator.correlate(event("other", "SuccessfulCreate", "m"), t));
        created(correlator.correlate(event("rs", "SuccessfulDelete", "m"), t));
    }

    #[test]
    fn similar_events_are_combined_after_ten_messages() {
        let mut correlator = Correlator::new();
        let t = Instant::now();
        for i in 0..9 {
            let event = created(correlator.correlate(event("rs", "R", &format!("m{i}")), t));
            assert_eq!(event.message.as_deref(), Some(format!("m{i}").as_str()));
        }
        // The tenth distinct message starts the combined event; later ones count on it.
        let combined = created(correlator.correlate(event("rs", "R", "m9"), t));
        assert_eq!(
            combined.message.as_deref(),
            Some("(combined from similar events): m9")
        );
        assert_eq!(combined.reason.as_deref(), Some("R"));
        match correlator.correlate(event("rs", "R", "m10"), t) {
            Action::Patch { patch, event } => {
                assert_eq!(event.metadata.name, combined.metadata.name);
                assert_eq!(patch["count"], 2);
                assert_eq!(patch["message"], "(combined from similar events): m10");
            }
            other => panic!("expected a patch, got {other:?}"),
        }
        // Another reason about the same object is not combined.
        let other = created(correlator.correlate(event("rs", "Other", "x"), t));
        assert_eq!(other.message.as_deref(), Some("x"));
        // Ten minutes of quiet close the group.
        let later = t + AGGREGATE_INTERVAL + Duration::from_secs(1);
        let fresh = created(correlator.correlate(event("rs", "R", "m11"), later));
        assert_eq!(fresh.message.as_deref(), Some("m11"));
    }

    #[test]
    fn a_source_may_burst_25_events_about_an_object_then_one_per_five_minutes() {
        let mut correlator = Correlator::new();
        let t = Instant::now();
        let mut written = 0;
        for i in 0..40 {
            // Distinct reasons, so that neither counting nor aggregation folds them.
            match correlator.correlate(event("rs", &format!("R{i}"), "m"), t) {
                Action::Skip => {}
                _ => written += 1,
            }
        }
        assert_eq!(written, 25);
        // Another object has its own allowance.
        assert!(!matches!(
            correlator.correlate(event("other", "R", "m"), t),
            Action::Skip
        ));
        // One more after five minutes, not two.
        let later = t + Duration::from_secs(300);
        assert!(!matches!(
            correlator.correlate(event("rs", "Late1", "m"), later),
            Action::Skip
        ));
        assert!(matches!(
            correlator.correlate(event("rs", "Late2", "m"), later),
            Action::Skip
        ));
    }

    #[test]
    fn a_skipped_repeat_still_counts_toward_the_next_write() {
        let mut correlator = Correlator::new();
        let t = Instant::now();
        for i in 0..24 {
            created(correlator.correlate(event("rs", &format!("R{i}"), "m"), t));
        }
        created(correlator.correlate(event("rs", "Hot", "m"), t));
        // The allowance is spent: repeats are dropped but still counted.
        assert!(matches!(
            correlator.correlate(event("rs", "Hot", "m"), t),
            Action::Skip
        ));
        let later = t + Duration::from_secs(300);
        match correlator.correlate(event("rs", "Hot", "m"), later) {
            Action::Patch { patch, .. } => assert_eq!(patch["count"], 3),
            other => panic!("expected a patch, got {other:?}"),
        }
    }
}

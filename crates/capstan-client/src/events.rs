//! An event recorder for components (upstream's `record.EventRecorder` in spirit): `core/v1`
//! Events about an object, written in the background so the caller never waits, with
//! repeats of the same event (object, type, reason, message) folded into one object whose
//! `count` and `lastTimestamp` grow, as upstream's correlator does. When the API cannot keep
//! up, events are dropped rather than queued without bound (upstream drops too).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::mpsc;

/// How many events may wait to be written.
const QUEUE: usize = 1000;
/// How many are written at once.
const WRITERS: usize = 8;
/// How many distinct recent events are remembered for folding repeats.
const REMEMBERED: usize = 4096;

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

/// What was last written for one (object, type, reason, message).
#[derive(Debug, Clone)]
struct Written {
    name: String,
    count: i32,
}

/// The recorder handle; cheap to clone.
#[derive(Debug, Clone)]
pub struct EventRecorder {
    tx: mpsc::Sender<Pending>,
}

type Key = (String, String, String, &'static str, String, String);

impl EventRecorder {
    /// Starts a recorder writing as `component` (the `source.component` and
    /// `reportingComponent`) from `instance` (the `source.host`-like reporting instance). Must
    /// be called within a Tokio runtime.
    pub fn start(client: Client, component: &str, instance: &str) -> EventRecorder {
        let (tx, rx) = mpsc::channel::<Pending>(QUEUE);
        let rx = Arc::new(tokio::sync::Mutex::new(rx));
        let seen: Arc<Mutex<HashMap<Key, Written>>> = Arc::default();
        for _ in 0..WRITERS {
            let rx = rx.clone();
            let seen = seen.clone();
            let client = client.clone();
            let component = component.to_owned();
            let instance = instance.to_owned();
            tokio::spawn(async move {
                loop {
                    let next = rx.lock().await.recv().await;
                    let Some(pending) = next else { return };
                    write(&client, &component, &instance, &seen, pending).await;
                }
            });
        }
        EventRecorder { tx }
    }

    /// Records an event about `object`; never waits (dropped when too many are pending).
    pub fn record(&self, object: ObjectReference, kind: EventType, reason: &str, message: String) {
        let pending = Pending {
            object,
            kind,
            reason: reason.to_owned(),
            message,
        };
        if self.tx.try_send(pending).is_err() {
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

async fn write(
    client: &Client,
    component: &str,
    instance: &str,
    seen: &Mutex<HashMap<Key, Written>>,
    pending: Pending,
) {
    let namespace = pending
        .object
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".to_owned());
    let key: Key = (
        namespace.clone(),
        pending.object.name.clone().unwrap_or_default(),
        pending.object.uid.clone().unwrap_or_default(),
        pending.kind.as_str(),
        pending.reason.clone(),
        pending.message.clone(),
    );
    let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
    let timestamp = now();
    let previous = seen.lock().ok().and_then(|s| s.get(&key).cloned());
    if let Some(previous) = previous {
        // A repeat: bump the existing event.
        let count = previous.count + 1;
        let patch = json!({"count": count, "lastTimestamp": timestamp});
        if api
            .patch(
                &previous.name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .is_ok()
        {
            if let Ok(mut s) = seen.lock() {
                s.insert(key, Written { count, ..previous });
            }
            return;
        }
    }
    let name = event_name(pending.object.name.as_deref().unwrap_or("object"));
    let event = Event {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace),
            ..ObjectMeta::default()
        },
        involved_object: pending.object,
        reason: Some(pending.reason),
        message: Some(pending.message),
        type_: Some(pending.kind.as_str().to_owned()),
        source: Some(EventSource {
            component: Some(component.to_owned()),
            host: None,
        }),
        first_timestamp: Some(timestamp.clone()),
        last_timestamp: Some(timestamp.clone()),
        count: Some(1),
        reporting_component: Some(component.to_owned()),
        reporting_instance: Some(instance.to_owned()),
        ..Event::default()
    };
    match api.create(&PostParams::default(), &event).await {
        Ok(_) => {
            if let Ok(mut s) = seen.lock() {
                if s.len() >= REMEMBERED {
                    s.clear();
                }
                s.insert(key, Written { name, count: 1 });
            }
        }
        Err(e) => tracing::debug!(error = %e, "could not write event"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_names_follow_the_object() {
        let name = event_name("web-1");
        let (object, suffix) = name.rsplit_once('.').unwrap_or_default();
        assert_eq!(object, "web-1");
        assert!(u128::from_str_radix(suffix, 16).is_ok());
    }
}

//! Events between `events.k8s.io/v1` and the hub, core `v1`: upstream stores one Event
//! resource and serves it in both shapes (`pkg/apis/events/v1/conversion.go`). The newer API
//! renames what the core one calls `involvedObject` (`regarding`), `message` (`note`),
//! `reportingComponent` (`reportingController`), `source`, `firstTimestamp`, `lastTimestamp` and
//! `count` (each `deprecated...`); everything else is the same field.

use k8s_openapi::api::core::v1::{Event as CoreEvent, EventSeries as CoreSeries};
use k8s_openapi::api::events::v1::{Event, EventSeries};
use serde_json::Value;

/// An events.k8s.io/v1 Event in its core/v1 form.
pub fn to_core(event: &Event) -> CoreEvent {
    CoreEvent {
        metadata: event.metadata.clone(),
        involved_object: event.regarding.clone().unwrap_or_default(),
        reporting_component: event.reporting_controller.clone(),
        reporting_instance: event.reporting_instance.clone(),
        action: event.action.clone(),
        reason: event.reason.clone(),
        message: event.note.clone(),
        type_: event.type_.clone(),
        event_time: event.event_time.clone(),
        count: event.deprecated_count,
        first_timestamp: event.deprecated_first_timestamp.clone(),
        last_timestamp: event.deprecated_last_timestamp.clone(),
        source: event.deprecated_source.clone(),
        related: event.related.clone(),
        series: event.series.as_ref().map(|s| CoreSeries {
            count: Some(s.count),
            last_observed_time: Some(s.last_observed_time.clone()),
        }),
    }
}

/// A core/v1 Event in its events.k8s.io/v1 form.
pub fn from_core(event: &CoreEvent) -> Event {
    Event {
        metadata: event.metadata.clone(),
        // Upstream's field is a struct, always written.
        regarding: Some(event.involved_object.clone()),
        reporting_controller: event.reporting_component.clone(),
        reporting_instance: event.reporting_instance.clone(),
        action: event.action.clone(),
        reason: event.reason.clone(),
        note: event.message.clone(),
        type_: event.type_.clone(),
        // Go writes a zero MicroTime as null: the field is always there.
        event_time: event.event_time.clone(),
        deprecated_count: event.count,
        deprecated_first_timestamp: event.first_timestamp.clone(),
        deprecated_last_timestamp: event.last_timestamp.clone(),
        deprecated_source: event.source.clone(),
        related: event.related.clone(),
        series: event.series.as_ref().and_then(|s| {
            Some(EventSeries {
                count: s.count.unwrap_or_default(),
                last_observed_time: s.last_observed_time.clone()?,
            })
        }),
    }
}

/// [`to_core`] on JSON: an events.k8s.io/v1 object (decoded as that version) to core/v1.
pub(super) fn v1_to_core(object: &Value) -> Result<Value, String> {
    let event: Event = serde_json::from_value(object.clone()).map_err(|e| e.to_string())?;
    let mut core = serde_json::to_value(to_core(&event)).map_err(|e| e.to_string())?;
    core["apiVersion"] = "v1".into();
    core["kind"] = "Event".into();
    Ok(core)
}

/// [`from_core`] on JSON.
pub(super) fn core_to_v1(object: &Value) -> Value {
    let Ok(core) = serde_json::from_value::<CoreEvent>(object.clone()) else {
        return object.clone();
    };
    let mut event = serde_json::to_value(from_core(&core)).unwrap_or_else(|_| object.clone());
    event["apiVersion"] = "events.k8s.io/v1".into();
    event["kind"] = "Event".into();
    event
}

/// How the field selectors of events.k8s.io/v1 name the core fields they select on (upstream's
/// `AddFieldLabelConversionsForEvent`); other labels are not supported there.
pub(super) const FIELD_LABELS: &[(&str, &str)] = &[
    ("reason", "reason"),
    ("regarding.kind", "involvedObject.kind"),
    ("regarding.namespace", "involvedObject.namespace"),
    ("regarding.name", "involvedObject.name"),
    ("regarding.uid", "involvedObject.uid"),
    ("regarding.apiVersion", "involvedObject.apiVersion"),
    (
        "regarding.resourceVersion",
        "involvedObject.resourceVersion",
    ),
    ("regarding.fieldPath", "involvedObject.fieldPath"),
    ("reportingController", "reportingComponent"),
    ("type", "type"),
];

/// The served names of [`FIELD_LABELS`].
pub(super) const FIELD_NAMES: &[&str] = &[
    "reason",
    "regarding.kind",
    "regarding.namespace",
    "regarding.name",
    "regarding.uid",
    "regarding.apiVersion",
    "regarding.resourceVersion",
    "regarding.fieldPath",
    "reportingController",
    "type",
];

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_two_shapes_convert_both_ways() {
        let v1 = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "e", "namespace": "ns"},
            "eventTime": "2026-11-27T08:00:00.000000Z",
            "regarding": {"kind": "Pod", "name": "p", "namespace": "ns"},
            "note": "hello", "reason": "Started", "type": "Normal", "action": "Start",
            "reportingController": "c", "reportingInstance": "i",
            "series": {"count": 2, "lastObservedTime": "2026-11-27T08:00:01.000000Z"},
            "deprecatedCount": 3});
        let core = v1_to_core(&v1).unwrap();
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["name"], "p");
        assert_eq!(core["message"], "hello");
        assert_eq!(core["reportingComponent"], "c");
        assert_eq!(core["count"], 3);
        assert_eq!(core["series"]["count"], 2);
        assert_eq!(core_to_v1(&core), v1);
    }
}

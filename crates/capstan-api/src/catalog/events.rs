//! `events.k8s.io/v1`: the core Events, served in the newer shape by conversion.

use k8s_openapi::api::events::v1::Event;

use super::{Resource, converted, of, printer, typed};
use crate::printers::core as p;
use crate::strategy::Hooks;
use crate::validation as v;

pub(super) static RESOURCES: &[Resource] = &[Resource {
    short_names: &["ev"],
    stored_as: Some("v1"),
    printer: printer(p::EVENT_COLUMNS, p::events_v1_event),
    // Validated by its own (stricter) rules, stored as a core Event.
    strategy: || {
        let served = typed::<Event>(Hooks {
            validate: v::misc::validate_events_v1_event,
            validate_update: v::misc::validate_events_v1_event_update,
            ..Hooks::creatable_by_put()
        });
        converted(served, super::core::event(), "events.k8s.io/v1", "Event")
    },
    ..of::<Event>("event")
}];

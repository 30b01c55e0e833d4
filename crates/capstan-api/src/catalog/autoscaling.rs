//! The `autoscaling` kinds: `v2` is stored, `v1` is served by conversion from it.

use std::sync::Arc;

use k8s_openapi::api::autoscaling::{v1, v2};

use super::{Resource, converted, of, printer, status, typed};
use crate::defaults as d;
use crate::printers::other as p;
use crate::strategy::{Hooks, Strategy};
use crate::validation as v;

pub(super) static RESOURCES: &[Resource] = &[
    Resource {
        short_names: &["hpa"],
        categories: &["all"],
        subresources: &[status("HorizontalPodAutoscaler")],
        printer: printer(p::HPA_COLUMNS, p::horizontal_pod_autoscaler),
        strategy: hpa_v2,
        ..of::<v2::HorizontalPodAutoscaler>("horizontalpodautoscaler")
    },
    Resource {
        short_names: &["hpa"],
        categories: &["all"],
        subresources: &[status("HorizontalPodAutoscaler")],
        stored_as: Some("autoscaling/v2"),
        printer: printer(p::HPA_COLUMNS, p::horizontal_pod_autoscaler),
        strategy: || {
            let served = typed::<v1::HorizontalPodAutoscaler>(Hooks {
                default: d::autoscaling::default_hpa_v1,
                ..Hooks::plain()
            });
            converted(
                served,
                hpa_v2(),
                "autoscaling/v1",
                "HorizontalPodAutoscaler",
            )
        },
        ..of::<v1::HorizontalPodAutoscaler>("horizontalpodautoscaler")
    },
];

fn hpa_v2() -> Arc<dyn Strategy> {
    typed::<v2::HorizontalPodAutoscaler>(Hooks {
        default: d::autoscaling::default_hpa_v2,
        validate: v::autoscaling::validate_horizontal_pod_autoscaler,
        validate_update: v::autoscaling::validate_horizontal_pod_autoscaler_update,
        validate_status_update: v::autoscaling::validate_horizontal_pod_autoscaler_status_update,
        prepare_create: |hpa| drop_tolerance(hpa, None),
        prepare_update: |hpa, old, subresource| match subresource {
            // Status written through the object of another version (whose status is partly in
            // annotations) stays the stored one, as upstream.
            None => {
                hpa.status.clone_from(&old.status);
                drop_tolerance(hpa, Some(old));
            }
            Some("status") => hpa.spec.clone_from(&old.spec),
            Some(_) => {}
        },
        ..Hooks::with_status()
    })
}

/// Drops scaling tolerances, behind the `HPAConfigurableTolerance` gate (alpha in 1.33, off),
/// unless the stored autoscaler already has one, as upstream drops disabled fields.
fn drop_tolerance(
    hpa: &mut v2::HorizontalPodAutoscaler,
    old: Option<&v2::HorizontalPodAutoscaler>,
) {
    let uses = |hpa: &v2::HorizontalPodAutoscaler| {
        hpa.spec
            .as_ref()
            .and_then(|s| s.behavior.as_ref())
            .is_some_and(|b| {
                [&b.scale_up, &b.scale_down]
                    .iter()
                    .any(|r| r.as_ref().is_some_and(|r| r.tolerance.is_some()))
            })
    };
    if old.is_some_and(uses) {
        return;
    }
    if let Some(behavior) = hpa.spec.as_mut().and_then(|s| s.behavior.as_mut()) {
        for rules in [&mut behavior.scale_up, &mut behavior.scale_down]
            .into_iter()
            .flatten()
        {
            rules.tolerance = None;
        }
    }
}

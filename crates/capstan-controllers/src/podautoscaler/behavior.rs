//! From a recommendation to the replica count to set (upstream's normalization in
//! `horizontal.go`), with what each autoscaler remembers between syncs: its recent
//! recommendations and, when it has a `behavior`, its recent scale changes.
//!
//! Without `behavior`, the highest recommendation of the last
//! `--horizontal-pod-autoscaler-downscale-stabilization` wins (scale-down stabilization only),
//! then the count is clamped to `minReplicas` and to the lesser of `maxReplicas` and twice the
//! current count (at least 4). With `behavior`, the recommendation is held between the lowest
//! recommendation of the scale-up window and the highest of the scale-down window, then limited
//! by the rules' policies (Pods or Percent per period, the largest or smallest change per
//! `selectPolicy`, none when `Disabled`) counted from the replicas at the start of each period,
//! and by `minReplicas`/`maxReplicas`. Each step reports upstream's `AbleToScale` and
//! `ScalingLimited` reasons and messages.

use std::collections::HashMap;

use k8s_openapi::api::autoscaling::v2::{
    HPAScalingPolicy, HPAScalingRules, HorizontalPodAutoscalerBehavior,
};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// Without a behavior, a scale-up goes at most to this factor of the current replicas ...
const SCALE_UP_LIMIT_FACTOR: f64 = 2.0;
/// ... or to this many, whichever is more.
const SCALE_UP_LIMIT_MINIMUM: f64 = 4.0;

/// A recommendation and when it was made.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Recommendation {
    replicas: i32,
    at: Timestamp,
}

/// A scale change (its size, never negative) and when it was made.
#[derive(Clone, Copy, Debug, PartialEq)]
struct ScaleEvent {
    change: i32,
    at: Timestamp,
    outdated: bool,
}

/// A condition's new state: its reason and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The condition's reason.
    pub reason: &'static str,
    /// Its message.
    pub message: String,
}

fn verdict(reason: &'static str, message: &str) -> Verdict {
    Verdict {
        reason,
        message: message.to_owned(),
    }
}

/// What normalization decided: the replica count, the `AbleToScale` verdict (its status is
/// always True here) and the `ScalingLimited` verdict with whether the count was limited.
#[derive(Clone, Debug, PartialEq)]
pub struct Normalized {
    /// The replica count to set.
    pub replicas: i32,
    /// `AbleToScale` (True): `ReadyForNewScale`, `ScaleUpStabilized` or `ScaleDownStabilized`.
    pub able: Verdict,
    /// Whether the count was limited (`ScalingLimited` True) and why.
    pub limited: bool,
    /// `ScalingLimited`'s reason and message.
    pub limit: Verdict,
}

/// What one autoscaler remembers between syncs.
#[derive(Debug, Default)]
pub struct History {
    recommendations: Vec<Recommendation>,
    scale_ups: Vec<ScaleEvent>,
    scale_downs: Vec<ScaleEvent>,
}

/// The arguments of a normalization.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// The target's replicas now.
    pub current: i32,
    /// `minReplicas` (1 when unset).
    pub min: i32,
    /// `maxReplicas`.
    pub max: i32,
}

fn seconds_before(at: Timestamp, seconds: i64) -> Timestamp {
    at.checked_sub(SignedDuration::from_secs(seconds))
        .unwrap_or(Timestamp::MIN)
}

impl History {
    /// Notes the target's current replicas as the first recommendation, once.
    pub fn record_initial(&mut self, current: i32, now: Timestamp) {
        if self.recommendations.is_empty() {
            self.recommendations.push(Recommendation {
                replicas: current,
                at: now,
            });
        }
    }

    /// Keeps `replicas` as the newest recommendation, in the place of one older than
    /// `stale_before` if there is one.
    fn remember(&mut self, stale: Option<usize>, replicas: i32, now: Timestamp) {
        let recommendation = Recommendation { replicas, at: now };
        match stale {
            Some(i) => self.recommendations[i] = recommendation,
            None => self.recommendations.push(recommendation),
        }
    }

    /// Normalization without a behavior (upstream's `normalizeDesiredReplicas`).
    pub fn normalize(
        &mut self,
        bounds: Bounds,
        desired: i32,
        downscale_window: SignedDuration,
        now: Timestamp,
    ) -> Normalized {
        let cutoff = now.checked_sub(downscale_window).unwrap_or(Timestamp::MIN);
        let mut highest = desired;
        let mut stale = None;
        for (i, r) in self.recommendations.iter().enumerate() {
            if r.at < cutoff {
                stale = Some(i);
            } else if r.replicas > highest {
                highest = r.replicas;
            }
        }
        self.remember(stale, desired, now);
        let able = if highest != desired {
            verdict(
                "ScaleDownStabilized",
                "recent recommendations were higher than current one, applying the highest recent recommendation",
            )
        } else {
            verdict("ReadyForNewScale", "recommended size matches current size")
        };
        let (replicas, limit) =
            limit_without_behavior(bounds.current, highest, bounds.min, bounds.max);
        Normalized {
            replicas,
            able,
            limited: replicas != highest,
            limit,
        }
    }

    /// Normalization with a behavior (upstream's `normalizeDesiredReplicasWithBehaviors`);
    /// a scale-down rule without a window takes `downscale_window`.
    pub fn normalize_with_behavior(
        &mut self,
        behavior: &HorizontalPodAutoscalerBehavior,
        bounds: Bounds,
        desired: i32,
        downscale_window: SignedDuration,
        now: Timestamp,
    ) -> Normalized {
        let up = behavior.scale_up.clone().unwrap_or_default();
        let down = behavior.scale_down.clone().unwrap_or_default();
        let up_window = i64::from(up.stabilization_window_seconds.unwrap_or(0));
        let down_window = down
            .stabilization_window_seconds
            .map_or(downscale_window.as_secs(), i64::from);

        // Stabilization: between the lowest recent recommendation of the scale-up window and
        // the highest of the scale-down window.
        let up_cutoff = seconds_before(now, up_window);
        let down_cutoff = seconds_before(now, down_window);
        let mut up_recommendation = desired;
        let mut down_recommendation = desired;
        let mut stale = None;
        for (i, r) in self.recommendations.iter().enumerate() {
            if r.at > up_cutoff {
                up_recommendation = up_recommendation.min(r.replicas);
            }
            if r.at > down_cutoff {
                down_recommendation = down_recommendation.max(r.replicas);
            }
            if r.at < up_cutoff && r.at < down_cutoff {
                stale = Some(i);
            }
        }
        let stabilized = bounds
            .current
            .max(up_recommendation)
            .min(down_recommendation);
        self.remember(stale, desired, now);
        let able = if stabilized == desired {
            verdict("ReadyForNewScale", "recommended size matches current size")
        } else if desired >= bounds.current {
            verdict(
                "ScaleUpStabilized",
                "recent recommendations were lower than current one, applying the lowest recent recommendation",
            )
        } else {
            verdict(
                "ScaleDownStabilized",
                "recent recommendations were higher than current one, applying the highest recent recommendation",
            )
        };

        // Rate limits.
        let (replicas, limit) = if stabilized > bounds.current {
            let mut ceiling =
                scale_up_limit(bounds.current, &self.scale_ups, &self.scale_downs, &up, now);
            ceiling = ceiling.max(bounds.current);
            let (allowed, limit) = if bounds.max > ceiling {
                (
                    ceiling,
                    verdict(
                        "ScaleUpLimit",
                        "the desired replica count is increasing faster than the maximum scale rate",
                    ),
                )
            } else {
                (
                    bounds.max,
                    verdict(
                        "TooManyReplicas",
                        "the desired replica count is more than the maximum replica count",
                    ),
                )
            };
            if stabilized > allowed {
                (allowed, limit)
            } else {
                (stabilized, within_range())
            }
        } else if stabilized < bounds.current {
            let mut floor = scale_down_limit(
                bounds.current,
                &self.scale_ups,
                &self.scale_downs,
                &down,
                now,
            );
            floor = floor.min(bounds.current);
            let (allowed, limit) = if bounds.min < floor {
                (
                    floor,
                    verdict(
                        "ScaleDownLimit",
                        "the desired replica count is decreasing faster than the maximum scale rate",
                    ),
                )
            } else {
                (
                    bounds.min,
                    verdict(
                        "TooFewReplicas",
                        "the desired replica count is less than the minimum replica count",
                    ),
                )
            };
            if stabilized < allowed {
                (allowed, limit)
            } else {
                (stabilized, within_range())
            }
        } else {
            (stabilized, within_range())
        };
        Normalized {
            replicas,
            able,
            limited: replicas != stabilized,
            limit,
        }
    }

    /// Notes a scale change made under `behavior` (upstream's `storeScaleEvent`), reusing the
    /// place of one older than every policy's period.
    pub fn record_scale(
        &mut self,
        behavior: Option<&HorizontalPodAutoscalerBehavior>,
        previous: i32,
        new: i32,
        now: Timestamp,
    ) {
        let Some(behavior) = behavior else {
            return;
        };
        let (events, rules, change) = if new > previous {
            (
                &mut self.scale_ups,
                behavior.scale_up.as_ref(),
                new - previous,
            )
        } else {
            (
                &mut self.scale_downs,
                behavior.scale_down.as_ref(),
                previous - new,
            )
        };
        let longest = rules
            .and_then(|r| r.policies.as_ref())
            .into_iter()
            .flatten()
            .map(|p| p.period_seconds)
            .max()
            .unwrap_or(0);
        let cutoff = seconds_before(now, i64::from(longest));
        let mut stale = None;
        for (i, event) in events.iter_mut().enumerate() {
            if event.at < cutoff {
                event.outdated = true;
            }
            if event.outdated {
                stale = Some(i);
            }
        }
        let event = ScaleEvent {
            change,
            at: now,
            outdated: false,
        };
        match stale {
            Some(i) => events[i] = event,
            None => events.push(event),
        }
    }
}

fn within_range() -> Verdict {
    verdict(
        "DesiredWithinRange",
        "the desired count is within the acceptable range",
    )
}

/// The clamps without a behavior (upstream's `convertDesiredReplicasWithRules`).
fn limit_without_behavior(current: i32, desired: i32, min: i32, max: i32) -> (i32, Verdict) {
    let scale_up_limit =
        (SCALE_UP_LIMIT_FACTOR * f64::from(current)).max(SCALE_UP_LIMIT_MINIMUM) as i32;
    let (ceiling, ceiling_verdict) = if max > scale_up_limit {
        (
            scale_up_limit,
            verdict(
                "ScaleUpLimit",
                "the desired replica count is increasing faster than the maximum scale rate",
            ),
        )
    } else {
        (
            max,
            verdict(
                "TooManyReplicas",
                "the desired replica count is more than the maximum replica count",
            ),
        )
    };
    if desired < min {
        (
            min,
            verdict(
                "TooFewReplicas",
                "the desired replica count is less than the minimum replica count",
            ),
        )
    } else if desired > ceiling {
        (ceiling, ceiling_verdict)
    } else {
        (desired, within_range())
    }
}

/// The replicas changed by `events` within the last `period_seconds`.
fn changed_within(events: &[ScaleEvent], period_seconds: i32, now: Timestamp) -> i32 {
    let cutoff = seconds_before(now, i64::from(period_seconds));
    events
        .iter()
        .filter(|e| e.at > cutoff)
        .map(|e| e.change)
        .sum()
}

fn policies(rules: &HPAScalingRules) -> &[HPAScalingPolicy] {
    rules.policies.as_deref().unwrap_or_default()
}

/// The most replicas the scale-up rules allow now (upstream's
/// `calculateScaleUpLimitWithScalingRules`).
fn scale_up_limit(
    current: i32,
    ups: &[ScaleEvent],
    downs: &[ScaleEvent],
    rules: &HPAScalingRules,
    now: Timestamp,
) -> i32 {
    let select = rules.select_policy.as_deref().unwrap_or("Max");
    if select == "Disabled" {
        return current;
    }
    let min_change = select == "Min";
    let mut result = if min_change { i32::MAX } else { i32::MIN };
    for policy in policies(rules) {
        let start = current - changed_within(ups, policy.period_seconds, now)
            + changed_within(downs, policy.period_seconds, now);
        let proposed = match policy.type_.as_str() {
            "Pods" => start.saturating_add(policy.value),
            "Percent" => (f64::from(start) * (1.0 + f64::from(policy.value) / 100.0)).ceil() as i32,
            _ => continue,
        };
        result = if min_change {
            result.min(proposed)
        } else {
            result.max(proposed)
        };
    }
    result
}

/// The fewest replicas the scale-down rules allow now (upstream's
/// `calculateScaleDownLimitWithBehaviors`).
fn scale_down_limit(
    current: i32,
    ups: &[ScaleEvent],
    downs: &[ScaleEvent],
    rules: &HPAScalingRules,
    now: Timestamp,
) -> i32 {
    let select = rules.select_policy.as_deref().unwrap_or("Max");
    if select == "Disabled" {
        return current;
    }
    let min_change = select == "Min";
    let mut result = if min_change { i32::MIN } else { i32::MAX };
    for policy in policies(rules) {
        let start = current - changed_within(ups, policy.period_seconds, now)
            + changed_within(downs, policy.period_seconds, now);
        let proposed = match policy.type_.as_str() {
            "Pods" => start.saturating_sub(policy.value),
            "Percent" => (f64::from(start) * (1.0 - f64::from(policy.value) / 100.0)) as i32,
            _ => continue,
        };
        result = if min_change {
            result.max(proposed)
        } else {
            result.min(proposed)
        };
    }
    result
}

/// Every autoscaler's history, by `namespace/name`.
pub type Histories = HashMap<String, History>;

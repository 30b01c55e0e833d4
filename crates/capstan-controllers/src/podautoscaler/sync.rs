//! One sync of one autoscaler (upstream's `reconcileAutoscaler` and
//! `computeReplicasForMetrics`): read the target's scale, compute a replica count from every
//! metric (the largest wins), normalize it, set it through the scale subresource, and work out
//! the new status with upstream's conditions and the events to record. Everything read or
//! written goes through [`Access`], so a sync runs the same against the API and a fake.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use capstan_api::quantity::Quantity as Parsed;
use capstan_api::selector::LabelSelector;
use capstan_client::events::EventType;
use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::autoscaling::v2::{
    ContainerResourceMetricStatus, CrossVersionObjectReference, ExternalMetricStatus,
    HorizontalPodAutoscaler, HorizontalPodAutoscalerCondition, HorizontalPodAutoscalerStatus,
    MetricIdentifier, MetricSpec, MetricStatus, MetricTarget, MetricValueStatus,
    ObjectMetricStatus, PodsMetricStatus, ResourceMetricStatus,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{self as metav1, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::behavior::{Bounds, History, Normalized};
use super::calculator::Calculator;
use super::metrics::{self, CustomValue, ExternalValue, PodMetricsInfo, RawPodMetrics};
use super::monitor::{self, Failed, ScaleAction};

/// A resource a kind is served as: what the scale subresource and the custom metrics API are
/// addressed by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The API group (empty for the core group).
    pub group: String,
    /// The version.
    pub version: String,
    /// The resource (plural) name.
    pub plural: String,
}

impl Target {
    /// `plural.group`, or `plural` in the core group (upstream's `GroupResource.String()`).
    pub fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

/// What a sync reads and writes. Errors are the API's own messages.
pub trait Access: Send + Sync {
    /// The resources `kind` of `group` is served as, the preferred version first (upstream's
    /// `RESTMappings`); an error when none is.
    fn resources(
        &self,
        group: &str,
        kind: &str,
    ) -> impl Future<Output = Result<Vec<Target>, String>> + Send;
    /// The scale subresource of `name`.
    fn get_scale(
        &self,
        target: &Target,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Scale, String>> + Send;
    /// Writes the scale subresource.
    fn update_scale(
        &self,
        target: &Target,
        namespace: &str,
        scale: &Scale,
    ) -> impl Future<Output = Result<(), String>> + Send;
    /// The PodMetrics of the pods `selector` picks in `namespace`.
    fn pod_metrics(
        &self,
        namespace: &str,
        selector: &str,
    ) -> impl Future<Output = Result<Vec<RawPodMetrics>, String>> + Send;
    /// The custom metric `metric` of the pods `selector` picks.
    fn pods_custom_metric(
        &self,
        namespace: &str,
        metric: &str,
        selector: &str,
        metric_selector: &str,
    ) -> impl Future<Output = Result<Vec<CustomValue>, String>> + Send;
    /// The custom metric `metric` of one object: `resource` (`plural.group`) `name`, or the
    /// namespace itself when `resource` is `None`.
    fn object_custom_metric(
        &self,
        namespace: &str,
        resource: Option<&str>,
        name: &str,
        metric: &str,
        metric_selector: &str,
    ) -> impl Future<Output = Result<Vec<CustomValue>, String>> + Send;
    /// The external metric `metric`.
    fn external_metric(
        &self,
        namespace: &str,
        metric: &str,
        metric_selector: &str,
    ) -> impl Future<Output = Result<Vec<ExternalValue>, String>> + Send;
}

/// An event to record about the autoscaler.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Normal or Warning.
    pub kind: EventType,
    /// Upstream's reason.
    pub reason: &'static str,
    /// Upstream's message.
    pub message: String,
}

/// What a sync decided.
#[derive(Debug)]
pub struct Outcome {
    /// The status the autoscaler should have.
    pub status: HorizontalPodAutoscalerStatus,
    /// Events to record, in order.
    pub events: Vec<Event>,
    /// Why the sync did not complete, when it did not (upstream's returned error).
    pub error: Option<String>,
    /// What the sync did to the target's replicas.
    pub action: ScaleAction,
    /// Whether the first failure was the spec's fault (a metric of an unknown type or without
    /// its source), for the reconciliation metrics' `error` label.
    pub spec_error: bool,
}

impl Outcome {
    /// How the sync failed, as the reconciliation metrics label it.
    pub fn failed(&self) -> Failed {
        match (&self.error, self.spec_error) {
            (None, _) => Failed::No,
            (Some(_), true) => Failed::Spec,
            (Some(_), false) => Failed::Internal,
        }
    }
}

/// The controller's tunables.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// How often each autoscaler is synced (`--horizontal-pod-autoscaler-sync-period`).
    pub sync_period: std::time::Duration,
    /// How far from 1 a usage ratio must be to act (`--horizontal-pod-autoscaler-tolerance`).
    pub tolerance: f64,
    /// The scale-down stabilization window of autoscalers without one of their own
    /// (`--horizontal-pod-autoscaler-downscale-stabilization`).
    pub downscale_stabilization: std::time::Duration,
    /// How long after a pod's start its CPU samples are suspect
    /// (`--horizontal-pod-autoscaler-cpu-initialization-period`).
    pub cpu_initialization_period: std::time::Duration,
    /// How long after its start a pod's readiness may change without having counted as ready
    /// (`--horizontal-pod-autoscaler-initial-readiness-delay`).
    pub initial_readiness_delay: std::time::Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            sync_period: std::time::Duration::from_secs(15),
            tolerance: 0.1,
            downscale_stabilization: std::time::Duration::from_secs(300),
            cpu_initialization_period: std::time::Duration::from_secs(300),
            initial_readiness_delay: std::time::Duration::from_secs(30),
        }
    }
}

impl Settings {
    /// Checks the values are usable.
    pub fn validate(&self) -> Result<(), String> {
        if !self.tolerance.is_finite() || self.tolerance < 0.0 {
            return Err(format!(
                "--horizontal-pod-autoscaler-tolerance must be a non-negative number, got {}",
                self.tolerance
            ));
        }
        if self.sync_period.is_zero() {
            return Err("--horizontal-pod-autoscaler-sync-period must be positive".into());
        }
        Ok(())
    }
}

fn signed(duration: std::time::Duration) -> SignedDuration {
    SignedDuration::try_from(duration).unwrap_or(SignedDuration::MAX)
}

/// The autoscalers' controller state: settings and what it remembers per autoscaler.
#[derive(Debug)]
pub struct Autoscaler {
    settings: Settings,
    calculator: Calculator,
    histories: Mutex<HashMap<String, History>>,
    /// The selector each autoscaler's target had at its last sync (upstream's `hpaSelectors`),
    /// for refusing pods two autoscalers claim.
    selectors: Mutex<HashMap<(String, String), LabelSelector>>,
}

/// The conditions of the status being built.
struct Conditions {
    list: Vec<HorizontalPodAutoscalerCondition>,
    now: Time,
}

impl Conditions {
    /// Sets condition `type_` (upstream's `setCondition`): the transition time moves only when
    /// the status changes.
    fn set(&mut self, type_: &str, status: bool, reason: &str, message: impl Into<String>) {
        let status = if status { "True" } else { "False" };
        let index = match self.list.iter().position(|c| c.type_ == type_) {
            Some(i) => i,
            None => {
                self.list.push(HorizontalPodAutoscalerCondition {
                    type_: type_.to_owned(),
                    ..Default::default()
                });
                self.list.len() - 1
            }
        };
        let condition = &mut self.list[index];
        if condition.status != status {
            condition.last_transition_time = Some(self.now.clone());
        }
        condition.status = status.to_owned();
        condition.reason = Some(reason.to_owned());
        condition.message = Some(message.into());
    }
}

/// A condition to set when every metric failed (the first failure's).
#[derive(Clone, Debug)]
struct Failure {
    reason: &'static str,
    message: String,
}

/// The work of one sync.
struct Run<'a, A: Access> {
    access: &'a A,
    hpa: &'a HorizontalPodAutoscaler,
    namespace: String,
    pods: &'a [Arc<Pod>],
    now: Timestamp,
    conditions: Conditions,
    events: Vec<Event>,
    /// The failure that ended the metrics' computation was the spec's.
    spec_error: bool,
}

impl<'a, A: Access> Run<'a, A> {
    fn event(&mut self, kind: EventType, reason: &'static str, message: impl Into<String>) {
        self.events.push(Event {
            kind,
            reason,
            message: message.into(),
        });
    }

    /// A failed metric's condition (upstream's `getUnableComputeReplicaCountCondition`), with
    /// its event.
    fn unable(&mut self, reason: &'static str, error: &str) -> Failure {
        self.event(EventType::Warning, reason, error);
        Failure {
            reason,
            message: format!("the HPA was unable to compute the replica count: {error}"),
        }
    }

    /// The pods of the namespace `selector` picks.
    fn selected(&self, selector: &LabelSelector) -> Vec<&'a Pod> {
        let pods: &'a [Arc<Pod>] = self.pods;
        pods.iter()
            .filter(|p| {
                p.metadata.namespace.as_deref() == Some(self.namespace.as_str())
                    && selector.matches(crate::pods::labels_of(&p.metadata))
            })
            .map(|p| &**p)
            .collect()
    }
}

/// `resource.NewMilliQuantity(value, DecimalSI)` as it serializes.
fn milli_quantity(value: i64) -> Quantity {
    Quantity(
        Parsed::parse(&format!("{value}m"))
            .map(|q| q.canonical())
            .unwrap_or_else(|_| format!("{value}m")),
    )
}

/// A quantity's milli value.
fn milli(quantity: &Quantity) -> Result<i64, String> {
    Parsed::parse(&quantity.0)
        .map(|q| q.milli_value())
        .map_err(|e| format!("quantities must match the regular expression: {e}"))
}

/// A `metav1.LabelSelector` as Go's `%+v` prints it (its generated `String()`).
pub fn go_selector(selector: Option<&metav1::LabelSelector>) -> String {
    let Some(selector) = selector else {
        return "nil".into();
    };
    let mut labels = String::from("map[string]string{");
    for (k, v) in selector.match_labels.iter().flatten() {
        let _ = write!(labels, "{k}: {v},");
    }
    labels.push('}');
    let mut expressions = String::from("[]LabelSelectorRequirement{");
    for e in selector.match_expressions.iter().flatten() {
        let _ = write!(
            expressions,
            "LabelSelectorRequirement{{Key:{},Operator:{},Values:[{}],}},",
            e.key,
            e.operator,
            e.values.clone().unwrap_or_default().join(" ")
        );
    }
    expressions.push('}');
    format!("&LabelSelector{{MatchLabels:{labels},MatchExpressions:{expressions},}}")
}

/// A metric's selector as a selector string (upstream's `LabelSelectorAsSelector`).
fn metric_selector(selector: Option<&metav1::LabelSelector>) -> Result<String, String> {
    LabelSelector::from_api(selector)
        .map(|s| s.to_string())
        .map_err(|e| e.to_string())
}

/// `group/version` split as upstream's `ParseGroupVersion`.
fn parse_group_version(api_version: &str) -> Result<(String, String), String> {
    if api_version.is_empty() || api_version == "/" {
        return Ok((String::new(), String::new()));
    }
    match api_version.split('/').collect::<Vec<_>>().as_slice() {
        [version] => Ok((String::new(), (*version).to_owned())),
        [group, version] => Ok(((*group).to_owned(), (*version).to_owned())),
        _ => Err(format!("unexpected GroupVersion string: {api_version}")),
    }
}

/// What one metric proposed.
struct Proposal {
    replicas: i32,
    name: String,
    status: MetricStatus,
}

impl Autoscaler {
    /// A controller state with `settings`.
    pub fn new(settings: Settings) -> Autoscaler {
        Autoscaler {
            calculator: Calculator {
                tolerance: settings.tolerance,
                cpu_initialization_period: signed(settings.cpu_initialization_period),
                initial_readiness_delay: signed(settings.initial_readiness_delay),
            },
            settings,
            histories: Mutex::new(HashMap::new()),
            selectors: Mutex::new(HashMap::new()),
        }
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Forgets a deleted autoscaler.
    pub fn forget(&self, namespace: &str, name: &str) {
        let key = format!("{namespace}/{name}");
        self.histories
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key);
        self.selectors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(namespace.to_owned(), name.to_owned()));
    }

    fn with_history<T>(&self, key: &str, f: impl FnOnce(&mut History) -> T) -> T {
        let mut histories = self.histories.lock().unwrap_or_else(|e| e.into_inner());
        f(histories.entry(key.to_owned()).or_default())
    }

    /// Syncs `hpa` at `now`, with `pods` the pods of its namespace (a cache's view).
    pub async fn sync<A: Access>(
        &self,
        access: &A,
        hpa: &HorizontalPodAutoscaler,
        pods: &[Arc<Pod>],
        now: Timestamp,
    ) -> Outcome {
        let namespace = hpa.metadata.namespace.clone().unwrap_or_default();
        let name = hpa.metadata.name.clone().unwrap_or_default();
        let key = format!("{namespace}/{name}");
        let original = hpa.status.clone().unwrap_or_default();
        let seconds = Timestamp::from_second(now.as_second()).unwrap_or(now);
        let mut run = Run {
            access,
            hpa,
            namespace: namespace.clone(),
            pods,
            now,
            conditions: Conditions {
                list: original.conditions.clone().unwrap_or_default(),
                now: Time(seconds),
            },
            events: Vec::new(),
            spec_error: false,
        };
        let spec = hpa.spec.clone().unwrap_or_default();
        let target_ref = &spec.scale_target_ref;
        let reference = format!("{}/{}/{}", target_ref.kind, namespace, target_ref.name);
        // The status as it stands, with the conditions built so far.
        let finish =
            |run: Run<'_, A>, status: HorizontalPodAutoscalerStatus, error: Option<String>| {
                let mut status = status;
                status.conditions = Some(run.conditions.list).filter(|c| !c.is_empty());
                Outcome {
                    status,
                    events: run.events,
                    error,
                    action: ScaleAction::None,
                    spec_error: run.spec_error,
                }
            };

        // The target's scale.
        let scale_failed = |mut run: Run<'_, A>, message: String, error: String| {
            run.event(EventType::Warning, "FailedGetScale", message.clone());
            run.conditions.set(
                "AbleToScale",
                false,
                "FailedGetScale",
                format!(
                    "the HPA controller was unable to get the target's current scale: {message}"
                ),
            );
            finish(run, original.clone(), Some(error))
        };
        let (group, _) =
            match parse_group_version(target_ref.api_version.as_deref().unwrap_or_default()) {
                Ok(gv) => gv,
                Err(e) => {
                    let error = format!("invalid API version in scale target reference: {e}");
                    return scale_failed(run, e, error);
                }
            };
        let targets = match access.resources(&group, &target_ref.kind).await {
            Ok(targets) if !targets.is_empty() => targets,
            Ok(_) => {
                let e = format!(
                    "no matches for kind {:?} in group {:?}",
                    target_ref.kind, group
                );
                let error = format!("unable to determine resource for scale target reference: {e}");
                return scale_failed(run, e, error);
            }
            Err(e) => {
                let error = format!("unable to determine resource for scale target reference: {e}");
                return scale_failed(run, e, error);
            }
        };
        let mut first_error = None;
        let mut found = None;
        for target in &targets {
            match access.get_scale(target, &namespace, &target_ref.name).await {
                Ok(scale) => {
                    found = Some((scale, target.clone()));
                    break;
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        let Some((mut scale, target)) = found else {
            let e = first_error.unwrap_or_else(|| "unrecognized resource".into());
            let error = format!("failed to query scale subresource for {reference}: {e}");
            return scale_failed(run, e, error);
        };
        run.conditions.set(
            "AbleToScale",
            true,
            "SucceededGetScale",
            "the HPA controller was able to get the target's current scale",
        );
        let current = scale.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
        self.with_history(&key, |h| h.record_initial(current, now));

        let min = spec.min_replicas.unwrap_or(1);
        let max = spec.max_replicas;
        let mut metric_statuses: Vec<MetricStatus> = Vec::new();
        let mut desired = 0;
        let mut rescale = true;
        let mut reason = String::new();
        let mut error = None;
        let current_status = |metrics: &[MetricStatus], desired: i32, last_scale: Option<Time>| {
            HorizontalPodAutoscalerStatus {
                current_replicas: (current != 0).then_some(current),
                desired_replicas: desired,
                current_metrics: Some(metrics.to_vec()).filter(|m| !m.is_empty()),
                last_scale_time: last_scale,
                conditions: None,
                observed_generation: None,
            }
        };
        if current == 0 && min != 0 {
            // A target scaled to zero is not autoscaled.
            desired = 0;
            rescale = false;
            run.conditions.set(
                "ScalingActive",
                false,
                "ScalingDisabled",
                "scaling is disabled since the replica count of the target is zero",
            );
        } else if current > max {
            reason = "Current number of replicas above Spec.MaxReplicas".into();
            desired = max;
        } else if current < min {
            reason = "Current number of replicas below Spec.MinReplicas".into();
            desired = min;
        } else {
            let computed = self.compute_replicas(&mut run, &name, &scale).await;
            metric_statuses = computed.statuses;
            if computed.replicas == -1 {
                let message = computed.error.unwrap_or_default();
                let status = current_status(
                    &metric_statuses,
                    original.desired_replicas,
                    original.last_scale_time.clone(),
                );
                run.event(
                    EventType::Warning,
                    "FailedComputeMetricsReplicas",
                    message.clone(),
                );
                let error = format!(
                    "failed to compute desired number of replicas based on listed metrics for {reference}: {message}"
                );
                return finish(run, status, Some(error));
            }
            error = computed.error;
            let mut rescale_metric = String::new();
            if computed.replicas > desired {
                desired = computed.replicas;
                rescale_metric = computed.metric;
            }
            if desired > current {
                reason = format!("{rescale_metric} above target");
            }
            if desired < current {
                reason = "All metrics below target".into();
            }
            let bounds = Bounds { current, min, max };
            let window = signed(self.settings.downscale_stabilization);
            let normalized: Normalized = self.with_history(&key, |h| match &spec.behavior {
                None => h.normalize(bounds, desired, window, now),
                Some(behavior) => h.normalize_with_behavior(behavior, bounds, desired, window, now),
            });
            run.conditions.set(
                "AbleToScale",
                true,
                normalized.able.reason,
                normalized.able.message,
            );
            run.conditions.set(
                "ScalingLimited",
                normalized.limited,
                normalized.limit.reason,
                normalized.limit.message,
            );
            desired = normalized.replicas;
            rescale = desired != current;
        }

        let mut last_scale = original.last_scale_time.clone();
        if rescale {
            scale.spec.get_or_insert_with(Default::default).replicas = Some(desired);
            if let Err(e) = access.update_scale(&target, &namespace, &scale).await {
                run.event(
                    EventType::Warning,
                    "FailedRescale",
                    format!("New size: {desired}; reason: {reason}; error: {e}"),
                );
                run.conditions.set(
                    "AbleToScale",
                    false,
                    "FailedUpdateScale",
                    format!("the HPA controller was unable to update the target scale: {e}"),
                );
                let status =
                    current_status(&metric_statuses, original.desired_replicas, last_scale);
                return finish(
                    run,
                    status,
                    Some(format!("failed to rescale {reference}: {e}")),
                );
            }
            run.conditions.set(
                "AbleToScale",
                true,
                "SucceededRescale",
                format!("the HPA controller was able to update the target scale to {desired}"),
            );
            run.event(
                EventType::Normal,
                "SuccessfulRescale",
                format!("New size: {desired}; reason: {reason}"),
            );
            self.with_history(&key, |h| {
                h.record_scale(spec.behavior.as_ref(), current, desired, now)
            });
            tracing::info!(hpa = %key, current, desired, reason, "successfully rescaled");
            last_scale = Some(Time(seconds));
        } else {
            desired = current;
        }
        let status = current_status(&metric_statuses, desired, last_scale);
        let mut outcome = finish(run, status, error);
        outcome.action = ScaleAction::between(current, desired);
        outcome
    }
}

/// Whether a metric's error is the autoscaler spec's fault (upstream's `errSpec`): a metric
/// of a type it does not know, or without the source its type names.
fn is_spec_error(error: &str) -> bool {
    error.starts_with("invalid metric source") || error.starts_with("unknown metric source type")
}

/// What the metrics proposed (upstream's `computeReplicasForMetrics`' results).
struct Computed {
    /// -1 when nothing can be done.
    replicas: i32,
    metric: String,
    statuses: Vec<MetricStatus>,
    error: Option<String>,
}

impl Autoscaler {
    /// The largest replica count any metric proposes; -1 when every metric failed, or some did
    /// and the others would scale down.
    async fn compute_replicas<A: Access>(
        &self,
        run: &mut Run<'_, A>,
        name: &str,
        scale: &Scale,
    ) -> Computed {
        let fail = |error: String| Computed {
            replicas: -1,
            metric: String::new(),
            statuses: Vec::new(),
            error: Some(error),
        };
        let selector_text = scale
            .status
            .as_ref()
            .and_then(|s| s.selector.clone())
            .unwrap_or_default();
        // The selector: present, valid, and not shared with another autoscaler.
        if selector_text.is_empty() {
            run.event(
                EventType::Warning,
                "SelectorRequired",
                "selector is required",
            );
            run.conditions.set(
                "ScalingActive",
                false,
                "InvalidSelector",
                "the HPA target's scale is missing a selector",
            );
            return fail("selector is required".into());
        }
        let selector = match LabelSelector::parse(&selector_text) {
            Ok(s) => s,
            Err(e) => {
                let message = format!(
                    "couldn't convert selector into a corresponding internal selector object: {e}"
                );
                run.event(EventType::Warning, "InvalidSelector", message.clone());
                run.conditions
                    .set("ScalingActive", false, "InvalidSelector", message.clone());
                return fail(message);
            }
        };
        let namespace = run.namespace.clone();
        let selected = run.selected(&selector);
        let claimants = {
            let mut selectors = self.selectors.lock().unwrap_or_else(|e| e.into_inner());
            selectors.insert((namespace.clone(), name.to_owned()), selector.clone());
            let mut claimants: Vec<String> = selectors
                .iter()
                .filter(|((ns, _), s)| {
                    *ns == namespace
                        && selected
                            .iter()
                            .any(|p| s.matches(crate::pods::labels_of(&p.metadata)))
                })
                .map(|((ns, n), _)| format!("{ns}/{n}"))
                .collect();
            claimants.sort();
            claimants
        };
        if claimants.len() > 1 {
            let message = format!(
                "pods by selector {selector_text} are controlled by multiple HPAs: [{}]",
                claimants.join(" ")
            );
            run.event(EventType::Warning, "AmbiguousSelector", message.clone());
            run.conditions
                .set("ScalingActive", false, "AmbiguousSelector", message.clone());
            return fail(message);
        }

        let spec_replicas = scale.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
        let status_replicas = scale.status.as_ref().map_or(0, |s| s.replicas);
        let mut specs = run
            .hpa
            .spec
            .as_ref()
            .and_then(|s| s.metrics.clone())
            .unwrap_or_default();
        if specs.is_empty() {
            // What the API server's defaulting gives an autoscaler without metrics.
            specs.push(MetricSpec {
                type_: "Resource".into(),
                resource: Some(k8s_openapi::api::autoscaling::v2::ResourceMetricSource {
                    name: "cpu".into(),
                    target: MetricTarget {
                        type_: "Utilization".into(),
                        average_utilization: Some(80),
                        ..Default::default()
                    },
                }),
                ..Default::default()
            });
        }
        let mut statuses = vec![MetricStatus::default(); specs.len()];
        let mut replicas = 0;
        let mut metric = String::new();
        let mut invalid = 0;
        let mut first: Option<(Failure, String)> = None;
        let current = run
            .hpa
            .status
            .as_ref()
            .and_then(|s| s.current_replicas)
            .unwrap_or(0);
        for (i, spec) in specs.iter().enumerate() {
            let began = Instant::now();
            let computed = self
                .compute_metric(
                    run,
                    spec,
                    spec_replicas,
                    status_replicas,
                    &selector,
                    &selected,
                )
                .await;
            let (action, failed) = match &computed {
                Ok(proposal) => (ScaleAction::between(current, proposal.replicas), Failed::No),
                Err((_, error)) if is_spec_error(error) => (ScaleAction::None, Failed::Spec),
                Err(_) => (ScaleAction::None, Failed::Internal),
            };
            monitor::metric_computation(action, failed, began.elapsed(), &spec.type_);
            match computed {
                Ok(proposal) => {
                    statuses[i] = proposal.status;
                    if replicas == 0 || proposal.replicas > replicas {
                        replicas = proposal.replicas;
                        metric = proposal.name;
                    }
                }
                Err((failure, error)) => {
                    if invalid == 0 {
                        first = Some((failure, error));
                    }
                    invalid += 1;
                }
            }
        }
        let error = first.as_ref().map(|(_, e)| {
            format!(
                "invalid metrics ({invalid} invalid out of {}), first error is: {e}",
                specs.len()
            )
        });
        run.spec_error = first.as_ref().is_some_and(|(_, e)| is_spec_error(e));
        if invalid >= specs.len() || (invalid > 0 && replicas < spec_replicas) {
            if let Some((failure, _)) = &first {
                run.conditions.set(
                    "ScalingActive",
                    false,
                    failure.reason,
                    failure.message.clone(),
                );
            }
            return Computed {
                replicas: -1,
                metric: String::new(),
                statuses,
                error,
            };
        }
        run.conditions.set(
            "ScalingActive",
            true,
            "ValidMetricFound",
            format!("the HPA was able to successfully calculate a replica count from {metric}"),
        );
        Computed {
            replicas,
            metric,
            statuses,
            error,
        }
    }

    /// One metric's proposal (upstream's `computeReplicasForMetric`), or its condition and
    /// error.
    async fn compute_metric<A: Access>(
        &self,
        run: &mut Run<'_, A>,
        spec: &MetricSpec,
        spec_replicas: i32,
        status_replicas: i32,
        selector: &LabelSelector,
        pods: &[&Pod],
    ) -> Result<Proposal, (Failure, String)> {
        let namespace = run.namespace.clone();
        let now = run.now;
        let calc = self.calculator;
        let selector_text = selector.to_string();
        match spec.type_.as_str() {
            "Resource" | "ContainerResource" => {
                let container_kind = spec.type_ == "ContainerResource";
                let (resource, container, target, reason) =
                    match (container_kind, &spec.resource, &spec.container_resource) {
                        (false, Some(r), _) => (
                            r.name.clone(),
                            String::new(),
                            r.target.clone(),
                            "FailedGetResourceMetric",
                        ),
                        (true, _, Some(c)) => (
                            c.name.clone(),
                            c.container.clone(),
                            c.target.clone(),
                            "FailedGetContainerResourceMetric",
                        ),
                        _ => {
                            let e = format!(
                                "invalid metric source: {} metric without its source",
                                spec.type_
                            );
                            let reason = if container_kind {
                                "FailedGetContainerResourceMetric"
                            } else {
                                "FailedGetResourceMetric"
                            };
                            return Err((run.unable(reason, &e), e));
                        }
                    };
                let outcome = self
                    .resource_metric(
                        run.access,
                        &namespace,
                        &resource,
                        &container,
                        &target,
                        spec_replicas,
                        &selector_text,
                        pods,
                        now,
                    )
                    .await;
                match outcome {
                    Ok((replicas, current, name)) => {
                        let name = if container_kind && current.average_utilization.is_some() {
                            format!(
                                "{resource} container resource utilization (percentage of request)"
                            )
                        } else {
                            name
                        };
                        let status = if container_kind {
                            MetricStatus {
                                type_: spec.type_.clone(),
                                container_resource: Some(ContainerResourceMetricStatus {
                                    name: resource,
                                    container,
                                    current,
                                }),
                                ..Default::default()
                            }
                        } else {
                            MetricStatus {
                                type_: spec.type_.clone(),
                                resource: Some(ResourceMetricStatus {
                                    name: resource,
                                    current,
                                }),
                                ..Default::default()
                            }
                        };
                        Ok(Proposal {
                            replicas,
                            name,
                            status,
                        })
                    }
                    Err(e) => {
                        let failure = run.unable(reason, &e);
                        let error = if container_kind {
                            format!("failed to get {container} container metric value: {e}")
                        } else {
                            format!("failed to get {resource} resource metric value: {e}")
                        };
                        Err((failure, error))
                    }
                }
            }
            "Pods" => {
                let Some(source) = &spec.pods else {
                    let e = "invalid metric source: Pods metric without its source".to_owned();
                    return Err((run.unable("FailedGetPodsMetric", &e), e));
                };
                let wrap = |e: &str| format!("failed to get pods metric value: {e}");
                let metric_selector = match metric_selector(source.metric.selector.as_ref()) {
                    Ok(s) => s,
                    Err(e) => return Err((run.unable("FailedGetPodsMetric", &e), wrap(&e))),
                };
                let target = match source.target.average_value.as_ref().map(milli) {
                    Some(Ok(v)) => v,
                    Some(Err(e)) => return Err((run.unable("FailedGetPodsMetric", &e), wrap(&e))),
                    None => {
                        let e = "invalid pods metric source: no average value target was set"
                            .to_owned();
                        return Err((run.unable("FailedGetPodsMetric", &e), wrap(&e)));
                    }
                };
                let fetched = run
                    .access
                    .pods_custom_metric(
                        &namespace,
                        &source.metric.name,
                        &selector_text,
                        &metric_selector,
                    )
                    .await;
                let outcome = metrics::custom_pod_samples(fetched)
                    .map_err(|e| format!("unable to get metric {}: {e}", source.metric.name))
                    .and_then(|(samples, _)| {
                        calc.plain_replicas(spec_replicas, target, "", samples, pods, now)
                    });
                match outcome {
                    Ok((replicas, usage)) => Ok(Proposal {
                        replicas,
                        name: format!("pods metric {}", source.metric.name),
                        status: MetricStatus {
                            type_: "Pods".into(),
                            pods: Some(PodsMetricStatus {
                                metric: source.metric.clone(),
                                current: MetricValueStatus {
                                    average_value: Some(milli_quantity(usage)),
                                    ..Default::default()
                                },
                            }),
                            ..Default::default()
                        },
                    }),
                    Err(e) => Err((run.unable("FailedGetPodsMetric", &e), wrap(&e))),
                }
            }
            "Object" => {
                let Some(source) = &spec.object else {
                    let e = "invalid metric source: Object metric without its source".to_owned();
                    return Err((run.unable("FailedGetObjectMetric", &e), e));
                };
                let wrap = |e: &str| format!("failed to get object metric value: {e}");
                let metric_selector = match metric_selector(source.metric.selector.as_ref()) {
                    Ok(s) => s,
                    Err(e) => return Err((run.unable("FailedGetObjectMetric", &e), wrap(&e))),
                };
                let object = &source.described_object;
                let metric_name = &source.metric.name;
                let value_target = (source.target.type_ == "Value")
                    .then_some(source.target.value.as_ref())
                    .flatten();
                let average_target = (source.target.type_ == "AverageValue")
                    .then_some(source.target.average_value.as_ref())
                    .flatten();
                if value_target.is_none() && average_target.is_none() {
                    let e = "invalid object metric source: neither a value target nor an average value target was set".to_owned();
                    return Err((run.unable("FailedGetObjectMetric", &e), wrap(&e)));
                }
                let fetched = self
                    .object_value(
                        run.access,
                        &namespace,
                        object,
                        metric_name,
                        &metric_selector,
                    )
                    .await;
                // Upstream's message, arguments as it passes them.
                let fetched = fetched.map_err(|e| {
                    format!(
                        "unable to get metric {metric_name}: {} on {namespace} {}/{e}",
                        object.kind, object.name
                    )
                });
                if let Some(target) = value_target {
                    let outcome = milli(target).and_then(|target| {
                        let usage = fetched?;
                        let ratio = usage as f64 / target as f64;
                        Ok((calc.ratio_replicas(spec_replicas, ratio, pods)?, usage))
                    });
                    match outcome {
                        Ok((replicas, usage)) => Ok(Proposal {
                            replicas,
                            name: format!("{} metric {metric_name}", object.kind),
                            status: MetricStatus {
                                type_: "Object".into(),
                                object: Some(ObjectMetricStatus {
                                    described_object: object.clone(),
                                    metric: source.metric.clone(),
                                    current: MetricValueStatus {
                                        value: Some(milli_quantity(usage)),
                                        ..Default::default()
                                    },
                                }),
                                ..Default::default()
                            },
                        }),
                        Err(e) => Err((run.unable("FailedGetObjectMetric", &e), wrap(&e))),
                    }
                } else {
                    let outcome = average_target
                        .map(milli)
                        .unwrap_or(Ok(1))
                        .and_then(|target| {
                            let total = fetched?;
                            Ok(calc.per_pod_replicas(status_replicas, target, total))
                        });
                    match outcome {
                        Ok((replicas, usage)) => Ok(Proposal {
                            replicas,
                            name: format!(
                                "external metric {metric_name}({})",
                                go_selector(source.metric.selector.as_ref())
                            ),
                            status: MetricStatus {
                                type_: "Object".into(),
                                object: Some(ObjectMetricStatus {
                                    described_object: CrossVersionObjectReference::default(),
                                    metric: MetricIdentifier {
                                        name: metric_name.clone(),
                                        selector: source.metric.selector.clone(),
                                    },
                                    current: MetricValueStatus {
                                        average_value: Some(milli_quantity(usage)),
                                        ..Default::default()
                                    },
                                }),
                                ..Default::default()
                            },
                        }),
                        Err(e) => {
                            let failure = run.unable("FailedGetObjectMetric", &e);
                            Err((
                                failure,
                                wrap(&format!("failed to get {metric_name} object metric: {e}")),
                            ))
                        }
                    }
                }
            }
            "External" => {
                let Some(source) = &spec.external else {
                    let e = "invalid metric source: External metric without its source".to_owned();
                    return Err((run.unable("FailedGetExternalMetric", &e), e));
                };
                let metric_name = &source.metric.name;
                let described = go_selector(source.metric.selector.as_ref());
                let wrap =
                    |e: &str| format!("failed to get {metric_name} external metric value: {e}");
                let per_pod = source.target.average_value.as_ref();
                let value = source.target.value.as_ref();
                if per_pod.is_none() && value.is_none() {
                    let e = "invalid external metric source: neither a value target nor an average value target was set".to_owned();
                    return Err((run.unable("FailedGetExternalMetric", &e), wrap(&e)));
                }
                let fetched = match metric_selector(source.metric.selector.as_ref()) {
                    Ok(metric_selector) => {
                        let listed = run
                            .access
                            .external_metric(&namespace, metric_name, &metric_selector)
                            .await;
                        metrics::external_values(listed)
                            .map(|(values, _)| values.iter().sum::<i64>())
                            .map_err(|e| format!("unable to get external metric {namespace}/{metric_name}/{described}: {e}"))
                    }
                    Err(e) => Err(e),
                };
                let name = format!("external metric {metric_name}({described})");
                if let Some(target) = per_pod {
                    let outcome = milli(target).and_then(|target| {
                        let total = fetched?;
                        Ok(calc.per_pod_replicas(status_replicas, target, total))
                    });
                    match outcome {
                        Ok((replicas, usage)) => Ok(Proposal {
                            replicas,
                            name,
                            status: external_status(
                                source.metric.clone(),
                                MetricValueStatus {
                                    average_value: Some(milli_quantity(usage)),
                                    ..Default::default()
                                },
                            ),
                        }),
                        Err(e) => {
                            let failure = run.unable("FailedGetExternalMetric", &e);
                            Err((
                                failure,
                                wrap(&format!("failed to get {metric_name} external metric: {e}")),
                            ))
                        }
                    }
                } else {
                    let outcome = value.map(milli).unwrap_or(Ok(1)).and_then(|target| {
                        let usage = fetched?;
                        let ratio = usage as f64 / target as f64;
                        Ok((calc.ratio_replicas(spec_replicas, ratio, pods)?, usage))
                    });
                    match outcome {
                        Ok((replicas, usage)) => Ok(Proposal {
                            replicas,
                            name,
                            status: external_status(
                                source.metric.clone(),
                                MetricValueStatus {
                                    value: Some(milli_quantity(usage)),
                                    ..Default::default()
                                },
                            ),
                        }),
                        Err(e) => {
                            let failure = run.unable("FailedGetExternalMetric", &e);
                            Err((
                                failure,
                                wrap(&format!("failed to get external metric {metric_name}: {e}")),
                            ))
                        }
                    }
                }
            }
            other => {
                let e = format!("unknown metric source type {other:?}");
                Err((run.unable("InvalidMetricSourceType", &e), e))
            }
        }
    }

    /// A Resource or ContainerResource metric (upstream's
    /// `computeStatusForResourceMetricGeneric`): the proposal, the current value and the
    /// metric's name.
    #[allow(clippy::too_many_arguments)]
    async fn resource_metric<A: Access>(
        &self,
        access: &A,
        namespace: &str,
        resource: &str,
        container: &str,
        target: &MetricTarget,
        current: i32,
        selector: &str,
        pods: &[&Pod],
        now: Timestamp,
    ) -> Result<(i32, MetricValueStatus, String), String> {
        let fetch = || async {
            metrics::resource_samples(
                access.pod_metrics(namespace, selector).await,
                resource,
                container,
            )
            .map(|(samples, _)| samples)
            .map_err(|e| format!("unable to get metrics for resource {resource}: {e}"))
        };
        if let Some(average) = &target.average_value {
            let outcome = async {
                let target = milli(average)?;
                let samples: PodMetricsInfo = fetch().await?;
                self.calculator
                    .plain_replicas(current, target, resource, samples, pods, now)
            }
            .await;
            let (replicas, usage) =
                outcome.map_err(|e| format!("failed to get {resource} usage: {e}"))?;
            return Ok((
                replicas,
                MetricValueStatus {
                    average_value: Some(milli_quantity(usage)),
                    ..Default::default()
                },
                format!("{resource} resource"),
            ));
        }
        let Some(utilization) = target.average_utilization else {
            return Err("invalid resource metric source: neither an average utilization target nor an average value (usage) target was set".into());
        };
        let outcome = async {
            let samples = fetch().await?;
            self.calculator.resource_replicas(
                current,
                utilization,
                resource,
                container,
                samples,
                pods,
                now,
            )
        }
        .await;
        let (replicas, percent, raw) =
            outcome.map_err(|e| format!("failed to get {resource} utilization: {e}"))?;
        Ok((
            replicas,
            MetricValueStatus {
                average_utilization: Some(percent),
                average_value: Some(milli_quantity(raw)),
                value: None,
            },
            format!("{resource} resource utilization (percentage of request)"),
        ))
    }

    /// The custom metric of one described object.
    async fn object_value<A: Access>(
        &self,
        access: &A,
        namespace: &str,
        object: &CrossVersionObjectReference,
        metric: &str,
        metric_selector: &str,
    ) -> Result<i64, String> {
        let (group, _) = parse_group_version(object.api_version.as_deref().unwrap_or_default())
            .map_err(|e| format!("unable to fetch metrics from custom metrics API: {e}"))?;
        let listed = if object.kind == "Namespace" && group.is_empty() {
            access
                .object_custom_metric(namespace, None, &object.name, metric, metric_selector)
                .await
        } else {
            let targets = access
                .resources(&group, &object.kind)
                .await
                .and_then(|t| {
                    t.into_iter().next().ok_or_else(|| {
                        format!("no matches for kind {:?} in group {:?}", object.kind, group)
                    })
                })
                .map_err(|e| format!("unable to fetch metrics from custom metrics API: {e}"))?;
            access
                .object_custom_metric(
                    namespace,
                    Some(&targets.group_resource()),
                    &object.name,
                    metric,
                    metric_selector,
                )
                .await
        };
        metrics::custom_object_value(listed).map(|(value, _)| value)
    }
}

fn external_status(metric: MetricIdentifier, current: MetricValueStatus) -> MetricStatus {
    MetricStatus {
        type_: "External".into(),
        external: Some(ExternalMetricStatus { metric, current }),
        ..Default::default()
    }
}

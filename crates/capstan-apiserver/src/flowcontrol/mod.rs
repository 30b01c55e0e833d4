//! API Priority and Fairness: every request is classified by the FlowSchemas
//! (`flowcontrol.apiserver.k8s.io/v1`) into a priority level and a flow, and waits for a seat of
//! its level before it runs. Exempt levels never wait; a limited level has a share of the server's
//! concurrency in proportion to its nominal concurrency shares, and what does not fit waits in
//! that level's queues (or is rejected, for levels that reject). Flows are spread over a level's
//! queues by shuffle sharding, and queues take turns when a seat frees, so one flow's flood
//! fills its own queues and is answered 429 while other flows of the level, and every other
//! level, keep their seats. Every classified response names its FlowSchema and priority level
//! in the `X-Kubernetes-PF-*` headers.
//!
//! The configuration objects live in the API like any others; the server creates upstream's
//! mandatory and suggested ones at start ([`ensure_bootstrap`]) and rebuilds its classifier
//! whenever they change. Differences from upstream, all in the dispatching: queues take turns
//! in round robin rather than by virtual finish time, levels do not lend or borrow seats,
//! every request takes one seat, and watches are classified but take no seat.

mod levels;

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use capstan_api::RequestInfo;
use k8s_openapi::api::flowcontrol::v1::{
    FlowSchema, PolicyRulesWithSubjects, PriorityLevelConfiguration, Subject,
};
use serde_json::Value;

use crate::authn::User;
use crate::registry::Registries;
use crate::registry::{Changes, ListOptions, Registry, WriteOptions};
pub(crate) use levels::{Level, Rejected, Seat};

/// The server's concurrency limit, shared among the limited priority levels (upstream's
/// `--max-requests-inflight` plus `--max-mutating-requests-inflight`).
pub(crate) const SERVER_CONCURRENCY_LIMIT: usize = 600;
/// The longest a request waits in a queue (upstream: a quarter of the request timeout).
pub(crate) const QUEUE_WAIT_LIMIT: Duration = Duration::from_secs(15);
/// How often the configuration is reread when no change was seen (a safety net: changes arrive
/// by watch).
const REFRESH: Duration = Duration::from_secs(30);
/// The annotation that lets the server keep a bootstrap object's spec current.
const AUTO_UPDATE: &str = "apf.kubernetes.io/autoupdate-spec";
/// The field manager of the status the server writes.
const STATUS_MANAGER: &str = "api-priority-and-fairness-config-consumer-v1";

const GROUP: &str = "flowcontrol.apiserver.k8s.io";

/// A FlowSchema as the classifier uses it.
#[derive(Debug)]
struct Schema {
    name: String,
    uid: String,
    precedence: i32,
    level: Arc<Level>,
    distinguisher: Option<String>,
    rules: Vec<PolicyRulesWithSubjects>,
}

/// Where a request goes: its schema and level, and the hash of its flow.
#[derive(Clone, Debug)]
pub(crate) struct Classification {
    /// The FlowSchema's uid (`X-Kubernetes-PF-FlowSchema-UID`).
    pub schema_uid: String,
    /// The priority level's uid (`X-Kubernetes-PF-PriorityLevel-UID`).
    pub level_uid: String,
    level: Arc<Level>,
    flow: u64,
}

impl Classification {
    /// Waits for a seat of the request's level (none is needed at an exempt level).
    pub(crate) async fn admit(&self) -> Result<Option<Seat>, Rejected> {
        self.level.admit(self.flow, QUEUE_WAIT_LIMIT).await
    }
}

/// The classifier and the priority levels.
#[derive(Debug, Default)]
pub(crate) struct Flowcontrol {
    /// The FlowSchemas whose level exists, in matching order.
    schemas: RwLock<Arc<Vec<Schema>>>,
    /// The levels by name, kept across rebuilds while their configuration is unchanged so that
    /// their queues and seats carry over.
    levels: RwLock<BTreeMap<String, Arc<Level>>>,
    /// The fingerprints of the configuration objects last built from.
    built_from: RwLock<(u64, u64)>,
}

impl Flowcontrol {
    /// A classifier over `api`'s configuration objects, kept current in the background.
    pub(crate) fn start(registries: Arc<Registries>) -> Arc<Flowcontrol> {
        let flowcontrol = Arc::new(Flowcontrol::default());
        let weak = Arc::downgrade(&flowcontrol);
        let watched = ["flowschemas", "prioritylevelconfigurations"]
            .into_iter()
            .filter_map(|plural| registries.get(GROUP, "v1", plural))
            .collect();
        let mut changes = Changes::new(watched);
        tokio::spawn(async move {
            loop {
                changes.changed(REFRESH).await;
                let Some(flowcontrol) = weak.upgrade() else {
                    return;
                };
                if let Err(error) = flowcontrol.refresh(&registries).await {
                    tracing::debug!(?error, "cannot read the flow control configuration");
                }
                drop(flowcontrol);
            }
        });
        flowcontrol
    }

    /// Rebuilds the classifier when the configuration objects changed, and records on each
    /// FlowSchema whether its priority level exists (its `Dangling` condition).
    pub(crate) async fn refresh(
        &self,
        registries: &Registries,
    ) -> Result<(), crate::status::ApiError> {
        let (Some(schemas), Some(levels)) = (
            registries.get(GROUP, "v1", "flowschemas"),
            registries.get(GROUP, "v1", "prioritylevelconfigurations"),
        ) else {
            return Ok(());
        };
        let options = ListOptions::default();
        let level_list = levels.list(None, &options).await?;
        let schema_list = schemas.list(None, &options).await?;
        let versions = (schema_list.fingerprint(), level_list.fingerprint());
        let unchanged = *self.built_from.read().unwrap_or_else(|e| e.into_inner()) == versions;
        if unchanged && !self.schemas_read().is_empty() {
            return Ok(());
        }
        let levels_typed: Vec<PriorityLevelConfiguration> = level_list
            .items
            .iter()
            .filter_map(|c| serde_json::from_value(c.object()).ok())
            .collect();
        let schemas_typed: Vec<FlowSchema> = schema_list
            .items
            .iter()
            .filter_map(|c| serde_json::from_value(c.object()).ok())
            .collect();
        self.rebuild(&levels_typed, &schemas_typed);
        *self.built_from.write().unwrap_or_else(|e| e.into_inner()) = versions;
        record_dangling(&schemas, &schemas_typed, &self.levels_read()).await;
        Ok(())
    }

    fn schemas_read(&self) -> Arc<Vec<Schema>> {
        self.schemas
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn levels_read(&self) -> BTreeMap<String, Arc<Level>> {
        self.levels
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Builds the levels and the matching order from the configuration objects.
    fn rebuild(&self, levels: &[PriorityLevelConfiguration], schemas: &[FlowSchema]) {
        let shares = |pl: &PriorityLevelConfiguration| -> usize {
            let spec = pl.spec.as_ref();
            let ncs = spec
                .and_then(|s| s.limited.as_ref())
                .and_then(|l| l.nominal_concurrency_shares)
                .or_else(|| {
                    spec.and_then(|s| s.exempt.as_ref())
                        .and_then(|e| e.nominal_concurrency_shares)
                })
                .unwrap_or(0);
            usize::try_from(ncs).unwrap_or(0)
        };
        let total: usize = levels.iter().map(shares).sum();
        let old = self.levels_read();
        let mut built = BTreeMap::new();
        for pl in levels {
            let name = pl.metadata.name.clone().unwrap_or_default();
            let uid = pl.metadata.uid.clone().unwrap_or_default();
            let limit = if total == 0 {
                0
            } else {
                (SERVER_CONCURRENCY_LIMIT * shares(pl)).div_ceil(total)
            };
            let level = Level::new(&name, &uid, pl.spec.as_ref(), limit);
            let level = match old.get(&name) {
                Some(existing) if existing.same_as(&level) => existing.clone(),
                _ => Arc::new(level),
            };
            built.insert(name, level);
        }
        let mut matching: Vec<Schema> = schemas
            .iter()
            .filter_map(|fs| {
                let spec = fs.spec.as_ref()?;
                let level = built.get(&spec.priority_level_configuration.name)?.clone();
                Some(Schema {
                    name: fs.metadata.name.clone().unwrap_or_default(),
                    uid: fs.metadata.uid.clone().unwrap_or_default(),
                    precedence: spec.matching_precedence.unwrap_or(1000),
                    level,
                    distinguisher: spec.distinguisher_method.as_ref().map(|d| d.type_.clone()),
                    rules: spec.rules.clone().unwrap_or_default(),
                })
            })
            .collect();
        matching.sort_by(|a, b| (a.precedence, &a.name).cmp(&(b.precedence, &b.name)));
        *self.levels.write().unwrap_or_else(|e| e.into_inner()) = built;
        *self.schemas.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(matching);
    }

    /// The schema, level and flow of a request by `user`; `None` before the configuration is
    /// loaded (the request then runs unclassified).
    pub(crate) fn classify(&self, user: &User, info: &RequestInfo) -> Option<Classification> {
        let schemas = self.schemas_read();
        let schema = schemas
            .iter()
            .find(|s| s.rules.iter().any(|rule| rule_matches(rule, user, info)))?;
        let distinguisher = match schema.distinguisher.as_deref() {
            Some("ByUser") => user.name.as_str(),
            Some("ByNamespace") => info.namespace.as_str(),
            _ => "",
        };
        let mut hasher = std::hash::DefaultHasher::new();
        (schema.name.as_str(), distinguisher).hash(&mut hasher);
        Some(Classification {
            schema_uid: schema.uid.clone(),
            level_uid: schema.level.uid().to_owned(),
            level: schema.level.clone(),
            flow: hasher.finish(),
        })
    }
}

/// Writes each FlowSchema's `Dangling` condition where it is not what the levels say.
async fn record_dangling(
    registry: &Registry,
    schemas: &[FlowSchema],
    levels: &BTreeMap<String, Arc<Level>>,
) {
    for fs in schemas {
        let Some(spec) = &fs.spec else { continue };
        let level = &spec.priority_level_configuration.name;
        let dangling = !levels.contains_key(level);
        let status = if dangling { "True" } else { "False" };
        let current = fs
            .status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .find(|c| c.type_.as_deref() == Some("Dangling"));
        if current.and_then(|c| c.status.as_deref()) == Some(status) {
            continue;
        }
        let (reason, message) = if dangling {
            (
                "NotFound",
                format!(
                    "This FlowSchema references the PriorityLevelConfiguration object named \"{level}\" but there is no such object"
                ),
            )
        } else {
            (
                "Found",
                format!(
                    "This FlowSchema references the PriorityLevelConfiguration object named \"{level}\" and it exists"
                ),
            )
        };
        let name = fs.metadata.name.clone().unwrap_or_default();
        let condition = serde_json::json!({
            "type": "Dangling",
            "status": status,
            "lastTransitionTime": crate::registry::object::now_rfc3339(),
            "reason": reason,
            "message": message,
        });
        let options = WriteOptions {
            writer: Some(crate::registry::fields::Writer {
                manager: STATUS_MANAGER.into(),
                force: false,
            }),
            ..WriteOptions::default()
        };
        let key = registry.resource.storage_key(None, &name);
        let result = registry
            .guaranteed_update(&key, &name, None, Some("status"), &options, |current| {
                let mut object = current.cloned().unwrap_or(Value::Null);
                let conditions = object["status"]["conditions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let mut conditions: Vec<Value> = conditions
                    .into_iter()
                    .filter(|c| c["type"] != "Dangling")
                    .collect();
                conditions.push(condition.clone());
                object["status"]["conditions"] = Value::Array(conditions);
                Ok(object)
            })
            .await;
        if let Err(error) = result {
            tracing::debug!(flowschema = %name, ?error, "cannot record the Dangling condition");
        }
    }
}

fn matches_any(values: &[String], value: &str) -> bool {
    values.iter().any(|v| v == "*" || v == value)
}

fn subject_matches(subject: &Subject, user: &User) -> bool {
    match subject.kind.as_str() {
        "User" => subject
            .user
            .as_ref()
            .is_some_and(|u| u.name == "*" || u.name == user.name),
        "Group" => subject
            .group
            .as_ref()
            .is_some_and(|g| g.name == "*" || user.groups.contains(&g.name)),
        "ServiceAccount" => subject.service_account.as_ref().is_some_and(|sa| {
            let Some(rest) = user.name.strip_prefix("system:serviceaccount:") else {
                return false;
            };
            let Some((namespace, name)) = rest.split_once(':') else {
                return false;
            };
            namespace == sa.namespace && (sa.name == "*" || sa.name == name)
        }),
        _ => false,
    }
}

/// Whether `rule` covers a request by `user`, as upstream matches policy rules.
fn rule_matches(rule: &PolicyRulesWithSubjects, user: &User, info: &RequestInfo) -> bool {
    if !rule.subjects.iter().any(|s| subject_matches(s, user)) {
        return false;
    }
    if info.is_resource_request {
        let resource = if info.subresource.is_empty() {
            info.resource.clone()
        } else {
            format!("{}/{}", info.resource, info.subresource)
        };
        rule.resource_rules.iter().flatten().any(|r| {
            matches_any(&r.verbs, &info.verb)
                && matches_any(&r.api_groups, &info.api_group)
                && matches_any(&r.resources, &resource)
                && if info.namespace.is_empty() {
                    r.cluster_scope.unwrap_or(false)
                } else {
                    matches_any(r.namespaces.as_deref().unwrap_or_default(), &info.namespace)
                }
        })
    } else {
        rule.non_resource_rules.iter().flatten().any(|r| {
            matches_any(&r.verbs, &info.verb)
                && r.non_resource_urls.iter().any(|pattern| {
                    pattern == "*"
                        || *pattern == info.path
                        || pattern
                            .strip_suffix('*')
                            .is_some_and(|prefix| info.path.starts_with(prefix))
                })
        })
    }
}

/// The bootstrap configuration: upstream's mandatory and suggested objects.
fn bootstrap_objects() -> (Vec<Value>, Vec<Value>) {
    let doc: Value = serde_json::from_str(include_str!("bootstrap.json")).unwrap_or_default();
    let list = |key: &str| doc[key].as_array().cloned().unwrap_or_default();
    (list("mandatory"), list("suggested"))
}

/// Creates the bootstrap objects that are missing and, for those whose auto-update annotation
/// is still `true`, puts back the bootstrap spec (mandatory objects always get it back), as
/// upstream's configuration ensurer does at start.
pub(crate) async fn ensure_bootstrap(
    registries: &Registries,
) -> Result<(), crate::status::ApiError> {
    let (mandatory, suggested) = bootstrap_objects();
    let all = mandatory
        .into_iter()
        .map(|o| (o, true))
        .chain(suggested.into_iter().map(|o| (o, false)));
    for (object, mandatory) in all {
        let plural = match object["kind"].as_str() {
            Some("FlowSchema") => "flowschemas",
            _ => "prioritylevelconfigurations",
        };
        let Some(registry) = registries.get(GROUP, "v1", plural) else {
            continue;
        };
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let options = WriteOptions {
            writer: Some(crate::registry::fields::Writer {
                manager: "api-priority-and-fairness-config-producer-v1".into(),
                force: false,
            }),
            ..WriteOptions::default()
        };
        match registry.get(None, &name).await {
            Err(error) if error.status().code() == 404 => {
                match registry.create(None, object, &options).await {
                    Ok(_) => {}
                    Err(error) if error.status().code() == 409 => {}
                    Err(error) => return Err(error),
                }
            }
            Err(error) => return Err(error),
            Ok(current) => {
                let auto = current["metadata"]["annotations"][AUTO_UPDATE] == "true";
                if !(mandatory || auto) {
                    continue;
                }
                let (wanted, _) = registry
                    .strategy()
                    .decode(&object)
                    .map_err(|e| capstan_api::StatusError::internal(&format!("{e:?}")))?;
                if current["spec"] == wanted["spec"] {
                    continue;
                }
                let key = registry.resource.storage_key(None, &name);
                registry
                    .guaranteed_update(&key, &name, None, None, &options, |current| {
                        let mut updated = current.cloned().unwrap_or(Value::Null);
                        updated["spec"] = wanted["spec"].clone();
                        Ok(updated)
                    })
                    .await?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;

//! Auditing, as upstream's API server audits: an `audit.k8s.io/v1` `Policy`
//! (`--audit-policy-file`) whose first matching rule (users, groups, verbs, resources with
//! subresources and names, namespaces, non-resource URLs) gives a request its level (`None`,
//! `Metadata`, `Request`, `RequestResponse`) and stages to omit; `audit.k8s.io/v1` `Event`
//! lines written to `--audit-log-path` (`-`: standard output) at each stage
//! (`RequestReceived`, `ResponseStarted` for long-running requests, `ResponseComplete`), in Go's
//! field order, with the request and response objects at the levels that carry them; the file
//! rotated as upstream's (lumberjack's) `--audit-log-maxsize` (MB), `--audit-log-maxbackup`
//! and `--audit-log-maxage` (days) say. The policy is evaluated for the authenticated user,
//! before impersonation, as upstream's filter sits before it; every response carries its
//! `Audit-Id`. Requests that fail authentication are not audited. Beside the log, or instead
//! of it, events go to the audit webhook (`--audit-webhook-config-file`, [`webhook`]).

pub(crate) mod webhook;

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use capstan_api::RequestInfo;
use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::authn::User;

/// A request's audit level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub(crate) enum Level {
    None,
    Metadata,
    Request,
    RequestResponse,
}

impl Level {
    fn parse(text: &str) -> Option<Level> {
        Some(match text {
            "None" => Level::None,
            "Metadata" => Level::Metadata,
            "Request" => Level::Request,
            "RequestResponse" => Level::RequestResponse,
            _ => return None,
        })
    }
}

const STAGES: [&str; 4] = [
    "RequestReceived",
    "ResponseStarted",
    "ResponseComplete",
    "Panic",
];

/// A rule's `resources` entry.
#[derive(Debug, Default)]
struct GroupResources {
    group: String,
    resources: Vec<String>,
    names: Vec<String>,
}

/// One policy rule.
#[derive(Debug, Default)]
struct Rule {
    level: Option<Level>,
    users: Vec<String>,
    groups: Vec<String>,
    verbs: Vec<String>,
    resources: Vec<GroupResources>,
    namespaces: Vec<String>,
    non_resource_urls: Vec<String>,
    omit_stages: Vec<String>,
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

impl Rule {
    fn matches(&self, user: &User, info: &RequestInfo) -> bool {
        let any = |list: &[String], value: &str| list.is_empty() || list.iter().any(|v| v == value);
        if !any(&self.users, &user.name)
            || !(self.groups.is_empty() || user.groups.iter().any(|g| self.groups.contains(g)))
            || !any(&self.verbs, &info.verb)
        {
            return false;
        }
        if info.is_resource_request {
            if !self.non_resource_urls.is_empty() {
                return false;
            }
            if !self.namespaces.is_empty() && !self.namespaces.contains(&info.namespace) {
                return false;
            }
            self.resources.is_empty() || self.resources.iter().any(|gr| gr.matches(info))
        } else {
            if !self.resources.is_empty() || !self.namespaces.is_empty() {
                return false;
            }
            self.non_resource_urls.is_empty()
                || self
                    .non_resource_urls
                    .iter()
                    .any(|url| match url.strip_suffix('*') {
                        Some(prefix) => info.path.starts_with(prefix),
                        None => *url == info.path,
                    })
        }
    }
}

impl GroupResources {
    fn matches(&self, info: &RequestInfo) -> bool {
        if self.group != info.api_group {
            return false;
        }
        if self.resources.is_empty() {
            return true;
        }
        if !self.names.is_empty() && !self.names.contains(&info.name) {
            return false;
        }
        let combined = if info.subresource.is_empty() {
            info.resource.clone()
        } else {
            format!("{}/{}", info.resource, info.subresource)
        };
        self.resources.iter().any(|r| {
            *r == combined
                || r == "*"
                || (!info.subresource.is_empty() && r.strip_prefix("*/") == Some(&info.subresource))
                || r.strip_suffix("/*") == Some(&info.resource)
        })
    }
}

/// An audit policy.
#[derive(Debug, Default)]
pub struct Policy {
    rules: Vec<Rule>,
    omit_stages: Vec<String>,
}

fn stages(value: &Value, at: &str) -> Result<Vec<String>, String> {
    let list = strings(value);
    for stage in &list {
        if !STAGES.contains(&stage.as_str()) {
            return Err(format!(
                "{at}: Unsupported value: {stage:?}: supported values: \"RequestReceived\", \"ResponseStarted\", \"ResponseComplete\", \"Panic\""
            ));
        }
    }
    Ok(list)
}

impl Policy {
    /// Parses a policy document (YAML or JSON), checked as upstream checks it.
    pub fn parse(text: &str) -> Result<Policy, String> {
        let doc: Value = serde_saphyr::from_str(text).map_err(|e| format!("cannot parse: {e}"))?;
        if doc["kind"] != "Policy" || !matches!(doc["apiVersion"].as_str(), Some("audit.k8s.io/v1"))
        {
            return Err(format!(
                "expected apiVersion audit.k8s.io/v1, kind Policy; got {} {}",
                doc["apiVersion"], doc["kind"]
            ));
        }
        let mut rules = Vec::new();
        for (i, rule) in doc["rules"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            let at = format!("rules[{i}]");
            let level = rule["level"].as_str().unwrap_or_default();
            let level = Level::parse(level).ok_or_else(|| {
                format!(
                    "{at}.level: Unsupported value: {level:?}: supported values: \"None\", \"Metadata\", \"Request\", \"RequestResponse\""
                )
            })?;
            let resources: Vec<GroupResources> = rule["resources"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .map(|gr| GroupResources {
                    group: gr["group"].as_str().unwrap_or_default().to_owned(),
                    resources: strings(&gr["resources"]),
                    names: strings(&gr["resourceNames"]),
                })
                .collect();
            let non_resource_urls = strings(&rule["nonResourceURLs"]);
            let namespaces = strings(&rule["namespaces"]);
            if !non_resource_urls.is_empty() && (!resources.is_empty() || !namespaces.is_empty()) {
                return Err(format!(
                    "{at}.nonResourceURLs: Invalid value: rules cannot apply to both regular resources and non-resource URLs"
                ));
            }
            for url in &non_resource_urls {
                if url.contains('*') && !url.ends_with('*') || url.matches('*').count() > 1 {
                    return Err(format!(
                        "{at}.nonResourceURLs: Invalid value: {url:?}: '*' is only allowed at the end"
                    ));
                }
            }
            rules.push(Rule {
                level: Some(level),
                users: strings(&rule["users"]),
                groups: strings(&rule["userGroups"]),
                verbs: strings(&rule["verbs"]),
                resources,
                namespaces,
                non_resource_urls,
                omit_stages: stages(&rule["omitStages"], &format!("{at}.omitStages"))?,
            });
        }
        Ok(Policy {
            omit_stages: stages(&doc["omitStages"], "omitStages")?,
            rules,
        })
    }

    /// The level of a request and the stages not to write (`None` when no rule matches).
    pub(crate) fn evaluate(&self, user: &User, info: &RequestInfo) -> (Level, Vec<String>) {
        match self.rules.iter().find(|r| r.matches(user, info)) {
            Some(rule) => {
                let mut omit = self.omit_stages.clone();
                omit.extend(rule.omit_stages.iter().cloned());
                (rule.level.unwrap_or(Level::None), omit)
            }
            None => (Level::None, Vec::new()),
        }
    }
}

/// Where event lines go, rotated as lumberjack rotates.
#[derive(Debug)]
pub struct LogSettings {
    /// The file, or `-` for standard output.
    pub path: PathBuf,
    /// Rotate past this many megabytes (0: never).
    pub max_size_mb: u64,
    /// Keep at most this many rotated files (0: all).
    pub max_backups: usize,
    /// Remove rotated files older than this many days (0: never).
    pub max_age_days: u64,
}

struct Sink {
    file: Option<File>,
    size: u64,
}

/// Auditing: the policy and the backends, the log and the webhook.
pub struct Auditor {
    policy: Policy,
    settings: Option<LogSettings>,
    sink: Mutex<Sink>,
    webhook: Option<webhook::AuditWebhook>,
}

impl std::fmt::Debug for Auditor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auditor")
            .field("log", &self.settings.as_ref().map(|s| &s.path))
            .field("webhook", &self.webhook)
            .finish_non_exhaustive()
    }
}

impl Auditor {
    /// Reads the policy at `policy_file` and opens the log, if there is one.
    pub(crate) fn new(
        policy_file: &Path,
        settings: Option<LogSettings>,
        webhook: Option<webhook::AuditWebhook>,
    ) -> Result<Auditor, String> {
        let text = std::fs::read_to_string(policy_file)
            .map_err(|e| format!("--audit-policy-file {}: {e}", policy_file.display()))?;
        let policy = Policy::parse(&text)
            .map_err(|e| format!("--audit-policy-file {}: {e}", policy_file.display()))?;
        let auditor = Auditor {
            policy,
            settings,
            sink: Mutex::new(Sink {
                file: None,
                size: 0,
            }),
            webhook,
        };
        auditor
            .open()
            .map_err(|e| format!("--audit-log-path: {e}"))?;
        Ok(auditor)
    }

    fn stdout(&self) -> bool {
        self.settings
            .as_ref()
            .is_some_and(|s| s.path.as_os_str() == "-")
    }

    fn open(&self) -> std::io::Result<()> {
        let Some(settings) = self.settings.as_ref().filter(|_| !self.stdout()) else {
            return Ok(());
        };
        if let Some(dir) = settings.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        use std::os::unix::fs::OpenOptionsExt as _;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&settings.path)?;
        let size = file.metadata()?.len();
        let mut sink = self.sink.lock().unwrap_or_else(|e| e.into_inner());
        *sink = Sink {
            file: Some(file),
            size,
        };
        Ok(())
    }

    /// The level and omitted stages for a request.
    pub(crate) fn evaluate(&self, user: &User, info: &RequestInfo) -> (Level, Vec<String>) {
        self.policy.evaluate(user, info)
    }

    /// Records one event with every backend; false only when the webhook in
    /// `blocking-strict` mode could not take it.
    pub(crate) async fn write(&self, event: &Event<'_>) -> bool {
        let Ok(line) = serde_json::to_vec(event) else {
            return true;
        };
        match &self.webhook {
            Some(webhook) => {
                self.log(line.clone());
                webhook.process(line).await
            }
            None => {
                self.log(line);
                true
            }
        }
    }

    /// Records one event, already encoded, where nobody waits for it (the end of a
    /// long-running answer).
    pub(crate) fn write_line(&self, line: Vec<u8>) {
        match &self.webhook {
            Some(webhook) => {
                self.log(line.clone());
                webhook.process_detached(line);
            }
            None => self.log(line),
        }
    }

    /// Writes one event to the log, if there is one (without its newline).
    fn log(&self, mut line: Vec<u8>) {
        let Some(settings) = &self.settings else {
            return;
        };
        line.push(b'\n');
        if self.stdout() {
            let _ = std::io::stdout().lock().write_all(&line);
            return;
        }
        let max = settings.max_size_mb.saturating_mul(1024 * 1024);
        let mut sink = self.sink.lock().unwrap_or_else(|e| e.into_inner());
        if max > 0 && sink.size + line.len() as u64 > max && sink.size > 0 {
            drop(sink);
            if let Err(error) = self.rotate() {
                tracing::error!(%error, "cannot rotate the audit log");
            }
            sink = self.sink.lock().unwrap_or_else(|e| e.into_inner());
        }
        let written = match sink.file.as_mut() {
            Some(file) => file.write_all(&line),
            None => Ok(()),
        };
        match written {
            Ok(()) => sink.size += line.len() as u64,
            Err(error) => tracing::error!(%error, "cannot write the audit log"),
        }
    }

    /// Moves the log aside as `<name>-<UTC time>.<ext>`, opens a new one and removes the
    /// backups beyond the count and age kept.
    fn rotate(&self) -> std::io::Result<()> {
        let Some(settings) = &self.settings else {
            return Ok(());
        };
        let path = &settings.path;
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("audit");
        let ext = path
            .extension()
            .and_then(|s| s.to_str())
            .map(|e| format!(".{e}"))
            .unwrap_or_default();
        let now = time::OffsetDateTime::now_utc();
        let stamp = format!(
            "{:04}-{:02}-{:02}T{:02}-{:02}-{:02}.{:03}",
            now.year(),
            u8::from(now.month()),
            now.day(),
            now.hour(),
            now.minute(),
            now.second(),
            now.millisecond()
        );
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut target = dir.join(format!("{stem}-{stamp}{ext}"));
        for n in 1.. {
            if !target.exists() {
                break;
            }
            target = dir.join(format!("{stem}-{stamp}-{n}{ext}"));
        }
        std::fs::rename(path, target)?;
        self.open()?;
        let prefix = format!("{stem}-");
        let mut backups: Vec<(PathBuf, std::time::SystemTime)> = std::fs::read_dir(dir)?
            .filter_map(Result::ok)
            .filter(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.starts_with(&prefix) && name.ends_with(&ext) && e.path() != *path
            })
            .filter_map(|e| Some((e.path(), e.metadata().ok()?.modified().ok()?)))
            .collect();
        backups.sort_by(|a, b| b.0.cmp(&a.0));
        let max_age = std::time::Duration::from_secs(settings.max_age_days * 24 * 3600);
        for (i, (backup, modified)) in backups.iter().enumerate() {
            let too_many = settings.max_backups > 0 && i >= settings.max_backups;
            let too_old =
                settings.max_age_days > 0 && modified.elapsed().is_ok_and(|age| age > max_age);
            if too_many || too_old {
                let _ = std::fs::remove_file(backup);
            }
        }
        Ok(())
    }
}

/// `user` of an event.
#[derive(Serialize)]
pub(crate) struct EventUser<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    username: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    uid: &'a str,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    groups: &'a [String],
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    extra: &'a std::collections::BTreeMap<String, Vec<String>>,
}

impl<'a> EventUser<'a> {
    pub(crate) fn of(user: &'a User) -> Self {
        EventUser {
            username: &user.name,
            uid: &user.uid,
            groups: &user.groups,
            extra: &user.extra,
        }
    }
}

/// `objectRef` of an event, in Go's field order.
#[derive(Serialize)]
pub(crate) struct ObjectRef<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    resource: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    namespace: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    uid: &'a str,
    #[serde(rename = "apiGroup", skip_serializing_if = "str::is_empty")]
    api_group: &'a str,
    #[serde(rename = "apiVersion", skip_serializing_if = "str::is_empty")]
    api_version: &'a str,
    #[serde(rename = "resourceVersion", skip_serializing_if = "str::is_empty")]
    resource_version: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    subresource: &'a str,
}

impl<'a> ObjectRef<'a> {
    /// Fills what the request's path left empty from what the handler saw of the request's
    /// object (upstream's `LogRequestObject`).
    pub(crate) fn completed(mut self, seen: &'a ObjectSeen) -> Self {
        for (field, value) in [
            (&mut self.namespace, &seen.namespace),
            (&mut self.name, &seen.name),
            (&mut self.uid, &seen.uid),
            (&mut self.resource_version, &seen.resource_version),
        ] {
            if field.is_empty() {
                *field = value;
            }
        }
        self
    }
}

/// The metadata of a create's or an update's object, as the handler decoded it.
#[derive(Clone, Debug, Default)]
pub(crate) struct ObjectSeen {
    namespace: String,
    name: String,
    uid: String,
    resource_version: String,
}

/// Where a create or update handler notes the object it decoded, so that the audit events
/// written once the request is handled name it in `objectRef` at every level (upstream's
/// handlers call `LogRequestObject`, which completes the reference from the object's metadata
/// before it looks at the level). The `RequestReceived` event comes before: it names only what
/// the path does, as upstream's.
#[derive(Clone, Debug, Default)]
pub(crate) struct RequestObject(std::sync::Arc<Mutex<Option<ObjectSeen>>>);

impl RequestObject {
    /// Notes `object`'s namespace, name, uid and resourceVersion (the first object noted stays).
    pub(crate) fn note(&self, object: &serde_json::Value) {
        let metadata = object.get("metadata");
        let meta = |field: &str| {
            metadata
                .and_then(|m| m.get(field))
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let mut seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        seen.get_or_insert_with(|| ObjectSeen {
            namespace: meta("namespace"),
            name: meta("name"),
            uid: meta("uid"),
            resource_version: meta("resourceVersion"),
        });
    }

    /// What was noted (nothing: all empty).
    pub(crate) fn seen(&self) -> ObjectSeen {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .unwrap_or_default()
    }
}

/// An `audit.k8s.io/v1` `Event`, in Go's field order.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Event<'a> {
    pub kind: &'static str,
    pub api_version: &'static str,
    pub level: Level,
    #[serde(rename = "auditID")]
    pub audit_id: &'a str,
    pub stage: &'static str,
    #[serde(rename = "requestURI")]
    pub request_uri: &'a str,
    pub verb: &'a str,
    pub user: EventUser<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub impersonated_user: Option<EventUser<'a>>,
    #[serde(rename = "sourceIPs", skip_serializing_if = "<[String]>::is_empty")]
    pub source_ips: &'a [String],
    #[serde(skip_serializing_if = "str::is_empty")]
    pub user_agent: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_ref: Option<ObjectRef<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_status: Option<ResponseStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_object: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_object: Option<&'a RawValue>,
    pub request_received_timestamp: &'a str,
    pub stage_timestamp: String,
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub annotations: std::collections::BTreeMap<String, String>,
}

/// The annotations the layers of one audited request add to its events (the authorizer's
/// decision, admission webhooks' and policies' audit annotations), as upstream's
/// `audit.AddAuditAnnotation` collects them: the first value given for a key stays. The events
/// written after the request was handled carry them. They know the request's audit level, so
/// that an annotation meant for higher levels only (a mutating webhook's patch, upstream's
/// `AddAnnotationWithLevel`) is left out of the events of a request audited below it.
#[derive(Clone, Debug)]
pub(crate) struct Annotations {
    values: std::sync::Arc<Mutex<std::collections::BTreeMap<String, String>>>,
    level: Level,
}

impl Annotations {
    /// The annotations of a request audited at `level`.
    pub(crate) fn new(level: Level) -> Self {
        Annotations {
            values: Default::default(),
            level,
        }
    }

    /// Adds `key` with `value`, unless the key has a value already.
    pub(crate) fn add(&self, key: impl Into<String>, value: impl Into<String>) {
        let mut annotations = self.values.lock().unwrap_or_else(|e| e.into_inner());
        annotations
            .entry(key.into())
            .or_insert_with(|| value.into());
    }

    /// Adds `key` with `value` as [`Annotations::add`] does when the request is audited at
    /// `level` or above (upstream keeps such an annotation only for events of that level).
    pub(crate) fn add_at(&self, level: Level, key: impl Into<String>, value: impl Into<String>) {
        if self.kept_at(level) {
            self.add(key, value);
        }
    }

    /// Whether annotations meant for `level` and above are kept (the request is audited at
    /// `level` or above): a caller checks before working out a costly value.
    pub(crate) fn kept_at(&self, level: Level) -> bool {
        self.level >= level
    }

    /// The annotations added so far.
    pub(crate) fn snapshot(&self) -> std::collections::BTreeMap<String, String> {
        self.values
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// The `objectRef` of a resource request.
pub(crate) fn object_ref(info: &RequestInfo) -> Option<ObjectRef<'_>> {
    info.is_resource_request.then(|| ObjectRef {
        resource: &info.resource,
        namespace: &info.namespace,
        name: &info.name,
        uid: "",
        api_group: &info.api_group,
        api_version: &info.api_version,
        resource_version: "",
        subresource: &info.subresource,
    })
}

/// A timestamp with microseconds, as upstream's `MicroTime`.
pub(crate) fn micro_time() -> String {
    let now = time::OffsetDateTime::now_utc();
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute(),
        now.second(),
        now.microsecond()
    )
}

/// `responseStatus`: a `Status` in Go's field order.
#[derive(Serialize)]
pub(crate) struct ResponseStatus {
    metadata: serde_json::Map<String, Value>,
    #[serde(skip_serializing_if = "Value::is_null")]
    status: Value,
    #[serde(skip_serializing_if = "Value::is_null")]
    message: Value,
    #[serde(skip_serializing_if = "Value::is_null")]
    reason: Value,
    #[serde(skip_serializing_if = "Value::is_null")]
    details: Value,
    code: u16,
}

impl ResponseStatus {
    /// A status of only a code and a message (what upstream's failed authentication event
    /// carries).
    pub(crate) fn with_message(code: u16, message: String) -> Self {
        ResponseStatus {
            metadata: serde_json::Map::new(),
            status: Value::Null,
            message: Value::String(message),
            reason: Value::Null,
            details: Value::Null,
            code,
        }
    }
}

/// The `responseStatus` of an answer: the code, and for failures the `Status` body's fields.
pub(crate) fn response_status(code: u16, body: &[u8]) -> ResponseStatus {
    let mut status = ResponseStatus {
        metadata: serde_json::Map::new(),
        status: Value::Null,
        message: Value::Null,
        reason: Value::Null,
        details: Value::Null,
        code,
    };
    if code >= 300
        && let Ok(mut body) = serde_json::from_slice::<Value>(body)
        && body["kind"] == "Status"
    {
        status.status = body["status"].take();
        status.message = body["message"].take();
        status.reason = body["reason"].take();
        status.details = body["details"].take();
    }
    status
}

/// A body as the event's object, as it was written (JSON), or Kubernetes protobuf decoded as
/// upstream logs it; nothing for other encodings.
pub(crate) fn object_of(body: &[u8]) -> Option<Box<RawValue>> {
    if capstan_api::protobuf::is_protobuf(body) {
        let (_, _, object) = capstan_api::protobuf::decode(body).ok()?;
        return RawValue::from_string(object.to_string()).ok();
    }
    if body.trim_ascii_start().first() != Some(&b'{') {
        return None;
    }
    let text = std::str::from_utf8(body).ok()?;
    RawValue::from_string(text.trim().to_owned()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(method: &str, path: &str) -> RequestInfo {
        RequestInfo::new(method, path, "")
    }

    fn user(name: &str, groups: &[&str]) -> User {
        User {
            name: name.into(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
            ..User::default()
        }
    }

    const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  users: ["system:kube-proxy"]
  verbs: ["watch"]
- level: RequestResponse
  resources:
  - group: ""
    resources: ["configmaps", "pods/log", "*/status"]
- level: Request
  namespaces: ["kube-system"]
  omitStages: [ResponseStarted]
- level: Metadata
  nonResourceURLs: ["/healthz*", "/version"]
- level: Metadata
  userGroups: ["devs"]
"#;

    #[test]
    fn the_first_matching_rule_decides() {
        let policy = Policy::parse(POLICY).unwrap();
        let alice = user("alice", &["devs"]);
        let level = |u: &User, i: &RequestInfo| policy.evaluate(u, i).0;
        assert_eq!(
            level(
                &alice,
                &info("POST", "/api/v1/namespaces/default/configmaps")
            ),
            Level::RequestResponse
        );
        assert_eq!(
            level(
                &alice,
                &info("GET", "/api/v1/namespaces/default/pods/p/log")
            ),
            Level::RequestResponse
        );
        assert_eq!(
            level(
                &alice,
                &info(
                    "PUT",
                    "/apis/apps/v1/namespaces/default/deployments/d/status"
                )
            ),
            Level::Metadata,
            "*/status names the core group only"
        );
        assert_eq!(
            level(
                &alice,
                &info("PUT", "/api/v1/namespaces/default/pods/p/status")
            ),
            Level::RequestResponse
        );
        let (l, omit) = policy.evaluate(
            &alice,
            &info("GET", "/api/v1/namespaces/kube-system/secrets"),
        );
        assert_eq!(l, Level::Request);
        assert_eq!(omit, ["RequestReceived", "ResponseStarted"]);
        assert_eq!(
            level(&user("bob", &[]), &info("GET", "/healthz/ready")),
            Level::Metadata
        );
        assert_eq!(
            level(&user("bob", &[]), &info("GET", "/api/v1/pods")),
            Level::None
        );
        assert_eq!(
            level(
                &user("system:kube-proxy", &["devs"]),
                &info("GET", "/api/v1/services?watch=1")
            ),
            Level::Metadata
        );
    }

    #[test]
    fn bad_policies_are_refused_with_the_field() {
        let header = "apiVersion: audit.k8s.io/v1\nkind: Policy\n";
        for (rules, error) in [
            (
                "rules: [{level: Loud}]",
                "rules[0].level: Unsupported value: \"Loud\"",
            ),
            (
                "rules: [{level: None, omitStages: [Later]}]",
                "rules[0].omitStages: Unsupported value",
            ),
            (
                "rules: [{level: None, nonResourceURLs: [/x], namespaces: [a]}]",
                "cannot apply to both regular resources and non-resource URLs",
            ),
        ] {
            let got = Policy::parse(&format!("{header}{rules}")).unwrap_err();
            assert!(got.contains(error), "{got}");
        }
        assert!(Policy::parse("kind: Policy\napiVersion: audit.k8s.io/v2\n").is_err());
    }

    #[tokio::test]
    async fn events_are_written_in_gos_order_and_the_log_rotates() {
        let dir = tempfile::tempdir().unwrap();
        let policy_file = dir.path().join("policy.yaml");
        std::fs::write(&policy_file, POLICY).unwrap();
        let auditor = Auditor::new(
            &policy_file,
            Some(LogSettings {
                path: dir.path().join("audit.log"),
                max_size_mb: 1,
                max_backups: 2,
                max_age_days: 0,
            }),
            None,
        )
        .unwrap();
        let alice = user("alice", &["devs", "system:authenticated"]);
        let request = info("POST", "/api/v1/namespaces/default/configmaps");
        let object = object_of(
            serde_json::json!({"kind": "ConfigMap", "data": {"k": "x".repeat(200_000)}})
                .to_string()
                .as_bytes(),
        )
        .unwrap();
        let ips = vec!["127.0.0.1".to_owned()];
        let event = Event {
            kind: "Event",
            api_version: "audit.k8s.io/v1",
            level: Level::RequestResponse,
            audit_id: "id-1",
            stage: "ResponseComplete",
            request_uri: "/api/v1/namespaces/default/configmaps",
            verb: &request.verb,
            user: EventUser::of(&alice),
            impersonated_user: None,
            source_ips: &ips,
            user_agent: "kubectl/v1.33.0",
            object_ref: object_ref(&request),
            response_status: Some(response_status(201, b"")),
            request_object: Some(&object),
            response_object: None,
            request_received_timestamp: "2026-12-06T17:00:00.000001Z",
            stage_timestamp: "2026-12-06T17:00:00.000002Z".to_owned(),
            annotations: Default::default(),
        };
        assert!(auditor.write(&event).await);
        let text = std::fs::read_to_string(dir.path().join("audit.log")).unwrap();
        assert!(text.starts_with(
            r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"RequestResponse","auditID":"id-1","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/default/configmaps","verb":"create","user":{"username":"alice","groups":["devs","system:authenticated"]},"sourceIPs":["127.0.0.1"],"userAgent":"kubectl/v1.33.0","objectRef":{"resource":"configmaps","namespace":"default","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":201},"requestObject":{"#
        ), "{}", &text[..400]);
        // Six more 200 kB events pass 1 MB: the log rotates, and two backups are kept.
        for _ in 0..12 {
            auditor.write(&event).await;
        }
        let backups = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with("audit-"))
            .count();
        assert_eq!(backups, 2);
        assert!(
            std::fs::metadata(dir.path().join("audit.log"))
                .unwrap()
                .len()
                <= 1024 * 1024
        );
    }

    #[test]
    fn annotations_keep_the_first_value_and_heed_their_level() {
        let metadata = Annotations::new(Level::Metadata);
        metadata.add("a", "1");
        metadata.add("a", "2");
        metadata.add_at(Level::Metadata, "b", "1");
        metadata.add_at(Level::Request, "patch", "[]");
        let snapshot = metadata.snapshot();
        assert_eq!(snapshot.get("a").map(String::as_str), Some("1"));
        assert_eq!(snapshot.get("b").map(String::as_str), Some("1"));
        assert!(!snapshot.contains_key("patch"));
        for level in [Level::Request, Level::RequestResponse] {
            let annotations = Annotations::new(level);
            annotations.add_at(Level::Request, "patch", "[]");
            assert_eq!(annotations.snapshot().len(), 1);
        }
    }
}

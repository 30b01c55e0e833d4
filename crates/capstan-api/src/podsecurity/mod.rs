//! Pod Security Standards: upstream's `k8s.io/pod-security-admission` rules, shared by the API
//! server's PodSecurity admission plugin and anything else that judges a pod against a level.
//!
//! - [`Level`], [`Version`], [`LevelVersion`] and [`Policy`]: the levels (`privileged`,
//!   `baseline`, `restricted`), the policy versions (`latest`, `v1.0`, … `v1.33`, any `v1.x`),
//!   and a namespace's enforce/audit/warn policy resolved from its
//!   `pod-security.kubernetes.io/*` labels over defaults ([`policy_from_labels`], with
//!   upstream's field errors for a bad level or version).
//! - [`evaluate`]: a pod's metadata and spec (as JSON) against one level and version, giving the
//!   violated checks' `{reason, detail}` in upstream's order (the baseline checks by id, then
//!   the restricted ones by id; at `restricted` a baseline check a restricted check overrides is
//!   left out). Each check with its versions lives in [`checks`].
//! - [`forbidden_detail`] and [`forbidden_reason`]: the violations as upstream joins them into
//!   its messages (`reason (detail), reason (detail)` and `reason, reason`).

mod checks;
#[cfg(test)]
mod tests;

use std::fmt;

use serde_json::Value;

use crate::field::{FieldError, Path};

/// The label naming a namespace's enforced level.
pub const ENFORCE_LEVEL_LABEL: &str = "pod-security.kubernetes.io/enforce";
/// The label naming the version of a namespace's enforced level.
pub const ENFORCE_VERSION_LABEL: &str = "pod-security.kubernetes.io/enforce-version";
/// The label naming a namespace's audited level.
pub const AUDIT_LEVEL_LABEL: &str = "pod-security.kubernetes.io/audit";
/// The label naming the version of a namespace's audited level.
pub const AUDIT_VERSION_LABEL: &str = "pod-security.kubernetes.io/audit-version";
/// The label naming the level a namespace warns about.
pub const WARN_LEVEL_LABEL: &str = "pod-security.kubernetes.io/warn";
/// The label naming the version of the level a namespace warns about.
pub const WARN_VERSION_LABEL: &str = "pod-security.kubernetes.io/warn-version";

/// A Pod Security Standards level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Level {
    /// Unrestricted.
    Privileged,
    /// Prevents known privilege escalations.
    Baseline,
    /// Hardened, current best practice.
    Restricted,
}

impl Level {
    /// The level's name in labels and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Upstream's error text for a value that is not a level.
pub const LEVEL_ERROR: &str = "must be one of privileged, baseline, restricted";
/// Upstream's error text for a value that is not a version.
pub const VERSION_ERROR: &str = "must be \"latest\" or \"v1.x\"";

/// Parses a level; anything else is an error (upstream then evaluates `restricted`).
pub fn parse_level(text: &str) -> Result<Level, &'static str> {
    match text {
        "privileged" => Ok(Level::Privileged),
        "baseline" => Ok(Level::Baseline),
        "restricted" => Ok(Level::Restricted),
        _ => Err(LEVEL_ERROR),
    }
}

/// A policy version: `v1.<minor>` or `latest`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Version {
    /// `v1.<minor>`.
    Minor(u32),
    /// The newest rules.
    Latest,
}

impl Version {
    /// Whether rules introduced at `v1.<minor>` apply at this version.
    fn includes(self, minor: u32) -> bool {
        match self {
            Version::Latest => true,
            Version::Minor(v) => v >= minor,
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Version::Latest => f.write_str("latest"),
            Version::Minor(minor) => write!(f, "v1.{minor}"),
        }
    }
}

/// Parses a version: `latest` or `v1.<minor>` (no leading zeros); anything else is an error
/// (upstream then evaluates `latest`).
pub fn parse_version(text: &str) -> Result<Version, &'static str> {
    if text == "latest" {
        return Ok(Version::Latest);
    }
    let minor = text.strip_prefix("v1.").ok_or(VERSION_ERROR)?;
    let well_formed = !minor.is_empty()
        && minor.bytes().all(|b| b.is_ascii_digit())
        && (minor == "0" || !minor.starts_with('0'));
    if !well_formed {
        return Err(VERSION_ERROR);
    }
    minor.parse().map(Version::Minor).map_err(|_| VERSION_ERROR)
}

/// A level at a version, printed as upstream's `restricted:latest`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LevelVersion {
    /// The level.
    pub level: Level,
    /// The version of its rules.
    pub version: Version,
}

impl LevelVersion {
    /// `privileged:latest`, upstream's default for every mode.
    pub const PRIVILEGED: LevelVersion = LevelVersion {
        level: Level::Privileged,
        version: Version::Latest,
    };
}

impl fmt::Display for LevelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.level, self.version)
    }
}

/// A namespace's policy: what is enforced, audited and warned about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Pods that violate it are refused.
    pub enforce: LevelVersion,
    /// Violations are recorded in the audit log.
    pub audit: LevelVersion,
    /// Violations are returned to the client as warnings.
    pub warn: LevelVersion,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            enforce: LevelVersion::PRIVILEGED,
            audit: LevelVersion::PRIVILEGED,
            warn: LevelVersion::PRIVILEGED,
        }
    }
}

impl Policy {
    /// Whether nothing is enforced, audited or warned about.
    pub fn fully_privileged(&self) -> bool {
        self.enforce.level == Level::Privileged
            && self.audit.level == Level::Privileged
            && self.warn.level == Level::Privileged
    }

    /// Whether this policy judges as `other` does: each mode at the same level and version,
    /// or privileged in both (whose version does not matter).
    pub fn equivalent(&self, other: &Policy) -> bool {
        let same = |a: LevelVersion, b: LevelVersion| {
            a == b || (a.level == Level::Privileged && b.level == Level::Privileged)
        };
        same(self.enforce, other.enforce)
            && same(self.audit, other.audit)
            && same(self.warn, other.warn)
    }

    /// The modes that are not privileged and that `labels` set (a level or a version label), as
    /// upstream prints them: `enforce=restricted:latest, warn=baseline:v1.30`.
    pub fn compact_string(&self, labels: Option<&serde_json::Map<String, Value>>) -> String {
        let set = |key: &str| labels.is_some_and(|labels| labels.contains_key(key));
        [
            (
                "enforce",
                self.enforce,
                ENFORCE_LEVEL_LABEL,
                ENFORCE_VERSION_LABEL,
            ),
            ("audit", self.audit, AUDIT_LEVEL_LABEL, AUDIT_VERSION_LABEL),
            ("warn", self.warn, WARN_LEVEL_LABEL, WARN_VERSION_LABEL),
        ]
        .iter()
        .filter(|(_, lv, level, version)| {
            lv.level != Level::Privileged && (set(level) || set(version))
        })
        .map(|(mode, lv, _, _)| format!("{mode}={lv}"))
        .collect::<Vec<_>>()
        .join(", ")
    }
}

/// A namespace's policy from its labels over `defaults`, with an error for each label whose
/// value is not a level or a version. A bad enforce level enforces `restricted` (fail closed), a
/// bad audit or warn level is `privileged` (fail open), a bad version is `latest`. Without a
/// warn label, a stricter enforce label is warned about too.
pub fn policy_from_labels(
    labels: Option<&serde_json::Map<String, Value>>,
    defaults: &Policy,
) -> (Policy, Vec<FieldError>) {
    let mut policy = *defaults;
    let mut errors = Vec::new();
    let Some(labels) = labels.filter(|labels| !labels.is_empty()) else {
        return (policy, errors);
    };
    let path = Path::new("metadata").child("labels");
    let label = |name: &str| -> Option<String> {
        labels
            .get(name)
            .map(|value| value.as_str().unwrap_or_default().to_owned())
    };
    let mut bad = |name: &str, value: &str, error: &str| {
        errors.push(FieldError::invalid(&path.key(name), value, error));
    };
    let enforce_set = label(ENFORCE_LEVEL_LABEL).is_some_and(|v| parse_level(&v).is_ok());
    let warn_level_set = label(WARN_LEVEL_LABEL).is_some();
    let warn_version_set = label(WARN_VERSION_LABEL).is_some();
    let modes: [(&mut LevelVersion, &str, &str, Level); 3] = [
        (
            &mut policy.enforce,
            ENFORCE_LEVEL_LABEL,
            ENFORCE_VERSION_LABEL,
            Level::Restricted,
        ),
        (
            &mut policy.audit,
            AUDIT_LEVEL_LABEL,
            AUDIT_VERSION_LABEL,
            Level::Privileged,
        ),
        (
            &mut policy.warn,
            WARN_LEVEL_LABEL,
            WARN_VERSION_LABEL,
            Level::Privileged,
        ),
    ];
    for (mode, level_label, version_label, on_error) in modes {
        if let Some(value) = label(level_label) {
            mode.level = parse_level(&value).unwrap_or_else(|error| {
                bad(level_label, &value, error);
                on_error
            });
        }
        if let Some(value) = label(version_label) {
            mode.version = parse_version(&value).unwrap_or_else(|error| {
                bad(version_label, &value, error);
                Version::Latest
            });
        }
    }
    // A valid enforce label stricter than the warn level, with no warn label, warns at the
    // enforce level too (and its version, unless a warn version is given), as upstream since
    // 1.26: workloads then get the warnings their pods' refusals would bring.
    if enforce_set && !warn_level_set && policy.enforce.level > policy.warn.level {
        policy.warn.level = policy.enforce.level;
        if !warn_version_set {
            policy.warn.version = policy.enforce.version;
        }
    }
    (policy, errors)
}

/// One violated check: upstream's reason and detail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// What is violated (`allowPrivilegeEscalation != false`).
    pub reason: String,
    /// Where (`container "c" must set securityContext.allowPrivilegeEscalation=false`); may be
    /// empty.
    pub detail: String,
}

/// The checks `pod` (metadata and spec, as JSON) violates at `level_version`, in upstream's
/// order; none at `privileged`.
pub fn evaluate(metadata: &Value, spec: &Value, level_version: LevelVersion) -> Vec<Violation> {
    checks::evaluate(metadata, spec, level_version)
}

/// The violations as upstream's messages carry them: `reason (detail)` joined by `, `.
pub fn forbidden_detail(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(|v| {
            if v.detail.is_empty() {
                v.reason.clone()
            } else {
                format!("{} ({})", v.reason, v.detail)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The violations' reasons joined by `, ` (the namespace check's per-pod warnings).
pub fn forbidden_reason(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(|v| v.reason.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

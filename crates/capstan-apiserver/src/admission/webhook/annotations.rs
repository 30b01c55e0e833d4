//! The audit annotations upstream's mutating webhook plugin adds for each webhook it calls,
//! keyed by the round (0, or 1 when the webhook is called again) and the webhook's index
//! among all the mutating webhooks (configurations by name, each one's webhooks in order):
//!
//! - `mutation.webhook.admission.k8s.io/round_R_index_I`: whether the call changed the object,
//!   `{"configuration":…,"webhook":…,"mutated":…}`, for every call however it ended;
//! - `patch.webhook.admission.k8s.io/round_R_index_I`: the JSON patch it gave, once applied,
//!   `{"configuration":…,"webhook":…,"patch":[…],"patchType":"JSONPatch"}`, in the events of
//!   requests audited at `Request` or above only (the patch may carry what the request did);
//! - `failed-open.mutation.webhook.admission.k8s.io/round_R_index_I`: the webhook's name, when
//!   calling it failed and `failurePolicy: Ignore` let the request go on.
//!
//! A validating webhook that fails open adds
//! `failed-open.validating.webhook.admission.k8s.io/round_0_index_I`, its name, where the index
//! counts only the validating webhooks that matched the request.
//!
//! The values are written as Go's `encoding/json` writes upstream's structs: members in their
//! order, strings HTML-safe, and the patch as the `map[string]*json.RawMessage` operations
//! it was decoded into (members in byte order, each value's own text compacted).

use std::collections::BTreeMap;

use serde_json::value::RawValue;

use super::call::Hook;
use crate::audit::{Annotations, Level};

const MUTATION: &str = "mutation.webhook.admission.k8s.io/";
const PATCH: &str = "patch.webhook.admission.k8s.io/";
const FAILED_OPEN: &str = "failed-open.mutation.webhook.admission.k8s.io/";
const VALIDATING_FAILED_OPEN: &str = "failed-open.validating.webhook.admission.k8s.io/";

/// Which call of a mutating webhook this is: upstream's round and index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Invocation {
    /// 0 for the first pass, 1 when called again (`reinvocationPolicy: IfNeeded`).
    pub round: u8,
    /// The webhook's place among all the mutating webhooks configured.
    pub index: usize,
}

impl Invocation {
    fn key(self, prefix: &str) -> String {
        format!("{prefix}round_{}_index_{}", self.round, self.index)
    }

    /// Notes that `hook` was called and whether it changed the object.
    pub(crate) fn mutated(self, audit: Option<&Annotations>, hook: &Hook, mutated: bool) {
        if let Some(audit) = audit {
            audit.add(
                self.key(MUTATION),
                mutation_value(&hook.configuration, &hook.name, mutated),
            );
        }
    }

    /// Notes the JSON patch `hook` gave (nothing for an empty one), for requests audited at
    /// `Request` or above.
    pub(crate) fn patched(self, audit: Option<&Annotations>, hook: &Hook, patch: &[u8]) {
        if let Some(audit) = audit
            && audit.kept_at(Level::Request)
            && let Some(value) = patch_value(&hook.configuration, &hook.name, patch)
        {
            audit.add_at(Level::Request, self.key(PATCH), value);
        }
    }

    /// Notes that calling `hook` failed and the request went on.
    pub(crate) fn failed_open(self, audit: Option<&Annotations>, hook: &Hook) {
        if let Some(audit) = audit {
            audit.add(self.key(FAILED_OPEN), hook.name.clone());
        }
    }
}

/// Notes that calling the validating webhook `hook`, the `index`th of those that matched the
/// request, failed and the request went on.
pub(crate) fn validating_failed_open(audit: Option<&Annotations>, hook: &Hook, index: usize) {
    if let Some(audit) = audit {
        let at = Invocation { round: 0, index };
        audit.add(at.key(VALIDATING_FAILED_OPEN), hook.name.clone());
    }
}

/// Upstream's `MutationAuditAnnotation`.
pub(crate) fn mutation_value(configuration: &str, webhook: &str, mutated: bool) -> String {
    let mut out = Vec::with_capacity(64 + configuration.len() + webhook.len());
    head(configuration, webhook, &mut out);
    out.extend_from_slice(if mutated {
        b",\"mutated\":true}"
    } else {
        b",\"mutated\":false}"
    });
    String::from_utf8(out).unwrap_or_default()
}

/// Upstream's `PatchAuditAnnotation` of a JSON patch; `None` when it has no operations (or is
/// not a list of operations, which upstream refuses before applying it).
pub(crate) fn patch_value(configuration: &str, webhook: &str, patch: &[u8]) -> Option<String> {
    let operations: Vec<BTreeMap<String, Box<RawValue>>> = serde_json::from_slice(patch).ok()?;
    if operations.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(64 + configuration.len() + webhook.len() + patch.len());
    head(configuration, webhook, &mut out);
    out.extend_from_slice(b",\"patch\":[");
    for (i, operation) in operations.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'{');
        for (j, (member, value)) in operation.iter().enumerate() {
            if j > 0 {
                out.push(b',');
            }
            capstan_api::gojson::write_string(member, &mut out);
            out.push(b':');
            compact(value.get(), &mut out);
        }
        out.push(b'}');
    }
    out.extend_from_slice(b"],\"patchType\":\"JSONPatch\"}");
    String::from_utf8(out).ok()
}

/// `{"configuration":…,"webhook":…` of both values.
fn head(configuration: &str, webhook: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"configuration\":");
    capstan_api::gojson::write_string(configuration, out);
    out.extend_from_slice(b",\"webhook\":");
    capstan_api::gojson::write_string(webhook, out);
}

/// Valid JSON text as Go writes a `json.RawMessage`: whitespace between tokens dropped, `<`,
/// `>`, `&` and U+2028/U+2029 escaped; everything else (key order, other escapes) as given.
fn compact(text: &str, out: &mut Vec<u8>) {
    let bytes = text.as_bytes();
    let (mut in_string, mut escaped) = (false, false);
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'<' | b'>' | b'&' => {
                out.extend_from_slice(format!("\\u{:04x}", b).as_bytes());
            }
            0xe2 if bytes.get(i + 1) == Some(&0x80)
                && matches!(bytes.get(i + 2), Some(0xa8 | 0xa9)) =>
            {
                out.extend_from_slice(if bytes[i + 2] == 0xa8 {
                    b"\\u2028"
                } else {
                    b"\\u2029"
                });
                i += 3;
                continue;
            }
            b' ' | b'\t' | b'\n' | b'\r' if !in_string => {}
            _ => out.push(b),
        }
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
        } else if b == b'"' {
            in_string = true;
        }
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_written_as_upstreams_structs() {
        assert_eq!(
            mutation_value("conf", "m.example.com", true),
            r#"{"configuration":"conf","webhook":"m.example.com","mutated":true}"#
        );
        assert_eq!(
            mutation_value("a<b", "w", false),
            r#"{"configuration":"a\u003cb","webhook":"w","mutated":false}"#
        );
        // Each operation's members in byte order; values as sent, compacted, HTML-safe.
        let patch = br#"[ {"path": "/metadata/labels", "op": "add",
            "value": {"z": "<1>", "a": [1, 2.50, null], "s": "a \"b\" \\ c"}},
            {"op":"remove","path":"/x"} ]"#;
        assert_eq!(
            patch_value("conf", "m.example.com", patch).unwrap(),
            concat!(
                r#"{"configuration":"conf","webhook":"m.example.com","patch":["#,
                r#"{"op":"add","path":"/metadata/labels","value":{"z":"\u003c1\u003e","a":[1,2.50,null],"s":"a \"b\" \\ c"}},"#,
                r#"{"op":"remove","path":"/x"}],"patchType":"JSONPatch"}"#
            )
        );
        // An empty patch, or one that is not a list of operations, is not noted.
        assert_eq!(patch_value("conf", "w", b"[]"), None);
        assert_eq!(patch_value("conf", "w", b"{}"), None);
        let mut out = Vec::new();
        compact("\"\u{2028} \" ", &mut out);
        assert_eq!(out, br#""\u2028 ""#);
    }

    #[test]
    fn invocations_note_their_round_and_index_at_the_request_level() {
        let hook: k8s_openapi::api::admissionregistration::v1::MutatingWebhook =
            serde_json::from_value(serde_json::json!({
                "name": "m.example.com", "sideEffects": "None",
                "admissionReviewVersions": ["v1"], "clientConfig": {"url": "https://127.0.0.1"},
            }))
            .unwrap();
        let hook = Hook::mutating("conf", &hook);
        let patch = br#"[{"op":"add","path":"/a","value":1}]"#;
        let at = Invocation { round: 1, index: 2 };
        let metadata = Annotations::new(Level::Metadata);
        at.mutated(Some(&metadata), &hook, true);
        at.patched(Some(&metadata), &hook, patch);
        at.failed_open(Some(&metadata), &hook);
        let noted = metadata.snapshot();
        assert_eq!(
            noted.keys().collect::<Vec<_>>(),
            [
                "failed-open.mutation.webhook.admission.k8s.io/round_1_index_2",
                "mutation.webhook.admission.k8s.io/round_1_index_2",
            ]
        );
        assert_eq!(
            noted["failed-open.mutation.webhook.admission.k8s.io/round_1_index_2"],
            "m.example.com"
        );
        let request = Annotations::new(Level::Request);
        at.patched(Some(&request), &hook, patch);
        assert_eq!(
            request.snapshot()["patch.webhook.admission.k8s.io/round_1_index_2"],
            r#"{"configuration":"conf","webhook":"m.example.com","patch":[{"op":"add","path":"/a","value":1}],"patchType":"JSONPatch"}"#
        );
        // A request that is not audited notes nothing.
        at.mutated(None, &hook, true);
        validating_failed_open(Some(&request), &hook, 3);
        assert_eq!(
            request.snapshot()["failed-open.validating.webhook.admission.k8s.io/round_0_index_3"],
            "m.example.com"
        );
    }
}

//! `flowcontrol.apiserver.k8s.io/v1` FlowSchemas and PriorityLevelConfigurations, as upstream
//! validates them: precedence bounds (1 only for `exempt`), a referenced priority level,
//! subjects of a known kind with their one matching member, resource and non-resource rules
//! with supported verbs and wildcards alone, level types with their matching configuration,
//! limits that are positive and hands no larger than the deck, and unique condition types.

use std::collections::BTreeSet;

use k8s_openapi::api::flowcontrol::v1::{
    FlowSchema, NonResourcePolicyRule, PolicyRulesWithSubjects, PriorityLevelConfiguration,
    ResourcePolicyRule, Subject,
};

use crate::field::{BadValue, FieldError, Path};
use crate::validation::meta::{go_string_slice, validate_object_meta};
use crate::validation::names::{NameValidator, is_dns1123_label, is_dns1123_subdomain};

const SUPPORTED_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "proxy",
    "update",
    "watch",
];
const MAX_PRECEDENCE: i32 = 10000;
const MAX_QUEUES: i32 = 10_000_000;
/// The most hash bits a shuffle-sharding deal may need.
const MAX_HASH_BITS: f64 = 60.0;

fn has_wildcard(values: &[String]) -> bool {
    values.iter().any(|v| v == "*")
}

/// A FlowSchema (creates and updates alike, as upstream).
pub fn validate_flow_schema(fs: &FlowSchema) -> Vec<FieldError> {
    let mut errs = validate_object_meta(
        &fs.metadata,
        false,
        NameValidator::DnsSubdomain,
        &Path::new("metadata"),
    );
    let name = fs.metadata.name.as_deref().unwrap_or_default();
    let spec = fs.spec.clone().unwrap_or_default();
    let path = Path::new("spec");
    let precedence = spec.matching_precedence.unwrap_or(0);
    if precedence <= 0 {
        errs.push(FieldError::invalid(
            &path.child("matchingPrecedence"),
            precedence,
            "must be a positive value",
        ));
    }
    if precedence > MAX_PRECEDENCE {
        errs.push(FieldError::invalid(
            &path.child("matchingPrecedence"),
            precedence,
            &format!("must not be greater than {MAX_PRECEDENCE}"),
        ));
    }
    if precedence == 1 && name != "exempt" {
        errs.push(FieldError::invalid(
            &path.child("matchingPrecedence"),
            precedence,
            "only the schema named 'exempt' may have matchingPrecedence 1",
        ));
    }
    if let Some(method) = &spec.distinguisher_method
        && method.type_ != "ByNamespace"
        && method.type_ != "ByUser"
    {
        errs.push(FieldError::not_supported(
            &path.child("distinguisherMethod").child("type"),
            BadValue::Other(format!("{{Type:{}}}", method.type_)),
            &["ByNamespace", "ByUser"],
        ));
    }
    let level = &spec.priority_level_configuration.name;
    let level_path = path.child("priorityLevelConfiguration").child("name");
    if level.is_empty() {
        errs.push(FieldError::required(
            &level_path,
            "must reference a priority level",
        ));
    } else {
        for msg in is_dns1123_subdomain(level) {
            errs.push(FieldError::invalid(&level_path, level.as_str(), &msg));
        }
    }
    for (i, rule) in spec.rules.iter().flatten().enumerate() {
        errs.extend(validate_rule(rule, &path.child("rules").index(i)));
    }
    errs.extend(validate_conditions(
        fs.status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .map(|c| c.type_.as_deref().unwrap_or_default()),
    ));
    errs
}

/// A FlowSchema update: the same rules as a create.
pub fn validate_flow_schema_update(new: &FlowSchema, _old: &FlowSchema) -> Vec<FieldError> {
    validate_flow_schema(new)
}

/// A FlowSchema status update.
pub fn validate_flow_schema_status_update(new: &FlowSchema, _old: &FlowSchema) -> Vec<FieldError> {
    validate_conditions(
        new.status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .map(|c| c.type_.as_deref().unwrap_or_default()),
    )
}

/// Condition types: present and not repeated.
fn validate_conditions<'a>(types: impl Iterator<Item = &'a str>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut seen = BTreeSet::new();
    let path = Path::new("status").child("conditions");
    for (i, kind) in types.enumerate() {
        if !seen.insert(kind) {
            errs.push(FieldError::duplicate(&path.index(i).child("type"), kind));
        }
        if kind.is_empty() {
            errs.push(FieldError::required(
                &path.index(i).child("type"),
                "must not be empty",
            ));
        }
    }
    errs
}

fn validate_rule(rule: &PolicyRulesWithSubjects, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if rule.subjects.is_empty() {
        errs.push(FieldError::required(
            &path.child("subjects"),
            "subjects must contain at least one value",
        ));
    }
    for (i, subject) in rule.subjects.iter().enumerate() {
        errs.extend(validate_subject(subject, &path.child("subjects").index(i)));
    }
    let resource_rules = rule.resource_rules.as_deref().unwrap_or_default();
    let non_resource_rules = rule.non_resource_rules.as_deref().unwrap_or_default();
    if resource_rules.is_empty() && non_resource_rules.is_empty() {
        errs.push(FieldError::required(
            path,
            "at least one of resourceRules and nonResourceRules has to be non-empty",
        ));
    }
    for (i, r) in resource_rules.iter().enumerate() {
        errs.extend(validate_resource_rule(
            r,
            &path.child("resourceRules").index(i),
        ));
    }
    for (i, r) in non_resource_rules.iter().enumerate() {
        errs.extend(validate_non_resource_rule(
            r,
            &path.child("nonResourceRules").index(i),
        ));
    }
    errs
}

fn validate_subject(subject: &Subject, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    // Each kind's member, in upstream's order of the "forbidden" checks.
    let members = [
        (
            "serviceAccount",
            "ServiceAccount",
            subject.service_account.is_some(),
        ),
        ("user", "User", subject.user.is_some()),
        ("group", "Group", subject.group.is_some()),
    ];
    let Some(&(own, kind, _)) = members.iter().find(|(_, kind, _)| *kind == subject.kind) else {
        errs.push(FieldError::not_supported(
            &path.child("kind"),
            subject.kind.as_str(),
            &["Group", "ServiceAccount", "User"],
        ));
        return errs;
    };
    let p = path.child(own);
    let name = match own {
        "serviceAccount" => subject.service_account.as_ref().map(|sa| &sa.name),
        "user" => subject.user.as_ref().map(|u| &u.name),
        _ => subject.group.as_ref().map(|g| &g.name),
    };
    match name {
        None => errs.push(FieldError::required(
            &p,
            &format!("{own} is required when subject kind is '{kind}'"),
        )),
        Some(name) if name.is_empty() => errs.push(FieldError::required(&p.child("name"), "")),
        Some(name) if own == "serviceAccount" && name != "*" => {
            for msg in is_dns1123_subdomain(name) {
                errs.push(FieldError::invalid(&p.child("name"), name.as_str(), &msg));
            }
        }
        Some(_) => {}
    }
    if let Some(sa) = subject
        .service_account
        .as_ref()
        .filter(|_| own == "serviceAccount")
    {
        if sa.namespace.is_empty() {
            errs.push(FieldError::required(
                &p.child("namespace"),
                "must specify namespace for service account",
            ));
        }
        for msg in is_dns1123_label(&sa.namespace)
            .into_iter()
            .filter(|_| !sa.namespace.is_empty())
        {
            errs.push(FieldError::invalid(
                &p.child("namespace"),
                sa.namespace.as_str(),
                &msg,
            ));
        }
    }
    for (field, other, present) in members {
        if present && field != own {
            errs.push(FieldError::forbidden(
                &path.child(field),
                &format!("{field} is forbidden when subject kind is not '{other}'"),
            ));
        }
    }
    errs
}

fn validate_verbs(verbs: &[String], path: &Path) -> Option<FieldError> {
    if verbs.is_empty() {
        Some(FieldError::required(
            path,
            "verbs must contain at least one value",
        ))
    } else if has_wildcard(verbs) {
        (verbs.len() > 1).then(|| {
            FieldError::invalid(
                path,
                BadValue::Other(go_string_slice(verbs)),
                "if '*' is present, must not specify other verbs",
            )
        })
    } else if verbs.iter().any(|v| !SUPPORTED_VERBS.contains(&v.as_str())) {
        Some(FieldError::not_supported(
            path,
            BadValue::Other(go_string_slice(verbs)),
            SUPPORTED_VERBS,
        ))
    } else {
        None
    }
}

fn validate_resource_rule(rule: &ResourcePolicyRule, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    errs.extend(validate_verbs(&rule.verbs, &path.child("verbs")));
    for (values, field, what) in [
        (&rule.api_groups, "apiGroups", "api group"),
        (&rule.resources, "resources", "resource"),
    ] {
        if values.is_empty() {
            errs.push(FieldError::required(
                &path.child(field),
                &format!("resource rules must supply at least one {what}"),
            ));
        } else if values.len() > 1 && has_wildcard(values) {
            errs.push(FieldError::invalid(
                &path.child(field),
                BadValue::Other(go_string_slice(values)),
                &format!("if '*' is present, must not specify other {what}s"),
            ));
        }
    }
    let namespaces = rule.namespaces.as_deref().unwrap_or_default();
    if namespaces.is_empty() && !rule.cluster_scope.unwrap_or(false) {
        errs.push(FieldError::required(
            &path.child("namespaces"),
            "resource rules that are not cluster scoped must supply at least one namespace",
        ));
    } else if has_wildcard(namespaces) {
        if namespaces.len() > 1 {
            errs.push(FieldError::invalid(
                &path.child("namespaces"),
                BadValue::Other(go_string_slice(namespaces)),
                "if '*' is present, must not specify other namespaces",
            ));
        }
    } else {
        for (i, ns) in namespaces.iter().enumerate() {
            for msg in is_dns1123_label(ns) {
                errs.push(FieldError::invalid(
                    &path.child("namespaces").index(i),
                    ns.as_str(),
                    &format!("each member of this list must be '*' or a DNS-1123 label; {msg}"),
                ));
            }
        }
    }
    errs
}

fn validate_non_resource_rule(rule: &NonResourcePolicyRule, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    errs.extend(validate_verbs(&rule.verbs, &path.child("verbs")));
    let urls = &rule.non_resource_urls;
    let urls_path = path.child("nonResourceURLs");
    if urls.is_empty() {
        errs.push(FieldError::required(
            &urls_path,
            "nonResourceURLs must contain at least one value",
        ));
    } else if has_wildcard(urls) {
        if urls.len() > 1 {
            errs.push(FieldError::invalid(
                &urls_path,
                BadValue::Other(go_string_slice(urls)),
                "if '*' is present, must not specify other non-resource URLs",
            ));
        }
    } else {
        for (i, url) in urls.iter().enumerate() {
            let problem = if url.is_empty() {
                Some("must not be empty")
            } else if url == "/" {
                None
            } else if !url.starts_with('/') {
                Some("must start with slash")
            } else if url.contains(' ') {
                Some("must not contain white-space")
            } else if url.contains("//") {
                Some("must not contain double slash")
            } else {
                let stars = url.matches('*').count();
                (stars > 1 || (stars == 1 && !url.ends_with("/*")))
                    .then_some("wildcard can only do suffix matching")
            };
            if let Some(problem) = problem {
                errs.push(FieldError::invalid(
                    &urls_path.index(i),
                    url.as_str(),
                    problem,
                ));
            }
        }
    }
    errs
}

/// The bits a deal of `hand` cards from a deck of `deck` needs: log2 of deck!/(deck-hand)!.
fn required_entropy_bits(deck: i32, hand: i32) -> f64 {
    (0..hand).map(|i| f64::from(deck - i).log2()).sum()
}

/// A PriorityLevelConfiguration (creates and updates alike, as upstream).
pub fn validate_priority_level(pl: &PriorityLevelConfiguration) -> Vec<FieldError> {
    let mut errs = validate_object_meta(
        &pl.metadata,
        false,
        NameValidator::DnsSubdomain,
        &Path::new("metadata"),
    );
    let name = pl.metadata.name.as_deref().unwrap_or_default();
    let spec = pl.spec.clone().unwrap_or_default();
    let path = Path::new("spec");
    if (name == "exempt") != (spec.type_ == "Exempt") {
        errs.push(FieldError::invalid(
            &path.child("type"),
            spec.type_.as_str(),
            "type must be 'Exempt' if and only if name is 'exempt'",
        ));
    }
    match spec.type_.as_str() {
        "Exempt" => {
            if spec.limited.is_some() {
                errs.push(FieldError::forbidden(
                    &path.child("limited"),
                    "must be nil if the type is not Limited",
                ));
            }
            if let Some(exempt) = &spec.exempt {
                let p = path.child("exempt");
                if let Some(ncs) = exempt.nominal_concurrency_shares.filter(|n| *n < 0) {
                    errs.push(FieldError::invalid(
                        &p.child("nominalConcurrencyShares"),
                        ncs,
                        "must be a non-negative integer",
                    ));
                }
                if let Some(lp) = exempt.lendable_percent.filter(|l| !(0..=100).contains(l)) {
                    errs.push(FieldError::invalid(
                        &p.child("lendablePercent"),
                        lp,
                        "must be between 0 and 100, inclusive",
                    ));
                }
            }
        }
        "Limited" => {
            if spec.exempt.is_some() {
                errs.push(FieldError::forbidden(
                    &path.child("exempt"),
                    "must be nil if the type is Limited",
                ));
            }
            match &spec.limited {
                None => errs.push(FieldError::required(
                    &path.child("limited"),
                    "must not be empty when type is Limited",
                )),
                Some(limited) => {
                    let p = path.child("limited");
                    let ncs = limited.nominal_concurrency_shares.unwrap_or(0);
                    if ncs < 0 {
                        errs.push(FieldError::invalid(
                            &p.child("nominalConcurrencyShares"),
                            ncs,
                            "must be a non-negative integer",
                        ));
                    }
                    if let Some(lp) = limited.lendable_percent.filter(|l| !(0..=100).contains(l)) {
                        errs.push(FieldError::invalid(
                            &p.child("lendablePercent"),
                            lp,
                            "must be between 0 and 100, inclusive",
                        ));
                    }
                    if let Some(b) = limited.borrowing_limit_percent.filter(|b| *b < 0) {
                        errs.push(FieldError::invalid(
                            &p.child("borrowingLimitPercent"),
                            b,
                            "if specified, must be a non-negative integer",
                        ));
                    }
                    let response = limited.limit_response.clone().unwrap_or_default();
                    let rp = p.child("limitResponse");
                    match (response.type_.as_str(), &response.queuing) {
                        ("Reject", Some(_)) => errs.push(FieldError::forbidden(
                            &rp.child("queuing"),
                            "must be nil if limited.limitResponse.type is not Limited",
                        )),
                        ("Reject", None) => {}
                        ("Queue", None) => errs.push(FieldError::required(
                            &rp.child("queuing"),
                            "must not be empty if limited.limitResponse.type is Limited",
                        )),
                        ("Queue", Some(q)) => {
                            let qp = rp.child("queuing");
                            let limit = q.queue_length_limit.unwrap_or(0);
                            if limit <= 0 {
                                errs.push(FieldError::invalid(
                                    &qp.child("queueLengthLimit"),
                                    limit,
                                    "must be positive",
                                ));
                            }
                            let queues = q.queues.unwrap_or(0);
                            if queues <= 0 {
                                errs.push(FieldError::invalid(
                                    &qp.child("queues"),
                                    queues,
                                    "must be positive",
                                ));
                            } else if queues > MAX_QUEUES {
                                errs.push(FieldError::invalid(
                                    &qp.child("queues"),
                                    queues,
                                    &format!("must not be greater than {MAX_QUEUES}"),
                                ));
                            }
                            let hand = q.hand_size.unwrap_or(0);
                            if hand <= 0 {
                                errs.push(FieldError::invalid(
                                    &qp.child("handSize"),
                                    hand,
                                    "must be positive",
                                ));
                            } else if hand > queues {
                                errs.push(FieldError::invalid(
                                    &qp.child("handSize"),
                                    hand,
                                    &format!("should not be greater than queues ({queues})"),
                                ));
                            } else if required_entropy_bits(queues, hand).ceil() > MAX_HASH_BITS {
                                errs.push(FieldError::invalid(
                                    &qp.child("handSize"),
                                    hand,
                                    &format!(
                                        "required entropy bits of deckSize {queues} and handSize {hand} should not be greater than 60"
                                    ),
                                ));
                            }
                        }
                        (other, _) => errs.push(FieldError::not_supported(
                            &rp.child("type"),
                            other,
                            &["Queue", "Reject"],
                        )),
                    }
                }
            }
        }
        other => errs.push(FieldError::not_supported(
            &path.child("type"),
            other,
            &["Exempt", "Limited"],
        )),
    }
    errs.extend(validate_conditions(
        pl.status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .map(|c| c.type_.as_deref().unwrap_or_default()),
    ));
    errs
}

/// A PriorityLevelConfiguration update: the same rules as a create.
pub fn validate_priority_level_update(
    new: &PriorityLevelConfiguration,
    _old: &PriorityLevelConfiguration,
) -> Vec<FieldError> {
    validate_priority_level(new)
}

/// A PriorityLevelConfiguration status update.
pub fn validate_priority_level_status_update(
    new: &PriorityLevelConfiguration,
    _old: &PriorityLevelConfiguration,
) -> Vec<FieldError> {
    validate_conditions(
        new.status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .map(|c| c.type_.as_deref().unwrap_or_default()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn schemas_and_levels_are_checked_as_upstream() {
        let fs: FlowSchema = serde_json::from_value(json!({
            "metadata": {"name": "mine"},
            "spec": {"priorityLevelConfiguration": {"name": ""}, "matchingPrecedence": 1,
                     "rules": [{"subjects": [{"kind": "User"}],
                                "resourceRules": [{"verbs": ["*", "get"], "apiGroups": ["*"], "resources": ["pods"]}]}]},
        }))
        .unwrap();
        let fields: Vec<String> = validate_flow_schema(&fs)
            .iter()
            .map(|e| format!("{}: {}", e.field, e.detail))
            .collect();
        assert_eq!(
            fields,
            [
                "spec.matchingPrecedence: only the schema named 'exempt' may have matchingPrecedence 1",
                "spec.priorityLevelConfiguration.name: must reference a priority level",
                "spec.rules[0].subjects[0].user: user is required when subject kind is 'User'",
                "spec.rules[0].resourceRules[0].verbs: if '*' is present, must not specify other verbs",
                "spec.rules[0].resourceRules[0].namespaces: resource rules that are not cluster scoped must supply at least one namespace",
            ]
        );
        let pl: PriorityLevelConfiguration = serde_json::from_value(json!({
            "metadata": {"name": "mine"},
            "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 5,
                     "limitResponse": {"type": "Queue", "queuing": {"queues": 4, "handSize": 8, "queueLengthLimit": 0}}}},
        }))
        .unwrap();
        let fields: Vec<String> = validate_priority_level(&pl)
            .iter()
            .map(|e| format!("{}: {}", e.field, e.detail))
            .collect();
        assert_eq!(
            fields,
            [
                "spec.limited.limitResponse.queuing.queueLengthLimit: must be positive",
                "spec.limited.limitResponse.queuing.handSize: should not be greater than queues (4)",
            ]
        );
    }
}

//! The RBAC rule algebra upstream's escalation check uses, without I/O: whether the rules a
//! user holds cover the rules a Role, ClusterRole or binding would grant
//! (`component-helpers/auth/rbac/validation`'s `Covers`), and the refusal's text when they do
//! not (`ConfirmNoEscalation`, with the missing rules compacted and printed as
//! `CompactString` prints them).
//!
//! Coverage is literal, as upstream's: a requested `*` verb, group or resource is covered only
//! by a held `*`; a subresource `pods/status` is covered by `pods/status`, `*/status` or `*`;
//! a non-resource URL by itself or a held prefix ending in `*`; an unrestricted rule only by an
//! unrestricted one, a rule restricted to names name by name.

use std::collections::BTreeSet;

use k8s_openapi::api::rbac::v1::PolicyRule;

use crate::field::go_quote;

const ALL: &str = "*";

fn list(values: &Option<Vec<String>>) -> &[String] {
    values.as_deref().unwrap_or_default()
}

fn has(values: &[String], value: &str) -> bool {
    values.iter().any(|v| v == value)
}

fn has_all(values: &[String], wanted: &[String]) -> bool {
    wanted.iter().all(|w| has(values, w))
}

/// A rule broken into rules of one group, resource, verb and (at most) one name, or of one
/// non-resource URL and verb, in upstream's order.
fn breakdown(rule: &PolicyRule) -> Vec<PolicyRule> {
    let one = |v: &str| Some(vec![v.to_owned()]);
    let mut out = Vec::new();
    for group in list(&rule.api_groups) {
        for resource in list(&rule.resources) {
            for verb in &rule.verbs {
                let names = list(&rule.resource_names);
                if names.is_empty() {
                    out.push(PolicyRule {
                        api_groups: one(group),
                        resources: one(resource),
                        verbs: vec![verb.clone()],
                        ..PolicyRule::default()
                    });
                }
                for name in names {
                    out.push(PolicyRule {
                        api_groups: one(group),
                        resources: one(resource),
                        resource_names: one(name),
                        verbs: vec![verb.clone()],
                        ..PolicyRule::default()
                    });
                }
            }
        }
    }
    for url in list(&rule.non_resource_urls) {
        for verb in &rule.verbs {
            out.push(PolicyRule {
                non_resource_urls: one(url),
                verbs: vec![verb.clone()],
                ..PolicyRule::default()
            });
        }
    }
    out
}

fn resources_cover(owner: &[String], wanted: &[String]) -> bool {
    if has(owner, ALL) || has_all(owner, wanted) {
        return true;
    }
    wanted.iter().all(|resource| {
        resource
            .split_once('/')
            .is_some_and(|(_, sub)| has(owner, &format!("*/{sub}")))
    })
}

fn urls_cover(owner: &[String], wanted: &[String]) -> bool {
    wanted.iter().all(|url| {
        owner.iter().any(|held| {
            held == url || (held.ends_with('*') && url.starts_with(held.trim_end_matches('*')))
        })
    })
}

fn rule_covers(owner: &PolicyRule, sub: &PolicyRule) -> bool {
    let verbs = has(&owner.verbs, ALL) || has_all(&owner.verbs, &sub.verbs);
    let groups = has(list(&owner.api_groups), ALL)
        || has_all(list(&owner.api_groups), list(&sub.api_groups));
    let resources = resources_cover(list(&owner.resources), list(&sub.resources));
    let urls = urls_cover(list(&owner.non_resource_urls), list(&sub.non_resource_urls));
    let owner_names = list(&owner.resource_names);
    let names = if list(&sub.resource_names).is_empty() {
        owner_names.is_empty()
    } else {
        owner_names.is_empty() || has_all(owner_names, list(&sub.resource_names))
    };
    verbs && groups && resources && urls && names
}

/// The parts of `requested` that no rule of `owner` covers, broken down into single-verb
/// rules (empty when `owner` covers them all).
pub fn uncovered(owner: &[PolicyRule], requested: &[PolicyRule]) -> Vec<PolicyRule> {
    requested
        .iter()
        .flat_map(breakdown)
        .filter(|sub| !owner.iter().any(|o| rule_covers(o, sub)))
        .collect()
}

/// Merges single-resource rules of the same group, resource and name into one rule with all
/// their verbs, in the order met (upstream's `CompactRules`).
fn compact(rules: Vec<PolicyRule>) -> Vec<PolicyRule> {
    let mut simple: Vec<PolicyRule> = Vec::new();
    let mut other = Vec::new();
    for rule in rules {
        let is_simple = list(&rule.api_groups).len() == 1
            && list(&rule.resources).len() == 1
            && list(&rule.resource_names).len() <= 1
            && list(&rule.non_resource_urls).is_empty();
        if !is_simple {
            other.push(rule);
            continue;
        }
        let same = simple.iter_mut().find(|r| {
            r.api_groups == rule.api_groups
                && r.resources == rule.resources
                && list(&r.resource_names) == list(&rule.resource_names)
        });
        match same {
            Some(existing) => existing.verbs.extend(rule.verbs),
            None => simple.push(rule),
        }
    }
    simple.extend(other);
    simple
}

/// Go's `%q` of a string slice: `["a" "b"]`.
fn go_list(values: &[String]) -> String {
    let quoted: Vec<String> = values.iter().map(|v| go_quote(v)).collect();
    format!("[{}]", quoted.join(" "))
}

/// A rule as upstream's `CompactString` prints it: its non-empty fields in a fixed order,
/// `{APIGroups:[""], Resources:["pods"], Verbs:["get"]}`.
pub fn compact_string(rule: &PolicyRule) -> String {
    let mut parts = Vec::new();
    for (name, values) in [
        ("APIGroups", list(&rule.api_groups)),
        ("Resources", list(&rule.resources)),
        ("NonResourceURLs", list(&rule.non_resource_urls)),
        ("ResourceNames", list(&rule.resource_names)),
        ("Verbs", rule.verbs.as_slice()),
    ] {
        if !values.is_empty() {
            parts.push(format!("{name}:{}", go_list(values)));
        }
    }
    format!("{{{}}}", parts.join(", "))
}

/// Why `user` (in `groups`) may not grant `requested` while holding `owner`, as upstream's
/// `ConfirmNoEscalation` words it (the missing rules compacted, one a line, sorted), with the
/// errors met while resolving what the user holds; `None` when nothing is missing.
pub fn escalation(
    user: &str,
    groups: &[String],
    owner: &[PolicyRule],
    requested: &[PolicyRule],
    resolution_errors: &[String],
) -> Option<String> {
    let missing = uncovered(owner, requested);
    if missing.is_empty() {
        return None;
    }
    let lines: BTreeSet<String> = compact(missing).iter().map(compact_string).collect();
    let mut message = format!(
        "user {} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        go_quote(user),
        go_list(groups),
        lines.into_iter().collect::<Vec<_>>().join("\n")
    );
    if !resolution_errors.is_empty() {
        // Go prints `[]error{aggregate}`: one error as itself, several as `[a, b]`.
        let mut unique: Vec<&String> = Vec::new();
        for error in resolution_errors {
            if !unique.contains(&error) {
                unique.push(error);
            }
        }
        let aggregate = match unique.as_slice() {
            [one] => (*one).clone(),
            many => format!(
                "[{}]",
                many.iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        message.push_str(&format!("; resolution errors: [{aggregate}]"));
    }
    Some(message)
}

/// The rules of full authority: what a user must hold to write an aggregated ClusterRole.
pub fn full_authority() -> Vec<PolicyRule> {
    let all = || Some(vec![ALL.to_owned()]);
    vec![
        PolicyRule {
            api_groups: all(),
            resources: all(),
            verbs: vec![ALL.to_owned()],
            ..PolicyRule::default()
        },
        PolicyRule {
            non_resource_urls: all(),
            verbs: vec![ALL.to_owned()],
            ..PolicyRule::default()
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
        let v = |s: &[&str]| Some(s.iter().map(|x| (*x).to_owned()).collect());
        PolicyRule {
            api_groups: v(groups),
            resources: v(resources),
            verbs: verbs.iter().map(|x| (*x).to_owned()).collect(),
            ..PolicyRule::default()
        }
    }

    fn named(mut rule: PolicyRule, names: &[&str]) -> PolicyRule {
        rule.resource_names = Some(names.iter().map(|x| (*x).to_owned()).collect());
        rule
    }

    fn url(urls: &[&str], verbs: &[&str]) -> PolicyRule {
        PolicyRule {
            non_resource_urls: Some(urls.iter().map(|x| (*x).to_owned()).collect()),
            verbs: verbs.iter().map(|x| (*x).to_owned()).collect(),
            ..PolicyRule::default()
        }
    }

    fn covered(owner: &[PolicyRule], requested: &[PolicyRule]) -> bool {
        uncovered(owner, requested).is_empty()
    }

    #[test]
    fn stars_cover_only_as_stars() {
        let explicit = [rule(&[""], &["pods"], &["get", "list", "watch", "create"])];
        assert!(covered(
            &explicit,
            &[rule(&[""], &["pods"], &["get", "list"])]
        ));
        // Every verb held explicitly still does not cover `*`.
        assert!(!covered(&explicit, &[rule(&[""], &["pods"], &["*"])]));
        let star = [rule(&["*"], &["*"], &["*"])];
        assert!(covered(&star, &[rule(&["apps"], &["deployments"], &["*"])]));
        assert!(!covered(&star, &[url(&["/metrics"], &["get"])]));
    }

    #[test]
    fn subresources_are_covered_by_their_wildcard_only() {
        let any_status = [rule(&[""], &["*/status"], &["get"])];
        assert!(covered(
            &any_status,
            &[rule(&[""], &["pods/status"], &["get"])]
        ));
        assert!(!covered(
            &[rule(&[""], &["pods"], &["get"])],
            &[rule(&[""], &["pods/status"], &["get"])]
        ));
        assert!(!covered(
            &[rule(&[""], &["pods/*"], &["get"])],
            &[rule(&[""], &["pods/status"], &["get"])]
        ));
    }

    #[test]
    fn names_and_urls() {
        let only_a = [named(rule(&[""], &["configmaps"], &["get"]), &["a"])];
        assert!(covered(
            &only_a,
            &[named(rule(&[""], &["configmaps"], &["get"]), &["a"])]
        ));
        assert!(!covered(
            &only_a,
            &[named(rule(&[""], &["configmaps"], &["get"]), &["a", "b"])]
        ));
        assert!(!covered(&only_a, &[rule(&[""], &["configmaps"], &["get"])]));
        let any = [rule(&[""], &["configmaps"], &["get"])];
        assert!(covered(
            &any,
            &[named(rule(&[""], &["configmaps"], &["get"]), &["x"])]
        ));
        let apis = [url(&["/apis/*"], &["get"])];
        assert!(covered(&apis, &[url(&["/apis/foo"], &["get"])]));
        assert!(!covered(&apis, &[url(&["/apis"], &["get"])]));
        assert!(covered(
            &[url(&["*"], &["*"])],
            &[url(&["/healthz"], &["get"])]
        ));
    }

    #[test]
    fn the_refusal_lists_what_is_missing_as_upstream() {
        let message = escalation(
            "alice",
            &["dev".to_owned(), "system:authenticated".to_owned()],
            &[],
            &[
                rule(&[""], &["pods", "pods/log"], &["get", "list"]),
                rule(&["apps"], &["deployments"], &["*"]),
            ],
            &[],
        );
        assert_eq!(
            message.as_deref(),
            Some(
                "user \"alice\" (groups=[\"dev\" \"system:authenticated\"]) is attempting to \
                 grant RBAC permissions not currently held:\n\
                 {APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"get\" \"list\"]}\n\
                 {APIGroups:[\"\"], Resources:[\"pods/log\"], Verbs:[\"get\" \"list\"]}\n\
                 {APIGroups:[\"apps\"], Resources:[\"deployments\"], Verbs:[\"*\"]}"
            )
        );
        let message = escalation(
            "bob",
            &[],
            &[],
            &[
                url(&["/metrics"], &["get"]),
                named(rule(&[""], &["configmaps"], &["update"]), &["cm1"]),
            ],
            &["clusterroles.rbac.authorization.k8s.io \"gone\" not found".to_owned()],
        );
        assert_eq!(
            message.as_deref(),
            Some(
                "user \"bob\" (groups=[]) is attempting to grant RBAC permissions not currently \
                 held:\n{APIGroups:[\"\"], Resources:[\"configmaps\"], ResourceNames:[\"cm1\"], \
                 Verbs:[\"update\"]}\n{NonResourceURLs:[\"/metrics\"], Verbs:[\"get\"]}; \
                 resolution errors: [clusterroles.rbac.authorization.k8s.io \"gone\" not found]"
            )
        );
        assert_eq!(
            escalation("c", &[], &full_authority(), &full_authority(), &[]),
            None
        );
    }
}

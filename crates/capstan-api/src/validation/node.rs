//! Nodes and node selection: node selector terms and requirements (also used by pod affinity and
//! PersistentVolume node affinity), taints, and Node create/update rules.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Taint,
};

use crate::field::{BadValue, FieldError, Path};
use crate::validation::meta::{
    go_string_slice, validate_label_name, validate_object_meta, validate_object_meta_update,
    validate_selector_requirement,
};
use crate::validation::names::{NameValidator, is_valid_label_value, validate_cidr_legacy};
use crate::validation::resources::{parse_quantity, validate_resource_quantity_value};

/// Taint effects upstream supports, in its order.
pub const TAINT_EFFECTS: &[&str] = &["NoSchedule", "PreferNoSchedule", "NoExecute"];

/// One node selector requirement (label based).
pub fn validate_node_selector_requirement(
    req: &NodeSelectorRequirement,
    allow_invalid_label_value: bool,
    path: &Path,
) -> Vec<FieldError> {
    validate_selector_requirement(
        &req.key,
        &req.operator,
        req.values.as_deref().unwrap_or(&[]),
        true,
        allow_invalid_label_value,
        path,
    )
}

fn validate_node_field_selector_requirement(
    req: &NodeSelectorRequirement,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let values = req.values.as_deref().unwrap_or(&[]);
    match req.operator.as_str() {
        "In" | "NotIn" => {
            if values.len() != 1 {
                errs.push(FieldError::required(
                    &path.child("values"),
                    "must be only one value when `operator` is 'In' or 'NotIn' for node field selector",
                ));
            }
        }
        other => errs.push(FieldError::invalid(
            &path.child("operator"),
            other,
            "not a valid selector operator",
        )),
    }
    if req.key != "metadata.name" {
        errs.push(FieldError::invalid(
            &path.child("key"),
            req.key.as_str(),
            "not a valid field selector key",
        ));
    } else {
        for (i, v) in values.iter().enumerate() {
            for msg in NameValidator::DnsSubdomain.validate(v, false) {
                errs.push(FieldError::invalid(
                    &path.child("values").index(i),
                    v.as_str(),
                    &msg,
                ));
            }
        }
    }
    errs
}

/// One node selector term.
pub fn validate_node_selector_term(
    term: &NodeSelectorTerm,
    allow_invalid_label_value: bool,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (j, req) in term.match_expressions.iter().flatten().enumerate() {
        errs.extend(validate_node_selector_requirement(
            req,
            allow_invalid_label_value,
            &path.child("matchExpressions").index(j),
        ));
    }
    for (j, req) in term.match_fields.iter().flatten().enumerate() {
        errs.extend(validate_node_field_selector_requirement(
            req,
            &path.child("matchFields").index(j),
        ));
    }
    errs
}

/// A node selector: at least one term, each valid.
pub fn validate_node_selector(
    selector: &NodeSelector,
    allow_invalid_label_value: bool,
    path: &Path,
) -> Vec<FieldError> {
    let terms_path = path.child("nodeSelectorTerms");
    if selector.node_selector_terms.is_empty() {
        return vec![FieldError::required(
            &terms_path,
            "must have at least one node selector term",
        )];
    }
    let mut errs = Vec::new();
    for (i, term) in selector.node_selector_terms.iter().enumerate() {
        errs.extend(validate_node_selector_term(
            term,
            allow_invalid_label_value,
            &terms_path.index(i),
        ));
    }
    errs
}

/// A taint effect; empty is allowed only where it means "all effects".
pub fn validate_taint_effect(effect: &str, allow_empty: bool, path: &Path) -> Vec<FieldError> {
    if !allow_empty && effect.is_empty() {
        return vec![FieldError::required(path, "")];
    }
    if TAINT_EFFECTS.contains(&effect) {
        Vec::new()
    } else {
        vec![FieldError::not_supported(path, effect, TAINT_EFFECTS)]
    }
}

fn go_taint(t: &Taint) -> String {
    format!(
        "core.Taint{{Key:{}, Value:{}, Effect:{}, TimeAdded:(*v1.Time)(nil)}}",
        crate::field::go_quote(&t.key),
        crate::field::go_quote(t.value.as_deref().unwrap_or("")),
        crate::field::go_quote(&t.effect),
    )
}

/// Node taints: keys are label names, values label values, effects known, and each key and
/// effect pair unique.
pub fn validate_node_taints(taints: &[Taint], path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut unique: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (i, taint) in taints.iter().enumerate() {
        let p = path.index(i);
        errs.extend(validate_label_name(&taint.key, &p.child("key")));
        let value = taint.value.as_deref().unwrap_or("");
        let msgs = is_valid_label_value(value);
        if !msgs.is_empty() {
            errs.push(FieldError::invalid(
                &p.child("value"),
                value,
                &msgs.join(";"),
            ));
        }
        errs.extend(validate_taint_effect(
            &taint.effect,
            false,
            &p.child("effect"),
        ));
        let keys = unique.entry(taint.effect.as_str()).or_default();
        if keys.contains(taint.key.as_str()) {
            let mut e = FieldError::duplicate(&p, BadValue::Other(go_taint(taint)));
            e.detail = "taints must be unique by key and effect pair".to_owned();
            errs.push(e);
            continue;
        }
        keys.insert(taint.key.as_str());
    }
    errs
}

fn validate_node_resources(node: &Node) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let status = node.status.as_ref();
    for (field, list) in [
        ("capacity", status.and_then(|s| s.capacity.as_ref())),
        ("allocatable", status.and_then(|s| s.allocatable.as_ref())),
    ] {
        for (name, q) in list.into_iter().flatten() {
            // Upstream builds this path with child segments, not a map key.
            let p = Path::new("status").child(field).child(name);
            match parse_quantity(q, &p) {
                Ok(q) => errs.extend(validate_resource_quantity_value(name, &q, &p)),
                Err(e) => errs.push(e),
            }
        }
    }
    errs
}

fn validate_pod_cidrs(cidrs: &[String]) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let path = Path::new("spec").child("podCIDRs");
    for (i, cidr) in cidrs.iter().enumerate() {
        errs.extend(validate_cidr_legacy(&path.index(i), cidr));
    }
    if cidrs.len() > 1 && errs.is_empty() {
        let families: Vec<bool> = cidrs
            .iter()
            .filter_map(|c| crate::validation::names::parse_cidr_sloppy(c))
            .map(|(ip, _)| ip.is_ipv6())
            .collect();
        let dual = families.len() == 2 && families[0] != families[1];
        if !dual || cidrs.len() > 2 {
            errs.push(FieldError::invalid(
                &path,
                BadValue::Other(go_string_slice(cidrs)),
                "may specify no more than one CIDR for each IP family",
            ));
        }
        let mut seen = BTreeSet::new();
        for (i, cidr) in cidrs.iter().enumerate() {
            if !seen.insert(cidr) {
                errs.push(FieldError::duplicate(&path.index(i), cidr.as_str()));
            }
        }
    }
    errs
}

/// A Node (cluster-scoped, DNS-subdomain name): taints, resource quantities and pod CIDRs.
pub fn validate_node(node: &Node) -> Vec<FieldError> {
    let meta_path = Path::new("metadata");
    let mut errs = validate_object_meta(
        &node.metadata,
        false,
        NameValidator::DnsSubdomain,
        &meta_path,
    );
    let spec = node.spec.clone().unwrap_or_default();
    if let Some(taints) = spec.taints.as_deref().filter(|t| !t.is_empty()) {
        // Upstream reports node taints under metadata.
        errs.extend(validate_node_taints(taints, &meta_path.child("taints")));
    }
    errs.extend(validate_node_resources(node));
    errs.extend(validate_pod_cidrs(spec.pod_cidrs.as_deref().unwrap_or(&[])));
    errs
}

/// An update of a Node: podCIDRs and providerID may only go from unset to set, externalID is
/// fixed, and addresses are unique.
pub fn validate_node_update(new: &Node, old: &Node) -> Vec<FieldError> {
    let meta_path = Path::new("metadata");
    let mut errs = validate_object_meta_update(&new.metadata, &old.metadata, &meta_path);
    errs.extend(validate_node_resources(new));
    let mut seen = Vec::new();
    for (i, address) in new
        .status
        .iter()
        .flat_map(|s| s.addresses.iter().flatten())
        .enumerate()
    {
        if seen.contains(&address) {
            errs.push(FieldError::duplicate(
                &Path::new("status").child("addresses").index(i),
                BadValue::Other(format!(
                    "core.NodeAddress{{Type:{}, Address:{}}}",
                    crate::field::go_quote(&address.type_),
                    crate::field::go_quote(&address.address)
                )),
            ));
        }
        seen.push(address);
    }
    let new_spec = new.spec.clone().unwrap_or_default();
    let old_spec = old.spec.clone().unwrap_or_default();
    let old_cidrs = old_spec.pod_cidrs.unwrap_or_default();
    let new_cidrs = new_spec.pod_cidrs.clone().unwrap_or_default();
    let cidr_msg = "node updates may not change podCIDR except from \"\" to valid";
    if !old_cidrs.is_empty() {
        if old_cidrs.len() != new_cidrs.len() {
            errs.push(FieldError::forbidden(
                &Path::new("spec").child("podCIDRs"),
                cidr_msg,
            ));
        } else {
            for (a, b) in old_cidrs.iter().zip(&new_cidrs) {
                if a != b {
                    errs.push(FieldError::forbidden(
                        &Path::new("spec").child("podCIDRs"),
                        cidr_msg,
                    ));
                }
            }
        }
    }
    let old_provider = old_spec.provider_id.unwrap_or_default();
    if !old_provider.is_empty() && Some(&old_provider) != new_spec.provider_id.as_ref() {
        errs.push(FieldError::forbidden(
            &Path::new("spec").child("providerID"),
            "node updates may not change providerID except from \"\" to valid",
        ));
    }
    if let Some(taints) = new_spec.taints.as_deref().filter(|t| !t.is_empty()) {
        errs.extend(validate_node_taints(taints, &meta_path.child("taints")));
    }
    if new_spec.external_id != old_spec.external_id {
        errs.push(FieldError::forbidden(
            &Path::new("spec").child("externalID"),
            "may not be updated",
        ));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::test_support::check;
    use k8s_openapi::api::core::v1::NodeSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn node(taints: Vec<Taint>, cidrs: Vec<&str>) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                resource_version: Some("1".into()),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                taints: Some(taints),
                pod_cidrs: Some(cidrs.into_iter().map(str::to_owned).collect()),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn taint(key: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            effect: effect.into(),
            value: None,
            time_added: None,
        }
    }

    #[test]
    fn taints_and_cidrs() {
        check(
            validate_node(&node(
                vec![taint("a", "NoSchedule")],
                vec!["10.0.0.0/24", "fd00::/64"],
            )),
            &[],
        );
        check(
            validate_node(&node(
                vec![
                    taint("a", "NoSchedule"),
                    taint("a", "NoSchedule"),
                    taint("b", "Never"),
                ],
                vec!["10.0.0.0/24", "10.1.0.0/24"],
            )),
            &[
                "metadata.taints[1]: Duplicate value: core.Taint{Key:\"a\", Value:\"\", Effect:\"NoSchedule\", TimeAdded:(*v1.Time)(nil)}: taints must be unique by key and effect pair",
                "metadata.taints[2].effect: Unsupported value: \"Never\": supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\"",
                "spec.podCIDRs: Invalid value: []string{\"10.0.0.0/24\", \"10.1.0.0/24\"}: may specify no more than one CIDR for each IP family",
            ],
        );
    }

    #[test]
    fn updates() {
        let old = node(vec![], vec!["10.0.0.0/24"]);
        check(
            validate_node_update(&node(vec![], vec!["10.0.0.0/24"]), &old),
            &[],
        );
        check(
            validate_node_update(&node(vec![], vec!["10.0.1.0/24"]), &old),
            &[
                "spec.podCIDRs: Forbidden: node updates may not change podCIDR except from \"\" to valid",
            ],
        );
    }

    #[test]
    fn selectors() {
        let selector = NodeSelector {
            node_selector_terms: vec![NodeSelectorTerm {
                match_expressions: Some(vec![NodeSelectorRequirement {
                    key: "k".into(),
                    operator: "Gt".into(),
                    values: Some(vec![]),
                }]),
                match_fields: Some(vec![NodeSelectorRequirement {
                    key: "metadata.uid".into(),
                    operator: "In".into(),
                    values: Some(vec!["x".into()]),
                }]),
            }],
        };
        check(
            validate_node_selector(&selector, false, &Path::new("r")),
            &[
                "r.nodeSelectorTerms[0].matchExpressions[0].values: Required value: must be specified single value when `operator` is 'Lt' or 'Gt'",
                "r.nodeSelectorTerms[0].matchFields[0].key: Invalid value: \"metadata.uid\": not a valid field selector key",
            ],
        );
        check(
            validate_node_selector(
                &NodeSelector {
                    node_selector_terms: vec![],
                },
                false,
                &Path::new("r"),
            ),
            &["r.nodeSelectorTerms: Required value: must have at least one node selector term"],
        );
    }
}

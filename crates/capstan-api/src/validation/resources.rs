//! Resource names and quantities: which names are standard for containers, quotas and limit
//! ranges, which must be integers or may not be overcommitted, and the checks upstream applies to
//! a container's requests and limits.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;

use crate::field::{BadValue, FieldError, Path};
use crate::quantity::Quantity;
use crate::validation::names::is_qualified_name;

/// Upstream's message for a non-integer quantity of an integer resource.
pub const IS_NOT_INTEGER: &str = "must be an integer";
/// Upstream's message for a quota resource name it does not know.
pub const IS_INVALID_QUOTA_RESOURCE: &str = "must be a standard resource for quota";

const STANDARD_CONTAINER_RESOURCES: &[&str] = &["cpu", "memory", "ephemeral-storage"];
const STANDARD_RESOURCES: &[&str] = &[
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
    "resourcequotas",
    "services",
    "replicationcontrollers",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "storage",
    "requests.storage",
    "services.nodeports",
    "services.loadbalancers",
];
const STANDARD_QUOTA_RESOURCES: &[&str] = &[
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.storage",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
    "resourcequotas",
    "services",
    "replicationcontrollers",
    "secrets",
    "persistentvolumeclaims",
    "configmaps",
    "services.nodeports",
    "services.loadbalancers",
];
const INTEGER_RESOURCES: &[&str] = &[
    "pods",
    "resourcequotas",
    "services",
    "replicationcontrollers",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "services.nodeports",
    "services.loadbalancers",
];

/// `hugepages-<size>`.
pub fn is_huge_page_resource_name(name: &str) -> bool {
    name.starts_with("hugepages-")
}

/// A hugepages name as quota spells it (`hugepages-` or `requests.hugepages-`).
pub fn is_quota_huge_page_resource_name(name: &str) -> bool {
    name.starts_with("hugepages-") || name.starts_with("requests.hugepages-")
}

/// A resource whose name has no domain or the `kubernetes.io/` domain.
pub fn is_native_resource(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

/// An extended resource: outside the native domain, and valid when prefixed with `requests.`.
pub fn is_extended_resource_name(name: &str) -> bool {
    if is_native_resource(name) || name.starts_with("requests.") {
        return false;
    }
    is_qualified_name(&format!("requests.{name}")).is_empty()
}

/// Whether requests may be below limits for this resource.
pub fn is_overcommit_allowed(name: &str) -> bool {
    is_native_resource(name) && !is_huge_page_resource_name(name)
}

/// Whether quantities of this resource must be whole numbers.
pub fn is_integer_resource_name(name: &str) -> bool {
    INTEGER_RESOURCES.contains(&name) || is_extended_resource_name(name)
}

/// A standard (unprefixed) resource name.
pub fn is_standard_resource_name(name: &str) -> bool {
    STANDARD_RESOURCES.contains(&name) || is_quota_huge_page_resource_name(name)
}

/// A standard container resource name.
pub fn is_standard_container_resource_name(name: &str) -> bool {
    STANDARD_CONTAINER_RESOURCES.contains(&name) || is_huge_page_resource_name(name)
}

/// A standard quota resource name.
pub fn is_standard_quota_resource_name(name: &str) -> bool {
    STANDARD_QUOTA_RESOURCES.contains(&name) || is_quota_huge_page_resource_name(name)
}

/// Parses an API quantity; a malformed one is reported as upstream's decoder words it.
pub fn parse_quantity(q: &ApiQuantity, path: &Path) -> Result<Quantity, FieldError> {
    Quantity::parse(&q.0).map_err(|e| FieldError::invalid(path, q.0.as_str(), &e.to_string()))
}

/// A resource name: a qualified name, and standard when unprefixed.
pub fn validate_resource_name(name: &str, path: &Path) -> Vec<FieldError> {
    let errs: Vec<FieldError> = is_qualified_name(name)
        .into_iter()
        .map(|msg| FieldError::invalid(path, name, &msg))
        .collect();
    if !errs.is_empty() {
        return errs;
    }
    if !name.contains('/') && !is_standard_resource_name(name) {
        return vec![FieldError::invalid(
            path,
            name,
            "must be a standard resource type or fully qualified",
        )];
    }
    errs
}

/// A container resource name.
pub fn validate_container_resource_name(name: &str, path: &Path) -> Vec<FieldError> {
    let mut errs = validate_resource_name(name, path);
    if !name.contains('/') {
        if !is_standard_container_resource_name(name) {
            errs.push(FieldError::invalid(
                path,
                name,
                "must be a standard resource for containers",
            ));
        }
    } else if !is_native_resource(name) && !is_extended_resource_name(name) {
        errs.push(FieldError::invalid(
            path,
            name,
            "doesn't follow extended resource name standard",
        ));
    }
    errs
}

/// A quota resource name.
pub fn validate_resource_quota_resource_name(name: &str, path: &Path) -> Vec<FieldError> {
    let mut errs = validate_resource_name(name, path);
    if !name.contains('/') && !is_standard_quota_resource_name(name) {
        errs.push(FieldError::invalid(path, name, IS_INVALID_QUOTA_RESOURCE));
    }
    errs
}

/// A quantity is not negative and, for integer resources, whole.
pub fn validate_resource_quantity_value(
    name: &str,
    value: &Quantity,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if value.is_negative() {
        errs.push(FieldError::invalid(
            path,
            value.canonical(),
            super::meta::IS_NEGATIVE,
        ));
    }
    if is_integer_resource_name(name) && value.milli_value() % 1000 != 0 {
        // Upstream passes the Quantity itself, which prints through its String method, unquoted.
        errs.push(FieldError::invalid(
            path,
            BadValue::Other(value.canonical()),
            IS_NOT_INTEGER,
        ));
    }
    errs
}

fn huge_page_size(name: &str) -> Option<Quantity> {
    Quantity::parse(name.strip_prefix("hugepages-")?).ok()
}

fn validate_huge_page_value(name: &str, value: &Quantity, path: &Path) -> Option<FieldError> {
    if !is_huge_page_resource_name(name) {
        return None;
    }
    let divisible = match huge_page_size(name) {
        Some(size) if !size.is_negative() && !size.is_zero() && size.milli_value() % 1000 == 0 => {
            value.value() % size.value() == 0
        }
        _ => false,
    };
    (!divisible).then(|| {
        FieldError::invalid(
            path,
            value.canonical(),
            &format!(
                "{} is not positive integer multiple of {name}",
                value.canonical()
            ),
        )
    })
}

type NameCheck = fn(&str, &Path) -> Vec<FieldError>;

/// Parses every quantity of a resource list, reporting malformed ones.
pub fn parse_resource_list(
    list: Option<&BTreeMap<String, ApiQuantity>>,
    path: &Path,
    errs: &mut Vec<FieldError>,
) -> BTreeMap<String, Quantity> {
    let mut out = BTreeMap::new();
    for (name, q) in list.into_iter().flatten() {
        match parse_quantity(q, &path.key(name)) {
            Ok(parsed) => {
                out.insert(name.clone(), parsed);
            }
            Err(e) => errs.push(e),
        }
    }
    out
}

/// A container's (or overhead's) requests and limits: names, values, requests not above limits
/// (equal for resources that cannot be overcommitted), hugepages with cpu or memory, and claim
/// names that exist in the pod.
pub fn validate_resource_requirements(
    requirements: Option<&ResourceRequirements>,
    pod_claim_names: &[String],
    path: &Path,
) -> Vec<FieldError> {
    validate_requirements_with(
        requirements,
        validate_container_resource_name,
        pod_claim_names,
        path,
    )
}

fn validate_requirements_with(
    requirements: Option<&ResourceRequirements>,
    name_check: NameCheck,
    pod_claim_names: &[String],
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(requirements) = requirements else {
        return errs;
    };
    let lim_path = path.child("limits");
    let req_path = path.child("requests");
    let limits = parse_resource_list(requirements.limits.as_ref(), &lim_path, &mut errs);
    let requests = parse_resource_list(requirements.requests.as_ref(), &req_path, &mut errs);
    let (mut lim_cpu_mem, mut req_cpu_mem, mut lim_huge, mut req_huge) =
        (false, false, false, false);
    for (name, q) in &limits {
        let p = lim_path.key(name);
        errs.extend(name_check(name, &p));
        errs.extend(validate_resource_quantity_value(name, q, &p));
        if is_huge_page_resource_name(name) {
            lim_huge = true;
            errs.extend(validate_huge_page_value(name, q, &p));
        }
        if name == "cpu" || name == "memory" {
            lim_cpu_mem = true;
        }
    }
    for (name, q) in &requests {
        let p = req_path.key(name);
        errs.extend(name_check(name, &p));
        errs.extend(validate_resource_quantity_value(name, q, &p));
        match limits.get(name) {
            Some(limit) => {
                if q != limit && !is_overcommit_allowed(name) {
                    errs.push(FieldError::invalid(
                        &req_path,
                        q.canonical(),
                        &format!("must be equal to {name} limit of {}", limit.canonical()),
                    ));
                } else if q > limit {
                    errs.push(FieldError::invalid(
                        &req_path,
                        q.canonical(),
                        &format!(
                            "must be less than or equal to {name} limit of {}",
                            limit.canonical()
                        ),
                    ));
                }
            }
            None if !is_overcommit_allowed(name) => errs.push(FieldError::required(
                &lim_path,
                "Limit must be set for non overcommitable resources",
            )),
            None => {}
        }
        if is_huge_page_resource_name(name) {
            req_huge = true;
            errs.extend(validate_huge_page_value(name, q, &p));
        }
        if name == "cpu" || name == "memory" {
            req_cpu_mem = true;
        }
    }
    if !lim_cpu_mem && !req_cpu_mem && (lim_huge || req_huge) {
        errs.push(FieldError::forbidden(
            path,
            "HugePages require cpu or memory",
        ));
    }
    errs.extend(validate_resource_claim_names(
        requirements,
        pod_claim_names,
        &path.child("claims"),
    ));
    errs
}

fn validate_resource_claim_names(
    requirements: &ResourceRequirements,
    pod_claim_names: &[String],
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut names: Vec<String> = Vec::new();
    for (i, claim) in requirements.claims.iter().flatten().enumerate() {
        let name = claim.name.as_str();
        if name.is_empty() {
            errs.push(FieldError::required(&path.index(i), ""));
            continue;
        }
        if names.iter().any(|n| n == name) {
            errs.push(FieldError::duplicate(&path.index(i), name));
        } else {
            let mut key = name.to_owned();
            let request = claim.request.as_deref().unwrap_or("");
            if !request.is_empty() {
                errs.extend(super::names::validate_dns1123_label(
                    request,
                    &path.index(i).child("request"),
                ));
                key = format!("{name}/{request}");
            }
            if names.contains(&key) {
                errs.push(FieldError::duplicate(&path.index(i), key.as_str()));
            } else if request.is_empty() {
                for existing in &names {
                    if existing
                        .split_once('/')
                        .is_some_and(|(claim, _)| claim == name)
                    {
                        errs.push(FieldError::duplicate(&path.index(i), name));
                    }
                }
            }
            names.push(key);
        }
        if !pod_claim_names.iter().any(|n| n == name) {
            let mut e = FieldError::not_found(&path.index(i), name);
            let mut sorted = pod_claim_names.to_vec();
            sorted.sort();
            e.detail = if sorted.is_empty() {
                "must be one of the names in pod.spec.resourceClaims which is empty".to_owned()
            } else {
                format!(
                    "must be one of the names in pod.spec.resourceClaims: {}",
                    sorted.join(", ")
                )
            };
            errs.push(e);
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> ApiQuantity {
        ApiQuantity(s.to_owned())
    }

    fn check(requirements: ResourceRequirements, expected: &[&str]) {
        let errs = validate_resource_requirements(
            Some(&requirements),
            &[],
            &Path::new("spec")
                .child("containers")
                .index(0)
                .child("resources"),
        );
        let got: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn requests_and_limits() {
        check(
            ResourceRequirements {
                limits: Some(BTreeMap::from([
                    ("cpu".into(), q("500m")),
                    ("memory".into(), q("1Gi")),
                ])),
                requests: Some(BTreeMap::from([
                    ("cpu".into(), q("1")),
                    ("memory".into(), q("512Mi")),
                ])),
                claims: None,
            },
            &[
                "spec.containers[0].resources.requests: Invalid value: \"1\": must be less than or equal to cpu limit of 500m",
            ],
        );
        check(
            ResourceRequirements {
                limits: None,
                requests: Some(BTreeMap::from([
                    ("example.com/gpu".into(), q("1")),
                    ("disk".into(), q("-1")),
                ])),
                claims: None,
            },
            &[
                "spec.containers[0].resources.requests[disk]: Invalid value: \"disk\": must be a standard resource type or fully qualified",
                "spec.containers[0].resources.requests[disk]: Invalid value: \"disk\": must be a standard resource for containers",
                "spec.containers[0].resources.requests[disk]: Invalid value: \"-1\": must be greater than or equal to 0",
                "spec.containers[0].resources.limits: Required value: Limit must be set for non overcommitable resources",
            ],
        );
        check(
            ResourceRequirements {
                limits: Some(BTreeMap::from([("hugepages-2Mi".into(), q("3Mi"))])),
                requests: Some(BTreeMap::from([("cpu".into(), q("1x"))])),
                claims: None,
            },
            &[
                "spec.containers[0].resources.requests[cpu]: Invalid value: \"1x\": quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
                "spec.containers[0].resources.limits[hugepages-2Mi]: Invalid value: \"3Mi\": 3Mi is not positive integer multiple of hugepages-2Mi",
                "spec.containers[0].resources: Forbidden: HugePages require cpu or memory",
            ],
        );
    }

    #[test]
    fn resource_name_classes() {
        assert!(is_extended_resource_name("example.com/gpu"));
        assert!(!is_extended_resource_name("kubernetes.io/x"));
        assert!(is_integer_resource_name("pods"));
        assert!(is_integer_resource_name("example.com/gpu"));
        assert!(!is_overcommit_allowed("hugepages-1Gi"));
        assert!(is_standard_quota_resource_name("requests.hugepages-2Mi"));
        let errs = validate_resource_quantity_value(
            "pods",
            &Quantity::from_i64(1).add(&Quantity::parse("500m").unwrap_or_else(|e| panic!("{e}"))),
            &Path::new("x"),
        );
        assert_eq!(
            errs[0].to_string(),
            "x: Invalid value: 1500m: must be an integer"
        );
    }
}

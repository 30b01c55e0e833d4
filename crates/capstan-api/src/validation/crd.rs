//! `apiextensions.k8s.io/v1` CustomResourceDefinitions, as upstream 1.33 validates them: the
//! name is `<plural>.<group>`, the group a DNS subdomain with a dot, a supported scope, version
//! names that are unique DNS-1035 labels with exactly one storage version and a schema each, the
//! names (plural, singular, kind, list kind, short names, categories) in their formats, a
//! supported conversion strategy, and stored versions that the versions still list. On update
//! the group and plural never change, nor the scope and kind once the CRD is established.
//!
//! What the schemas themselves must be (structural, with valid CEL rules) is not checked yet.

use std::collections::BTreeSet;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceColumnDefinition, CustomResourceDefinition, CustomResourceDefinitionNames,
    CustomResourceDefinitionSpec, CustomResourceSubresourceScale, JSONSchemaProps, SelectableField,
};

use crate::field::{BadValue, FieldError, Path};
use crate::names::{is_dns1035_label, is_dns1123_subdomain};
use crate::printers::jsonpath::JsonPath;
use crate::validation::meta::{
    FIELD_IMMUTABLE, validate_object_meta_generic, validate_object_meta_update_generic,
};
use crate::validation::names::NameValidator;

/// The scopes a CRD may have, as upstream lists them.
const SCOPES: &[&str] = &["Cluster", "Namespaced"];

/// The conversion strategies, as upstream lists them.
const CONVERSION_STRATEGIES: &[&str] = &["None", "Webhook"];

/// A new CustomResourceDefinition.
pub fn validate_crd(crd: &CustomResourceDefinition) -> Vec<FieldError> {
    let mut errs = validate_object_meta_generic(
        &crd.metadata,
        false,
        NameValidator::DnsSubdomain,
        &Path::new("metadata"),
    );
    let required = format!("{}.{}", crd.spec.names.plural, crd.spec.group);
    if let Some(name) = crd.metadata.name.as_deref()
        && name != required
    {
        errs.push(FieldError::invalid(
            &Path::new("metadata").child("name"),
            name,
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    errs.extend(validate_spec(&crd.spec, &Path::new("spec")));
    errs.extend(validate_stored_versions(crd));
    errs
}

/// An update of a CustomResourceDefinition through its main endpoint.
pub fn validate_crd_update(
    new: &CustomResourceDefinition,
    old: &CustomResourceDefinition,
) -> Vec<FieldError> {
    let mut errs =
        validate_object_meta_update_generic(&new.metadata, &old.metadata, &Path::new("metadata"));
    let spec = Path::new("spec");
    errs.extend(validate_spec(&new.spec, &spec));
    let (n, o) = (&new.spec, &old.spec);
    let mut fixed = vec![
        // They make up the CRD's name.
        (spec.child("group"), &n.group, &o.group),
        (
            spec.child("names").child("plural"),
            &n.names.plural,
            &o.names.plural,
        ),
    ];
    if is_established(old) {
        // These decide how objects are stored.
        fixed.insert(0, (spec.child("scope"), &n.scope, &o.scope));
        fixed.insert(
            1,
            (
                spec.child("names").child("kind"),
                &n.names.kind,
                &o.names.kind,
            ),
        );
    }
    for (path, new, old) in fixed {
        if new != old {
            errs.push(FieldError::invalid(&path, new.as_str(), FIELD_IMMUTABLE));
        }
    }
    errs.extend(validate_stored_versions(new));
    errs
}

/// An update through `/status`: the metadata rules, and stored versions the spec still lists.
pub fn validate_crd_status_update(
    new: &CustomResourceDefinition,
    old: &CustomResourceDefinition,
) -> Vec<FieldError> {
    let mut errs =
        validate_object_meta_update_generic(&new.metadata, &old.metadata, &Path::new("metadata"));
    if let Some(accepted) = new.status.as_ref().and_then(|s| s.accepted_names.as_ref()) {
        errs.extend(validate_names(
            accepted,
            &Path::new("status").child("acceptedNames"),
        ));
    }
    errs
}

/// Whether the CRD's `Established` condition is true.
pub fn is_established(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
}

fn validate_spec(spec: &CustomResourceDefinitionSpec, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let group = path.child("group");
    if spec.group.is_empty() {
        errs.push(FieldError::required(&group, ""));
    } else {
        let messages = is_dns1123_subdomain(&spec.group);
        if !messages.is_empty() {
            errs.push(FieldError::invalid(
                &group,
                spec.group.as_str(),
                &messages.join(","),
            ));
        } else if !spec.group.contains('.') {
            errs.push(FieldError::invalid(
                &group,
                spec.group.as_str(),
                "should be a domain with at least one dot",
            ));
        }
    }
    let scope = path.child("scope");
    if spec.scope.is_empty() {
        errs.push(FieldError::required(&scope, ""));
    } else if !SCOPES.contains(&spec.scope.as_str()) {
        errs.push(FieldError::not_supported(
            &scope,
            spec.scope.as_str(),
            SCOPES,
        ));
    }

    let versions = path.child("versions");
    // Upstream validates its internal form, in which one schema shared by every version is
    // the CRD's `spec.validation`: errors in it are reported there, once.
    let shared = shared_schema(spec);
    let mut seen = BTreeSet::new();
    let mut unique = true;
    let mut storage = 0;
    for (i, version) in spec.versions.iter().enumerate() {
        let at = versions.index(i);
        storage += usize::from(version.storage);
        unique &= seen.insert(version.name.as_str());
        let messages = is_dns1035_label(&version.name);
        if !messages.is_empty() {
            errs.push(FieldError::invalid(
                &at.child("name"),
                version.name.as_str(),
                &messages.join(","),
            ));
        }
        for (j, column) in version
            .additional_printer_columns
            .iter()
            .flatten()
            .enumerate()
        {
            errs.extend(validate_column(
                column,
                &at.child("additionalPrinterColumns").index(j),
            ));
        }
        let schema_path = match shared {
            Some(_) => path.child("validation").child("openAPIV3Schema"),
            None => at.child("schema").child("openAPIV3Schema"),
        };
        match version
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
        {
            None => errs.push(FieldError::required(&schema_path, "schemas are required")),
            Some(schema) => {
                let structural = crate::structural::structural_errors(schema, &schema_path);
                // Rules are compiled only in a structural schema, as upstream's; so are
                // selectable fields checked against it.
                if structural.is_empty() {
                    if shared.is_none() || i == 0 {
                        errs.extend(crate::cel::rule_errors(schema, &schema_path));
                    }
                    errs.extend(validate_selectable_fields(
                        version.selectable_fields.as_deref().unwrap_or_default(),
                        schema,
                        &at.child("selectableFields"),
                    ));
                }
                if shared.is_none() || i == 0 {
                    errs.extend(structural);
                }
            }
        }
        if let Some(scale) = version.subresources.as_ref().and_then(|s| s.scale.as_ref()) {
            errs.extend(validate_scale(scale, &at.child("subresources")));
        }
    }
    if !unique {
        errs.push(FieldError::invalid(
            &versions,
            BadValue::Other(versions_value(spec)),
            "must contain unique version names",
        ));
    }
    if storage != 1 {
        errs.push(FieldError::invalid(
            &versions,
            BadValue::Other(versions_value(spec)),
            "must have exactly one version marked as storage version",
        ));
    }

    // Defaulting fills in the singular and list kind; the spec must have all four.
    let names = path.child("names");
    let n = &spec.names;
    for (field, value) in [
        ("plural", Some(n.plural.as_str())),
        ("singular", n.singular.as_deref()),
        ("kind", Some(n.kind.as_str())),
        ("listKind", n.list_kind.as_deref()),
    ] {
        if value.is_none_or(str::is_empty) {
            errs.push(FieldError::required(&names.child(field), ""));
        }
    }
    errs.extend(validate_names(n, &names));

    let conversion = path.child("conversion");
    if let Some(c) = &spec.conversion {
        let strategy = conversion.child("strategy");
        if c.strategy.is_empty() {
            errs.push(FieldError::required(&strategy, ""));
        } else if !CONVERSION_STRATEGIES.contains(&c.strategy.as_str()) {
            errs.push(FieldError::not_supported(
                &strategy,
                c.strategy.as_str(),
                CONVERSION_STRATEGIES,
            ));
        } else if c.strategy == "Webhook" && c.webhook.is_none() {
            errs.push(FieldError::required(
                &conversion.child("webhook"),
                "required when strategy is set to Webhook",
            ));
        } else if c.strategy != "Webhook" && c.webhook.is_some() {
            errs.push(FieldError::forbidden(
                &conversion.child("webhook"),
                "should not be set when strategy is not set to Webhook",
            ));
        }
    }
    errs
}

/// The schema every version has, when they all have the same one (upstream's
/// `hasIdenticalPerVersionSchema`, which moves it to `spec.validation`).
fn shared_schema(spec: &CustomResourceDefinitionSpec) -> Option<&JSONSchemaProps> {
    let first = spec.versions.first()?.schema.as_ref()?;
    spec.versions
        .iter()
        .all(|v| v.schema.as_ref() == Some(first))
        .then_some(first.open_api_v3_schema.as_ref())
        .flatten()
}

/// The most selectable fields a version may have.
const MAX_SELECTABLE_FIELDS: usize = 8;

/// Upstream's checks of a version's `selectableFields`: each a simple path (dots only, no
/// array notation) to a field of the schema, not in `metadata`, of type string, boolean or
/// integer, none twice, at most [`MAX_SELECTABLE_FIELDS`].
fn validate_selectable_fields(
    fields: &[SelectableField],
    schema: &JSONSchemaProps,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut unique = BTreeSet::new();
    for (i, field) in fields.iter().enumerate() {
        let at = path.index(i).child("jsonPath");
        let json_path = field.json_path.as_str();
        if json_path.is_empty() {
            errs.push(FieldError::required(&at, ""));
            continue;
        }
        let (segments, found) = match schema_field(json_path, schema) {
            Ok(found) => found,
            Err(why) => {
                errs.push(FieldError::invalid(
                    &at,
                    json_path,
                    &format!("is an invalid path: {why}"),
                ));
                continue;
            }
        };
        if segments.first().map(String::as_str) == Some("metadata") {
            errs.push(FieldError::invalid(
                &at,
                json_path,
                "must not point to fields in metadata",
            ));
        }
        if !matches!(
            found.type_.as_deref(),
            Some("string" | "boolean" | "integer")
        ) {
            errs.push(FieldError::invalid(
                &at,
                json_path,
                "must point to a field of type string, boolean or integer. Enum string fields and strings with formats are allowed.",
            ));
        }
        if !unique.insert(segments) {
            errs.push(FieldError::duplicate(&at, json_path));
        }
    }
    if unique.len() > MAX_SELECTABLE_FIELDS {
        errs.push(FieldError::too_many(
            path,
            unique.len(),
            MAX_SELECTABLE_FIELDS,
        ));
    }
    errs
}

/// The schema a simple JSON path (`.spec.a.b`; a map's keys by name) leads to, and the path's
/// segments (upstream's `ValidFieldPath` without array notation, with its errors).
fn schema_field<'a>(
    json_path: &str,
    schema: &'a JSONSchemaProps,
) -> Result<(Vec<String>, &'a JSONSchemaProps), String> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrBool;
    let mut segments = Vec::new();
    let mut current = schema;
    let mut rest = json_path;
    while !rest.is_empty() {
        if rest.starts_with('[') {
            return Err("array notation is not allowed".to_owned());
        }
        let Some(after) = rest.strip_prefix('.') else {
            let token = rest.split(['.', '[', ']']).next().unwrap_or(rest);
            return Err(format!("expected [ or . but got: {token}"));
        };
        let end = after.find(['.', '[', ']']).unwrap_or(after.len());
        let name = &after[..end];
        if name.is_empty() {
            return Err(if after.is_empty() {
                "unexpected end of JSON path".to_owned()
            } else {
                "does not refer to a valid field".to_owned()
            });
        }
        current = if let Some(properties) = &current.properties {
            properties
                .get(name)
                .ok_or_else(|| "does not refer to a valid field".to_owned())?
        } else if let Some(JSONSchemaPropsOrBool::Schema(items)) = &current.additional_properties {
            items
        } else {
            return Err("does not refer to a valid field".to_owned());
        };
        segments.push(name.to_owned());
        rest = &after[end..];
    }
    Ok((segments, current))
}

/// Upstream's checks of a `scale` subresource: the replica paths simple JSON paths under
/// `.spec.` and `.status.`, the selector's (if any) under `.status.`.
fn validate_scale(scale: &CustomResourceSubresourceScale, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut check = |value: Option<&str>, field: &str, prefix: &str, required: bool| {
        let at = path.child(&format!("scale.{field}"));
        match value.filter(|v| !v.is_empty()) {
            None if required => errs.push(FieldError::required(&at, "")),
            None => {}
            Some(value) if !value.starts_with('.') => errs.push(FieldError::invalid(
                &at,
                value,
                "must be a simple json path starting with .",
            )),
            Some(value) if !value.starts_with(&format!(".{prefix}.")) => {
                errs.push(FieldError::invalid(
                    &at,
                    value,
                    &format!("should be a json path under .{prefix}"),
                ))
            }
            Some(_) => {}
        }
    };
    check(
        Some(&scale.spec_replicas_path),
        "specReplicasPath",
        "spec",
        true,
    );
    check(
        Some(&scale.status_replicas_path),
        "statusReplicasPath",
        "status",
        true,
    );
    check(
        scale.label_selector_path.as_deref(),
        "labelSelectorPath",
        "status",
        false,
    );
    errs
}

/// The column types a printer column may have, as upstream lists them.
const COLUMN_TYPES: &[&str] = &["boolean", "date", "integer", "number", "string"];

/// Upstream's `ValidateCustomResourceColumnDefinition`: a name, a supported type and a simple
/// JSON path.
fn validate_column(column: &CustomResourceColumnDefinition, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if column.name.is_empty() {
        errs.push(FieldError::required(&path.child("name"), ""));
    }
    if column.type_.is_empty() {
        errs.push(FieldError::required(
            &path.child("type"),
            &format!("must be one of {}", COLUMN_TYPES.join(", ")),
        ));
    } else if !COLUMN_TYPES.contains(&column.type_.as_str()) {
        errs.push(FieldError::not_supported(
            &path.child("type"),
            column.type_.as_str(),
            COLUMN_TYPES,
        ));
    }
    let json_path = path.child("jsonPath");
    if column.json_path.is_empty() {
        errs.push(FieldError::required(&json_path, ""));
    } else if !column.json_path.starts_with('.') || JsonPath::parse(&column.json_path).is_err() {
        errs.push(FieldError::invalid(
            &json_path,
            column.json_path.as_str(),
            "must be a simple json path starting with .",
        ));
    }
    errs
}

/// Go's `%#v`-like rendering of the versions, shortened to their names (the value upstream
/// prints is the whole internal list, which no client parses).
fn versions_value(spec: &CustomResourceDefinitionSpec) -> String {
    let names: Vec<String> = spec
        .versions
        .iter()
        .map(|v| format!("{:?}", v.name))
        .collect();
    format!("[{}]", names.join(", "))
}

/// Upstream's `ValidateCustomResourceDefinitionNames`, for the spec's names and the accepted
/// ones alike.
fn validate_names(names: &CustomResourceDefinitionNames, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut label = |field: Path, value: &str| {
        let messages = is_dns1035_label(value);
        if !value.is_empty() && !messages.is_empty() {
            errs.push(FieldError::invalid(&field, value, &messages.join(",")));
        }
    };
    label(path.child("plural"), &names.plural);
    label(
        path.child("singular"),
        names.singular.as_deref().unwrap_or_default(),
    );
    let kind = names.kind.to_lowercase();
    let list_kind = names
        .list_kind
        .as_deref()
        .unwrap_or_default()
        .to_lowercase();
    for (i, short) in names.short_names.iter().flatten().enumerate() {
        label(path.child("shortNames").index(i), short);
    }
    for (i, category) in names.categories.iter().flatten().enumerate() {
        label(path.child("categories").index(i), category);
    }
    for (field, value, lower) in [
        ("kind", names.kind.as_str(), kind.as_str()),
        (
            "listKind",
            names.list_kind.as_deref().unwrap_or_default(),
            list_kind.as_str(),
        ),
    ] {
        let messages = is_dns1035_label(lower);
        if !value.is_empty() && !messages.is_empty() {
            errs.push(FieldError::invalid(
                &path.child(field),
                value,
                &format!(
                    "may have mixed case, but should otherwise match: {}",
                    messages.join(",")
                ),
            ));
        }
    }
    if !names.kind.is_empty() && names.list_kind.as_deref() == Some(names.kind.as_str()) {
        errs.push(FieldError::invalid(
            &path.child("listKind"),
            names.kind.as_str(),
            "kind and listKind may not be the same or parsing become ambiguous",
        ));
    }
    errs
}

/// Upstream's `ValidateCustomResourceDefinitionStoredVersions`: at least one, the storage
/// version among them, and each still in the spec.
fn validate_stored_versions(crd: &CustomResourceDefinition) -> Vec<FieldError> {
    let path = Path::new("status").child("storedVersions");
    let stored: Vec<&str> = crd
        .status
        .as_ref()
        .and_then(|s| s.stored_versions.as_ref())
        .map(|v| v.iter().map(String::as_str).collect())
        .unwrap_or_default();
    if stored.is_empty() {
        return vec![FieldError::invalid(
            &path,
            BadValue::Other("[]string(nil)".to_owned()),
            "must have at least one stored version",
        )];
    }
    let mut errs = Vec::new();
    for version in &crd.spec.versions {
        if version.storage && !stored.contains(&version.name.as_str()) {
            errs.push(FieldError::invalid(
                &path,
                BadValue::Other(version.name.clone()),
                &format!("must have the storage version {}", version.name),
            ));
        }
    }
    for (i, name) in stored.iter().enumerate() {
        if !crd.spec.versions.iter().any(|v| v.name == *name) {
            errs.push(FieldError::invalid(
                &path.index(i),
                *name,
                "must appear in spec.versions",
            ));
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd(patch: serde_json::Value) -> CustomResourceDefinition {
        let mut object = json!({
            "metadata": {"name": "widgets.example.com", "resourceVersion": "1"},
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                              "schema": {"openAPIV3Schema": {"type": "object"}}}],
            },
            "status": {"storedVersions": ["v1"]},
        });
        merge(&mut object, patch);
        serde_json::from_value(object).unwrap()
    }

    /// RFC 7386 merge of `patch` into `target`.
    fn merge(target: &mut serde_json::Value, patch: serde_json::Value) {
        match (target, patch) {
            (serde_json::Value::Object(target), serde_json::Value::Object(patch)) => {
                for (key, value) in patch {
                    if value.is_null() {
                        target.remove(&key);
                    } else {
                        merge(target.entry(key).or_insert(serde_json::Value::Null), value);
                    }
                }
            }
            (target, patch) => *target = patch,
        }
    }

    fn messages(errors: &[FieldError]) -> Vec<String> {
        errors.iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn a_valid_definition_passes() {
        assert_eq!(
            messages(&validate_crd(&crd(json!({})))),
            Vec::<String>::new()
        );
    }

    #[test]
    fn names_group_versions_and_schemas_as_upstream() {
        let wrong = crd(json!({"metadata": {"name": "gadgets.example.com"}}));
        assert_eq!(
            messages(&validate_crd(&wrong)),
            [
                "metadata.name: Invalid value: \"gadgets.example.com\": must be spec.names.plural+\".\"+spec.group"
            ]
        );
        let dotless =
            crd(json!({"metadata": {"name": "widgets.example"}, "spec": {"group": "example"}}));
        assert_eq!(
            messages(&validate_crd(&dotless)),
            ["spec.group: Invalid value: \"example\": should be a domain with at least one dot"]
        );
        let two = crd(json!({"spec": {"versions": [
            {"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object"}}},
            {"name": "v1", "served": true, "storage": true},
        ]}}));
        let errs = messages(&validate_crd(&two));
        assert!(
            errs.iter().any(|e| e.starts_with(
                "spec.versions[1].schema.openAPIV3Schema: Required value: schemas are required"
            )),
            "{errs:?}"
        );
        assert!(
            errs.iter()
                .any(|e| e.ends_with("must contain unique version names")),
            "{errs:?}"
        );
        assert!(
            errs.iter()
                .any(|e| e.ends_with("must have exactly one version marked as storage version")),
            "{errs:?}"
        );
        let scope = crd(json!({"spec": {"scope": "Everywhere"}}));
        assert_eq!(
            messages(&validate_crd(&scope)),
            [
                "spec.scope: Unsupported value: \"Everywhere\": supported values: \"Cluster\", \"Namespaced\""
            ]
        );
        let same = crd(json!({"spec": {"names": {"listKind": "Widget"}}}));
        assert_eq!(
            messages(&validate_crd(&same)),
            [
                "spec.names.listKind: Invalid value: \"Widget\": kind and listKind may not be the same or parsing become ambiguous"
            ]
        );
    }

    #[test]
    fn a_schema_every_version_shares_is_reported_as_spec_validation() {
        let loose = json!({"openAPIV3Schema": {"type": "object", "properties": {"a": {}}}});
        let strict = json!({"openAPIV3Schema": {"type": "object"}});
        let version = |name: &str, storage: bool, schema: &serde_json::Value| json!({"name": name, "served": true, "storage": storage, "schema": schema});
        let shared = crd(json!({"spec": {"versions": [
            version("v1", true, &loose), version("v2", false, &loose),
        ]}}));
        assert_eq!(
            messages(&validate_crd(&shared)),
            [
                "spec.validation.openAPIV3Schema.properties[a].type: Required value: must not be empty for specified object fields"
            ]
        );
        let different = crd(json!({"spec": {"versions": [
            version("v1", true, &loose), version("v2", false, &strict),
        ]}}));
        assert_eq!(
            messages(&validate_crd(&different)),
            [
                "spec.versions[0].schema.openAPIV3Schema.properties[a].type: Required value: must not be empty for specified object fields"
            ]
        );
    }

    #[test]
    fn group_and_plural_never_change_scope_and_kind_once_established() {
        let old =
            crd(json!({"status": {"conditions": [{"type": "Established", "status": "True"}]}}));
        let new = crd(
            json!({"spec": {"scope": "Cluster", "names": {"kind": "Gadget", "listKind": "GadgetList"}}}),
        );
        let errs = messages(&validate_crd_update(&new, &old));
        assert_eq!(
            errs,
            [
                "spec.scope: Invalid value: \"Cluster\": field is immutable",
                "spec.names.kind: Invalid value: \"Gadget\": field is immutable",
            ]
        );
        let not_yet = crd(json!({}));
        assert!(validate_crd_update(&new, &not_yet).is_empty());
    }

    #[test]
    fn scale_paths_are_checked_as_upstream_checks_them() {
        let with_scale = |scale: serde_json::Value| {
            crd(
                json!({"spec": {"versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object"}},
                "subresources": {"scale": scale}}]}}),
            )
        };
        let good = with_scale(json!({"specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas", "labelSelectorPath": ".status.selector"}));
        assert!(validate_crd(&good).is_empty());
        let bad = with_scale(json!({"specReplicasPath": ".status.replicas",
            "statusReplicasPath": "status.replicas", "labelSelectorPath": ".spec.selector"}));
        assert_eq!(
            messages(&validate_crd(&bad)),
            [
                "spec.versions[0].subresources.scale.specReplicasPath: Invalid value: \".status.replicas\": should be a json path under .spec",
                "spec.versions[0].subresources.scale.statusReplicasPath: Invalid value: \"status.replicas\": must be a simple json path starting with .",
                "spec.versions[0].subresources.scale.labelSelectorPath: Invalid value: \".spec.selector\": should be a json path under .status",
            ]
        );
        let missing = with_scale(json!({}));
        assert_eq!(
            messages(&validate_crd(&missing)),
            [
                "spec.versions[0].subresources.scale.specReplicasPath: Required value",
                "spec.versions[0].subresources.scale.statusReplicasPath: Required value",
            ]
        );
    }

    #[test]
    fn selectable_fields_as_upstream_checks_them() {
        let schema = json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "color": {"type": "string", "enum": ["red", "blue"]},
                "size": {"type": "integer"},
                "on": {"type": "boolean"},
                "ratio": {"type": "number"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            }},
        }});
        let with = |paths: Vec<&str>| {
            let fields: Vec<_> = paths.iter().map(|p| json!({"jsonPath": p})).collect();
            crd(
                json!({"spec": {"versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": schema.clone()}, "selectableFields": fields}]}}),
            )
        };
        assert_eq!(
            messages(&validate_crd(&with(vec![
                ".spec.color",
                ".spec.size",
                ".spec.on",
                ".spec.labels.team"
            ]))),
            Vec::<String>::new()
        );
        let at = "spec.versions[0].selectableFields";
        assert_eq!(
            messages(&validate_crd(&with(vec![
                ".spec.ratio",
                ".spec.tags",
                ".spec.missing",
                "spec.color",
                ".spec.color",
                ".spec.color",
                ".spec.tags[0]",
                "",
            ]))),
            [
                format!(
                    "{at}[0].jsonPath: Invalid value: \".spec.ratio\": must point to a field of type string, boolean or integer. Enum string fields and strings with formats are allowed."
                ),
                format!(
                    "{at}[1].jsonPath: Invalid value: \".spec.tags\": must point to a field of type string, boolean or integer. Enum string fields and strings with formats are allowed."
                ),
                format!(
                    "{at}[2].jsonPath: Invalid value: \".spec.missing\": is an invalid path: does not refer to a valid field"
                ),
                format!(
                    "{at}[3].jsonPath: Invalid value: \"spec.color\": is an invalid path: expected [ or . but got: spec"
                ),
                format!("{at}[5].jsonPath: Duplicate value: \".spec.color\""),
                format!(
                    "{at}[6].jsonPath: Invalid value: \".spec.tags[0]\": is an invalid path: array notation is not allowed"
                ),
                format!("{at}[7].jsonPath: Required value"),
            ]
        );
        let nine: Vec<String> = (0..9).map(|i| format!(".spec.labels.k{i}")).collect();
        let errs = messages(&validate_crd(&with(
            nine.iter().map(String::as_str).collect(),
        )));
        assert_eq!(
            errs,
            [format!("{at}: Too many: 9: must have at most 8 items")]
        );
    }
}

//! Custom resources: what a CustomResourceDefinition declares, in the same [`Resource`] shape
//! the built-in kinds are declared in, so that the one generic registry, discovery, Tables and
//! admission serve them as they serve built-in kinds. [`declare`] turns an established CRD
//! into one declaration per served version, with [`CustomStrategy`] as its strategy.
//!
//! A declaration is `'static` like the built-in ones: it is built once per distinct content and
//! kept for the process's life (a CRD changed back and forth reuses its earlier declarations), so
//! the registry, which holds `&'static Resource`, needs no second shape for run-time kinds.
//!
//! A version's `status` and `scale` subresources are declared as the built-in ones are; `scale`
//! carries the CRD's paths ([`ScalePaths`]).
//!
//! A version's CEL rules ([`crate::cel`]) run after its schema found the object valid, as
//! upstream's do.
//!
//! A version's `selectableFields` are field selector labels (the path without its leading
//! dot, e.g. `spec.color`) whose values are the object's field as upstream prints it (a
//! string as is, a number or boolean in its JSON form, "" when absent). The watch cache keeps
//! one set of field values per object for every version, so each version's strategy computes
//! the fields of all served versions, and accepts in selectors only its own.
//!
//! Not yet: webhook conversion.

use std::sync::{Arc, Mutex, OnceLock};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceColumnDefinition, CustomResourceDefinition, CustomResourceDefinitionNames,
    JSONSchemaProps, WebhookConversion,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use crate::catalog::{self, ALL_VERBS, Resource, ScalePaths, Serves, Subresource, schema_of};
use crate::cel::Rules;
use crate::field::{ErrorType, FieldError, Path};
use crate::printers::jsonpath::JsonPath;
use crate::printers::{self, Column, CustomColumn, Print, Printer};
use crate::strategy::{DecodeError, StatusPolicy, Strategy};
use crate::structural;
use crate::validation::meta::{validate_object_meta_generic, validate_object_meta_update_generic};
use crate::validation::names::NameValidator;

/// One served version of a custom resource: its declaration and strategy.
#[derive(Clone)]
pub struct Declared {
    /// The declaration discovery and the registry read.
    pub resource: &'static Resource,
    /// How its objects are decoded and validated.
    pub strategy: Arc<dyn Strategy>,
    /// The `apiVersion` objects are stored in (the CRD's storage version).
    pub storage_api_version: String,
    /// The CRD's `metadata.generation` it was declared from (a new one replaces it).
    pub generation: i64,
    /// The accepted `listKind`.
    pub list_kind: String,
    /// The version's schema, which its OpenAPI definition is published from.
    pub schema: Option<Arc<JSONSchemaProps>>,
    /// The CRD's conversion webhook, when its conversion strategy is `Webhook`.
    pub conversion_webhook: Option<Arc<WebhookConversion>>,
    /// Whether objects may be stored in versions other than the storage version (its
    /// `storedVersions` list others): each object read is then converted from its own.
    pub mixed_storage: bool,
    /// The warning every request to a deprecated version gets (its `deprecationWarning`, or
    /// upstream's default naming the preferred version served).
    pub deprecation: Option<String>,
}

impl std::fmt::Debug for Declared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Declared")
            .field("group", &self.resource.group)
            .field("version", &self.resource.version)
            .field("plural", &self.resource.plural)
            .finish_non_exhaustive()
    }
}

/// The declarations of every served version of `crd`, under the names it has accepted (its
/// status), or none while no names are accepted.
pub fn declare(crd: &CustomResourceDefinition) -> Vec<Declared> {
    let Some(names) = crd.status.as_ref().and_then(|s| s.accepted_names.as_ref()) else {
        return Vec::new();
    };
    if names.plural.is_empty() || names.kind.is_empty() {
        return Vec::new();
    }
    let group = crd.spec.group.as_str();
    let Some(storage) = crd.spec.versions.iter().find(|v| v.storage) else {
        return Vec::new();
    };
    let storage_api_version = format!("{group}/{}", storage.name);
    let mixed_storage = crd
        .status
        .as_ref()
        .and_then(|s| s.stored_versions.as_ref())
        .is_some_and(|stored| stored.iter().any(|v| *v != storage.name));
    let conversion_webhook = crd
        .spec
        .conversion
        .as_ref()
        .filter(|c| c.strategy == "Webhook")
        .and_then(|c| c.webhook.clone())
        .map(Arc::new);
    let selectable = |v: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionVersion| -> Vec<String> {
        v.selectable_fields
            .iter()
            .flatten()
            .map(|f| f.json_path.trim_start_matches('.').to_owned())
            .collect()
    };
    let mut every: Vec<String> = crd
        .spec
        .versions
        .iter()
        .filter(|v| v.served)
        .flat_map(selectable)
        .collect();
    every.sort();
    every.dedup();
    let all_selectable = intern_names(every);
    crd.spec
        .versions
        .iter()
        .filter(|v| v.served)
        .map(|version| {
            let subresources = version.subresources.as_ref();
            let status = subresources.is_some_and(|s| s.status.is_some());
            let scale = subresources.and_then(|s| s.scale.as_ref()).map(|scale| {
                (
                    scale.spec_replicas_path.clone(),
                    scale.status_replicas_path.clone(),
                    scale.label_selector_path.clone(),
                )
            });
            let resource = intern(Shape {
                group: group.to_owned(),
                version: version.name.clone(),
                names: names.clone(),
                namespaced: crd.spec.scope == "Namespaced",
                status,
                scale,
                columns: version
                    .additional_printer_columns
                    .clone()
                    .unwrap_or_default(),
            });
            let schema = version
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.clone())
                .map(Arc::new);
            Declared {
                resource,
                strategy: Arc::new(CustomStrategy {
                    namespaced: resource.namespaced,
                    status,
                    schema: schema.clone(),
                    rules: Arc::default(),
                    default_paths: Arc::default(),
                    merge_type: Arc::default(),
                    selectable: intern_names(selectable(version)),
                    all_selectable,
                }),
                storage_api_version: storage_api_version.clone(),
                generation: crd.metadata.generation.unwrap_or_default(),
                list_kind: names
                    .list_kind
                    .clone()
                    .unwrap_or_else(|| format!("{}List", names.kind)),
                schema,
                conversion_webhook: conversion_webhook.clone(),
                mixed_storage,
                deprecation: (version.deprecated == Some(true)).then(|| {
                    version
                        .deprecation_warning
                        .clone()
                        .unwrap_or_else(|| default_deprecation(crd, &version.name, &names.kind))
                }),
            }
        })
        .collect()
}

/// Upstream's default warning for a deprecated version: `<group>/<version> <Kind> is
/// deprecated`, and `; use <group>/<version> <Kind>` with the most preferred served version
/// that is not deprecated and is preferred to it, if there is one.
fn default_deprecation(crd: &CustomResourceDefinition, deprecated: &str, kind: &str) -> String {
    let group = &crd.spec.group;
    let mut message = format!("{group}/{deprecated} {kind} is deprecated");
    let preferred = crd
        .spec
        .versions
        .iter()
        .filter(|v| v.served && v.deprecated != Some(true))
        .map(|v| v.name.as_str())
        .filter(|v| version_order(v, deprecated) == std::cmp::Ordering::Less)
        .min_by(|a, b| version_order(a, b));
    if let Some(preferred) = preferred {
        message.push_str(&format!("; use {group}/{preferred} {kind}"));
    }
    message
}

/// Upstream's ordering of Kubernetes-like versions (`v2`, `v1`, `v1beta2`, `v1beta1`,
/// `v1alpha1`), preferred first; other names come last, alphabetically.
pub fn version_order(a: &str, b: &str) -> std::cmp::Ordering {
    /// (major, stability rank where GA is highest, minor) of a Kubernetes-like version.
    fn parse(v: &str) -> Option<(u64, u8, u64)> {
        let rest = v.strip_prefix('v')?;
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let major: u64 = rest[..digits].parse().ok()?;
        let rest = &rest[digits..];
        if rest.is_empty() {
            return Some((major, 2, 0));
        }
        let (rank, minor) = if let Some(minor) = rest.strip_prefix("beta") {
            (1, minor)
        } else {
            (0, rest.strip_prefix("alpha")?)
        };
        Some((major, rank, minor.parse().ok()?))
    }
    match (parse(a), parse(b)) {
        (Some((ma, ra, na)), Some((mb, rb, nb))) => (rb, mb, nb).cmp(&(ra, ma, na)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

/// What a custom resource's declaration is made from.
#[derive(Clone, PartialEq)]
struct Shape {
    group: String,
    version: String,
    names: CustomResourceDefinitionNames,
    namespaced: bool,
    status: bool,
    /// The scale subresource's spec replicas, status replicas and label selector paths.
    scale: Option<(String, String, Option<String>)>,
    columns: Vec<CustomResourceColumnDefinition>,
}

/// The declarations made so far, by the shape they were made from.
static DECLARED: Mutex<Vec<(Shape, &'static Resource)>> = Mutex::new(Vec::new());

/// The declaration of `shape`: the one made before for the same shape, else a new one.
fn intern(shape: Shape) -> &'static Resource {
    let mut declared = DECLARED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, resource)) = declared.iter().find(|(s, _)| *s == shape) {
        return resource;
    }
    let leak = |s: &str| -> &'static str { Box::leak(s.to_owned().into_boxed_str()) };
    let leak_all = |items: Option<&Vec<String>>| -> &'static [&'static str] {
        let items: Vec<&'static str> = items.into_iter().flatten().map(|s| leak(s)).collect();
        Box::leak(items.into_boxed_slice())
    };
    let kind = leak(&shape.names.kind);
    let mut subresources = Vec::new();
    if shape.status {
        subresources.push(Subresource {
            name: "status",
            group_version: None,
            kind,
            verbs: &["get", "patch", "update"],
            serves: Serves::Object,
            schema: None,
        });
    }
    if let Some((spec, status, selector)) = &shape.scale {
        subresources.push(catalog::custom_scale(ScalePaths {
            spec_replicas: leak(spec),
            status_replicas: leak(status),
            label_selector: selector.as_deref().map(leak),
        }));
    }
    let subresources: &'static [Subresource] = Box::leak(subresources.into_boxed_slice());
    let printer = if shape.columns.is_empty() {
        printers::CUSTOM
    } else {
        let columns: Vec<Column> = std::iter::once(printers::NAME)
            .chain(shape.columns.iter().map(|c| Column {
                name: leak(&c.name),
                type_: leak(&c.type_),
                format: leak(c.format.as_deref().unwrap_or_default()),
                description: leak(c.description.as_deref().unwrap_or_default()),
                priority: c.priority.unwrap_or(0),
            }))
            .collect();
        let cells: Vec<CustomColumn> = shape
            .columns
            .iter()
            .map(|c| CustomColumn {
                path: JsonPath::parse(&c.json_path).ok(),
                type_: leak(&c.type_),
            })
            .collect();
        Printer {
            columns: Box::leak(columns.into_boxed_slice()),
            print: Print::Columns(Box::leak(cells.into_boxed_slice())),
        }
    };
    let plural = leak(&shape.names.plural);
    let group = leak(&shape.group);
    let resource: &'static Resource = Box::leak(Box::new(Resource {
        group,
        version: leak(&shape.version),
        kind,
        plural,
        singular: leak(shape.names.singular.as_deref().unwrap_or_default()),
        namespaced: shape.namespaced,
        short_names: leak_all(shape.names.short_names.as_ref()),
        categories: leak_all(shape.names.categories.as_ref()),
        verbs: ALL_VERBS,
        subresources,
        // Upstream's etcd layout for custom objects: `/registry/<group>/<plural>/...`.
        storage_prefix: leak(&format!("{group}/{plural}")),
        stored_as: None,
        review: false,
        schema: schema_of::<Value>(),
        strategy: || {
            Arc::new(CustomStrategy {
                namespaced: true,
                status: false,
                selectable: &[],
                all_selectable: &[],
                schema: None,
                rules: Arc::default(),
                default_paths: Arc::default(),
                merge_type: Arc::default(),
            })
        },
        printer: Some(printer),
    }));
    declared.push((shape, resource));
    resource
}

/// The strategy of a custom resource: objects pruned to their version's schema, defaulted and
/// validated by it ([`crate::structural`]), their metadata validated as upstream validates every
/// custom object's, generation counted on every change outside the metadata (and the status,
/// with a status subresource).
#[derive(Debug, Clone)]
pub struct CustomStrategy {
    namespaced: bool,
    status: bool,
    schema: Option<Arc<JSONSchemaProps>>,
    /// The schema's CEL rules, compiled at the first validation (declarations are remade at
    /// every resync; most are never used to validate).
    rules: Arc<OnceLock<Option<Rules>>>,
    /// Where the schema's defaults are, worked out at the first read that asks.
    default_paths: Arc<OnceLock<Option<structural::DefaultPaths>>>,
    /// The schema's merge structure for server-side apply, worked out at the first write.
    merge_type: Arc<OnceLock<crate::apply::schema::Type>>,
    /// This version's selectable fields (paths without the leading dot).
    selectable: &'static [&'static str],
    /// Every served version's selectable fields.
    all_selectable: &'static [&'static str],
}

/// Interned lists of selectable field names (declarations are remade at every resync).
static NAMES: Mutex<Vec<&'static [&'static str]>> = Mutex::new(Vec::new());

/// `names` as a `'static` list: the one made before for the same names, else a new one.
fn intern_names(names: Vec<String>) -> &'static [&'static str] {
    if names.is_empty() {
        return &[];
    }
    let mut interned = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(found) = interned
        .iter()
        .find(|list| list.iter().copied().eq(names.iter().map(String::as_str)))
    {
        return found;
    }
    let list: Vec<&'static str> = names
        .into_iter()
        .map(|n| &*Box::leak(n.into_boxed_str()))
        .collect();
    let list: &'static [&'static str] = Box::leak(list.into_boxed_slice());
    interned.push(list);
    list
}

/// A selectable field's value in `object`, as upstream's `fmt.Sprint` of it: a string as is, a
/// number or boolean in its JSON form, "" when absent or null.
pub fn selectable_value(object: &Value, name: &str) -> String {
    let mut current = object;
    for segment in name.split('.') {
        match current.get(segment) {
            Some(next) => current = next,
            None => return String::new(),
        }
    }
    match current {
        Value::Null => String::new(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

impl CustomStrategy {
    /// The CEL rules `object` (with the stored `old` of an update) breaks, after the errors
    /// `errs` found so far, as upstream runs them: not at all when one of those is of a kind
    /// that blocks them (an unsupported, missing, too long, too many or mistyped value), which
    /// is then said at the root.
    fn rule_errors(
        &self,
        errs: &[FieldError],
        object: &Value,
        old: Option<&Value>,
    ) -> (Vec<FieldError>, Vec<String>) {
        let Some(schema) = &self.schema else {
            return Default::default();
        };
        let Some(rules) = self.rules.get_or_init(|| Rules::compile(schema)) else {
            return Default::default();
        };
        let blocked = errs.iter().any(|e| {
            matches!(
                e.error_type,
                ErrorType::NotSupported
                    | ErrorType::Required
                    | ErrorType::TooLong
                    | ErrorType::TooMany
                    | ErrorType::TypeInvalid
            )
        });
        if blocked {
            let error = FieldError::invalid(
                &Path::new("<nil>"),
                "null",
                "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
            );
            return (vec![error], Vec::new());
        }
        rules.check(object, old)
    }
}

fn metadata(object: &Value) -> Result<ObjectMeta, FieldError> {
    serde_json::from_value(object.get("metadata").cloned().unwrap_or_default()).map_err(|e| {
        FieldError::invalid(
            &Path::new("metadata"),
            e.to_string().as_str(),
            "invalid metadata",
        )
    })
}

impl Strategy for CustomStrategy {
    fn merge_type(&self) -> Option<crate::apply::schema::Type> {
        let schema = self.schema.as_deref()?;
        Some(
            *self
                .merge_type
                .get_or_init(|| crate::apply::custom::for_schema(schema)),
        )
    }

    fn selectable_fields(&self, object: &Value) -> Vec<(&'static str, String)> {
        self.all_selectable
            .iter()
            .map(|name| (*name, selectable_value(object, name)))
            .collect()
    }

    fn selectable_field_names(&self) -> &'static [&'static str] {
        self.selectable
    }

    fn decode(&self, object: &Value) -> Result<(Value, Vec<String>), DecodeError> {
        if !object.is_object() {
            return Err(DecodeError::Invalid(
                "the object must be a JSON object".to_owned(),
            ));
        }
        let mut object = object.clone();
        let Some(schema) = &self.schema else {
            return Ok((object, Vec::new()));
        };
        let unknown = structural::prune(&mut object, schema);
        structural::default(&mut object, schema);
        Ok((object, unknown))
    }

    fn validate(&self, object: &Value) -> Vec<FieldError> {
        let mut errs = match metadata(object) {
            Ok(meta) => validate_object_meta_generic(
                &meta,
                self.namespaced,
                NameValidator::DnsSubdomain,
                &Path::new("metadata"),
            ),
            Err(error) => vec![error],
        };
        if let Some(schema) = &self.schema {
            errs.extend(structural::validate(object, schema));
            errs.extend(structural::list_set_and_map_errors(object, schema));
        }
        let (rules, _) = self.rule_errors(&errs, object, None);
        errs.extend(rules);
        errs
    }

    fn validate_update(
        &self,
        new: &Value,
        old: &Value,
        subresource: Option<&str>,
    ) -> Vec<FieldError> {
        self.validate_update_warned(new, old, subresource).0
    }

    fn validate_update_warned(
        &self,
        new: &Value,
        old: &Value,
        _subresource: Option<&str>,
    ) -> (Vec<FieldError>, Vec<String>) {
        let mut errs = match (metadata(new), metadata(old)) {
            (Ok(new), Ok(old)) => {
                validate_object_meta_update_generic(&new, &old, &Path::new("metadata"))
            }
            (Err(error), _) | (_, Err(error)) => vec![error],
        };
        if let Some(schema) = &self.schema {
            errs.extend(structural::validate_update(new, Some(old), schema));
            // As upstream, a list that already broke its type's uniqueness may stay broken.
            let broken = structural::list_set_and_map_errors(new, schema);
            if !broken.is_empty() && structural::list_set_and_map_errors(old, schema).is_empty() {
                errs.extend(broken);
            }
        }
        let (rules, warnings) = self.rule_errors(&errs, new, Some(old));
        errs.extend(rules);
        (errs, warnings)
    }

    fn status_policy(&self) -> StatusPolicy {
        if self.status {
            StatusPolicy::Subresource
        } else {
            StatusPolicy::None
        }
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn defaults_on_read(&self) -> bool {
        self.schema.as_deref().is_some_and(structural::has_defaults)
    }

    fn default_stored(&self, object: &mut Value) {
        if let Some(schema) = &self.schema {
            structural::default(object, schema);
        }
    }

    fn stored_needs_defaults(&self, json: &[u8]) -> bool {
        let Some(schema) = &self.schema else {
            return false;
        };
        match self
            .default_paths
            .get_or_init(|| structural::DefaultPaths::of(schema))
        {
            Some(paths) => !paths.all_present(json),
            None => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn selectable_values_print_as_upstream() {
        let object = json!({"spec": {"color": "red", "size": 3, "on": true, "none": null}});
        assert_eq!(selectable_value(&object, "spec.color"), "red");
        assert_eq!(selectable_value(&object, "spec.size"), "3");
        assert_eq!(selectable_value(&object, "spec.on"), "true");
        assert_eq!(selectable_value(&object, "spec.none"), "");
        assert_eq!(selectable_value(&object, "spec.missing"), "");
        assert_eq!(selectable_value(&object, "status.x"), "");
    }

    #[test]
    fn each_version_selects_by_its_own_fields_over_every_versions_values() {
        let crd: CustomResourceDefinition = serde_json::from_value(json!({
            "metadata": {"name": "widgets.example.com", "generation": 1},
            "spec": {
                "group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget"},
                "versions": [
                    {"name": "v1", "served": true, "storage": true,
                     "selectableFields": [{"jsonPath": ".spec.color"}]},
                    {"name": "v2", "served": true, "storage": false,
                     "selectableFields": [{"jsonPath": ".spec.size"}, {"jsonPath": ".spec.color"}]},
                ],
            },
            "status": {"acceptedNames": {"plural": "widgets", "kind": "Widget"}},
        }))
        .unwrap();
        let declared = declare(&crd);
        assert_eq!(declared.len(), 2);
        assert_eq!(
            declared[0].strategy.selectable_field_names(),
            ["spec.color"]
        );
        assert_eq!(
            declared[1].strategy.selectable_field_names(),
            ["spec.size", "spec.color"]
        );
        let object = json!({"spec": {"color": "blue", "size": 2}});
        let fields = declared[0].strategy.selectable_fields(&object);
        assert_eq!(
            fields,
            [
                ("spec.color", "blue".to_owned()),
                ("spec.size", "2".to_owned())
            ]
        );
        // Declared again (every resync), the same lists are reused.
        let again = declare(&crd);
        assert!(std::ptr::eq(
            again[1].strategy.selectable_field_names(),
            declared[1].strategy.selectable_field_names()
        ));
    }
}

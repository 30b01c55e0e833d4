//! The `apiregistration.k8s.io/v1` APIService, which `k8s-openapi` does not carry (it is the
//! aggregator's, not the core API's): the type, with the traits the catalog and the generic
//! registry need, its OpenAPI schema, defaults and validation as upstream's kube-aggregator has
//! them.
//!
//! An APIService registers one group-version: served by this server (no `service`: a local
//! one) or by an extension API server behind a Service, which the API server proxies to.

use std::borrow::Cow;

use k8s_openapi::ByteString;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use crate::field::{BadValue, FieldError, Path};
use crate::names::{
    NameValidator, is_dns1035_label, is_dns1123_subdomain, is_valid_path_segment_name,
};
use crate::validation::meta::{validate_object_meta, validate_object_meta_update};

/// One group-version served by this server or an extension API server.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct APIService {
    pub metadata: ObjectMeta,
    pub spec: Option<APIServiceSpec>,
    pub status: Option<APIServiceStatus>,
}

/// What an APIService serves, and where.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct APIServiceSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(
        default,
        rename = "insecureSkipTLSVerify",
        skip_serializing_if = "Option::is_none"
    )]
    pub insecure_skip_tls_verify: Option<bool>,
    #[serde(default, rename = "caBundle", skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<ByteString>,
    #[serde(default)]
    pub group_priority_minimum: i32,
    #[serde(default)]
    pub version_priority: i32,
}

/// The Service an extension API server is reached through.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceReference {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
}

/// The APIService's conditions (`Available`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct APIServiceStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<APIServiceCondition>>,
}

/// One condition of an APIService.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct APIServiceCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl k8s_openapi::Resource for APIService {
    const API_VERSION: &'static str = "apiregistration.k8s.io/v1";
    const GROUP: &'static str = "apiregistration.k8s.io";
    const KIND: &'static str = "APIService";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "apiservices";
    type Scope = k8s_openapi::ClusterResourceScope;
}

impl k8s_openapi::ListableResource for APIService {
    const LIST_KIND: &'static str = "APIServiceList";
}

impl k8s_openapi::Metadata for APIService {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The object as sent: type meta first, as every kind's.
#[derive(Serialize)]
struct Written<'a> {
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    kind: &'static str,
    metadata: &'a ObjectMeta,
    #[serde(skip_serializing_if = "Option::is_none")]
    spec: &'a Option<APIServiceSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: &'a Option<APIServiceStatus>,
}

impl Serialize for APIService {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Written {
            api_version: <Self as k8s_openapi::Resource>::API_VERSION,
            kind: <Self as k8s_openapi::Resource>::KIND,
            metadata: &self.metadata,
            spec: &self.spec,
            status: &self.status,
        }
        .serialize(serializer)
    }
}

/// The object as read: type meta, if any, is the kind's.
#[derive(Deserialize)]
struct Read {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: Option<APIServiceSpec>,
    #[serde(default)]
    status: Option<APIServiceStatus>,
    #[serde(default, rename = "apiVersion")]
    _api_version: Option<String>,
    #[serde(default, rename = "kind")]
    _kind: Option<String>,
}

impl<'de> Deserialize<'de> for APIService {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let read = Read::deserialize(deserializer)?;
        Ok(APIService {
            metadata: read.metadata,
            spec: read.spec,
            status: read.status,
        })
    }
}

const SCHEMA_PREFIX: &str = "io.k8s.kube-aggregator.pkg.apis.apiregistration.v1";

impl JsonSchema for APIService {
    fn schema_name() -> Cow<'static, str> {
        format!("{SCHEMA_PREFIX}.APIService").into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "APIService represents a server for a particular GroupVersion. Name must be \"version.group\".",
            "type": "object",
            "properties": {
                "apiVersion": {"description": "APIVersion defines the versioned schema of this representation of an object.", "type": "string"},
                "kind": {"description": "Kind is a string value representing the REST resource this object represents.", "type": "string"},
                "metadata": generator.subschema_for::<ObjectMeta>(),
                "spec": generator.subschema_for::<APIServiceSpec>(),
                "status": generator.subschema_for::<APIServiceStatus>(),
            },
        })
    }
}

impl JsonSchema for APIServiceSpec {
    fn schema_name() -> Cow<'static, str> {
        format!("{SCHEMA_PREFIX}.APIServiceSpec").into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "APIServiceSpec names the Service an extension API server is reached through (none: this server serves the group-version), how to trust it, and its priority in discovery.",
            "type": "object",
            "properties": {
                "service": generator.subschema_for::<ServiceReference>(),
                "group": {"description": "Group is the API group this APIService serves.", "type": "string"},
                "version": {"description": "Version is the API version this APIService serves.", "type": "string"},
                "insecureSkipTLSVerify": {"description": "InsecureSkipTLSVerify disables verifying the extension API server's certificate. Discouraged; use caBundle.", "type": "boolean"},
                "caBundle": {"description": "CABundle is the PEM bundle of the CAs that sign the extension API server's serving certificate.", "type": "string", "format": "byte", "x-kubernetes-list-type": "atomic"},
                "groupPriorityMinimum": {"description": "GroupPriorityMinimum is the least priority this group should have in discovery; the highest of a group's APIServices counts.", "type": "integer", "format": "int32"},
                "versionPriority": {"description": "VersionPriority orders this version among its group's versions in discovery.", "type": "integer", "format": "int32"},
            },
            "required": ["groupPriorityMinimum", "versionPriority"],
        })
    }
}

impl JsonSchema for ServiceReference {
    fn schema_name() -> Cow<'static, str> {
        format!("{SCHEMA_PREFIX}.ServiceReference").into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "ServiceReference names a Service and the port an extension API server listens on.",
            "type": "object",
            "properties": {
                "namespace": {"description": "Namespace is the Service's namespace.", "type": "string"},
                "name": {"description": "Name is the Service's name.", "type": "string"},
                "port": {"description": "Port is the Service port to reach; defaults to 443.", "type": "integer", "format": "int32"},
            },
        })
    }
}

impl JsonSchema for APIServiceStatus {
    fn schema_name() -> Cow<'static, str> {
        format!("{SCHEMA_PREFIX}.APIServiceStatus").into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "APIServiceStatus holds the APIService's conditions.",
            "type": "object",
            "properties": {
                "conditions": {
                    "description": "Conditions of the APIService (Available).",
                    "type": "array",
                    "items": generator.subschema_for::<APIServiceCondition>(),
                    "x-kubernetes-list-map-keys": ["type"],
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-patch-merge-key": "type",
                    "x-kubernetes-patch-strategy": "merge",
                },
            },
        })
    }
}

impl JsonSchema for APIServiceCondition {
    fn schema_name() -> Cow<'static, str> {
        format!("{SCHEMA_PREFIX}.APIServiceCondition").into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "APIServiceCondition describes the state of an APIService at a point in time.",
            "type": "object",
            "properties": {
                "type": {"description": "Type of the condition.", "type": "string"},
                "status": {"description": "Status is True, False or Unknown.", "type": "string"},
                "lastTransitionTime": generator.subschema_for::<Time>(),
                "reason": {"description": "Reason is a CamelCase word for the last transition.", "type": "string"},
                "message": {"description": "Message says what happened, for people.", "type": "string"},
            },
            "required": ["type", "status"],
        })
    }
}

/// APIService defaults: a Service's port is 443.
pub fn default_api_service(service: &mut APIService) {
    if let Some(reference) = service.spec.as_mut().and_then(|s| s.service.as_mut()) {
        reference.port.get_or_insert(443);
    }
}

/// An APIService to be created, as upstream's aggregator validates it.
pub fn validate_api_service(service: &APIService) -> Vec<FieldError> {
    let spec = service.spec.clone().unwrap_or_default();
    let group = spec.group.as_deref().unwrap_or_default();
    let version = spec.version.as_deref().unwrap_or_default();
    let required_name = format!("{version}.{group}");
    let mut errs = validate_object_meta(
        &service.metadata,
        false,
        NameValidator::PathSegment,
        &Path::new("metadata"),
    );
    // The name must be `version.group` (once it is a path segment at all).
    let name = service.metadata.name.as_deref().unwrap_or_default();
    if !name.is_empty() && is_valid_path_segment_name(name).is_empty() && name != required_name {
        errs.push(FieldError::invalid(
            &Path::new("metadata").child("name"),
            name,
            &format!(
                "must be `spec.version+\".\"+spec.group`: {}",
                crate::field::go_quote(&required_name)
            ),
        ));
    }
    let path = Path::new("spec");
    if group.is_empty() && version != "v1" {
        errs.push(FieldError::required(
            &path.child("group"),
            "only v1 may have an empty group and it better be legacy kube",
        ));
    }
    if !group.is_empty() {
        for problem in is_dns1123_subdomain(group) {
            errs.push(FieldError::invalid(&path.child("group"), group, &problem));
        }
    }
    for problem in is_dns1035_label(version) {
        errs.push(FieldError::invalid(
            &path.child("version"),
            version,
            &problem,
        ));
    }
    if !(1..=20000).contains(&spec.group_priority_minimum) {
        errs.push(FieldError::invalid(
            &path.child("groupPriorityMinimum"),
            i64::from(spec.group_priority_minimum),
            "must be positive and less than 20000",
        ));
    }
    if !(1..=1000).contains(&spec.version_priority) {
        errs.push(FieldError::invalid(
            &path.child("versionPriority"),
            i64::from(spec.version_priority),
            "must be positive and less than 1000",
        ));
    }
    let bundle = spec.ca_bundle.as_ref().map_or(0, |b| b.0.len());
    let insecure = spec.insecure_skip_tls_verify.unwrap_or(false);
    let Some(reference) = &spec.service else {
        if bundle != 0 {
            errs.push(FieldError::invalid(
                &path.child("caBundle"),
                format!("{bundle} bytes").as_str(),
                "local APIServices may not have a caBundle",
            ));
        }
        if insecure {
            errs.push(FieldError::invalid(
                &path.child("insecureSkipTLSVerify"),
                BadValue::Other("true".to_owned()),
                "local APIServices may not have insecureSkipTLSVerify",
            ));
        }
        return errs;
    };
    let at = path.child("service");
    if reference
        .namespace
        .as_deref()
        .unwrap_or_default()
        .is_empty()
    {
        errs.push(FieldError::required(&at.child("namespace"), ""));
    }
    if reference.name.as_deref().unwrap_or_default().is_empty() {
        errs.push(FieldError::required(&at.child("name"), ""));
    }
    if insecure && bundle > 0 {
        errs.push(FieldError::invalid(
            &path.child("insecureSkipTLSVerify"),
            BadValue::Other("true".to_owned()),
            "may not be true if caBundle is present",
        ));
    }
    errs
}

/// A change of an APIService: the create rules, and metadata's update rules.
pub fn validate_api_service_update(new: &APIService, old: &APIService) -> Vec<FieldError> {
    let mut errs =
        validate_object_meta_update(&new.metadata, &old.metadata, &Path::new("metadata"));
    errs.extend(validate_api_service(new));
    errs
}

/// A change of an APIService's status: metadata's update rules and known condition statuses.
pub fn validate_api_service_status_update(new: &APIService, old: &APIService) -> Vec<FieldError> {
    let mut errs =
        validate_object_meta_update(&new.metadata, &old.metadata, &Path::new("metadata"));
    let statuses = ["True", "False", "Unknown"];
    for (i, condition) in new
        .status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .enumerate()
    {
        if !statuses.contains(&condition.status.as_str()) {
            errs.push(FieldError::not_supported(
                &Path::new("status")
                    .child("conditions")
                    .index(i)
                    .child("status"),
                condition.status.as_str(),
                &statuses,
            ));
        }
    }
    errs
}

#[cfg(test)]
mod tests;

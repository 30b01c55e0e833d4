//! The structure of the types a strategic merge patch walks: which field of which type holds
//! which type, and the patch strategy of each field. A [`Catalogue`] is built from JSON-schema
//! definitions (the `$defs` of a JSON Schema or the `components.schemas` of an OpenAPI
//! document) that carry `x-kubernetes-patch-*` extensions; [`builtin`] is the catalogue of the
//! built-in kinds Capstan serves, generated once from `k8s-openapi`'s schemas and annotated
//! from [`super::metadata::FIELD_PATCHES`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::OnceLock;

use k8s_openapi::schemars::SchemaGenerator;
use serde_json::{Map, Value};

use crate::catalog::{self, Schema};

use super::metadata::{PATCH_MERGE_KEY_EXTENSION, PATCH_STRATEGY_EXTENSION, annotate_definitions};

/// How deeply inline schemas may nest inside one definition before the rest is taken as opaque.
const MAX_INLINE_DEPTH: usize = 32;

type NodeId = usize;

/// One type, as far as patching cares.
#[derive(Debug)]
enum Shape {
    /// An object with named fields, named as upstream's Go type is (empty for an inline schema).
    /// An object whose fields are unknown (`RawExtension`, `FieldsV1`), and a named type that
    /// is a scalar on the wire (`Quantity`, `Time`), are structs without fields, as in Go.
    Struct {
        name: String,
        fields: BTreeMap<String, Field>,
    },
    /// An object whose values all have one type (which the walker never needs: it cannot look
    /// fields up in a map).
    Map,
    /// A list.
    List(NodeId),
    /// A scalar, by Go kind (`string`, `int64`, ...).
    Scalar(&'static str),
}

#[derive(Debug)]
struct Field {
    node: NodeId,
    strategy: Option<String>,
    merge_key: Option<String>,
}

/// The patch metadata of a set of types.
#[derive(Debug, Default)]
pub struct Catalogue {
    nodes: Vec<Shape>,
    by_name: HashMap<String, NodeId>,
}

impl Catalogue {
    /// Builds a catalogue from schema definitions keyed by definition name. A `$ref` is resolved
    /// by its last path segment; a field's `x-kubernetes-patch-strategy` and
    /// `x-kubernetes-patch-merge-key` extensions are read from its property schema.
    pub fn from_definitions(definitions: &Map<String, Value>) -> Catalogue {
        let mut catalogue = Catalogue::default();
        for name in definitions.keys() {
            catalogue.reserve(name);
        }
        for (name, schema) in definitions {
            let Some(&id) = catalogue.by_name.get(name) else {
                continue;
            };
            let shape = catalogue.definition_shape(name, schema);
            catalogue.nodes[id] = shape;
        }
        catalogue
    }

    /// The metadata of the type named `definition`.
    pub fn get(&self, definition: &str) -> Option<PatchMeta<'_>> {
        self.by_name.get(definition).map(|&node| PatchMeta {
            catalogue: self,
            node,
        })
    }

    /// The number of named types.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// Whether the catalogue has no types.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    fn push(&mut self, shape: Shape) -> NodeId {
        self.nodes.push(shape);
        self.nodes.len() - 1
    }

    /// The node of a named type, created (as an opaque struct) if not yet known.
    fn reserve(&mut self, name: &str) -> NodeId {
        if let Some(&id) = self.by_name.get(name) {
            return id;
        }
        let id = self.push(Shape::Struct {
            name: go_type_name(name).to_owned(),
            fields: BTreeMap::new(),
        });
        self.by_name.insert(name.to_owned(), id);
        id
    }

    fn definition_shape(&mut self, name: &str, schema: &Value) -> Shape {
        let shape = self.shape(schema, 0);
        match shape {
            Shape::Struct { fields, .. } => Shape::Struct {
                name: go_type_name(name).to_owned(),
                fields,
            },
            // A named scalar is a Go struct with its own JSON form.
            Shape::Scalar(_) => Shape::Struct {
                name: go_type_name(name).to_owned(),
                fields: BTreeMap::new(),
            },
            other => other,
        }
    }

    fn node(&mut self, schema: &Value, depth: usize) -> NodeId {
        if let Some(name) = reference(schema) {
            return self.reserve(name);
        }
        let shape = self.shape(schema, depth);
        self.push(shape)
    }

    fn shape(&mut self, schema: &Value, depth: usize) -> Shape {
        let opaque = || Shape::Struct {
            name: String::new(),
            fields: BTreeMap::new(),
        };
        if depth > MAX_INLINE_DEPTH {
            return opaque();
        }
        if reference(schema).is_some() {
            // A definition that only points at another: its fields are not followed.
            return opaque();
        }
        if let Some(first) = schema
            .get("allOf")
            .and_then(Value::as_array)
            .and_then(|all| all.first())
        {
            return self.shape(first, depth + 1);
        }
        if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
            let mut fields = BTreeMap::new();
            for (field, property) in properties {
                let node = self.node(property, depth + 1);
                let text = |key: &str| property.get(key).and_then(Value::as_str).map(str::to_owned);
                fields.insert(
                    field.clone(),
                    Field {
                        node,
                        strategy: text(PATCH_STRATEGY_EXTENSION),
                        merge_key: text(PATCH_MERGE_KEY_EXTENSION),
                    },
                );
            }
            return Shape::Struct {
                name: String::new(),
                fields,
            };
        }
        match schema.get("type").and_then(Value::as_str) {
            Some("array") => {
                let item = match schema.get("items") {
                    Some(items) => self.node(items, depth + 1),
                    None => self.push(opaque()),
                };
                Shape::List(item)
            }
            Some("object") => match schema.get("additionalProperties") {
                Some(values) if values.is_object() => Shape::Map,
                _ => opaque(),
            },
            Some("string") => Shape::Scalar("string"),
            Some("boolean") => Shape::Scalar("bool"),
            Some("number") => Shape::Scalar("float64"),
            Some("integer") => match schema.get("format").and_then(Value::as_str) {
                Some("int32") => Shape::Scalar("int32"),
                _ => Shape::Scalar("int64"),
            },
            _ => opaque(),
        }
    }
}

/// The definition name a schema points to: `{"$ref": ...}`, or OpenAPI v3's
/// `{"allOf": [{"$ref": ...}]}`.
fn reference(schema: &Value) -> Option<&str> {
    let target = match schema.get("$ref") {
        Some(target) => target.as_str()?,
        None => schema.get("allOf")?.get(0)?.get("$ref")?.as_str()?,
    };
    Some(target.rsplit('/').next().unwrap_or(target))
}

/// The Go type name of a definition: its last dotted segment.
fn go_type_name(definition: &str) -> &str {
    definition.rsplit('.').next().unwrap_or(definition)
}

/// The patch metadata of one type in a [`Catalogue`]: what strategic merge patch needs to know
/// to walk an object of that type.
#[derive(Clone, Copy)]
pub struct PatchMeta<'a> {
    catalogue: &'a Catalogue,
    node: NodeId,
}

impl std::fmt::Debug for PatchMeta<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PatchMeta")
            .field("kind", &self.go_kind())
            .field("name", &self.type_name())
            .finish()
    }
}

/// What the walker learns about one field: its strategy as upstream spells it (possibly two,
/// comma-separated) and its merge key (empty if none).
#[derive(Clone, Copy, Debug)]
pub(crate) struct FieldMeta<'a> {
    pub(crate) strategy: Option<&'a str>,
    pub(crate) merge_key: &'a str,
}

/// Why a field lookup failed; the walker turns these into upstream's messages.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum LookupError {
    /// The type is a struct without the field.
    UnknownField { type_name: String },
    /// The type is not a struct (its Go kind).
    NotAStruct(&'static str),
    /// The field is not a list.
    NotAList,
    /// The field is a list of lists.
    ListOfLists,
}

impl<'a> PatchMeta<'a> {
    fn shape(&self) -> &'a Shape {
        // Node ids are only ever handed out for nodes that exist.
        &self.catalogue.nodes[self.node]
    }

    fn at(&self, node: NodeId) -> PatchMeta<'a> {
        PatchMeta {
            catalogue: self.catalogue,
            node,
        }
    }

    /// The Go type name of the type (`PodSpec`); empty for types without one.
    pub fn type_name(&self) -> &'a str {
        match self.shape() {
            Shape::Struct { name, .. } => name,
            _ => "",
        }
    }

    /// The Go kind of the type, as upstream names it in messages: `struct`, `map`, `slice`,
    /// `string`, ...
    pub fn go_kind(&self) -> &'static str {
        match self.shape() {
            Shape::Struct { .. } => "struct",
            Shape::Map => "map",
            Shape::List(_) => "slice",
            Shape::Scalar(kind) => kind,
        }
    }

    /// The type of field `key` of this struct and the field's patch metadata. As upstream does,
    /// an exact name is preferred and a case-insensitive match accepted.
    pub(crate) fn field(&self, key: &str) -> Result<(PatchMeta<'a>, FieldMeta<'a>), LookupError> {
        let Shape::Struct { name, fields } = self.shape() else {
            return Err(LookupError::NotAStruct(self.go_kind()));
        };
        let field = fields.get(key).or_else(|| {
            fields
                .iter()
                .find(|(candidate, _)| candidate.eq_ignore_ascii_case(key))
                .map(|(_, field)| field)
        });
        let Some(field) = field else {
            return Err(LookupError::UnknownField {
                type_name: name.clone(),
            });
        };
        Ok((
            self.at(field.node),
            FieldMeta {
                strategy: field.strategy.as_deref(),
                merge_key: field.merge_key.as_deref().unwrap_or(""),
            },
        ))
    }

    /// The item type of list field `key` of this struct and the field's patch metadata.
    pub(crate) fn list_field(
        &self,
        key: &str,
    ) -> Result<(PatchMeta<'a>, FieldMeta<'a>), LookupError> {
        let (list, meta) = self.field(key)?;
        let Shape::List(item) = list.shape() else {
            return Err(LookupError::NotAList);
        };
        let item = self.at(*item);
        if matches!(item.shape(), Shape::List(_)) {
            return Err(LookupError::ListOfLists);
        }
        Ok((item, meta))
    }
}

/// The built-in kinds that accept strategic merge patches, with their schemas: every kind of the
/// catalogue and every kind its subresources speak (`Scale`, `Binding`, ...), some more than once.
fn served() -> impl Iterator<Item = ((&'static str, &'static str, &'static str), &'static Schema)> {
    catalog::resources().flat_map(|resource| {
        let subresources = resource.subresources.iter().filter_map(move |sub| {
            let schema = sub.schema.as_ref()?;
            let (group, version) = sub
                .group_version
                .unwrap_or((resource.group, resource.version));
            Some(((group, version, sub.kind), schema))
        });
        std::iter::once((
            (resource.group, resource.version, resource.kind),
            &resource.schema,
        ))
        .chain(subresources)
    })
}

/// The catalogue of every built-in kind Capstan serves (and every type they contain), built
/// on first use.
pub fn builtin() -> &'static Catalogue {
    static BUILTIN: OnceLock<Catalogue> = OnceLock::new();
    BUILTIN.get_or_init(|| {
        let mut generator = SchemaGenerator::default();
        for (_, schema) in served() {
            (schema.generate)(&mut generator);
        }
        let mut definitions = generator.take_definitions(false);
        annotate_definitions(&mut definitions);
        Catalogue::from_definitions(&definitions)
    })
}

/// The patch metadata of the built-in kind `kind` of `group`/`version` (`""` for the core
/// group), or `None` if Capstan serves no such built-in kind: a custom resource, which
/// upstream does not patch strategically (see [`super::custom_resource_rejection`]).
pub fn for_kind(group: &str, version: &str, kind: &str) -> Option<PatchMeta<'static>> {
    let (_, schema) = served().find(|(gvk, _)| *gvk == (group, version, kind))?;
    builtin().get(&(schema.name)())
}

/// The (group, version, kind) of every built-in kind [`for_kind`] knows, each once.
pub fn served_kinds() -> BTreeSet<(&'static str, &'static str, &'static str)> {
    served().map(|(gvk, _)| gvk).collect()
}

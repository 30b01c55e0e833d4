//! Server-side Table printing: what kube-apiserver returns for
//! `Accept: application/json;as=Table;g=meta.k8s.io;v=v1`, which `kubectl get` (plain, `-o wide`
//! and `-w`) prints as is.
//!
//! Each built-in resource with an upstream printer declares it in the catalogue (a [`Printer`]:
//! its column definitions and a row function, in `core.rs`, `apps.rs`, `batch.rs` and `other.rs`
//! here), computing the cells from the object's `v1` JSON exactly as upstream's
//! `pkg/printers/internalversion` does. The server always prints wide, so rows carry every
//! column, including those of priority 1 that kubectl shows only with `-o wide`. Resources without
//! a printer get upstream's default convertor: `Name` and `Created At` ([`DEFAULT_COLUMNS`],
//! [`default_cells`]).
//!
//! [`list_table`] and [`object_table`] assemble the whole `meta.k8s.io/v1` `Table`, with each row's
//! `object` chosen by `includeObject` ([`IncludeObject`]) and headers left out for the watch
//! events after the first ([`TableOptions::no_headers`]).
//!
//! Where the printed value depends on a field the `v1` defaults fill in (a service's type, a
//! deployment's replicas, a job's completions...), an absent field is printed as its default, as
//! upstream would see it after decoding the stored object.

pub(crate) mod apps;
pub(crate) mod batch;
pub(crate) mod core;
mod descriptions;
mod format;
pub mod jsonpath;
pub(crate) mod other;
mod quantity;
#[cfg(test)]
mod tests;

use jiff::Timestamp;
use serde_json::{Map, Value, json};

use crate::StatusError;
use crate::field::{FieldError, Path};

pub use format::human_duration;

/// A column of a Table (`meta.k8s.io/v1` `TableColumnDefinition`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Column {
    /// Human-readable name, e.g. `Ready`; kubectl prints it in upper case.
    pub name: &'static str,
    /// OpenAPI type of the cells: `string`, `integer`, `boolean`, `date`...
    pub type_: &'static str,
    /// OpenAPI format; `name` marks the column holding the object's name.
    pub format: &'static str,
    /// What the column shows.
    pub description: &'static str,
    /// 0 for columns kubectl always shows, 1 for those it shows only with `-o wide`.
    pub priority: i32,
}

/// A column kubectl always shows.
pub(crate) const fn col(
    name: &'static str,
    type_: &'static str,
    description: &'static str,
) -> Column {
    Column {
        name,
        type_,
        format: "",
        description,
        priority: 0,
    }
}

/// A column kubectl shows only with `-o wide`.
pub(crate) const fn wide(
    name: &'static str,
    type_: &'static str,
    description: &'static str,
) -> Column {
    Column {
        priority: 1,
        ..col(name, type_, description)
    }
}

impl Column {
    /// The column's JSON form: `{"name","type","format","description","priority"}`.
    pub fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "type": self.type_,
            "format": self.format,
            "description": self.description,
            "priority": self.priority,
        })
    }
}

/// A condition on a row (`meta.k8s.io/v1` `TableRowCondition`); upstream marks pods that have
/// finished as `Completed`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowCondition {
    /// Always `Completed` today.
    pub type_: &'static str,
    /// `True`, `False` or `Unknown`.
    pub status: &'static str,
    /// Machine-readable reason, e.g. `Succeeded`.
    pub reason: &'static str,
    /// Human-readable message.
    pub message: &'static str,
}

impl RowCondition {
    /// The condition's JSON form.
    pub fn to_json(&self) -> Value {
        json!({
            "type": self.type_,
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
        })
    }
}

/// One row of a Table, without its `object`.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// One cell per column, in column order: strings, integers or booleans.
    pub cells: Vec<Value>,
    /// The row's conditions, usually none.
    pub conditions: Vec<RowCondition>,
}

impl Row {
    fn of(cells: Vec<Value>) -> Self {
        Row {
            cells,
            conditions: Vec::new(),
        }
    }
}

/// The `Name` column most printers start with.
pub(crate) const NAME: Column = Column {
    name: "Name",
    type_: "string",
    format: "name",
    description: descriptions::META_NAME,
    priority: 0,
};

/// The `Age` column.
const AGE: Column = Column {
    name: "Age",
    type_: "string",
    format: "",
    description: descriptions::META_CREATED,
    priority: 0,
};

/// The columns of upstream's default convertor, used for resources without a printer.
pub const DEFAULT_COLUMNS: &[Column] = &[
    NAME,
    Column {
        name: "Created At",
        type_: "date",
        format: "",
        description: descriptions::META_CREATED,
        priority: 0,
    },
];

/// The printer of a custom resource whose CRD names no columns: upstream's default for custom
/// resources, the name and an `Age` date column.
pub const CUSTOM: Printer = Printer {
    columns: &[
        NAME,
        Column {
            name: "Age",
            type_: "date",
            format: "",
            description: descriptions::META_CREATED,
            priority: 0,
        },
    ],
    print: Print::Fn(|object, now| Row::of(vec![format::name(object), format::age(object, now)])),
};

/// How a printer fills a row.
#[derive(Clone, Copy, Debug)]
pub enum Print {
    /// A built-in kind's row function.
    Fn(PrintFn),
    /// A custom resource's `additionalPrinterColumns`: the name, then one cell per column from
    /// its JSONPath, as upstream's table convertor for custom resources fills them.
    Columns(&'static [CustomColumn]),
}

/// One of a CRD's `additionalPrinterColumns`: where its value is and its type.
#[derive(Debug)]
pub struct CustomColumn {
    /// The value's path in the object (`None`: a path that does not parse, which finds nothing).
    pub path: Option<jsonpath::JsonPath>,
    /// `integer`, `number`, `boolean`, `string` or `date`.
    pub type_: &'static str,
}

/// A custom column's cell, as upstream's `cellForJSONValue`: numbers, booleans and strings as
/// they are (other values as their JSON text in a string column), dates as ages, anything else
/// empty.
fn custom_cell(column: &CustomColumn, object: &Value, now: Timestamp) -> Value {
    let found = column
        .path
        .as_ref()
        .map(|p| p.find(object))
        .unwrap_or_default();
    let Some(value) = found.first().copied() else {
        return Value::Null;
    };
    match (column.type_, value) {
        ("integer", Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f as i64))
            .map_or(Value::Null, Value::from),
        ("number", Value::Number(_)) | ("boolean", Value::Bool(_)) => value.clone(),
        ("string", Value::String(_)) => value.clone(),
        ("string", Value::Null) => Value::Null,
        ("string", other) => Value::String(other.to_string()),
        ("date", Value::String(text)) => match text.parse::<Timestamp>() {
            Ok(at) => Value::String(format::since(Some(at), now)),
            Err(_) => "<invalid>".into(),
        },
        _ => Value::Null,
    }
}

/// Fills a row of a printer's columns from an object (its JSON as stored, `v1`), ages measured
/// at the given time.
pub type PrintFn = fn(&Value, Timestamp) -> Row;

/// A resource's dedicated printer, as upstream's `pkg/printers/internalversion` has for most
/// built-in kinds: its columns and how to fill a row. A resource declares its printer in the
/// catalogue ([`crate::catalog::Resource::printer`]); those without one print with upstream's
/// default convertor ([`DEFAULT_COLUMNS`], [`default_cells`]).
#[derive(Clone, Copy, Debug)]
pub struct Printer {
    /// The column definitions.
    pub columns: &'static [Column],
    /// How a row is filled.
    pub print: Print,
}

/// The columns a Table has: the printer's, or [`DEFAULT_COLUMNS`].
pub fn table_columns(printer: Option<&Printer>) -> &'static [Column] {
    printer.map_or(DEFAULT_COLUMNS, |p| p.columns)
}

/// The row `printer` prints for `object`, or the default convertor's without one.
pub fn row(printer: Option<&Printer>, object: &Value, now: Timestamp) -> Row {
    match printer {
        Some(Printer {
            print: Print::Fn(print),
            ..
        }) => print(object, now),
        Some(Printer {
            print: Print::Columns(columns),
            ..
        }) => {
            let mut cells = vec![format::name(object)];
            cells.extend(columns.iter().map(|c| custom_cell(c, object, now)));
            Row::of(cells)
        }
        None => Row::of(default_cells(object)),
    }
}

/// The default convertor's cells: the name and the creation time in RFC 3339, UTC, to the second
/// (`0001-01-01T00:00:00Z` when unset, as Go prints its zero time).
pub fn default_cells(object: &Value) -> Vec<Value> {
    let created = format::time(object, &["metadata", "creationTimestamp"]).map_or_else(
        || "0001-01-01T00:00:00Z".to_owned(),
        |ts| ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
    );
    vec![format::name(object), Value::from(created)]
}

/// What each row's `object` holds (the `includeObject` query parameter).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IncludeObject {
    /// `null`.
    None,
    /// A `meta.k8s.io/v1` `PartialObjectMetadata` with the object's metadata; the default.
    #[default]
    Metadata,
    /// The whole object.
    Object,
}

impl IncludeObject {
    /// Reads the `includeObject` query parameter; absent or empty means [`IncludeObject::Metadata`].
    /// Any other value than `None`, `Metadata` or `Object` is a 400, worded as upstream's.
    pub fn from_query(value: Option<&str>) -> Result<Self, Box<StatusError>> {
        match value.unwrap_or("") {
            "" | "Metadata" => Ok(IncludeObject::Metadata),
            "None" => Ok(IncludeObject::None),
            "Object" => Ok(IncludeObject::Object),
            other => {
                let error = FieldError::invalid(
                    &Path::new("includeObject"),
                    other,
                    "must be 'Metadata', 'Object', 'None', or empty",
                );
                Err(Box::new(StatusError::bad_request(&format!(
                    "Unable to convert to Table as requested: {error}"
                ))))
            }
        }
    }
}

/// How to build a Table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableOptions {
    /// What each row's `object` holds.
    pub include_object: IncludeObject,
    /// Leave out the column definitions (`"columnDefinitions": null`), as upstream does for
    /// every watch event after the first.
    pub no_headers: bool,
}

/// The list metadata a Table of a list carries over from the list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListMeta {
    /// The list's `resourceVersion`.
    pub resource_version: Option<String>,
    /// The `continue` token of a paged list.
    pub continue_token: Option<String>,
    /// How many items are left after this page, when known.
    pub remaining_item_count: Option<i64>,
}

/// `object` reduced to a `meta.k8s.io/v1` `PartialObjectMetadata`: its kind and API version
/// replaced, its whole `metadata` kept.
pub fn partial_object_metadata(object: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

fn row_json(row: Row, object: &Value, include: IncludeObject) -> Value {
    let mut map = Map::new();
    map.insert("cells".into(), Value::Array(row.cells));
    if !row.conditions.is_empty() {
        let conditions = row.conditions.iter().map(RowCondition::to_json).collect();
        map.insert("conditions".into(), Value::Array(conditions));
    }
    let embedded = match include {
        IncludeObject::None => Value::Null,
        IncludeObject::Metadata => partial_object_metadata(object),
        IncludeObject::Object => object.clone(),
    };
    map.insert("object".into(), embedded);
    Value::Object(map)
}

fn table_json(
    printer: Option<&Printer>,
    objects: &[&Value],
    metadata: Map<String, Value>,
    options: &TableOptions,
    now: Timestamp,
) -> Value {
    let rows: Vec<Value> = objects
        .iter()
        .map(|object| row_json(row(printer, object, now), object, options.include_object))
        .collect();
    // Upstream's default convertor leaves `rows` nil for an empty list; printers return `[]`.
    let rows = if rows.is_empty() && printer.is_none() {
        Value::Null
    } else {
        Value::Array(rows)
    };
    let column_definitions = if options.no_headers {
        Value::Null
    } else {
        Value::Array(table_columns(printer).iter().map(Column::to_json).collect())
    };
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": column_definitions,
        "rows": rows,
    })
}

/// The Table of a list of `items` (each as stored, `v1`), carrying the list's metadata.
pub fn list_table(
    printer: Option<&Printer>,
    items: &[&Value],
    list_meta: &ListMeta,
    options: &TableOptions,
    now: Timestamp,
) -> Value {
    let mut metadata = Map::new();
    if let Some(rv) = list_meta
        .resource_version
        .as_deref()
        .filter(|rv| !rv.is_empty())
    {
        metadata.insert("resourceVersion".into(), Value::from(rv));
    }
    if let Some(token) = list_meta
        .continue_token
        .as_deref()
        .filter(|t| !t.is_empty())
    {
        metadata.insert("continue".into(), Value::from(token));
    }
    if let Some(count) = list_meta.remaining_item_count {
        metadata.insert("remainingItemCount".into(), Value::from(count));
    }
    table_json(printer, items, metadata, options, now)
}

/// The one-row Table of a single object, for a GET or a watch event; its `metadata` carries the
/// object's `resourceVersion`.
pub fn object_table(
    printer: Option<&Printer>,
    object: &Value,
    options: &TableOptions,
    now: Timestamp,
) -> Value {
    let mut metadata = Map::new();
    let rv = format::text(object, &["metadata", "resourceVersion"]);
    if !rv.is_empty() {
        metadata.insert("resourceVersion".into(), Value::from(rv));
    }
    table_json(printer, &[object], metadata, options, now)
}

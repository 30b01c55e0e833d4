//! Protobuf messages to JSON, guided by the schema table: the JSON value Go's `encoding/json`
//! would print for the object upstream's generated decoder builds from the same bytes.
//!
//! What the Go object looks like decides the output, so each field is handled by its Go shape:
//! * pointer fields (`*int32 replicas`) are set exactly when present, zero values included;
//! * value fields (`int32 containerPort`, `string name`) always hold a value: when absent it is
//!   the zero value, and a zero value is left out when the json tag has `omitempty`;
//! * value structs (`ObjectMeta metadata`, `ResourceRequirements resources`) are never left out:
//!   an absent one prints as its zero object (`{}` plus its non-`omitempty` zero fields);
//! * slices and maps are nil when no element is present: left out with `omitempty`, else `null`;
//! * repeated occurrences of a singular message merge (the wire-format rule), except for
//!   `Time`/`MicroTime`, whose hand-written decoders keep the last occurrence only; map values
//!   likewise keep the last occurrence of their entry's value.

use base64::Engine as _;
use serde_json::{Map, Number, Value};

use super::ProtobufError;
use super::gotime;
use super::model::{self, Card, Field, INLINE, Message, OMITEMPTY, POINTER, Special, Ty};
use super::wire::{Reader, Wire};

/// What a field contributes to its parent object.
enum Out {
    /// Nothing: Go's `omitempty` leaves it out.
    Omit,
    /// This value.
    Value(Value),
}

/// A message's fields, all occurrences of all its chunks, stably sorted by field number.
struct Fields<'a>(Vec<(u32, Wire<'a>)>);

impl<'a> Fields<'a> {
    fn read(chunks: &[&'a [u8]]) -> Result<Self, ProtobufError> {
        let mut fields = Vec::new();
        for chunk in chunks {
            let mut reader = Reader::new(chunk);
            while let Some(field) = reader.next_field()? {
                fields.push(field);
            }
        }
        fields.sort_by_key(|(tag, _)| *tag);
        Ok(Fields(fields))
    }

    /// Every occurrence of field `tag`, in wire order.
    fn get(&self, tag: u32) -> &[(u32, Wire<'a>)] {
        let start = self.0.partition_point(|(t, _)| *t < tag);
        let end = self.0.partition_point(|(t, _)| *t <= tag);
        self.0.get(start..end).unwrap_or_default()
    }
}

fn wrong_wire(message: &Message, field: &Field, wire: &Wire<'_>) -> ProtobufError {
    ProtobufError::WrongWireType {
        message: message.name,
        field: field_name(field),
        wire_type: wire.wire_type(),
    }
}

fn field_name(field: &Field) -> &'static str {
    if field.json.is_empty() {
        "(inline)"
    } else {
        field.json
    }
}

/// Go prints invalid UTF-8 in a string as one U+FFFD per invalid byte.
fn go_string(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        out.extend(std::iter::repeat_n('\u{fffd}', chunk.invalid().len()));
    }
    out
}

fn base64(bytes: &[u8]) -> Value {
    Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// A float64 as Go's encoder prints it and a JSON parser reads it back: integral values below
/// 1e21 print without a fraction, so they read back as integers.
fn float(value: f64) -> Result<Value, ProtobufError> {
    if !value.is_finite() {
        return Err(ProtobufError::NonFiniteNumber);
    }
    if value.fract() == 0.0 && value.abs() < 1e21 {
        if value.abs() < 9.0e15 {
            // Exactly representable: the cast is lossless.
            return Ok(Value::from(value as i64));
        }
        if let Ok(text) = format!("{value:.0}").parse::<Number>() {
            return Ok(Value::Number(text));
        }
    }
    Ok(Number::from_f64(value).map_or(Value::Null, Value::Number))
}

/// Go's `omitempty` test for the scalars a value field can hold.
fn is_go_zero(value: &Value) -> bool {
    match value {
        Value::String(s) => s.is_empty(),
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Null => true,
        Value::Array(_) | Value::Object(_) => false,
    }
}

fn nil(field: &Field) -> Out {
    if field.has(OMITEMPTY) {
        Out::Omit
    } else {
        Out::Value(Value::Null)
    }
}

/// The JSON a `RawExtension`, `FieldsV1` or `JSON` holds, which upstream prints verbatim.
fn embedded_json(raw: &[u8]) -> Result<Value, ProtobufError> {
    if raw.starts_with(&[0xd9, 0xd9, 0xf7]) {
        return Err(ProtobufError::UnsupportedCbor);
    }
    serde_json::from_slice(raw).map_err(|e| ProtobufError::InvalidEmbeddedJson(e.to_string()))
}

/// What Go's `encoding/json` writes for `field` of `message` when the Go struct holds its zero
/// value (the field was absent): `None` when it is left out (a nil pointer, `omitempty`), else
/// the zero value (`""`, `0`, `false`, `null` for a nil slice or map, the zero object of a
/// value struct, `null` for a zero `Time`).
pub(crate) fn zero_field(message: &Message, field: &Field) -> Option<Value> {
    match Renderer::new(64, 100_000).field(message, field, &[], 0) {
        Ok(Out::Value(value)) => Some(value),
        Ok(Out::Omit) | Err(_) => None,
    }
}

/// Limits and counters for one decode.
#[derive(Debug)]
pub(crate) struct Renderer {
    max_depth: usize,
    max_values: usize,
    values: usize,
}

impl Renderer {
    pub(crate) fn new(max_depth: usize, max_values: usize) -> Self {
        Renderer {
            max_depth,
            max_values,
            values: 0,
        }
    }

    fn count(&mut self, n: usize) -> Result<(), ProtobufError> {
        self.values = self.values.saturating_add(n);
        if self.values > self.max_values {
            return Err(ProtobufError::TooManyValues(self.max_values));
        }
        Ok(())
    }

    /// The JSON form of message `index` read from `chunks` (its occurrences, merged).
    pub(crate) fn message(
        &mut self,
        index: u16,
        chunks: &[&[u8]],
        depth: usize,
    ) -> Result<Value, ProtobufError> {
        if depth > self.max_depth {
            return Err(ProtobufError::TooDeep(self.max_depth));
        }
        let message = model::message(index).ok_or(ProtobufError::Schema(index))?;
        self.count(1)?;
        match message.special {
            Special::None => self.object(message, chunks, depth),
            Special::Time | Special::MicroTime => {
                // Upstream's hand-written Unmarshal starts afresh on every occurrence.
                let last = chunks.last().copied().unwrap_or_default();
                if last.is_empty() {
                    return Ok(Value::Null);
                }
                let fields = Fields::read(&[last])?;
                let seconds = self
                    .scalar_field(message, 1, &fields)?
                    .and_then(|v| v.as_i64());
                let nanos = self
                    .scalar_field(message, 2, &fields)?
                    .and_then(|v| v.as_i64());
                let seconds = seconds.unwrap_or(0);
                let text = if message.special == Special::Time {
                    gotime::time(seconds)?
                } else {
                    // The value came from an int32 field.
                    let nanos = i32::try_from(nanos.unwrap_or(0)).unwrap_or_default();
                    gotime::micro_time(seconds, nanos)?
                };
                Ok(text.map_or(Value::Null, Value::String))
            }
            Special::Duration => {
                let fields = Fields::read(chunks)?;
                let nanos = self
                    .scalar_field(message, 1, &fields)?
                    .and_then(|v| v.as_i64());
                Ok(Value::String(gotime::duration(nanos.unwrap_or(0))))
            }
            Special::Quantity => {
                let fields = Fields::read(chunks)?;
                Ok(self
                    .scalar_field(message, 1, &fields)?
                    .unwrap_or_else(|| Value::String("0".to_owned())))
            }
            Special::IntOrString => {
                let fields = Fields::read(chunks)?;
                let kind = self
                    .scalar_field(message, 1, &fields)?
                    .and_then(|v| v.as_i64());
                match kind.unwrap_or(0) {
                    0 => Ok(self
                        .scalar_field(message, 2, &fields)?
                        .unwrap_or(Value::from(0))),
                    1 => Ok(self
                        .scalar_field(message, 3, &fields)?
                        .unwrap_or_else(|| Value::String(String::new()))),
                    other => Err(ProtobufError::InvalidIntOrString(other)),
                }
            }
            Special::RawExtension | Special::FieldsV1 | Special::Json => {
                let fields = Fields::read(chunks)?;
                let raw = self.bytes_field(message, 1, &fields)?;
                match raw {
                    None => Ok(Value::Null),
                    Some([]) if message.special == Special::Json => Ok(Value::Null),
                    Some(raw) => embedded_json(raw),
                }
            }
            Special::SchemaOrArray | Special::SchemaOrBool | Special::SchemaOrStringArray => {
                self.schema_or(message, chunks, depth)
            }
            Special::ListWrapper => {
                let fields = Fields::read(chunks)?;
                let mut items = Vec::new();
                for field in message.fields {
                    items.extend(self.repeated(message, field, fields.get(field.tag), depth)?);
                }
                Ok(Value::Array(items))
            }
        }
    }

    /// The last value of scalar field `tag` of a special message, if present.
    fn scalar_field(
        &mut self,
        message: &Message,
        tag: u32,
        fields: &Fields<'_>,
    ) -> Result<Option<Value>, ProtobufError> {
        let Some(field) = message.field(tag) else {
            return Ok(None);
        };
        let mut last = None;
        for (_, wire) in fields.get(tag) {
            last = Some(scalar(message, field, wire)?);
        }
        Ok(last)
    }

    /// The last value of bytes field `tag` of a special message, if present.
    fn bytes_field<'a>(
        &mut self,
        message: &Message,
        tag: u32,
        fields: &Fields<'a>,
    ) -> Result<Option<&'a [u8]>, ProtobufError> {
        let Some(field) = message.field(tag) else {
            return Ok(None);
        };
        let mut last = None;
        for (_, wire) in fields.get(tag) {
            match wire {
                Wire::Len(bytes) => last = Some(*bytes),
                other => return Err(wrong_wire(message, field, other)),
            }
        }
        Ok(last)
    }

    /// `JSONSchemaPropsOrArray` (schema=1, jSONSchemas=2), `JSONSchemaPropsOrBool` (allows=1,
    /// schema=2) and `JSONSchemaPropsOrStringArray` (schema=1, property=2).
    fn schema_or(
        &mut self,
        message: &Message,
        chunks: &[&[u8]],
        depth: usize,
    ) -> Result<Value, ProtobufError> {
        let fields = Fields::read(chunks)?;
        let schema_tag = if message.special == Special::SchemaOrBool {
            2
        } else {
            1
        };
        let schema = match message.field(schema_tag) {
            Some(field) => match field.ty {
                Ty::M(target) => {
                    let chunks = self.chunks(message, field, fields.get(schema_tag))?;
                    if chunks.is_empty() {
                        None
                    } else {
                        Some(self.message(target, &chunks, depth + 1)?)
                    }
                }
                _ => None,
            },
            None => None,
        };
        if message.special == Special::SchemaOrBool {
            let allows = self.scalar_field(message, 1, &fields)?;
            return Ok(schema.or(allows).unwrap_or(Value::Bool(false)));
        }
        let list = match message.field(2) {
            Some(field) => self.repeated(message, field, fields.get(2), depth)?,
            None => Vec::new(),
        };
        if !list.is_empty() {
            return Ok(Value::Array(list));
        }
        Ok(schema.unwrap_or(Value::Null))
    }

    /// The payloads of a message field's occurrences.
    fn chunks<'a>(
        &mut self,
        message: &Message,
        field: &Field,
        occurrences: &[(u32, Wire<'a>)],
    ) -> Result<Vec<&'a [u8]>, ProtobufError> {
        occurrences
            .iter()
            .map(|(_, wire)| match wire {
                Wire::Len(bytes) => Ok(*bytes),
                other => Err(wrong_wire(message, field, other)),
            })
            .collect()
    }

    /// A plain message: the object of its fields.
    fn object(
        &mut self,
        message: &Message,
        chunks: &[&[u8]],
        depth: usize,
    ) -> Result<Value, ProtobufError> {
        let fields = Fields::read(chunks)?;
        let mut object = Map::new();
        let mut inlined = Vec::new();
        for field in message.fields {
            match self.field(message, field, fields.get(field.tag), depth)? {
                Out::Omit => {}
                Out::Value(Value::Object(inner)) if field.has(INLINE) => inlined.push(inner),
                Out::Value(_) if field.has(INLINE) => {}
                Out::Value(value) => {
                    object.insert(field.json.to_owned(), value);
                }
            }
        }
        // Go gives the outer struct's own fields precedence over those of embedded ones.
        for inner in inlined {
            for (key, value) in inner {
                object.entry(key).or_insert(value);
            }
        }
        Ok(Value::Object(object))
    }

    fn field(
        &mut self,
        message: &Message,
        field: &Field,
        occurrences: &[(u32, Wire<'_>)],
        depth: usize,
    ) -> Result<Out, ProtobufError> {
        match field.card {
            Card::One => self.singular(message, field, occurrences, depth),
            Card::Repeated => {
                let items = self.repeated(message, field, occurrences, depth)?;
                if items.is_empty() {
                    return Ok(nil(field));
                }
                Ok(Out::Value(Value::Array(items)))
            }
            Card::Map => {
                let mut map = Map::new();
                for (_, wire) in occurrences {
                    let Wire::Len(entry) = wire else {
                        return Err(wrong_wire(message, field, wire));
                    };
                    let (key, value) = self.map_entry(message, field, entry, depth)?;
                    map.insert(key, value);
                }
                self.count(map.len())?;
                if map.is_empty() {
                    return Ok(nil(field));
                }
                Ok(Out::Value(Value::Object(map)))
            }
        }
    }

    fn singular(
        &mut self,
        message: &Message,
        field: &Field,
        occurrences: &[(u32, Wire<'_>)],
        depth: usize,
    ) -> Result<Out, ProtobufError> {
        match field.ty {
            Ty::M(target) => {
                let chunks = self.chunks(message, field, occurrences)?;
                let is_slice =
                    model::message(target).is_some_and(|m| m.special == Special::ListWrapper);
                if chunks.is_empty() && (field.has(POINTER) || is_slice) {
                    return Ok(nil(field));
                }
                let value = self.message(target, &chunks, depth + 1)?;
                if is_slice && field.has(OMITEMPTY) && value.as_array().is_some_and(Vec::is_empty) {
                    return Ok(Out::Omit);
                }
                Ok(Out::Value(value))
            }
            Ty::BY => {
                let mut last = None;
                for (_, wire) in occurrences {
                    match wire {
                        Wire::Len(bytes) => last = Some(*bytes),
                        other => return Err(wrong_wire(message, field, other)),
                    }
                }
                match last {
                    None => Ok(nil(field)),
                    Some([]) if field.has(OMITEMPTY) => Ok(Out::Omit),
                    Some(bytes) => Ok(Out::Value(base64(bytes))),
                }
            }
            _ => {
                let mut last = None;
                for (_, wire) in occurrences {
                    last = Some(scalar(message, field, wire)?);
                }
                let value = match last {
                    Some(value) => value,
                    None if field.has(POINTER) => return Ok(nil(field)),
                    None => zero(field.ty),
                };
                if !field.has(POINTER) && field.has(OMITEMPTY) && is_go_zero(&value) {
                    return Ok(Out::Omit);
                }
                Ok(Out::Value(value))
            }
        }
    }

    /// The elements of a repeated field, packed or not.
    fn repeated(
        &mut self,
        message: &Message,
        field: &Field,
        occurrences: &[(u32, Wire<'_>)],
        depth: usize,
    ) -> Result<Vec<Value>, ProtobufError> {
        let mut items = Vec::with_capacity(occurrences.len());
        for (_, wire) in occurrences {
            match (field.ty, wire) {
                (Ty::M(target), Wire::Len(bytes)) => {
                    items.push(self.message(target, &[bytes], depth + 1)?);
                }
                (Ty::M(_), other) => return Err(wrong_wire(message, field, other)),
                (Ty::B | Ty::I32 | Ty::I64 | Ty::F64, Wire::Len(packed)) => {
                    let mut reader = Reader::new(packed);
                    while !reader.is_empty() {
                        let element = if field.ty == Ty::F64 {
                            Wire::Fixed64(reader.fixed64()?)
                        } else {
                            Wire::Varint(reader.varint()?)
                        };
                        items.push(scalar(message, field, &element)?);
                    }
                }
                _ => items.push(scalar(message, field, wire)?),
            }
        }
        // Messages were counted as they were built; count the scalars here.
        if !matches!(field.ty, Ty::M(_)) {
            self.count(items.len())?;
        }
        Ok(items)
    }

    /// One `map<string, V>` entry: key 1, value 2; a missing part is its zero value.
    fn map_entry(
        &mut self,
        message: &Message,
        field: &Field,
        entry: &[u8],
        depth: usize,
    ) -> Result<(String, Value), ProtobufError> {
        let mut reader = Reader::new(entry);
        let mut key = None;
        let mut value = None;
        while let Some((tag, wire)) = reader.next_field()? {
            match (tag, wire) {
                (1, Wire::Len(bytes)) => key = Some(bytes),
                (2, Wire::Len(bytes)) => value = Some(bytes),
                (1 | 2, other) => return Err(wrong_wire(message, field, &other)),
                _ => {}
            }
        }
        let key = go_string(key.unwrap_or_default());
        let value = match field.ty {
            Ty::S => Value::String(go_string(value.unwrap_or_default())),
            Ty::BY => base64(value.unwrap_or_default()),
            Ty::M(target) => {
                // Each entry's value is decoded into a fresh message; the last occurrence wins.
                let chunks: &[&[u8]] = match &value {
                    Some(bytes) => std::slice::from_ref(bytes),
                    None => &[],
                };
                self.message(target, chunks, depth + 1)?
            }
            // The generator only emits string, bytes and message map values.
            other => zero(other),
        };
        Ok((key, value))
    }
}

/// The zero value of a scalar type, as Go prints it.
fn zero(ty: Ty) -> Value {
    match ty {
        Ty::S | Ty::BY => Value::String(String::new()),
        Ty::B => Value::Bool(false),
        Ty::I32 | Ty::I64 | Ty::F64 => Value::from(0),
        Ty::M(_) => Value::Null,
    }
}

/// One scalar value, checking its wire type.
fn scalar(message: &Message, field: &Field, wire: &Wire<'_>) -> Result<Value, ProtobufError> {
    match (field.ty, wire) {
        (Ty::S, Wire::Len(bytes)) => Ok(Value::String(go_string(bytes))),
        (Ty::BY, Wire::Len(bytes)) => Ok(base64(bytes)),
        (Ty::B, Wire::Varint(v)) => Ok(Value::Bool(*v != 0)),
        // Go keeps the low 32 bits of the varint, as a two's-complement int32.
        (Ty::I32, Wire::Varint(v)) => Ok(Value::from(*v as u32 as i32)),
        (Ty::I64, Wire::Varint(v)) => Ok(Value::from(*v as i64)),
        (Ty::F64, Wire::Fixed64(bits)) => float(f64::from_bits(*bits)),
        _ => Err(wrong_wire(message, field, wire)),
    }
}

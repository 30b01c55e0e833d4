//! Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`) read into the JSON
//! value upstream's JSON form of the same object has, so the rest of the server only sees JSON.
//!
//! A body is the magic `k8s\0` followed by a `runtime.Unknown` message: `typeMeta` (1:
//! `apiVersion` 1, `kind` 2), `raw` (2: the object's own message), `contentEncoding` (3) and
//! `contentType` (4), the last two ignored as upstream ignores them. The object's message type
//! comes from (apiVersion, kind) through the generated [`schema`] table, and the object is walked
//! field by field (see `render` for how Go's value/pointer fields and `omitempty` decide what is
//! printed). Responses stay JSON.
//!
//! The result equals what Go's `encoding/json` prints for the object upstream decodes, with two
//! deliberate differences: embedded JSON (`RawExtension`, `FieldsV1`, CRD `JSON`) is parsed by
//! `serde_json` (numbers beyond `u64`/`i64` become floats) and CBOR inside it is refused; and
//! `Quantity` strings are passed through as sent (upstream parses them while decoding and prints
//! the canonical form; Capstan's JSON path sees the same string either way).

mod gotime;
pub(crate) mod model;
#[rustfmt::skip]
mod order;
mod render;
#[rustfmt::skip]
mod schema;
mod wire;

#[cfg(test)]
mod tests;

use serde_json::Value;

pub(crate) use render::zero_field;
use wire::{Reader, Wire};

/// The media type of Kubernetes protobuf bodies.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The four bytes every Kubernetes protobuf body starts with.
pub const MAGIC: [u8; 4] = *b"k8s\0";

/// Why a body could not be decoded. Every variant is the client's fault (400 Bad Request),
/// except [`ProtobufError::UnknownKind`], which upstream reports the same way.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProtobufError {
    /// The body is empty, or holds nothing but the magic.
    #[error("empty body")]
    Empty,
    /// The body does not start with `k8s\0`.
    #[error(
        "provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]"
    )]
    NotProtobuf,
    /// The body is larger than [`DecodeOptions::max_body_bytes`].
    #[error("protobuf body of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// The body's size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The input ends inside a value.
    #[error("unexpected EOF")]
    Truncated,
    /// A varint runs past ten bytes.
    #[error("proto: integer overflow")]
    VarintOverflow,
    /// A field number is zero or negative.
    #[error("proto: illegal tag {0}")]
    IllegalFieldNumber(i64),
    /// Wire type 6 or 7.
    #[error("proto: illegal wireType {0}")]
    IllegalWireType(u8),
    /// An end-group marker without a group.
    #[error("proto: unexpected end of group")]
    UnexpectedEndGroup,
    /// A known field arrives with a wire type its proto type cannot have.
    #[error("proto: wrong wireType = {wire_type} for field {field} of {message}")]
    WrongWireType {
        /// The message's full proto name.
        message: &'static str,
        /// The field's JSON name.
        field: &'static str,
        /// The wire type found.
        wire_type: u8,
    },
    /// The envelope names no kind (and no default was given).
    #[error("Object 'Kind' is missing in protobuf envelope")]
    MissingKind,
    /// The envelope names no version (and no default was given).
    #[error("Object 'apiVersion' is missing in protobuf envelope")]
    MissingVersion,
    /// No protobuf message is known for this apiVersion and kind.
    #[error("no kind \"{kind}\" is registered for version \"{api_version}\"")]
    UnknownKind {
        /// The apiVersion (`group/version`, or `version` for the core group).
        api_version: String,
        /// The kind.
        kind: String,
    },
    /// Messages nest deeper than [`DecodeOptions::max_depth`].
    #[error("protobuf messages nest deeper than {0} levels")]
    TooDeep(usize),
    /// The object would hold more than [`DecodeOptions::max_values`] values.
    #[error("protobuf body expands to more than {0} values")]
    TooManyValues(usize),
    /// An `IntOrString` whose type is neither 0 (int) nor 1 (string).
    #[error("impossible IntOrString.Type {0}")]
    InvalidIntOrString(i64),
    /// A `RawExtension`, `FieldsV1` or `JSON` that does not hold valid JSON.
    #[error("embedded object is not valid JSON: {0}")]
    InvalidEmbeddedJson(String),
    /// A `RawExtension` or `FieldsV1` holding CBOR, which Capstan does not read.
    #[error("embedded CBOR objects are not supported")]
    UnsupportedCbor,
    /// A timestamp outside the years 0 to 9999, which RFC 3339 cannot express.
    #[error("timestamp {0} is outside the range of RFC 3339")]
    TimeOutOfRange(i64),
    /// A `double` that is NaN or infinite, which JSON cannot express.
    #[error("non-finite number")]
    NonFiniteNumber,
    /// The generated schema refers to a message it does not hold (a generator bug).
    #[error("protobuf schema has no message {0}")]
    Schema(u16),
}

/// Defaults and limits for [`decode_with`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeOptions {
    /// The apiVersion to use when the envelope has no version (upstream defaults it from the
    /// object the request targets).
    pub default_api_version: Option<String>,
    /// The kind to use when the envelope has none.
    pub default_kind: Option<String>,
    /// The largest body accepted, magic included.
    pub max_body_bytes: usize,
    /// The deepest nesting of messages accepted.
    pub max_depth: usize,
    /// The most values (messages, list elements, map entries) the object may expand to; bounds
    /// the zero objects printed for absent struct fields.
    pub max_values: usize,
}

impl Default for DecodeOptions {
    /// No defaults; upstream's 3 MiB request limit, 128 levels, a million values.
    fn default() -> Self {
        DecodeOptions {
            default_api_version: None,
            default_kind: None,
            max_body_bytes: 3 * 1024 * 1024,
            max_depth: 128,
            max_values: 1 << 20,
        }
    }
}

/// Whether `body` starts with the Kubernetes protobuf magic.
pub fn is_protobuf(body: &[u8]) -> bool {
    body.starts_with(&MAGIC)
}

/// Decodes a Kubernetes protobuf body into `(apiVersion, kind, object)`, the object being the
/// JSON value upstream's JSON form of it has (with `apiVersion` and `kind` set).
pub fn decode(body: &[u8]) -> Result<(String, String, Value), ProtobufError> {
    decode_with(body, &DecodeOptions::default())
}

/// [`decode`] with defaults for a missing apiVersion or kind, and explicit limits.
pub fn decode_with(
    body: &[u8],
    options: &DecodeOptions,
) -> Result<(String, String, Value), ProtobufError> {
    if body.len() > options.max_body_bytes {
        return Err(ProtobufError::TooLarge {
            size: body.len(),
            limit: options.max_body_bytes,
        });
    }
    let Some(envelope) = body.strip_prefix(&MAGIC) else {
        return Err(if body.is_empty() {
            ProtobufError::Empty
        } else {
            ProtobufError::NotProtobuf
        });
    };
    if envelope.is_empty() {
        return Err(ProtobufError::Empty);
    }
    let unknown = read_unknown(envelope)?;
    let (mut group, mut version) = parse_api_version(&unknown.api_version);
    let mut kind = unknown.kind;
    // Upstream's copyKindDefaults: the kind and the group/version are defaulted separately.
    if kind.is_empty() {
        kind = options.default_kind.clone().unwrap_or_default();
    }
    if version.is_empty()
        && let Some(default) = options.default_api_version.as_deref()
    {
        let (g, v) = parse_api_version(default);
        if !v.is_empty() {
            (group, version) = (g, v);
        }
    }
    if kind.is_empty() {
        return Err(ProtobufError::MissingKind);
    }
    if version.is_empty() {
        return Err(ProtobufError::MissingVersion);
    }
    let api_version = if group.is_empty() {
        version
    } else {
        format!("{group}/{version}")
    };
    let index =
        model::message_for_kind(&api_version, &kind).ok_or_else(|| ProtobufError::UnknownKind {
            api_version: api_version.clone(),
            kind: kind.clone(),
        })?;
    let mut renderer = render::Renderer::new(options.max_depth, options.max_values);
    let chunks: &[&[u8]] = match unknown.raw {
        Some(ref raw) => std::slice::from_ref(raw),
        None => &[],
    };
    let mut object = renderer.message(index, chunks, 0)?;
    if let Value::Object(map) = &mut object {
        map.insert("apiVersion".to_owned(), Value::String(api_version.clone()));
        map.insert("kind".to_owned(), Value::String(kind.clone()));
    }
    Ok((api_version, kind, object))
}

/// `group/version` or `version`, as upstream's `ParseGroupVersion` splits it; anything it would
/// reject (more than one `/`) yields no version at all.
fn parse_api_version(api_version: &str) -> (String, String) {
    match api_version.split_once('/') {
        None => (String::new(), api_version.to_owned()),
        Some((_, rest)) if rest.contains('/') => (String::new(), String::new()),
        Some((group, version)) => (group.to_owned(), version.to_owned()),
    }
}

/// The parts of `runtime.Unknown` the decoder uses.
#[derive(Debug, Default)]
struct Unknown<'a> {
    api_version: String,
    kind: String,
    raw: Option<&'a [u8]>,
}

fn envelope_field<'a>(wire: Wire<'a>, field: &'static str) -> Result<&'a [u8], ProtobufError> {
    match wire {
        Wire::Len(bytes) => Ok(bytes),
        other => Err(ProtobufError::WrongWireType {
            message: "k8s.io.apimachinery.pkg.runtime.Unknown",
            field,
            wire_type: other.wire_type(),
        }),
    }
}

fn read_unknown(bytes: &[u8]) -> Result<Unknown<'_>, ProtobufError> {
    let mut unknown = Unknown::default();
    let mut reader = Reader::new(bytes);
    while let Some((tag, wire)) = reader.next_field()? {
        match tag {
            1 => {
                // Occurrences of a message field merge: later scalars win.
                let mut type_meta = Reader::new(envelope_field(wire, "typeMeta")?);
                while let Some((tag, wire)) = type_meta.next_field()? {
                    match tag {
                        1 => unknown.api_version = utf8(envelope_field(wire, "apiVersion")?),
                        2 => unknown.kind = utf8(envelope_field(wire, "kind")?),
                        _ => {}
                    }
                }
            }
            2 => unknown.raw = Some(envelope_field(wire, "raw")?),
            3 => {
                envelope_field(wire, "contentEncoding")?;
            }
            4 => {
                envelope_field(wire, "contentType")?;
            }
            _ => {}
        }
    }
    Ok(unknown)
}

fn utf8(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

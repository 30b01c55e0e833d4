//! SPDY/3 framing: frame headers, the fixed fields of each control frame, and the (uncompressed)
//! name/value header blocks.
//!
//! Every frame starts with 8 bytes. A control frame has the control bit set, a 15-bit version
//! (always 3 here), a 16-bit type, 8 bits of flags and a 24-bit payload length; a DATA frame has
//! the control bit clear, a 31-bit stream id, 8 bits of flags and a 24-bit length. All integers
//! are big-endian. Header blocks are a 32-bit count followed by (32-bit length, name, 32-bit
//! length, value) entries; several values of one name are joined with NUL bytes.

use bytes::{BufMut, Bytes, BytesMut};

use super::SpdyError;

/// The protocol version in every control frame we send (and accept).
pub(crate) const VERSION: u16 = 3;

/// Control frame types.
pub(crate) const TYPE_SYN_STREAM: u16 = 1;
pub(crate) const TYPE_SYN_REPLY: u16 = 2;
pub(crate) const TYPE_RST_STREAM: u16 = 3;
pub(crate) const TYPE_SETTINGS: u16 = 4;
pub(crate) const TYPE_PING: u16 = 6;
pub(crate) const TYPE_GOAWAY: u16 = 7;
pub(crate) const TYPE_HEADERS: u16 = 8;
pub(crate) const TYPE_WINDOW_UPDATE: u16 = 9;

/// FLAG_FIN, on DATA, SYN_STREAM, SYN_REPLY and HEADERS: the sender's last frame on the stream.
pub(crate) const FLAG_FIN: u8 = 0x01;
/// FLAG_UNIDIRECTIONAL, on SYN_STREAM: the receiver may not send on the stream.
pub(crate) const FLAG_UNIDIRECTIONAL: u8 = 0x02;

/// RST_STREAM status codes used here.
pub(crate) const RST_PROTOCOL_ERROR: u32 = 1;
pub(crate) const RST_REFUSED_STREAM: u32 = 3;
pub(crate) const RST_CANCEL: u32 = 5;

/// GOAWAY status OK.
pub(crate) const GOAWAY_OK: u32 = 0;

/// The largest payload the 24-bit length field can describe.
pub(crate) const MAX_PAYLOAD: usize = 0x00ff_ffff;

/// The largest uncompressed header block we send (or accept).
pub(crate) const MAX_HEADER_BLOCK: usize = 1 << 20;

/// The largest stream id (31 bits).
pub(crate) const MAX_STREAM_ID: u32 = 0x7fff_ffff;

/// The 8-byte header every frame starts with, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Head {
    /// A control frame.
    Control {
        /// The protocol version field.
        version: u16,
        /// The frame type.
        kind: u16,
        /// The flags byte.
        flags: u8,
        /// The payload length.
        length: usize,
    },
    /// A DATA frame.
    Data {
        /// The stream the data belongs to.
        stream_id: u32,
        /// The flags byte.
        flags: u8,
        /// The payload length.
        length: usize,
    },
}

impl Head {
    /// Decodes a frame header.
    pub(crate) fn parse(b: [u8; 8]) -> Head {
        let first = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        let flags = b[4];
        let length = usize::from(b[5]) << 16 | usize::from(b[6]) << 8 | usize::from(b[7]);
        if first & 0x8000_0000 != 0 {
            Head::Control {
                version: ((first >> 16) & 0x7fff) as u16,
                kind: (first & 0xffff) as u16,
                flags,
                length,
            }
        } else {
            Head::Data {
                stream_id: first & MAX_STREAM_ID,
                flags,
                length,
            }
        }
    }

    /// The payload length.
    pub(crate) fn length(&self) -> usize {
        match *self {
            Head::Control { length, .. } | Head::Data { length, .. } => length,
        }
    }
}

/// Reads a big-endian `u32` at `at`; the caller has checked the length.
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Writes a control frame header. `length` must fit in 24 bits.
fn control_head(buf: &mut BytesMut, kind: u16, flags: u8, length: usize) {
    debug_assert!(length <= MAX_PAYLOAD);
    buf.put_u16(0x8000 | VERSION);
    buf.put_u16(kind);
    buf.put_u32(u32::from(flags) << 24 | (length as u32 & 0x00ff_ffff));
}

/// A SYN_STREAM frame: stream id, associated-to stream id, priority (3 bits), slot, then the
/// compressed header block. The block must be at most `MAX_PAYLOAD - 10` bytes.
pub(crate) fn syn_stream(
    stream_id: u32,
    associated_to: u32,
    priority: u8,
    flags: u8,
    block: &[u8],
) -> Bytes {
    let mut buf = BytesMut::with_capacity(18 + block.len());
    control_head(&mut buf, TYPE_SYN_STREAM, flags, 10 + block.len());
    buf.put_u32(stream_id & MAX_STREAM_ID);
    buf.put_u32(associated_to & MAX_STREAM_ID);
    buf.put_u8((priority & 0x07) << 5);
    buf.put_u8(0); // credential slot: unused
    buf.put_slice(block);
    buf.freeze()
}

/// A SYN_REPLY frame: stream id, then the compressed header block.
pub(crate) fn syn_reply(stream_id: u32, flags: u8, block: &[u8]) -> Bytes {
    let mut buf = BytesMut::with_capacity(12 + block.len());
    control_head(&mut buf, TYPE_SYN_REPLY, flags, 4 + block.len());
    buf.put_u32(stream_id & MAX_STREAM_ID);
    buf.put_slice(block);
    buf.freeze()
}

/// A RST_STREAM frame.
pub(crate) fn rst_stream(stream_id: u32, status: u32) -> Bytes {
    let mut buf = BytesMut::with_capacity(16);
    control_head(&mut buf, TYPE_RST_STREAM, 0, 8);
    buf.put_u32(stream_id & MAX_STREAM_ID);
    buf.put_u32(status);
    buf.freeze()
}

/// A PING frame.
pub(crate) fn ping(id: u32) -> Bytes {
    let mut buf = BytesMut::with_capacity(12);
    control_head(&mut buf, TYPE_PING, 0, 4);
    buf.put_u32(id);
    buf.freeze()
}

/// A GOAWAY frame.
pub(crate) fn goaway(last_good_stream_id: u32, status: u32) -> Bytes {
    let mut buf = BytesMut::with_capacity(16);
    control_head(&mut buf, TYPE_GOAWAY, 0, 8);
    buf.put_u32(last_good_stream_id & MAX_STREAM_ID);
    buf.put_u32(status);
    buf.freeze()
}

/// A WINDOW_UPDATE frame (stream id 0: the session's window, SPDY/3.1).
pub(crate) fn window_update(stream_id: u32, delta: u32) -> Bytes {
    let mut buf = BytesMut::with_capacity(16);
    control_head(&mut buf, TYPE_WINDOW_UPDATE, 0, 8);
    buf.put_u32(stream_id & MAX_STREAM_ID);
    buf.put_u32(delta & 0x7fff_ffff);
    buf.freeze()
}

/// A DATA frame. `payload` must be at most `MAX_PAYLOAD` bytes.
pub(crate) fn data(stream_id: u32, flags: u8, payload: &[u8]) -> Bytes {
    debug_assert!(payload.len() <= MAX_PAYLOAD);
    let mut buf = BytesMut::with_capacity(8 + payload.len());
    buf.put_u32(stream_id & MAX_STREAM_ID);
    buf.put_u32(u32::from(flags) << 24 | (payload.len() as u32 & 0x00ff_ffff));
    buf.put_slice(payload);
    buf.freeze()
}

/// Header names spdystream refuses in a SYN_STREAM: receiving one ends its whole connection,
/// so they are rejected before sending.
const FORBIDDEN_REQUEST_HEADERS: [&str; 5] = [
    "connection",
    "host",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
];

/// Encodes headers into an uncompressed name/value block: names lowercased (spdystream ends
/// the connection on an upper-case name), values of a repeated name joined with NUL in order of
/// appearance (it also ends the connection on a repeated name).
pub(crate) fn encode_header_block(headers: &[(&str, &str)]) -> Result<Vec<u8>, SpdyError> {
    let mut merged: Vec<(String, String)> = Vec::with_capacity(headers.len());
    for &(name, value) in headers {
        let lower = name.to_ascii_lowercase();
        let invalid = |reason| SpdyError::InvalidHeader {
            name: name.to_owned(),
            reason,
        };
        if lower.is_empty() {
            return Err(invalid("empty name"));
        }
        if lower.bytes().any(|b| b == 0) {
            return Err(invalid("NUL in name"));
        }
        if FORBIDDEN_REQUEST_HEADERS.contains(&lower.as_str()) {
            return Err(invalid("connection-specific header not allowed in SPDY"));
        }
        match merged.iter_mut().find(|(n, _)| *n == lower) {
            Some((_, v)) => {
                v.push('\0');
                v.push_str(value);
            }
            None => merged.push((lower, value.to_owned())),
        }
    }
    let size = 4 + merged
        .iter()
        .map(|(n, v)| 8 + n.len() + v.len())
        .sum::<usize>();
    // Far below the frame limit, so the compressed block always fits, and within what the
    // peer's decompressor accepts (ours: `MAX_DECOMPRESSED_BLOCK`).
    if size > MAX_HEADER_BLOCK {
        return Err(SpdyError::HeaderBlockTooLarge);
    }
    let mut block = Vec::with_capacity(size);
    block.extend_from_slice(&(merged.len() as u32).to_be_bytes());
    for (name, value) in &merged {
        block.extend_from_slice(&(name.len() as u32).to_be_bytes());
        block.extend_from_slice(name.as_bytes());
        block.extend_from_slice(&(value.len() as u32).to_be_bytes());
        block.extend_from_slice(value.as_bytes());
    }
    Ok(block)
}

/// Decodes an uncompressed name/value block. Names are lowercased; a value holding several
/// NUL-separated values becomes several entries. Any inconsistency (counts or lengths running
/// past the block, bytes left over, a name that is not UTF-8) is an error; values that are not
/// UTF-8 are decoded lossily.
pub(crate) fn decode_header_block(block: &[u8]) -> Result<Vec<(String, String)>, SpdyError> {
    let malformed = |what: &str| SpdyError::Protocol(format!("malformed header block: {what}"));
    let mut rest = block;
    let take_u32 = |rest: &mut &[u8]| -> Result<usize, SpdyError> {
        if rest.len() < 4 {
            return Err(malformed("truncated"));
        }
        let v = be32(rest, 0) as usize;
        *rest = &rest[4..];
        Ok(v)
    };
    let count = take_u32(&mut rest)?;
    // Each entry takes at least 8 bytes: refuse counts the block cannot hold before allocating.
    if count > rest.len() / 8 {
        return Err(malformed("entry count exceeds the block"));
    }
    let mut headers = Vec::with_capacity(count);
    // What the decoded headers take: a value holding many NUL-separated parts repeats its name
    // for each, so a small block could otherwise decode to gigabytes.
    let mut decoded = 0usize;
    for _ in 0..count {
        let len = take_u32(&mut rest)?;
        if len > rest.len() {
            return Err(malformed("name runs past the block"));
        }
        let (name, after) = rest.split_at(len);
        rest = after;
        let name = std::str::from_utf8(name)
            .map_err(|_| malformed("name is not UTF-8"))?
            .to_ascii_lowercase();
        let len = take_u32(&mut rest)?;
        if len > rest.len() {
            return Err(malformed("value runs past the block"));
        }
        let (value, after) = rest.split_at(len);
        rest = after;
        for v in value.split(|&b| b == 0) {
            decoded = decoded.saturating_add(name.len() + v.len());
            if decoded > MAX_HEADER_BLOCK {
                return Err(malformed("decoded headers too large"));
            }
            headers.push((name.clone(), String::from_utf8_lossy(v).into_owned()));
        }
    }
    if !rest.is_empty() {
        return Err(malformed("bytes after the last entry"));
    }
    Ok(headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_of_many_parts_cannot_decode_past_the_block_limit() {
        // One entry: a 64 KiB name and a value of 64 Ki NULs (65 537 empty parts).
        let name = vec![b'a'; 1 << 16];
        let value = vec![0u8; 1 << 16];
        let mut block = Vec::new();
        block.extend_from_slice(&1u32.to_be_bytes());
        block.extend_from_slice(&(name.len() as u32).to_be_bytes());
        block.extend_from_slice(&name);
        block.extend_from_slice(&(value.len() as u32).to_be_bytes());
        block.extend_from_slice(&value);
        assert!(decode_header_block(&block).is_err());
    }

    #[test]
    fn syn_stream_fixed_fields() {
        let frame = syn_stream(5, 0, 0, FLAG_FIN, &[0xaa, 0xbb, 0xcc]);
        assert_eq!(
            &frame[..],
            &[
                0x80, 0x03, 0x00, 0x01, // control bit, version 3, type SYN_STREAM
                0x01, 0x00, 0x00, 0x0d, // flags FIN, length 10 + 3
                0x00, 0x00, 0x00, 0x05, // stream id
                0x00, 0x00, 0x00, 0x00, // associated-to stream id
                0x00, 0x00, // priority << 5, slot
                0xaa, 0xbb, 0xcc, // header block
            ][..]
        );
        let with_priority = syn_stream(7, 3, 7, 0, &[]);
        assert_eq!(&with_priority[8..18], &[0, 0, 0, 7, 0, 0, 0, 3, 0xe0, 0]);
    }

    #[test]
    fn data_frame_bytes() {
        let frame = data(3, 0, b"hello");
        assert_eq!(
            &frame[..],
            &[0, 0, 0, 3, 0, 0, 0, 5, b'h', b'e', b'l', b'l', b'o'][..]
        );
        let fin = data(0x7fff_ffff, FLAG_FIN, &[]);
        assert_eq!(&fin[..], &[0x7f, 0xff, 0xff, 0xff, 0x01, 0, 0, 0][..]);
    }

    #[test]
    fn control_frames_bytes() {
        assert_eq!(
            &rst_stream(9, RST_CANCEL)[..],
            &[0x80, 3, 0, 3, 0, 0, 0, 8, 0, 0, 0, 9, 0, 0, 0, 5][..]
        );
        assert_eq!(
            &ping(0x0102_0304)[..],
            &[0x80, 3, 0, 6, 0, 0, 0, 4, 1, 2, 3, 4][..]
        );
        assert_eq!(
            &goaway(7, GOAWAY_OK)[..],
            &[0x80, 3, 0, 7, 0, 0, 0, 8, 0, 0, 0, 7, 0, 0, 0, 0][..]
        );
        assert_eq!(
            &window_update(0, 65536)[..],
            &[0x80, 3, 0, 9, 0, 0, 0, 8, 0, 0, 0, 0, 0, 1, 0, 0][..]
        );
        assert_eq!(
            &syn_reply(2, 0, &[1])[..],
            &[0x80, 3, 0, 2, 0, 0, 0, 5, 0, 0, 0, 2, 1][..]
        );
    }

    #[test]
    fn heads_parse() {
        assert_eq!(
            Head::parse([0x80, 3, 0, 9, 0x01, 0x12, 0x34, 0x56]),
            Head::Control {
                version: 3,
                kind: 9,
                flags: 1,
                length: 0x12_3456
            }
        );
        assert_eq!(
            Head::parse([0x80, 0, 0, 1, 0, 0, 0, 0]),
            Head::Control {
                version: 0,
                kind: 1,
                flags: 0,
                length: 0
            }
        );
        assert_eq!(
            Head::parse([0x00, 0, 0, 1, 0x01, 0xff, 0xff, 0xff]),
            Head::Data {
                stream_id: 1,
                flags: FLAG_FIN,
                length: MAX_PAYLOAD
            }
        );
    }

    #[test]
    fn header_blocks_round_trip() {
        let block = encode_header_block(&[
            ("streamType", "error"),
            ("Port", "80"),
            ("streamtype", "data"),
        ])
        .unwrap();
        // Two entries: the repeated (case-insensitive) name is merged with a NUL.
        let mut expected = vec![0, 0, 0, 2];
        expected.extend_from_slice(&[0, 0, 0, 10]);
        expected.extend_from_slice(b"streamtype");
        expected.extend_from_slice(&[0, 0, 0, 10]);
        expected.extend_from_slice(b"error\0data");
        expected.extend_from_slice(&[0, 0, 0, 4]);
        expected.extend_from_slice(b"port");
        expected.extend_from_slice(&[0, 0, 0, 2]);
        expected.extend_from_slice(b"80");
        assert_eq!(block, expected);
        assert_eq!(
            decode_header_block(&block).unwrap(),
            vec![
                ("streamtype".to_owned(), "error".to_owned()),
                ("streamtype".to_owned(), "data".to_owned()),
                ("port".to_owned(), "80".to_owned()),
            ]
        );
        assert_eq!(
            decode_header_block(&encode_header_block(&[]).unwrap()).unwrap(),
            vec![]
        );
    }

    #[test]
    fn header_blocks_rejected() {
        for bad in [
            ("Host", "x"),
            ("", "x"),
            ("a\0b", "x"),
            ("Transfer-Encoding", "x"),
        ] {
            assert!(matches!(
                encode_header_block(&[bad]),
                Err(SpdyError::InvalidHeader { .. })
            ));
        }
        let good = encode_header_block(&[("a", "b")]).unwrap();
        for bad in [
            &good[..3],                    // truncated count
            &good[..good.len() - 1],       // truncated value
            &[0xff, 0xff, 0xff, 0xff][..], // absurd count
        ] {
            assert!(matches!(
                decode_header_block(bad),
                Err(SpdyError::Protocol(_))
            ));
        }
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(decode_header_block(&trailing).is_err());
    }
}

//! The protobuf wire format, read the way upstream's generated (gogo) code reads it: varints of
//! up to ten bytes, field numbers above zero, groups skipped, every length checked.

use super::ProtobufError;

/// One field value as it appears on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wire<'a> {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 1.
    Fixed64(u64),
    /// Wire type 2: a string, bytes, a message, a map entry or a packed run.
    Len(&'a [u8]),
    /// Wire type 5.
    Fixed32(u32),
    /// Wire type 3: a (deprecated) group, skipped with its contents.
    Group,
}

impl Wire<'_> {
    /// The wire type number, for error messages.
    pub(crate) fn wire_type(&self) -> u8 {
        match self {
            Wire::Varint(_) => 0,
            Wire::Fixed64(_) => 1,
            Wire::Len(_) => 2,
            Wire::Group => 3,
            Wire::Fixed32(_) => 5,
        }
    }
}

/// Reads the fields of one message in order.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Whether every byte has been read.
    pub(crate) fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// A varint (at most ten bytes; bits past 64 are dropped, as Go's decoder does).
    pub(crate) fn varint(&mut self) -> Result<u64, ProtobufError> {
        let mut value = 0u64;
        let mut shift = 0u32;
        loop {
            if shift >= 64 {
                return Err(ProtobufError::VarintOverflow);
            }
            let byte = *self.buf.get(self.pos).ok_or(ProtobufError::Truncated)?;
            self.pos += 1;
            value |= u64::from(byte & 0x7f).checked_shl(shift).unwrap_or(0);
            if byte < 0x80 {
                return Ok(value);
            }
            shift += 7;
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtobufError> {
        let end = self.pos.checked_add(n).ok_or(ProtobufError::Truncated)?;
        let bytes = self
            .buf
            .get(self.pos..end)
            .ok_or(ProtobufError::Truncated)?;
        self.pos = end;
        Ok(bytes)
    }

    fn fixed<const N: usize>(&mut self) -> Result<[u8; N], ProtobufError> {
        let bytes = self.take(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    /// A little-endian 64-bit value.
    pub(crate) fn fixed64(&mut self) -> Result<u64, ProtobufError> {
        self.fixed::<8>().map(u64::from_le_bytes)
    }

    /// A field key: `(field number, wire type)`.
    fn key(&mut self) -> Result<(u32, u8), ProtobufError> {
        let key = self.varint()?;
        // Go truncates the field number to int32 and rejects anything not above zero.
        let number = (key >> 3) as u32 as i32;
        let wire_type = (key & 7) as u8;
        if number <= 0 {
            return Err(ProtobufError::IllegalFieldNumber(i64::from(number)));
        }
        Ok((number.unsigned_abs(), wire_type))
    }

    /// Skips a group's contents up to its matching end marker.
    fn skip_group(&mut self) -> Result<(), ProtobufError> {
        let mut depth = 1usize;
        while depth > 0 {
            let (_, wire_type) = self.key()?;
            match wire_type {
                3 => depth += 1,
                4 => depth -= 1,
                _ => {
                    self.value(wire_type)?;
                }
            }
        }
        Ok(())
    }

    fn value(&mut self, wire_type: u8) -> Result<Wire<'a>, ProtobufError> {
        Ok(match wire_type {
            0 => Wire::Varint(self.varint()?),
            1 => Wire::Fixed64(self.fixed64()?),
            2 => {
                let len = self.varint()?;
                let len = usize::try_from(len).map_err(|_| ProtobufError::Truncated)?;
                Wire::Len(self.take(len)?)
            }
            3 => {
                self.skip_group()?;
                Wire::Group
            }
            4 => return Err(ProtobufError::UnexpectedEndGroup),
            5 => Wire::Fixed32(self.fixed::<4>().map(u32::from_le_bytes)?),
            other => return Err(ProtobufError::IllegalWireType(other)),
        })
    }

    /// The next field, or `None` at the end of the message.
    pub(crate) fn next_field(&mut self) -> Result<Option<(u32, Wire<'a>)>, ProtobufError> {
        if self.is_empty() {
            return Ok(None);
        }
        let (number, wire_type) = self.key()?;
        Ok(Some((number, self.value(wire_type)?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(bytes: &[u8]) -> Result<Vec<(u32, Wire<'_>)>, ProtobufError> {
        let mut reader = Reader::new(bytes);
        let mut out = Vec::new();
        while let Some(field) = reader.next_field()? {
            out.push(field);
        }
        Ok(out)
    }

    #[test]
    fn reads_each_wire_type() {
        let bytes = [
            0x08, 0x96, 0x01, // 1: varint 150
            0x11, 1, 0, 0, 0, 0, 0, 0, 0, // 2: fixed64 1
            0x1a, 2, b'h', b'i', // 3: "hi"
            0x25, 7, 0, 0, 0, // 4: fixed32 7
            0x2b, 0x08, 0x01, 0x2c, // 5: group holding a varint
        ];
        assert_eq!(
            fields(&bytes).unwrap(),
            vec![
                (1, Wire::Varint(150)),
                (2, Wire::Fixed64(1)),
                (3, Wire::Len(b"hi")),
                (4, Wire::Fixed32(7)),
                (5, Wire::Group),
            ]
        );
    }

    #[test]
    fn ten_byte_varints_are_negative_numbers() {
        let minus_one = [
            0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
        ];
        assert_eq!(
            fields(&minus_one).unwrap(),
            vec![(1, Wire::Varint(u64::MAX))]
        );
        let eleven = [
            0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
        ];
        assert_eq!(fields(&eleven), Err(ProtobufError::VarintOverflow));
    }

    #[test]
    fn malformed_input_is_an_error() {
        assert_eq!(fields(&[0x08]), Err(ProtobufError::Truncated));
        assert_eq!(fields(&[0x08, 0x80]), Err(ProtobufError::Truncated));
        assert_eq!(fields(&[0x0a, 5, b'a']), Err(ProtobufError::Truncated));
        assert_eq!(fields(&[0x11, 1, 2]), Err(ProtobufError::Truncated));
        assert_eq!(
            fields(&[0x00, 1]),
            Err(ProtobufError::IllegalFieldNumber(0))
        );
        assert_eq!(fields(&[0x0e]), Err(ProtobufError::IllegalWireType(6)));
        assert_eq!(fields(&[0x0c]), Err(ProtobufError::UnexpectedEndGroup));
        assert_eq!(fields(&[0x0b, 0x08, 0x01]), Err(ProtobufError::Truncated));
        let huge_len = [0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f];
        assert_eq!(fields(&huge_len), Err(ProtobufError::Truncated));
    }
}

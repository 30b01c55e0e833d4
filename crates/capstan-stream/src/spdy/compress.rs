//! Header-block compression: one zlib stream per direction for the whole session.
//!
//! SPDY/3 compresses every header block (SYN_STREAM, SYN_REPLY, HEADERS) with a single zlib
//! context per direction that lives as long as the session, seeded with the SPDY/3 dictionary;
//! each block ends with a sync flush so the receiver can decode it without waiting for more.
//! Because the context is shared, every block must be decompressed in arrival order, including
//! blocks of frames that are otherwise ignored, and blocks must be compressed in the order their
//! frames are written.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

use super::SpdyError;
use super::dictionary::{DICTIONARY, DICTIONARY_ID};

/// The largest decompressed header block accepted: kubectl's are a few dozen bytes; this only
/// stops decompression bombs.
const MAX_DECOMPRESSED_BLOCK: usize = super::frame::MAX_HEADER_BLOCK;

/// Compresses the header blocks one side sends.
pub(crate) struct HeaderCompressor {
    /// The zlib context, created (and seeded) on first use so construction cannot fail.
    z: Option<Compress>,
}

impl std::fmt::Debug for HeaderCompressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeaderCompressor")
            .field("total_in", &self.z.as_ref().map(Compress::total_in))
            .finish()
    }
}

impl HeaderCompressor {
    /// A compressor whose context starts on the first block.
    pub(crate) fn new() -> Self {
        HeaderCompressor { z: None }
    }

    /// Compresses one header block, ending with a sync flush.
    pub(crate) fn compress(&mut self, block: &[u8]) -> Result<Vec<u8>, SpdyError> {
        let z = match &mut self.z {
            Some(z) => z,
            slot => {
                // Best compression, as spdystream: header blocks are small and rare.
                let mut z = Compress::new(Compression::best(), true);
                z.set_dictionary(&DICTIONARY)
                    .map_err(|e| SpdyError::Compression(e.to_string()))?;
                slot.insert(z)
            }
        };
        let start = z.total_in();
        let mut out = Vec::with_capacity(block.len() / 2 + 64);
        loop {
            let consumed = (z.total_in() - start) as usize;
            if out.capacity() - out.len() < 32 {
                out.reserve(out.capacity().max(64));
            }
            let before = (z.total_in(), z.total_out());
            z.compress_vec(&block[consumed..], &mut out, FlushCompress::Sync)
                .map_err(|e| SpdyError::Compression(e.to_string()))?;
            let consumed = (z.total_in() - start) as usize;
            // The flush is complete once all input is in and zlib left output space unused.
            if consumed == block.len() && out.len() < out.capacity() {
                return Ok(out);
            }
            if (z.total_in(), z.total_out()) == before && out.len() < out.capacity() {
                return Err(SpdyError::Compression("zlib made no progress".into()));
            }
        }
    }
}

/// Decompresses the header blocks the peer sends.
pub(crate) struct HeaderDecompressor {
    /// The zlib context; the dictionary is given when zlib asks for it (after the stream header).
    z: Decompress,
}

impl std::fmt::Debug for HeaderDecompressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeaderDecompressor")
            .field("total_in", &self.z.total_in())
            .finish()
    }
}

impl HeaderDecompressor {
    /// A decompressor expecting a zlib stream header before the first block.
    pub(crate) fn new() -> Self {
        HeaderDecompressor {
            z: Decompress::new(true),
        }
    }

    /// Decompresses one header block: all of `input` must be consumed and its output flushed.
    pub(crate) fn decompress(&mut self, input: &[u8]) -> Result<Vec<u8>, SpdyError> {
        let fail = |what: String| SpdyError::Protocol(format!("header decompression: {what}"));
        let start = self.z.total_in();
        let mut out: Vec<u8> =
            Vec::with_capacity((input.len() * 4 + 64).min(MAX_DECOMPRESSED_BLOCK));
        loop {
            let consumed = (self.z.total_in() - start) as usize;
            if out.len() == out.capacity() {
                if out.len() > MAX_DECOMPRESSED_BLOCK {
                    return Err(fail("header block too large".into()));
                }
                out.reserve(out.len());
            }
            let before = (self.z.total_in(), self.z.total_out());
            match self
                .z
                .decompress_vec(&input[consumed..], &mut out, FlushDecompress::Sync)
            {
                Ok(Status::StreamEnd) => {
                    // The peer ended its zlib stream; no later block could be decoded.
                    if ((self.z.total_in() - start) as usize) < input.len() {
                        return Err(fail("data after the end of the zlib stream".into()));
                    }
                    return Ok(out);
                }
                Ok(Status::Ok | Status::BufError) => {}
                Err(e) => match e.needs_dictionary() {
                    Some(DICTIONARY_ID) => {
                        self.z
                            .set_dictionary(&DICTIONARY)
                            .map_err(|e| fail(e.to_string()))?;
                        continue;
                    }
                    Some(other) => return Err(fail(format!("unknown dictionary {other:#010x}"))),
                    None => return Err(fail(e.to_string())),
                },
            }
            let consumed = (self.z.total_in() - start) as usize;
            if consumed == input.len() && out.len() < out.capacity() {
                return Ok(out);
            }
            if (self.z.total_in(), self.z.total_out()) == before && out.len() < out.capacity() {
                return Err(fail("truncated block".into()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dictionary_is_the_spdy3_one() {
        assert_eq!(DICTIONARY.len(), 1423);
        let mut z = Compress::new(Compression::best(), true);
        assert_eq!(z.set_dictionary(&DICTIONARY).unwrap(), DICTIONARY_ID);
        // The SPDY/3 dictionary's first entry and its last bytes.
        assert_eq!(&DICTIONARY[..11], b"\0\0\0\x07options");
        assert!(DICTIONARY.ends_with(b"charset=utf-8charset=iso-8859-1,utf-,*,enq=0."));
    }

    #[test]
    fn first_block_names_the_dictionary() {
        let mut c = HeaderCompressor::new();
        let out = c.compress(b"\0\0\0\0").unwrap();
        // zlib header: deflate with 32 KiB window, level 9 (FLEVEL 3), FDICT set; then the
        // dictionary's Adler-32.
        assert_eq!(&out[..2], &[0x78, 0xf9]);
        assert_eq!(&out[2..6], &DICTIONARY_ID.to_be_bytes());
        // Sync flush: an empty stored block.
        assert!(out.ends_with(&[0x00, 0x00, 0xff, 0xff]));
        // Later blocks continue the stream: no header.
        let second = c.compress(b"\0\0\0\0").unwrap();
        assert_ne!(&second[..2], &[0x78, 0xf9]);
        assert!(second.ends_with(&[0x00, 0x00, 0xff, 0xff]));
    }

    #[test]
    fn blocks_share_one_context() {
        let mut c = HeaderCompressor::new();
        let mut d = HeaderDecompressor::new();
        let block = b"\0\0\0\x01\0\0\0\x0astreamtype\0\0\0\x06stdout".to_vec();
        let mut sizes = Vec::new();
        for i in 0..50 {
            let mut b = block.clone();
            b.extend_from_slice(format!("{i}").as_bytes());
            b[21] = 6 + format!("{i}").len() as u8;
            let z = c.compress(&b).unwrap();
            sizes.push(z.len());
            assert_eq!(d.decompress(&z).unwrap(), b);
        }
        // Repeated blocks compress far better once the context has seen them.
        assert!(sizes[40] < sizes[0], "{sizes:?}");
        // A large block exercising output growth.
        let big: Vec<u8> = (0..200_000u32).flat_map(|i| i.to_be_bytes()).collect();
        let z = c.compress(&big).unwrap();
        assert_eq!(d.decompress(&z).unwrap(), big);
    }

    #[test]
    fn garbage_is_an_error() {
        let mut d = HeaderDecompressor::new();
        assert!(d.decompress(&[1, 2, 3, 4, 5, 6, 7, 8]).is_err());
        // A zlib stream asking for another dictionary.
        let mut d = HeaderDecompressor::new();
        assert!(d.decompress(&[0x78, 0xf9, 0, 0, 0, 1]).is_err());
    }
}

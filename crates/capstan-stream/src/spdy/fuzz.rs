//! Fuzz targets of the SPDY/3.1 decoder: header blocks (plain and zlib-compressed with the
//! SPDY dictionary) and whole sessions fed frames a hostile peer might send. Run by bolero:
//! for `capstan_testkit::fuzz::CI_TIME` each under `cargo test`, longer with
//! `BOLERO_RANDOM_TEST_TIME_MS`, or coverage-guided with `cargo bolero test -p capstan-stream
//! spdy::fuzz::<target>` (README, "Testing"). Inputs that once failed are kept as the named
//! tests at the end.

use std::time::Duration;

use capstan_testkit::fuzz::{CI_TIME, Input, KEYS, STRINGS};
use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};

use super::Session;
use super::compress::{HeaderCompressor, HeaderDecompressor};
use super::frame::{
    FLAG_FIN, FLAG_UNIDIRECTIONAL, TYPE_GOAWAY, TYPE_HEADERS, TYPE_PING, TYPE_RST_STREAM,
    TYPE_SETTINGS, TYPE_SYN_REPLY, TYPE_SYN_STREAM, TYPE_WINDOW_UPDATE, decode_header_block,
    encode_header_block,
};

/// Runs `target` on bolero's inputs for the CI time (or as the chosen engine says).
macro_rules! fuzz {
    ($target:expr) => {
        bolero::check!()
            .with_test_time(CI_TIME)
            .for_each(|bytes: &[u8]| $target(bytes))
    };
}

/// How long a session fed a finite input may take to end once the input is closed.
const SESSION_END: Duration = Duration::from_secs(10);

/// A header block as a peer might send it: well formed with random names and values, or with
/// counts and lengths that lie.
fn header_block(input: &mut Input<'_>) -> Vec<u8> {
    let mut block = Vec::new();
    let count = input.below(6) as u32;
    let lie = input.one_in(6);
    block.extend_from_slice(&(if lie { input.u32() } else { count }).to_be_bytes());
    for _ in 0..count {
        for _ in 0..2 {
            let text = input.string(KEYS).into_bytes();
            let len = if input.one_in(12) {
                input.u32()
            } else {
                text.len() as u32
            };
            block.extend_from_slice(&len.to_be_bytes());
            block.extend_from_slice(&text);
            if input.one_in(10) {
                // NUL-separated values.
                block.push(0);
            }
        }
    }
    if input.one_in(10) {
        block.extend_from_slice(input.bytes(8));
    }
    block
}

fn header_block_target(bytes: &[u8]) {
    let mut input = Input::new(bytes);
    let block = if input.one_in(4) {
        input.rest().to_vec()
    } else {
        header_block(&mut input)
    };
    if let Ok(headers) = decode_header_block(&block) {
        // What decodes encodes again, and decodes to the same headers.
        let pairs: Vec<(&str, &str)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        if let Ok(encoded) = encode_header_block(&pairs) {
            let mut again = decode_header_block(&encoded)
                .unwrap_or_else(|e| panic!("re-encoded headers {headers:?} do not decode: {e}"));
            // Encoding groups the values of a name (joined by NULs), as spdystream's
            // `http.Header` does: the same headers come back, grouped by name.
            let mut headers = headers;
            headers.sort();
            again.sort();
            assert_eq!(again, headers);
        }
    }
    // The same block through zlib with the SPDY dictionary, and raw input as compressed data.
    let mut compressor = HeaderCompressor::new();
    let mut decompressor = HeaderDecompressor::new();
    if let Ok(compressed) = compressor.compress(&block) {
        let inflated = decompressor
            .decompress(&compressed)
            .unwrap_or_else(|e| panic!("our own compressed block fails: {e}"));
        assert_eq!(inflated, block);
    }
    let _ = decompressor.decompress(input.rest());
    let _ = HeaderDecompressor::new().decompress(&block);
}

#[test]
fn header_blocks() {
    fuzz!(header_block_target);
}

/// A control frame with a payload.
fn control(kind: u16, flags: u8, payload: &[u8], version: u16) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + payload.len());
    out.extend_from_slice(&(0x8000 | version).to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    out.push(flags);
    let len = payload.len() as u32;
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.extend_from_slice(payload);
    out
}

/// The bytes a hostile client sends a server session: a run of frames, mostly well formed
/// (with real compressed header blocks, so streams open), some with lying lengths or odd
/// fields, now and then raw bytes.
fn peer_frames(input: &mut Input<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut compressor = HeaderCompressor::new();
    let mut next_id = 1u32;
    for _ in 0..input.below(24) {
        let version = if input.one_in(32) { 2 } else { 3 };
        let flags = *input.pick(&[
            0,
            FLAG_FIN,
            FLAG_UNIDIRECTIONAL,
            FLAG_FIN | FLAG_UNIDIRECTIONAL,
            0xff,
        ]);
        let stream_id = match input.below(4) {
            0 => next_id.saturating_sub(2),
            1 => input.u32() & 0x7fff_ffff,
            _ => next_id,
        };
        match input.below(11) {
            0 | 1 => {
                let block = if input.one_in(8) {
                    header_block(input)
                } else {
                    let streamtype = *input.pick(&["data", "error", "stdin", "stdout", "resize"]);
                    let name = input.string(STRINGS);
                    let value = input.string(STRINGS);
                    encode_header_block(&[("streamtype", streamtype), (&name, &value)])
                        .unwrap_or_default()
                };
                let compressed = if input.one_in(10) {
                    input.bytes(32).to_vec()
                } else {
                    compressor.compress(&block).unwrap_or_default()
                };
                let mut payload = Vec::new();
                payload.extend_from_slice(&stream_id.to_be_bytes());
                payload.extend_from_slice(&0u32.to_be_bytes());
                payload.extend_from_slice(&[input.byte(), input.byte()]);
                payload.extend_from_slice(&compressed);
                if input.one_in(16) {
                    payload.truncate(input.below(10));
                }
                out.extend(control(TYPE_SYN_STREAM, flags, &payload, version));
                next_id = next_id.wrapping_add(2);
            }
            2..=4 => {
                // DATA on an open (or unknown) stream.
                let data = input.bytes(64);
                let mut head = (stream_id & 0x7fff_ffff).to_be_bytes().to_vec();
                head.push(flags);
                head.extend_from_slice(&(data.len() as u32).to_be_bytes()[1..]);
                out.extend(head);
                out.extend_from_slice(data);
            }
            5 => {
                let mut payload = stream_id.to_be_bytes().to_vec();
                payload.extend_from_slice(&(input.byte() as u32 % 12).to_be_bytes());
                out.extend(control(TYPE_RST_STREAM, flags, &payload, version));
            }
            6 => out.extend(control(TYPE_PING, 0, &input.u32().to_be_bytes(), version)),
            7 => {
                let mut payload = stream_id.to_be_bytes().to_vec();
                payload.extend_from_slice(&input.u32().to_be_bytes());
                out.extend(control(TYPE_WINDOW_UPDATE, 0, &payload, version));
            }
            8 => {
                let kind =
                    *input.pick(&[TYPE_SETTINGS, TYPE_SYN_REPLY, TYPE_HEADERS, 5, 10, 0xffff]);
                let mut payload = stream_id.to_be_bytes().to_vec();
                let block = header_block(input);
                payload.extend(compressor.compress(&block).unwrap_or_default());
                if input.one_in(3) {
                    payload = input.bytes(24).to_vec();
                }
                out.extend(control(kind, flags, &payload, version));
            }
            9 => {
                // A frame header whose length promises more than follows.
                out.extend_from_slice(&[0x80, 0x03, 0x00, input.byte() % 10, flags]);
                out.extend_from_slice(&[input.byte(), input.byte(), input.byte()]);
                out.extend_from_slice(input.bytes(16));
            }
            _ => {
                if input.one_in(4) {
                    out.extend(control(TYPE_GOAWAY, 0, &[0; 8], version));
                } else {
                    out.extend_from_slice(input.bytes(16));
                }
            }
        }
    }
    out
}

/// One runtime per test thread, shared by the inputs of a target.
fn runtime() -> &'static tokio::runtime::Runtime {
    thread_local! {
        static RUNTIME: &'static tokio::runtime::Runtime = Box::leak(Box::new(
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap_or_else(|e| panic!("runtime: {e}")),
        ));
    }
    RUNTIME.with(|rt| *rt)
}

fn session_target(bytes: &[u8]) {
    let mut input = Input::new(bytes);
    let wire = peer_frames(&mut input);
    let as_client = input.one_in(4);
    runtime().block_on(async move {
        let (ours, peer) = duplex(64 * 1024);
        let (session, mut accept) = if as_client {
            let (_, rx) = tokio::sync::mpsc::channel(1);
            (Session::client(ours), rx)
        } else {
            Session::server(ours)
        };
        // The application: reply to every stream, read it to its end, answer on it.
        let app = tokio::spawn(async move {
            while let Some(stream) = accept.recv().await {
                tokio::spawn(async move {
                    let _ = stream.reply().await;
                    let (mut rx, tx) = stream.split();
                    let _ = tx.send(b"ok").await;
                    while rx.recv().await.is_some() {}
                    let _ = tx.finish().await;
                });
            }
        });
        let (mut peer_read, mut peer_write) = tokio::io::split(peer);
        // Drain what the session writes, so it never waits on a full pipe.
        let drain = tokio::spawn(async move {
            let mut sink = vec![0u8; 16 * 1024];
            while matches!(peer_read.read(&mut sink).await, Ok(n) if n > 0) {}
        });
        // (A session that ended on bad input reads no more: the rest of the input may not fit.)
        let _ = tokio::time::timeout(SESSION_END, async {
            let _ = peer_write.write_all(&wire).await;
            let _ = peer_write.shutdown().await;
        })
        .await;
        // Whatever the input, the session ends once its peer stops sending: a reader that
        // panicked or hung would leave it open.
        let ended = tokio::time::timeout(SESSION_END, session.closed()).await;
        drain.abort();
        assert!(
            ended.is_ok(),
            "the session did not end after its input: {wire:?}"
        );
        app.abort();
    });
}

#[test]
fn sessions() {
    fuzz!(session_target);
}

// ---------------------------------------------------------------------------------------------
// Regression inputs: each once made a target fail.
// ---------------------------------------------------------------------------------------------

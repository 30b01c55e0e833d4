//! Session tests: our client and server against each other over an in-memory pipe, and against a
//! hand-driven raw peer that writes and checks frames byte by byte.

use std::future::Future;

use tokio::io::{DuplexStream, duplex};

use super::compress::{HeaderCompressor, HeaderDecompressor};
use super::frame::{
    TYPE_GOAWAY, TYPE_PING, TYPE_RST_STREAM, TYPE_SYN_REPLY, TYPE_SYN_STREAM, TYPE_WINDOW_UPDATE,
    be32, decode_header_block, encode_header_block,
};
use super::*;

/// How long any single wait in these tests may take.
const WAIT: Duration = Duration::from_secs(30);

/// Awaits `f`, failing the test if it takes longer than [`WAIT`].
async fn within<F: Future>(f: F) -> F::Output {
    tokio::time::timeout(WAIT, f).await.expect("timed out")
}

/// Waits until `cond` holds.
async fn eventually(mut cond: impl FnMut() -> bool) {
    within(async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

/// A client and a server session connected by an in-memory pipe.
fn pair() -> (Session, Session, mpsc::Receiver<Stream>) {
    let (a, b) = duplex(64 * 1024);
    let client = Session::client(a);
    let (server, accept) = Session::server(b);
    (client, server, accept)
}

/// Opens a stream from `client` and accepts (replies to) it on the server.
async fn open_pair(
    client: &Session,
    accept: &mut mpsc::Receiver<Stream>,
    headers: &[(&str, &str)],
) -> (Stream, Stream) {
    let (opened, accepted) = within(async {
        tokio::join!(client.open(headers), async {
            let stream = accept.recv().await.expect("server session ended");
            stream.reply().await.expect("reply");
            stream
        })
    })
    .await;
    (opened.expect("open"), accepted)
}

/// Everything a receiver yields until its end.
async fn collect(rx: &mut RecvHalf) -> Vec<u8> {
    let mut all = Vec::new();
    while let Some(chunk) = rx.recv().await {
        all.extend_from_slice(&chunk);
    }
    all
}

/// Deterministic pseudo-random bytes.
fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 24) as u8
        })
        .collect()
}

/// A frame as the raw peer reads it.
#[derive(Debug)]
enum Got {
    /// A DATA frame.
    Data { id: u32, flags: u8, payload: Bytes },
    /// A control frame, with its decoded header block for SYN_STREAM and SYN_REPLY.
    Control {
        kind: u16,
        flags: u8,
        payload: Bytes,
        headers: Option<Vec<(String, String)>>,
    },
}

/// A hand-driven SPDY peer: writes frames we build and reads frames the session sends.
struct Raw {
    io: DuplexStream,
    compressor: HeaderCompressor,
    decompressor: HeaderDecompressor,
}

impl Raw {
    /// Connects a raw peer to a new session of the other kind.
    fn new() -> (Raw, DuplexStream) {
        let (a, b) = duplex(64 * 1024);
        (
            Raw {
                io: a,
                compressor: HeaderCompressor::new(),
                decompressor: HeaderDecompressor::new(),
            },
            b,
        )
    }

    async fn write(&mut self, bytes: &[u8]) {
        within(self.io.write_all(bytes)).await.expect("raw write");
    }

    async fn syn_stream(&mut self, id: u32, flags: u8, headers: &[(&str, &str)]) {
        let block = self
            .compressor
            .compress(&encode_header_block(headers).unwrap())
            .unwrap();
        self.write(&frame::syn_stream(id, 0, 0, flags, &block))
            .await;
    }

    /// The next frame, or `None` at EOF.
    async fn read(&mut self) -> Option<Got> {
        let mut head = [0u8; 8];
        match within(self.io.read_exact(&mut head)).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return None,
            Err(e) => panic!("raw read: {e}"),
        }
        let head = Head::parse(head);
        let mut payload = vec![0u8; head.length()];
        within(self.io.read_exact(&mut payload))
            .await
            .expect("raw read payload");
        let payload = Bytes::from(payload);
        Some(match head {
            Head::Data {
                stream_id, flags, ..
            } => Got::Data {
                id: stream_id,
                flags,
                payload,
            },
            Head::Control {
                version,
                kind,
                flags,
                ..
            } => {
                assert_eq!(version, 3);
                let at = match kind {
                    TYPE_SYN_STREAM => Some(10),
                    TYPE_SYN_REPLY | frame::TYPE_HEADERS => Some(4),
                    _ => None,
                };
                let headers = at.map(|at| {
                    decode_header_block(&self.decompressor.decompress(&payload[at..]).unwrap())
                        .unwrap()
                });
                Got::Control {
                    kind,
                    flags,
                    payload,
                    headers,
                }
            }
        })
    }

    /// The next control frame of `kind`, skipping WINDOW_UPDATEs.
    async fn expect(&mut self, want: u16) -> (u8, Bytes, Option<Vec<(String, String)>>) {
        loop {
            match self.read().await {
                Some(Got::Control {
                    kind: TYPE_WINDOW_UPDATE,
                    ..
                }) if want != TYPE_WINDOW_UPDATE => {}
                Some(Got::Control {
                    kind,
                    flags,
                    payload,
                    headers,
                }) if kind == want => return (flags, payload, headers),
                other => panic!("expected control frame {want}, got {other:?}"),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_streams_with_headers() {
    let (client, server, mut accept) = pair();
    for i in 0..3u32 {
        let port = format!("80{i}");
        let (opened, accepted) = open_pair(
            &client,
            &mut accept,
            &[
                ("streamType", "data"),
                ("Port", &port),
                ("requestID", "7"),
                ("X-Multi", "a"),
                ("x-multi", "b"),
            ],
        )
        .await;
        assert_eq!(opened.id(), 2 * i + 1);
        assert_eq!(accepted.id(), opened.id());
        let expected: Vec<(String, String)> = [
            ("streamtype", "data"),
            ("port", port.as_str()),
            ("requestid", "7"),
            ("x-multi", "a"),
            ("x-multi", "b"),
        ]
        .iter()
        .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
        .collect();
        assert_eq!(accepted.headers(), &expected[..]);
        assert_eq!(opened.headers(), &expected[..]);
        assert_eq!(accepted.header("streamType"), Some("data"));
        assert_eq!(accepted.header("STREAMTYPE"), Some("data"));
        assert_eq!(accepted.header("requestid"), Some("7"));
        assert_eq!(accepted.header("x-multi"), Some("a"));
        assert_eq!(accepted.header("missing"), None);
        // Replying twice is harmless; replying on our own stream is not allowed.
        accepted.reply().await.unwrap();
        assert!(matches!(
            opened.reply().await,
            Err(SpdyError::NotPeerStream(id)) if id == opened.id()
        ));
    }
    // Headers spdystream would end the connection on are refused before sending.
    assert!(matches!(
        client.open(&[("Host", "example")]).await,
        Err(SpdyError::InvalidHeader { .. })
    ));
    // A client session refuses streams the server opens.
    assert!(matches!(
        within(server.open(&[("streamtype", "error")])).await,
        Err(SpdyError::Reset(3))
    ));
    // The refused and rejected streams left nothing behind; the session still works.
    let (opened, _accepted) = open_pair(&client, &mut accept, &[]).await;
    assert_eq!(opened.id(), 7);
    assert!(!client.is_closed() && !server.is_closed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_transfers_both_ways() {
    let (client, server, mut accept) = pair();
    let (opened, accepted) = open_pair(&client, &mut accept, &[("streamtype", "stdin")]).await;
    let (mut client_rx, client_tx) = opened.split();
    let (mut server_rx, server_tx) = accepted.split();
    let up = pattern(3 * 1024 * 1024 + 17, 1);
    let down = pattern(2 * 1024 * 1024 + 5, 2);
    let (_, _, got_up, got_down) = within(async {
        tokio::join!(
            async {
                client_tx.send(&up).await.unwrap();
                client_tx.finish().await.unwrap();
            },
            async {
                server_tx.send(&down).await.unwrap();
                server_tx.finish().await.unwrap();
            },
            collect(&mut server_rx),
            collect(&mut client_rx),
        )
    })
    .await;
    assert!(got_up == up, "client to server data differs");
    assert!(got_down == down, "server to client data differs");
    // Both directions finished: both sessions forget the stream.
    eventually(|| client.stream_count() == 0 && server.stream_count() == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_streams_interleave() {
    let (client, _server, mut accept) = pair();
    let mut tasks = Vec::new();
    for i in 0..8u32 {
        let (opened, accepted) = open_pair(&client, &mut accept, &[("n", &i.to_string())]).await;
        tasks.push(tokio::spawn(async move {
            let (_, tx) = opened.split();
            let data = pattern(300_000, i);
            tx.send(&data).await.unwrap();
            tx.finish().await.unwrap();
            data
        }));
        tasks.push(tokio::spawn(async move {
            let (mut rx, _tx) = accepted.split();
            collect(&mut rx).await
        }));
    }
    let mut results = Vec::new();
    for t in tasks {
        results.push(within(t).await.unwrap());
    }
    for pair in results.chunks(2) {
        assert!(pair[0] == pair[1]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fin_half_close() {
    let (client, server, mut accept) = pair();
    let (opened, accepted) = open_pair(&client, &mut accept, &[]).await;
    let (mut client_rx, client_tx) = opened.split();
    let (mut server_rx, server_tx) = accepted.split();

    client_tx.send(b"last words").await.unwrap();
    client_tx.finish().await.unwrap();
    assert_eq!(within(collect(&mut server_rx)).await, b"last words");
    assert_eq!(within(server_rx.recv()).await, None);
    // Finishing again is a no-op; sending after it is not.
    client_tx.finish().await.unwrap();
    assert!(matches!(
        client_tx.send(b"x").await,
        Err(SpdyError::StreamFinished)
    ));
    // The other direction still works.
    server_tx.send(b"answer").await.unwrap();
    assert_eq!(
        within(client_rx.recv()).await.as_deref(),
        Some(&b"answer"[..])
    );
    assert_eq!(client.stream_count(), 1);
    server_tx.finish().await.unwrap();
    assert_eq!(within(client_rx.recv()).await, None);
    eventually(|| client.stream_count() == 0 && server.stream_count() == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_send_half_finishes() {
    let (client, server, mut accept) = pair();
    let (opened, accepted) = open_pair(&client, &mut accept, &[]).await;
    let (mut client_rx, client_tx) = opened.split();
    let (mut server_rx, server_tx) = accepted.split();
    let clone = client_tx.clone();
    drop(client_tx);
    clone.send(b"still open").await.unwrap();
    drop(clone);
    assert_eq!(within(collect(&mut server_rx)).await, b"still open");
    server_tx.send(b"back").await.unwrap();
    drop(server_tx);
    assert_eq!(within(collect(&mut client_rx)).await, b"back");
    eventually(|| client.stream_count() == 0 && server.stream_count() == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_either_side() {
    let (client, server, mut accept) = pair();

    // The client resets: the server's receiver ends and its sends fail with the status.
    let (opened, accepted) = open_pair(&client, &mut accept, &[]).await;
    let (mut client_rx, client_tx) = opened.split();
    let (mut server_rx, server_tx) = accepted.split();
    client_tx.send(b"before").await.unwrap();
    client_tx.reset().await;
    // A reset drops what was still queued: the server sees a prefix at most, then the end.
    let got = within(collect(&mut server_rx)).await;
    assert!(b"before".starts_with(&got));
    assert!(matches!(
        server_tx.send(b"x").await,
        Err(SpdyError::Reset(5))
    ));
    assert!(matches!(server_tx.finish().await, Err(SpdyError::Reset(5))));
    assert_eq!(within(client_rx.recv()).await, None);
    assert!(matches!(
        client_tx.send(b"x").await,
        Err(SpdyError::StreamFinished)
    ));

    // The server resets while the client is waiting to receive.
    let (opened, accepted) = open_pair(&client, &mut accept, &[]).await;
    let (mut client_rx, client_tx) = opened.split();
    let waiting = tokio::spawn(async move { client_rx.recv().await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let (_server_rx, server_tx) = accepted.split();
    server_tx.reset().await;
    assert_eq!(within(waiting).await.unwrap(), None);
    eventually(|| client_tx.guard.stream.inner.lock().unwrap().local == Local::Reset).await;
    assert!(matches!(
        client_tx.send(b"x").await,
        Err(SpdyError::Reset(5))
    ));

    // A server that drops a stream without replying refuses it.
    let (refused, ()) = within(async {
        tokio::join!(client.open(&[]), async {
            drop(accept.recv().await.unwrap());
        })
    })
    .await;
    assert!(matches!(refused, Err(SpdyError::Reset(3))));

    eventually(|| client.stream_count() == 0 && server.stream_count() == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_both_ways() {
    let (client, server, _accept) = pair();
    for _ in 0..3 {
        within(client.ping()).await.unwrap();
        within(server.ping()).await.unwrap();
    }
    // A raw client's PING is echoed with the same id.
    let (mut raw, io) = Raw::new();
    let (_server, _accept) = Session::server(io);
    raw.write(&frame::ping(0x1234_5677)).await;
    let (flags, payload, _) = raw.expect(TYPE_PING).await;
    assert_eq!(flags, 0);
    assert_eq!(&payload[..], &0x1234_5677u32.to_be_bytes());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn goaway_ends_both_sessions() {
    let (client, server, mut accept) = pair();
    let (opened, accepted) = open_pair(&client, &mut accept, &[]).await;
    let (mut server_rx, server_tx) = accepted.split();
    let (mut client_rx, _client_tx) = opened.split();
    let pending = tokio::spawn(async move { server_rx.recv().await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    within(client.close()).await;
    assert!(client.is_closed());
    within(server.closed()).await;
    within(client.closed()).await;
    assert_eq!(within(pending).await.unwrap(), None);
    assert_eq!(within(client_rx.recv()).await, None);
    assert!(server.error().is_none() && client.error().is_none());
    assert!(matches!(
        client.open(&[]).await,
        Err(SpdyError::SessionClosed)
    ));
    assert!(matches!(
        server_tx.send(b"x").await,
        Err(SpdyError::SessionClosed)
    ));
    assert!(matches!(server.ping().await, Err(SpdyError::SessionClosed)));
    // Closing again is harmless.
    within(client.close()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_sends_goaway_after_queued_data() {
    let (mut raw, io) = Raw::new();
    let (server, mut accept) = Session::server(io);
    raw.syn_stream(1, 0, &[("streamtype", "stdout")]).await;
    let stream = within(accept.recv()).await.unwrap();
    stream.reply().await.unwrap();
    let (_rx, tx) = stream.split();
    tx.send(b"queued").await.unwrap();
    let closing = tokio::spawn({
        let server = server.clone();
        async move { server.close().await }
    });
    let (_, _, headers) = raw.expect(TYPE_SYN_REPLY).await;
    assert_eq!(headers, Some(vec![]));
    match raw.read().await {
        Some(Got::Data {
            id: 1,
            flags: 0,
            payload,
        }) => assert_eq!(&payload[..], b"queued"),
        other => panic!("expected data, got {other:?}"),
    }
    let (_, payload, _) = raw.expect(TYPE_GOAWAY).await;
    // Last good stream id 1, status OK.
    assert_eq!(&payload[..], &[0, 0, 0, 1, 0, 0, 0, 0]);
    assert!(raw.read().await.is_none(), "EOF after GOAWAY");
    within(closing).await.unwrap();
    assert!(server.is_closed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_drop_ends_session() {
    let (mut raw, io) = Raw::new();
    let (server, mut accept) = Session::server(io);
    raw.syn_stream(1, 0, &[]).await;
    let stream = within(accept.recv()).await.unwrap();
    stream.reply().await.unwrap();
    let (mut rx, tx) = stream.split();
    let pending = tokio::spawn(async move { rx.recv().await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    drop(raw);
    within(server.closed()).await;
    assert_eq!(within(pending).await.unwrap(), None);
    assert!(matches!(tx.send(b"x").await, Err(SpdyError::SessionClosed)));
    assert!(within(accept.recv()).await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_goaway_ends_session() {
    let (mut raw, io) = Raw::new();
    let client = Session::client(io);
    let opening = tokio::spawn({
        let client = client.clone();
        async move { client.open(&[]).await }
    });
    raw.expect(TYPE_SYN_STREAM).await;
    raw.write(&frame::goaway(0, 0)).await;
    within(client.closed()).await;
    assert!(matches!(
        within(opening).await.unwrap(),
        Err(SpdyError::SessionClosed)
    ));
    assert!(client.error().is_none());
    // The session shuts its write side.
    assert!(raw.read().await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_compression_shares_the_context() {
    let (client, _server, mut accept) = pair();
    for i in 0..300u32 {
        let value = format!("value-{i}-{}", "x".repeat(i as usize % 40));
        let headers = [
            ("streamtype", "stdout"),
            ("requestid", value.as_str()),
            ("n", if i % 2 == 0 { "even" } else { "odd" }),
        ];
        let (opened, accepted) = open_pair(&client, &mut accept, &headers).await;
        assert_eq!(accepted.header("requestid"), Some(value.as_str()));
        assert_eq!(accepted.headers().len(), 3);
        drop(opened);
        drop(accepted);
    }
    assert!(!client.is_closed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn syn_stream_on_the_wire() {
    let (mut raw, io) = Raw::new();
    let client = Session::client(io);
    let c = client.clone();
    let opening = tokio::spawn(async move { c.open(&[("streamType", "error")]).await });
    let Some(Got::Control {
        kind: TYPE_SYN_STREAM,
        flags,
        payload,
        headers,
    }) = raw.read().await
    else {
        panic!("expected SYN_STREAM");
    };
    assert_eq!(flags, 0);
    // Stream 1, associated to none, priority 0, slot 0.
    assert_eq!(&payload[..10], &[0, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    // The header block is a zlib stream with the SPDY/3 dictionary.
    assert_eq!(&payload[10..12], &[0x78, 0xf9]);
    assert_eq!(be32(&payload, 12), dictionary::DICTIONARY_ID);
    assert_eq!(
        headers,
        Some(vec![("streamtype".to_owned(), "error".to_owned())])
    );
    // Reply, then data flows as plain DATA frames.
    let block = raw
        .compressor
        .compress(&encode_header_block(&[]).unwrap())
        .unwrap();
    raw.write(&frame::syn_reply(1, 0, &block)).await;
    let stream = within(opening).await.unwrap().unwrap();
    let (_rx, tx) = stream.split();
    tx.send(&[7u8; MAX_DATA_FRAME + 1]).await.unwrap();
    tx.finish().await.unwrap();
    let mut sizes = Vec::new();
    loop {
        match raw.read().await {
            Some(Got::Data {
                id: 1,
                flags,
                payload,
            }) => {
                sizes.push((payload.len(), flags));
                if flags & FLAG_FIN != 0 {
                    break;
                }
            }
            other => panic!("expected data, got {other:?}"),
        }
    }
    assert_eq!(sizes, vec![(MAX_DATA_FRAME, 0), (1, 0), (0, FLAG_FIN)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_open_resets_the_stream() {
    let (mut raw, io) = Raw::new();
    let client = Session::client(io);
    let attempt = tokio::time::timeout(Duration::from_millis(50), client.open(&[])).await;
    assert!(attempt.is_err(), "nobody replied");
    raw.expect(TYPE_SYN_STREAM).await;
    let (_, payload, _) = raw.expect(TYPE_RST_STREAM).await;
    assert_eq!(&payload[..], &[0, 0, 0, 1, 0, 0, 0, 5]);
    assert_eq!(client.stream_count(), 0);
    // A late reply for the cancelled stream is ignored.
    let block = raw
        .compressor
        .compress(&encode_header_block(&[]).unwrap())
        .unwrap();
    raw.write(&frame::syn_reply(1, 0, &block)).await;
    let pinging = tokio::spawn({
        let client = client.clone();
        async move { client.ping().await }
    });
    let (_, payload, _) = raw.expect(TYPE_PING).await;
    raw.write(&frame::ping(be32(&payload, 0))).await;
    within(pinging).await.unwrap().unwrap();
    assert!(!client.is_closed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_refuses_peer_streams_and_bad_ids() {
    let (mut raw, io) = Raw::new();
    let client = Session::client(io);
    raw.syn_stream(2, 0, &[]).await;
    let (_, payload, _) = raw.expect(TYPE_RST_STREAM).await;
    assert_eq!(&payload[..], &[0, 0, 0, 2, 0, 0, 0, 3]);

    let (mut raw, io) = Raw::new();
    let (_server, mut accept) = Session::server(io);
    raw.syn_stream(5, 0, &[]).await;
    let _accepted = within(accept.recv()).await.unwrap();
    // Ids must grow and be odd.
    raw.syn_stream(3, 0, &[]).await;
    let (_, payload, _) = raw.expect(TYPE_RST_STREAM).await;
    assert_eq!(&payload[..], &[0, 0, 0, 3, 0, 0, 0, 1]);
    raw.syn_stream(8, 0, &[]).await;
    let (_, payload, _) = raw.expect(TYPE_RST_STREAM).await;
    assert_eq!(&payload[..], &[0, 0, 0, 8, 0, 0, 0, 1]);
    drop(client);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn syn_stream_flags() {
    let (mut raw, io) = Raw::new();
    let (server, mut accept) = Session::server(io);
    // FIN: the peer sends nothing; we may still answer.
    raw.syn_stream(1, FLAG_FIN, &[]).await;
    let stream = within(accept.recv()).await.unwrap();
    stream.reply().await.unwrap();
    let (mut rx, tx) = stream.split();
    assert_eq!(within(rx.recv()).await, None);
    tx.send(b"hi").await.unwrap();
    tx.finish().await.unwrap();
    raw.expect(TYPE_SYN_REPLY).await;
    assert!(matches!(
        raw.read().await,
        Some(Got::Data {
            id: 1,
            flags: 0,
            ..
        })
    ));
    assert!(matches!(
        raw.read().await,
        Some(Got::Data {
            id: 1,
            flags: FLAG_FIN,
            ..
        })
    ));
    // Unidirectional: we may not send.
    raw.syn_stream(3, FLAG_UNIDIRECTIONAL, &[]).await;
    let stream = within(accept.recv()).await.unwrap();
    stream.reply().await.unwrap();
    let (_rx, tx) = stream.split();
    assert!(matches!(
        tx.send(b"x").await,
        Err(SpdyError::StreamFinished)
    ));
    eventually(|| server.stream_count() == 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_peer_gets_window_updates() {
    // A raw client that never exceeds SPDY's 64 KiB stream and session windows: it only goes on
    // because the session credits what its application consumes.
    let (mut raw, io) = Raw::new();
    let (_server, mut accept) = Session::server(io);
    raw.syn_stream(1, 0, &[]).await;
    let stream = within(accept.recv()).await.unwrap();
    stream.reply().await.unwrap();
    raw.expect(TYPE_SYN_REPLY).await;
    let (mut rx, _tx) = stream.split();
    let total = 2 * 1024 * 1024;
    let data = pattern(total, 9);
    let reading = tokio::spawn(async move { collect(&mut rx).await });
    let (mut stream_window, mut session_window) = (65_536i64, 65_536i64);
    let (mut stream_updates, mut session_updates) = (0, 0);
    let mut sent = 0;
    while sent < total {
        let n = (total - sent).min(8192);
        if (n as i64) > stream_window.min(session_window) {
            let (_, payload, _) = raw.expect(TYPE_WINDOW_UPDATE).await;
            let delta = i64::from(be32(&payload, 4));
            match be32(&payload, 0) {
                0 => {
                    session_window += delta;
                    session_updates += 1;
                }
                1 => {
                    stream_window += delta;
                    stream_updates += 1;
                }
                other => panic!("window update for stream {other}"),
            }
            continue;
        }
        raw.write(&frame::data(1, 0, &data[sent..sent + n])).await;
        sent += n;
        stream_window -= n as i64;
        session_window -= n as i64;
    }
    raw.write(&frame::data(1, FLAG_FIN, &[])).await;
    let got = within(reading).await.unwrap();
    assert!(got == data);
    assert!(stream_updates > 10 && session_updates > 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_frames_and_stray_data_are_ignored() {
    let (mut raw, io) = Raw::new();
    let (server, _accept) = Session::server(io);
    // An unknown control type with a payload.
    raw.write(&[0x80, 3, 0x00, 0xff, 0, 0, 0, 5, 1, 2, 3, 4, 5])
        .await;
    // SETTINGS with one entry (initial window size), WINDOW_UPDATEs for the session and a stream.
    raw.write(&[
        0x80, 3, 0, 4, 0, 0, 0, 12, 0, 0, 0, 1, 0, 0, 0, 7, 0, 1, 0, 0,
    ])
    .await;
    raw.write(&frame::window_update(0, 1000)).await;
    raw.write(&frame::window_update(9, 1000)).await;
    // DATA and RST_STREAM for streams that do not exist.
    raw.write(&frame::data(99, 0, &[1; 100])).await;
    raw.write(&frame::data(97, FLAG_FIN, &[])).await;
    raw.write(&frame::rst_stream(95, 5)).await;
    raw.write(&frame::ping(1)).await;
    let (_, payload, _) = raw.expect(TYPE_PING).await;
    assert_eq!(be32(&payload, 0), 1);
    assert!(!server.is_closed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_receiver_never_blocks_the_session() {
    // A peer that ignores windows (as spdystream does) sends far more than a stream buffers to a
    // stream whose receiver is gone: the data is discarded and PINGs are still answered.
    let (mut raw, io) = Raw::new();
    let (server, mut accept) = Session::server(io);
    raw.syn_stream(1, 0, &[]).await;
    let stream = within(accept.recv()).await.unwrap();
    stream.reply().await.unwrap();
    let (rx, _tx) = stream.split();
    drop(rx);
    let (mut read_half, mut write_half) = tokio::io::split(raw.io);
    // Read what the session writes until the PING echo for id 7 shows up.
    let echoed = tokio::spawn(async move {
        let echo = frame::ping(7);
        let mut sink = Vec::new();
        let mut buf = [0u8; 4096];
        while !sink.windows(echo.len()).any(|w| w == &echo[..]) {
            let n = read_half.read(&mut buf).await.unwrap();
            assert!(n > 0, "EOF before the PING echo");
            sink.extend_from_slice(&buf[..n]);
        }
    });
    let chunk = vec![0u8; 60_000];
    for _ in 0..60 {
        within(write_half.write_all(&frame::data(1, 0, &chunk)))
            .await
            .unwrap();
    }
    within(write_half.write_all(&frame::ping(7))).await.unwrap();
    // The answer arrives although 3.6 MB went to a stream nobody reads.
    within(echoed).await.unwrap();
    assert!(!server.is_closed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_receiver_is_backpressure_not_loss() {
    // A window-ignoring peer sends more than the stream buffers while the receiver sleeps: the
    // session stops reading (TCP backpressure) and resumes when the receiver drains.
    let (mut raw, io) = Raw::new();
    let (server, mut accept) = Session::server(io);
    raw.syn_stream(1, 0, &[]).await;
    let stream = within(accept.recv()).await.unwrap();
    stream.reply().await.unwrap();
    let (mut rx, tx) = stream.split();
    let (mut read_half, mut write_half) = tokio::io::split(raw.io);
    let drain = tokio::spawn(async move {
        let mut sink = Vec::new();
        let _ = read_half.read_to_end(&mut sink).await;
        sink
    });
    let data = pattern(3 * 1024 * 1024, 4);
    let writing = tokio::spawn(async move {
        for chunk in data.chunks(32 * 1024) {
            write_half
                .write_all(&frame::data(1, 0, chunk))
                .await
                .unwrap();
        }
        write_half
            .write_all(&frame::data(1, FLAG_FIN, &[]))
            .await
            .unwrap();
        (data, write_half)
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    // While the reader waits for this receiver, our own sends still go out.
    tx.send(b"writer is independent").await.unwrap();
    let got = within(collect(&mut rx)).await;
    let (data, _write_half) = within(writing).await.unwrap();
    assert!(got == data);
    within(server.close()).await;
    let sent = within(drain).await.unwrap();
    assert!(sent.windows(21).any(|w| w == b"writer is independent"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_ends_the_session_without_panic() {
    let inputs: Vec<Vec<u8>> = vec![
        // A control frame of another SPDY version.
        vec![0x80, 2, 0, 6, 0, 0, 0, 4, 0, 0, 0, 1],
        // SYN_STREAM whose header block is not zlib.
        vec![
            0x80, 3, 0, 1, 0, 0, 0, 14, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef,
        ],
        // SYN_STREAM too short for its fixed fields.
        vec![0x80, 3, 0, 1, 0, 0, 0, 2, 0, 1],
        // DATA on stream 0.
        vec![0, 0, 0, 0, 0, 0, 0, 1, 9],
        // RST_STREAM, PING, WINDOW_UPDATE and SETTINGS of the wrong length.
        vec![0x80, 3, 0, 3, 0, 0, 0, 4, 0, 0, 0, 1],
        vec![0x80, 3, 0, 6, 0, 0, 0, 2, 0, 1],
        vec![0x80, 3, 0, 9, 0, 0, 0, 4, 0, 0, 0, 1],
        vec![0x80, 3, 0, 4, 0, 0, 0, 8, 0, 0, 0, 5, 0, 0, 0, 0],
    ];
    for input in inputs {
        let (mut raw, io) = Raw::new();
        let (server, _accept) = Session::server(io);
        raw.write(&input).await;
        within(server.closed()).await;
        assert!(
            matches!(server.error(), Some(SpdyError::Protocol(_))),
            "{input:?}: {:?}",
            server.error()
        );
        // The session closed the connection.
        assert!(raw.read().await.is_none());
    }
    // Random bytes, then EOF: whatever they decode to, the session ends and nothing panics.
    for seed in 0..64 {
        let (mut raw, io) = Raw::new();
        let client = Session::client(io);
        let bytes = pattern(512 + seed as usize * 37, seed);
        raw.write(&bytes).await;
        raw.io.shutdown().await.unwrap();
        within(client.closed()).await;
        assert!(client.is_closed());
    }
    // Valid frames, then a corrupt header block in the shared zlib stream.
    let (mut raw, io) = Raw::new();
    let (server, mut accept) = Session::server(io);
    raw.syn_stream(1, 0, &[("a", "b")]).await;
    within(accept.recv()).await.unwrap();
    raw.write(&frame::syn_stream(3, 0, 0, 0, &[0xff; 20])).await;
    within(server.closed()).await;
    assert!(matches!(server.error(), Some(SpdyError::Protocol(_))));
}

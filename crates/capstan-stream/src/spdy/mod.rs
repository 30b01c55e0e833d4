//! SPDY/3.1 sessions over an already-upgraded connection, wire-compatible with Go's
//! `github.com/moby/spdystream` (the SPDY implementation of client-go, the kubelet and
//! containerd's CRI streaming server).
//!
//! A [`Session`] runs two background tasks on the Tokio runtime it was created in: a reader that
//! decodes frames and dispatches them to streams, and a single writer that serialises every frame
//! we send. Streams are opened with [`Session::open`] (SYN_STREAM, then waiting for the peer's
//! SYN_REPLY) or arrive from the peer on the receiver [`Session::server`] returns, to be accepted
//! with [`Stream::reply`]. A [`Stream`] splits into a [`RecvHalf`] and a cloneable [`SendHalf`].
//!
//! # What the peer expects (spdystream)
//!
//! - Header names travel lowercased, each name once (several values joined by NUL). spdystream
//!   ends the whole connection on an upper-case or repeated name, or on `Host`, `Connection`,
//!   `Keep-Alive`, `Proxy-Connection` or `Transfer-Encoding` in a SYN_STREAM, so
//!   [`Session::open`] lowercases and merges names and refuses those five.
//! - spdystream drops DATA that arrives on a stream before the stream's SYN_REPLY, so
//!   [`Session::open`] returns only once the reply has arrived, and sending on a stream the peer
//!   opened fails until [`Stream::reply`] has been called.
//! - Every header block of a direction shares one zlib stream seeded with the SPDY/3 dictionary,
//!   each block ending with a sync flush.
//! - spdystream answers PINGs whose id has the other side's parity (clients use odd ids, servers
//!   even ones) and ends the session on GOAWAY: it stops reading and closes the connection once
//!   its streams are gone. We do the same: a GOAWAY from the peer ends the session.
//! - spdystream ignores DATA for streams it does not know, and so do we.
//! - A control frame type spdystream does not know ends its connection, so we only ever send
//!   SYN_STREAM, SYN_REPLY, RST_STREAM, PING, GOAWAY and WINDOW_UPDATE.
//!
//! # Flow control
//!
//! spdystream implements no flow control: it never sends WINDOW_UPDATE or SETTINGS, and ignores
//! both (it parses them and drops them). A sender that honoured the peer's 64 KiB initial window
//! would therefore stall after 64 KiB towards every spdystream peer, so our sends are never
//! blocked by the peer's window; they are bounded only by the session's outgoing queue (256 KiB
//! of DATA), which the writer drains as fast as the connection accepts bytes.
//!
//! In the other direction we advertise SPDY's default windows (64 KiB per stream and, SPDY/3.1,
//! per session) and return credit with WINDOW_UPDATE frames (per stream and for stream 0) as the
//! application takes data out of a [`RecvHalf`], so a peer that does enforce windows never
//! stalls. A peer that ignores windows (spdystream) can send without limit, so each stream also
//! buffers at most 1 MiB: once a stream holds that much unread data, the reader waits for that
//! stream's [`RecvHalf`] to take data before it reads further frames. This is TCP backpressure,
//! exactly what spdystream itself does (its frame workers block on a stream's unbuffered
//! channel). The writer is a separate task and never waits for the reader or for receivers, so
//! outgoing data keeps flowing meanwhile; frames behind the blocked DATA frame (including PINGs
//! to answer) wait until the receiver reads. A receiver that is dropped never blocks: its data is
//! discarded and credited at once. An application must therefore either keep reading every
//! stream's [`RecvHalf`] or drop it.

mod compress;
mod dictionary;
mod frame;
#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::io::{
    AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter,
};
use tokio::sync::{Notify, mpsc, oneshot, watch};

use compress::{HeaderCompressor, HeaderDecompressor};
use frame::{FLAG_FIN, FLAG_UNIDIRECTIONAL, Head};

/// How long [`Session::open`] waits for the peer's SYN_REPLY.
const STREAM_CREATION_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest DATA payload we send in one frame. spdystream accepts up to 16 MiB - 1 (it writes
/// one frame per `Write` call, 32 KiB with `io.Copy`); 16 KiB keeps frames well inside a 64 KiB
/// window and interleaves streams finely.
pub const MAX_DATA_FRAME: usize = 16 * 1024;

/// SPDY's default initial window, for streams and (SPDY/3.1) for the session.
const INITIAL_WINDOW: u32 = 64 * 1024;
/// Consumed bytes are credited back once this many have accumulated.
const WINDOW_UPDATE_THRESHOLD: u32 = INITIAL_WINDOW / 2;
/// Unread bytes a stream buffers before the reader waits for its receiver (see the module docs).
const RECV_BUFFER_LIMIT: usize = 1024 * 1024;
/// DATA bytes the outgoing queue holds before senders wait for the writer.
const OUTBOX_DATA_LIMIT: usize = 256 * 1024;
/// DATA bytes the writer takes into one batch (after every queued control frame).
const WRITE_BATCH_DATA: usize = 128 * 1024;
/// Control frames we may owe the peer (PING answers, stream refusals) before a peer that sends
/// them without reading ours is cut off.
const CONTROL_QUEUE_LIMIT: usize = 4096;
/// Streams the peer opened that wait for the application to take them; more are refused.
const ACCEPT_BACKLOG: usize = 1024;
/// How long [`Session::close`] waits for queued frames and the GOAWAY to be written.
const CLOSE_GRACE: Duration = Duration::from_secs(10);
/// Buffer sizes of the connection's reader and writer.
const IO_BUFFER: usize = 64 * 1024;

/// Errors of SPDY sessions and streams.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SpdyError {
    /// The session has ended (peer EOF, GOAWAY, I/O error, malformed input, or `close()`).
    #[error("SPDY session closed")]
    SessionClosed,
    /// The peer reset the stream (RST_STREAM) with this status code (3 refused, 5 cancel, ...).
    #[error("SPDY stream reset by the peer (status {0})")]
    Reset(u32),
    /// This side has already finished (FIN) or reset the stream.
    #[error("SPDY stream already finished")]
    StreamFinished,
    /// Data was sent on a stream the peer opened before [`Stream::reply`] accepted it.
    #[error("SPDY stream {0} has not been replied to")]
    NotReplied(u32),
    /// [`Stream::reply`] was called on a stream this side opened.
    #[error("SPDY stream {0} was opened by this side; only the peer's streams are replied to")]
    NotPeerStream(u32),
    /// A header cannot be sent in a SPDY header block (or would make spdystream end the session).
    #[error("invalid SPDY header {name:?}: {reason}")]
    InvalidHeader {
        /// The header name as given.
        name: String,
        /// Why it cannot be sent.
        reason: &'static str,
    },
    /// The header block does not fit in one frame (16 MiB).
    #[error("SPDY header block too large")]
    HeaderBlockTooLarge,
    /// Every stream id of this side has been used.
    #[error("SPDY stream ids exhausted")]
    StreamIdsExhausted,
    /// The peer sent input that is not valid SPDY/3.1; the session was ended.
    #[error("SPDY protocol error: {0}")]
    Protocol(String),
    /// zlib failed to compress a header block.
    #[error("SPDY header compression failed: {0}")]
    Compression(String),
    /// The connection failed.
    #[error("SPDY connection I/O error")]
    Io(#[source] Arc<std::io::Error>),
}

impl From<std::io::Error> for SpdyError {
    fn from(e: std::io::Error) -> Self {
        SpdyError::Io(Arc::new(e))
    }
}

/// Locks a mutex, ignoring poisoning: every critical section leaves the state consistent.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A SPDY/3.1 session over an already-upgraded byte stream. Cheap to clone (a handle).
///
/// The session runs until the peer closes the connection or sends GOAWAY, an I/O error or
/// malformed input ends it, or [`Session::close`] is called; dropping every handle does not end
/// it (streams may still be in use). It must be created inside a Tokio runtime.
#[derive(Clone)]
pub struct Session {
    /// The state shared with the reader and writer tasks and the streams.
    shared: Arc<Shared>,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = lock(&self.shared.state);
        f.debug_struct("Session")
            .field("client", &self.shared.client)
            .field("streams", &st.streams.len())
            .field("ended", &st.ended)
            .finish()
    }
}

/// What the session's handles, streams and tasks share.
struct Shared {
    /// Whether this side is the client (odd stream and ping ids).
    client: bool,
    /// Everything mutable, behind one lock held only briefly (never across an await).
    state: Mutex<State>,
    /// Wakes the writer task when frames are queued or the session is closing (single waiter).
    writer_wake: Notify,
    /// Wakes senders waiting for room in the outgoing DATA queue (many waiters).
    outbox_space: Notify,
    /// Becomes `true` once the session has ended.
    ended: watch::Sender<bool>,
}

/// The session's mutable state. Lock order: this before any stream's [`StreamInner`].
struct State {
    /// Encoded control frames waiting for the writer; written before any queued DATA.
    control: VecDeque<Bytes>,
    /// Encoded DATA frames waiting for the writer, with their stream ids.
    data: VecDeque<(u32, Bytes)>,
    /// Bytes in `data`.
    data_bytes: usize,
    /// The zlib context of the header blocks we send. Blocks are compressed under this lock
    /// in the same critical section that queues their frame, so wire order is compression order.
    compressor: HeaderCompressor,
    /// Streams not yet finished in both directions.
    streams: HashMap<u32, Arc<StreamShared>>,
    /// The id of the next stream we open.
    next_stream_id: u32,
    /// The highest stream id the peer opened (and we accepted or refused); 0 if none.
    last_peer_stream_id: u32,
    /// The id of our next PING.
    next_ping_id: u32,
    /// Our PINGs waiting for their echo.
    pings: HashMap<u32, oneshot::Sender<()>>,
    /// Session-window bytes consumed and not yet credited.
    session_unacked: u32,
    /// `close()` was called: no new streams; GOAWAY goes out once the queued frames are written.
    closing: bool,
    /// The session has ended.
    ended: bool,
    /// Why the session ended, if not by EOF, GOAWAY or `close()`.
    error: Option<SpdyError>,
}

/// One stream's state, shared by its halves and the session.
struct StreamShared {
    /// The stream id.
    id: u32,
    /// Whether the peer opened it.
    by_peer: bool,
    /// Mutable state.
    inner: Mutex<StreamInner>,
    /// Wakes the [`RecvHalf`] when data, FIN or a reset arrives (single waiter).
    readable: Notify,
    /// Wakes the reader task waiting for room in the receive buffer (single waiter).
    space: Notify,
}

/// Our sending side of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Local {
    /// We may send.
    Open,
    /// We sent FIN (or the peer opened the stream unidirectional).
    Finished,
    /// The stream was reset, by either side.
    Reset,
}

/// A stream's mutable state.
struct StreamInner {
    /// Received data the application has not taken yet.
    queue: VecDeque<Bytes>,
    /// Bytes in `queue`.
    buffered: usize,
    /// The peer will send nothing more: FIN, reset, or the session ended.
    remote_done: bool,
    /// Our side.
    local: Local,
    /// The peer's RST_STREAM status, if it reset the stream.
    peer_reset: Option<u32>,
    /// SYN_REPLY has been sent (peer's streams) or received (ours).
    replied: bool,
    /// The [`RecvHalf`] is gone: arriving data is discarded.
    recv_dropped: bool,
    /// Stream-window bytes consumed and not yet credited.
    unacked: u32,
    /// Completes [`Session::open`] when the SYN_REPLY (or a reset) arrives.
    reply_tx: Option<oneshot::Sender<Result<(), SpdyError>>>,
}

impl StreamShared {
    /// A new stream's state.
    fn new(id: u32, by_peer: bool, inner: StreamInner) -> Arc<Self> {
        Arc::new(StreamShared {
            id,
            by_peer,
            inner: Mutex::new(inner),
            readable: Notify::new(),
            space: Notify::new(),
        })
    }

    /// Whether the stream is finished both ways (and so forgotten by the session).
    fn done(inner: &StreamInner) -> bool {
        inner.remote_done && inner.local != Local::Open
    }
}

impl StreamInner {
    /// A stream with nothing received, open in both directions.
    fn open(replied: bool) -> Self {
        StreamInner {
            queue: VecDeque::new(),
            buffered: 0,
            remote_done: false,
            local: Local::Open,
            peer_reset: None,
            replied,
            recv_dropped: false,
            unacked: 0,
            reply_tx: None,
        }
    }

    /// The error for sending on a stream that is no longer open.
    fn closed_error(&self) -> SpdyError {
        match self.peer_reset {
            Some(status) => SpdyError::Reset(status),
            None => SpdyError::StreamFinished,
        }
    }
}

impl Shared {
    /// Queues a control frame and wakes the writer.
    fn push_control(&self, st: &mut State, frame: Bytes) {
        st.control.push_back(frame);
        self.writer_wake.notify_one();
    }

    /// Queues a control frame the reader owes the peer; a peer that makes us owe too many without
    /// reading them is cut off.
    fn push_owed(&self, st: &mut State, frame: Bytes) -> Result<(), SpdyError> {
        if st.control.len() >= CONTROL_QUEUE_LIMIT {
            return Err(SpdyError::Protocol(
                "peer sends control frames faster than it reads the answers".into(),
            ));
        }
        self.push_control(st, frame);
        Ok(())
    }

    /// Drops queued DATA frames of a stream (after a reset).
    fn purge_data(&self, st: &mut State, id: u32) {
        let before = st.data_bytes;
        st.data.retain(|(sid, _)| *sid != id);
        st.data_bytes = st.data.iter().map(|(_, f)| f.len()).sum();
        if st.data_bytes < before {
            self.outbox_space.notify_waiters();
        }
    }

    /// Removes a stream from the session if it is finished both ways.
    fn forget_if_done(&self, stream: &Arc<StreamShared>) {
        let mut st = lock(&self.state);
        let done = StreamShared::done(&lock(&stream.inner));
        if done
            && st
                .streams
                .get(&stream.id)
                .is_some_and(|s| Arc::ptr_eq(s, stream))
        {
            st.streams.remove(&stream.id);
        }
    }

    /// Returns window credit for consumed (or discarded) bytes: `stream_delta` for the stream
    /// (0 for none), `session_bytes` towards the session window.
    fn credit(&self, id: u32, stream_delta: u32, session_bytes: usize) {
        let mut st = lock(&self.state);
        if st.ended {
            return;
        }
        if stream_delta > 0 {
            self.push_control(&mut st, frame::window_update(id, stream_delta));
        }
        let total = u64::from(st.session_unacked) + session_bytes as u64;
        if total >= u64::from(WINDOW_UPDATE_THRESHOLD) {
            st.session_unacked = 0;
            let mut left = total;
            while left > 0 {
                let delta = left.min(0x7fff_ffff) as u32;
                self.push_control(&mut st, frame::window_update(0, delta));
                left -= u64::from(delta);
            }
        } else {
            st.session_unacked = total as u32;
        }
    }

    /// Ends the session: wakes every waiter; receivers see the end of their streams after the
    /// data already buffered, senders and `open()` fail.
    fn end(&self, error: Option<SpdyError>) {
        let (streams, pings) = {
            let mut st = lock(&self.state);
            if st.ended {
                return;
            }
            match &error {
                Some(e) => tracing::debug!(error = %e, "SPDY session ended"),
                None => tracing::debug!("SPDY session ended"),
            }
            st.ended = true;
            st.error = error;
            st.control.clear();
            st.data.clear();
            st.data_bytes = 0;
            (
                std::mem::take(&mut st.streams),
                std::mem::take(&mut st.pings),
            )
        };
        for stream in streams.values() {
            let mut inner = lock(&stream.inner);
            inner.remote_done = true;
            if let Some(tx) = inner.reply_tx.take() {
                let _ = tx.send(Err(SpdyError::SessionClosed));
            }
            drop(inner);
            stream.readable.notify_one();
            stream.space.notify_one();
        }
        drop(pings);
        self.outbox_space.notify_waiters();
        self.writer_wake.notify_one();
        self.ended.send_replace(true);
    }

    /// Resolves once the session has ended.
    async fn wait_ended(&self) {
        let mut rx = self.ended.subscribe();
        let _ = rx.wait_for(|ended| *ended).await;
    }
}

impl Session {
    /// Client side: we open streams with odd ids (1, 3, 5, ...). Streams the peer tries to open
    /// are refused (RST_STREAM REFUSED_STREAM). Must be called inside a Tokio runtime.
    pub fn client<IO>(io: IO) -> Session
    where
        IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        Session::start(io, true, None)
    }

    /// Server side: even ids for streams we open; streams the peer opens arrive on the receiver
    /// (up to 1,024 waiting; further ones, and all once the receiver is dropped, are refused).
    /// Must be called inside a Tokio runtime.
    pub fn server<IO>(io: IO) -> (Session, mpsc::Receiver<Stream>)
    where
        IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let (tx, rx) = mpsc::channel(ACCEPT_BACKLOG);
        (Session::start(io, false, Some(tx)), rx)
    }

    /// Starts the reader and writer tasks.
    fn start<IO>(io: IO, client: bool, accept: Option<mpsc::Sender<Stream>>) -> Session
    where
        IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let shared = Arc::new(Shared {
            client,
            state: Mutex::new(State {
                control: VecDeque::new(),
                data: VecDeque::new(),
                data_bytes: 0,
                compressor: HeaderCompressor::new(),
                streams: HashMap::new(),
                next_stream_id: if client { 1 } else { 2 },
                last_peer_stream_id: 0,
                next_ping_id: if client { 1 } else { 2 },
                pings: HashMap::new(),
                session_unacked: 0,
                closing: false,
                ended: false,
                error: None,
            }),
            writer_wake: Notify::new(),
            outbox_space: Notify::new(),
            ended: watch::Sender::new(false),
        });
        let (r, w) = tokio::io::split(io);
        tokio::spawn(reader_task(shared.clone(), r, accept));
        tokio::spawn(writer_task(shared.clone(), w));
        Session { shared }
    }

    /// Sends SYN_STREAM with these headers (names lowercased on the wire, as spdystream does;
    /// values of a repeated name joined) and waits for the peer's SYN_REPLY. Fails if the peer
    /// resets the stream ([`SpdyError::Reset`]) or the session ends first. If the future is
    /// dropped before the reply, the stream is cancelled (RST_STREAM CANCEL).
    pub async fn open(&self, headers: &[(&str, &str)]) -> Result<Stream, SpdyError> {
        let block = frame::encode_header_block(headers)?;
        let (tx, rx) = oneshot::channel();
        let stream = {
            let mut st = lock(&self.shared.state);
            if st.ended || st.closing {
                return Err(SpdyError::SessionClosed);
            }
            let id = st.next_stream_id;
            if id > frame::MAX_STREAM_ID {
                return Err(SpdyError::StreamIdsExhausted);
            }
            let compressed = st.compressor.compress(&block)?;
            st.next_stream_id += 2;
            let mut inner = StreamInner::open(false);
            inner.reply_tx = Some(tx);
            let stream = StreamShared::new(id, false, inner);
            st.streams.insert(id, stream.clone());
            self.shared
                .push_control(&mut st, frame::syn_stream(id, 0, 0, 0, &compressed));
            stream
        };
        let headers = headers
            .iter()
            .map(|(n, v)| (n.to_ascii_lowercase(), (*v).to_owned()))
            .collect();
        // Built before waiting so that dropping this future cancels the stream.
        let stream = Stream::new(self.shared.clone(), stream, headers);
        // A peer that never answers does not hold the caller forever (client-go gives up
        // after 30 s too).
        match tokio::time::timeout(STREAM_CREATION_TIMEOUT, rx).await {
            Ok(Ok(Ok(()))) => Ok(stream),
            Ok(Ok(Err(e))) => Err(e),
            Ok(Err(_)) => Err(SpdyError::SessionClosed),
            Err(_) => Err(SpdyError::Protocol(
                "timed out waiting for the peer to accept a stream".to_owned(),
            )),
        }
    }

    /// Sends a PING and waits for the peer to echo it; returns the round-trip time.
    pub async fn ping(&self) -> Result<Duration, SpdyError> {
        /// Forgets the ping if the caller stops waiting.
        struct Pending<'a>(&'a Shared, u32);
        impl Drop for Pending<'_> {
            fn drop(&mut self) {
                lock(&self.0.state).pings.remove(&self.1);
            }
        }
        let (tx, rx) = oneshot::channel();
        let id = {
            let mut st = lock(&self.shared.state);
            if st.ended {
                return Err(SpdyError::SessionClosed);
            }
            let id = st.next_ping_id;
            // Wrap within 31 bits, keeping the id's parity (1 or 2 again).
            st.next_ping_id = if id >= 0x7fff_fffd {
                id - 0x7fff_fffc
            } else {
                id + 2
            };
            st.pings.insert(id, tx);
            self.shared.push_control(&mut st, frame::ping(id));
            id
        };
        let _pending = Pending(&self.shared, id);
        let start = Instant::now();
        rx.await.map_err(|_| SpdyError::SessionClosed)?;
        Ok(start.elapsed())
    }

    /// Resolves when the session has ended (peer EOF, GOAWAY, I/O error, malformed input, or
    /// [`Session::close`]).
    pub async fn closed(&self) {
        self.shared.wait_ended().await;
    }

    /// Whether the session has ended.
    pub fn is_closed(&self) -> bool {
        lock(&self.shared.state).ended
    }

    /// Why the session ended, if it ended on an error (I/O error or malformed input) rather than
    /// by EOF, GOAWAY or [`Session::close`]; `None` while it runs.
    pub fn error(&self) -> Option<SpdyError> {
        lock(&self.shared.state).error.clone()
    }

    /// Sends GOAWAY (after the frames already queued), flushes, and ends the session. New
    /// streams are refused at once. Waits at most 10 s for the writes (a peer that stopped
    /// reading), then ends the session anyway.
    pub async fn close(&self) {
        {
            let mut st = lock(&self.shared.state);
            if !st.ended {
                st.closing = true;
            }
        }
        self.shared.writer_wake.notify_one();
        if tokio::time::timeout(CLOSE_GRACE, self.shared.wait_ended())
            .await
            .is_err()
        {
            self.shared.end(None);
        }
    }

    /// How many streams the session still tracks (not finished both ways).
    #[cfg(test)]
    fn stream_count(&self) -> usize {
        lock(&self.shared.state).streams.len()
    }
}

/// One stream of a session: its id and SYN_STREAM headers, and its two halves.
///
/// Dropping a stream (or, after [`Stream::split`], both halves) ends our side of it: with FIN if
/// it was replied to, otherwise with RST_STREAM (REFUSED_STREAM for a stream the peer opened,
/// CANCEL for one of ours).
pub struct Stream {
    /// The stream id.
    id: u32,
    /// The SYN_STREAM headers, names lowercased.
    headers: Vec<(String, String)>,
    /// The receiving half.
    recv: RecvHalf,
    /// The sending half.
    send: SendHalf,
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stream")
            .field("id", &self.id)
            .field("headers", &self.headers)
            .finish()
    }
}

impl Stream {
    /// A handle on a stream's state.
    fn new(
        session: Arc<Shared>,
        stream: Arc<StreamShared>,
        headers: Vec<(String, String)>,
    ) -> Self {
        Stream {
            id: stream.id,
            headers,
            recv: RecvHalf {
                session: session.clone(),
                stream: stream.clone(),
            },
            send: SendHalf {
                guard: Arc::new(SendGuard { session, stream }),
            },
        }
    }

    /// The stream id (odd for streams the client opened, even for the server's).
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The SYN_STREAM headers, names lowercased, one entry per value: the peer's for streams it
    /// opened, ours for streams we opened.
    pub fn headers(&self) -> &[(String, String)] {
        &self.headers
    }

    /// The first value of a header, the name compared case-insensitively (client-go sends
    /// `streamType`, which arrives as `streamtype`).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Server side: accepts a stream the peer opened (sends SYN_REPLY with no headers, as
    /// client-go's server does). Idempotent; the peer's `open` returns only after this.
    pub async fn reply(&self) -> Result<(), SpdyError> {
        let shared = &self.send.guard.session;
        let stream = &self.send.guard.stream;
        if !stream.by_peer {
            return Err(SpdyError::NotPeerStream(self.id));
        }
        let mut st = lock(&shared.state);
        if st.ended {
            return Err(SpdyError::SessionClosed);
        }
        let mut inner = lock(&stream.inner);
        if inner.replied {
            return Ok(());
        }
        if inner.local == Local::Reset {
            return Err(inner.closed_error());
        }
        let block = st.compressor.compress(&frame::encode_header_block(&[])?)?;
        inner.replied = true;
        drop(inner);
        shared.push_control(&mut st, frame::syn_reply(self.id, 0, &block));
        Ok(())
    }

    /// Splits into a receiving half and a cloneable sending half.
    pub fn split(self) -> (RecvHalf, SendHalf) {
        (self.recv, self.send)
    }
}

/// The receiving half of a stream.
///
/// Dropping it discards data that arrives later (still crediting the peer's window).
pub struct RecvHalf {
    /// The session.
    session: Arc<Shared>,
    /// The stream.
    stream: Arc<StreamShared>,
}

impl fmt::Debug for RecvHalf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecvHalf")
            .field("id", &self.stream.id)
            .finish()
    }
}

impl RecvHalf {
    /// The next DATA payload (one frame's worth; empty frames are skipped). `None` after the
    /// peer's FIN, a reset, or the session's end, once the data received before it has been
    /// taken (a reset by this side discards it). Cancel-safe.
    pub async fn recv(&mut self) -> Option<Bytes> {
        loop {
            let notified = self.stream.readable.notified();
            {
                let mut inner = lock(&self.stream.inner);
                if let Some(data) = inner.queue.pop_front() {
                    let n = data.len();
                    inner.buffered -= n;
                    inner.unacked = inner.unacked.saturating_add(n as u32);
                    let stream_delta =
                        if !inner.remote_done && inner.unacked >= WINDOW_UPDATE_THRESHOLD {
                            std::mem::take(&mut inner.unacked)
                        } else {
                            0
                        };
                    drop(inner);
                    self.stream.space.notify_one();
                    self.session.credit(self.stream.id, stream_delta, n);
                    return Some(data);
                }
                if inner.remote_done {
                    return None;
                }
            }
            notified.await;
        }
    }

    /// The stream id.
    pub fn id(&self) -> u32 {
        self.stream.id
    }
}

impl Drop for RecvHalf {
    fn drop(&mut self) {
        let mut inner = lock(&self.stream.inner);
        inner.recv_dropped = true;
        let discarded = std::mem::take(&mut inner.buffered);
        inner.queue.clear();
        let stream_delta = if inner.remote_done {
            0
        } else {
            std::mem::take(&mut inner.unacked).saturating_add(discarded as u32)
        };
        drop(inner);
        self.stream.space.notify_one();
        if stream_delta > 0 || discarded > 0 {
            self.session.credit(self.stream.id, stream_delta, discarded);
        }
    }
}

/// The sending half of a stream; clones share it. When the last clone is dropped without
/// [`SendHalf::finish`] or [`SendHalf::reset`], our side is finished as described on [`Stream`].
#[derive(Clone)]
pub struct SendHalf {
    /// Shared by the clones; its drop ends our side.
    guard: Arc<SendGuard>,
}

impl fmt::Debug for SendHalf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SendHalf")
            .field("id", &self.guard.stream.id)
            .finish()
    }
}

/// Ends our side of the stream when the last [`SendHalf`] goes.
struct SendGuard {
    /// The session.
    session: Arc<Shared>,
    /// The stream.
    stream: Arc<StreamShared>,
}

impl Drop for SendGuard {
    fn drop(&mut self) {
        let shared = &self.session;
        let mut st = lock(&shared.state);
        if st.ended {
            return;
        }
        let mut inner = lock(&self.stream.inner);
        if inner.local != Local::Open {
            return;
        }
        let id = self.stream.id;
        if inner.replied {
            inner.local = Local::Finished;
            let frame = frame::data(id, FLAG_FIN, &[]);
            st.data_bytes += frame.len();
            st.data.push_back((id, frame));
            shared.writer_wake.notify_one();
        } else {
            let status = if self.stream.by_peer {
                frame::RST_REFUSED_STREAM
            } else {
                frame::RST_CANCEL
            };
            inner.local = Local::Reset;
            inner.remote_done = true;
            shared.push_control(&mut st, frame::rst_stream(id, status));
            self.stream.readable.notify_one();
            self.stream.space.notify_one();
        }
        if StreamShared::done(&inner) {
            drop(inner);
            st.streams.remove(&id);
        }
    }
}

impl SendHalf {
    /// Sends data, split into DATA frames of at most [`MAX_DATA_FRAME`] bytes. Returns once the
    /// frames are queued for the writer (waiting while 256 KiB of the session's DATA is queued);
    /// the peer's flow-control window is not waited for (see the module docs). Sending nothing
    /// sends no frame. Concurrent sends on clones interleave frame by frame; if the future is
    /// dropped midway, a prefix of the data may have been sent.
    pub async fn send(&self, data: &[u8]) -> Result<(), SpdyError> {
        for chunk in data.chunks(MAX_DATA_FRAME) {
            self.send_frame(chunk, 0).await?;
        }
        Ok(())
    }

    /// Half-closes the stream: an empty DATA frame with FLAG_FIN. The peer's data can still be
    /// received. Finishing again is a no-op; after a reset it fails.
    pub async fn finish(&self) -> Result<(), SpdyError> {
        self.send_frame(&[], FLAG_FIN).await
    }

    /// Resets the stream (RST_STREAM CANCEL) unless it already ended both ways: no more data is
    /// sent or received, and data received but not yet taken is discarded.
    pub async fn reset(&self) {
        let shared = &self.guard.session;
        let stream = &self.guard.stream;
        let mut st = lock(&shared.state);
        if st.ended {
            return;
        }
        let mut inner = lock(&stream.inner);
        if inner.local == Local::Reset || StreamShared::done(&inner) {
            return;
        }
        inner.local = Local::Reset;
        inner.remote_done = true;
        let discarded = std::mem::take(&mut inner.buffered);
        inner.queue.clear();
        if let Some(tx) = inner.reply_tx.take() {
            let _ = tx.send(Err(SpdyError::StreamFinished));
        }
        drop(inner);
        stream.readable.notify_one();
        stream.space.notify_one();
        st.streams.remove(&stream.id);
        shared.purge_data(&mut st, stream.id);
        shared.push_control(&mut st, frame::rst_stream(stream.id, frame::RST_CANCEL));
        drop(st);
        if discarded > 0 {
            shared.credit(stream.id, 0, discarded);
        }
    }

    /// The stream id.
    pub fn id(&self) -> u32 {
        self.guard.stream.id
    }

    /// Queues one DATA frame, waiting for room in the outgoing queue.
    async fn send_frame(&self, payload: &[u8], flags: u8) -> Result<(), SpdyError> {
        let shared = &self.guard.session;
        let stream = &self.guard.stream;
        loop {
            let mut notified = pin!(shared.outbox_space.notified());
            notified.as_mut().enable();
            {
                let mut st = lock(&shared.state);
                if st.ended || st.closing {
                    return Err(SpdyError::SessionClosed);
                }
                let mut inner = lock(&stream.inner);
                match inner.local {
                    Local::Open => {}
                    Local::Finished if flags & FLAG_FIN != 0 => return Ok(()),
                    Local::Finished | Local::Reset => return Err(inner.closed_error()),
                }
                if !inner.replied {
                    return Err(SpdyError::NotReplied(stream.id));
                }
                if payload.is_empty() || st.data_bytes < OUTBOX_DATA_LIMIT {
                    let frame = frame::data(stream.id, flags, payload);
                    st.data_bytes += frame.len();
                    st.data.push_back((stream.id, frame));
                    if flags & FLAG_FIN != 0 {
                        inner.local = Local::Finished;
                    }
                    let done = StreamShared::done(&inner);
                    drop(inner);
                    if done {
                        st.streams.remove(&stream.id);
                    }
                    shared.writer_wake.notify_one();
                    return Ok(());
                }
            }
            notified.await;
        }
    }
}

/// How the writer loop stopped without an error.
enum WriterExit {
    /// GOAWAY was written after `close()`.
    GoAwaySent,
}

/// The writer task: writes queued frames until the session ends, then shuts the connection's
/// write side.
async fn writer_task<W: AsyncWrite + Send + Unpin + 'static>(shared: Arc<Shared>, w: W) {
    let mut w = BufWriter::with_capacity(IO_BUFFER, w);
    let result = tokio::select! {
        r = write_loop(&shared, &mut w) => Some(r),
        () = shared.wait_ended() => None,
    };
    match result {
        Some(Ok(WriterExit::GoAwaySent)) => shared.end(None),
        Some(Err(e)) => shared.end(Some(e)),
        None => {}
    }
    // Let the peer see EOF; bounded, since a peer that stopped reading may never let it finish.
    let _ = tokio::time::timeout(CLOSE_GRACE, w.get_mut().shutdown()).await;
}

/// Writes queued frames, control frames first; after `close()`, GOAWAY once the queue is empty.
async fn write_loop<W: AsyncWrite + Unpin>(
    shared: &Shared,
    w: &mut BufWriter<W>,
) -> Result<WriterExit, SpdyError> {
    let mut batch: Vec<Bytes> = Vec::new();
    loop {
        let mut last = false;
        {
            let mut st = lock(&shared.state);
            batch.extend(st.control.drain(..));
            let mut taken = 0;
            while taken < WRITE_BATCH_DATA {
                let Some((_, frame)) = st.data.pop_front() else {
                    break;
                };
                taken += frame.len();
                batch.push(frame);
            }
            if taken > 0 {
                st.data_bytes -= taken;
                shared.outbox_space.notify_waiters();
            }
            if st.closing && st.data.is_empty() {
                batch.push(frame::goaway(st.last_peer_stream_id, frame::GOAWAY_OK));
                last = true;
            }
        }
        if batch.is_empty() {
            shared.writer_wake.notified().await;
            continue;
        }
        for frame in batch.drain(..) {
            w.write_all(&frame).await?;
        }
        w.flush().await?;
        if last {
            return Ok(WriterExit::GoAwaySent);
        }
    }
}

/// How the reader loop stopped without an error.
#[derive(Debug)]
enum ReaderExit {
    /// The peer closed the connection between frames.
    Eof,
    /// The peer sent GOAWAY.
    GoAway,
}

/// The reader task: reads and dispatches frames until the session ends.
async fn reader_task<R: AsyncRead + Send + Unpin + 'static>(
    shared: Arc<Shared>,
    r: R,
    accept: Option<mpsc::Sender<Stream>>,
) {
    let mut r = BufReader::with_capacity(IO_BUFFER, r);
    let result = tokio::select! {
        r = read_loop(&shared, &mut r, accept.as_ref()) => r,
        () = shared.wait_ended() => return,
    };
    match result {
        Ok(exit) => {
            tracing::debug!(?exit, "SPDY peer ended the session");
            shared.end(None);
        }
        Err(e) => {
            if matches!(e, SpdyError::Protocol(_)) {
                tracing::warn!(error = %e, "SPDY session ended on malformed input");
            }
            shared.end(Some(e));
        }
    }
}

/// Reads frames until EOF, GOAWAY or an error.
async fn read_loop<R: AsyncRead + Unpin>(
    shared: &Arc<Shared>,
    r: &mut BufReader<R>,
    accept: Option<&mpsc::Sender<Stream>>,
) -> Result<ReaderExit, SpdyError> {
    let mut decompressor = HeaderDecompressor::new();
    loop {
        if r.fill_buf().await?.is_empty() {
            return Ok(ReaderExit::Eof);
        }
        let mut head = [0u8; 8];
        r.read_exact(&mut head).await?;
        let head = Head::parse(head);
        let mut payload = BytesMut::zeroed(head.length());
        r.read_exact(&mut payload).await?;
        let payload = payload.freeze();
        match head {
            Head::Data {
                stream_id, flags, ..
            } => on_data(shared, stream_id, flags, payload).await?,
            Head::Control {
                version,
                kind,
                flags,
                ..
            } => {
                if version != frame::VERSION {
                    return Err(SpdyError::Protocol(format!(
                        "unsupported SPDY version {version}"
                    )));
                }
                match kind {
                    frame::TYPE_SYN_STREAM => {
                        on_syn_stream(shared, &mut decompressor, flags, &payload, accept)?;
                    }
                    frame::TYPE_SYN_REPLY => {
                        on_syn_reply(shared, &mut decompressor, flags, &payload)?;
                    }
                    frame::TYPE_RST_STREAM => on_rst_stream(shared, &payload)?,
                    frame::TYPE_SETTINGS => on_settings(&payload)?,
                    frame::TYPE_PING => on_ping(shared, &payload)?,
                    frame::TYPE_GOAWAY => {
                        if payload.len() < 4 {
                            return Err(SpdyError::Protocol("GOAWAY too short".into()));
                        }
                        return Ok(ReaderExit::GoAway);
                    }
                    frame::TYPE_HEADERS => {
                        on_headers(shared, &mut decompressor, flags, &payload)?;
                    }
                    frame::TYPE_WINDOW_UPDATE => {
                        // Our sends do not wait for the peer's window (see the module docs).
                        if payload.len() != 8 {
                            return Err(SpdyError::Protocol("WINDOW_UPDATE length".into()));
                        }
                    }
                    other => tracing::trace!(kind = other, "ignoring unknown SPDY control frame"),
                }
            }
        }
    }
}

/// Looks a stream up.
fn find_stream(shared: &Shared, id: u32) -> Option<Arc<StreamShared>> {
    lock(&shared.state).streams.get(&id).cloned()
}

/// Checks a frame's stream id is not 0 (spdystream ends its connection on that).
fn nonzero(id: u32, what: &str) -> Result<u32, SpdyError> {
    if id == 0 {
        return Err(SpdyError::Protocol(format!("{what} for stream 0")));
    }
    Ok(id)
}

/// DATA: queue it on its stream (waiting while the stream's buffer is full), or discard it.
async fn on_data(
    shared: &Arc<Shared>,
    id: u32,
    flags: u8,
    payload: Bytes,
) -> Result<(), SpdyError> {
    nonzero(id, "DATA")?;
    let n = payload.len();
    let Some(stream) = find_stream(shared, id) else {
        // Unknown or forgotten stream: ignored, as spdystream does.
        if n > 0 {
            shared.credit(id, 0, n);
        }
        return Ok(());
    };
    let mut payload = Some(payload);
    let (discarded, fin) = loop {
        let space = stream.space.notified();
        {
            let mut inner = lock(&stream.inner);
            let discard = inner.remote_done || inner.recv_dropped;
            if discard || n == 0 || inner.buffered < RECV_BUFFER_LIMIT {
                if !discard
                    && n > 0
                    && let Some(p) = payload.take()
                {
                    inner.buffered += n;
                    inner.queue.push_back(p);
                }
                let fin = flags & FLAG_FIN != 0 && !inner.remote_done;
                if fin {
                    inner.remote_done = true;
                }
                drop(inner);
                stream.readable.notify_one();
                break (if discard { n } else { 0 }, fin);
            }
        }
        space.await;
    };
    if discarded > 0 {
        shared.credit(id, 0, discarded);
    }
    if fin {
        shared.forget_if_done(&stream);
    }
    Ok(())
}

/// SYN_STREAM: a stream the peer opens.
fn on_syn_stream(
    shared: &Arc<Shared>,
    decompressor: &mut HeaderDecompressor,
    flags: u8,
    payload: &[u8],
    accept: Option<&mpsc::Sender<Stream>>,
) -> Result<(), SpdyError> {
    if payload.len() < 10 {
        return Err(SpdyError::Protocol("SYN_STREAM too short".into()));
    }
    let id = frame::be32(payload, 0) & frame::MAX_STREAM_ID;
    // Always decompress: the zlib context is shared by every block of the session.
    let headers = frame::decode_header_block(&decompressor.decompress(&payload[10..])?)?;
    nonzero(id, "SYN_STREAM")?;
    let stream = {
        let mut st = lock(&shared.state);
        if st.ended || st.closing {
            return Ok(());
        }
        let peer_parity = if shared.client { 0 } else { 1 };
        if id % 2 != peer_parity || id <= st.last_peer_stream_id {
            tracing::debug!(id, "SPDY peer opened a stream with an invalid id");
            return shared.push_owed(&mut st, frame::rst_stream(id, frame::RST_PROTOCOL_ERROR));
        }
        st.last_peer_stream_id = id;
        if accept.is_none_or(mpsc::Sender::is_closed) {
            return shared.push_owed(&mut st, frame::rst_stream(id, frame::RST_REFUSED_STREAM));
        }
        let mut inner = StreamInner::open(false);
        inner.remote_done = flags & FLAG_FIN != 0;
        if flags & FLAG_UNIDIRECTIONAL != 0 {
            inner.local = Local::Finished;
        }
        let done = StreamShared::done(&inner);
        let stream = StreamShared::new(id, true, inner);
        if !done {
            st.streams.insert(id, stream.clone());
        }
        stream
    };
    let stream = Stream::new(shared.clone(), stream, headers);
    if let Some(accept) = accept
        && let Err(refused) = accept.try_send(stream)
    {
        // The backlog is full: dropping the unreplied stream refuses it.
        tracing::debug!(id, "SPDY stream refused: accept backlog full");
        drop(refused);
    }
    Ok(())
}

/// SYN_REPLY: the peer accepted a stream we opened.
fn on_syn_reply(
    shared: &Arc<Shared>,
    decompressor: &mut HeaderDecompressor,
    flags: u8,
    payload: &[u8],
) -> Result<(), SpdyError> {
    if payload.len() < 4 {
        return Err(SpdyError::Protocol("SYN_REPLY too short".into()));
    }
    let id = frame::be32(payload, 0) & frame::MAX_STREAM_ID;
    frame::decode_header_block(&decompressor.decompress(&payload[4..])?)?;
    nonzero(id, "SYN_REPLY")?;
    let Some(stream) = find_stream(shared, id).filter(|s| !s.by_peer) else {
        return Ok(());
    };
    let mut inner = lock(&stream.inner);
    if !inner.replied {
        inner.replied = true;
        if let Some(tx) = inner.reply_tx.take() {
            let _ = tx.send(Ok(()));
        }
    }
    let fin = flags & FLAG_FIN != 0 && !inner.remote_done;
    if fin {
        inner.remote_done = true;
    }
    drop(inner);
    if fin {
        stream.readable.notify_one();
        shared.forget_if_done(&stream);
    }
    Ok(())
}

/// HEADERS: extra headers on a stream; only their FIN matters here.
fn on_headers(
    shared: &Arc<Shared>,
    decompressor: &mut HeaderDecompressor,
    flags: u8,
    payload: &[u8],
) -> Result<(), SpdyError> {
    if payload.len() < 4 {
        return Err(SpdyError::Protocol("HEADERS too short".into()));
    }
    let id = frame::be32(payload, 0) & frame::MAX_STREAM_ID;
    frame::decode_header_block(&decompressor.decompress(&payload[4..])?)?;
    nonzero(id, "HEADERS")?;
    if flags & FLAG_FIN == 0 {
        return Ok(());
    }
    let Some(stream) = find_stream(shared, id) else {
        return Ok(());
    };
    let fin = {
        let mut inner = lock(&stream.inner);
        !std::mem::replace(&mut inner.remote_done, true)
    };
    if fin {
        stream.readable.notify_one();
        shared.forget_if_done(&stream);
    }
    Ok(())
}

/// RST_STREAM: the peer aborted a stream.
fn on_rst_stream(shared: &Arc<Shared>, payload: &[u8]) -> Result<(), SpdyError> {
    if payload.len() != 8 {
        return Err(SpdyError::Protocol("RST_STREAM length".into()));
    }
    let id = nonzero(frame::be32(payload, 0) & frame::MAX_STREAM_ID, "RST_STREAM")?;
    let status = frame::be32(payload, 4);
    let mut st = lock(&shared.state);
    let Some(stream) = st.streams.remove(&id) else {
        return Ok(());
    };
    shared.purge_data(&mut st, id);
    drop(st);
    let mut inner = lock(&stream.inner);
    inner.remote_done = true;
    inner.local = Local::Reset;
    inner.peer_reset = Some(status);
    if let Some(tx) = inner.reply_tx.take() {
        let _ = tx.send(Err(SpdyError::Reset(status)));
    }
    drop(inner);
    stream.readable.notify_one();
    stream.space.notify_one();
    Ok(())
}

/// SETTINGS: checked for consistency and otherwise ignored (nothing we do depends on them).
fn on_settings(payload: &[u8]) -> Result<(), SpdyError> {
    let entries = payload
        .len()
        .checked_sub(4)
        .map(|rest| (rest, frame::be32(payload, 0)));
    if !entries.is_some_and(|(rest, count)| rest % 8 == 0 && rest / 8 == count as usize) {
        return Err(SpdyError::Protocol("SETTINGS length".into()));
    }
    Ok(())
}

/// PING: echo the peer's, complete ours.
fn on_ping(shared: &Arc<Shared>, payload: &[u8]) -> Result<(), SpdyError> {
    if payload.len() != 4 {
        return Err(SpdyError::Protocol("PING length".into()));
    }
    let id = frame::be32(payload, 0);
    let ours = if shared.client { 1 } else { 0 };
    let mut st = lock(&shared.state);
    if id % 2 == ours {
        if let Some(tx) = st.pings.remove(&id) {
            let _ = tx.send(());
        }
        Ok(())
    } else {
        shared.push_owed(&mut st, frame::ping(id))
    }
}

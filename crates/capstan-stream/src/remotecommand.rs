//! `exec` and `attach` sessions. Clients speak either SPDY (which the API server passes through
//! to the kubelet untouched) or one of the WebSocket channel protocols, which the API server
//! translates here into a SPDY session with the kubelet, as upstream's stream translator does:
//! WebSocket channels 0–4 (stdin, stdout, stderr, error, resize) become SPDY streams of those
//! types, and `v5.channel.k8s.io`'s close message (channel 255) half-closes stdin.

use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use crate::spdy::{RecvHalf, SendHalf, Session};
use crate::websocket::Framing;

/// Channel numbers of the WebSocket protocols.
pub const STDIN: u8 = 0;
/// Standard output.
pub const STDOUT: u8 = 1;
/// Standard error.
pub const STDERR: u8 = 2;
/// The session's outcome (a `Status` from v4 on, text before).
pub const ERROR: u8 = 3;
/// Terminal size changes, JSON `{"Width":w,"Height":h}`.
pub const RESIZE: u8 = 4;
/// `v5.channel.k8s.io`'s close signal: its one data byte names the channel to close.
pub const CLOSE: u8 = 255;

/// `v5.channel.k8s.io`: v4 plus the close signal.
pub const V5: &str = "v5.channel.k8s.io";
/// `v4.channel.k8s.io`: the error channel carries a JSON `Status`.
pub const V4: &str = "v4.channel.k8s.io";

/// The WebSocket subprotocols an exec or attach session is served in. The empty protocol
/// (a client that names none) is the original binary channel protocol.
pub const WEBSOCKET_PROTOCOLS: &[&str] = &[
    V5,
    V4,
    "v4.base64.channel.k8s.io",
    "channel.k8s.io",
    "base64.channel.k8s.io",
    "",
];

/// The SPDY remote command protocols (`X-Stream-Protocol-Version`), newest first.
pub const SPDY_PROTOCOLS: &[&str] = &[
    V4,
    "v3.channel.k8s.io",
    "v2.channel.k8s.io",
    "channel.k8s.io",
];

/// The SPDY protocol to ask the kubelet for when a client speaks WebSocket `protocol`: v4's
/// JSON status for v4 and v5 clients, v3's text errors (with resize) for the older ones, so
/// the error channel's bytes pass through unchanged.
pub fn spdy_protocol_for(protocol: &str) -> &'static str {
    if protocol.starts_with("v5.") || protocol.starts_with("v4.") {
        V4
    } else {
        "v3.channel.k8s.io"
    }
}

/// Which streams a session has (the request's `stdin`, `stdout`, `stderr`, `tty`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    /// The client sends input.
    pub stdin: bool,
    /// The client reads standard output.
    pub stdout: bool,
    /// The client reads standard error (never with a terminal, whose output is one stream).
    pub stderr: bool,
    /// The command runs on a terminal.
    pub tty: bool,
}

/// How long the client has to close the WebSocket once the session has ended and its outcome
/// was sent (upstream waits as long for a slow reader to drain its output).
const FINISH_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// Opens the SPDY streams of a remote command session, in client-go's order: error, then
/// stdin, stdout, stderr (not with a terminal), resize (with one).
async fn open_streams(spdy: &Session, options: Options) -> Result<Streams, crate::spdy::SpdyError> {
    let open = |kind: &'static str| async move {
        spdy.open(&[("streamtype", kind)]).await.map(|s| s.split())
    };
    let (error, _) = open("error").await?;
    let stdin = match options.stdin {
        true => Some(open("stdin").await?.1),
        false => None,
    };
    let stdout = match options.stdout {
        true => Some(open("stdout").await?.0),
        false => None,
    };
    let stderr = match options.stderr && !options.tty {
        true => Some(open("stderr").await?.0),
        false => None,
    };
    let resize = match options.tty {
        true => Some(open("resize").await?.1),
        false => None,
    };
    Ok(Streams {
        error,
        stdin,
        stdout,
        stderr,
        resize,
    })
}

struct Streams {
    error: RecvHalf,
    stdin: Option<SendHalf>,
    stdout: Option<RecvHalf>,
    stderr: Option<RecvHalf>,
    resize: Option<SendHalf>,
}

/// Runs one session between a client's WebSocket (subprotocol `protocol`) and `spdy`, a SPDY
/// session with the kubelet that negotiated [`spdy_protocol_for`]`(protocol)`. It ends when the
/// command has finished and the client has closed, or when either side goes away.
pub async fn bridge<S>(ws: WebSocketStream<S>, protocol: &str, spdy: Session, options: Options)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let framing = Framing::of(protocol);
    let v5 = protocol.starts_with("v5.");
    let (mut sink, mut source) = ws.split();
    let streams = match open_streams(&spdy, options).await {
        Ok(streams) => streams,
        Err(e) => {
            let message = format!("error creating streams to the kubelet: {e}");
            let _ = sink.send(framing.encode(ERROR, &failure(protocol, &message))).await;
            let _ = sink.close().await;
            spdy.close().await;
            return;
        }
    };
    // The lowest channel the client reads tells it the session is up.
    let hello = if options.stdout {
        STDOUT
    } else if options.stderr && !options.tty {
        STDERR
    } else {
        ERROR
    };
    if sink.send(framing.encode(hello, &[])).await.is_err() {
        spdy.close().await;
        return;
    }
    let Streams {
        mut error,
        stdin,
        stdout,
        stderr,
        resize,
    } = streams;

    // Client to kubelet: stdin and resize; ends when the client closes.
    let input = async move {
        while let Some(Ok(message)) = source.next().await {
            if matches!(message, Message::Close(_)) {
                break;
            }
            let Some((channel, data)) = framing.decode(&message) else {
                continue;
            };
            match channel {
                STDIN => {
                    if let Some(stdin) = &stdin {
                        let _ = stdin.send(&data).await;
                    }
                }
                RESIZE => {
                    if let Some(resize) = &resize {
                        let _ = resize.send(&data).await;
                    }
                }
                CLOSE if v5 && data.first() == Some(&STDIN) => {
                    if let Some(stdin) = &stdin {
                        let _ = stdin.finish().await;
                    }
                }
                _ => {}
            }
        }
    };

    // Kubelet to client: output until both output streams end, then the outcome.
    let output = async move {
        let mut outputs = futures::stream::select(
            Box::pin(output_stream(stdout, STDOUT)),
            Box::pin(output_stream(stderr, STDERR)),
        );
        while let Some((channel, data)) = outputs.next().await {
            if sink.send(framing.encode(channel, &data)).await.is_err() {
                return None;
            }
        }
        let mut outcome = Vec::new();
        while let Some(chunk) = error.recv().await {
            outcome.extend_from_slice(&chunk);
        }
        if !outcome.is_empty() {
            let _ = sink.send(framing.encode(ERROR, &outcome)).await;
        }
        let _ = sink
            .send(Message::Close(Some(CloseFrame {
                code: CloseCode::Normal,
                reason: "".into(),
            })))
            .await;
        Some(sink)
    };

    tokio::pin!(input, output);
    tokio::select! {
        // The client left first: end the command's session.
        () = &mut input => {
            spdy.close().await;
        }
        sink = &mut output => {
            spdy.close().await;
            if sink.is_some() {
                // Give the client the time to read everything and close.
                let _ = tokio::time::timeout(FINISH_TIMEOUT, input).await;
            }
        }
    }
}

/// The chunks of one output stream, tagged with its channel; nothing when the client does
/// not read it.
fn output_stream(
    stream: Option<RecvHalf>,
    channel: u8,
) -> impl futures::Stream<Item = (u8, Bytes)> + Send {
    futures::stream::unfold(stream, move |stream| async move {
        let mut stream = stream?;
        let chunk = stream.recv().await?;
        Some(((channel, chunk), Some(stream)))
    })
}

/// A failure outcome in the form the client's protocol expects: a `Status` for v4 and v5,
/// the message itself before.
pub fn failure(protocol: &str, message: &str) -> Vec<u8> {
    if protocol.starts_with("v5.") || protocol.starts_with("v4.") {
        serde_json::to_vec(&serde_json::json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": "InternalError",
            "code": 500,
        }))
        .unwrap_or_default()
    } else {
        message.as_bytes().to_vec()
    }
}

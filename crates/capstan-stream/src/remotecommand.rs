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
            let _ = sink
                .send(framing.encode(ERROR, &failure(protocol, &message)))
                .await;
            let _ = sink.close().await;
            crate::spdy_end(&spdy);
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
        crate::spdy_end(&spdy);
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
            crate::spdy_end(&spdy);
        }
        sink = &mut output => {
            crate::spdy_end(&spdy);
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;

    /// A kubelet's side of an exec: accepts the streams, echoes stdin (until it is closed) to
    /// stdout, writes to stderr, then reports the outcome.
    async fn kubelet(io: tokio::io::DuplexStream) -> Vec<String> {
        let (_session, mut incoming) = Session::server(io);
        let mut kinds = Vec::new();
        let (mut stdin, mut stdout, mut stderr, mut error) = (None, None, None, None);
        while kinds.len() < 4 {
            let stream = incoming.recv().await.unwrap();
            stream.reply().await.unwrap();
            let kind = stream.header("streamType").unwrap().to_owned();
            let (recv, send) = stream.split();
            match kind.as_str() {
                "stdin" => stdin = Some(recv),
                "stdout" => stdout = Some(send),
                "stderr" => stderr = Some(send),
                "error" => error = Some(send),
                other => panic!("unexpected stream {other}"),
            }
            kinds.push(kind);
        }
        let mut input = Vec::new();
        let mut stdin = stdin.unwrap();
        while let Some(chunk) = stdin.recv().await {
            input.extend_from_slice(&chunk);
        }
        let stdout = stdout.unwrap();
        stdout.send(b"got:").await.unwrap();
        stdout.send(&input).await.unwrap();
        stdout.finish().await.unwrap();
        let stderr = stderr.unwrap();
        stderr.send(b"warning").await.unwrap();
        stderr.finish().await.unwrap();
        let error = error.unwrap();
        error
            .send(br#"{"metadata":{},"status":"Failure","reason":"NonZeroExitCode"}"#)
            .await
            .unwrap();
        error.finish().await.unwrap();
        kinds
    }

    #[tokio::test]
    // tungstenite's handshake callback returns its large error type.
    #[allow(clippy::result_large_err)]
    async fn a_v5_websocket_exec_becomes_a_spdy_session() {
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let (spdy_client, spdy_server) = tokio::io::duplex(64 * 1024);
        let kubelet = tokio::spawn(kubelet(spdy_server));
        let bridge = tokio::spawn(async move {
            // The API server answers the handshake before the bridge runs; here tungstenite
            // does, choosing v5.
            let choose = |_: &tokio_tungstenite::tungstenite::handshake::server::Request,
                          mut response: tokio_tungstenite::tungstenite::handshake::server::Response| {
                response
                    .headers_mut()
                    .insert("sec-websocket-protocol", V5.parse().unwrap());
                Ok(response)
            };
            let ws = tokio_tungstenite::accept_hdr_async(server_io, choose)
                .await
                .unwrap();
            let options = Options {
                stdin: true,
                stdout: true,
                stderr: true,
                tty: false,
            };
            bridge(ws, V5, Session::client(spdy_client), options).await;
        });
        let mut request = "ws://node/exec".into_client_request().unwrap();
        request
            .headers_mut()
            .insert("sec-websocket-protocol", V5.parse().unwrap());
        let (mut ws, _) = tokio::time::timeout(
            Duration::from_secs(5),
            tokio_tungstenite::client_async(request, client_io),
        )
        .await
        .unwrap_or_else(|_| panic!("handshake"))
        .unwrap_or_else(|e| panic!("handshake: {e}"));
        let hello = ws.next().await.unwrap().unwrap();
        assert_eq!(hello, Message::binary(vec![STDOUT]));
        ws.send(Message::binary(b"\x00abc".to_vec())).await.unwrap();
        ws.send(Message::binary(vec![CLOSE, STDIN])).await.unwrap();
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        let mut outcome = Vec::new();
        loop {
            let message = tokio::time::timeout(Duration::from_secs(5), ws.next())
                .await
                .unwrap_or_else(|_| panic!("the session stalled"));
            match message {
                Some(Ok(Message::Binary(data))) => match data[0] {
                    STDOUT => stdout.extend_from_slice(&data[1..]),
                    STDERR => stderr.extend_from_slice(&data[1..]),
                    ERROR => outcome.extend_from_slice(&data[1..]),
                    other => panic!("unexpected channel {other}"),
                },
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                Some(Ok(_)) => {}
            }
        }
        assert_eq!(stdout, b"got:abc");
        assert_eq!(stderr, b"warning");
        let outcome: serde_json::Value = serde_json::from_slice(&outcome).unwrap();
        assert_eq!(outcome["reason"], "NonZeroExitCode");
        // Answering the server's close ends the session.
        let _ = ws.close(None).await;
        while let Ok(Some(Ok(_))) = tokio::time::timeout(Duration::from_secs(5), ws.next()).await {}
        assert_eq!(
            kubelet.await.unwrap(),
            ["error", "stdin", "stdout", "stderr"]
        );
        tokio::time::timeout(Duration::from_secs(5), bridge)
            .await
            .unwrap()
            .unwrap();
    }
}

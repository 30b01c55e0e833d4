//! The server side of the WebSocket handshake (RFC 6455, with the subprotocol negotiation of
//! Go's `x/net/websocket` that upstream uses: the first protocol the client lists that the
//! server supports wins), and the channel framing of Kubernetes' WebSocket subprotocols: every
//! message starts with its channel number, a byte in the binary protocols (`channel.k8s.io`,
//! `v4.channel.k8s.io`, `v5.channel.k8s.io`) or an ASCII digit followed by base64 data in the
//! `base64.` ones. [`copy_reader`] is the other framing upstream has, for a one-way stream
//! (`pods/log`): `binary.k8s.io` and `base64.binary.k8s.io`, without channels.

use base64::Engine as _;
use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};

/// Why a WebSocket handshake was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// A header the handshake needs is missing or wrong.
    #[error("invalid WebSocket handshake: {0}")]
    Invalid(&'static str),
    /// None of the client's subprotocols is served here.
    #[error("requested protocol(s) are not supported: {offered:?}; supports {supported:?}")]
    Protocol {
        /// What the client asked for.
        offered: Vec<String>,
        /// What this endpoint speaks.
        supported: Vec<String>,
    },
}

/// The subprotocols a client offers (`Sec-WebSocket-Protocol`, comma-separated, possibly in
/// several headers), in its order.
pub fn offered_protocols(headers: &http::HeaderMap) -> Vec<String> {
    headers
        .get_all(http::header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
        .collect()
}

/// An accepted handshake: the `101` answer to send and the subprotocol chosen (empty when the
/// client offered none and `supported` includes the empty protocol).
#[derive(Debug)]
pub struct Accepted {
    /// The answer to the upgrade request.
    pub response: http::Response<()>,
    /// The chosen subprotocol.
    pub protocol: String,
}

/// Checks a WebSocket upgrade request and picks the subprotocol: the first one the client lists
/// that is in `supported`. A client that lists none gets the empty protocol if `supported` has
/// it.
pub fn accept(headers: &http::HeaderMap, supported: &[&str]) -> Result<Accepted, HandshakeError> {
    let version = headers
        .get(http::header::SEC_WEBSOCKET_VERSION)
        .and_then(|v| v.to_str().ok());
    if version.map(str::trim) != Some("13") {
        return Err(HandshakeError::Invalid("Sec-WebSocket-Version must be 13"));
    }
    let key = headers
        .get(http::header::SEC_WEBSOCKET_KEY)
        .ok_or(HandshakeError::Invalid("Sec-WebSocket-Key is missing"))?;
    let offered = offered_protocols(headers);
    let protocol = if offered.is_empty() {
        supported
            .contains(&"")
            .then(String::new)
            .ok_or_else(|| HandshakeError::Protocol {
                offered: offered.clone(),
                supported: supported.iter().map(|s| (*s).to_owned()).collect(),
            })?
    } else {
        offered
            .iter()
            .find(|p| supported.contains(&p.as_str()))
            .cloned()
            .ok_or_else(|| HandshakeError::Protocol {
                offered: offered.clone(),
                supported: supported.iter().map(|s| (*s).to_owned()).collect(),
            })?
    };
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    let mut response = http::Response::builder()
        .status(http::StatusCode::SWITCHING_PROTOCOLS)
        .header(http::header::UPGRADE, "websocket")
        .header(http::header::CONNECTION, "Upgrade")
        .header(http::header::SEC_WEBSOCKET_ACCEPT, accept);
    if !protocol.is_empty() {
        response = response.header(http::header::SEC_WEBSOCKET_PROTOCOL, protocol.as_str());
    }
    let response = response
        .body(())
        .map_err(|_| HandshakeError::Invalid("unusable Sec-WebSocket-Key"))?;
    Ok(Accepted { response, protocol })
}

/// The server end of a WebSocket over a connection that has switched protocols.
pub async fn server<S>(io: S) -> WebSocketStream<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    WebSocketStream::from_raw_socket(io, Role::Server, Some(WebSocketConfig::default())).await
}

/// How a channel protocol frames its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Framing {
    /// Text messages with a digit and base64 data instead of binary ones.
    pub base64: bool,
}

impl Framing {
    /// The framing of subprotocol `protocol`.
    pub fn of(protocol: &str) -> Framing {
        Framing {
            base64: protocol.contains("base64."),
        }
    }

    /// The message carrying `data` on `channel`.
    pub fn encode(self, channel: u8, data: &[u8]) -> Message {
        if self.base64 {
            let mut text = String::with_capacity(1 + data.len().div_ceil(3) * 4);
            text.push(char::from(b'0'.wrapping_add(channel)));
            base64::engine::general_purpose::STANDARD.encode_string(data, &mut text);
            Message::text(text)
        } else {
            let mut frame = Vec::with_capacity(1 + data.len());
            frame.push(channel);
            frame.extend_from_slice(data);
            Message::binary(frame)
        }
    }

    /// The channel and data of a data message; `None` for control messages, empty messages
    /// and undecodable base64 (which upstream drops too).
    pub fn decode(self, message: &Message) -> Option<(u8, Bytes)> {
        match message {
            Message::Binary(data) if !data.is_empty() && !self.base64 => {
                Some((data[0], data.slice(1..)))
            }
            Message::Text(text) if self.base64 && !text.is_empty() => {
                let bytes = text.as_bytes();
                let channel = bytes[0].wrapping_sub(b'0');
                let data = base64::engine::general_purpose::STANDARD
                    .decode(&bytes[1..])
                    .ok()?;
                Some((channel, Bytes::from(data)))
            }
            // Go's websocket library hands text and binary messages alike to the channel
            // reader: a text message in a binary protocol (the Python client sends its
            // string input so) and a binary one in a base64 protocol are taken as raw.
            Message::Text(text) if !text.is_empty() => {
                let bytes = Bytes::copy_from_slice(text.as_bytes());
                Some((bytes[0], bytes.slice(1..)))
            }
            Message::Binary(data) if !data.is_empty() => Some((data[0], data.slice(1..))),
            _ => None,
        }
    }
}

/// The subprotocols of a one-way stream (upstream's `NewDefaultReaderProtocols`): none (raw
/// binary), `binary.k8s.io` and `base64.binary.k8s.io`.
pub const READER_PROTOCOLS: &[&str] = &["", "binary.k8s.io", "base64.binary.k8s.io"];

/// The most bytes a message of [`copy_reader`] carries, as upstream's reader buffer.
const READER_CHUNK: usize = 2048;

/// Sends `body` to the client of `ws` as upstream's `wsstream.Reader` does: an empty message
/// first, then the body in messages of at most 2 KiB (binary, or base64 text when `base64`),
/// and a normal close at its end. What the client sends is read and dropped; its close ends
/// the stream.
pub async fn copy_reader<S, B>(ws: WebSocketStream<S>, body: B, base64: bool)
where
    S: AsyncRead + AsyncWrite + Unpin,
    B: hyper::body::Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    use futures::{SinkExt as _, StreamExt as _};
    use http_body_util::BodyExt as _;
    use tokio_tungstenite::tungstenite::protocol::CloseFrame;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

    let message = |data: &[u8]| {
        if base64 {
            Message::text(base64::engine::general_purpose::STANDARD.encode(data))
        } else {
            Message::binary(data.to_vec())
        }
    };
    let (mut sink, mut incoming) = ws.split();
    let mut body = body;
    if sink.send(message(&[])).await.is_err() {
        return;
    }
    let ended = loop {
        tokio::select! {
            frame = body.frame() => match frame {
                Some(Ok(frame)) => {
                    let Ok(data) = frame.into_data() else { continue };
                    for chunk in data.chunks(READER_CHUNK) {
                        if sink.send(message(chunk)).await.is_err() {
                            return;
                        }
                    }
                }
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "the stream's source failed");
                    break true;
                }
                None => break true,
            },
            received = incoming.next() => match received {
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break false,
                Some(Ok(_)) => {}
            },
        }
    };
    if ended {
        let close = Message::Close(Some(CloseFrame {
            code: CloseCode::Normal,
            reason: "".into(),
        }));
        if sink.send(close).await.is_ok() {
            // The client's answering close, briefly, before the connection goes.
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), async {
                while let Some(Ok(message)) = incoming.next().await {
                    if message.is_close() {
                        break;
                    }
                }
            })
            .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(protocols: &[&'static str]) -> http::HeaderMap {
        let mut headers = http::HeaderMap::new();
        headers.insert(http::header::SEC_WEBSOCKET_VERSION, "13".parse().unwrap());
        headers.insert(
            http::header::SEC_WEBSOCKET_KEY,
            "dGhlIHNhbXBsZSBub25jZQ==".parse().unwrap(),
        );
        for p in protocols {
            headers.append(http::header::SEC_WEBSOCKET_PROTOCOL, p.parse().unwrap());
        }
        headers
    }

    #[test]
    fn the_first_supported_protocol_the_client_lists_wins() {
        let accepted = accept(
            &request(&["v5.channel.k8s.io, v4.channel.k8s.io"]),
            &["v4.channel.k8s.io", "v5.channel.k8s.io"],
        )
        .unwrap();
        assert_eq!(accepted.protocol, "v5.channel.k8s.io");
        let headers = accepted.response.headers();
        // RFC 6455's own example key and answer.
        assert_eq!(
            headers[http::header::SEC_WEBSOCKET_ACCEPT],
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
        assert_eq!(
            headers[http::header::SEC_WEBSOCKET_PROTOCOL],
            "v5.channel.k8s.io"
        );
        assert_eq!(
            accepted.response.status(),
            http::StatusCode::SWITCHING_PROTOCOLS
        );
    }

    #[test]
    fn unsupported_or_missing_protocols_are_refused_unless_empty_is_allowed() {
        let refused = accept(&request(&["v9.channel.k8s.io"]), &["v5.channel.k8s.io"]);
        assert!(matches!(refused, Err(HandshakeError::Protocol { .. })));
        assert!(accept(&request(&[]), &["v5.channel.k8s.io"]).is_err());
        let empty = accept(&request(&[]), &["", "channel.k8s.io"]).unwrap();
        assert_eq!(empty.protocol, "");
        assert!(
            !empty
                .response
                .headers()
                .contains_key(http::header::SEC_WEBSOCKET_PROTOCOL)
        );
        let mut old = request(&["v5.channel.k8s.io"]);
        old.insert(http::header::SEC_WEBSOCKET_VERSION, "8".parse().unwrap());
        assert!(matches!(
            accept(&old, &["v5.channel.k8s.io"]),
            Err(HandshakeError::Invalid(_))
        ));
    }

    #[test]
    fn channel_framing_round_trips_in_both_encodings() {
        let binary = Framing::of("v5.channel.k8s.io");
        let message = binary.encode(1, b"hello");
        assert_eq!(message, Message::binary(b"\x01hello".to_vec()));
        assert_eq!(
            binary.decode(&message),
            Some((1, Bytes::from_static(b"hello")))
        );
        let text = Framing::of("v4.base64.channel.k8s.io");
        let message = text.encode(2, b"foo\n");
        assert_eq!(message, Message::text("2Zm9vCg=="));
        assert_eq!(
            text.decode(&message),
            Some((2, Bytes::from_static(b"foo\n")))
        );
        assert_eq!(text.decode(&Message::text("0!!!")), None);
        assert_eq!(binary.decode(&Message::binary(Vec::new())), None);
        // The Python client sends string input as a text message, channel byte first.
        assert_eq!(
            binary.decode(&Message::text("\u{0}typed\n")),
            Some((0, Bytes::from_static(b"typed\n")))
        );
    }

    /// The client end of a WebSocket over `io`.
    async fn client<S: AsyncRead + AsyncWrite + Unpin>(io: S) -> WebSocketStream<S> {
        WebSocketStream::from_raw_socket(io, Role::Client, None).await
    }

    #[tokio::test]
    async fn a_reader_sends_an_empty_message_then_chunks_then_a_normal_close() {
        use futures::StreamExt as _;
        for (encoded, text) in [(false, false), (true, true)] {
            let (near, far) = tokio::io::duplex(1 << 16);
            let log = "container is alive\n".repeat(200);
            let body = http_body_util::Full::new(Bytes::from(log.clone()));
            let task = tokio::spawn(async move {
                copy_reader(server(near).await, body, encoded).await;
            });
            let mut ws = client(far).await;
            let first = ws.next().await.unwrap().unwrap();
            assert_eq!(first.is_text(), text);
            assert!(first.into_data().is_empty());
            let mut got = Vec::new();
            let mut close = None;
            while let Some(message) = ws.next().await {
                match message.unwrap() {
                    Message::Close(frame) => {
                        close = frame;
                        break;
                    }
                    message => {
                        assert_eq!(message.is_text(), text);
                        let data = message.into_data();
                        let data = if encoded {
                            base64::engine::general_purpose::STANDARD
                                .decode(&data)
                                .unwrap()
                        } else {
                            data.to_vec()
                        };
                        assert!(data.len() <= READER_CHUNK, "{}", data.len());
                        got.extend_from_slice(&data);
                    }
                }
            }
            assert_eq!(String::from_utf8(got).unwrap(), log);
            let close = close.expect("a close frame with a status");
            assert_eq!(
                close.code,
                tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode::Normal
            );
            drop(ws);
            task.await.unwrap();
        }
    }
}

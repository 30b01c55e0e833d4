//! `portforward` sessions. Clients speak SPDY (passed through to the kubelet untouched), SPDY
//! tunnelled through a WebSocket (kubectl 1.31 and later: subprotocol
//! `SPDY/3.1+portforward.k8s.io`, every binary message a piece of the SPDY byte stream), or
//! the WebSocket channel protocol of other clients (e.g. the Python client), which is
//! translated here into SPDY streams: the ports come from the `ports` query parameter, port
//! `i` has data channel `2i` and error channel `2i+1`, and the first message on each channel
//! carries the port number (two bytes, little-endian).

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use crate::spdy::{RecvHalf, SendHalf, Session};
use crate::websocket::Framing;

/// The SPDY port-forward protocol.
pub const SPDY_PROTOCOL: &str = "portforward.k8s.io";

/// The prefix that marks a WebSocket subprotocol as SPDY tunnelled through the WebSocket.
pub const TUNNEL_PREFIX: &str = "SPDY/3.1+";

/// The WebSocket channel subprotocols port-forwarding is served in.
pub const WEBSOCKET_PROTOCOLS: &[&str] = &[
    "v4.channel.k8s.io",
    "v4.base64.channel.k8s.io",
    "channel.k8s.io",
    "base64.channel.k8s.io",
    "",
];

/// The SPDY protocols a tunnelling client offers (its `SPDY/3.1+<protocol>` subprotocols with
/// a Kubernetes protocol after the prefix), in its order.
pub fn tunnelled_protocols(offered: &[String]) -> Vec<String> {
    offered
        .iter()
        .filter_map(|p| p.strip_prefix(TUNNEL_PREFIX))
        .filter(|p| p.ends_with(".k8s.io"))
        .map(str::to_owned)
        .collect()
}

/// Carries a SPDY byte stream between a tunnelling client's WebSocket and the kubelet's
/// upgraded connection until either ends.
pub async fn tunnel<S, B>(ws: WebSocketStream<S>, backend: B)
where
    S: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let (mut sink, mut source) = ws.split();
    let (mut from_backend, mut to_backend) = tokio::io::split(backend);
    let upstream = async {
        while let Some(Ok(message)) = source.next().await {
            match message {
                Message::Binary(data) if to_backend.write_all(&data).await.is_err() => break,
                Message::Close(_) => break,
                _ => {}
            }
        }
        let _ = to_backend.shutdown().await;
    };
    let downstream = async {
        let mut buffer = vec![0u8; 32 * 1024];
        loop {
            match from_backend.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if sink
                        .send(Message::binary(buffer[..n].to_vec()))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            }
        }
        let _ = sink
            .send(Message::Close(Some(CloseFrame {
                code: CloseCode::Normal,
                reason: "".into(),
            })))
            .await;
    };
    tokio::select! {
        () = upstream => {}
        () = downstream => {}
    }
}

/// Forwards `ports` of a pod between a client's WebSocket (channel subprotocol `protocol`) and
/// `spdy`, a SPDY session with the kubelet speaking [`SPDY_PROTOCOL`]. Ends when the client
/// closes or every port's connection has ended.
pub async fn bridge<S>(ws: WebSocketStream<S>, protocol: &str, spdy: Session, ports: &[u16])
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let framing = Framing::of(protocol);
    let (mut sink, mut source) = ws.split();
    let mut senders: Vec<SendHalf> = Vec::with_capacity(ports.len());
    let mut receivers = Vec::with_capacity(ports.len() * 2);
    for (index, port) in ports.iter().enumerate() {
        let (data, error) = match open_pair(&spdy, *port, index).await {
            Ok(pair) => pair,
            Err(e) => {
                let message = format!("error forwarding port {port}: {e}");
                let channel = error_channel(index);
                let _ = sink.send(framing.encode(channel, message.as_bytes())).await;
                let _ = sink.close().await;
                crate::spdy_end(&spdy);
                return;
            }
        };
        let (data_in, data_out) = data;
        senders.push(data_out);
        receivers.push((data_channel(index), data_in));
        receivers.push((error_channel(index), error));
    }
    // Every channel opens with its port number.
    for (index, port) in ports.iter().enumerate() {
        for channel in [data_channel(index), error_channel(index)] {
            if sink
                .send(framing.encode(channel, &port.to_le_bytes()))
                .await
                .is_err()
            {
                crate::spdy_end(&spdy);
                return;
            }
        }
    }
    let input = async {
        while let Some(Ok(message)) = source.next().await {
            if matches!(message, Message::Close(_)) {
                break;
            }
            let Some((channel, data)) = framing.decode(&message) else {
                continue;
            };
            // Only data channels carry input; the index is the port's.
            if channel % 2 == 0
                && let Some(sender) = senders.get(usize::from(channel / 2))
            {
                let _ = sender.send(&data).await;
            }
        }
    };
    let output = async {
        let mut all = futures::stream::select_all(
            receivers
                .into_iter()
                .map(|(channel, stream)| Box::pin(tagged(stream, channel))),
        );
        while let Some((channel, data)) = all.next().await {
            if sink.send(framing.encode(channel, &data)).await.is_err() {
                return;
            }
        }
        let _ = sink
            .send(Message::Close(Some(CloseFrame {
                code: CloseCode::Normal,
                reason: "".into(),
            })))
            .await;
    };
    tokio::select! {
        () = input => {}
        () = output => {}
    }
    crate::spdy_end(&spdy);
}

fn data_channel(index: usize) -> u8 {
    u8::try_from(index * 2).unwrap_or(u8::MAX)
}

fn error_channel(index: usize) -> u8 {
    data_channel(index).saturating_add(1)
}

/// Opens port `port`'s error and data streams, as client-go does: the error stream first
/// (which the client only reads, so its sending side is closed at once), then the data stream,
/// both naming the port and the request.
async fn open_pair(
    spdy: &Session,
    port: u16,
    request: usize,
) -> Result<((RecvHalf, SendHalf), RecvHalf), crate::spdy::SpdyError> {
    let port = port.to_string();
    let request = request.to_string();
    let (error_in, error_out) = spdy
        .open(&[
            ("streamtype", "error"),
            ("port", &port),
            ("requestid", &request),
        ])
        .await?
        .split();
    let _ = error_out.finish().await;
    let data = spdy
        .open(&[
            ("streamtype", "data"),
            ("port", &port),
            ("requestid", &request),
        ])
        .await?
        .split();
    Ok((data, error_in))
}

fn tagged(stream: RecvHalf, channel: u8) -> impl futures::Stream<Item = (u8, Bytes)> + Send {
    futures::stream::unfold(stream, move |mut stream| async move {
        let chunk = stream.recv().await?;
        Some(((channel, chunk), stream))
    })
}

/// The ports of a WebSocket port-forward request (`?ports=8080&ports=9090`, or
/// comma-separated), each in 1–65535.
pub fn parse_ports(values: &[String]) -> Result<Vec<u16>, String> {
    let mut ports = Vec::new();
    for value in values.iter().flat_map(|v| v.split(',')) {
        let value = value.trim();
        match value.parse::<u16>() {
            Ok(port) if port > 0 => ports.push(port),
            _ => return Err(format!("unable to parse {value:?} as a port")),
        }
    }
    if ports.is_empty() {
        return Err("query parameter \"port\" is required".to_owned());
    }
    // Two channels per port, numbered in one byte.
    if ports.len() > 128 {
        return Err(format!("too many ports ({}), at most 128", ports.len()));
    }
    Ok(ports)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tunnelled_protocols_keep_kubernetes_ones_in_order() {
        let offered = vec![
            "SPDY/3.1+portforward.k8s.io".to_owned(),
            "v4.channel.k8s.io".to_owned(),
            "SPDY/3.1+other.example.com".to_owned(),
        ];
        assert_eq!(tunnelled_protocols(&offered), vec!["portforward.k8s.io"]);
    }

    #[test]
    fn ports_parse_from_repeated_or_listed_values() {
        assert_eq!(
            parse_ports(&["8080".into(), "9090,53".into()]).unwrap(),
            vec![8080, 9090, 53]
        );
        assert!(parse_ports(&["0".into()]).is_err());
        assert!(parse_ports(&["http".into()]).is_err());
        assert!(parse_ports(&[]).is_err());
    }

    #[test]
    fn each_port_has_a_data_and_an_error_channel() {
        assert_eq!((data_channel(0), error_channel(0)), (0, 1));
        assert_eq!((data_channel(2), error_channel(2)), (4, 5));
    }
}

//! HTTP/1.1 as a client over a connection the caller opened: one request, its response with a
//! streaming body, and, when the peer switched protocols (`101`), the upgraded connection.
//! The API server reaches kubelets this way and the kubelet reaches the runtime's streaming
//! server; [`splice`] then joins an upgraded connection to another.

use bytes::Bytes;
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

/// An upgraded connection, readable and writable with tokio's traits.
pub type UpgradedIo = TokioIo<Upgraded>;

/// Sends `request` over `io` (a fresh connection: TCP, or TLS over TCP) and returns the
/// response. The connection serves this one request; it stays open for an upgrade.
pub async fn send<IO>(
    io: IO,
    request: http::Request<Empty<Bytes>>,
) -> Result<http::Response<Incoming>, hyper::Error>
where
    IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.with_upgrades().await {
            tracing::debug!(error = %e, "upstream connection ended");
        }
    });
    sender.send_request(request).await
}

/// The connection behind `response` once it has switched protocols (`101`).
pub async fn switched(response: &mut http::Response<Incoming>) -> Result<UpgradedIo, hyper::Error> {
    hyper::upgrade::on(response).await.map(TokioIo::new)
}

/// Copies bytes both ways between `a` and `b` until both directions have ended (each side's
/// end of input is passed on as a shutdown of the other's output), or one fails.
pub async fn splice<A, B>(mut a: A, mut b: B)
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    if let Err(e) = tokio::io::copy_bidirectional(&mut a, &mut b).await {
        tracing::debug!(error = %e, "spliced connection ended");
    }
}

/// Whether `headers` ask for a connection upgrade (`Connection: upgrade` with an `Upgrade`
/// header), as upstream's `httpstream.IsUpgradeRequest`.
pub fn is_upgrade(headers: &http::HeaderMap) -> bool {
    headers.contains_key(http::header::UPGRADE)
        && headers
            .get_all(http::header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|token| token.trim().eq_ignore_ascii_case("upgrade"))
}

/// Whether `headers` ask for a WebSocket.
pub fn is_websocket(headers: &http::HeaderMap) -> bool {
    is_upgrade(headers)
        && headers
            .get(http::header::UPGRADE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("websocket"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> http::HeaderMap {
        let mut map = http::HeaderMap::new();
        for (k, v) in pairs {
            map.append(*k, http::HeaderValue::from_static(v));
        }
        map
    }

    #[test]
    fn upgrade_requests_are_recognised_by_their_headers() {
        assert!(is_upgrade(&headers(&[
            ("connection", "keep-alive, Upgrade"),
            ("upgrade", "SPDY/3.1"),
        ])));
        assert!(!is_upgrade(&headers(&[("upgrade", "SPDY/3.1")])));
        assert!(!is_websocket(&headers(&[
            ("connection", "Upgrade"),
            ("upgrade", "SPDY/3.1"),
        ])));
        assert!(is_websocket(&headers(&[
            ("connection", "Upgrade"),
            ("upgrade", "websocket"),
        ])));
    }

    #[tokio::test]
    async fn an_upgraded_connection_carries_bytes_both_ways() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (client, server) = tokio::io::duplex(4096);
        // A peer that answers the upgrade by hand, then echoes.
        let peer = tokio::spawn(async move {
            let mut server = server;
            let mut buf = vec![0u8; 1024];
            let mut head = Vec::new();
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = server.read(&mut buf).await.unwrap();
                head.extend_from_slice(&buf[..n]);
            }
            let text = String::from_utf8_lossy(&head).to_lowercase();
            assert!(text.starts_with("post /exec/x http/1.1"), "{text}");
            assert!(text.contains("upgrade: spdy/3.1"), "{text}");
            server
                .write_all(
                    b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n",
                )
                .await
                .unwrap();
            let n = server.read(&mut buf).await.unwrap();
            server.write_all(&buf[..n]).await.unwrap();
        });
        let request = http::Request::post("/exec/x")
            .header(http::header::HOST, "localhost")
            .header(http::header::CONNECTION, "Upgrade")
            .header(http::header::UPGRADE, "SPDY/3.1")
            .body(Empty::<Bytes>::new())
            .unwrap();
        let mut response = send(client, request).await.unwrap();
        assert_eq!(response.status(), http::StatusCode::SWITCHING_PROTOCOLS);
        assert_eq!(
            response.headers()["x-stream-protocol-version"],
            "v4.channel.k8s.io"
        );
        let mut io = switched(&mut response).await.unwrap();
        io.write_all(b"ping").await.unwrap();
        let mut echoed = [0u8; 4];
        io.read_exact(&mut echoed).await.unwrap();
        assert_eq!(&echoed, b"ping");
        peer.await.unwrap();
    }
}

//! HTTP/1.1 as a client over a connection the caller opened: one request, its response with a
//! streaming body, and, when the peer switched protocols (`101`), the upgraded connection.
//! The API server reaches kubelets this way and the kubelet reaches the runtime's streaming
//! server; [`splice`] then joins an upgraded connection to another.

use hyper::body::Incoming;
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

/// An upgraded connection, readable and writable with tokio's traits.
pub type UpgradedIo = TokioIo<Upgraded>;

/// Sends `request` over `io` (a fresh connection: TCP, or TLS over TCP) and returns the
/// response. The connection serves this one request; it stays open for an upgrade. Nothing the
/// peer sends is read before the request is written ([`WriteFirst`]).
pub async fn send<IO, B>(
    io: IO,
    request: http::Request<B>,
) -> Result<http::Response<Incoming>, hyper::Error>
where
    IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let io = WriteFirst {
        io,
        written: false,
        reader: None,
    };
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

/// A client connection whose reads wait for its first write. Hyper's client connection takes
/// bytes that arrive while no request is written as an unexpected message and closes (the
/// request then fails with "operation was canceled"): a peer that speaks as soon as it
/// accepts (an upgrade server answering `101` at once) lost that race whenever the connection
/// task ran before the request was queued. Go's proxy writes the request and then reads the
/// answer, whatever arrived meanwhile; this restores that order.
struct WriteFirst<IO> {
    io: IO,
    written: bool,
    reader: Option<std::task::Waker>,
}

impl<IO> WriteFirst<IO> {
    fn wrote(&mut self, n: usize) {
        if n > 0 && !self.written {
            self.written = true;
            if let Some(reader) = self.reader.take() {
                reader.wake();
            }
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for WriteFirst<IO> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if !self.written {
            self.reader = Some(cx.waker().clone());
            return std::task::Poll::Pending;
        }
        std::pin::Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for WriteFirst<IO> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let polled = std::pin::Pin::new(&mut self.io).poll_write(cx, buf);
        if let std::task::Poll::Ready(Ok(n)) = polled {
            self.wrote(n);
        }
        polled
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let polled = std::pin::Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        if let std::task::Poll::Ready(Ok(n)) = polled {
            self.wrote(n);
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_shutdown(cx)
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
    #![allow(clippy::unwrap_used)]

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use bytes::Bytes;
    use http_body_util::Empty;

    use super::*;

    /// A backend that answers an upgrade the moment it accepts, before the request reaches it
    /// (the bytes are waiting before the client connection starts): the request is still
    /// written, and the answer read after it.
    #[tokio::test]
    async fn a_backend_that_answers_before_the_request_is_read_after_it() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let backend = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            socket
                .write_all(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
                .await
                .unwrap();
            let mut request = Vec::new();
            let mut chunk = [0u8; 1024];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = socket.read(&mut chunk).await.unwrap();
                assert!(n > 0, "the request never came");
                request.extend_from_slice(&chunk[..n]);
            }
            String::from_utf8(request).unwrap()
        });
        let tcp = tokio::net::TcpStream::connect(address).await.unwrap();
        // The answer is in the socket before the client connection is polled.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let request = http::Request::builder()
            .uri("/stream")
            .header(http::header::HOST, "backend")
            .header(http::header::CONNECTION, "Upgrade")
            .header(http::header::UPGRADE, "echo")
            .body(Empty::<Bytes>::new())
            .unwrap();
        let response = send(Box::new(tcp), request).await.unwrap();
        assert_eq!(response.status(), http::StatusCode::SWITCHING_PROTOCOLS);
        let received = backend.await.unwrap();
        assert!(
            received.starts_with("GET /stream HTTP/1.1\r\n"),
            "{received}"
        );
    }

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

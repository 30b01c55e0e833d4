//! The streaming protocols the API server uses for `exec`, `attach` and `port-forward`.
//!
//! `kubectl exec`, `attach` and `port-forward` upgrade an HTTP request to a multiplexed byte
//! stream and then open one stream per channel (stdin, stdout, stderr, the error channel, terminal
//! resizes; or a data and an error stream per forwarded connection). The API server speaks that
//! protocol to the client and again to the node's streaming server (the kubelet's, or the
//! container runtime's CRI streaming server), relaying the streams between the two.
//!
//! - [`spdy`]: SPDY/3.1 sessions, wire-compatible with Go's `github.com/moby/spdystream`, which
//!   client-go, the kubelet and containerd's CRI streaming server use.
//! - [`upgrade`]: HTTP/1.1 upgrades as a client, and joining two upgraded connections.
//! - [`websocket`]: the server side of the WebSocket handshake and the channel framing of
//!   Kubernetes' WebSocket subprotocols.
//! - [`remotecommand`]: `exec` and `attach` over WebSocket translated into SPDY.
//! - [`portforward`]: port-forwarding over WebSocket, tunnelled SPDY or channels, into SPDY.

#![warn(missing_docs)]

pub mod portforward;
pub mod remotecommand;
pub mod spdy;
pub mod upgrade;
pub mod websocket;

/// Ends a translated session's SPDY side without waiting for the peer: its GOAWAY is flushed in
/// the background while the client side finishes.
pub(crate) fn spdy_end(session: &spdy::Session) {
    let session = session.clone();
    tokio::spawn(async move { session.close().await });
}

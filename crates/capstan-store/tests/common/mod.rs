//! Helpers shared by the etcd backend's test files.

use std::time::Duration;

use capstan_store::{WatchEvent, WatchStream};
use futures::StreamExt;

/// The next `n` events of `stream`, failing the test on an error, an end, or a wait of more
/// than `timeout` for one event.
pub async fn next_events(stream: &mut WatchStream, n: usize, timeout: Duration) -> Vec<WatchEvent> {
    let mut events = Vec::new();
    while events.len() < n {
        match tokio::time::timeout(timeout, stream.next()).await {
            Ok(Some(Ok(event))) => events.push(event),
            Ok(Some(Err(error))) => panic!("watch failed after {} events: {error}", events.len()),
            Ok(None) => panic!("watch ended after {} events", events.len()),
            Err(_) => panic!("timed out after {} of {n} events", events.len()),
        }
    }
    events
}

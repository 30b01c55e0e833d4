//! The audit webhook backend, as upstream's (`--audit-webhook-config-file`,
//! `k8s.io/apiserver/plugin/pkg/audit/webhook` behind `.../audit/buffered`): events are posted
//! as `audit.k8s.io/v1` EventLists to the service the kubeconfig file names, retried with
//! exponential backoff from `--audit-webhook-initial-backoff` (10 s) on transient errors.
//!
//! `--audit-webhook-mode`:
//! - `batch` (default): events wait in a buffer of `--audit-webhook-batch-buffer-size`
//!   (10000; an event that finds it full is dropped and logged, `audit buffer queue
//!   blocked`); a batch goes when it holds `--audit-webhook-batch-max-size` (400) events or
//!   `--audit-webhook-batch-max-wait` (30 s) has passed, each batch posted on its own task, at
//!   most `--audit-webhook-batch-throttle-qps` (10) batches a second with bursts of
//!   `--audit-webhook-batch-throttle-burst` (15) unless `--audit-webhook-batch-throttle-enable`
//!   is false; what is buffered is still sent when the server stops;
//! - `blocking`: each event is posted before the request goes on; failures are logged;
//! - `blocking-strict`: the same, and a request whose `RequestReceived` event cannot be
//!   delivered fails (500).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::remote::{Backoff, Service};

/// `--audit-webhook-mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `batch`.
    Batch,
    /// `blocking`.
    Blocking,
    /// `blocking-strict`.
    BlockingStrict,
}

impl Mode {
    /// The mode named `text`, in upstream's words when it is none.
    pub fn parse(text: &str) -> Result<Mode, String> {
        match text {
            "batch" => Ok(Mode::Batch),
            "blocking" => Ok(Mode::Blocking),
            "blocking-strict" => Ok(Mode::BlockingStrict),
            other => Err(format!(
                "invalid audit webhook mode {other}, allowed modes are \
                 \"batch,blocking,blocking-strict\""
            )),
        }
    }
}

/// How batches are made (`--audit-webhook-batch-*`), upstream's defaults by default.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Batching {
    /// The most events buffered.
    pub buffer_size: usize,
    /// The most events in a batch.
    pub max_size: usize,
    /// The longest an event waits for its batch to fill.
    pub max_wait: Duration,
    /// Batches a second and burst (none: unthrottled).
    pub throttle: Option<(f64, u32)>,
}

impl Default for Batching {
    fn default() -> Self {
        Batching {
            buffer_size: 10_000,
            max_size: 400,
            max_wait: Duration::from_secs(30),
            throttle: Some((10.0, 15)),
        }
    }
}

/// Events (each already encoded) as one `audit.k8s.io/v1` EventList.
fn event_list(events: &[Vec<u8>]) -> Vec<u8> {
    let mut body =
        br#"{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":["#.to_vec();
    for (i, event) in events.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(event);
    }
    body.extend_from_slice(b"]}");
    body
}

/// Posts `events`; the failure, logged.
async fn send(service: &Service, backoff: Backoff, events: &[Vec<u8>]) -> Result<(), String> {
    service
        .post_retrying(&event_list(events), backoff)
        .await
        .map(drop)
        .map_err(|error| {
            tracing::error!(%error, events = events.len(), "Error in audit plugin 'webhook' affecting events");
            error
        })
}

/// A token bucket: `qps` a second, `burst` at once.
struct Throttle {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl Throttle {
    fn new(qps: f64, burst: u32) -> Throttle {
        let burst = f64::from(burst.max(1));
        Throttle {
            qps: qps.max(f64::MIN_POSITIVE),
            burst,
            tokens: burst,
            last: Instant::now(),
        }
    }

    /// Waits for a token.
    async fn accept(&mut self) {
        let now = Instant::now();
        self.tokens =
            (self.tokens + now.duration_since(self.last).as_secs_f64() * self.qps).min(self.burst);
        self.last = now;
        if self.tokens < 1.0 {
            let wait = Duration::from_secs_f64((1.0 - self.tokens) / self.qps);
            tokio::time::sleep(wait).await;
            self.tokens = 1.0;
            self.last = Instant::now();
        }
        self.tokens -= 1.0;
    }
}

/// The audit webhook backend.
pub(crate) struct AuditWebhook {
    mode: Mode,
    service: Arc<Service>,
    backoff: Backoff,
    /// The buffer, in batch mode.
    buffer: Option<mpsc::Sender<Vec<u8>>>,
}

impl std::fmt::Debug for AuditWebhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditWebhook")
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl AuditWebhook {
    /// The backend posting to `service` in `mode`, retrying after `initial_backoff`; in batch
    /// mode its batching task starts (on the current runtime).
    pub(crate) fn new(
        service: Service,
        mode: Mode,
        batching: Batching,
        initial_backoff: Duration,
    ) -> AuditWebhook {
        let service = Arc::new(service);
        let backoff = Backoff {
            initial: initial_backoff,
            steps: 5,
        };
        let buffer = (mode == Mode::Batch).then(|| {
            let (sender, receiver) = mpsc::channel(batching.buffer_size.max(1));
            tokio::spawn(batch(receiver, service.clone(), batching, backoff));
            sender
        });
        AuditWebhook {
            mode,
            service,
            backoff,
            buffer,
        }
    }

    /// Takes one event: buffered in batch mode, else posted now. False only when a
    /// `blocking-strict` webhook could not take it.
    pub(crate) async fn process(&self, event: Vec<u8>) -> bool {
        match &self.buffer {
            Some(buffer) => {
                enqueue(buffer, event);
                true
            }
            None => {
                let sent = send(&self.service, self.backoff, &[event]).await;
                sent.is_ok() || self.mode != Mode::BlockingStrict
            }
        }
    }

    /// Takes one event where nobody can wait for it (a long-running answer's end): buffered,
    /// or posted on a task of its own.
    pub(crate) fn process_detached(&self, event: Vec<u8>) {
        match &self.buffer {
            Some(buffer) => enqueue(buffer, event),
            None => {
                let (service, backoff) = (self.service.clone(), self.backoff);
                tokio::spawn(async move {
                    let _ = send(&service, backoff, &[event]).await;
                });
            }
        }
    }
}

fn enqueue(buffer: &mpsc::Sender<Vec<u8>>, event: Vec<u8>) {
    if buffer.try_send(event).is_err() {
        tracing::error!(
            error = "audit buffer queue blocked",
            "Error in audit plugin 'buffered' affecting 1 audit events"
        );
    }
}

/// The batching task: collects up to `max_size` events or for `max_wait`, then posts the
/// batch on a task of its own after the throttle lets it; once the backend is gone, what
/// remains is sent.
async fn batch(
    mut buffer: mpsc::Receiver<Vec<u8>>,
    service: Arc<Service>,
    batching: Batching,
    backoff: Backoff,
) {
    let mut throttle = batching
        .throttle
        .map(|(qps, burst)| Throttle::new(qps, burst));
    let max_size = batching.max_size.max(1);
    let mut open = true;
    while open {
        let deadline = Instant::now() + batching.max_wait;
        let mut events = Vec::new();
        while events.len() < max_size {
            match tokio::time::timeout_at(deadline, buffer.recv()).await {
                Ok(Some(event)) => events.push(event),
                Ok(None) => {
                    open = false;
                    break;
                }
                Err(_) => break,
            }
        }
        if events.is_empty() {
            continue;
        }
        if let Some(throttle) = &mut throttle {
            throttle.accept().await;
        }
        let service = service.clone();
        let sending = tokio::spawn(async move {
            let _ = send(&service, backoff, &events).await;
        });
        if !open {
            let _ = sending.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use http_body_util::{BodyExt as _, Full};
    use hyper_util::rt::TokioIo;
    use serde_json::Value;

    use super::*;

    /// A webhook on loopback keeping each EventList it receives, answering `code`.
    async fn receiver(code: u16) -> (Service, Arc<Mutex<Vec<Value>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let kept = seen.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let kept = kept.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(
                        move |request: http::Request<hyper::body::Incoming>| {
                            let kept = kept.clone();
                            async move {
                                let body = request.into_body().collect().await.unwrap().to_bytes();
                                kept.lock()
                                    .unwrap()
                                    .push(serde_json::from_slice::<Value>(&body).unwrap());
                                Ok::<_, std::convert::Infallible>(
                                    http::Response::builder()
                                        .status(code)
                                        .body(Full::new(bytes::Bytes::from_static(b"{}")))
                                        .unwrap(),
                                )
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), service)
                        .await;
                });
            }
        });
        let service = Service::new(capstan_client::credentials::ServiceKubeconfig {
            server: format!("http://127.0.0.1:{port}/audit"),
            ..Default::default()
        })
        .unwrap();
        (service, seen)
    }

    fn event(n: usize) -> Vec<u8> {
        format!(r#"{{"kind":"Event","apiVersion":"audit.k8s.io/v1","auditID":"{n}"}}"#).into_bytes()
    }

    fn ids(list: &Value) -> Vec<String> {
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["auditID"].as_str().unwrap().to_owned())
            .collect()
    }

    async fn until(what: &str, mut done: impl FnMut() -> bool) {
        for _ in 0..200 {
            if done() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("timed out waiting for {what}");
    }

    #[test]
    fn event_lists_are_audit_v1() {
        let list: Value = serde_json::from_slice(&event_list(&[event(1), event(2)])).unwrap();
        assert_eq!(list["kind"], "EventList");
        assert_eq!(list["apiVersion"], "audit.k8s.io/v1");
        assert_eq!(ids(&list), ["1", "2"]);
        let empty: Value = serde_json::from_slice(&event_list(&[])).unwrap();
        assert_eq!(empty["items"], serde_json::json!([]));
    }

    #[tokio::test]
    async fn batches_go_when_full_or_after_the_wait() {
        let (service, seen) = receiver(200).await;
        let webhook = AuditWebhook::new(
            service,
            Mode::Batch,
            Batching {
                max_size: 3,
                max_wait: Duration::from_millis(300),
                throttle: None,
                ..Batching::default()
            },
            Duration::from_millis(1),
        );
        for n in 0..4 {
            assert!(webhook.process(event(n)).await);
        }
        // Three make a full batch at once; the fourth waits for the timer.
        until("the full batch", || seen.lock().unwrap().len() == 1).await;
        assert_eq!(ids(&seen.lock().unwrap()[0]), ["0", "1", "2"]);
        until("the timed batch", || seen.lock().unwrap().len() == 2).await;
        assert_eq!(ids(&seen.lock().unwrap()[1]), ["3"]);
        // What is buffered when the backend goes is still sent.
        webhook.process_detached(event(9));
        drop(webhook);
        until("the last batch", || seen.lock().unwrap().len() == 3).await;
    }

    #[tokio::test]
    async fn a_full_buffer_drops_events() {
        // A webhook nobody answers, so nothing leaves the buffer: a one-event buffer with
        // one-event batches holds at most the batch in flight and one more.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let _hold = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((tcp, _)) = listener.accept().await {
                held.push(tcp);
            }
        });
        let service = Service::new(capstan_client::credentials::ServiceKubeconfig {
            server: format!("http://127.0.0.1:{port}/"),
            ..Default::default()
        })
        .unwrap();
        let webhook = AuditWebhook::new(
            service,
            Mode::Batch,
            Batching {
                buffer_size: 1,
                max_size: 1,
                max_wait: Duration::from_secs(60),
                throttle: Some((0.001, 1)),
            },
            Duration::from_millis(1),
        );
        let buffer = webhook.buffer.clone().unwrap();
        for n in 0..5 {
            // Never refused: batch mode does not fail requests.
            assert!(webhook.process(event(n)).await);
        }
        assert_eq!(
            buffer.capacity(),
            0,
            "the buffer is full, the rest were dropped"
        );
    }

    #[tokio::test]
    async fn blocking_modes_post_each_event_and_strict_reports_failures() {
        let (service, seen) = receiver(200).await;
        let blocking = AuditWebhook::new(
            service,
            Mode::Blocking,
            Batching::default(),
            Duration::from_millis(1),
        );
        assert!(blocking.process(event(1)).await);
        assert_eq!(seen.lock().unwrap().len(), 1, "posted before returning");
        let (failing, seen) = receiver(403).await;
        let lenient = AuditWebhook::new(
            failing,
            Mode::Blocking,
            Batching::default(),
            Duration::from_millis(1),
        );
        assert!(lenient.process(event(2)).await);
        let (failing, _) = receiver(403).await;
        let strict = AuditWebhook::new(
            failing,
            Mode::BlockingStrict,
            Batching::default(),
            Duration::from_millis(1),
        );
        assert!(!strict.process(event(3)).await);
        assert_eq!(seen.lock().unwrap().len(), 1);
    }

    #[test]
    fn modes_are_upstreams() {
        assert_eq!(Mode::parse("batch"), Ok(Mode::Batch));
        assert_eq!(Mode::parse("blocking-strict"), Ok(Mode::BlockingStrict));
        assert_eq!(
            Mode::parse("async").unwrap_err(),
            "invalid audit webhook mode async, allowed modes are \"batch,blocking,blocking-strict\""
        );
    }
}

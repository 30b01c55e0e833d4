//! The endpoint selector: one connection per etcd member, requests spread round-robin over the
//! members that answer, and failover on connection errors with upstream clientv3's retry rules.
//!
//! `etcd-client`'s own multi-endpoint client is a tonic balance channel over lazy connections: a
//! dead member stays in its set and keeps receiving its share of requests, each failing with
//! "tcp connect error", and nothing moves the request to a live member. So each member gets a
//! client of its own here, and this module decides where a request goes:
//!
//! - Requests rotate over the healthy members (upstream's round-robin balancer, which only
//!   picks ready connections). A member is marked unhealthy when a request to it fails in the
//!   transport (the connection was refused, broke or timed out, as opposed to an error etcd
//!   answered); it is skipped until a background probe (a count-only range, with backoff) gets
//!   an answer from it again, so a restarted member is back in use within
//!   [`PROBE_INTERVAL_MAX`]. When every member is unhealthy they are all tried anyway, the one
//!   that failed longest ago first.
//! - What is retried on the next member follows upstream's retry interceptor
//!   (`client/v3/retry_interceptor.go`, `retry.go`): [`Policy::Repeatable`] requests (ranges,
//!   lease grants) are retried on Unavailable and on transport failures;
//!   [`Policy::NonRepeatable`] ones (transactions, compactions) only when it is certain they were
//!   never sent, which is when the connection could not be established (tonic's
//!   `ConnectError`). Any other failure of a mutation surfaces, because it may have been applied.
//! - Retries go round the members and then back off (from [`RETRY_BACKOFF_INITIAL`] doubling to
//!   [`RETRY_BACKOFF_MAX`]) until [`RETRY_BUDGET`] has passed since the request started; every
//!   member is tried at least once.

use std::error::Error as _;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, GetOptions, KvClient, LeaseClient, WatchClient};
use tokio::time::Instant;

use super::MAX_DECODING_MESSAGE_BYTES;
use crate::{Result, StoreError};

/// How long a request keeps being retried across members before its last error surfaces.
pub(super) const RETRY_BUDGET: Duration = Duration::from_secs(2);
/// The wait after a round in which every member failed, doubled each round up to the maximum.
const RETRY_BACKOFF_INITIAL: Duration = Duration::from_millis(25);
const RETRY_BACKOFF_MAX: Duration = Duration::from_millis(500);
/// The wait before the first probe of an unhealthy member, doubled after each failed probe up
/// to the maximum.
const PROBE_INTERVAL_INITIAL: Duration = Duration::from_millis(100);
pub(super) const PROBE_INTERVAL_MAX: Duration = Duration::from_secs(2);
/// How long a probe may take before it counts as failed.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether a request may be sent again after a failure that does not prove it was not applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Policy {
    /// Reads and lease grants: retried on Unavailable and on transport failures.
    Repeatable,
    /// Mutations: retried only when they were certainly not sent.
    NonRepeatable,
}

/// A request that failed at `endpoint`.
#[derive(Debug)]
pub(super) struct Failed {
    pub(super) endpoint: String,
    pub(super) error: etcd_client::Error,
}

/// What the selector knows about one member, for diagnostics and tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointState {
    /// The member's client URL.
    pub endpoint: String,
    /// Whether requests go to it (false from a transport failure until a probe succeeds).
    pub healthy: bool,
    /// How many requests it has answered successfully.
    pub answered: u64,
    /// How many watches are open on it.
    pub watches: u64,
}

/// One member: its own client (one HTTP/2 connection) and health.
pub(super) struct Member {
    pub(super) endpoint: String,
    pub(super) kv: KvClient,
    pub(super) watch: WatchClient,
    pub(super) lease: LeaseClient,
    health: Mutex<Health>,
    answered: AtomicU64,
    watches: AtomicU64,
}

#[derive(Default)]
struct Health {
    /// When the member last failed in the transport, while it is considered down.
    down_since: Option<Instant>,
}

impl Member {
    fn is_healthy(&self) -> bool {
        self.health
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .down_since
            .is_none()
    }

    fn down_since(&self) -> Option<Instant> {
        self.health
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .down_since
    }

    /// Counts an open watch for as long as the guard lives.
    pub(super) fn watching(self: &Arc<Self>) -> WatchGuard {
        self.watches.fetch_add(1, Ordering::Relaxed);
        WatchGuard(self.clone())
    }
}

/// Keeps a member's count of open watches.
pub(super) struct WatchGuard(Arc<Member>);

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.0.watches.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The members of one etcd cluster, as given by the endpoints.
pub(super) struct Members {
    members: Vec<Arc<Member>>,
    /// The round-robin position.
    next: AtomicUsize,
}

impl Members {
    /// One lazily connecting client per endpoint; nothing is sent yet.
    pub(super) async fn new(endpoints: &[String], options: &ConnectOptions) -> Result<Arc<Self>> {
        let mut members = Vec::with_capacity(endpoints.len());
        for endpoint in endpoints {
            // One endpoint per client: its balance channel holds a single lazy connection,
            // which reconnects on the next request after a failure.
            let client = Client::connect([endpoint.as_str()], Some(options.clone()))
                .await
                .map_err(|e| {
                    StoreError::unavailable(format!("invalid etcd endpoint {endpoint}: {e}"), e)
                })?;
            members.push(Arc::new(Member {
                endpoint: endpoint.clone(),
                kv: client
                    .kv_client()
                    .max_decoding_message_size(MAX_DECODING_MESSAGE_BYTES),
                watch: client
                    .watch_client()
                    .max_decoding_message_size(MAX_DECODING_MESSAGE_BYTES),
                lease: client.lease_client(),
                health: Mutex::new(Health::default()),
                answered: AtomicU64::new(0),
                watches: AtomicU64::new(0),
            }));
        }
        Ok(Arc::new(Members {
            members,
            next: AtomicUsize::new(0),
        }))
    }

    pub(super) fn states(&self) -> Vec<EndpointState> {
        self.members
            .iter()
            .map(|m| EndpointState {
                endpoint: m.endpoint.clone(),
                healthy: m.is_healthy(),
                answered: m.answered.load(Ordering::Relaxed),
                watches: m.watches.load(Ordering::Relaxed),
            })
            .collect()
    }

    /// The members in the order to try them for one request: the healthy ones round-robin,
    /// then the unhealthy ones, the one down longest first.
    pub(super) fn order(&self) -> Vec<Arc<Member>> {
        let n = self.members.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed) % n;
        let mut healthy = Vec::with_capacity(n);
        let mut down = Vec::new();
        for offset in 0..n {
            let member = &self.members[(start + offset) % n];
            match member.down_since() {
                None => healthy.push(member.clone()),
                Some(since) => down.push((since, member.clone())),
            }
        }
        down.sort_by_key(|(since, _)| *since);
        healthy.extend(down.into_iter().map(|(_, m)| m));
        healthy
    }

    /// Sends a request built by `request` to one member after another, as the policy allows,
    /// until one answers or the retry budget is spent.
    pub(super) async fn call<T, F, Fut>(
        self: &Arc<Self>,
        policy: Policy,
        mut request: F,
    ) -> Result<T, Failed>
    where
        F: FnMut(Arc<Member>) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let deadline = Instant::now() + RETRY_BUDGET;
        let mut backoff = RETRY_BACKOFF_INITIAL;
        loop {
            let mut last = None;
            for member in self.order() {
                let error = match request(member.clone()).await {
                    Ok(answer) => {
                        member.answered.fetch_add(1, Ordering::Relaxed);
                        return Ok(answer);
                    }
                    Err(error) => error,
                };
                let failure = Failure::of(&error);
                if failure.transport {
                    self.mark_down(&member, &error);
                }
                let retry = match policy {
                    Policy::Repeatable => failure.transport || failure.unavailable,
                    Policy::NonRepeatable => failure.unsent,
                };
                let failed = Failed {
                    endpoint: member.endpoint.clone(),
                    error,
                };
                if !retry {
                    return Err(failed);
                }
                tracing::debug!(
                    endpoint = %failed.endpoint,
                    error = %failed.error,
                    "etcd request failed; trying the next member"
                );
                last = Some(failed);
            }
            let Some(last) = last else {
                // `EtcdBackend::connect` refuses an empty endpoint list, so this is not reached.
                return Err(Failed {
                    endpoint: String::new(),
                    error: etcd_client::Error::InvalidArgs("no etcd endpoints".into()),
                });
            };
            if Instant::now() + backoff > deadline {
                return Err(last);
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(RETRY_BACKOFF_MAX);
        }
    }

    /// Records that `member` failed in the transport; the first such failure starts a probe that
    /// marks it healthy again once it answers.
    pub(super) fn mark_down(self: &Arc<Self>, member: &Arc<Member>, error: &dyn std::fmt::Display) {
        {
            let mut health = member.health.lock().unwrap_or_else(|e| e.into_inner());
            if health.down_since.is_some() {
                return;
            }
            health.down_since = Some(Instant::now());
        }
        tracing::warn!(
            endpoint = %member.endpoint,
            %error,
            "etcd member unreachable; sending requests to the other members until it answers again"
        );
        tokio::spawn(probe(Arc::downgrade(self), member.clone()));
    }
}

/// Probes a member that is down until it answers (then marks it healthy) or the client is gone.
async fn probe(members: Weak<Members>, member: Arc<Member>) {
    let mut interval = PROBE_INTERVAL_INITIAL;
    loop {
        tokio::time::sleep(interval).await;
        if members.upgrade().is_none() {
            return;
        }
        let mut kv = member.kv.clone();
        let answer = tokio::time::timeout(
            PROBE_TIMEOUT,
            kv.get(vec![0], Some(GetOptions::new().with_count_only())),
        )
        .await;
        if let Ok(Ok(_)) = answer {
            member
                .health
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .down_since = None;
            tracing::info!(endpoint = %member.endpoint, "etcd member answers again");
            return;
        }
        interval = (interval * 2).min(PROBE_INTERVAL_MAX);
    }
}

/// How a request failed, as far as retrying is concerned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Failure {
    /// The failure came from the connection, not from an answer of etcd.
    pub(super) transport: bool,
    /// The request certainly never reached etcd: the connection could not be established.
    pub(super) unsent: bool,
    /// gRPC status Unavailable (from etcd, such as "leader changed", or from the transport).
    pub(super) unavailable: bool,
}

impl Failure {
    pub(super) fn of(error: &etcd_client::Error) -> Failure {
        match error {
            etcd_client::Error::GRpcStatus(status) => {
                // Statuses tonic makes from a local error carry that error as their source;
                // statuses etcd sent come from the response trailers and carry none.
                let local = status.source().is_some();
                let unsent = local && chain_has_connect_error(status);
                // hyper fails the requests still queued on a connection that closed as
                // "canceled", a broken stream as "unknown", a connection's h2 error as
                // "internal" or "unavailable".
                let transport = unsent
                    || (local
                        && matches!(
                            status.code(),
                            tonic::Code::Unavailable
                                | tonic::Code::Unknown
                                | tonic::Code::Internal
                                | tonic::Code::Cancelled
                        ));
                Failure {
                    transport,
                    unsent,
                    unavailable: status.code() == tonic::Code::Unavailable,
                }
            }
            // The channel could not be built or broke below gRPC.
            etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => Failure {
                transport: true,
                unsent: false,
                unavailable: false,
            },
            _ => Failure::default(),
        }
    }
}

/// Whether tonic's `ConnectError` (the connection to the endpoint could not be established) is
/// among the causes of `status`.
fn chain_has_connect_error(status: &tonic::Status) -> bool {
    let mut cause = status.source();
    while let Some(error) = cause {
        if error.downcast_ref::<tonic::ConnectError>().is_some() {
            return true;
        }
        cause = error.source();
    }
    false
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used)] // a failed step fails the test

    use capstan_testkit::EtcdServer;
    use etcd_client::{Compare, CompareOp, Txn, TxnOp};

    use super::*;

    fn options() -> ConnectOptions {
        ConnectOptions::new().with_connect_timeout(Duration::from_secs(5))
    }

    #[test]
    fn only_unsent_mutations_are_retried() {
        // An answer of etcd: retried for reads only, and the member stays in use.
        let answered = Failure::of(&etcd_client::Error::GRpcStatus(tonic::Status::unavailable(
            "etcdserver: leader changed",
        )));
        assert_eq!(
            answered,
            Failure {
                transport: false,
                unsent: false,
                unavailable: true
            }
        );
        // A connection that broke after the request may have gone out: the member is out, the
        // mutation's error surfaces.
        let broken = Failure::of(&etcd_client::Error::GRpcStatus(tonic::Status::from_error(
            Box::new(std::io::Error::from(std::io::ErrorKind::ConnectionReset)),
        )));
        assert!(broken.transport && !broken.unsent);
        // A connection that could not be established: nothing was sent.
        let refused = Failure::of(&etcd_client::Error::GRpcStatus(tonic::Status::from_error(
            Box::new(tonic::ConnectError(Box::new(std::io::Error::from(
                std::io::ErrorKind::ConnectionRefused,
            )))),
        )));
        assert!(refused.transport && refused.unsent && refused.unavailable);
        // etcd's refusals that no other member would answer differently.
        let compacted = Failure::of(&etcd_client::Error::GRpcStatus(
            tonic::Status::out_of_range("etcdserver: mvcc: required revision has been compacted"),
        ));
        assert_eq!(compacted, Failure::default());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_mutation_refused_a_connection_goes_to_the_next_member() {
        let server = EtcdServer::start().expect("start etcd");
        let dead = format!("http://127.0.0.1:{}", capstan_testkit::free_port());
        let members = Members::new(&[dead.clone(), server.endpoint()], &options())
            .await
            .expect("clients");
        // The first request starts with the first member, which refuses the connection.
        let txn = Txn::new()
            .when([Compare::create_revision("k", CompareOp::Equal, 0)])
            .and_then([TxnOp::put("k", "v", None)]);
        let response = members
            .call(Policy::NonRepeatable, |member| {
                let mut kv = member.kv.clone();
                let txn = txn.clone();
                async move { kv.txn(txn).await }
            })
            .await
            .expect("the transaction reaches the live member");
        assert!(response.succeeded());
        let states = members.states();
        assert!(!states[0].healthy && states[0].answered == 0, "{states:?}");
        assert!(states[1].healthy && states[1].answered == 1, "{states:?}");
        // The dead member now comes last: the next requests go straight to the live one.
        assert_eq!(members.order()[0].endpoint, server.endpoint());
        assert_eq!(members.order()[0].endpoint, server.endpoint());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_mutation_that_may_have_been_sent_is_not_repeated() {
        let server = EtcdServer::start().expect("start etcd");
        let members = Members::new(&[server.endpoint(), server.endpoint()], &options())
            .await
            .expect("clients");
        let mut attempts = 0;
        let failed = members
            .call(Policy::NonRepeatable, |_| {
                attempts += 1;
                async {
                    Err::<(), _>(etcd_client::Error::GRpcStatus(tonic::Status::from_error(
                        Box::new(std::io::Error::from(std::io::ErrorKind::ConnectionReset)),
                    )))
                }
            })
            .await
            .expect_err("the failure surfaces");
        assert_eq!(attempts, 1, "sent once only");
        assert!(matches!(failed.error, etcd_client::Error::GRpcStatus(_)));
        // The same failure of a read is retried on the other member, then after a backoff,
        // until the budget is spent.
        let mut attempts = 0;
        let started = Instant::now();
        members
            .call(Policy::Repeatable, |_| {
                attempts += 1;
                async {
                    Err::<(), _>(etcd_client::Error::GRpcStatus(tonic::Status::unavailable(
                        "etcdserver: leader changed",
                    )))
                }
            })
            .await
            .expect_err("no member answers");
        assert!(attempts > 2, "{attempts} attempts");
        let spent = started.elapsed();
        assert!(
            spent >= RETRY_BUDGET / 2 && spent <= RETRY_BUDGET,
            "{spent:?}"
        );
    }
}

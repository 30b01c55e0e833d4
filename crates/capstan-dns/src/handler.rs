//! The request handler hickory's server calls for every message (UDP and TCP alike): the
//! cluster zone answered from the current [`Snapshot`], everything else forwarded to the
//! upstream resolvers through hickory's resolver (with its cache), as CoreDNS's
//! `forward . /etc/resolv.conf`. An upstream that fails or does not answer in time makes the
//! answer SERVFAIL. Malformed messages are FORMERR (hickory answers those it cannot parse);
//! opcodes other than QUERY are NOTIMP.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use hickory_proto::op::{Edns, Header, HeaderCounts, MessageType, Metadata, OpCode, ResponseCode};
use hickory_proto::rr::{Name, Record, RecordType};
use hickory_resolver::TokioResolver;
use hickory_resolver::config::{NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::net::{DnsError, NetError};
use hickory_server::net::runtime::Time;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;

use crate::answer::{Outcome, Zone};
use crate::records::Snapshot;

/// How long one upstream exchange may take before the next try.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(2);
/// Tries per upstream server.
const UPSTREAM_ATTEMPTS: usize = 2;

/// What an upstream lookup gave.
#[derive(Debug)]
pub struct Forwarded {
    /// The response code.
    pub rcode: ResponseCode,
    /// The answer section.
    pub answers: Vec<Record>,
    /// The authority section (the SOA of a negative answer).
    pub authorities: Vec<Record>,
}

impl Forwarded {
    fn failed() -> Forwarded {
        Forwarded {
            rcode: ResponseCode::ServFail,
            answers: Vec::new(),
            authorities: Vec::new(),
        }
    }
}

/// The upstream resolvers: hickory's resolver over the configured name servers, without
/// search domains or a hosts file (a forwarded name is sent as asked).
#[derive(Clone)]
pub struct Forwarder {
    resolver: Option<TokioResolver>,
}

impl std::fmt::Debug for Forwarder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forwarder")
            .field("configured", &self.resolver.is_some())
            .finish()
    }
}

impl Forwarder {
    /// A forwarder to `servers` (UDP, then TCP for truncated answers); with none, every
    /// forwarded query is SERVFAIL.
    pub fn new(servers: &[SocketAddr]) -> Result<Forwarder, NetError> {
        if servers.is_empty() {
            return Ok(Forwarder { resolver: None });
        }
        let name_servers = servers
            .iter()
            .map(|server| {
                let mut config = NameServerConfig::udp_and_tcp(server.ip());
                for connection in &mut config.connections {
                    connection.port = server.port();
                }
                config
            })
            .collect();
        let config = ResolverConfig::from_parts(None, Vec::new(), name_servers);
        let mut builder = hickory_resolver::Resolver::builder_with_config(
            config,
            TokioRuntimeProvider::default(),
        );
        let options: &mut ResolverOpts = builder.options_mut();
        options.ndots = 0;
        options.timeout = UPSTREAM_TIMEOUT;
        options.attempts = UPSTREAM_ATTEMPTS;
        options.use_hosts_file = ResolveHosts::Never;
        options.preserve_intermediates = true;
        options.try_tcp_on_error = true;
        Ok(Forwarder {
            resolver: Some(builder.build()?),
        })
    }

    /// Looks `name` up upstream.
    pub async fn lookup(&self, name: &Name, qtype: RecordType) -> Forwarded {
        let Some(resolver) = &self.resolver else {
            return Forwarded::failed();
        };
        let mut name = name.clone();
        name.set_fqdn(true);
        match resolver.lookup(name.clone(), qtype).await {
            Ok(lookup) => Forwarded {
                rcode: ResponseCode::NoError,
                answers: lookup.answers().to_vec(),
                authorities: Vec::new(),
            },
            Err(NetError::Dns(DnsError::NoRecordsFound(none))) => Forwarded {
                rcode: none.response_code,
                answers: Vec::new(),
                authorities: none
                    .soa
                    .map(|soa| vec![soa.into_record_of_rdata()])
                    .unwrap_or_default(),
            },
            Err(NetError::Dns(DnsError::ResponseCode(rcode))) => Forwarded {
                rcode,
                ..Forwarded::failed()
            },
            Err(error) => {
                tracing::debug!(%name, %qtype, %error, "upstream lookup failed");
                Forwarded::failed()
            }
        }
    }
}

/// The server's request handler.
#[derive(Debug, Clone)]
pub struct Handler {
    zone: Arc<Zone>,
    snapshot: Arc<ArcSwap<Snapshot>>,
    forwarder: Forwarder,
    /// The server as the metrics name it (`dns://:53`).
    server: String,
}

/// A response ready to be written.
#[derive(Debug, Default)]
pub struct Response {
    /// The header's flags and code.
    pub rcode: ResponseCode,
    /// The AA flag.
    pub authoritative: bool,
    /// The RA flag (set on forwarded answers, as the upstream's are relayed).
    pub recursion_available: bool,
    /// The answer section.
    pub answers: Vec<Record>,
    /// The authority section.
    pub authorities: Vec<Record>,
    /// The additional section.
    pub additionals: Vec<Record>,
}

impl Handler {
    /// A handler answering `zone` from `snapshot` and forwarding the rest to `forwarder`.
    pub fn new(zone: Arc<Zone>, snapshot: Arc<ArcSwap<Snapshot>>, forwarder: Forwarder) -> Handler {
        Handler {
            zone,
            snapshot,
            forwarder,
            server: "dns://:53".to_owned(),
        }
    }

    /// This handler counting its requests as the server on `port` (`dns://:<port>`).
    #[must_use]
    pub fn with_port(mut self, port: u16) -> Handler {
        self.server = format!("dns://:{port}");
        self
    }

    /// The response to one question.
    pub async fn resolve(&self, qname: &Name, qtype: RecordType) -> Response {
        let outcome = {
            let snapshot = self.snapshot.load();
            self.zone.answer(&snapshot, qname, qtype)
        };
        match outcome {
            Outcome::Answer(answer) => {
                let mut answers = answer.answers;
                if let Some((target, qtype)) = answer.chase {
                    let forwarded = self.forwarder.lookup(&target, qtype).await;
                    answers.extend(forwarded.answers);
                }
                Response {
                    rcode: answer.rcode,
                    authoritative: answer.authoritative,
                    recursion_available: false,
                    answers,
                    authorities: answer.authorities,
                    additionals: answer.additionals,
                }
            }
            Outcome::Forward => {
                let forwarded = self.forwarder.lookup(qname, qtype).await;
                Response {
                    rcode: forwarded.rcode,
                    authoritative: false,
                    recursion_available: true,
                    answers: forwarded.answers,
                    authorities: forwarded.authorities,
                    additionals: Vec::new(),
                }
            }
        }
    }
}

/// The records of a section in the order CoreDNS's `loadbalance` plugin (in kubeadm's and
/// k3s's Corefiles) gives them: CNAMEs first, then other records, then the addresses in a
/// random order, then MX records in a random order; so clients that take the first address
/// spread over a headless Service's endpoints.
pub fn load_balanced(records: Vec<Record>) -> Vec<Record> {
    use rand::seq::SliceRandom as _;
    let (mut cnames, mut rest, mut addresses, mut mx) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for record in records {
        match record.record_type() {
            RecordType::CNAME => cnames.push(record),
            RecordType::A | RecordType::AAAA => addresses.push(record),
            RecordType::MX => mx.push(record),
            _ => rest.push(record),
        }
    }
    let mut rng = rand::rng();
    addresses.shuffle(&mut rng);
    mx.shuffle(&mut rng);
    cnames.extend(rest);
    cnames.extend(addresses);
    cnames.extend(mx);
    cnames
}

/// The header of a response to `request` that could not be sent.
fn failed(request: &Request) -> ResponseInfo {
    let mut metadata = Metadata::response_from_request(&request.metadata);
    metadata.response_code = ResponseCode::ServFail;
    ResponseInfo::from(Header {
        metadata,
        counts: HeaderCounts::default(),
    })
}

#[async_trait::async_trait]
impl RequestHandler for Handler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response_handle: R,
    ) -> ResponseInfo {
        let started = std::time::Instant::now();
        let answered = |qtype, rcode, plugin| {
            crate::metrics::answered(&crate::metrics::Answered {
                server: &self.server,
                proto: if request.protocol() == hickory_server::net::xfer::Protocol::Tcp {
                    "tcp"
                } else {
                    "udp"
                },
                ipv6: request.src().is_ipv6(),
                qtype,
                rcode,
                plugin,
                took: started.elapsed(),
            });
        };
        let mut builder = MessageResponseBuilder::from_message_request(request);
        // EDNS is answered with EDNS, advertising the client's size (as CoreDNS's
        // `SizeAndDo`): that is also the size a UDP answer is truncated to.
        let edns = request.edns.as_ref().map(|theirs| {
            let mut ours = Edns::new();
            ours.set_max_payload(theirs.max_payload().max(512));
            ours.set_dnssec_ok(theirs.flags().dnssec_ok);
            ours
        });
        if let Some(edns) = &edns {
            builder.edns(edns);
        }
        let refusal = if request.metadata.message_type != MessageType::Query {
            Some(ResponseCode::FormErr)
        } else if request.metadata.op_code != OpCode::Query {
            Some(ResponseCode::NotImp)
        } else if request.queries.len() != 1 {
            Some(ResponseCode::FormErr)
        } else {
            None
        };
        let query = match (refusal, request.queries.queries().first()) {
            (None, Some(query)) => query.original().clone(),
            (refusal, _) => {
                let code = refusal.unwrap_or(ResponseCode::FormErr);
                answered(
                    request.queries.queries().first().map(|q| q.query_type()),
                    code,
                    "",
                );
                let response = builder.error_msg(&request.metadata, code);
                return match response_handle.send_response(response).await {
                    Ok(info) => info,
                    Err(_) => failed(request),
                };
            }
        };
        let mut response = self.resolve(query.name(), query.query_type()).await;
        if response.rcode == ResponseCode::NoError {
            response.answers = load_balanced(std::mem::take(&mut response.answers));
            response.additionals = load_balanced(std::mem::take(&mut response.additionals));
        }
        // Forwarded answers, and only they, carry the RA flag.
        let plugin = if response.recursion_available {
            "forward"
        } else {
            "kubernetes"
        };
        answered(Some(query.query_type()), response.rcode, plugin);
        let mut metadata = Metadata::response_from_request(&request.metadata);
        metadata.response_code = response.rcode;
        metadata.authoritative = response.authoritative;
        metadata.recursion_available = response.recursion_available;
        let message = builder.build(
            metadata,
            response.answers.iter(),
            response.authorities.iter(),
            std::iter::empty(),
            response.additionals.iter(),
        );
        match response_handle.send_response(message).await {
            Ok(info) => info,
            Err(error) => {
                tracing::debug!(%error, "cannot send a DNS response");
                failed(request)
            }
        }
    }
}

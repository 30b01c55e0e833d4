//! The DNS server's metrics under CoreDNS's names (its `prometheus` plugin), in the process
//! registry (`capstan_client::metrics`): requests by protocol, address family and type,
//! responses by code and by the plugin that answered (`kubernetes` for the cluster zone,
//! `forward` for other names), and request durations. Every query falls in CoreDNS's default
//! server block, zone `.`.

use std::sync::LazyLock;
use std::time::Duration;

use capstan_client::metrics::{buckets, registry};
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    server: String,
    zone: &'static str,
    view: &'static str,
    proto: &'static str,
    family: &'static str,
    r#type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResponseLabels {
    server: String,
    zone: &'static str,
    view: &'static str,
    rcode: String,
    plugin: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DurationLabels {
    server: String,
    zone: &'static str,
    view: &'static str,
    r#type: &'static str,
}

struct Metrics {
    requests: Family<RequestLabels, Counter>,
    responses: Family<ResponseLabels, Counter>,
    durations: Family<DurationLabels, Histogram, fn() -> Histogram>,
}

/// CoreDNS's `plugin.TimeBuckets`: 0.25 ms doubling 16 times.
fn duration_histogram() -> Histogram {
    Histogram::new(buckets(0.00025, 2.0, 16))
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let metrics = Metrics {
        requests: Family::default(),
        responses: Family::default(),
        durations: Family::new_with_constructor(duration_histogram),
    };
    let mut registry = registry();
    registry.register(
        "coredns_dns_requests",
        "Counter of DNS requests made per zone, protocol and family.",
        metrics.requests.clone(),
    );
    registry.register(
        "coredns_dns_responses",
        "Counter of response status codes.",
        metrics.responses.clone(),
    );
    registry.register(
        "coredns_dns_request_duration_seconds",
        "Histogram of the time (in seconds) each request took per zone.",
        metrics.durations.clone(),
    );
    metrics
});

/// The query types CoreDNS counts by name; others count as `other`.
fn type_label(qtype: Option<RecordType>) -> &'static str {
    use RecordType::*;
    match qtype {
        Some(A) => "A",
        Some(AAAA) => "AAAA",
        Some(ANY) => "ANY",
        Some(AXFR) => "AXFR",
        Some(CAA) => "CAA",
        Some(CNAME) => "CNAME",
        Some(DNSKEY) => "DNSKEY",
        Some(DS) => "DS",
        Some(HINFO) => "HINFO",
        Some(HTTPS) => "HTTPS",
        Some(IXFR) => "IXFR",
        Some(MX) => "MX",
        Some(NAPTR) => "NAPTR",
        Some(NS) => "NS",
        Some(NSEC) => "NSEC",
        Some(NSEC3) => "NSEC3",
        Some(OPT) => "OPT",
        Some(PTR) => "PTR",
        Some(RRSIG) => "RRSIG",
        Some(SOA) => "SOA",
        Some(SRV) => "SRV",
        Some(SVCB) => "SVCB",
        Some(TXT) => "TXT",
        _ => "other",
    }
}

/// The response code as CoreDNS names it (`NOERROR`, `NXDOMAIN`, ...).
fn rcode_label(rcode: ResponseCode) -> String {
    match rcode {
        ResponseCode::NoError => "NOERROR".to_owned(),
        ResponseCode::FormErr => "FORMERR".to_owned(),
        ResponseCode::ServFail => "SERVFAIL".to_owned(),
        ResponseCode::NXDomain => "NXDOMAIN".to_owned(),
        ResponseCode::NotImp => "NOTIMP".to_owned(),
        ResponseCode::Refused => "REFUSED".to_owned(),
        other => u16::from(other).to_string(),
    }
}

/// One answered request.
pub(crate) struct Answered<'a> {
    /// `dns://:<port>`, as CoreDNS names its server.
    pub server: &'a str,
    /// `udp` or `tcp`.
    pub proto: &'static str,
    /// Whether the client's address is IPv6.
    pub ipv6: bool,
    /// The question's type, if there was one.
    pub qtype: Option<RecordType>,
    /// The response's code.
    pub rcode: ResponseCode,
    /// `kubernetes`, `forward`, or empty when refused before any plugin.
    pub plugin: &'static str,
    /// How long answering took.
    pub took: Duration,
}

/// Counts an answered request.
pub(crate) fn answered(request: &Answered<'_>) {
    let r#type = type_label(request.qtype);
    METRICS
        .requests
        .get_or_create(&RequestLabels {
            server: request.server.to_owned(),
            zone: ".",
            view: "",
            proto: request.proto,
            family: if request.ipv6 { "2" } else { "1" },
            r#type,
        })
        .inc();
    METRICS
        .responses
        .get_or_create(&ResponseLabels {
            server: request.server.to_owned(),
            zone: ".",
            view: "",
            rcode: rcode_label(request.rcode),
            plugin: request.plugin,
        })
        .inc();
    METRICS
        .durations
        .get_or_create(&DurationLabels {
            server: request.server.to_owned(),
            zone: ".",
            view: "",
            r#type,
        })
        .observe(request.took.as_secs_f64());
}

//! The name → answer logic against a snapshot of Services and EndpointSlices (every case of
//! the specification, as CoreDNS answers it), the request handler (forwarding, failures,
//! malformed messages) and the server over UDP and TCP.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};
use hickory_proto::serialize::binary::BinEncoder;
use hickory_resolver::net::client::{Client, ClientHandle};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::net::tcp::TcpClientStream;
use hickory_resolver::net::udp::UdpClientStream;
use hickory_resolver::net::xfer::Protocol;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::{MessageResponse, MessageResponseBuilder};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::json;

use crate::answer::{Answer, Outcome, Zone};
use crate::handler::{Forwarder, Handler};
use crate::records::{ServiceInfo, SliceInfo, Snapshot};

fn service(namespace: &str, name: &str, spec: serde_json::Value) -> ServiceInfo {
    let object: Service = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace}, "spec": spec,
    }))
    .unwrap();
    ServiceInfo::from_service(&object).unwrap()
}

fn slice(
    namespace: &str,
    service: &str,
    ports: serde_json::Value,
    endpoints: serde_json::Value,
) -> SliceInfo {
    let family = if endpoints.to_string().contains(':') {
        "IPv6"
    } else {
        "IPv4"
    };
    let object: EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": format!("{service}-abcde"), "namespace": namespace,
                     "labels": {"kubernetes.io/service-name": service}},
        "addressType": family, "ports": ports, "endpoints": endpoints,
    }))
    .unwrap();
    SliceInfo::from_slice(&object).unwrap()
}

/// The cluster of the tests.
fn snapshot() -> Snapshot {
    let services = [
        service(
            "default",
            "web",
            json!({"type": "ClusterIP", "clusterIP": "10.43.0.20", "clusterIPs": ["10.43.0.20"],
                   "ports": [{"name": "http", "port": 80, "protocol": "TCP"},
                             {"name": "metrics", "port": 9090, "protocol": "TCP"}]}),
        ),
        service(
            "default",
            "dual",
            json!({"type": "NodePort", "clusterIP": "10.43.0.21",
                   "clusterIPs": ["10.43.0.21", "fd00::21"],
                   "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}),
        ),
        service(
            "default",
            "db",
            json!({"clusterIP": "None", "clusterIPs": ["None"],
                   "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}]}),
        ),
        service(
            "default",
            "starting",
            json!({"clusterIP": "None", "publishNotReadyAddresses": true,
                   "ports": [{"name": "peer", "port": 2380, "protocol": "TCP"}]}),
        ),
        service("default", "empty", json!({"clusterIP": "None"})),
        service(
            "default",
            "ext",
            json!({"type": "ExternalName", "externalName": "example.com"}),
        ),
        service(
            "default",
            "alias",
            json!({"type": "ExternalName", "externalName": "web.default.svc.cluster.local"}),
        ),
        service(
            "default",
            "chain",
            json!({"type": "ExternalName", "externalName": "ext.default.svc.cluster.local"}),
        ),
        service(
            "default",
            "dangling",
            json!({"type": "ExternalName", "externalName": "gone.default.svc.cluster.local"}),
        ),
        service(
            "other",
            "udp",
            json!({"clusterIP": "10.43.0.30",
                   "ports": [{"name": "dns", "port": 53, "protocol": "UDP"}]}),
        ),
    ];
    let slices = [
        slice(
            "default",
            "db",
            json!([{"name": "pg", "port": 5432, "protocol": "TCP"}]),
            json!([
                {"addresses": ["10.42.0.5"], "hostname": "db-0", "conditions": {"ready": true}},
                {"addresses": ["10.42.0.6"], "conditions": {"ready": true}},
                {"addresses": ["10.42.0.7"], "conditions": {"ready": false}},
                {"addresses": ["10.42.0.4"]},
            ]),
        ),
        slice(
            "default",
            "starting",
            json!([{"name": "peer", "port": 2380, "protocol": "TCP"}]),
            json!([{"addresses": ["10.42.0.8"], "hostname": "etcd-0",
                    "conditions": {"ready": false}}]),
        ),
        slice(
            "default",
            "web",
            json!([{"name": "http", "port": 8080, "protocol": "TCP"}]),
            json!([{"addresses": ["10.42.0.9"], "conditions": {"ready": true}}]),
        ),
        slice(
            "default",
            "db",
            json!([{"name": "pg", "port": 5432, "protocol": "TCP"}]),
            json!([{"addresses": ["fd00::42:6"], "conditions": {"ready": true}}]),
        ),
    ];
    Snapshot::build(
        ["default", "other", "kube-system"],
        services.iter(),
        slices.iter(),
        true,
        1_700_000_000,
    )
}

fn zone() -> Zone {
    Zone::new(
        "cluster.local",
        5,
        vec![(
            Name::from_ascii("kube-dns.kube-system.svc.cluster.local.").unwrap(),
            IpAddr::from([10, 43, 0, 10]),
        )],
    )
    .unwrap()
}

fn name(text: &str) -> Name {
    Name::from_ascii(text).unwrap()
}

fn ask(qname: &str, qtype: RecordType) -> Answer {
    match zone().answer(&snapshot(), &name(qname), qtype) {
        Outcome::Answer(answer) => answer,
        Outcome::Forward => panic!("{qname} {qtype} was forwarded"),
    }
}

/// The answer section as text, `name type data` per record.
fn rendered(records: &[Record]) -> Vec<String> {
    records
        .iter()
        .map(|r| format!("{} {} {} {}", r.name, r.ttl, r.record_type(), r.data))
        .collect()
}

fn assert_nxdomain(answer: &Answer) {
    assert_eq!(answer.rcode, ResponseCode::NXDomain, "{answer:?}");
    assert!(answer.authoritative);
    assert!(answer.answers.is_empty());
    assert_eq!(answer.authorities.len(), 1);
    assert_eq!(answer.authorities[0].record_type(), RecordType::SOA);
}

fn assert_nodata(answer: &Answer) {
    assert_eq!(answer.rcode, ResponseCode::NoError, "{answer:?}");
    assert!(answer.authoritative);
    assert!(answer.answers.is_empty(), "{answer:?}");
    assert_eq!(answer.authorities.len(), 1);
    assert_eq!(answer.authorities[0].record_type(), RecordType::SOA);
}

#[test]
fn cluster_ips_answer_a_and_aaaa() {
    let answer = ask("web.default.svc.cluster.local.", RecordType::A);
    assert_eq!(answer.rcode, ResponseCode::NoError);
    assert!(answer.authoritative);
    assert_eq!(
        rendered(&answer.answers),
        ["web.default.svc.cluster.local. 5 A 10.43.0.20"]
    );
    assert!(answer.authorities.is_empty());
    // A ClusterIP service without an IPv6 address: NODATA for AAAA.
    assert_nodata(&ask("web.default.svc.cluster.local.", RecordType::AAAA));
    // Dual stack.
    assert_eq!(
        rendered(&ask("dual.default.svc.cluster.local.", RecordType::AAAA).answers),
        ["dual.default.svc.cluster.local. 5 AAAA fd00::21"]
    );
    assert_eq!(
        rendered(&ask("dual.default.svc.cluster.local.", RecordType::A).answers),
        ["dual.default.svc.cluster.local. 5 A 10.43.0.21"]
    );
    // Case as the client wrote it; the name without the final dot too.
    assert_eq!(
        rendered(&ask("Web.Default.svc.cluster.local", RecordType::A).answers),
        ["Web.Default.svc.cluster.local. 5 A 10.43.0.20"]
    );
    // A port-qualified name answers the address too, as CoreDNS does.
    assert_eq!(
        rendered(&ask("_http._tcp.web.default.svc.cluster.local.", RecordType::A).answers),
        ["_http._tcp.web.default.svc.cluster.local. 5 A 10.43.0.20"]
    );
}

#[test]
fn headless_services_answer_their_ready_endpoints() {
    let answer = ask("db.default.svc.cluster.local.", RecordType::A);
    assert_eq!(
        rendered(&answer.answers),
        [
            "db.default.svc.cluster.local. 5 A 10.42.0.5",
            "db.default.svc.cluster.local. 5 A 10.42.0.6",
            "db.default.svc.cluster.local. 5 A 10.42.0.4",
        ]
    );
    assert_eq!(
        rendered(&ask("db.default.svc.cluster.local.", RecordType::AAAA).answers),
        ["db.default.svc.cluster.local. 5 AAAA fd00::42:6"]
    );
    // publishNotReadyAddresses: addresses that are not ready are answered too.
    assert_eq!(
        rendered(&ask("starting.default.svc.cluster.local.", RecordType::A).answers),
        ["starting.default.svc.cluster.local. 5 A 10.42.0.8"]
    );
    // A headless service without endpoints does not exist for CoreDNS.
    assert_nxdomain(&ask("empty.default.svc.cluster.local.", RecordType::A));
}

#[test]
fn endpoints_answer_by_hostname_and_dashed_address() {
    assert_eq!(
        rendered(&ask("db-0.db.default.svc.cluster.local.", RecordType::A).answers),
        ["db-0.db.default.svc.cluster.local. 5 A 10.42.0.5"]
    );
    assert_eq!(
        rendered(&ask("10-42-0-6.db.default.svc.cluster.local.", RecordType::A).answers),
        ["10-42-0-6.db.default.svc.cluster.local. 5 A 10.42.0.6"]
    );
    assert_eq!(
        rendered(&ask("fd00--42-6.db.default.svc.cluster.local.", RecordType::AAAA).answers),
        ["fd00--42-6.db.default.svc.cluster.local. 5 AAAA fd00::42:6"]
    );
    // An endpoint that has a hostname is not named by its address.
    assert_nxdomain(&ask(
        "10-42-0-5.db.default.svc.cluster.local.",
        RecordType::A,
    ));
    // Not ready.
    assert_nxdomain(&ask(
        "10-42-0-7.db.default.svc.cluster.local.",
        RecordType::A,
    ));
    // The endpoints of a service with a cluster IP have names too.
    assert_eq!(
        rendered(&ask("10-42-0-9.web.default.svc.cluster.local.", RecordType::A).answers),
        ["10-42-0-9.web.default.svc.cluster.local. 5 A 10.42.0.9"]
    );
    // A pod with hostname and subdomain behind a headless service of that name.
    assert_eq!(
        rendered(&ask("etcd-0.starting.default.svc.cluster.local.", RecordType::A).answers),
        ["etcd-0.starting.default.svc.cluster.local. 5 A 10.42.0.8"]
    );
}

#[test]
fn srv_records_name_ports_and_targets() {
    let answer = ask("_http._tcp.web.default.svc.cluster.local.", RecordType::SRV);
    assert_eq!(answer.rcode, ResponseCode::NoError);
    assert_eq!(
        rendered(&answer.answers),
        ["_http._tcp.web.default.svc.cluster.local. 5 SRV 0 100 80 web.default.svc.cluster.local."]
    );
    assert_eq!(
        rendered(&answer.additionals),
        ["web.default.svc.cluster.local. 5 A 10.43.0.20"]
    );
    // Every port of the service, weights shared.
    let answer = ask("web.default.svc.cluster.local.", RecordType::SRV);
    assert_eq!(
        rendered(&answer.answers),
        [
            "web.default.svc.cluster.local. 5 SRV 0 50 80 web.default.svc.cluster.local.",
            "web.default.svc.cluster.local. 5 SRV 0 50 9090 web.default.svc.cluster.local.",
        ]
    );
    assert_eq!(
        rendered(&answer.additionals),
        ["web.default.svc.cluster.local. 5 A 10.43.0.20"]
    );
    // Headless: one target per endpoint, named as the endpoint.
    let answer = ask("_pg._tcp.db.default.svc.cluster.local.", RecordType::SRV);
    assert_eq!(
        rendered(&answer.answers),
        [
            "_pg._tcp.db.default.svc.cluster.local. 5 SRV 0 25 5432 db-0.db.default.svc.cluster.local.",
            "_pg._tcp.db.default.svc.cluster.local. 5 SRV 0 25 5432 10-42-0-6.db.default.svc.cluster.local.",
            "_pg._tcp.db.default.svc.cluster.local. 5 SRV 0 25 5432 10-42-0-4.db.default.svc.cluster.local.",
            "_pg._tcp.db.default.svc.cluster.local. 5 SRV 0 25 5432 fd00--42-6.db.default.svc.cluster.local.",
        ]
    );
    assert_eq!(
        rendered(&answer.additionals),
        [
            "db-0.db.default.svc.cluster.local. 5 A 10.42.0.5",
            "10-42-0-6.db.default.svc.cluster.local. 5 A 10.42.0.6",
            "10-42-0-4.db.default.svc.cluster.local. 5 A 10.42.0.4",
            "fd00--42-6.db.default.svc.cluster.local. 5 AAAA fd00::42:6",
        ]
    );
    // UDP ports, matched without regard to case.
    assert_eq!(
        rendered(&ask("_DNS._UDP.udp.other.svc.cluster.local.", RecordType::SRV).answers),
        ["_DNS._UDP.udp.other.svc.cluster.local. 5 SRV 0 100 53 udp.other.svc.cluster.local."]
    );
    // A port or protocol the service does not have.
    assert_nxdomain(&ask(
        "_nope._tcp.web.default.svc.cluster.local.",
        RecordType::SRV,
    ));
    assert_nxdomain(&ask(
        "_http._udp.web.default.svc.cluster.local.",
        RecordType::SRV,
    ));
    // SRV of an ExternalName service: it exists, but has no SRV records.
    assert_nodata(&ask("ext.default.svc.cluster.local.", RecordType::SRV));
}

#[test]
fn external_names_answer_cnames() {
    // Outside the cluster: the CNAME, and the target is left to the forwarder.
    let answer = ask("ext.default.svc.cluster.local.", RecordType::A);
    assert_eq!(
        rendered(&answer.answers),
        ["ext.default.svc.cluster.local. 5 CNAME example.com."]
    );
    assert_eq!(answer.chase, Some((name("example.com."), RecordType::A)));
    assert_eq!(
        rendered(&ask("ext.default.svc.cluster.local.", RecordType::CNAME).answers),
        ["ext.default.svc.cluster.local. 5 CNAME example.com."]
    );
    // Inside the cluster: followed in the same answer.
    let answer = ask("alias.default.svc.cluster.local.", RecordType::A);
    assert_eq!(
        rendered(&answer.answers),
        [
            "alias.default.svc.cluster.local. 5 CNAME web.default.svc.cluster.local.",
            "web.default.svc.cluster.local. 5 A 10.43.0.20",
        ]
    );
    assert_eq!(answer.chase, None);
    // Through another ExternalName to the outside.
    let answer = ask("chain.default.svc.cluster.local.", RecordType::AAAA);
    assert_eq!(
        rendered(&answer.answers),
        [
            "chain.default.svc.cluster.local. 5 CNAME ext.default.svc.cluster.local.",
            "ext.default.svc.cluster.local. 5 CNAME example.com.",
        ]
    );
    assert_eq!(answer.chase, Some((name("example.com."), RecordType::AAAA)));
    // To a name in the cluster that does not exist: nothing to answer.
    assert_nodata(&ask("dangling.default.svc.cluster.local.", RecordType::A));
    // An ExternalName service has no endpoints nor ports.
    assert_nxdomain(&ask("x.ext.default.svc.cluster.local.", RecordType::A));
    // CNAME of a service with a cluster IP: NODATA.
    assert_nodata(&ask("web.default.svc.cluster.local.", RecordType::CNAME));
}

#[test]
fn reverse_names_of_cluster_ips_and_endpoints() {
    let ptr = |qname: &str| match zone().answer(&snapshot(), &name(qname), RecordType::PTR) {
        Outcome::Answer(answer) => {
            assert!(answer.authoritative);
            Some(rendered(&answer.answers))
        }
        Outcome::Forward => None,
    };
    assert_eq!(
        ptr("20.0.43.10.in-addr.arpa."),
        Some(vec![
            "20.0.43.10.in-addr.arpa. 5 PTR web.default.svc.cluster.local.".to_owned()
        ])
    );
    assert_eq!(
        ptr("5.0.42.10.in-addr.arpa."),
        Some(vec![
            "5.0.42.10.in-addr.arpa. 5 PTR db-0.db.default.svc.cluster.local.".to_owned()
        ])
    );
    assert_eq!(
        ptr("6.0.42.10.in-addr.arpa."),
        Some(vec![
            "6.0.42.10.in-addr.arpa. 5 PTR 10-42-0-6.db.default.svc.cluster.local.".to_owned()
        ])
    );
    let v6 = "1.2.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa.";
    assert_eq!(
        ptr(v6),
        Some(vec![format!("{v6} 5 PTR dual.default.svc.cluster.local.")])
    );
    // Addresses the cluster does not know, partial reverse names, and other types fall
    // through to the upstream resolvers.
    assert_eq!(ptr("7.0.42.10.in-addr.arpa."), None);
    assert_eq!(ptr("42.10.in-addr.arpa."), None);
    assert_eq!(ptr("1.0.0.127.in-addr.arpa."), None);
    assert_eq!(
        zone().answer(
            &snapshot(),
            &name("20.0.43.10.in-addr.arpa."),
            RecordType::A
        ),
        Outcome::Forward
    );
}

#[test]
fn pod_names_spell_their_address() {
    assert_eq!(
        rendered(&ask("10-42-0-99.default.pod.cluster.local.", RecordType::A).answers),
        ["10-42-0-99.default.pod.cluster.local. 5 A 10.42.0.99"]
    );
    assert_eq!(
        rendered(&ask("fd00--1.default.pod.cluster.local.", RecordType::AAAA).answers),
        ["fd00--1.default.pod.cluster.local. 5 AAAA fd00::1"]
    );
    assert_nodata(&ask(
        "10-42-0-99.default.pod.cluster.local.",
        RecordType::AAAA,
    ));
    assert_nxdomain(&ask("10-42-0-99.nowhere.pod.cluster.local.", RecordType::A));
    assert_nxdomain(&ask("not-an-ip.default.pod.cluster.local.", RecordType::A));
    assert_nxdomain(&ask("300-1-1-1.default.pod.cluster.local.", RecordType::A));
    // The namespace alone exists.
    assert_nodata(&ask("default.pod.cluster.local.", RecordType::A));
}

#[test]
fn nxdomain_and_nodata_as_coredns() {
    assert_nxdomain(&ask("missing.default.svc.cluster.local.", RecordType::A));
    assert_nxdomain(&ask("web.nowhere.svc.cluster.local.", RecordType::A));
    assert_nxdomain(&ask("nowhere.svc.cluster.local.", RecordType::A));
    assert_nxdomain(&ask("foo.cluster.local.", RecordType::A));
    assert_nxdomain(&ask("a.b.c.web.default.svc.cluster.local.", RecordType::A));
    // Empty non-terminals and the apex exist.
    assert_nodata(&ask("default.svc.cluster.local.", RecordType::A));
    assert_nodata(&ask("svc.cluster.local.", RecordType::A));
    assert_nodata(&ask("cluster.local.", RecordType::A));
    // A name that exists, without records of the type.
    assert_nodata(&ask("web.default.svc.cluster.local.", RecordType::MX));
    assert_nodata(&ask("web.default.svc.cluster.local.", RecordType::TXT));
    assert_nodata(&ask("web.default.svc.cluster.local.", RecordType::HTTPS));
    assert_nodata(&ask("web.default.svc.cluster.local.", RecordType::PTR));
    assert_nxdomain(&ask(
        "missing.default.svc.cluster.local.",
        RecordType::HTTPS,
    ));
    assert_nxdomain(&ask("missing.default.svc.cluster.local.", RecordType::TXT));
    // The SOA, with CoreDNS's values.
    let answer = ask("missing.default.svc.cluster.local.", RecordType::A);
    assert_eq!(
        rendered(&answer.authorities),
        [
            "cluster.local. 5 SOA ns.dns.cluster.local. hostmaster.cluster.local. 1700000000 7200 1800 86400 5"
        ]
    );
    let answer = ask("cluster.local.", RecordType::SOA);
    assert_eq!(answer.answers.len(), 1);
    assert_eq!(answer.answers[0].record_type(), RecordType::SOA);
    let answer = ask("cluster.local.", RecordType::NS);
    assert_eq!(
        rendered(&answer.answers),
        ["cluster.local. 5 NS kube-dns.kube-system.svc.cluster.local."]
    );
    assert_eq!(
        rendered(&answer.additionals),
        ["kube-dns.kube-system.svc.cluster.local. 5 A 10.43.0.10"]
    );
    assert_eq!(
        rendered(&ask("ns.dns.cluster.local.", RecordType::A).answers),
        ["ns.dns.cluster.local. 5 A 10.43.0.10"]
    );
    assert_eq!(
        rendered(&ask("dns-version.cluster.local.", RecordType::TXT).answers),
        ["dns-version.cluster.local. 28800 TXT 1.1.0"]
    );
    // Zone transfers are refused.
    assert_eq!(
        ask("cluster.local.", RecordType::AXFR).rcode,
        ResponseCode::Refused
    );
    // Until the first lists arrive, a name not found may yet exist: SERVFAIL.
    let empty = Snapshot::default();
    match zone().answer(
        &empty,
        &name("web.default.svc.cluster.local."),
        RecordType::A,
    ) {
        Outcome::Answer(answer) => assert_eq!(answer.rcode, ResponseCode::ServFail),
        Outcome::Forward => panic!("forwarded"),
    }
    // Other names go upstream.
    assert_eq!(
        zone().answer(&snapshot(), &name("example.com."), RecordType::A),
        Outcome::Forward
    );
    assert_eq!(
        zone().answer(&snapshot(), &name("local."), RecordType::A),
        Outcome::Forward
    );
}

#[test]
fn snapshots_follow_changes() {
    let mut services = vec![service(
        "default",
        "web",
        json!({"clusterIP": "10.43.0.20", "ports": [{"name": "http", "port": 80}]}),
    )];
    let build = |services: &[ServiceInfo]| {
        Snapshot::build(["default"], services.iter(), [].iter(), true, 1)
    };
    let before = build(&services);
    services[0] = service(
        "default",
        "web",
        json!({"clusterIP": "10.43.0.99", "ports": [{"name": "http", "port": 80}]}),
    );
    let after = build(&services);
    let a = |snapshot: &Snapshot| match zone().answer(
        snapshot,
        &name("web.default.svc.cluster.local."),
        RecordType::A,
    ) {
        Outcome::Answer(answer) => rendered(&answer.answers),
        Outcome::Forward => Vec::new(),
    };
    assert_eq!(
        a(&before),
        ["web.default.svc.cluster.local. 5 A 10.43.0.20"]
    );
    assert_eq!(a(&after), ["web.default.svc.cluster.local. 5 A 10.43.0.99"]);
}

/// A response handler that keeps the encoded message.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

#[async_trait::async_trait]
impl ResponseHandler for Captured {
    async fn send_response<'a>(
        &mut self,
        response: MessageResponse<
            '_,
            'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
        >,
    ) -> Result<ResponseInfo, hickory_resolver::net::NetError> {
        let mut bytes = Vec::new();
        let mut encoder = BinEncoder::new(&mut bytes);
        encoder.set_max_size(512);
        let info = response.destructive_emit(&mut encoder)?;
        *self.0.lock().unwrap() = bytes;
        Ok(info)
    }
}

fn handler(upstream: &[SocketAddr]) -> Handler {
    Handler::new(
        Arc::new(zone()),
        Arc::new(ArcSwap::from_pointee(snapshot())),
        Forwarder::new(upstream).unwrap(),
    )
}

/// Sends `message` through the handler, returns the decoded response.
async fn exchange(handler: &Handler, message: &Message) -> Message {
    let request = Request::from_bytes(
        message.to_vec().unwrap(),
        SocketAddr::from(([127, 0, 0, 1], 5353)),
        Protocol::Udp,
    )
    .unwrap();
    let captured = Captured::default();
    handler
        .handle_request::<_, hickory_resolver::net::runtime::TokioTime>(&request, captured.clone())
        .await;
    let bytes = captured.0.lock().unwrap().clone();
    Message::from_vec(&bytes).unwrap()
}

fn query(qname: &str, qtype: RecordType) -> Message {
    let mut message = Message::query();
    message.metadata.id = 4242;
    message.metadata.recursion_desired = true;
    message.add_query(Query::query(name(qname), qtype));
    message
}

/// A tiny upstream: answers `*.upstream.test.` A 192.0.2.53, NXDOMAIN for anything else.
#[derive(Clone, Debug)]
struct FakeUpstream;

#[async_trait::async_trait]
impl RequestHandler for FakeUpstream {
    async fn handle_request<R: ResponseHandler, T: hickory_resolver::net::runtime::Time>(
        &self,
        request: &Request,
        mut response: R,
    ) -> ResponseInfo {
        let query = request.queries.queries()[0].original().clone();
        let builder = MessageResponseBuilder::from_message_request(request);
        let mut metadata = hickory_proto::op::Metadata::response_from_request(&request.metadata);
        metadata.recursion_available = true;
        let records = if query.name().to_ascii().ends_with("upstream.test.")
            && query.query_type() == RecordType::A
        {
            vec![Record::from_rdata(
                query.name().clone(),
                60,
                RData::A(A::from_str("192.0.2.53").unwrap()),
            )]
        } else {
            metadata.response_code = ResponseCode::NXDomain;
            Vec::new()
        };
        response
            .send_response(builder.build(metadata, records.iter(), [].iter(), [].iter(), [].iter()))
            .await
            .unwrap()
    }
}

/// Starts [`FakeUpstream`] on a loopback port free for both UDP and TCP.
async fn fake_upstream() -> (SocketAddr, hickory_server::Server<FakeUpstream>) {
    // The kernel picks the UDP port; its TCP twin may be held by another test, so try a few.
    let mut attempts = 0;
    let (udp, address, tcp) = loop {
        let udp = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let address = udp.local_addr().unwrap();
        match tokio::net::TcpListener::bind(address).await {
            Ok(tcp) => break (udp, address, tcp),
            Err(error) if attempts < 20 => {
                attempts += 1;
                eprintln!("{address}/tcp taken ({error}); another port");
            }
            Err(error) => panic!("no UDP and TCP port pair: {error}"),
        }
    };
    let mut server = hickory_server::Server::new(FakeUpstream);
    server.register_socket(udp);
    server.register_listener(tcp, std::time::Duration::from_secs(5), 16);
    (address, server)
}

/// A loopback port nothing listens on.
fn closed_port() -> SocketAddr {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.local_addr().unwrap()
}

#[test]
fn answers_are_load_balanced_as_coredns_orders_them() {
    let a = |last: u8| Record::from_rdata(name("x.test."), 5, RData::A(A::new(10, 0, 0, last)));
    let cname = Record::from_rdata(
        name("y.test."),
        5,
        RData::CNAME(hickory_proto::rr::rdata::CNAME(name("x.test."))),
    );
    let records: Vec<Record> = std::iter::once(cname.clone())
        .chain((1..=8).map(a))
        .collect();
    let mut orders = std::collections::HashSet::new();
    for _ in 0..50 {
        let balanced = crate::handler::load_balanced(records.clone());
        assert_eq!(balanced[0], cname);
        let mut sorted = balanced[1..].to_vec();
        sorted.sort_by_key(|r| r.data.to_string());
        assert_eq!(sorted, records[1..].to_vec());
        orders.insert(rendered(&balanced));
    }
    assert!(orders.len() > 1, "the addresses were never reordered");
}

#[tokio::test]
async fn the_handler_writes_coredns_headers() {
    let handler = handler(&[]);
    let response = exchange(
        &handler,
        &query("web.default.svc.cluster.local.", RecordType::A),
    )
    .await;
    assert_eq!(response.metadata.id, 4242);
    assert_eq!(response.metadata.message_type, MessageType::Response);
    assert!(response.metadata.authoritative);
    assert!(response.metadata.recursion_desired);
    assert!(!response.metadata.recursion_available);
    assert_eq!(response.metadata.response_code, ResponseCode::NoError);
    assert_eq!(response.answers.len(), 1);
    assert_eq!(
        response.answers[0].data,
        RData::A(A::from_str("10.43.0.20").unwrap())
    );
    let response = exchange(
        &handler,
        &query("nope.default.svc.cluster.local.", RecordType::AAAA),
    )
    .await;
    assert_eq!(response.metadata.response_code, ResponseCode::NXDomain);
    assert_eq!(response.authorities.len(), 1);
    // Not a query: NOTIMP; two questions: FORMERR.
    let mut update = query("web.default.svc.cluster.local.", RecordType::A);
    update.metadata.op_code = OpCode::Status;
    let response = exchange(&handler, &update).await;
    assert_eq!(response.metadata.response_code, ResponseCode::NotImp);
    let mut two = query("web.default.svc.cluster.local.", RecordType::A);
    two.add_query(Query::query(
        name("db.default.svc.cluster.local."),
        RecordType::A,
    ));
    let response = exchange(&handler, &two).await;
    assert_eq!(response.metadata.response_code, ResponseCode::FormErr);
}

#[tokio::test]
async fn forwarding_relays_upstream_answers_and_fails_as_servfail() {
    let (upstream, _server) = fake_upstream().await;
    let forwarding = handler(&[upstream]);
    let response = exchange(&forwarding, &query("www.upstream.test.", RecordType::A)).await;
    assert_eq!(response.metadata.response_code, ResponseCode::NoError);
    assert!(!response.metadata.authoritative);
    assert!(response.metadata.recursion_available);
    assert_eq!(
        rendered(&response.answers),
        ["www.upstream.test. 60 A 192.0.2.53"]
    );
    let response = exchange(&forwarding, &query("missing.example.", RecordType::A)).await;
    assert_eq!(response.metadata.response_code, ResponseCode::NXDomain);
    // An ExternalName to an outside name: the CNAME, then the upstream's records.
    let mut snapshot = snapshot();
    let ext = service(
        "default",
        "up",
        json!({"type": "ExternalName", "externalName": "svc.upstream.test"}),
    );
    snapshot
        .services
        .insert(("default".into(), "up".into()), Arc::new(ext));
    let with_up = Handler::new(
        Arc::new(zone()),
        Arc::new(ArcSwap::from_pointee(snapshot)),
        Forwarder::new(&[upstream]).unwrap(),
    );
    let response = exchange(
        &with_up,
        &query("up.default.svc.cluster.local.", RecordType::A),
    )
    .await;
    assert!(response.metadata.authoritative);
    assert_eq!(
        rendered(&response.answers),
        [
            "up.default.svc.cluster.local. 5 CNAME svc.upstream.test.",
            "svc.upstream.test. 60 A 192.0.2.53",
        ]
    );

    // Nothing answers upstream: SERVFAIL, in bounded time.
    let dead = handler_dead();
    let started = std::time::Instant::now();
    let response = exchange(&dead, &query("www.example.com.", RecordType::A)).await;
    assert_eq!(response.metadata.response_code, ResponseCode::ServFail);
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    // No upstream at all.
    let none = handler(&[]);
    let response = exchange(&none, &query("www.example.com.", RecordType::A)).await;
    assert_eq!(response.metadata.response_code, ResponseCode::ServFail);
    // An ExternalName whose target cannot be looked up: the CNAME alone.
    let response = exchange(
        &dead,
        &query("ext.default.svc.cluster.local.", RecordType::A),
    )
    .await;
    assert_eq!(response.metadata.response_code, ResponseCode::NoError);
    assert_eq!(
        rendered(&response.answers),
        ["ext.default.svc.cluster.local. 5 CNAME example.com."]
    );
}

fn handler_dead() -> Handler {
    handler(&[closed_port()])
}

/// A client of the server at `address` over UDP.
async fn udp_client(address: SocketAddr) -> Client<TokioRuntimeProvider> {
    let stream = UdpClientStream::builder(address, TokioRuntimeProvider::default()).build();
    let (client, background) = Client::<TokioRuntimeProvider>::from_sender(stream);
    tokio::spawn(background);
    client
}

/// A client of the server at `address` over TCP.
async fn tcp_client(address: SocketAddr) -> Client<TokioRuntimeProvider> {
    let (stream, sender) =
        TcpClientStream::new(address, None, None, TokioRuntimeProvider::default());
    let (client, background) = Client::<TokioRuntimeProvider>::new(stream.await.unwrap(), sender);
    tokio::spawn(background);
    client
}

#[tokio::test]
async fn the_server_answers_over_udp_and_tcp_and_survives_garbage() {
    let (upstream, _server) = fake_upstream().await;
    let mut config = crate::Config::new(SocketAddr::from(([127, 0, 0, 1], 0)), None);
    config.upstream = crate::Upstream::Servers(vec![upstream]);
    let dns = crate::start(config, None).await.unwrap();
    let address = dns.local_addr();
    // Garbage, short messages and responses are dropped or refused, never fatal.
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    for junk in [
        &b""[..],
        &b"\x00"[..],
        &b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\xff\xff"[..],
        &[0xffu8; 600][..],
        &b"\x12\x34\x81\x80\x00\x00\x00\x00\x00\x00\x00\x00"[..],
    ] {
        socket.send_to(junk, address).await.unwrap();
    }
    let mut udp = udp_client(address).await;
    let response = udp
        .query(name("www.upstream.test."), DNSClass::IN, RecordType::A)
        .await
        .unwrap();
    assert_eq!(
        rendered(&response.answers),
        ["www.upstream.test. 60 A 192.0.2.53"]
    );
    // Nothing watched: cluster names are not known yet (SERVFAIL, as CoreDNS before its sync).
    let response = udp
        .query(
            name("web.default.svc.cluster.local."),
            DNSClass::IN,
            RecordType::A,
        )
        .await
        .unwrap();
    assert_eq!(response.metadata.response_code, ResponseCode::ServFail);
    assert!(response.metadata.authoritative);
    let mut tcp = tcp_client(address).await;
    let response = tcp
        .query(name("www.upstream.test."), DNSClass::IN, RecordType::A)
        .await
        .unwrap();
    assert_eq!(response.answers.len(), 1);
    dns.stop().await;
}

#[tokio::test]
async fn large_answers_are_truncated_over_udp_and_whole_over_tcp() {
    // A headless service with many endpoints: over 512 bytes without EDNS.
    let services = [service(
        "default",
        "big",
        json!({"clusterIP": "None", "ports": [{"name": "p", "port": 1}]}),
    )];
    let endpoints: Vec<serde_json::Value> = (1..=60)
        .map(|i| json!({"addresses": [format!("10.42.1.{i}")]}))
        .collect();
    let slices = [slice(
        "default",
        "big",
        json!([{"name": "p", "port": 1, "protocol": "TCP"}]),
        json!(endpoints),
    )];
    let dns = crate::start(
        crate::Config::new(SocketAddr::from(([127, 0, 0, 1], 0)), None),
        None,
    )
    .await
    .unwrap();
    dns.replace_snapshot(Snapshot::build(
        ["default"],
        services.iter(),
        slices.iter(),
        true,
        1,
    ));
    let qname = name("big.default.svc.cluster.local.");
    let mut udp = udp_client(dns.local_addr()).await;
    udp.disable_edns();
    let response = udp
        .query(qname.clone(), DNSClass::IN, RecordType::A)
        .await
        .unwrap();
    assert!(response.metadata.truncation);
    assert!(response.answers.len() < 60);
    assert!(response.to_vec().unwrap().len() <= 512);
    // EDNS with a larger buffer: everything fits.
    udp.enable_edns();
    let response = udp
        .query(qname.clone(), DNSClass::IN, RecordType::A)
        .await
        .unwrap();
    assert!(!response.metadata.truncation);
    assert_eq!(response.answers.len(), 60);
    let mut tcp = tcp_client(dns.local_addr()).await;
    let response = tcp.query(qname, DNSClass::IN, RecordType::A).await.unwrap();
    assert!(!response.metadata.truncation);
    assert_eq!(response.answers.len(), 60);
}

//! End to end: the cluster DNS of a real `capstan server`. Services and EndpointSlices created
//! through the API are answered over UDP and TCP by a hickory client (A, SRV, headless
//! services, endpoint host names, ExternalName, PTR, NXDOMAIN), changes show up, the
//! `kube-system/kube-dns` Service and its endpoints list the running server, `kubectl
//! cluster-info` names it, and names outside the cluster are forwarded to the upstream given
//! with `--dns-upstream` (a small hickory server on loopback standing in for the host's
//! resolver).

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::time::{Duration, Instant};

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};
use hickory_resolver::net::client::{Client, ClientHandle};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::net::tcp::TcpClientStream;
use hickory_resolver::net::udp::UdpClientStream;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;
use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use common::*;

/// How long a change may take to reach the answers (generous: the machine is shared).
const CONVERGE: Duration = Duration::from_secs(60);

/// The stand-in for the host's resolver: `*.upstream.test.` A 192.0.2.53, NXDOMAIN otherwise.
#[derive(Clone, Debug)]
struct Upstream;

#[async_trait::async_trait]
impl RequestHandler for Upstream {
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

fn name(text: &str) -> Name {
    Name::from_ascii(text).unwrap()
}

/// The records of a response as `name ttl type data`.
fn rendered(records: &[Record]) -> Vec<String> {
    let mut lines: Vec<String> = records
        .iter()
        .map(|r| format!("{} {} {} {}", r.name, r.ttl, r.record_type(), r.data))
        .collect();
    lines.sort();
    lines
}

/// A response's code, sorted answers and sorted additional records.
type Answered = (ResponseCode, Vec<String>, Vec<String>);

struct Dns {
    udp: Client<TokioRuntimeProvider>,
    tcp: Client<TokioRuntimeProvider>,
}

impl Dns {
    async fn connect(address: SocketAddr) -> Dns {
        let stream = UdpClientStream::builder(address, TokioRuntimeProvider::default()).build();
        let (udp, background) = Client::<TokioRuntimeProvider>::from_sender(stream);
        tokio::spawn(background);
        // A server's listener may come up a moment after its Lease names it: retry a while.
        let mut attempts = 0;
        let (stream, sender) = loop {
            let (stream, sender) =
                TcpClientStream::new(address, None, None, TokioRuntimeProvider::default());
            match stream.await {
                Ok(stream) => break (stream, sender),
                Err(error) => {
                    attempts += 1;
                    assert!(attempts < 100, "cannot connect to {address}: {error}");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
        };
        let (tcp, background) = Client::<TokioRuntimeProvider>::new(stream, sender);
        tokio::spawn(background);
        Dns { udp, tcp }
    }

    /// Asks over UDP and over TCP; both must answer the same. Returns the code, the sorted
    /// answers and the sorted additional records.
    async fn ask(
        &mut self,
        qname: &str,
        qtype: RecordType,
    ) -> (ResponseCode, Vec<String>, Vec<String>) {
        let (u, t) = self.ask_both(qname, qtype).await;
        assert_eq!(u, t, "UDP and TCP differ for {qname} {qtype}");
        u
    }

    /// Asks over UDP, then over TCP.
    async fn ask_both(&mut self, qname: &str, qtype: RecordType) -> (Answered, Answered) {
        let udp = self
            .udp
            .query(name(qname), DNSClass::IN, qtype)
            .await
            .unwrap();
        let tcp = self
            .tcp
            .query(name(qname), DNSClass::IN, qtype)
            .await
            .unwrap();
        let result = |m: &hickory_proto::op::DnsResponse| {
            (
                m.metadata.response_code,
                rendered(&m.answers),
                rendered(&m.additionals),
            )
        };
        (result(&udp), result(&tcp))
    }

    /// Asks until the answers are `want` (sorted), within [`CONVERGE`].
    async fn until(&mut self, qname: &str, qtype: RecordType, want: &[&str]) {
        let deadline = Instant::now() + CONVERGE;
        loop {
            // Both transports, which may see the records before and after a change.
            let ((_, udp, _), (_, tcp, _)) = self.ask_both(qname, qtype).await;
            if udp == want && tcp == want {
                return;
            }
            let answers = (udp, tcp);
            assert!(
                Instant::now() < deadline,
                "{qname} {qtype}: {answers:?}, expected {want:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Asks until the response code is `want`, within [`CONVERGE`].
    async fn until_code(&mut self, qname: &str, qtype: RecordType, want: ResponseCode) {
        let deadline = Instant::now() + CONVERGE;
        loop {
            let ((udp, _, _), (tcp, _, _)) = self.ask_both(qname, qtype).await;
            if udp == want && tcp == want {
                return;
            }
            let code = format!("{udp} (UDP) and {tcp} (TCP)");
            assert!(
                Instant::now() < deadline,
                "{qname} {qtype}: {code}, expected {want}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Waits for the `kube-dns` EndpointSlice to list a server; returns its address and port.
async fn kube_dns_endpoint(client: &kube::Client) -> (IpAddr, u16) {
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "kube-system");
    let deadline = Instant::now() + CONVERGE;
    loop {
        if let Some(slice) = slices.get_opt("kube-dns").await.unwrap() {
            let address = slice
                .endpoints
                .first()
                .and_then(|e| e.addresses.first())
                .and_then(|a| a.parse().ok());
            let port = slice
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some("dns"))
                .and_then(|p| p.port);
            if let (Some(address), Some(port)) = (address, port) {
                let labels = slice.metadata.labels.unwrap_or_default();
                assert_eq!(labels["kubernetes.io/service-name"], "kube-dns");
                assert!(labels.contains_key("endpointslice.kubernetes.io/managed-by"));
                let ports: Vec<(String, String, i32)> = slice
                    .ports
                    .iter()
                    .flatten()
                    .map(|p| {
                        (
                            p.name.clone().unwrap_or_default(),
                            p.protocol.clone().unwrap_or_default(),
                            p.port.unwrap_or_default(),
                        )
                    })
                    .collect();
                assert_eq!(
                    ports,
                    [
                        ("dns".to_owned(), "UDP".to_owned(), port),
                        ("dns-tcp".to_owned(), "TCP".to_owned(), port),
                    ]
                );
                return (address, u16::try_from(port).unwrap());
            }
        }
        assert!(Instant::now() < deadline, "no kube-dns endpoint");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[test]
fn cluster_dns_answers_from_the_api() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // The upstream, on loopback.
    let (upstream, _upstream_server) = runtime.block_on(async {
        // A UDP port whose TCP twin is free too (another test may hold it): try a few.
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
        let mut server = hickory_server::Server::new(Upstream);
        server.register_socket(udp);
        server.register_listener(tcp, Duration::from_secs(5), 16);
        (address, server)
    });
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(
        dir.path(),
        free_port(),
        &["--dns-upstream", &upstream.to_string()],
    );
    let kubeconfig = server.kubeconfig();
    runtime.block_on(async {
        let client = kube_client(&kubeconfig).await;

        // The kube-dns Service, as upstream's, with the cluster DNS address.
        let services: Api<Service> = Api::namespaced(client.clone(), "kube-system");
        let deadline = Instant::now() + CONVERGE;
        let kube_dns = loop {
            if let Some(service) = services.get_opt("kube-dns").await.unwrap() {
                break service;
            }
            assert!(Instant::now() < deadline, "no kube-dns Service");
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        let spec = kube_dns.spec.clone().unwrap();
        assert_eq!(spec.cluster_ip.as_deref(), Some("10.43.0.10"));
        assert_eq!(spec.selector, None);
        let ports: Vec<(String, String, i32)> = spec
            .ports
            .unwrap()
            .into_iter()
            .map(|p| (p.name.unwrap(), p.protocol.unwrap(), p.port))
            .collect();
        assert_eq!(
            ports,
            [
                ("dns".to_owned(), "UDP".to_owned(), 53),
                ("dns-tcp".to_owned(), "TCP".to_owned(), 53),
            ]
        );
        let labels = kube_dns.metadata.labels.clone().unwrap();
        assert_eq!(labels["k8s-app"], "kube-dns");
        assert_eq!(labels["kubernetes.io/cluster-service"], "true");
        assert_eq!(labels["kubernetes.io/name"], "CoreDNS");

        // Its endpoints: this server's advertise address at the real DNS port.
        let (address, port) = kube_dns_endpoint(&client).await;
        assert!(!address.is_loopback());
        let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), "kube-system");
        let legacy = endpoints.get("kube-dns").await.unwrap();
        assert_eq!(
            legacy.metadata.labels.unwrap()["endpointslice.kubernetes.io/skip-mirror"],
            "true"
        );
        let subset = &legacy.subsets.unwrap()[0];
        assert_eq!(
            subset.addresses.as_ref().unwrap()[0].ip,
            address.to_string()
        );
        assert!(
            subset
                .ports
                .iter()
                .flatten()
                .all(|p| p.port == i32::from(port))
        );

        // The server answers on loopback at that port too (the tests send nothing elsewhere).
        let mut dns = Dns::connect(SocketAddr::from(([127, 0, 0, 1], port))).await;
        dns.until(
            "kubernetes.default.svc.cluster.local.",
            RecordType::A,
            &["kubernetes.default.svc.cluster.local. 5 A 10.43.0.1"],
        )
        .await;
        dns.until(
            "kube-dns.kube-system.svc.cluster.local.",
            RecordType::A,
            &["kube-dns.kube-system.svc.cluster.local. 5 A 10.43.0.10"],
        )
        .await;

        // A Service with a cluster IP, a headless one with an EndpointSlice of its own, and
        // an ExternalName.
        let default_services: Api<Service> = Api::namespaced(client.clone(), "default");
        let web: Service = serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
        }))
        .unwrap();
        let web = default_services
            .create(&PostParams::default(), &web)
            .await
            .unwrap();
        let web_ip = web.spec.unwrap().cluster_ip.unwrap();
        let db: Service = serde_json::from_value(json!({
            "metadata": {"name": "db"},
            "spec": {"clusterIP": "None",
                     "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}]},
        }))
        .unwrap();
        default_services
            .create(&PostParams::default(), &db)
            .await
            .unwrap();
        let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
        let slice: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": "db-1", "labels": {"kubernetes.io/service-name": "db"}},
            "addressType": "IPv4",
            "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}],
            "endpoints": [
                {"addresses": ["10.42.0.5"], "hostname": "db-0", "conditions": {"ready": true}},
                {"addresses": ["10.42.0.6"], "conditions": {"ready": true}},
                {"addresses": ["10.42.0.7"], "conditions": {"ready": false}},
            ],
        }))
        .unwrap();
        slices.create(&PostParams::default(), &slice).await.unwrap();
        let ext: Service = serde_json::from_value(json!({
            "metadata": {"name": "ext"},
            "spec": {"type": "ExternalName", "externalName": "svc.upstream.test"},
        }))
        .unwrap();
        default_services
            .create(&PostParams::default(), &ext)
            .await
            .unwrap();

        let web_a = format!("web.default.svc.cluster.local. 5 A {web_ip}");
        dns.until("web.default.svc.cluster.local.", RecordType::A, &[&web_a])
            .await;
        let (code, answers, additionals) = dns
            .ask("_http._tcp.web.default.svc.cluster.local.", RecordType::SRV)
            .await;
        assert_eq!(code, ResponseCode::NoError);
        assert_eq!(
            answers,
            ["_http._tcp.web.default.svc.cluster.local. 5 SRV 0 100 80 web.default.svc.cluster.local."]
        );
        assert_eq!(additionals, std::slice::from_ref(&web_a));
        dns.until(
            "db.default.svc.cluster.local.",
            RecordType::A,
            &[
                "db.default.svc.cluster.local. 5 A 10.42.0.5",
                "db.default.svc.cluster.local. 5 A 10.42.0.6",
            ],
        )
        .await;
        let (_, answers, _) = dns
            .ask("db-0.db.default.svc.cluster.local.", RecordType::A)
            .await;
        assert_eq!(answers, ["db-0.db.default.svc.cluster.local. 5 A 10.42.0.5"]);
        let (_, answers, additionals) = dns
            .ask("_pg._tcp.db.default.svc.cluster.local.", RecordType::SRV)
            .await;
        assert_eq!(
            answers,
            [
                "_pg._tcp.db.default.svc.cluster.local. 5 SRV 0 50 5432 10-42-0-6.db.default.svc.cluster.local.",
                "_pg._tcp.db.default.svc.cluster.local. 5 SRV 0 50 5432 db-0.db.default.svc.cluster.local.",
            ]
        );
        assert_eq!(
            additionals,
            [
                "10-42-0-6.db.default.svc.cluster.local. 5 A 10.42.0.6",
                "db-0.db.default.svc.cluster.local. 5 A 10.42.0.5",
            ]
        );
        dns.until(
            "ext.default.svc.cluster.local.",
            RecordType::A,
            &[
                "ext.default.svc.cluster.local. 5 CNAME svc.upstream.test.",
                "svc.upstream.test. 60 A 192.0.2.53",
            ],
        )
        .await;
        // PTR of the cluster IP.
        let octets: Vec<&str> = web_ip.split('.').rev().collect();
        let reverse = format!("{}.in-addr.arpa.", octets.join("."));
        let (_, answers, _) = dns.ask(&reverse, RecordType::PTR).await;
        assert_eq!(
            answers,
            [format!("{reverse} 5 PTR web.default.svc.cluster.local.")]
        );
        // NXDOMAIN and NODATA.
        let (code, _, _) = dns
            .ask("missing.default.svc.cluster.local.", RecordType::A)
            .await;
        assert_eq!(code, ResponseCode::NXDomain);
        let (code, answers, _) = dns
            .ask("web.default.svc.cluster.local.", RecordType::AAAA)
            .await;
        assert_eq!((code, answers.len()), (ResponseCode::NoError, 0));
        // Pod names.
        let (_, answers, _) = dns
            .ask("10-42-0-99.default.pod.cluster.local.", RecordType::A)
            .await;
        assert_eq!(answers, ["10-42-0-99.default.pod.cluster.local. 5 A 10.42.0.99"]);
        // Forwarded names.
        let (code, answers, _) = dns.ask("www.upstream.test.", RecordType::A).await;
        assert_eq!(code, ResponseCode::NoError);
        assert_eq!(answers, ["www.upstream.test. 60 A 192.0.2.53"]);
        let (code, _, _) = dns.ask("nothing.example.", RecordType::A).await;
        assert_eq!(code, ResponseCode::NXDomain);

        // Changes: an endpoint becomes ready, a Service goes away.
        slices
            .patch(
                "db-1",
                &PatchParams::default(),
                &Patch::Merge(json!({"endpoints": [
                    {"addresses": ["10.42.0.5"], "hostname": "db-0", "conditions": {"ready": true}},
                    {"addresses": ["10.42.0.6"], "conditions": {"ready": true}},
                    {"addresses": ["10.42.0.7"], "conditions": {"ready": true}},
                ]})),
            )
            .await
            .unwrap();
        dns.until(
            "db.default.svc.cluster.local.",
            RecordType::A,
            &[
                "db.default.svc.cluster.local. 5 A 10.42.0.5",
                "db.default.svc.cluster.local. 5 A 10.42.0.6",
                "db.default.svc.cluster.local. 5 A 10.42.0.7",
            ],
        )
        .await;
        default_services
            .delete("web", &DeleteParams::default())
            .await
            .unwrap();
        dns.until_code(
            "web.default.svc.cluster.local.",
            RecordType::A,
            ResponseCode::NXDomain,
        )
        .await;
    });

    // kubectl cluster-info lists the DNS Service by its kubernetes.io/name label.
    let info = kubectl_ok("1.33", &kubeconfig, &["cluster-info"]);
    assert!(info.contains("CoreDNS"), "{info}");
    assert!(
        info.contains("/api/v1/namespaces/kube-system/services/kube-dns:dns/proxy"),
        "{info}"
    );

    // A server with --disable-dns creates no kube-dns Service.
    server.stop();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), free_port(), &["--disable-dns"]);
    runtime.block_on(async {
        let client = kube_client(&server.kubeconfig()).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let services: Api<Service> = Api::namespaced(client, "kube-system");
        assert!(services.get_opt("kube-dns").await.unwrap().is_none());
    });
    server.stop();
}

/// Two servers on one etcd: the kube-dns endpoints list each server's DNS (at its own port,
/// here on one machine), and one that stops drops out, one that is killed once its Lease runs
/// out. Their advertise addresses are not this machine's, so each DNS answers on the node's
/// address, which its endpoints name.
#[test]
fn kube_dns_lists_every_running_dns_server() {
    fn as_strs(flags: &[String]) -> Vec<&str> {
        flags.iter().map(String::as_str).collect()
    }
    let etcd = Datastore::start("etcd");
    let flags = |address: &str| -> Vec<String> {
        let mut flags = etcd.flags();
        flags.extend(["--advertise-address".to_owned(), address.to_owned()]);
        flags.push("--disable-controller-manager".to_owned());
        flags
    };
    let (flags_a, flags_b, flags_c) = (
        flags("192.0.2.21"),
        flags("192.0.2.22"),
        flags("192.0.2.23"),
    );
    let (dir_a, dir_b, dir_c) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let server_a = Server::start_with(dir_a.path(), free_port(), &as_strs(&flags_a));
    let server_b = Server::start_with(dir_b.path(), free_port(), &as_strs(&flags_b));
    let server_c = Server::start_with(dir_c.path(), free_port(), &as_strs(&flags_c));
    let kubeconfig = server_a.kubeconfig();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let client = runtime.block_on(kube_client(&kubeconfig));
    // Every server's DNS, as (port, address) from the Endpoints' subsets.
    let listed = || {
        runtime.block_on(async {
            let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), "kube-system");
            let Some(endpoints) = endpoints.get_opt("kube-dns").await.unwrap() else {
                return Vec::new();
            };
            let mut listed: Vec<(i32, String)> = Vec::new();
            for subset in endpoints.subsets.unwrap_or_default() {
                let port = subset.ports.unwrap_or_default()[0].port;
                for address in subset.addresses.unwrap_or_default() {
                    listed.push((port, address.ip));
                }
            }
            listed.sort();
            listed
        })
    };
    let three = common::eventually("three DNS servers listed", || {
        let listed = listed();
        (listed.len() == 3).then_some(listed)
    });
    // Each answers at its port.
    runtime.block_on(async {
        for (port, _) in &three {
            let port = u16::try_from(*port).unwrap();
            let mut dns = Dns::connect(SocketAddr::from(([127, 0, 0, 1], port))).await;
            dns.until(
                "kube-dns.kube-system.svc.cluster.local.",
                RecordType::A,
                &["kube-dns.kube-system.svc.cluster.local. 5 A 10.43.0.10"],
            )
            .await;
        }
    });
    // One slice per port in use.
    let slices: Vec<String> = runtime.block_on(async {
        let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "kube-system");
        let mut names: Vec<String> = slices
            .list(&kube::api::ListParams::default().labels("kubernetes.io/service-name=kube-dns"))
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|s| s.metadata.name)
            .collect();
        names.sort();
        names
    });
    assert_eq!(slices.len(), 3, "{slices:?}");
    assert!(slices.contains(&"kube-dns".to_owned()), "{slices:?}");
    // A clean stop gives up the Lease; a killed server's Lease runs out.
    server_b.stop();
    drop(server_c);
    let deadline = Instant::now() + Duration::from_secs(60);
    let left = loop {
        let listed = listed();
        if listed.len() == 1 {
            break listed[0].clone();
        }
        assert!(
            Instant::now() < deadline,
            "stopped DNS servers still listed: {listed:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(three.contains(&left));
    // The one left is the one still answering.
    runtime.block_on(async {
        let port = u16::try_from(left.0).unwrap();
        let mut dns = Dns::connect(SocketAddr::from(([127, 0, 0, 1], port))).await;
        let (code, _, _) = dns
            .ask("kube-dns.kube-system.svc.cluster.local.", RecordType::A)
            .await;
        assert_eq!(code, ResponseCode::NoError);
    });
    server_a.stop();
}

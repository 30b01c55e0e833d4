use std::process::Command;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::json;

use super::*;
use crate::rules::{NodeInfo, desired};
use crate::testing::Netns;

/// `dns` in `ns`: UDP 53 with node port 30053 and external IP 198.51.100.9, endpoints
/// 10.42.0.5 (serving) and 10.42.0.6 (neither ready nor serving).
fn dns() -> Desired {
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": "dns", "namespace": "ns"},
        "spec": {"type": "NodePort", "clusterIP": "10.43.0.10", "externalIPs": ["198.51.100.9"],
                 "ports": [{"name": "dns", "port": 53, "protocol": "UDP", "nodePort": 30053},
                           {"name": "tcp", "port": 53, "protocol": "TCP"}]},
    }))
    .unwrap();
    let slice: EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": "dns-a", "namespace": "ns",
                     "labels": {"kubernetes.io/service-name": "dns"}},
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": ["10.42.0.5"], "conditions": {"ready": true}},
            {"addresses": ["10.42.0.6"], "conditions": {"ready": false, "serving": false}},
        ],
        "ports": [{"name": "dns", "port": 5353, "protocol": "UDP"},
                  {"name": "tcp", "port": 5353, "protocol": "TCP"}],
    }))
    .unwrap();
    let node = NodeInfo {
        name: "n1".to_owned(),
        pod_cidr: Some((Ipv4Addr::new(10, 42, 0, 0), 24)),
        addresses: [Ipv4Addr::new(192, 0, 2, 1)].into(),
    };
    desired(&[service], &[slice], &node)
}

fn ip(text: &str) -> Ipv4Addr {
    text.parse().unwrap()
}

#[test]
fn conntrack_listings_are_read() {
    let text = "\
udp      17 29 src=10.0.0.1 dst=10.43.0.10 sport=1234 dport=53 [UNREPLIED] src=10.42.0.5 dst=10.0.0.1 sport=5353 dport=1234 mark=0 use=1
tcp      6 431999 ESTABLISHED src=10.0.0.1 dst=10.43.0.10 sport=1 dport=53 src=10.42.0.5 dst=10.0.0.1 sport=53 dport=1 [ASSURED] mark=0 use=1
udp      17 170 src=10.0.0.2 dst=192.0.2.1 sport=999 dport=30053 src=10.42.0.6 dst=10.42.0.1 sport=5353 dport=999 [ASSURED] mark=0 use=1
conntrack v1.4.7 (conntrack-tools): 3 flow entries have been shown.
";
    assert_eq!(
        parse_flows(text),
        [
            Flow {
                orig_dst: ip("10.43.0.10"),
                orig_dport: 53,
                reply_src: ip("10.42.0.5")
            },
            Flow {
                orig_dst: ip("192.0.2.1"),
                orig_dport: 30053,
                reply_src: ip("10.42.0.6")
            },
        ]
    );
}

#[test]
fn flows_answered_by_a_gone_endpoint_are_stale() {
    let desired = dns();
    let flow = |dst: &str, dport: u16, reply: &str| Flow {
        orig_dst: ip(dst),
        orig_dport: dport,
        reply_src: ip(reply),
    };
    let flows = [
        // To the cluster IP, answered by the serving endpoint: kept.
        flow("10.43.0.10", 53, "10.42.0.5"),
        // Answered by an endpoint that no longer serves: stale.
        flow("10.43.0.10", 53, "10.42.0.6"),
        // The external IP, answered by a pod that is gone: stale.
        flow("198.51.100.9", 53, "10.42.0.99"),
        // The node port on the node's address: stale when not answered by an endpoint.
        flow("192.0.2.1", 30053, "10.42.0.99"),
        // Another destination: not the proxy's business.
        flow("10.43.0.11", 53, "10.42.0.99"),
    ];
    let stale: Vec<Stale> = stale(&flows, &desired).into_iter().collect();
    assert_eq!(
        stale,
        [
            Stale::Frontend {
                ip: ip("10.43.0.10"),
                port: 53,
                endpoint: ip("10.42.0.6")
            },
            Stale::Frontend {
                ip: ip("198.51.100.9"),
                port: 53,
                endpoint: ip("10.42.0.99")
            },
            Stale::NodePort {
                port: 30053,
                endpoint: ip("10.42.0.99")
            },
        ]
    );
    assert_eq!(
        stale[2].args().join(" "),
        "-D -p udp -f ipv4 --orig-port-dst 30053 --reply-src 10.42.0.99"
    );
}

/// `conntrack -I` of a UDP flow from 10.0.0.1:`sport` to `dst:dport`, DNATed to
/// `endpoint:5353`.
fn insert(netns: &Netns, sport: u16, dst: &str, dport: u16, endpoint: &str) {
    let (sport, dport) = (sport.to_string(), dport.to_string());
    let status = Command::new("ip")
        .args(["netns", "exec", &netns.0, "conntrack", "-I", "-p", "udp"])
        .args([
            "-s", "10.0.0.1", "-d", dst, "--sport", &sport, "--dport", &dport,
        ])
        .args(["-r", endpoint, "-q", "10.0.0.1", "--reply-port-src", "5353"])
        .args(["--reply-port-dst", &sport, "-t", "100", "-u", "SEEN_REPLY"])
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "conntrack -I: {}",
        String::from_utf8_lossy(&status.stderr)
    );
}

#[tokio::test]
async fn the_kernel_forgets_stale_flows_and_keeps_the_others() {
    let netns = Netns::new("conntrack");
    insert(&netns, 1001, "10.43.0.10", 53, "10.42.0.5");
    insert(&netns, 1002, "10.43.0.10", 53, "10.42.0.6");
    insert(&netns, 1003, "10.43.0.11", 53, "10.42.0.6");
    let deleted = clean(&netns.command("conntrack"), &dns()).await.unwrap();
    assert_eq!(deleted, 1);
    let listed = Command::new("ip")
        .args(["netns", "exec", &netns.0, "conntrack", "-L", "-p", "udp"])
        .output()
        .unwrap();
    let mut left: Vec<(Ipv4Addr, Ipv4Addr)> = parse_flows(&String::from_utf8_lossy(&listed.stdout))
        .into_iter()
        .map(|f| (f.orig_dst, f.reply_src))
        .collect();
    left.sort();
    assert_eq!(
        left,
        [
            (ip("10.43.0.10"), ip("10.42.0.5")),
            (ip("10.43.0.11"), ip("10.42.0.6"))
        ]
    );
    // Nothing stale left: nothing to delete, no error.
    assert_eq!(clean(&netns.command("conntrack"), &dns()).await.unwrap(), 0);
}

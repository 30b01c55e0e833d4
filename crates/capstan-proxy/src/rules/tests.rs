use serde_json::json;

use super::*;

fn service(value: serde_json::Value) -> Service {
    serde_json::from_value(value).unwrap()
}

fn slice(value: serde_json::Value) -> EndpointSlice {
    serde_json::from_value(value).unwrap()
}

fn web(spec: serde_json::Value) -> Service {
    let mut spec_full = json!({"clusterIP": "10.43.0.20", "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": "web"}]});
    for (k, v) in spec.as_object().unwrap() {
        spec_full[k] = v.clone();
    }
    service(json!({"metadata": {"name": "web", "namespace": "ns"}, "spec": spec_full}))
}

/// A slice for `web` with endpoints `(ip, node, ready, serving, terminating)`.
fn web_slice(name: &str, endpoints: &[(&str, &str, bool, bool, bool)]) -> EndpointSlice {
    let endpoints: Vec<_> = endpoints
        .iter()
        .map(|(ip, node, ready, serving, terminating)| {
            json!({"addresses": [ip], "nodeName": node,
                   "conditions": {"ready": ready, "serving": serving, "terminating": terminating}})
        })
        .collect();
    slice(json!({
        "metadata": {"name": name, "namespace": "ns",
                     "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }))
}

fn node() -> NodeInfo {
    NodeInfo {
        name: "n1".to_owned(),
        pod_cidr: Some((Ipv4Addr::new(10, 42, 0, 0), 24)),
        addresses: [Ipv4Addr::new(192, 0, 2, 1)].into(),
    }
}

fn chain<'a>(desired: &'a Desired, prefix: &str) -> (&'a String, &'a Vec<Rule>) {
    desired
        .chains()
        .find(|(name, _)| name.starts_with(prefix))
        .unwrap_or_else(|| {
            let names: Vec<&String> = desired.chains().map(|(name, _)| name).collect();
            panic!("no chain {prefix}* in {names:?}")
        })
}

/// The endpoints a rule rewrites the destination to (one, or one at random of several).
fn picks(rule: &Rule) -> Vec<(Ipv4Addr, u16)> {
    match rule {
        Rule::Dnat { ip, port, .. } => vec![(*ip, *port)],
        Rule::DnatRandom { endpoints, .. } => endpoints.clone(),
        other => panic!("not a dnat: {other:?}"),
    }
}

fn ep(ip: &str, port: u16) -> (Ipv4Addr, u16) {
    (ip.parse().unwrap(), port)
}

const KEY: (Ipv4Addr, Protocol, u16) = (Ipv4Addr::new(10, 43, 0, 20), Protocol::Tcp, 80);

#[test]
fn a_cluster_ip_balances_over_ready_endpoints() {
    let services = [web(json!({}))];
    let slices = [web_slice(
        "web-a",
        &[
            ("10.42.0.5", "n1", true, true, false),
            ("10.42.1.5", "n2", true, true, false),
            ("10.42.1.6", "n2", false, false, false),
        ],
    )];
    let desired = desired(&services, &slices, &node());
    let (service_chain, rules) = chain(&desired, "service-");
    assert!(
        service_chain.ends_with("-ns/web/tcp/http"),
        "{service_chain}"
    );
    assert_eq!(
        desired.service_ips.get(&KEY),
        Some(&Target::Goto(service_chain.clone()))
    );
    assert_eq!(
        rules[0],
        Rule::MasqueradeUnlessFrom {
            ip: KEY.0,
            protocol: Protocol::Tcp,
            port: 80,
            local: (Ipv4Addr::new(10, 42, 0, 0), 24)
        }
    );
    assert_eq!(
        rules[1],
        Rule::DnatRandom {
            protocol: Protocol::Tcp,
            endpoints: vec![ep("10.42.0.5", 8080), ep("10.42.1.5", 8080)],
        },
        "the unready endpoint is left out"
    );
    assert_eq!(rules.len(), 2);
    assert_eq!(desired.chains().count(), 1, "no chain per endpoint");
    // Only this node's endpoints can hairpin, ready or not.
    assert_eq!(
        desired.hairpin,
        [Ipv4Addr::new(10, 42, 0, 5)].into(),
        "{:?}",
        desired.hairpin
    );
    assert!(desired.cluster_ips.contains(&KEY.0));
    assert!(desired.no_endpoint_services.is_empty());
    assert_eq!(desired.nodeport_ips, node().addresses);
}

#[test]
fn without_endpoints_connections_are_refused() {
    let services = [web(json!({}))];
    let none: [EndpointSlice; 0] = [];
    let desired = desired(&services, &none, &node());
    assert_eq!(
        desired.no_endpoint_services.get(&KEY),
        Some(&Target::Reject)
    );
    assert!(desired.service_ips.is_empty());
    assert_eq!(desired.chains().count(), 0);
    // Unready endpoints that are not terminating do not count either.
    let slices = [web_slice(
        "web-a",
        &[("10.42.0.5", "n1", false, false, false)],
    )];
    let desired = super::desired(&services, &slices, &node());
    assert_eq!(
        desired.no_endpoint_services.get(&KEY),
        Some(&Target::Reject)
    );
}

#[test]
fn terminating_endpoints_serve_only_when_none_is_ready() {
    let services = [web(json!({}))];
    let slices = [web_slice(
        "web-a",
        &[
            ("10.42.0.5", "n1", false, true, true),
            ("10.42.0.6", "n1", false, false, true),
        ],
    )];
    let desired = desired(&services, &slices, &node());
    let (_, rules) = chain(&desired, "service-");
    assert_eq!(picks(&rules[1]), [ep("10.42.0.5", 8080)]);
    let slices = [web_slice(
        "web-a",
        &[
            ("10.42.0.5", "n1", false, true, true),
            ("10.42.0.7", "n1", true, true, false),
        ],
    )];
    let desired = super::desired(&services, &slices, &node());
    let (_, rules) = chain(&desired, "service-");
    assert_eq!(picks(&rules[1]), [ep("10.42.0.7", 8080)]);
}

#[test]
fn node_ports_and_external_ips_masquerade_and_reach_every_endpoint() {
    let services = [web(json!({
        "type": "NodePort",
        "externalIPs": ["198.51.100.7"],
        "ports": [{"name": "http", "port": 80, "nodePort": 30080, "protocol": "TCP"}],
    }))];
    let slices = [web_slice(
        "web-a",
        &[("10.42.1.5", "n2", true, true, false)],
    )];
    let desired = desired(&services, &slices, &node());
    let (external, rules) = chain(&desired, "external-");
    let (service_chain, _) = chain(&desired, "service-");
    assert_eq!(
        rules,
        &vec![Rule::Masquerade, Rule::Goto(service_chain.clone())]
    );
    assert_eq!(
        desired.service_nodeports.get(&(Protocol::Tcp, 30080)),
        Some(&Target::Goto(external.clone()))
    );
    assert_eq!(
        desired
            .service_ips
            .get(&(Ipv4Addr::new(198, 51, 100, 7), Protocol::Tcp, 80)),
        Some(&Target::Goto(external.clone()))
    );
    // Without endpoints the node port refuses too.
    let none: [EndpointSlice; 0] = [];
    let desired = super::desired(&services, &none, &node());
    assert_eq!(
        desired.no_endpoint_nodeports.get(&(Protocol::Tcp, 30080)),
        Some(&Target::Reject)
    );
    assert_eq!(
        desired
            .no_endpoint_services
            .get(&(Ipv4Addr::new(198, 51, 100, 7), Protocol::Tcp, 80)),
        Some(&Target::Reject)
    );
}

#[test]
fn external_traffic_policy_local_keeps_outside_traffic_on_this_node() {
    let services = [web(json!({
        "type": "NodePort", "externalTrafficPolicy": "Local",
        "ports": [{"name": "http", "port": 80, "nodePort": 30080}],
    }))];
    // Only a remote endpoint: outside traffic is dropped, pods and the node still get through.
    let slices = [web_slice(
        "web-a",
        &[("10.42.1.5", "n2", true, true, false)],
    )];
    let desired = desired(&services, &slices, &node());
    let (_, rules) = chain(&desired, "external-");
    let (service_chain, _) = chain(&desired, "service-");
    assert_eq!(
        rules,
        &vec![
            Rule::GotoFromRange {
                range: (Ipv4Addr::new(10, 42, 0, 0), 24),
                chain: service_chain.clone()
            },
            Rule::MasqueradeFromNode,
            Rule::GotoFromNode(service_chain.clone()),
            Rule::Drop,
        ]
    );
    // With a local endpoint, outside traffic goes to it, unmasqueraded.
    let slices = [web_slice(
        "web-a",
        &[
            ("10.42.1.5", "n2", true, true, false),
            ("10.42.0.9", "n1", true, true, false),
        ],
    )];
    let desired = super::desired(&services, &slices, &node());
    let (_, rules) = chain(&desired, "external-");
    let (local_chain, local_rules) = chain(&desired, "local-");
    assert_eq!(rules.last(), Some(&Rule::Goto(local_chain.clone())));
    assert_eq!(picks(&local_rules[0]), [ep("10.42.0.9", 8080)]);
}

#[test]
fn internal_traffic_policy_local_drops_without_a_local_endpoint() {
    let services = [web(json!({"internalTrafficPolicy": "Local"}))];
    let slices = [web_slice(
        "web-a",
        &[("10.42.1.5", "n2", true, true, false)],
    )];
    let desired = desired(&services, &slices, &node());
    assert_eq!(desired.no_endpoint_services.get(&KEY), Some(&Target::Drop));
    let slices = [web_slice(
        "web-a",
        &[
            ("10.42.1.5", "n2", true, true, false),
            ("10.42.0.9", "n1", true, true, false),
        ],
    )];
    let desired = super::desired(&services, &slices, &node());
    let (local_chain, _) = chain(&desired, "local-");
    assert_eq!(
        desired.service_ips.get(&KEY),
        Some(&Target::Goto(local_chain.clone()))
    );
}

#[test]
fn client_ip_affinity_records_and_follows_clients() {
    let services = [web(json!({
        "sessionAffinity": "ClientIP",
        "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}},
    }))];
    let slices = [web_slice(
        "web-a",
        &[
            ("10.42.0.5", "n1", true, true, false),
            ("10.42.0.6", "n1", true, true, false),
        ],
    )];
    let desired = desired(&services, &slices, &node());
    assert_eq!(desired.affinity_sets().count(), 2);
    assert!(desired.affinity_sets().all(|(_, t)| *t == 60));
    let (_, rules) = chain(&desired, "service-");
    assert!(matches!(&rules[1], Rule::Affinity { set, chain }
        if set.starts_with("affinity-") && set.ends_with("__10.42.0.5/8080")
            && chain.ends_with("__10.42.0.5/8080")));
    assert!(matches!(&rules[3], Rule::Random(c) if c.len() == 2));
    let (_, endpoint) = chain(&desired, "endpoint-");
    assert!(matches!(&endpoint[0], Rule::RecordAffinity(set) if set.starts_with("affinity-")));
    assert!(matches!(&endpoint[1], Rule::Dnat { port: 8080, .. }));
    // The default timeout is upstream's three hours.
    let services = [web(json!({"sessionAffinity": "ClientIP"}))];
    let desired = super::desired(&services, &slices, &node());
    assert!(
        desired
            .affinity_sets()
            .all(|(_, t)| *t == DEFAULT_AFFINITY_TIMEOUT)
    );
}

#[test]
fn headless_external_name_and_foreign_services_are_not_proxied() {
    let services = [
        web(json!({"clusterIP": "None"})),
        service(json!({"metadata": {"name": "ext", "namespace": "ns"},
                       "spec": {"type": "ExternalName", "externalName": "example.com"}})),
        service(json!({"metadata": {"name": "other", "namespace": "ns",
                                    "labels": {SERVICE_PROXY_NAME: "someone-else"}},
                       "spec": {"clusterIP": "10.43.0.30", "ports": [{"port": 80}]}})),
    ];
    let slices = [web_slice(
        "web-a",
        &[("10.42.0.5", "n1", true, true, false)],
    )];
    let desired = desired(&services, &slices, &node());
    assert!(desired.service_ips.is_empty());
    assert!(desired.no_endpoint_services.is_empty());
    assert!(desired.cluster_ips.is_empty());
}

#[test]
fn slices_are_matched_by_port_name_and_protocol_and_merged() {
    let services = [service(json!({
        "metadata": {"name": "dns", "namespace": "kube-system"},
        "spec": {"clusterIP": "10.43.0.10", "ports": [
            {"name": "dns", "port": 53, "protocol": "UDP"},
            {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
        ]},
    }))];
    let one = |name: &str, ip: &str| {
        slice(json!({
            "metadata": {"name": name, "namespace": "kube-system",
                         "labels": {"kubernetes.io/service-name": "dns"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [ip]}],
            "ports": [{"name": "dns", "port": 5353, "protocol": "UDP"},
                      {"name": "dns-tcp", "port": 5354, "protocol": "TCP"}],
        }))
    };
    // The same address in two slices (a slice being replaced) counts once.
    let slices = [
        one("dns-a", "192.0.2.1"),
        one("dns-b", "192.0.2.1"),
        one("dns-c", "192.0.2.2"),
    ];
    let desired = desired(&services, &slices, &node());
    let udp = desired
        .service_ips
        .get(&(Ipv4Addr::new(10, 43, 0, 10), Protocol::Udp, 53))
        .unwrap();
    let Target::Goto(udp) = udp else { panic!() };
    assert!(udp.ends_with("kube-system/dns/udp/dns"), "{udp}");
    assert_eq!(
        picks(&desired.chain(udp).unwrap()[1]),
        [ep("192.0.2.1", 5353), ep("192.0.2.2", 5353)]
    );
    let Target::Goto(tcp) =
        &desired.service_ips[&(Ipv4Addr::new(10, 43, 0, 10), Protocol::Tcp, 53)]
    else {
        panic!()
    };
    assert!(tcp.contains("kube-system/dns/tcp/dns-tcp"));
    assert_eq!(
        picks(&desired.chain(tcp).unwrap()[1]),
        [ep("192.0.2.1", 5354), ep("192.0.2.2", 5354)]
    );
}

#[test]
fn node_info_comes_from_the_node_object() {
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "n1"},
        "spec": {"podCIDR": "10.42.3.0/24"},
        "status": {"addresses": [
            {"type": "InternalIP", "address": "192.0.2.8"},
            {"type": "Hostname", "address": "n1"},
            {"type": "InternalIP", "address": "fd00::8"},
        ]},
    }))
    .unwrap();
    let info = NodeInfo::from_node("n1", Some(&node));
    assert_eq!(info.pod_cidr, Some((Ipv4Addr::new(10, 42, 3, 0), 24)));
    assert_eq!(info.addresses, [Ipv4Addr::new(192, 0, 2, 8)].into());
    assert_eq!(parse_cidr("10.0.0.0/33"), None);
    // Without a pod range, nothing is masqueraded by source.
    let services = [web(json!({}))];
    let slices = [web_slice(
        "web-a",
        &[("10.42.0.5", "n1", true, true, false)],
    )];
    let info = NodeInfo::from_node("n1", None);
    let desired = desired(&services, &slices, &info);
    let (_, rules) = chain(&desired, "service-");
    assert!(matches!(rules[0], Rule::Dnat { .. }), "{rules:?}");
}

#![allow(clippy::unwrap_used)]

use super::*;
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, PodCondition, PodIP, PodSpec, PodStatus, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::Event;
use serde_json::json;

fn service(ports: Vec<ServicePort>, publish: bool) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("ns".into()),
            labels: Some([("app".to_owned(), "web".to_owned())].into()),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            selector: Some([("app".to_owned(), "web".to_owned())].into()),
            ports: Some(ports),
            cluster_ip: Some("10.43.0.10".into()),
            publish_not_ready_addresses: Some(publish),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

fn port(name: &str, number: i32, target: IntOrString) -> ServicePort {
    ServicePort {
        name: Some(name.into()),
        port: number,
        target_port: Some(target),
        protocol: Some("TCP".into()),
        ..ServicePort::default()
    }
}

fn pod(name: &str, ip: &str, ready: bool, http_port: i32) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            uid: Some(format!("uid-{name}")),
            labels: Some([("app".to_owned(), "web".to_owned())].into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some("n1".into()),
            hostname: Some(name.into()),
            subdomain: Some("web".into()),
            containers: vec![Container {
                name: "c".into(),
                ports: Some(vec![ContainerPort {
                    name: Some("http".into()),
                    container_port: http_port,
                    protocol: Some("TCP".into()),
                    ..ContainerPort::default()
                }]),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            pod_ip: Some(ip.into()),
            pod_ips: Some(vec![PodIP { ip: ip.into() }]),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..PodCondition::default()
            }]),
            ..PodStatus::default()
        }),
    }
}

fn nodes() -> Store<Node> {
    let mut writer = Writer::<Node>::default();
    writer.apply_watcher_event(&Event::Init);
    writer.apply_watcher_event(&Event::InitApply(Node {
        metadata: ObjectMeta {
            name: Some("n1".into()),
            labels: Some([(ZONE_LABEL.to_owned(), "zone-a".to_owned())].into()),
            ..ObjectMeta::default()
        },
        ..Node::default()
    }));
    writer.apply_watcher_event(&Event::InitDone);
    writer.as_reader()
}

#[test]
fn a_pod_contributes_its_address_conditions_and_resolved_ports() {
    let svc = service(
        vec![
            port("http", 80, IntOrString::String("http".into())),
            port("metrics", 9090, IntOrString::Int(9091)),
            port("missing", 81, IntOrString::String("nope".into())),
        ],
        false,
    );
    let nodes = nodes();
    let endpoint = pod_endpoint(&svc, &pod("p1", "10.42.0.5", true, 8080), &nodes).unwrap();
    assert_eq!(endpoint.ip, "10.42.0.5");
    assert_eq!(
        (endpoint.ready, endpoint.serving, endpoint.terminating),
        (true, true, false)
    );
    assert_eq!(endpoint.zone.as_deref(), Some("zone-a"));
    assert_eq!(endpoint.hostname.as_deref(), Some("p1"));
    let ports: Vec<(String, i32)> = endpoint
        .ports
        .iter()
        .map(|p| (p.name.clone(), p.port))
        .collect();
    // A named port the pod lacks is left out for that pod.
    assert_eq!(
        ports,
        [("http".to_owned(), 8080), ("metrics".to_owned(), 9091)]
    );
    // Terminating: listed for slices, not ready but still serving.
    let mut leaving = pod("p2", "10.42.0.6", true, 8080);
    leaving.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
    assert!(should_be_in_endpoints(&leaving, true));
    assert!(!should_be_in_endpoints(&leaving, false));
    let endpoint = pod_endpoint(&svc, &leaving, &nodes).unwrap();
    assert_eq!(
        (endpoint.ready, endpoint.serving, endpoint.terminating),
        (false, true, true)
    );
    // publishNotReadyAddresses makes every address ready.
    let published = service(vec![port("http", 80, IntOrString::Int(80))], true);
    let endpoint = pod_endpoint(&published, &pod("p3", "10.42.0.7", false, 80), &nodes).unwrap();
    assert!(endpoint.ready && !endpoint.serving);
    // Finished pods take no part.
    let mut done = pod("p4", "10.42.0.8", false, 80);
    done.status.as_mut().unwrap().phase = Some("Succeeded".into());
    assert!(!should_be_in_endpoints(&done, true));
}

#[test]
fn slices_hold_at_most_a_hundred_endpoints_per_port_set() {
    let svc = service(
        vec![port("http", 80, IntOrString::String("http".into()))],
        false,
    );
    let nodes = nodes();
    let endpoints: Vec<PodEndpoint> = (0..250)
        .map(|i| {
            // A tenth of the pods serve on another port: a slice group of their own.
            let port = if i % 10 == 0 { 9000 } else { 8080 };
            let ip = format!("10.42.{}.{}", i / 200, i % 200);
            pod_endpoint(&svc, &pod(&format!("p{i:03}"), &ip, true, port), &nodes).unwrap()
        })
        .collect();
    let wanted = slices::wanted_slices(&svc, &endpoints);
    let sizes: Vec<usize> = wanted.iter().map(|w| w.endpoints.len()).collect();
    assert_eq!(sizes, [100, 100, 25, 25]);
    assert_eq!(
        wanted[3].ports,
        json!([{"name": "http", "protocol": "TCP", "port": 9000}])
    );
    // Nothing selected: one placeholder slice without ports.
    let empty = slices::wanted_slices(&svc, &[]);
    assert_eq!(empty.len(), 1);
    assert_eq!(
        (empty[0].ports.clone(), empty[0].endpoints.len()),
        (json!([]), 0)
    );
}

#[test]
fn existing_slices_are_reused_before_new_ones_are_made() {
    let ports_a = json!([{"name": "a"}]);
    let ports_b = json!([{"name": "b"}]);
    let wanted = vec![
        slices::Wanted {
            ports: ports_a.clone(),
            endpoints: vec![],
        },
        slices::Wanted {
            ports: ports_b.clone(),
            endpoints: vec![],
        },
        slices::Wanted {
            ports: ports_b.clone(),
            endpoints: vec![],
        },
    ];
    let existing = vec![
        ("web-z".to_owned(), ports_b.clone()),
        ("web-y".to_owned(), json!([{"name": "c"}])),
        ("web-x".to_owned(), json!([{"name": "d"}])),
        ("web-w".to_owned(), ports_a.clone()),
    ];
    let (pairs, leftover) = slices::plan(&wanted, &existing);
    let names: Vec<Option<&str>> = pairs.iter().map(|(_, n)| n.map(String::as_str)).collect();
    assert_eq!(names, [Some("web-w"), Some("web-z"), Some("web-x")]);
    assert_eq!(leftover, [&"web-y".to_owned()]);
}

#[test]
fn endpoints_split_ready_from_not_ready_and_are_truncated_past_a_thousand() {
    let svc = service(vec![port("http", 80, IntOrString::Int(8080))], false);
    let nodes = nodes();
    let endpoints: Vec<PodEndpoint> = [("p1", "10.42.0.2", true), ("p2", "10.42.0.1", false)]
        .iter()
        .map(|(n, ip, ready)| pod_endpoint(&svc, &pod(n, ip, *ready, 8080), &nodes).unwrap())
        .collect();
    let (subsets, truncated) = legacy::subsets("ns", &endpoints);
    assert!(!truncated);
    let target = |name: &str| json!({"kind": "Pod", "namespace": "ns", "name": name, "uid": format!("uid-{name}")});
    assert_eq!(
        subsets,
        [json!({
            "addresses": [{"ip": "10.42.0.2", "hostname": "p1", "nodeName": "n1",
                           "targetRef": target("p1")}],
            "notReadyAddresses": [{"ip": "10.42.0.1", "hostname": "p2", "nodeName": "n1",
                                   "targetRef": target("p2")}],
            "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
        })]
    );
    let many: Vec<PodEndpoint> = (0..1100)
        .map(|i| {
            let ip = format!("10.42.{}.{}", i / 250, i % 250);
            pod_endpoint(&svc, &pod(&format!("p{i}"), &ip, i % 2 == 0, 8080), &nodes).unwrap()
        })
        .collect();
    let (subsets, truncated) = legacy::subsets("ns", &many);
    assert!(truncated);
    let ready = subsets[0]["addresses"].as_array().unwrap().len();
    let not_ready = subsets[0]["notReadyAddresses"].as_array().unwrap().len();
    // Every ready address is kept; the not ready ones fill the rest.
    assert_eq!((ready, not_ready), (550, 450));
}

use serde_json::{Value, json};

use super::*;
use crate::rules::{NodeInfo, desired};

use crate::testing::Netns;

fn objects<'a>(listing: &'a Value, kind: &str) -> Vec<&'a Value> {
    listing["nftables"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o.get(kind))
        .collect()
}

fn chain_names(listing: &Value) -> Vec<String> {
    objects(listing, "chain")
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_owned())
        .collect()
}

fn map_size(listing: &Value, name: &str) -> usize {
    objects(listing, "map")
        .iter()
        .find(|m| m["name"] == name)
        .and_then(|m| m["elem"].as_array().map(Vec::len))
        .unwrap_or(0)
}

fn services(count: usize, endpoints: usize, affinity: bool) -> (Vec<Service>, Vec<EndpointSlice>) {
    let mut services = Vec::new();
    let mut slices = Vec::new();
    for i in 0..count {
        let mut spec = json!({
            "type": "NodePort",
            "clusterIP": format!("10.43.{}.{}", i / 250, i % 250 + 1),
            "ports": [{"name": "http", "port": 80, "nodePort": 30000 + i, "protocol": "TCP"},
                      {"name": "dns", "port": 53, "protocol": "UDP"}],
        });
        if affinity {
            spec["sessionAffinity"] = json!("ClientIP");
        }
        services.push(
            serde_json::from_value(json!({
                "metadata": {"name": format!("svc{i}"), "namespace": "ns"},
                "spec": spec,
            }))
            .unwrap(),
        );
        let endpoints: Vec<Value> = (0..endpoints)
            .map(|e| json!({"addresses": [format!("10.42.{}.{}", e, i % 250 + 1)], "nodeName": "n1"}))
            .collect();
        slices.push(
            serde_json::from_value(json!({
                "metadata": {"name": format!("svc{i}-x"), "namespace": "ns",
                             "labels": {"kubernetes.io/service-name": format!("svc{i}")}},
                "addressType": "IPv4",
                "endpoints": endpoints,
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"},
                          {"name": "dns", "port": 5353, "protocol": "UDP"}],
            }))
            .unwrap(),
        );
    }
    (services, slices)
}

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

fn node() -> NodeInfo {
    NodeInfo {
        name: "n1".to_owned(),
        pod_cidr: Some((Ipv4Addr::new(10, 42, 0, 0), 24)),
        addresses: [Ipv4Addr::new(192, 0, 2, 1)].into(),
    }
}

#[test]
fn verdict_maps_are_written_with_the_verdict_type() {
    let writer = Writer::new("kube-proxy");
    let json: Value =
        serde_json::from_str(&to_json(writer.transaction(None, &Desired::default())).unwrap())
            .unwrap();
    let maps: Vec<&Value> = json["nftables"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o.pointer("/add/map"))
        .collect();
    assert_eq!(maps.len(), 4);
    assert!(maps.iter().all(|m| m["map"] == "verdict"));
    let first = &json["nftables"][0];
    assert_eq!(
        first,
        &json!({"add": {"table": {"family": "ip", "name": "kube-proxy"}}})
    );
    assert_eq!(
        json["nftables"][1],
        json!({"delete": {"table": {"family": "ip", "name": "kube-proxy"}}})
    );
}

#[test]
fn a_one_endpoint_change_touches_only_its_services_rules() {
    let writer = Writer::new("kube-proxy");
    let (services, mut slices) = super::tests::services(100, 10, false);
    let before = desired(&services, &slices, &node());
    slices[7].endpoints.pop();
    let after = desired(&services, &slices, &node());
    let transaction = writer.transaction(Some(&before), &after);
    let text = to_json(transaction.clone()).unwrap();
    assert!(text.contains("ns/svc7/"), "{text}");
    for other in ["ns/svc6/", "ns/svc8/", "ns/svc70/"] {
        assert!(!text.contains(other), "{other} touched: {text}");
    }
    // Two service chains refilled (tcp and udp); no chain comes or goes, and the endpoint
    // leaves the hairpin set.
    let flushed = transaction
        .iter()
        .filter(|o| matches!(o, NfObject::CmdObject(NfCmd::Flush(_))))
        .count();
    assert_eq!(flushed, 2, "{text}");
    let chains_added_or_deleted = transaction
        .iter()
        .filter(|o| {
            matches!(
                o,
                NfObject::CmdObject(
                    NfCmd::Delete(NfListObject::Chain(_)) | NfCmd::Add(NfListObject::Chain(_))
                )
            )
        })
        .count();
    assert_eq!(chains_added_or_deleted, 0, "{text}");
    let hairpin_deleted = transaction.iter().any(|o| {
        let NfObject::CmdObject(NfCmd::Delete(NfListObject::Element(element))) = o else {
            return false;
        };
        element.name == "hairpin"
            && serde_json::to_string(&element.elem).unwrap()
                == r#"[{"concat":["10.42.9.8","10.42.9.8"]}]"#
    });
    assert!(hairpin_deleted, "{text}");
    // Nothing changed: nothing to send.
    assert!(writer.transaction(Some(&after), &after).is_empty());
}

#[test]
fn a_model_recomputes_only_the_services_that_changed() {
    let writer = Writer::new("kube-proxy");
    let (mut services, mut slices) = super::tests::services(50, 4, false);
    for object in services.iter_mut() {
        object.metadata.resource_version = Some("1".to_owned());
    }
    for object in slices.iter_mut() {
        object.metadata.resource_version = Some("1".to_owned());
    }
    let mut model = crate::rules::Model::default();
    let before = model.desired(&services, &slices, &node());
    // A new version of one slice.
    slices[7].endpoints.pop();
    slices[7].metadata.resource_version = Some("2".to_owned());
    let after = model.desired(&services, &slices, &node());
    let recomputed: Vec<&String> = after
        .services
        .iter()
        .filter(|(key, part)| !Arc::ptr_eq(&before.services[*key], part))
        .map(|(key, _)| &key.1)
        .collect();
    assert_eq!(recomputed, ["svc7"]);
    assert_eq!(
        after,
        desired(&services, &slices, &node()),
        "the same as from scratch"
    );
    let text = to_json(writer.transaction(Some(&before), &after)).unwrap();
    assert!(
        text.contains("ns/svc7/") && !text.contains("ns/svc8/"),
        "{text}"
    );
    // Another node: everything is recomputed for it.
    let elsewhere = NodeInfo {
        name: "n2".to_owned(),
        ..node()
    };
    let moved = model.desired(&services, &slices, &elsewhere);
    assert!(
        moved
            .services
            .iter()
            .all(|(key, part)| !Arc::ptr_eq(&after.services[key], part))
    );
    assert_eq!(moved, desired(&services, &slices, &elsewhere));
}

#[tokio::test]
async fn the_kernel_takes_one_rule_per_service_port_without_affinity() {
    let netns = Netns::new("plain");
    let mut proxier = crate::Proxier::new("kube-proxy", &netns.nft());
    let (services, mut slices) = super::tests::services(20, 3, false);
    proxier
        .sync(desired(&services, &slices, &node()))
        .await
        .unwrap();
    let listing = netns.list("kube-proxy").expect("the table exists");
    let chains = chain_names(&listing);
    let count = |chains: &[String], prefix: &str| {
        chains
            .iter()
            .filter(|c| c.starts_with(prefix) && c.contains('/'))
            .count()
    };
    assert_eq!(count(&chains, "service-"), 40);
    assert_eq!(count(&chains, "external-"), 20);
    assert_eq!(count(&chains, "endpoint-"), 0, "{chains:?}");
    // The endpoint is picked in the service chain, over the three endpoints.
    let rules = objects(&listing, "rule");
    let svc3 = rules
        .iter()
        .find(|r| {
            r["chain"].as_str().unwrap().starts_with("service-")
                && r["chain"].as_str().unwrap().ends_with("ns/svc3/tcp/http")
                && r.to_string().contains("dnat")
        })
        .expect("svc3's dnat rule");
    let text = svc3.to_string();
    for ip in ["10.42.0.4", "10.42.1.4", "10.42.2.4"] {
        assert!(text.contains(ip), "{text}");
    }
    assert!(text.contains("numgen"), "{text}");
    let hairpin = objects(&listing, "set")
        .into_iter()
        .find(|s| s["name"] == "hairpin")
        .expect("the hairpin set");
    assert_eq!(hairpin["elem"].as_array().unwrap().len(), 60);

    // One endpoint left, then none, then three again: applied incrementally.
    slices[3].endpoints.truncate(1);
    let stats = proxier
        .sync(desired(&services, &slices, &node()))
        .await
        .unwrap();
    assert!(!stats.full);
    let listing = netns.list("kube-proxy").unwrap();
    let one = objects(&listing, "rule")
        .into_iter()
        .filter(|r| r["chain"].as_str().unwrap().ends_with("ns/svc3/tcp/http"))
        .map(|r| r.to_string())
        .find(|r| r.contains("dnat"))
        .unwrap();
    assert!(
        one.contains("10.42.0.4") && !one.contains("numgen"),
        "{one}"
    );
    slices[3].endpoints.clear();
    proxier
        .sync(desired(&services, &slices, &node()))
        .await
        .unwrap();
    let listing = netns.list("kube-proxy").unwrap();
    assert_eq!(count(&chain_names(&listing), "service-"), 38);
    assert_eq!(map_size(&listing, "no-endpoint-services"), 2);
    let (_, full_slices) = super::tests::services(20, 3, false);
    let stats = proxier
        .sync(desired(&services, &full_slices, &node()))
        .await
        .unwrap();
    assert!(!stats.full);
    let listing = netns.list("kube-proxy").unwrap();
    assert_eq!(count(&chain_names(&listing), "service-"), 40);
    assert_eq!(map_size(&listing, "no-endpoint-services"), 0);
    proxier.remove().await.unwrap();
}

#[tokio::test]
async fn the_kernel_takes_full_and_incremental_syncs_and_the_table_goes_away() {
    let netns = Netns::new("sync");
    let mut proxier = crate::Proxier::new("kube-proxy", &netns.nft());
    let (services, mut slices) = super::tests::services(20, 3, true);
    let stats = proxier
        .sync(desired(&services, &slices, &node()))
        .await
        .unwrap();
    assert!(stats.full);
    let listing = netns.list("kube-proxy").expect("the table exists");
    let chains = chain_names(&listing);
    for base in [
        "nat-prerouting",
        "nat-output",
        "nat-postrouting",
        "filter-forward",
        "services",
    ] {
        assert!(
            chains.iter().any(|c| c == base),
            "{base} missing: {chains:?}"
        );
    }
    // 20 Services × 2 ports: a service chain each, 3 endpoint chains each, an external chain
    // per node port.
    let count = |prefix: &str| {
        chains
            .iter()
            .filter(|c| c.starts_with(prefix) && c.contains('/'))
            .count()
    };
    assert_eq!(count("service-"), 40);
    assert_eq!(count("endpoint-"), 120);
    assert_eq!(count("external-"), 20);
    assert_eq!(map_size(&listing, "service-ips"), 40);
    assert_eq!(map_size(&listing, "service-nodeports"), 20);
    assert_eq!(
        objects(&listing, "set")
            .iter()
            .filter(|s| s["name"].as_str().unwrap().starts_with("affinity-"))
            .count(),
        120
    );

    // An endpoint leaves, a Service loses all of them: applied incrementally.
    slices[3].endpoints.pop();
    slices[4].endpoints.clear();
    let stats = proxier
        .sync(desired(&services, &slices, &node()))
        .await
        .unwrap();
    assert!(!stats.full);
    let listing = netns.list("kube-proxy").unwrap();
    let chains = chain_names(&listing);
    let count = |prefix: &str| {
        chains
            .iter()
            .filter(|c| c.starts_with(prefix) && c.contains('/'))
            .count()
    };
    assert_eq!(count("endpoint-"), 120 - 2 - 6);
    assert_eq!(count("service-"), 38);
    assert_eq!(map_size(&listing, "service-ips"), 38);
    assert_eq!(map_size(&listing, "no-endpoint-services"), 2);
    assert_eq!(map_size(&listing, "no-endpoint-nodeports"), 1);

    // Someone else changes the table behind the proxy's back: the next sync fails, and the
    // one after replaces the whole table.
    let status = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &netns.0,
            "nft",
            "delete",
            "table",
            "ip",
            "kube-proxy",
        ])
        .status()
        .unwrap();
    assert!(status.success());
    slices[3].endpoints.clear();
    assert!(
        proxier
            .sync(desired(&services, &slices, &node()))
            .await
            .is_err()
    );
    let stats = proxier
        .sync(desired(&services, &slices, &node()))
        .await
        .unwrap();
    assert!(stats.full);
    assert_eq!(
        map_size(&netns.list("kube-proxy").unwrap(), "no-endpoint-services"),
        4
    );

    proxier.remove().await.unwrap();
    assert!(netns.list("kube-proxy").is_none());
    // Removing a table that is not there is fine (a clean stop after a failed start).
    proxier.remove().await.unwrap();
}

//! The fake addresses of simulated nodes and their pods. Nothing ever connects to them; they only
//! have to look like a cluster network's: unique, stable for a node across restarts of the
//! simulator, and each pod's inside its node's range.
//!
//! Node `i` has the InternalIP `10.0.0.0 + i + 1` (10.0.0.1, 10.0.0.2, …) and the pod range
//! `10.(base + i / 256).(i % 256).0/24`, where `base` is [`SimConfig::pod_cidr_base`]; pods get
//! the hosts `.1` to `.254` of it.
//!
//! [`SimConfig::pod_cidr_base`]: crate::SimConfig::pod_cidr_base

use std::collections::HashMap;
use std::net::Ipv4Addr;

/// The number of pod addresses in a node's /24 (`.1` to `.254`).
pub const POD_ADDRESSES_PER_NODE: usize = 254;

/// The most nodes a pod range base allows: the ranges `10.base.0.0` to `10.255.255.0` hold
/// `(256 - base) * 256` node /24s, and the node addresses, counted up from `10.0.0.1`, must stay
/// below `10.base.0.0`.
pub fn max_nodes(pod_cidr_base: u8) -> usize {
    let ranges = (256 - usize::from(pod_cidr_base)) * 256;
    let node_addresses = (usize::from(pod_cidr_base) << 16).saturating_sub(1);
    ranges.min(node_addresses)
}

/// The InternalIP of node `index`.
pub fn node_ip(index: usize) -> Ipv4Addr {
    let n = u32::try_from(index)
        .unwrap_or(u32::MAX)
        .saturating_add(1)
        .min(0x00ff_ffff);
    Ipv4Addr::from(0x0a00_0000 | n)
}

/// The first three octets of node `index`'s pod range.
fn pod_subnet(pod_cidr_base: u8, index: usize) -> [u8; 3] {
    let high = usize::from(pod_cidr_base) + index / 256;
    [
        10,
        u8::try_from(high).unwrap_or(u8::MAX),
        (index % 256) as u8,
    ]
}

/// Node `index`'s pod range, as a CIDR.
pub fn pod_cidr(pod_cidr_base: u8, index: usize) -> String {
    let [a, b, c] = pod_subnet(pod_cidr_base, index);
    format!("{a}.{b}.{c}.0/24")
}

/// The pod address `host` (1 to 254) in node `index`'s range.
pub fn pod_ip(pod_cidr_base: u8, index: usize, host: u8) -> Ipv4Addr {
    let [a, b, c] = pod_subnet(pod_cidr_base, index);
    Ipv4Addr::new(a, b, c, host)
}

/// The host part of `ip` if it is a pod address in node `index`'s range.
fn host_in_range(pod_cidr_base: u8, index: usize, ip: Ipv4Addr) -> Option<u8> {
    let [a, b, c, d] = ip.octets();
    (pod_subnet(pod_cidr_base, index) == [a, b, c] && (1..=254).contains(&d)).then_some(d)
}

/// A set of the 254 hosts of one /24.
#[derive(Clone, Copy, Debug, Default)]
struct Hosts([u64; 4]);

impl Hosts {
    fn contains(&self, host: u8) -> bool {
        self.0[usize::from(host / 64)] & (1 << (host % 64)) != 0
    }
    fn insert(&mut self, host: u8) {
        self.0[usize::from(host / 64)] |= 1 << (host % 64);
    }
    fn remove(&mut self, host: u8) {
        self.0[usize::from(host / 64)] &= !(1 << (host % 64));
    }
    fn is_empty(&self) -> bool {
        self.0.iter().all(|w| *w == 0)
    }
    /// The lowest free host from 1 to 254.
    fn first_free(&self) -> Option<u8> {
        (1..=254).find(|h| !self.contains(*h))
    }
}

/// The pod addresses in use, per node, keyed by pod UID: what the node's IPAM plugin would keep.
#[derive(Debug)]
pub struct PodIps {
    pod_cidr_base: u8,
    used: HashMap<usize, Hosts>,
    by_pod: HashMap<String, (usize, u8)>,
}

impl PodIps {
    /// No address in use.
    pub fn new(pod_cidr_base: u8) -> Self {
        PodIps {
            pod_cidr_base,
            used: HashMap::new(),
            by_pod: HashMap::new(),
        }
    }

    /// The address of pod `uid` on node `index`: the one it already has, else the lowest free
    /// one; `None` when the node's range is full.
    pub fn assign(&mut self, uid: &str, index: usize) -> Option<Ipv4Addr> {
        if let Some(&(node, host)) = self.by_pod.get(uid) {
            if node == index {
                return Some(pod_ip(self.pod_cidr_base, node, host));
            }
            // A pod never moves between nodes; a UID seen on another node is stale.
            self.release(uid);
        }
        let hosts = self.used.entry(index).or_default();
        let host = hosts.first_free()?;
        hosts.insert(host);
        self.by_pod.insert(uid.to_owned(), (index, host));
        Some(pod_ip(self.pod_cidr_base, index, host))
    }

    /// Records that pod `uid` on node `index` already has `ip` (found running after a restart),
    /// so the address is not handed out again. Addresses outside the node's range, or taken by
    /// another pod, are not recorded.
    pub fn record(&mut self, uid: &str, index: usize, ip: Ipv4Addr) {
        if self.by_pod.contains_key(uid) {
            return;
        }
        let Some(host) = host_in_range(self.pod_cidr_base, index, ip) else {
            return;
        };
        let hosts = self.used.entry(index).or_default();
        if hosts.contains(host) {
            return;
        }
        hosts.insert(host);
        self.by_pod.insert(uid.to_owned(), (index, host));
    }

    /// Frees the address of pod `uid`, if it has one.
    pub fn release(&mut self, uid: &str) {
        let Some((index, host)) = self.by_pod.remove(uid) else {
            return;
        };
        if let Some(hosts) = self.used.get_mut(&index) {
            hosts.remove(host);
            if hosts.is_empty() {
                self.used.remove(&index);
            }
        }
    }

    /// How many addresses are in use.
    pub fn len(&self) -> usize {
        self.by_pod.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_addresses_count_up_from_10_0_0_1() {
        let check = |index: usize, expected: [u8; 4]| {
            assert_eq!(node_ip(index), Ipv4Addr::from(expected), "node {index}");
        };
        check(0, [10, 0, 0, 1]);
        check(1, [10, 0, 0, 2]);
        check(254, [10, 0, 0, 255]);
        check(255, [10, 0, 1, 0]);
        check(4_999, [10, 0, 19, 136]);
        check(65_535, [10, 1, 0, 0]);
    }

    #[test]
    fn pod_ranges_are_one_slash_24_per_node() {
        let check = |base: u8, index: usize, cidr: &str| {
            assert_eq!(pod_cidr(base, index), cidr, "base {base}, node {index}");
        };
        check(100, 0, "10.100.0.0/24");
        check(100, 1, "10.100.1.0/24");
        check(100, 255, "10.100.255.0/24");
        check(100, 256, "10.101.0.0/24");
        check(100, 4_999, "10.119.135.0/24");
        check(244, 3_071, "10.255.255.0/24");
        assert_eq!(pod_ip(100, 257, 7), Ipv4Addr::new(10, 101, 1, 7));
    }

    #[test]
    fn the_node_count_is_bounded_by_both_ranges() {
        assert_eq!(max_nodes(100), 156 * 256);
        assert_eq!(max_nodes(255), 256);
        assert_eq!(max_nodes(1), 255 * 256);
        // With base 0, pod ranges would overlap the node addresses.
        assert_eq!(max_nodes(0), 0);
        // The last node's pod range and address are both valid.
        let last = max_nodes(100) - 1;
        assert_eq!(pod_cidr(100, last), "10.255.255.0/24");
        assert!(node_ip(last) < Ipv4Addr::new(10, 100, 0, 0));
    }

    #[test]
    fn pods_get_unique_addresses_per_node_and_keep_them() {
        let mut ips = PodIps::new(100);
        assert_eq!(ips.assign("a", 0), Some(Ipv4Addr::new(10, 100, 0, 1)));
        assert_eq!(ips.assign("b", 0), Some(Ipv4Addr::new(10, 100, 0, 2)));
        assert_eq!(ips.assign("c", 3), Some(Ipv4Addr::new(10, 100, 3, 1)));
        // Asking again gives the same address.
        assert_eq!(ips.assign("a", 0), Some(Ipv4Addr::new(10, 100, 0, 1)));
        assert_eq!(ips.len(), 3);
        // A freed address is reused, lowest first.
        ips.release("a");
        assert_eq!(ips.assign("d", 0), Some(Ipv4Addr::new(10, 100, 0, 1)));
        ips.release("unknown");
        assert_eq!(ips.len(), 3);
    }

    #[test]
    fn a_full_node_has_no_address_left() {
        let mut ips = PodIps::new(100);
        for i in 0..POD_ADDRESSES_PER_NODE {
            assert!(ips.assign(&format!("p{i}"), 9).is_some());
        }
        assert_eq!(ips.assign("one-too-many", 9), None);
        assert_eq!(
            ips.assign("other-node", 10),
            Some(Ipv4Addr::new(10, 100, 10, 1))
        );
        ips.release("p100");
        assert_eq!(
            ips.assign("one-too-many", 9),
            Some(Ipv4Addr::new(10, 100, 9, 101))
        );
    }

    #[test]
    fn recorded_addresses_are_not_handed_out_again() {
        let mut ips = PodIps::new(100);
        ips.record("old", 2, Ipv4Addr::new(10, 100, 2, 1));
        // Outside the node's range, or taken: ignored.
        ips.record("elsewhere", 2, Ipv4Addr::new(10, 100, 3, 5));
        ips.record("twin", 2, Ipv4Addr::new(10, 100, 2, 1));
        ips.record("network", 2, Ipv4Addr::new(10, 100, 2, 0));
        assert_eq!(ips.len(), 1);
        assert_eq!(ips.assign("new", 2), Some(Ipv4Addr::new(10, 100, 2, 2)));
        assert_eq!(ips.assign("old", 2), Some(Ipv4Addr::new(10, 100, 2, 1)));
        ips.release("old");
        assert_eq!(ips.assign("newer", 2), Some(Ipv4Addr::new(10, 100, 2, 1)));
    }
}
